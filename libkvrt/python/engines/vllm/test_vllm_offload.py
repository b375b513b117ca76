# SPDX-License-Identifier: MIT
"""kvpool as vLLM's offloading backend: vLLM's real Scheduler, on CPU.

Each test makes its own space (a tenant of its own) in this process's
embedded pool; two Engines with the same settings meet in one space, as
two vLLM processes do through the module.
"""
from __future__ import annotations

import itertools
import os
import random
import shutil
import tempfile
import unittest

import numpy as np
import torch

import vllm_util as vu  # sets HF_HUB_OFFLINE before vLLM is imported
import kvrt
from kvrt.vllm import KvpoolOffloadingSpec, offload_hash
from kvrt.vllm.spec import KvpoolSettings

_tenants = itertools.count()


def tenant() -> str:
    return f"t{next(_tenants)}"


def cached(space: kvrt.Space) -> int:
    """Blocks in the space's prefix cache, with readers or without."""
    st = space.stats()
    return st.published_blocks + st.cached_blocks


def prompt(n_tokens: int, seed: int) -> list:
    rnd = random.Random(seed)
    return [rnd.randrange(1, 1000) for _ in range(n_tokens)]


def run_with_tier_reads(e: vu.Engine, req, max_steps: int = 40):
    """Engine.run, waiting after each step for the tier reads it queued: with
    tiers, a pool miss is RETRY until the manager's thread has read the key."""
    e.sched.add_request(req)
    for _ in range(max_steps):
        e.step()
        if not e.manager.wait_tier_reads(10):
            raise AssertionError("the tier reads did not end in 10 s")
        held = e.manager.held_blocks()
        if not e.sched.has_unfinished_requests() and not held["pending"] and not held["loads"]:
            return req
    raise AssertionError(f"request {req.request_id} not done in {max_steps} steps")


