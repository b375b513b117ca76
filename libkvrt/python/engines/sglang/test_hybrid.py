# SPDX-License-Identifier: MIT
"""KvpoolStorage's v2 calls (hybrid models' host pool groups), on the CPU.

SGLang's own pieces: MHATokenToKVPoolHost for the KV pool and for the SWA
sidecar (what hybrid_pool_assembler builds for SWA models: a second MHA host
pool of the SWA layers' geometry), PoolName / PoolTransfer / PoolHitPolicy
as SGLang's HybridCacheController passes them, and its page hashes.  Bytes
are compared per pool through test_storage's views of each kv_buffer.

TestController drives SGLang's HybridCacheController (CPU device pools, a
host pool group of KV + SWA, gloo of one rank): its attach registers the
pools, its backup thread calls batch_set_v2, its prefetch thread
batch_exists_v2 and its I/O thread batch_get_v2.  Not built here: a
MambaPoolHost (its conv and temporal states are separate tensors,
pool_host/mamba.py:246-340 returns a list of them, not one K/V buffer); kvpool
refuses the kind by name, which is what the refusal tests check.
"""
import threading

import torch
import torch.distributed as dist

from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_pool_entry
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host import HostPoolGroup
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.utils import get_storage_hash_str

import test_controller
from test_storage import PAGE, Case, fill, host_pool, indices, keys, page_bytes

# the controller's gloo group of one rank and parallel widths, as test_controller's
setUpModule, tearDownModule = test_controller.setUpModule, test_controller.tearDownModule

N = 4


def engine(case, swa_layout="page_first"):
    """One engine's KV host pool and SWA host pool (1 layer, head_dim 4), v2-registered."""
    kv = host_pool("layer_first")
    swa = host_pool(swa_layout, layers=1, head_dim=4)
    st = case.storage(kv)
    st.register_mem_host_pool_v2(kv, PoolName.KV)
    st.register_mem_host_pool_v2(swa, PoolName.SWA)
    st.on_host_pools_registered()
    return st, kv, swa


def swa_transfer(host, pages, ks, **kw):
    return PoolTransfer(name=PoolName.SWA, host_indices=indices(host, pages), keys=ks, **kw)


class TestSwaSidecar(Case):
    def store(self, st, kv, swa, ks, swa_pages=range(N)):
        for p in range(N):
            fill(kv, p, 10 + p)
            fill(swa, p, 20 + p)
        self.assertEqual(st.batch_set_v1(ks, indices(kv, range(N))), [True] * N)
        sp = list(swa_pages)
        got = st.batch_set_v2([swa_transfer(swa, sp, [ks[p] for p in sp])])
        self.assertEqual(got, {"swa": [True] * len(sp)})

    def test_store_in_one_engine_load_in_another(self):
        ks = keys(N)
        a, kv_a, swa_a = engine(self)
        self.store(a, kv_a, swa_a, ks)
        # another engine, another SWA host layout: same pages
        b, kv_b, swa_b = engine(self, swa_layout="layer_first")
        self.assertNotEqual(a.space_name, b._sides["swa"].space.name)
        res = b.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks[-1:],
                                                  hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        self.assertEqual(res.kv_hit_pages, N)
        self.assertEqual(res.restorable_prefix_pages, list(range(1, N + 1)))
        dst = [3, 2, 1, 0]
        self.assertEqual(b.batch_get_v1(ks, indices(kv_b, dst)), [True] * N)
        self.assertEqual(b.batch_get_v2([swa_transfer(swa_b, dst, ks)]), {"swa": [True] * N})
        for p, q in zip(range(N), dst):
            self.assertTrue(torch.equal(page_bytes(kv_b, q), page_bytes(kv_a, p)), p)
            self.assertTrue(torch.equal(page_bytes(swa_b, q), page_bytes(swa_a, p)), p)
        # the SWA pages are their own geometry, not the KV pages
        self.assertNotEqual(page_bytes(swa_b, 0).numel(), page_bytes(kv_b, 0).numel())

    def test_a_missing_sidecar_page_is_a_miss(self):
        ks = keys(N, seed=1)
        a, kv_a, swa_a = engine(self)
        self.store(a, kv_a, swa_a, ks, swa_pages=[0, 1, 3])
        b, kv_b, swa_b = engine(self)
        every = b.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks)])
        self.assertEqual((every.kv_hit_pages, every.extra_pool_hit_pages),
                         (2, {"kv": N, "swa": 2}))
        # a window of one page: prefixes 1, 2 and 4 end on a stored SWA page
        last = b.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks[-1:],
                                                   hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        self.assertEqual((last.kv_hit_pages, last.restorable_prefix_pages), (N, [1, 2, 4]))
        # one get of both pools: page 2 lacks its SWA part, so it misses in both
        got = b.batch_get_v2([PoolTransfer(name=PoolName.KV, host_indices=indices(kv_b,
                                                                                   range(N)),
                                           keys=ks),
                              swa_transfer(swa_b, range(N), ks)])
        self.assertEqual(got, {"kv": [True, True, False, False],
                               "swa": [True, True, False, False]})
        # and exists moved nothing: the SWA space holds the three pages it was given
        self.assertEqual(b._present(b._hashes(ks), b._sides["swa"]), [True, True, False, True])

    def test_sidecar_with_kv_missing_is_no_hit(self):
        ks = keys(N, seed=2)
        a, kv_a, swa_a = engine(self)
        for p in range(N):
            fill(swa_a, p, p)
        a.batch_set_v2([swa_transfer(swa_a, range(N), ks)])
        res = a.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks)])
        self.assertEqual((res.kv_hit_pages, res.extra_pool_hit_pages), (0, {}))


