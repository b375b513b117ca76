# SPDX-License-Identifier: MIT
"""The manager's reset generations, KV events, metrics and tier reads,
through vLLM's real Scheduler and OffloadingConnector (on CPU)."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import unittest
from typing import Any, Dict, List, Tuple
from unittest import mock

import vllm_util as vu  # sets HF_HUB_OFFLINE before vLLM is imported
import kvrt
from kvrt.vllm import KvpoolOffloadingSpec, offload_hash
from kvrt.vllm.manager import (GENERATION_BYTES, KvpoolMetric, KvpoolOffloadingManager,
                               metric_definitions)
from test_vllm_offload import cached, prompt, run_with_tier_reads, tenant
from vllm.config import KVEventsConfig
from vllm.distributed.kv_events import MEDIUM_CPU, BlockRemoved, BlockStored
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
from vllm.v1.kv_offload.base import LookupResult, make_offload_key
from vllm.v1.metrics.cache_hit_source import CacheHitSource

BLOCK_BYTES = 4096  # the test model's kvpool block (test_spec_is_loaded_from_config)


class EngineCase(unittest.TestCase):
    """Engines made here are shut down after the test, last first."""

    def setUp(self) -> None:
        self.engines: List[vu.Engine] = []

    def tearDown(self) -> None:
        for e in reversed(self.engines):
            e.shutdown()

    def engine(self, extra: Dict[str, Any], seed: int = 0, events: bool = False) -> vu.Engine:
        if not events:
            e = vu.Engine(extra, seed=seed)
        else:
            with mock.patch.object(vu, "make_vllm_config", _with_kv_events):
                e = vu.Engine(extra, seed=seed)
        self.engines.append(e)
        return e

    def leave(self, e: vu.Engine) -> None:
        self.engines.remove(e)
        e.shutdown()

    def tier_dir(self) -> str:
        d = tempfile.mkdtemp(prefix="kvrt-vllm-tier.",
                             dir=os.environ.get("KVRT_TIER_DIR") or "/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d


_make_vllm_config = vu.make_vllm_config


def _with_kv_events(*args: Any, **kw: Any) -> Any:
    """vu.make_vllm_config with vLLM's KV events on (published to nowhere)."""
    vc = _make_vllm_config(*args, **kw)
    vc.kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    return vc


def block_hashes(req: Any) -> list:
    """The request's full blocks' hashes as vLLM's KV events carry them."""
    return [maybe_convert_block_hash(h) for h in req.block_hashes]


# ---- 1. reset_cache: a new generation ---------------------------------------------

class ResetTest(EngineCase):
    def test_reset_connector_makes_old_blocks_unreachable(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant())
        a, b = self.engine(extra, seed=1), self.engine(extra, seed=2)
        p = prompt(3 * vu.BLOCK + 5, 21)
        a.run(vu.make_request(p))
        old = sorted(x for x, _ in a.stored_blocks)
        self.assertEqual(len(old), 3)
        self.assertEqual(a.manager.generation, b"")
        self.assertTrue(a.sched.reset_prefix_cache(reset_connector=True))
        self.assertEqual(len(a.manager.generation), GENERATION_BYTES)
        ra = vu.make_request(p)
        a.run(ra)
        self.assertEqual(a.external_tokens(ra), 0)  # recomputed, not the old KV
        self.assertEqual(a.loaded_blocks, [])
        self.assertEqual(len(a.stored_blocks), 6)  # stored again, new hashes
        self.assertEqual(cached(a.manager.space), 6)
        # B did not reset: it still loads the blocks A stored before its reset.
        rb = vu.make_request(p)
        b.run(rb)
        self.assertEqual(b.external_tokens(rb), 3 * vu.BLOCK)
        self.assertEqual(sorted(x for x, _ in b.loaded_blocks), old)

    def test_two_reset_engines_do_not_meet(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant())
        a, c = self.engine(extra, seed=1), self.engine(extra, seed=3)
        for e in (a, c):
            self.assertTrue(e.sched.reset_prefix_cache(reset_connector=True))
        self.assertNotEqual(a.manager.generation, c.manager.generation)
        p = prompt(2 * vu.BLOCK + 1, 22)
        a.run(vu.make_request(p))
        self.assertEqual(len(a.stored_blocks), 2)
        rc = vu.make_request(p)
        c.run(rc)
        self.assertEqual(c.external_tokens(rc), 0)
        self.assertEqual(cached(a.manager.space), 4)

    def test_generation_hash(self) -> None:
        k = make_offload_key(b"\x07" * 32, 0)
        g = b"\x01" * GENERATION_BYTES
        self.assertEqual(offload_hash(k, b""), offload_hash(k))
        self.assertNotEqual(offload_hash(k, g), offload_hash(k))
        self.assertEqual(len(offload_hash(k, g)), 32)
        with self.assertRaisesRegex(ValueError, "generation: pass b'' or 16 bytes, not 3"):
            offload_hash(k, b"abc")


