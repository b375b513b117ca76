# SPDX-License-Identifier: MIT
"""kvrt.sglang.KvpoolStorage against SGLang's real classes, on the CPU.

SGLang's own pieces: the dynamic backend factory (StorageBackendFactory),
HiCacheStorageConfig, the MHA host memory pool (MHATokenToKVPoolHost, built
on CPU tensors with pin_memory=False: there is no CUDA here), and its page
hash (get_hash_str) for the keys.  The pages are checked through a view
of the host pool's kv_buffer written here from SGLang's documented tensor
shapes, independent of the backend's stride arithmetic.
"""
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import torch

import kvrt
from kvrt.sglang import CONFIG_KEYS, KvpoolStorage
from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str

LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
PAGE = 4
_tenants = itertools.count()


def host_pool(layout="layer_first", layers=2, heads=2, head_dim=8, dtype=torch.bfloat16,
              page=PAGE, device_tokens=32, cls=MHATokenToKVPoolHost):
    """SGLang's MHA host pool on CPU tensors (device pool stand-in: CPU K/V)."""
    def bufs():
        return tuple(torch.zeros(device_tokens + page, heads, head_dim, dtype=dtype)
                     for _ in range(layers))
    k, v = bufs(), bufs()
    ptrs = [torch.tensor([t.data_ptr() for t in x], dtype=torch.uint64) for x in (k, v)]
    info = MHABufferInfo(
        buffers=KVBuffers(k=k, v=v, k_data_ptrs=ptrs[0], v_data_ptrs=ptrs[1],
                          layout=KVBufferLayout.NHD),
        page_size=page, head_num=heads, head_dim=head_dim, v_head_dim=head_dim,
        dtype=dtype, device=torch.device("cpu"))
    return cls(info, host_to_device_ratio=2.0, host_size=0, page_size=page,
                                layout=layout, pin_memory=False, device="cpu",
                                device_capacity_tokens=device_tokens, start_layer=0,
                                end_layer=layers - 1)


def canonical(host, page):
    """Page ``page`` of the host pool as (2, layers, tokens, heads, dim), a view."""
    b, ps = host.kv_buffer, host.page_size
    t0 = page * ps
    if host.layout == "layer_first":          # [2][layer][token][head][dim]
        return b[:, :, t0:t0 + ps]
    if host.layout == "page_first":           # [2][token][layer][head][dim]
        return b[:, t0:t0 + ps].permute(0, 2, 1, 3, 4)
    if host.layout == "page_first_direct":    # [2][page][layer][slot][head][dim]
        return b[:, page]
    if host.layout == "page_head":            # [2][page][head][slot][layer][dim]
        return b[:, page].permute(0, 3, 2, 1, 4)
    raise AssertionError(host.layout)


def page_bytes(host, page):
    return canonical(host, page).contiguous().flatten().view(torch.uint8).clone()


def fill(host, page, seed):
    """Random bits in one page (any dtype: written as bytes)."""
    view = canonical(host, page)
    g = torch.Generator().manual_seed(seed)
    nbytes = view.numel() * view.element_size()
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    view.copy_(raw.view(host.dtype).reshape(view.shape))
    return raw


def indices(host, pages):
    ps = host.page_size
    return torch.tensor([p * ps + t for p in pages for t in range(ps)], dtype=torch.int64)


def config(model="org/Tiny-Model", tp_rank=0, tp_size=1, **extra):
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
        is_page_first_layout=False, model_name=model,
        extra_config=dict({"backend_name": "kvpool", "module_path": "kvrt.sglang",
                           "class_name": "KvpoolStorage", "interface_v1": 1,
                           "kvpool_backend": "embedded"}, **extra))


def keys(n, seed=0, page=PAGE):
    """n chained page hashes, as SGLang computes them."""
    return get_hash_str(list(range(seed * 1000, seed * 1000 + n * page)), None, page_size=page)