class TestRefusals(Case):
    def test_pools_kvpool_cannot_copy_whole_are_refused(self):
        kv = host_pool()
        st = self.storage(kv)
        for name in (PoolName.MAMBA, PoolName.INDEXER, PoolName.DEEPSEEK_V4_C4,
                     PoolName.DRAFT):
            with self.assertRaisesRegex(ValueError, f"pool '{name.value}'.*--hicache-"
                                                    "storage-backend file"):
                st.register_mem_host_pool_v2(host_pool(), name)

        class Paged:  # a host pool without one K/V kv_buffer (as DeepSeek V4's)
            page_size = 4
        with self.assertRaisesRegex(ValueError, "pool 'swa' \\(Paged\\).*MHATokenToKVPoolHost"):
            st.register_mem_host_pool_v2(Paged(), PoolName.SWA)
        with self.assertRaisesRegex(ValueError, "pool kv: not the host pool"):
            st.register_mem_host_pool_v2(host_pool(), PoolName.KV)
        self.assertEqual(st._sides, {})

    def test_unregistered_pool_and_bad_transfers(self):
        kv = host_pool()
        st = self.storage(kv)
        ks = keys(2)
        with self.assertRaisesRegex(ValueError, "pool 'swa': not registered"):
            st.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks)])
        with self.assertRaisesRegex(ValueError, "pool 'swa': not registered"):
            st.batch_get_v2([swa_transfer(kv, [0, 1], ks)])
        st.register_mem_host_pool_v2(host_pool(layers=1), PoolName.SWA)
        with self.assertRaisesRegex(ValueError, "pass keys and host_indices"):
            st.batch_set_v2([PoolTransfer(name=PoolName.SWA, keys=ks)])
        st.batch_set_v1(ks, indices(kv, [0, 1]))  # a KV prefix, so the policy is read
        with self.assertRaisesRegex(ValueError, "hit policy"):
            st.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks,
                                                 hit_policy=PoolHitPolicy.BLOCK_GROUPS)])

    def test_register_after_close(self):
        st = self.storage(host_pool())
        st.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            st.register_mem_host_pool_v2(host_pool(layers=1), PoolName.SWA)


class TestSpaces(Case):
    def test_a_sidecar_of_the_kv_geometry_has_a_space_of_its_own(self):
        kv, swa = host_pool(), host_pool()
        st = self.storage(kv)
        st.register_mem_host_pool_v2(swa, PoolName.SWA)
        self.assertNotEqual(st._sides["swa"].space.name, st.space_name)
        ks = keys(N, seed=3)
        for p in range(N):
            fill(kv, p, p)
        st.batch_set_v1(ks, indices(kv, range(N)))
        res = st.batch_exists_v2(ks, [PoolTransfer(name=PoolName.SWA, keys=ks)])
        self.assertEqual((res.kv_hit_pages, res.extra_pool_hit_pages), (0, {"kv": N}))
        self.assertEqual(st.batch_get_v2([swa_transfer(swa, range(N), ks)]),
                         {"swa": [False] * N})


WAIT = 20