class SchedulerTest(unittest.TestCase):
    """Store, hit, partial hit, eviction and sharing through vLLM's Scheduler."""

    def setUp(self) -> None:
        self.engines: list = []

    def tearDown(self) -> None:
        for e in self.engines:
            e.shutdown()

    def engine(self, **kw) -> vu.Engine:
        seed = kw.pop("seed", len(self.engines))
        e = vu.Engine(vu.kvpool_extra(**kw), seed=seed)
        self.engines.append(e)
        return e

    def assert_no_refs(self, e: vu.Engine) -> None:
        self.assertEqual(e.manager.held_blocks(), {"pins": 0, "loads": 0, "pending": 0})
        st = e.manager.space.stats()
        self.assertEqual(st.my_refs, 0, st)
        self.assertEqual(st.readers, 0, st)
        self.assertEqual(st.published_blocks, 0, st)  # no block has a reader left

    def test_spec_is_loaded_from_config(self) -> None:
        e = self.engine(kvpool_tenant=tenant())
        self.assertIsInstance(e.spec, KvpoolOffloadingSpec)
        self.assertEqual(type(e.manager).__name__, "KvpoolOffloadingManager")
        # 2 layers x (K, V) x 16 tokens x 2 heads x 16 dims x 2 bytes, page-rounded
        self.assertEqual(e.spec.worker_bytes, vu.LAYERS * vu.PAGE)
        self.assertEqual(e.manager.space.info().block_bytes, 4096)

    def test_store_then_second_scheduler_hits(self) -> None:
        t = tenant()
        a = self.engine(kvpool_tenant=t)
        p = prompt(3 * vu.BLOCK + 5, 1)
        a.run(vu.make_request(p))
        st = a.manager.space.stats()
        self.assertEqual(st.cached_blocks, 3)  # the three full prompt blocks
        self.assertEqual(len(a.stored_blocks), 3)
        self.assert_no_refs(a)
        # A second scheduler, own GPU cache, same space: it loads, not recomputes.
        b = self.engine(kvpool_tenant=t)
        self.assertIs(b.manager.space, a.manager.space)  # one space per process
        req = vu.make_request(p)
        b.run(req)
        self.assertEqual(len(b.loaded_blocks), 3)
        self.assertEqual(b.external_tokens(req), 3 * vu.BLOCK)
        self.assertEqual(sorted(x for x, _ in b.loaded_blocks),
                         sorted(x for x, _ in a.stored_blocks))
        # bytes: what B's tensors got is what A's tensors held, byte for byte
        a_src = dict(a.stored_blocks)
        for pool_id, dst in b.loaded_blocks:
            src = a_src[pool_id]
            for la, lb in zip(a.tensors, b.tensors):
                self.assertTrue(torch.equal(la[src], lb[dst]), (pool_id, src, dst))
        self.assertFalse(torch.equal(a.tensors[0], b.tensors[0]))  # seeds differ
        self.assert_no_refs(a)
        self.assert_no_refs(b)
        self.assertEqual(cached(a.manager.space), 3)  # nothing stored twice

    def test_partial_hit(self) -> None:
        t = tenant()
        a = self.engine(kvpool_tenant=t)
        p = prompt(4 * vu.BLOCK, 2)
        a.run(vu.make_request(p + [7]))
        self.assertEqual(cached(a.manager.space), 4)
        b = self.engine(kvpool_tenant=t)
        q = p[:2 * vu.BLOCK] + prompt(2 * vu.BLOCK, 3) + [7]
        req = vu.make_request(q)
        b.run(req)
        self.assertEqual(len(b.loaded_blocks), 2)  # the common prefix only
        self.assertEqual(b.external_tokens(req), 2 * vu.BLOCK)
        self.assertEqual(len(b.stored_blocks), 2)  # and it stores its own tail
        self.assertEqual(cached(a.manager.space), 6)
        self.assert_no_refs(b)

    def test_miss_before_store(self) -> None:
        e = self.engine(kvpool_tenant=tenant())
        req = vu.make_request(prompt(2 * vu.BLOCK + 1, 4))
        e.run(req)
        self.assertEqual(e.loaded_blocks, [])
        self.assertEqual(e.external_tokens(req), 0)
        self.assertEqual(len(e.stored_blocks), 2)

    def test_eviction_under_quota(self) -> None:
        t = tenant()
        a = self.engine(kvpool_tenant=t, kvpool_quota_blocks=4)
        x, y = prompt(4 * vu.BLOCK, 5), prompt(4 * vu.BLOCK, 6)
        a.run(vu.make_request(x + [1]))
        self.assertEqual(cached(a.manager.space), 4)
        a.run(vu.make_request(y + [1]))  # kvpool makes room: x's blocks go
        st = a.manager.space.stats()
        self.assertEqual(st.evictions[kvrt.EvictCause.QUOTA], 4, st)
        self.assertEqual(cached(a.manager.space), 4)
        self.assertEqual(len(a.stored_blocks), 8)
        self.assert_no_refs(a)
        b = self.engine(kvpool_tenant=t, kvpool_quota_blocks=4)
        ry, rx = vu.make_request(y + [2]), vu.make_request(x + [2])
        b.run(ry)
        self.assertEqual(b.external_tokens(ry), 4 * vu.BLOCK)  # y stayed: a hit
        b.run(rx)
        self.assertEqual(b.external_tokens(rx), 0)  # x was evicted: a miss
        self.assertEqual(len(b.loaded_blocks), 4)
        self.assert_no_refs(b)

    def test_leaving_frees(self) -> None:
        t = tenant()
        a = self.engine(kvpool_tenant=t)
        a.run(vu.make_request(prompt(2 * vu.BLOCK + 1, 8)))
        sp = a.manager.space
        self.assertEqual(cached(sp), 2)
        a.shutdown()
        self.engines.remove(a)
        self.assertTrue(sp.closed)  # the last user of the space left: it is closed

    def test_different_geometry_gets_another_space(self) -> None:
        t = tenant()
        a = self.engine(kvpool_tenant=t)
        c = vu.Engine(vu.kvpool_extra(kvpool_tenant=t), layers=4)
        self.engines.append(c)
        self.assertNotEqual(a.spec.space_name, c.spec.space_name)
        other_tenant = self.engine(kvpool_tenant=tenant())
        self.assertNotEqual(a.spec.space_name, other_tenant.spec.space_name)

    def test_mismatched_geometry_in_named_space(self) -> None:
        name = f"vllm-named-{tenant()}"
        self.engine(kvpool_space_name=name)
        with self.assertRaisesRegex(ValueError, "geometry"):
            vu.make_scheduler(vu.kvpool_extra(kvpool_space_name=name), layers=4)

    def test_space_name_rule(self) -> None:
        e = self.engine(kvpool_tenant="tenant.A-1", kvpool_space_prefix="prefix_16chars__")
        n = e.spec.space_name
        self.assertLessEqual(len(n), 63)
        self.assertRegex(n, r"^prefix_16chars__-tenant\.A-1-[0-9a-f]{24}$")