class Case(unittest.TestCase):
    def setUp(self):
        # a tenant per test: a space of its own in the process's pool
        self.tenant = f"t{next(_tenants)}-{os.getpid()}"

    def opened(self, cfg):
        """A KvpoolStorage of cfg, closed at the test's end."""
        st = KvpoolStorage(cfg)
        self.addCleanup(st.close)
        return st

    def refusal(self, st, host):
        """The message of the ValueError st.register_mem_pool_host(host) raises."""
        with self.assertRaises(ValueError) as cm:
            st.register_mem_pool_host(host)
        return str(cm.exception)

    def storage(self, host, cfg=None, **extra):
        extra.setdefault("kvpool_tenant", self.tenant)
        extra.setdefault("kvpool_quota_bytes", 1 << 20)
        st = StorageBackendFactory.create_backend("dynamic", cfg or config(**extra), host)
        st.register_mem_pool_host(host)
        self.addCleanup(st.close)
        return st


class TestFactory(Case):
    def test_dynamic_backend_loads_the_class(self):
        host = host_pool()
        st = self.storage(host)
        self.assertIs(type(st), KvpoolStorage)
        self.assertRegex(st.space_name, r"^sgl-Tiny-Model-[0-9a-f]{16}$")
        self.assertLessEqual(len(st.space_name), 63)

    def test_import_kvrt_does_not_import_sglang(self):
        code = ("import sys, kvrt; bad = [m for m in sys.modules if m.startswith"
                "(('sglang', 'kvrt.sglang', 'torch'))]; assert not bad, bad")
        subprocess.run([sys.executable, "-c", code], check=True)

    def test_config_keys_are_documented(self):
        doc = os.environ.get("KVRT_PYTHON_RST")
        if not doc:
            self.skipTest("KVRT_PYTHON_RST not set (check.sh sets it)")
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        for k in CONFIG_KEYS:
            self.assertIn(k, text)


class TestRoundTrip(Case):
    def roundtrip(self, layout, dtype):
        host = host_pool(layout, dtype=dtype)
        st = self.storage(host)
        ks = keys(3)
        want = [fill(host, p, 10 + p) for p in (1, 2, 3)]
        self.assertEqual(st.batch_set_v1(ks, indices(host, [1, 2, 3])), [True] * 3)
        self.assertEqual(st.batch_exists(ks), 3)
        # into other pages, in another order of host pages
        for p in (4, 5, 6):
            canonical(host, p).zero_()
        self.assertEqual(st.batch_get_v1(ks, indices(host, [6, 4, 5])), [True] * 3)
        for got, w in zip((6, 4, 5), want):
            self.assertTrue(torch.equal(page_bytes(host, got), w), (layout, got))

    def test_every_layout_bf16(self):
        for layout in LAYOUTS:
            with self.subTest(layout=layout):
                self.roundtrip(layout, torch.bfloat16)

    def test_f32_and_fp8(self):
        self.roundtrip("page_first", torch.float32)
        self.roundtrip("layer_first", torch.float8_e4m3fn)

    def test_host_layouts_share_pages(self):
        # blocks are block-major whatever the host layout: same geometry, one space
        a_host, b_host = host_pool("layer_first"), host_pool("page_head")
        a, b = self.storage(a_host), self.storage(b_host)
        self.assertEqual(a.space_name, b.space_name)
        ks = keys(2, seed=3)
        want = [fill(a_host, p, p) for p in (0, 1)]
        a.batch_set_v1(ks, indices(a_host, [0, 1]))
        self.assertEqual(b.batch_get_v1(ks, indices(b_host, [2, 3])), [True, True])
        self.assertTrue(torch.equal(page_bytes(b_host, 2), want[0]))
        self.assertTrue(torch.equal(page_bytes(b_host, 3), want[1]))

    def test_single_page_forms_match_sglang_flat_pages(self):
        # without interface_v1 SGLang moves flat pages (get_data_page /
        # set_from_flat_data_page); they must be the same stored page
        for layout in LAYOUTS:
            with self.subTest(layout=layout):
                host = host_pool(layout)
                st = self.storage(host)
                k1, k2 = keys(2, seed=7)
                w1, w2 = fill(host, 1, 1), fill(host, 2, 2)
                self.assertTrue(st.set(k1, host.get_data_page(1 * PAGE, flat=True)))
                self.assertTrue(st.batch_set([k2], [host.get_data_page(2 * PAGE, flat=True)]))
                self.assertTrue(st.exists(k1) and st.exists(k2))
                self.assertEqual(st.batch_get_v1([k1, k2], indices(host, [3, 4])), [True] * 2)
                self.assertTrue(torch.equal(page_bytes(host, 3), w1))
                self.assertTrue(torch.equal(page_bytes(host, 4), w2))
                flat = st.get(k2, host.get_dummy_flat_data_page())
                self.assertIsNotNone(flat)
                host.set_from_flat_data_page(5 * PAGE, flat)
                self.assertTrue(torch.equal(page_bytes(host, 5), w2))
                missing = keys(1, seed=99)[0]
                self.assertIsNone(st.get(missing))
                self.assertEqual(st.batch_get([k1, missing])[1], None)


