# SPDX-License-Identifier: MIT
"""KvpoolStorage's v2 calls (hybrid models' host pool groups), on the CPU.

SGLang's own pieces: MHATokenToKVPoolHost for the KV pool and for the SWA
sidecar (what hybrid_pool_assembler builds for SWA models: a second MHA host
pool of the SWA layers' geometry), PoolName / PoolTransfer / PoolHitPolicy
as SGLang's HybridCacheController passes them, and its page hashes.  Bytes
are compared per pool through test_storage's views of each kv_buffer.
"""
import torch

from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

from test_storage import Case, fill, host_pool, indices, keys, page_bytes

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
        with self.assertRaisesRegex(ValueError, "hit policy"):
            st.batch_set_v1(ks, indices(kv, [0, 1]))
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