# ---- 2. KV events ----------------------------------------------------------------

class EventsTest(EngineCase):
    def events_engine(self, **kw: Any) -> Tuple[vu.Engine, list]:
        e = self.engine(vu.kvpool_extra(kvpool_tenant=tenant(), **kw), events=True)
        batches: list = []
        e.sched.kv_event_publisher.publish = batches.append  # type: ignore[method-assign]
        return e, batches

    @staticmethod
    def cpu_events(batches: list) -> list:
        out = [ev for b in batches for ev in b.events
               if isinstance(ev, (BlockStored, BlockRemoved)) and ev.medium == MEDIUM_CPU]
        batches.clear()
        return out

    def test_stored_and_removed_under_quota(self) -> None:
        e, batches = self.events_engine(kvpool_quota_blocks=4, self_describing_kv_events=True)
        x, y = vu.make_request(prompt(4 * vu.BLOCK + 1, 31)), \
            vu.make_request(prompt(4 * vu.BLOCK + 1, 32))
        e.run(x)
        evs = self.cpu_events(batches)
        self.assertEqual([type(ev) for ev in evs], [BlockStored] * 4)
        self.assertEqual([h for ev in evs for h in ev.block_hashes], block_hashes(x)[:4])
        self.assertEqual({ev.block_size for ev in evs}, {vu.BLOCK})
        e.run(y)  # kvpool evicts x's four blocks to make room
        self.assertEqual(e.manager.space.stats().evictions[kvrt.EvictCause.QUOTA], 4)
        evs = self.cpu_events(batches)
        removed = [h for ev in evs if isinstance(ev, BlockRemoved) for h in ev.block_hashes]
        stored = [h for ev in evs if isinstance(ev, BlockStored) for h in ev.block_hashes]
        self.assertEqual(sorted(removed), sorted(block_hashes(x)[:4]))
        self.assertEqual(stored, block_hashes(y)[:4])

    def test_past_the_bound_evictions_go_unreported(self) -> None:
        e, batches = self.events_engine(kvpool_quota_blocks=4)
        e.manager.max_tracked = 2  # the two newest of x's keys are kept
        x = vu.make_request(prompt(4 * vu.BLOCK + 1, 33))
        e.run(x)
        stored = [h for ev in self.cpu_events(batches) for h in ev.block_hashes]
        self.assertEqual(sorted(stored), sorted(block_hashes(x)))
        e.run(vu.make_request(prompt(4 * vu.BLOCK + 1, 34)))
        removed = [h for ev in self.cpu_events(batches) if isinstance(ev, BlockRemoved)
                   for h in ev.block_hashes]
        # the last two that complete_store published (its order is vLLM's)
        self.assertEqual(sorted(removed), sorted(stored[2:]))

    def test_other_engine_on_the_handle_gets_its_own(self) -> None:
        t = tenant()
        extra = vu.kvpool_extra(kvpool_tenant=t, kvpool_quota_blocks=4)
        a, ba = self.engine(extra, seed=1, events=True), []
        b, bb = self.engine(extra, seed=2, events=True), []
        self.assertIs(a.manager.space, b.manager.space)  # one handle, one queue
        a.sched.kv_event_publisher.publish = ba.append  # type: ignore[method-assign]
        b.sched.kv_event_publisher.publish = bb.append  # type: ignore[method-assign]
        x = vu.make_request(prompt(4 * vu.BLOCK + 1, 35))
        a.run(x)
        b.run(vu.make_request(prompt(4 * vu.BLOCK + 1, 36)))  # evicts A's blocks
        a.step()  # A's next step reads the queue B's step already drained
        removed = [h for ev in self.cpu_events(ba) if isinstance(ev, BlockRemoved)
                   for h in ev.block_hashes]
        self.assertEqual(sorted(removed), sorted(block_hashes(x)[:4]))
        self.assertFalse([ev for ev in self.cpu_events(bb) if isinstance(ev, BlockRemoved)])

    def test_off_without_kv_events(self) -> None:
        e = self.engine(vu.kvpool_extra(kvpool_tenant=tenant()))
        e.run(vu.make_request(prompt(2 * vu.BLOCK + 1, 37)))
        self.assertEqual(list(e.manager.take_events()), [])
        self.assertIsNone(e.manager._hub)