class TestPrefix(Case):
    def test_exists_is_the_longest_prefix_with_a_gap(self):
        host = host_pool()
        st = self.storage(host)
        ks = keys(5, seed=1)
        for p in range(5):
            fill(host, p, p)
        st.batch_set_v1(ks[:3], indices(host, [0, 1, 2]))
        st.batch_set_v1(ks[4:], indices(host, [4]))        # page 3 is the gap
        self.assertEqual(st.batch_exists(ks), 3)
        self.assertEqual(st.batch_exists(ks[3:]), 0)
        self.assertEqual(st.batch_exists(ks[4:]), 1)
        self.assertTrue(st.exists(ks[4]))
        self.assertFalse(st.exists(ks[3]))
        self.assertEqual(st.batch_exists([]), 0)
        # batch_exists keeps no reference: the participant holds none
        self.assertEqual(st.space_stats().my_refs, 0)

    def test_get_loads_the_stored_prefix_only(self):
        host = host_pool()
        st = self.storage(host)
        ks = keys(4, seed=2)
        want = [fill(host, p, 20 + p) for p in (0, 1)]
        st.batch_set_v1(ks[:2], indices(host, [0, 1]))
        sentinel = [fill(host, p, 40 + p) for p in (4, 5, 6, 7)]
        self.assertEqual(st.batch_get_v1(ks, indices(host, [4, 5, 6, 7])),
                         [True, True, False, False])
        self.assertTrue(torch.equal(page_bytes(host, 4), want[0]))
        self.assertTrue(torch.equal(page_bytes(host, 5), want[1]))
        self.assertTrue(torch.equal(page_bytes(host, 6), sentinel[2]))  # untouched
        self.assertTrue(torch.equal(page_bytes(host, 7), sentinel[3]))
        self.assertEqual(st.space_stats().my_refs, 0)

    def test_set_of_a_stored_page_keeps_one_copy(self):
        host = host_pool()
        st = self.storage(host)
        ks = keys(2, seed=4)
        fill(host, 0, 1)
        fill(host, 1, 2)
        st.batch_set_v1(ks, indices(host, [0, 1]))
        inserts = st.space_stats().inserts
        self.assertEqual(st.batch_set_v1(ks, indices(host, [0, 1])), [True, True])
        self.assertEqual(st.space_stats().inserts, inserts)
        self.assertEqual(st.space_stats().published_blocks
                         + st.space_stats().cached_blocks, 2)


class TestEviction(Case):
    def test_small_quota_evicts_the_oldest(self):
        host = host_pool(device_tokens=64)
        st0 = self.storage(host)
        # a space of 4 blocks
        bb = st0._need_space().info().block_bytes
        st0.close()
        st = self.storage(host, kvpool_quota_bytes=4 * bb, kvpool_tenant=self.tenant + "q")
        chains = [keys(2, seed=10 + i) for i in range(4)]
        for i, ks in enumerate(chains):
            fill(host, 2 * i, i)
            fill(host, 2 * i + 1, 100 + i)
            self.assertEqual(st.batch_set_v1(ks, indices(host, [2 * i, 2 * i + 1])),
                             [True, True])
        # 8 pages through a 4-block quota: the two oldest chains are gone
        self.assertEqual(st.batch_exists(chains[0]), 0)
        self.assertEqual(st.batch_exists(chains[1]), 0)
        self.assertEqual(st.batch_exists(chains[2]), 2)
        self.assertEqual(st.batch_exists(chains[3]), 2)
        self.assertEqual(st.space_stats().evictions[kvrt.EvictCause.QUOTA], 4)
        # a batch larger than the quota stores a prefix and says so
        big = keys(6, seed=30)
        res = st.batch_set_v1(big, indices(host, range(6)))
        n = sum(res)
        self.assertGreaterEqual(n, 1)
        self.assertLessEqual(n, 4)
        self.assertEqual(res, [True] * n + [False] * (6 - n))
        self.assertEqual(st.batch_exists(big), n)


