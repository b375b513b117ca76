# SPDX-License-Identifier: MIT
"""Pools, spaces, blocks, the prefix cache, statistics, residency."""
import os
import unittest

import numpy as np

import kvrt
from kvrt import _handles

from .util import BLOCK, PoolCase, name


class TestLibrary(unittest.TestCase):
    def test_version_and_where(self):
        self.assertRegex(kvrt.library_version(), r"^0\.\d+\.\d+$")
        self.assertTrue(kvrt.LIBRARY)

    def test_library_missing(self):
        # the tree's build has every feature; an old library: see test_tiers
        for f in ("sequences", "tiers", "write_back", "tier_keys", "tier_contains", "gpu_limits"):
            self.assertIsNone(kvrt.library_missing(f), f)
        with self.assertRaisesRegex(ValueError, "feature 'gpu': pass one of"):
            kvrt.library_missing("gpu")

    def test_package_version_is_the_library_it_wraps(self):
        # the tests run against the tree's build: one number for both
        from kvrt import _lib
        major_minor = kvrt.__version__.rsplit(".", 1)[0]
        self.assertEqual(major_minor, kvrt.library_version().rsplit(".", 1)[0])
        newest = max(v for k, v in vars(_lib).items() if k.endswith("_VERSION_NUMBER")
                     and k != "MIN_VERSION_NUMBER")
        self.assertEqual(major_minor, f"0.{newest // 100}")

    def test_struct_sizes_match_the_header(self):
        from kvrt import _lib
        # sizeof() of each struct as gcc lays out kvrt.h on x86-64
        sizes = {_lib.LayoutC: 88, _lib.OpenOptsC: 80, _lib.PoolInfoC: 64,
                 _lib.SpaceOptsC: 80, _lib.SpaceInfoC: 96, _lib.EventC: 64,
                 _lib.SpaceStatsC: 176, _lib.AttnParamsC: 32, _lib.MemInfoC: 576,
                 _lib.BlockTableC: 32, _lib.KvCacheC: 32, _lib.HashInfoC: 72, _lib.BlockArrayC: 24,
                 _lib.SeqsOptsC: 56, _lib.SeqsStatsC: 72, _lib.TierSsdOptsC: 64,
                 _lib.TierRedisOptsC: 80, _lib.TierStatsC: 152}
        for cls, n in sizes.items():
            self.assertEqual(__import__("ctypes").sizeof(cls), n, cls.__name__)