# ---- 3. metrics and load sources ----------------------------------------------------

class Recorder:
    """What the Scheduler took from the manager (get_stats) and asked the
    connector (get_external_cache_hit_sources), step by step."""

    def __init__(self, e: vu.Engine) -> None:
        self.counts: Dict[Tuple[str, tuple], float] = {}
        self.sources: List[dict] = []
        m, conn = e.manager, e.sched.connector
        get_stats, get_sources = m.get_stats, conn.get_external_cache_hit_sources

        def stats() -> Any:
            s = get_stats()
            for name, by_label in s.data["data"].items():
                for labels, v in by_label.items():
                    self.counts[(name, labels)] = self.counts.get((name, labels), 0) + v
            return s

        def sources(req: Any, n: int) -> dict:
            out = get_sources(req, n)
            self.sources.append(dict(out))
            return out
        m.get_stats = stats  # type: ignore[method-assign]
        conn.get_external_cache_hit_sources = sources  # type: ignore[method-assign]

    def take(self) -> Dict[Tuple[str, tuple], float]:
        out, self.counts = self.counts, {}
        return out


class MetricsTest(EngineCase):
    def test_pool_hits_bytes_evictions(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant(), kvpool_quota_blocks=4)
        a, b = self.engine(extra, seed=1), self.engine(extra, seed=2)
        ra, rb = Recorder(a), Recorder(b)
        p = prompt(4 * vu.BLOCK + 1, 41)
        a.run(vu.make_request(p))
        # one lookup, of the first block: a miss ends the prefix
        self.assertEqual(ra.take(), {(KvpoolMetric.MISSES, ()): 1,
                                     (KvpoolMetric.STORED_BYTES, ()): 4 * BLOCK_BYTES})
        b.run(vu.make_request(p))
        self.assertEqual(rb.take(), {(KvpoolMetric.HITS, ("pool",)): 4,
                                     (KvpoolMetric.LOADED_BYTES, ()): 4 * BLOCK_BYTES})
        self.assertEqual(rb.sources, [{CacheHitSource.HOST: 4 * vu.BLOCK}])
        a.run(vu.make_request(prompt(4 * vu.BLOCK + 1, 42)))  # evicts p's four
        self.assertEqual(ra.take(), {(KvpoolMetric.MISSES, ()): 1,
                                     (KvpoolMetric.STORED_BYTES, ()): 4 * BLOCK_BYTES,
                                     (KvpoolMetric.EVICTIONS, ("quota",)): 4})

    def test_definitions_cover_what_is_reported(self) -> None:
        defs = KvpoolOffloadingSpec.build_metric_definitions({})
        self.assertEqual(defs, metric_definitions())
        names = {v for k, v in vars(KvpoolMetric).items() if k.isupper()}
        self.assertEqual(set(defs), names)
        self.assertEqual(defs[KvpoolMetric.HITS].labelnames, ("source",))
        self.assertEqual(defs[KvpoolMetric.EVICTIONS].labelnames, ("cause",))

    def test_ssd_tier_hits_are_disk(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant(), kvpool_tier_ssd=self.tier_dir(),
                                kvpool_tier_write_back=False)
        p = prompt(3 * vu.BLOCK + 5, 43)
        a = self.engine(extra, seed=1)
        run_with_tier_reads(a, vu.make_request(p))
        self.leave(a)  # the pool dies with its last handle; the SSD tier keeps p
        b = self.engine(extra, seed=2)
        rec = Recorder(b)
        req = vu.make_request(p)
        run_with_tier_reads(b, req)
        self.assertEqual(b.external_tokens(req), 3 * vu.BLOCK)
        self.assertEqual(rec.take(), {(KvpoolMetric.HITS, ("ssd",)): 3,
                                      (KvpoolMetric.LOADED_BYTES, ()): 3 * BLOCK_BYTES})
        self.assertEqual(rec.sources, [{CacheHitSource.DISK: 3 * vu.BLOCK}])