class TestSharing(Case):
    def test_two_instances_share_one_space(self):
        # two engines ("processes": two participants of the space, each
        # with its own host pool); the second finds and loads the first's pages
        a_host, b_host = host_pool(), host_pool()
        a, b = self.storage(a_host), self.storage(b_host)
        self.assertEqual(a.space_name, b.space_name)
        ks = keys(3, seed=5)
        want = [fill(a_host, p, 60 + p) for p in range(3)]
        a.batch_set_v1(ks, indices(a_host, range(3)))
        self.assertEqual(b.batch_exists(ks), 3)
        self.assertEqual(b.batch_get_v1(ks, indices(b_host, [7, 8, 9])), [True] * 3)
        for p, w in zip((7, 8, 9), want):
            self.assertTrue(torch.equal(page_bytes(b_host, p), w))
        # the first leaves; its pages stay for the second
        a.close()
        self.assertEqual(b.batch_exists(ks), 3)

    def test_incompatible_geometries_never_meet(self):
        base = self.storage(host_pool())
        others = [self.storage(host_pool(head_dim=16)),
                  self.storage(host_pool(dtype=torch.float16)),
                  self.storage(host_pool(layers=3)),
                  self.storage(host_pool(page=8)),
                  self.storage(host_pool(), cfg=config(tp_rank=1, tp_size=2,
                                                       kvpool_tenant=self.tenant)),
                  self.storage(host_pool(), cfg=config(model="org/Other",
                                                       kvpool_tenant=self.tenant)),
                  self.storage(host_pool(), kvpool_tenant=self.tenant + "x")]
        names = {base.space_name} | {o.space_name for o in others}
        self.assertEqual(len(names), 1 + len(others))
        ks = keys(1, seed=6)
        fill(base.mem_pool_host, 0, 6)
        base.batch_set_v1(ks, indices(base.mem_pool_host, [0]))
        for o in others:
            if o.mem_pool_host.page_size == PAGE:
                self.assertEqual(o.batch_exists(ks), 0, o.space_name)