class SwaEngine:
    """An engine of a hybrid SWA model: KV and SWA device and host pools on the
    CPU, SGLang's HybridCacheController with kvpool as L3."""

    def __init__(self, case, layout="layer_first", extra_entry=None):
        def device(layers, dim):
            return MHATokenToKVPool(size=64, page_size=PAGE, dtype=torch.bfloat16, head_num=2,
                                    head_dim=dim, layer_num=layers, device="cpu",
                                    enable_memory_saver=False, start_layer=0,
                                    end_layer=layers - 1, enable_alt_stream=False)

        def host(dev, layers):
            return MHATokenToKVPoolHost(
                dev.get_device_pool_infos()[0].buffer_info, host_to_device_ratio=2.0,
                host_size=0, page_size=PAGE, layout=layout, pin_memory=False, device="cpu",
                device_capacity_tokens=64, start_layer=0, end_layer=layers - 1)
        kv_dev, swa_dev = device(2, 8), device(1, 4)
        self.kv, self.swa = host(kv_dev, 2), host(swa_dev, 1)
        alloc = PagedTokenToKVPoolAllocator(64, PAGE, torch.bfloat16, "cpu", kv_dev,
                                            need_sort=False)
        entries = [build_pool_entry(name=PoolName.KV, host_pool=self.kv, device_pool=kv_dev,
                                    layer_mapping={0: 0, 1: 1}, transfer_layer_id_max=2,
                                    is_anchor=True),
                   build_pool_entry(name=PoolName.SWA, host_pool=self.swa,
                                    device_pool=swa_dev, layer_mapping={0: 0},
                                    transfer_layer_id_max=2)]
        if extra_entry is not None:
            entries.append(build_pool_entry(name=extra_entry, host_pool=host(swa_dev, 1),
                                            device_pool=swa_dev, layer_mapping={0: 0},
                                            transfer_layer_id_max=2))
        extra = {"backend_name": "kvpool", "module_path": "kvrt.sglang",
                 "class_name": "KvpoolStorage", "interface_v1": 1,
                 "kvpool_backend": "embedded", "kvpool_tenant": case.tenant,
                 "kvpool_quota_bytes": 1 << 20}
        self.cc = HybridCacheController(
            alloc, HostPoolGroup(entries), PAGE, dist.group.WORLD, threading.Event(),
            transfer_layer_id_max=2, write_policy="write_through", io_backend="direct",
            storage_backend="dynamic", model_name="org/Tiny-Model",
            storage_backend_extra_config=extra)
        case.addCleanup(self.cc.detach_storage_backend)

    def backup(self, toks, swa_pages):
        """Fill and back up len(toks)/PAGE pages; SWA only for the first swa_pages."""
        n = len(toks) // PAGE
        kvi, swi = self.kv.alloc(n * PAGE), self.swa.alloc(n * PAGE)
        want = []
        for i in range(n):
            fill(self.kv, int(kvi[i * PAGE]) // PAGE, i)
            fill(self.swa, int(swi[i * PAGE]) // PAGE, 100 + i)
            want.append((page_bytes(self.kv, int(kvi[i * PAGE]) // PAGE),
                         page_bytes(self.swa, int(swi[i * PAGE]) // PAGE)))
        hashes = get_storage_hash_str(toks, None, page_size=PAGE)
        side = PoolTransfer(name=PoolName.SWA, host_indices=swi[:swa_pages * PAGE],
                            keys=hashes[:swa_pages], hit_policy=PoolHitPolicy.TRAILING_PAGES)
        op_id = self.cc.write_storage(kvi, toks, hash_value=hashes, extra_pools=[side])
        op = self.cc.ack_backup_queue.get(timeout=WAIT)
        assert op.id == op_id
        return op, want

    def prefetch(self, rid, toks, window):
        """Query (batch_exists_v2), then load the hit (batch_get_v1 + batch_get_v2)."""
        side = PoolTransfer(name=PoolName.SWA, keys=[""] * window,
                            hit_policy=PoolHitPolicy.TRAILING_PAGES)
        op = self.cc.prefetch(CacheRequestHandle(rid, 0), toks, extra_pools=[side])
        assert self.cc.prefetch_hit_queue.get(timeout=WAIT) is op
        if not op.storage_hit_count:
            return op, side, {}
        op.host_indices = self.cc.alloc_prefetch_host_buffers(op, op.storage_hit_count)
        side.host_indices = self.swa.alloc(len(side.keys) * PAGE)
        self.cc.prefetch_buffer.put(op)
        hits = {}
        while True:
            ack = self.cc.ack_prefetch_queue.get(timeout=WAIT)
            if ack.completed_req:
                return op, side, hits
            hits.update({k: v for k, v in (ack.pool_hits or {}).items() if v})


class TestController(Case):
    def test_backup_in_one_engine_prefetch_in_another(self):
        writer, reader = SwaEngine(self), SwaEngine(self, "page_first")
        toks = list(range(3 * PAGE))
        op, want = writer.backup(toks, swa_pages=3)
        self.assertEqual(op.completed_tokens, 3 * PAGE)
        self.assertEqual(op.pool_storage_result.extra_pool_hit_pages, {"swa": 3})
        op, side, hits = reader.prefetch("r", toks, window=2)
        self.assertEqual(op.storage_hit_count, 3 * PAGE)
        self.assertEqual(hits, {"swa": 2})
        pages = [int(i) // PAGE for i in op.host_indices[::PAGE]]
        for p, (kv, _) in zip(pages, want):
            self.assertTrue(torch.equal(page_bytes(reader.kv, p), kv), p)
        # the window: the last two pages' SWA parts
        swa_pages = [int(i) // PAGE for i in side.host_indices[::PAGE]]
        for p, (_, swa) in zip(swa_pages, want[1:]):
            self.assertTrue(torch.equal(page_bytes(reader.swa, p), swa), p)

    def test_a_page_without_its_swa_part_is_not_a_hit(self):
        writer, reader = SwaEngine(self), SwaEngine(self)
        toks = list(range(5000, 5000 + 3 * PAGE))
        writer.backup(toks, swa_pages=2)
        # window 2: prefix 3 needs pages 1 and 2's SWA parts, page 2 has none
        op, side, hits = reader.prefetch("r", toks, window=2)
        self.assertEqual(op.storage_hit_count, 2 * PAGE)
        self.assertEqual(hits, {"swa": 2})

    def test_attach_refuses_a_pool_kvpool_cannot_keep(self):
        with self.assertRaisesRegex(ValueError, "pool 'mamba'.*--hicache-storage-backend"):
            SwaEngine(self, extra_entry=PoolName.MAMBA)