# ---- 4. tier reads off the scheduler thread ----------------------------------------

class Gate:
    """Holds the manager's tier reads until opened: a read 'in flight'."""

    def __init__(self, m: KvpoolOffloadingManager) -> None:
        self.started, self.go = threading.Event(), threading.Event()
        self.reads = 0
        reader = m._reader
        assert reader is not None
        real = reader._read_one

        def gated(h: bytes) -> Any:
            self.reads += 1
            self.started.set()
            self.go.wait(30)
            return real(h)
        reader._read_one = gated  # type: ignore[method-assign]


def record_lookups(m: KvpoolOffloadingManager) -> list:
    seen: list = []
    real = m.lookup

    def lookup(key: Any, ctx: Any) -> LookupResult:
        r = real(key, ctx)
        seen.append(r)
        return r
    m.lookup = lookup  # type: ignore[method-assign]
    return seen


class TierReadTest(EngineCase):
    def stored_on_ssd(self, seed: int) -> Tuple[Dict[str, Any], list]:
        """An engine stored a prompt (3 blocks) in an SSD tier keyed by a
        tier key file, and left: the pool is gone, the tier keeps them."""
        d = self.tier_dir()
        key = os.path.join(d, "tenant.key")
        kvrt.create_tier_key(key)
        extra = vu.kvpool_extra(kvpool_tenant=tenant(), kvpool_tier_ssd=os.path.join(d, "t"),
                                kvpool_tier_key_file=key, kvpool_tier_write_back=False)
        p = prompt(3 * vu.BLOCK + 5, seed)
        a = self.engine(extra, seed=1)
        run_with_tier_reads(a, vu.make_request(p))
        self.leave(a)
        return extra, p

    def test_retry_then_hit_as_the_synchronous_path(self) -> None:
        extra, p = self.stored_on_ssd(51)
        with mock.patch.object(KvpoolOffloadingManager, "ASYNC_TIER_READS", False):
            s = self.engine(extra, seed=2)
        sync_seen = record_lookups(s.manager)
        rs = s.run(vu.make_request(p))
        self.assertEqual(sync_seen, [LookupResult.HIT] * 3)
        self.leave(s)  # the pool goes again; the tier still has p
        b = self.engine(extra, seed=3)
        gate, seen = Gate(b.manager), record_lookups(b.manager)
        req = vu.make_request(p)
        b.sched.add_request(req)
        out = b.step()  # returns while the read is held: nothing waits for it
        self.assertTrue(gate.started.wait(10))
        self.assertEqual(seen, [LookupResult.RETRY] * 3)  # a read queued per block
        self.assertEqual(dict(out.num_scheduled_tokens), {})  # the request waits
        self.assertTrue(b.manager.has_pending_work())
        gate.go.set()
        self.assertTrue(b.manager.wait_tier_reads(10))
        self.assertEqual(gate.reads, 3)
        self.assertEqual(cached(b.manager.space), 3)  # read up into the pool
        seen.clear()
        self.finish(b, req)  # added above: Engine.run would add it again
        self.assertEqual(seen, [LookupResult.HIT] * 3)
        self.assertEqual(b.external_tokens(req), s.external_tokens(rs))
        self.assertEqual(b.external_tokens(req), 3 * vu.BLOCK)
        self.assertEqual(len(b.loaded_blocks), 3)

    @staticmethod
    def finish(e: vu.Engine, req: Any) -> None:
        for _ in range(20):
            e.step()
            if not e.sched.has_unfinished_requests() and not e.manager.held_blocks()["loads"]:
                return
        raise AssertionError(f"request {req.request_id} not done in 20 steps")

    def test_full_queue_is_a_miss_then_read_later(self) -> None:
        extra, p = self.stored_on_ssd(54)
        with mock.patch.object(KvpoolOffloadingManager, "MAX_TIER_READS", 2):
            b = self.engine(extra, seed=7)
        gate, seen, rec = Gate(b.manager), record_lookups(b.manager), Recorder(b)
        req = vu.make_request(p)
        b.sched.add_request(req)
        b.step()
        self.assertEqual(seen, [LookupResult.RETRY] * 2 + [LookupResult.MISS])
        gate.go.set()
        self.assertTrue(b.manager.wait_tier_reads(10))
        seen.clear()
        b.step()  # the first two are in the pool now; the third is queued
        self.assertEqual(seen, [LookupResult.HIT] * 2 + [LookupResult.RETRY])
        self.assertTrue(b.manager.wait_tier_reads(10))
        seen.clear()
        self.finish(b, req)
        self.assertEqual(seen, [LookupResult.HIT] * 3)
        self.assertEqual(gate.reads, 3)
        self.assertEqual(b.external_tokens(req), 3 * vu.BLOCK)
        # hits by where each lookup found the block; sources by where it came from
        self.assertEqual(rec.take(), {(KvpoolMetric.HITS, ("ssd",)): 3,
                                      (KvpoolMetric.HITS, ("pool",)): 2,
                                      (KvpoolMetric.MISSES, ()): 1,
                                      (KvpoolMetric.TIER_READS_DROPPED, ()): 1,
                                      (KvpoolMetric.LOADED_BYTES, ()): 3 * BLOCK_BYTES})
        self.assertEqual(rec.sources, [{CacheHitSource.DISK: 3 * vu.BLOCK}])

    def test_shutdown_during_a_read_holds_nothing(self) -> None:
        extra, p = self.stored_on_ssd(52)
        keep = self.engine(extra, seed=4)  # keeps the space open after B leaves
        b = self.engine(extra, seed=5)
        self.assertIs(b.manager.space, keep.manager.space)
        gate = Gate(b.manager)
        b.sched.add_request(vu.make_request(p))
        b.step()
        self.assertTrue(gate.started.wait(10))
        opener = threading.Timer(0.2, gate.go.set)
        opener.start()
        self.leave(b)  # waits for the read in flight, drops the queued two
        opener.join()
        self.assertFalse(b.manager._reader.thread.is_alive())
        self.assertEqual(gate.reads, 1)
        sp = keep.manager.space
        st = sp.stats()
        self.assertEqual((st.my_refs, st.readers), (0, 0), st)
        self.assertEqual(cached(sp), 1)  # the one read that was in flight, unpinned
        self.assertEqual(b.manager.held_blocks(), {"pins": 0, "loads": 0, "pending": 0})

    def test_reset_drops_queued_reads(self) -> None:
        extra, p = self.stored_on_ssd(53)
        b = self.engine(extra, seed=6)
        gate = Gate(b.manager)
        b.sched.add_request(vu.make_request(p))
        b.step()
        self.assertTrue(gate.started.wait(10))
        b.manager.reset_cache()  # the read in flight is of the old generation
        gate.go.set()
        self.assertTrue(b.manager.wait_tier_reads(10))
        self.assertEqual(gate.reads, 1)
        self.assertEqual(b.manager._reader.done, {})  # its result was dropped
        self.assertEqual(b.manager.space.stats().my_refs, 0)


if __name__ == "__main__":
    unittest.main()