class TestTiers(Case):
    """kvpool_tier_ssd: an instance that restarts (its embedded space gone
    with the last handle) finds its pages in the SSD tier and loads them."""

    def tier_dir(self):
        d = tempfile.mkdtemp(prefix="kvrt-sgl-tier.",
                             dir=os.environ.get("KVRT_TIER_DIR") or "/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def restart(self, **tiers):
        ks = keys(3, seed=9)
        a_host = host_pool()
        a = self.storage(a_host, **tiers)
        want = [fill(a_host, p, 90 + p) for p in range(3)]
        self.assertEqual(a.batch_set_v1(ks, indices(a_host, range(3))), [True] * 3)
        a.close()  # the last handle: the space goes; a write-back tier drains first
        b_host = host_pool()
        b = self.storage(b_host, **tiers)
        n = b.batch_exists(ks)
        # asking moved nothing: no block allocated or published in the pool
        st = b.space_stats()
        self.assertEqual((st.allocs, st.inserts, st.my_refs), (0, 0, 0))
        self.assertEqual(b.batch_exists(ks[1:]), n - 1 if n else 0)
        got = b.batch_get_v1(ks, indices(b_host, [5, 6, 7]))
        self.assertEqual(b.space_stats().inserts, sum(got))   # the get brought them up
        for p, w in zip((5, 6, 7)[:n], want):
            self.assertTrue(torch.equal(page_bytes(b_host, p), w), p)
        return n, got

    def test_a_restart_loads_from_the_ssd_tier(self):
        for wb in (True, False):
            with self.subTest(write_back=wb):
                self.tenant = f"{self.tenant}-{int(wb)}"
                n, got = self.restart(kvpool_tier_ssd=self.tier_dir(),
                                      kvpool_tier_write_back=wb)
                self.assertEqual((n, got), (3, [True] * 3))

    def test_without_a_tier_a_restart_finds_nothing(self):
        self.assertEqual(self.restart(), (0, [False] * 3))

    def test_a_library_before_0_9_answers_by_reading_up(self):
        """libkvrt 0.8 has no kvrt_tier_contains: batch_exists falls back to a
        lookup that reads the tier's pages up and drops their references.
        The loaded library is 0.9, so its flag is set as an 0.8 one would
        set it; tier_contains then raises, so the new path cannot be taken."""
        from kvrt import _lib
        old = "libkvrt 0.8.0 is loaded; kvrt_tier_contains needs 0.9"
        ks = keys(3, seed=11)
        a_host = host_pool()
        tier = dict(kvpool_tier_ssd=self.tier_dir(), kvpool_tier_write_back=False)
        a = self.storage(a_host, **tier)
        self.assertEqual(a.batch_set_v1(ks, indices(a_host, range(3))), [True] * 3)
        a.close()
        b = self.storage(host_pool(), **tier)
        with mock.patch.object(_lib, "tier_contains_missing", old):
            self.assertEqual(kvrt.library_missing("tier_contains"), old)
            self.assertEqual(b.batch_exists(ks), 3)
        st = b.space_stats()
        # the old answer moved the pages up, and holds no reference to them
        self.assertEqual((st.inserts, st.my_refs), (3, 0))
        self.assertEqual(b.batch_exists(ks), 3)   # 0.9 again: the pool has them now

    def test_tier_config_errors(self):
        host = host_pool()
        with self.assertRaisesRegex(ValueError, "pass kvpool_tier_ssd"):
            self.storage(host, kvpool_tier_ssd_bytes=1 << 20)
        with self.assertRaisesRegex(TypeError, "kvpool_tier_write_back: pass true or false"):
            self.storage(host, kvpool_tier_ssd="/var/tmp", kvpool_tier_write_back=2)
        with self.assertRaisesRegex(kvrt.KvrtError, "kvpool_tier_ssd '/proc/kvpool-nope'"):
            self.storage(host, kvpool_tier_ssd="/proc/kvpool-nope")


class TestRedisTier(TestTiers):
    """kvpool_tier_redis against three real redis-server masters
    (selftests/redis/cluster.sh, named by check.sh): batch_exists after a
    restart answers with EXISTS, no value fetched, and the get loads them."""

    @classmethod
    def setUpClass(cls):
        script = os.environ.get("KVRT_REDIS_CLUSTER_SH")
        if not script:
            raise unittest.SkipTest("KVRT_REDIS_CLUSTER_SH not set (check.sh sets it)")
        cls.dir = tempfile.mkdtemp(prefix="kvrt-sgl-redis.")
        r = subprocess.run(["bash", script, "start", cls.dir], capture_output=True, text=True,
                           timeout=120, check=False)
        if r.returncode:
            subprocess.run(["bash", script, "stop", cls.dir], check=False, timeout=60)
            shutil.rmtree(cls.dir, True)
            raise AssertionError(f"cluster.sh start failed: {r.stderr.strip()}")
        cls.script, cls.seeds = script, r.stdout.strip().splitlines()[-1]
        cls.env = {k: os.environ.get(k) for k in ("KVRT_REDIS_USER", "KVRT_REDIS_PASSWORD")}
        os.environ.update(KVRT_REDIS_USER="alice", KVRT_REDIS_PASSWORD="alice-pw")

    @classmethod
    def tearDownClass(cls):
        for k, v in cls.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        subprocess.run(["bash", cls.script, "stop", cls.dir], check=False, timeout=60)
        shutil.rmtree(cls.dir, True)

    def test_a_restart_loads_from_the_redis_tier(self):
        n, got = self.restart(kvpool_tier_redis=self.seeds,
                              kvpool_tier_redis_prefix=f"tenA:{self.tenant}:",
                              kvpool_tier_write_back=False)
        self.assertEqual((n, got), (3, [True] * 3))

    # the SSD cases run once, in TestTiers
    test_a_restart_loads_from_the_ssd_tier = None
    test_without_a_tier_a_restart_finds_nothing = None
    test_tier_config_errors = None
    test_a_library_before_0_9_answers_by_reading_up = None


class TestHostile(Case):
    def test_bad_keys(self):
        host = host_pool()
        st = self.storage(host)
        good = keys(2, seed=8)
        for bad, exc in ((good[0][:-2], ValueError), ("zz" * 32, ValueError),
                         (good[0][:30] + "  " + good[0][32:], ValueError),
                         (bytes.fromhex(good[0]), TypeError), (7, TypeError)):
            with self.subTest(bad=bad):
                with self.assertRaises(exc) as cm:
                    st.batch_set_v1([good[0], bad], indices(host, [0, 1]))
                self.assertIn("keys[1]", str(cm.exception))
                self.assertRaises(exc, st.batch_exists, [bad])
                self.assertRaises(exc, st.batch_get_v1, [bad], indices(host, [0]))
        self.assertRaises(TypeError, st.batch_exists, good[0])   # one str, not a list
        self.assertEqual(st.space_stats().inserts, 0)           # nothing stored
        self.assertEqual(st.batch_exists(good), 0)

    def test_bad_host_indices(self):
        host = host_pool()
        st = self.storage(host)
        ks = keys(2, seed=9)
        cases = [
            (indices(host, [0]), ValueError, "per key"),                   # too few
            (indices(host, [0, 1])[1:], ValueError, "per key"),
            (indices(host, [0, 1]) + 1, ValueError, "page-aligned"),        # misaligned
            (indices(host, [0, host.page_num]), ValueError, "below"),       # past the pool
            (indices(host, [0, 1]).flip(0), ValueError, "page-aligned"),
            (indices(host, [0, 1]).float(), TypeError, "integer"),
            ([0, 1, 2, 3, 4, 5, 6, 7], TypeError, "tensor"),
        ]
        for idx, exc, words in cases:
            with self.subTest(words=words):
                with self.assertRaises(exc) as cm:
                    st.batch_set_v1(ks, idx)
                self.assertIn(words, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            st.batch_get_v1(ks, indices(host, [3, 3]))
        self.assertIn("twice", str(cm.exception))
        self.assertEqual(st.space_stats().inserts, 0)

    def test_bad_page_tensors(self):
        host = host_pool()
        st = self.storage(host)
        k = keys(1, seed=11)[0]
        with self.assertRaises(ValueError) as cm:
            st.set(k, torch.zeros(10, dtype=torch.bfloat16))
        self.assertIn("a page is", str(cm.exception))
        self.assertRaises(TypeError, st.set, k, b"\0" * 64)
        self.assertFalse(st.exists(k))

    def test_wrong_geometry_under_the_space_name(self):
        # a space of this name with other blocks: refused, nothing joined
        host = host_pool()
        keeper = self.storage(host, kvpool_tenant=self.tenant + "k")  # holds the pool
        st = self.storage(host)
        name = st.space_name
        st.close()
        pool = keeper._pool  # the process's pool connection, which the backend shares
        try:
            pool.destroy_space(name)
        except kvrt.NotFoundError:
            pass
        holder = pool.create_space(name, block_bytes=1 << 20, quota_bytes=4 << 20)
        self.addCleanup(holder.close)
        with self.assertRaises(ValueError) as cm:
            self.storage(host)
        self.assertIn("geometry", str(cm.exception))
        self.assertEqual(holder.info().block_bytes, 1 << 20)

    def test_bad_config(self):
        with self.assertRaises(ValueError) as cm:
            KvpoolStorage(config(kvpool_quota=5))
        self.assertIn("kvpool_quota_bytes", str(cm.exception))       # lists the right keys
        self.assertRaises(TypeError, KvpoolStorage, config(kvpool_quota_bytes="1G"))
        self.assertRaises(ValueError, KvpoolStorage, config(kvpool_quota_bytes=0))
        self.assertRaises(ValueError, KvpoolStorage, config(kvpool_space_prefix="a/b"))
        self.assertRaises(ValueError, KvpoolStorage, config(kvpool_backend="nfs"))
        self.assertRaises(TypeError, KvpoolStorage, {"tp_rank": 0})

    def test_calls_before_register_and_after_close(self):
        st = KvpoolStorage(config(kvpool_tenant=self.tenant))
        with self.assertRaises(ValueError) as cm:
            st.batch_exists(keys(1))
        self.assertIn("register_mem_pool_host", str(cm.exception))
        st.close()
        st.close()
        msg = self.refusal(st, host_pool())
        self.assertIn("closed", msg)

    def test_host_pool_with_bytes_outside_kv_buffer(self):
        # a host pool that sizes its tokens as MXFP8's does: payload plus
        # per-page scales kept in tensors of their own
        class ScaledHost(MHATokenToKVPoolHost):
            def get_size_per_token(self):
                return super().get_size_per_token() + 2 * self.layer_num

        st = self.opened(config(kvpool_tenant=self.tenant))
        msg = self.refusal(st, host_pool(cls=ScaledHost))
        self.assertIn("outside kv_buffer", msg)
        self.assertIn("ScaledHost: 132 bytes per token, kv_buffer holds 128", msg)
        self.assertRaises(ValueError, st.batch_exists, keys(1))   # nothing registered

    def test_mxfp8_host_pool_is_refused(self):
        from sglang.srt.mem_cache.pool_host.mha_mxfp8 import MHATokenToKVPoolMXFP8Host
        # Its constructor needs the CUDA/HIP write-back kernel (mha_mxfp8.py:103):
        # an instance of the class holding a CPU page_first pool's state and
        # the scale tensors the constructor would add.
        plain = host_pool("page_first", dtype=torch.float8_e4m3fn)
        mx = MHATokenToKVPoolMXFP8Host.__new__(MHATokenToKVPoolMXFP8Host)
        mx.__dict__.update(plain.__dict__)
        mx.k_scale_host = torch.zeros(plain.page_num, plain.layer_num, 4, dtype=torch.uint8)
        mx.v_scale_host = torch.zeros(plain.page_num, plain.layer_num, 4, dtype=torch.uint8)
        st = self.opened(config(kvpool_tenant=self.tenant))
        msg = self.refusal(st, mx)
        self.assertIn("MHATokenToKVPoolMXFP8Host", msg)
        self.assertIn("k_scale_host, v_scale_host", msg)
        # the same pool without the scales is taken
        st.register_mem_pool_host(plain)

    def test_unsupported_host_layout(self):
        try:
            host = host_pool("page_unified")
        except Exception as e:  # noqa: BLE001 - SGLang may refuse it on CPU
            self.skipTest(f"SGLang builds no page_unified pool on CPU: {e}")
        st = self.opened(config(kvpool_tenant=self.tenant))
        msg = self.refusal(st, host)
        self.assertIn("page_unified", msg)


class TestClear(Case):
    """clear() (SGLang's /clear_hicache_storage_backend): this instance hits
    nothing stored before it, and no other engine loses a page."""

    def test_clear_hides_this_instances_pages_only(self):
        a_host, b_host = host_pool(), host_pool()
        a, b = self.storage(a_host), self.storage(b_host)
        ks = keys(3, seed=13)
        want = [fill(a_host, p, 130 + p) for p in range(3)]
        self.assertEqual(a.batch_set_v1(ks, indices(a_host, range(3))), [True] * 3)
        self.assertEqual(a.batch_exists(ks), 3)
        self.assertIs(a.clear(), True)
        self.assertEqual(a.batch_exists(ks), 0)
        self.assertFalse(a.exists(ks[0]))
        sentinel = [fill(a_host, p, 150 + p) for p in (4, 5, 6)]
        self.assertEqual(a.batch_get_v1(ks, indices(a_host, [4, 5, 6])), [False] * 3)
        for p, w in zip((4, 5, 6), sentinel):
            self.assertTrue(torch.equal(page_bytes(a_host, p), w))   # nothing loaded
        # the other engine of the space keeps the pages, nothing was evicted
        self.assertEqual(b.batch_exists(ks), 3)
        self.assertEqual(b.batch_get_v1(ks, indices(b_host, [7, 8, 9])), [True] * 3)
        for p, w in zip((7, 8, 9), want):
            self.assertTrue(torch.equal(page_bytes(b_host, p), w))
        self.assertEqual(sum(a.space_stats().evictions), 0)
        # what the cleared instance stores next it hits again (and b does not)
        new = [fill(a_host, p, 170 + p) for p in (0, 1)]
        self.assertEqual(a.batch_set_v1(ks[:2], indices(a_host, [0, 1])), [True] * 2)
        self.assertEqual(a.batch_exists(ks), 2)
        self.assertEqual(a.batch_get_v1(ks[:2], indices(a_host, [4, 5])), [True] * 2)
        self.assertTrue(torch.equal(page_bytes(a_host, 4), new[0]))
        self.assertTrue(torch.equal(page_bytes(a_host, 5), new[1]))
        self.assertEqual(b.batch_get_v1(ks[:1], indices(b_host, [7])), [True])
        self.assertTrue(torch.equal(page_bytes(b_host, 7), want[0]))
        # a second clear fences those as well
        a.clear()
        self.assertEqual(a.batch_exists(ks), 0)

    def test_clear_reaches_the_tiers(self):
        d = tempfile.mkdtemp(prefix="kvrt-sgl-clear.",
                             dir=os.environ.get("KVRT_TIER_DIR") or "/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        host = host_pool()
        st = self.storage(host, kvpool_tier_ssd=d, kvpool_tier_write_back=False)
        ks = keys(2, seed=14)
        st.batch_set_v1(ks, indices(host, [0, 1]))
        st.clear()
        self.assertEqual(st.batch_exists(ks), 0)
        self.assertEqual(st.batch_get_v1(ks, indices(host, [2, 3])), [False, False])

    def test_clear_of_a_closed_instance_fails(self):
        st = self.storage(host_pool())
        st.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            st.clear()


class TestRevision(Case):
    """The weights' revision is part of the space identity."""

    def model_dir(self):
        d = tempfile.mkdtemp(prefix="kvrt-sgl-model.")
        self.addCleanup(shutil.rmtree, d, True)
        for name in ("config.json", "model.safetensors"):
            with open(os.path.join(d, name), "wb") as f:
                f.write(b"x" * 16)
            os.utime(os.path.join(d, name), ns=(10**18, 10**18))
        return d

    def name(self, model, **extra):
        st = self.storage(host_pool(), cfg=config(model=model, kvpool_tenant=self.tenant,
                                                  **extra))
        name = st.space_name
        st.close()
        return name

    def test_weights_replaced_in_place_get_another_space(self):
        d = self.model_dir()
        before = self.name(d)
        self.assertEqual(self.name(d), before)
        os.utime(os.path.join(d, "model.safetensors"), ns=(10**18, 10**18 + 1))
        self.assertNotEqual(self.name(d), before)

    def test_kvpool_model_revision_decides(self):
        d = self.model_dir()
        pinned = self.name(d, kvpool_model_revision="r1")
        os.utime(os.path.join(d, "model.safetensors"), ns=(10**18, 10**18 + 1))
        self.assertEqual(self.name(d, kvpool_model_revision="r1"), pinned)
        self.assertNotEqual(self.name(d, kvpool_model_revision="r2"), pinned)
        self.assertNotEqual(self.name(d, kvpool_model_revision=""), pinned)
        with self.assertRaisesRegex(TypeError, "kvpool_model_revision"):
            KvpoolStorage(config(kvpool_model_revision=5))

    def test_revision_module_is_engine_free(self):
        code = ("import sys, kvrt.revision; bad = [m for m in sys.modules if m.startswith"
                "(('sglang', 'vllm', 'torch'))]; assert not bad, bad")
        subprocess.run([sys.executable, "-c", code], check=True)


class TestStats(Case):
    def test_get_stats_counts_pages(self):
        host = host_pool()
        st = self.storage(host)
        ks = keys(3, seed=12)
        st.batch_set_v1(ks, indices(host, range(3)))
        st.batch_get_v1(ks[:2], indices(host, [5, 6]))
        m = st.get_stats()
        self.assertEqual((m.backup_pgs, m.prefetch_pgs), ([3], [2]))
        m = st.get_stats()
        self.assertEqual((m.backup_pgs, m.prefetch_pgs), ([], []))


if __name__ == "__main__":
    unittest.main()