class TierTest(unittest.TestCase):
    """kvpool_tier_ssd: an engine that restarts (a new, empty space: the
    embedded pool died with the last handle) loads its prefix back from the
    SSD tier instead of recomputing it, written through or back."""

    def tier_dir(self) -> str:
        d = tempfile.mkdtemp(prefix="kvrt-vllm-tier.",
                             dir=os.environ.get("KVRT_TIER_DIR") or "/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def restart(self, **tiers) -> tuple:
        """Engine A stores a prompt and shuts down; engine B, same settings,
        runs it again.  A's stored blocks, B's loaded blocks, B's external tokens."""
        extra = vu.kvpool_extra(kvpool_tenant=tenant(), **tiers)
        p = prompt(3 * vu.BLOCK + 5, 11)
        a = vu.Engine(extra, seed=1)
        run_with_tier_reads(a, vu.make_request(p))
        stored, a_tensors = list(a.stored_blocks), a.tensors
        a.shutdown()  # the last handle: the space goes, the tier is drained and closed
        b = vu.Engine(extra, seed=2)
        try:
            self.assertEqual(cached(b.manager.space), 0)  # nothing left in the pool
            req = vu.make_request(p)
            run_with_tier_reads(b, req)
            loaded = list(b.loaded_blocks)
            # bytes: block i that B loaded is what A's tensors held for block i
            for (_, src), (_, dst) in zip(stored, loaded):
                for la, lb in zip(a_tensors, b.tensors):
                    self.assertTrue(torch.equal(la[src], lb[dst]), (src, dst))
            return stored, loaded, b.external_tokens(req)
        finally:
            b.shutdown()

    def test_restarted_engine_loads_from_the_ssd_tier(self) -> None:
        for wb in (True, False):
            with self.subTest(write_back=wb):
                stored, loaded, ext = self.restart(kvpool_tier_ssd=self.tier_dir(),
                                                   kvpool_tier_write_back=wb)
                self.assertEqual(len(stored), 3)
                self.assertEqual(len(loaded), 3)
                self.assertEqual(ext, 3 * vu.BLOCK)

    def test_without_a_tier_the_restart_recomputes(self) -> None:
        stored, loaded, ext = self.restart()
        self.assertEqual((len(stored), len(loaded), ext), (3, 0, 0))

    def test_tier_errors_name_the_key(self) -> None:
        with self.assertRaisesRegex(ValueError, "pass kvpool_tier_ssd"):
            vu.make_scheduler(vu.kvpool_extra(kvpool_tier_ssd_bytes=1 << 20))
        with self.assertRaisesRegex(ValueError, "pass kvpool_tier_redis"):
            vu.make_scheduler(vu.kvpool_extra(kvpool_tier_redis_prefix="tenA:"))
        with self.assertRaisesRegex(TypeError, "kvpool_tier_write_back: pass true or false"):
            vu.make_scheduler(vu.kvpool_extra(kvpool_tier_ssd="/var/tmp",
                                              kvpool_tier_write_back="maybe"))
        with self.assertRaisesRegex(kvrt.KvrtError, "kvpool_tier_ssd '/proc/kvpool-nope'"):
            vu.make_scheduler(vu.kvpool_extra(kvpool_tenant=tenant(),
                                              kvpool_tier_ssd="/proc/kvpool-nope"))


class BadConfigTest(unittest.TestCase):
    """Bad kvpool keys: a clear error naming the key, before anything is made."""

    def check(self, extra: dict, exc: type, pattern: str) -> None:
        with self.assertRaisesRegex(exc, pattern):
            vu.make_scheduler(vu.kvpool_extra(**extra))

    def test_backend(self) -> None:
        self.check({"kvpool_backend": "gpu"}, ValueError, "kvpool_backend.*'auto'")

    def test_quota_missing(self) -> None:
        extra = vu.kvpool_extra()
        del extra["kvpool_quota_blocks"]
        with self.assertRaisesRegex(ValueError, "kvpool_quota_bytes"):
            vu.make_scheduler(extra)

    def test_quota_both(self) -> None:
        self.check({"kvpool_quota_bytes": 1 << 20}, ValueError, "not both")

    def test_quota_below_block(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant(), kvpool_quota_bytes=100)
        del extra["kvpool_quota_blocks"]
        with self.assertRaisesRegex(ValueError, "less than one block"):
            vu.make_scheduler(extra)

    def test_unknown_key(self) -> None:
        self.check({"kvpool_qouta_bytes": 1}, ValueError, "unknown key.*kvpool_qouta_bytes")

    def test_priority_range(self) -> None:
        self.check({"kvpool_priority": 101}, ValueError, "kvpool_priority")

    def test_priority_type(self) -> None:
        self.check({"kvpool_priority": 1.5}, TypeError, "kvpool_priority")

    def test_tenant_chars(self) -> None:
        self.check({"kvpool_tenant": "a/b"}, ValueError, "kvpool_tenant")

    def test_space_name_chars(self) -> None:
        self.check({"kvpool_space_name": "x" * 64}, ValueError, "kvpool_space_name")

    def test_chunks(self) -> None:
        self.check({"blocks_per_chunk": 2}, ValueError, "blocks_per_chunk")


class WorkerTest(unittest.TestCase):
    """The worker's copies on host tensors, against the space's bytes."""

    def setUp(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant())
        self.sched = vu.make_scheduler(extra, num_blocks=32)
        self.spec = self.sched.connector.connector_scheduler.manager.spec
        self.manager = self.sched.connector.connector_scheduler.manager
        self.space = self.manager.space

    def tearDown(self) -> None:
        vu.shutdown_scheduler(self.sched)

    def _spec(self, ids):
        from vllm.v1.kv_offload.base import GPULoadStoreSpec
        return GPULoadStoreSpec(list(ids), group_sizes=[len(ids)], block_indices=[0])

    def test_store_load_bytes(self) -> None:
        from kvrt.vllm import KvpoolLoadStoreSpec
        caches, tensors = vu.host_kv_caches(32, seed=11)
        w = self.spec.get_worker(caches)
        self.assertEqual(len(w._plans), 1)  # both layers in one copy call
        ids = self.space.alloc(5)
        src = [3, 9, 0, 31, 17]
        self.assertTrue(w.submit_store(1, self._spec(src), KvpoolLoadStoreSpec(ids)))
        done = w.get_finished()
        self.assertEqual([(r.job_id, r.success, r.transfer_size) for r in done],
                         [(1, True, 5 * vu.LAYERS * vu.PAGE)])
        # the pool holds rank 0's slice: layer pages one after the other
        for pid, b in zip(ids.tolist(), src):
            raw = self.space.block_view(pid)
            want = np.concatenate([t[b].numpy().view(np.uint8) for t in tensors])
            self.assertTrue(np.array_equal(raw[:want.size], want), (pid, b))
        # load into another cache, other blocks: byte for byte
        caches2, tensors2 = vu.host_kv_caches(32, seed=12)
        before = [t.clone() for t in tensors2]
        w2 = type(w)(self.space, caches2, rank=0, worker_bytes=self.spec.worker_bytes)
        dst = [30, 1, 2, 8, 4]
        self.assertTrue(w2.submit_load(2, KvpoolLoadStoreSpec(ids), self._spec(dst)))
        self.assertEqual([r.job_id for r in w2.get_finished()], [2])
        for s, d in zip(src, dst):
            for t1, t2 in zip(tensors, tensors2):
                self.assertTrue(torch.equal(t1[s], t2[d]))
        untouched = [b for b in range(32) if b not in dst]
        for t2, t0 in zip(tensors2, before):
            self.assertTrue(torch.equal(t2[untouched], t0[untouched]))
        self.space.free(ids)

    def test_rank_slice(self) -> None:
        from kvrt.vllm import KvpoolLoadStoreSpec, KvpoolOffloadingWorker
        caches, tensors = vu.host_kv_caches(8, seed=13)
        with self.assertRaisesRegex(ValueError, "rank 1"):
            KvpoolOffloadingWorker(self.space, caches, rank=1,
                                   worker_bytes=self.spec.worker_bytes * 2)
        del KvpoolLoadStoreSpec

    def test_mismatched_pairs(self) -> None:
        from kvrt.vllm import KvpoolLoadStoreSpec
        caches, _ = vu.host_kv_caches(8, seed=14)
        w = self.spec.get_worker(caches)
        with self.assertRaisesRegex(ValueError, "one to one"):
            w.submit_store(3, self._spec([1, 2]), KvpoolLoadStoreSpec([0]))

    def test_tensors_larger_than_announced(self) -> None:
        from kvrt.vllm import KvpoolOffloadingWorker
        caches, _ = vu.host_kv_caches(8, layers=3, seed=15)
        with self.assertRaisesRegex(ValueError, "more than"):
            KvpoolOffloadingWorker(self.space, caches, rank=0,
                                   worker_bytes=self.spec.worker_bytes)


class ManagerTest(unittest.TestCase):
    """Paths the scheduler scenarios do not take: failed stores, reset, shutdown."""

    def setUp(self) -> None:
        from vllm.v1.kv_offload.base import ReqContext, make_offload_key
        self.sched = vu.make_scheduler(vu.kvpool_extra(kvpool_tenant=tenant()))
        self.m = self.sched.connector.connector_scheduler.manager
        self.ctx = ReqContext(req_id="x")
        self.keys = [make_offload_key(bytes([i]) * 32, 0) for i in range(1, 6)]

    def tearDown(self) -> None:
        vu.shutdown_scheduler(self.sched)

    def test_failed_store_frees(self) -> None:
        from vllm.v1.kv_offload.base import LookupResult
        out = self.m.prepare_store(self.keys, self.ctx)
        self.assertEqual(out.keys_to_store, self.keys)
        self.assertEqual(self.m.lookup(self.keys[0], self.ctx), LookupResult.HIT_PENDING)
        self.m.complete_store(self.keys, self.ctx, success=False)
        st = self.m.space.stats()
        self.assertEqual((st.allocs, st.frees), (5, 5))
        self.assertEqual(self.m.lookup(self.keys[0], self.ctx), LookupResult.MISS)

    def test_store_skips_present_prefix(self) -> None:
        self.m.complete_store(self.m.prepare_store(self.keys[:3], self.ctx).keys_to_store,
                              self.ctx)
        out = self.m.prepare_store(self.keys, self.ctx)
        self.assertEqual(out.keys_to_store, self.keys[3:])
        self.assertEqual(len(out.store_spec.block_ids), 2)
        self.m.complete_store(out.keys_to_store, self.ctx)
        self.assertEqual(cached(self.m.space), 5)
        self.assertEqual(self.m.space.stats().my_refs, 0)

    def test_reset_waits_for_flush(self) -> None:
        from vllm.v1.kv_offload.base import LookupResult
        self.m.complete_store(self.m.prepare_store(self.keys[:2], self.ctx).keys_to_store,
                              self.ctx)
        self.assertEqual(self.m.lookup(self.keys[0], self.ctx), LookupResult.HIT)
        self.m.prepare_load([self.keys[0]], self.ctx)
        self.m.prepare_store(self.keys[2:], self.ctx)
        self.m.reset_cache()
        st = self.m.space.stats()
        self.assertEqual(st.my_refs, 1)  # the load's block: a worker may still read it
        self.assertEqual(st.allocs - st.frees, 2 + 3)  # 2 published, 3 still written
        self.m.on_reset_flushed()
        st = self.m.space.stats()
        self.assertEqual(st.my_refs, 0)
        self.assertEqual(st.allocs - st.frees, 2)
        self.assertEqual(self.m.held_blocks(), {"pins": 0, "loads": 0, "pending": 0})

    def test_unpinned_prepare_load_is_an_error(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "lookup"):
            self.m.prepare_load([self.keys[4]], self.ctx)
        self.assertEqual(self.m.space.stats().my_refs, 0)


class HashTest(unittest.TestCase):
    def test_group_and_determinism(self) -> None:
        from vllm.v1.kv_offload.base import make_offload_key
        h = b"\x01" * 32
        k0, k1 = make_offload_key(h, 0), make_offload_key(h, 1)
        self.assertEqual(len(offload_hash(k0)), 32)
        self.assertEqual(offload_hash(k0), offload_hash(make_offload_key(h, 0)))
        self.assertNotEqual(offload_hash(k0), offload_hash(k1))

    def test_embedded_with_several_workers(self) -> None:
        from kvrt.vllm.spec import check_backend
        check_backend(kvrt.Backend.EMBEDDED, 1)
        check_backend(kvrt.Backend.KMOD, 8)
        with self.assertRaisesRegex(ValueError, "kvpool_backend 'kmod'"):
            check_backend(kvrt.Backend.EMBEDDED, 2)

    def test_settings_defaults(self) -> None:
        s = KvpoolSettings.from_extra_config({"kvpool_quota_bytes": 1 << 20})
        self.assertEqual((s.backend, s.space_prefix, s.priority), ("auto", "vllm", 50))


if __name__ == "__main__":
    unittest.main()