class TestLibraryLookup(unittest.TestCase):
    def run_import(self, env):
        import subprocess
        import sys
        e = dict(os.environ)
        e.update(env)
        return subprocess.run([sys.executable, "-c", "import kvrt; print(kvrt.LIBRARY)"],
                              env=e, capture_output=True, text=True, timeout=60)

    def test_kvrt_library_wins_and_a_wrong_one_fails(self):
        from kvrt import _lib
        lib = os.environ.get("KVRT_LIBRARY") or _lib._in_tree_candidate()
        r = self.run_import({"KVRT_LIBRARY": lib})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("$KVRT_LIBRARY=" + lib, r.stdout)
        r = self.run_import({"KVRT_LIBRARY": "/nonexistent/libkvrt.so.0"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError: kvrt: $KVRT_LIBRARY=/nonexistent/libkvrt.so.0 does not load",
                      r.stderr)


class TestPool(PoolCase):
    def test_backend_and_info(self):
        self.assertEqual(self.pool.backend, kvrt.Backend.EMBEDDED)
        self.assertTrue(self.pool.backend_info.startswith("embedded"))
        info = self.pool.info()
        self.assertEqual(info.backend, kvrt.Backend.EMBEDDED)
        self.assertIn(kvrt.Feature.PREFIX, info.features)
        self.assertEqual(info.page_size, os.sysconf("SC_PAGE_SIZE"))
        self.assertEqual(info.max_batch, kvrt.MAX_BATCH)

    def test_pool_cap(self):
        with kvrt.Pool(kvrt.Backend.EMBEDDED, pool_bytes=4 << 20) as p:
            self.assertEqual(p.info().pool_bytes, 4 << 20)

    def test_env_backend(self):
        old = os.environ.get("KVRT_BACKEND")
        os.environ["KVRT_BACKEND"] = "embedded"
        try:
            with kvrt.Pool() as p:
                self.assertEqual(p.backend, kvrt.Backend.EMBEDDED)
        finally:
            if old is None:
                del os.environ["KVRT_BACKEND"]
            else:
                os.environ["KVRT_BACKEND"] = old

    def test_closed_pool_refuses(self):
        p = kvrt.Pool("embedded")
        p.close()
        p.close()
        self.assertTrue(p.closed)
        with self.assertRaisesRegex(ValueError, "pool is closed"):
            p.info()
        with self.assertRaises(ValueError):
            p.create_space("x", block_bytes=BLOCK, quota_bytes=BLOCK)

    def test_close_closes_spaces(self):
        before = dict(_handles.counters)
        with kvrt.Pool("embedded") as p:
            sp = p.create_space("a", block_bytes=BLOCK, quota_bytes=BLOCK * 4)
            sp.alloc(1)
        self.assertTrue(sp.closed)
        with self.assertRaisesRegex(ValueError, "is closed"):
            sp.info()
        self.assertEqual(_handles.counters["spaces_closed"] - before["spaces_closed"], 1)
        self.assertEqual(_handles.counters["pools_closed"] - before["pools_closed"], 1)


class TestSpaces(PoolCase):
    def test_create_then_join(self):
        n = name()
        with self.pool.create_space(n, block_bytes=BLOCK, quota_bytes=8 * BLOCK,
                                    mode=0o640) as a:
            ia = a.info()
            self.assertTrue(ia.created)
            self.assertEqual((ia.block_bytes, ia.nr_blocks, ia.map_bytes),
                             (BLOCK, 8, 8 * BLOCK))
            self.assertEqual(ia.uid, os.geteuid())
            self.assertEqual(ia.mode & 0o777, 0o640)
            with self.pool.join_space(n) as b:
                ib = b.info()
                self.assertFalse(ib.created)
                self.assertEqual(ib.space_id, ia.space_id)
                # created=True on an existing name joins it
                with self.pool.create_space(n, block_bytes=BLOCK, quota_bytes=BLOCK) as c:
                    self.assertFalse(c.info().created)
            # join with the right block_bytes, and as the owner through FOREIGN
            with self.pool.join_space(n, block_bytes=BLOCK, expect_uid=os.geteuid()) as d:
                self.assertEqual(d.info().space_id, ia.space_id)

    def test_blocks_are_shared_between_participants(self):
        n = name()
        a = self.space()
        b = self.pool.join_space(a.name)
        self.addCleanup(b.close)
        ids = a.alloc(2)
        a.block_view(int(ids[1]))[:4] = [1, 2, 3, 4]
        self.assertEqual(list(b.block_view(int(ids[1]))[:4]), [1, 2, 3, 4])
        self.assertEqual(b.info().owned_blocks, 2)
        self.assertEqual(b.info().my_blocks, 0)
        del n

    def test_persist_and_destroy(self):
        n = name()
        a = self.pool.create_space(n, block_bytes=BLOCK, quota_bytes=4 * BLOCK, persist=True)
        ids = a.alloc(1)
        h = kvrt.hash_block([1, 2, 3])
        a.publish(ids, [h])
        a.close()
        with self.pool.join_space(n) as b:  # outlived its last close
            found = b.lookup([h])
            self.assertEqual(list(found), list(ids))
            b.release(found)
        self.pool.destroy_space(n)
        with self.assertRaises(kvrt.NotFoundError):
            self.pool.join_space(n)

    def test_alloc_free(self):
        sp = self.space(blocks=8)
        ids = sp.alloc(5)
        self.assertEqual(ids.dtype, np.uint32)
        self.assertEqual(len(set(ids.tolist())), 5)
        info = sp.info()
        self.assertEqual((info.my_blocks, info.owned_blocks), (5, 5))
        sp.free(ids[:2])
        sp.free([int(i) for i in ids[2:]])
        self.assertEqual(sp.info().my_blocks, 0)
        self.assertEqual(sp.info().free_blocks, sp.info().backed_blocks)

    def test_mem_info(self):
        sp = self.space()
        sp.alloc(1)
        mi = sp.mem_info()
        self.assertGreater(mi.backed_bytes, 0)
        self.assertIn("backed", mi.summary)
        self.assertEqual(mi.hugetlb_bytes, 0)  # no_hugetlb


class TestPrefixCache(PoolCase):
    def test_lookup_one(self):
        sp = self.space(blocks=8)
        self.assertIs(sp.pool, self.pool)
        hashes = kvrt.hash_prompt(list(range(32)), 16)
        ids = sp.alloc(2)
        sp.release(sp.publish(ids, hashes).ids)
        self.assertEqual(sp.stats().my_refs, 0)
        self.assertEqual(sp.lookup_one(bytes(hashes[1])), (int(ids[1]), 0))
        self.assertEqual(sp.stats().my_refs, 1)  # a reader reference, as lookup()
        sp.release([int(ids[1])])
        self.assertIsNone(sp.lookup_one(b"\x07" * 32))
        self.assertIsNone(sp.lookup_one(b"\x07" * 32, tiers=True))  # no tier: a miss
        for bad in (b"short", "x" * 32, None):
            with self.assertRaisesRegex(TypeError, "hash: pass 32 bytes"):
                sp.lookup_one(bad)
        self.assertEqual(sp.stats().my_refs, 0)

    def test_publish_lookup_release_stats(self):
        sp = self.space(blocks=8)
        hashes = kvrt.hash_prompt(list(range(64)), 16)
        ids = sp.alloc(4)
        res = sp.publish(ids, hashes, priorities=[10, 20, 30, 40])
        self.assertEqual(res.dedups, 0)
        self.assertEqual(list(res.ids), list(ids))
        self.assertFalse(res.dedup.any())
        st = sp.stats()
        self.assertEqual((st.inserts, st.published_blocks, st.my_refs), (4, 4, 4))

        # a dedup: another block under hashes[0]
        other = self.pool.join_space(sp.name)
        self.addCleanup(other.close)
        mine = other.alloc(1)
        r2 = other.publish(mine, hashes[:1])
        self.assertEqual(r2.dedups, 1)
        self.assertTrue(r2.dedup[0])
        self.assertEqual(int(r2.ids[0]), int(ids[0]))

        # longest prefix: the fifth hash is absent
        extra = kvrt.hash_block([9], parent=hashes[-1])
        found = other.lookup(hashes + [extra])
        self.assertEqual(list(found), list(ids))
        ids2, dev = other.lookup_with_devices(hashes[:2])
        self.assertEqual(list(ids2), list(ids[:2]))
        self.assertEqual(list(dev), [0, 0])
        st = other.stats()
        self.assertEqual((st.hits, st.misses), (6, 1))
        other.release(found)
        other.release(ids2)
        other.release(r2.ids)
        sp.release(res.ids)
        st = sp.stats()
        self.assertEqual((st.published_blocks, st.cached_blocks, st.readers), (0, 4, 0))
        # still found when cached
        again = sp.lookup(np.frombuffer(b"".join(hashes), np.uint8).reshape(-1, 32))
        self.assertEqual(list(again), list(ids))
        sp.release(again)

    def test_hashes_forms(self):
        sp = self.space()
        hs = kvrt.hash_prompt(list(range(32)), 16)
        ids = sp.alloc(2)
        sp.publish(ids, b"".join(hs))
        arr = kvrt.hash_prompt_array(list(range(32)), 16)
        self.assertEqual(list(sp.lookup(arr)), list(ids))
        self.assertEqual(list(sp.lookup(arr[0])), list(ids[:1]))
        self.assertEqual(len(sp.lookup([bytes(32)])), 0)

    def test_eviction_under_quota(self):
        sp = self.space(blocks=4)
        hs = kvrt.hash_prompt(list(range(64)), 16)
        ids = sp.alloc(4)
        sp.publish(ids, hs)
        sp.release(ids)
        sp.alloc(2)  # evicts the two cached blocks released longest ago
        st = sp.stats()
        self.assertEqual(st.evictions[kvrt.EvictCause.QUOTA], 2)
        self.assertEqual(st.cached_blocks, 2)

    def test_residency(self):
        sp = self.space()
        ids = sp.alloc(2)
        uuid = bytes(range(16))
        slot = sp.residency_add(uuid, [(int(ids[0]), 7), (int(ids[1]), 8)])
        self.assertEqual(slot, 0)
        hs = kvrt.hash_prompt(list(range(32)), 16)
        sp.publish(ids, hs)
        got, dev = sp.lookup_with_devices(hs)
        self.assertEqual(list(dev), [1, 1])
        sp.residency_del(uuid, [int(ids[0])])
        self.assertEqual(list(sp.lookup_with_devices(hs)[1]), [0, 1])
        sp.residency_clear(uuid)
        self.assertEqual(list(sp.lookup_with_devices(hs)[1]), [0, 0])
        self.assertEqual(sp.residency_add(uuid, []), 0)


if __name__ == "__main__":
    unittest.main()
