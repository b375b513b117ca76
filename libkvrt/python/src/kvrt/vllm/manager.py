# SPDX-License-Identifier: MIT
"""The scheduler side: vLLM's OffloadingManager over a kvpool space."""
from __future__ import annotations

import atexit
import collections
import hashlib
import logging
import os
import threading
from collections import defaultdict
from typing import (Callable, Collection, Deque, Dict, Iterable, List, Optional, Sequence,
                    Tuple, Union)

import numpy as np
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
    OffloadingConnectorStats)
from vllm.v1.kv_offload.base import (BlockIDsLoadStoreSpec, Locality, LookupResult, Medium,
                                     OffloadingCounterMetadata, OffloadingEvent,
                                     OffloadingManager, OffloadingMetricMetadata, OffloadKey,
                                     PrepareStoreOutput, ReqContext, RequestOffloadingContext)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

import kvrt
from kvrt.tiers import TierConfig

_PERSON = b"kvrt.vllm.v1"  # blake2b personalisation: a domain of its own
GENERATION_BYTES = 16  # blake2b's salt: a generation fills it
logger = logging.getLogger("kvrt.vllm")


def offload_hash(key: bytes, generation: bytes = b"") -> bytes:
    """The kvpool hash (32 bytes) of a vLLM OffloadKey in ``generation``.

    The key is vLLM's block hash followed by the 4-byte KV group index, so
    every group gets its own kvpool hash; the derivation is deterministic
    and the same in every process (vLLM's own hashes are equal across
    processes when their root seed is: see Documentation/python.rst).
    ``generation`` is b"" until the engine's first reset_cache (engines
    with equal settings share), then 16 random bytes: the blake2b salt, so
    no hash of one generation is another's.
    """
    generation = bytes(generation)
    if len(generation) not in (0, GENERATION_BYTES):
        raise ValueError(f"generation: pass b'' or {GENERATION_BYTES} bytes, "
                         f"not {len(generation)} bytes")
    return hashlib.blake2b(bytes(key), digest_size=32, person=_PERSON,
                           salt=generation).digest()


class KvpoolLoadStoreSpec(BlockIDsLoadStoreSpec):
    """kvpool block ids of a load or a store, in the order of the keys."""


# ---- metrics ------------------------------------------------------------------

class KvpoolMetric:
    """The manager's metric names (declared by KvpoolOffloadingSpec)."""

    HITS = "vllm:kv_offload_kvpool_hits"
    MISSES = "vllm:kv_offload_kvpool_misses"
    LOADED_BYTES = "vllm:kv_offload_kvpool_loaded_bytes"
    STORED_BYTES = "vllm:kv_offload_kvpool_stored_bytes"
    EVICTIONS = "vllm:kv_offload_kvpool_evictions"
    TIER_READS_DROPPED = "vllm:kv_offload_kvpool_tier_reads_dropped"


# The ``source`` label of HITS (where a lookup found the block) -> vLLM's.
_CACHE_HIT_SOURCE = {"pool": CacheHitSource.HOST, "ssd": CacheHitSource.DISK,
                     "redis": CacheHitSource.EXTERNAL_UNSPECIFIED}
_CAUSES = tuple(c.name.lower() for c in kvrt.EvictCause)


def metric_definitions() -> Dict[str, OffloadingMetricMetadata]:
    """Prometheus definitions of what :meth:`KvpoolOffloadingManager.get_stats` reports."""
    c = OffloadingCounterMetadata
    return {
        KvpoolMetric.HITS: c("kvpool blocks that lookups found, by where: the pool, or "
                             "read up from the SSD or Redis tier", labelnames=("source",)),
        KvpoolMetric.MISSES: c("kvpool lookups that found no block"),
        KvpoolMetric.LOADED_BYTES: c("bytes of kvpool blocks this engine loaded"),
        KvpoolMetric.STORED_BYTES: c("bytes of kvpool blocks this engine stored"),
        KvpoolMetric.EVICTIONS: c("blocks kvpool evicted from the space (every engine "
                                  "sharing it), by cause", labelnames=("cause",)),
        KvpoolMetric.TIER_READS_DROPPED: c("tier reads not queued (the queue was full): "
                                           "those lookups were misses"),
    }


# ---- eviction events, fanned out to the managers of one space handle ----------

class _EventHub:
    """One space handle's event queue, read for every manager on that handle.

    A process shares one handle per space among its engines (spec.py), and
    a handle has one queue: a manager reading it alone would take the
    others' evictions.  The hub reads it and gives each subscriber the
    evicted hashes.
    """

    _hubs: Dict[int, "_EventHub"] = {}
    _hubs_lock = threading.Lock()

    def __init__(self, space: kvrt.Space) -> None:
        self.space = space
        self.inboxes: Dict[int, List[bytes]] = {}
        self.failed = False

    @classmethod
    def subscribe(cls, space: kvrt.Space, who: object) -> "_EventHub":
        with cls._hubs_lock:
            hub = cls._hubs.get(id(space))
            if hub is None or hub.space is not space:  # an id reused after a close
                hub = cls._hubs[id(space)] = _EventHub(space)
            hub.inboxes[id(who)] = []
            return hub

    def unsubscribe(self, who: object) -> None:
        with self._hubs_lock:
            self.inboxes.pop(id(who), None)
            if not self.inboxes and self._hubs.get(id(self.space)) is self:
                del self._hubs[id(self.space)]

    def take(self, who: object) -> List[bytes]:
        """The hashes evicted since ``who`` last asked."""
        with self._hubs_lock:
            if not self.space.closed and not self.failed:
                try:
                    self._read()
                except kvrt.KvrtError as e:  # e.g. a module without KVRT_FEAT_EVENTS
                    self.failed = True
                    logger.warning("kvpool space %s: no eviction events (%s): removed "
                                   "events are not reported", self.space.name, e)
            box = self.inboxes.get(id(who))
            if box is None:
                return []
            self.inboxes[id(who)] = []
            return box

    def _read(self) -> None:
        for ev in self.space.events():
            if ev.type == kvrt.EventType.EVICTED:
                for box in self.inboxes.values():
                    box.append(ev.hash)
            elif ev.type == kvrt.EventType.OVERFLOW:
                logger.warning("kvpool space %s: %d events lost; removed events of "
                               "those blocks are not reported", self.space.name, ev.count)


# ---- reads from the tiers, off the scheduler thread ----------------------------

_Read = Tuple[OffloadKey, bytes, bytes]  # key, kvpool hash, generation


class _TierReader:
    """One thread that reads keys up from the tiers into the pool.

    Each read is kvrt_lookup_tiers of one hash; the reference it leaves is
    dropped at once: the block stays cached in the pool, where the
    scheduler's next lookup finds it (or, evicted in between, a MISS).
    Results are ``where`` (0 pool, n the n-th tier) or None (not found).
    """

    def __init__(self, space: kvrt.Space, max_queue: int) -> None:
        self.space = space
        self.max_queue = max_queue
        self.cv = threading.Condition()
        self.queue: Deque[_Read] = collections.deque()
        self.busy: Dict[OffloadKey, bytes] = {}  # queued or in flight -> generation
        self.done: "collections.OrderedDict[OffloadKey, Optional[int]]" = \
            collections.OrderedDict()
        self.generation = b""
        self.stopping = False
        self.thread: Optional[threading.Thread] = None

    def submit(self, key: OffloadKey, h: bytes) -> bool:
        """Queue a read; False when max_queue reads are queued or in flight."""
        with self.cv:
            if key in self.busy:
                return True
            if len(self.busy) >= self.max_queue or self.stopping:
                return False
            self.queue.append((key, h, self.generation))
            self.busy[key] = self.generation
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="kvrt-tier-read",
                                               daemon=True)
                self.thread.start()
                # Before the Space's own exit hook closes it under a read.
                atexit.register(self.stop)
            self.cv.notify()
            return True

    def state(self, key: OffloadKey) -> Tuple[bool, Optional[int], bool]:
        """(reading, where, resolved): resolved results are taken once."""
        with self.cv:
            if key in self.busy:
                return True, None, False
            if key in self.done:
                return False, self.done.pop(key), True
            return False, None, False

    def pending(self) -> int:
        with self.cv:
            return len(self.busy)

    def wait(self, timeout: float) -> bool:
        """Wait until nothing is queued or in flight; False on timeout."""
        with self.cv:
            return self.cv.wait_for(lambda: not self.busy, timeout)

    def new_generation(self, generation: bytes) -> None:
        """reset_cache: drop what is queued and every result; the read in
        flight finishes, and its result is dropped (another generation)."""
        with self.cv:
            self.generation = generation
            for key, _, _ in self.queue:
                self.busy.pop(key, None)
            self.queue.clear()
            self.done.clear()
            self.cv.notify_all()

    def stop(self) -> None:
        """Drop the queue, wait for the read in flight; the space may close then."""
        with self.cv:
            self.stopping = True
            self.queue.clear()
            self.cv.notify_all()
            t = self.thread
        if t is not None:
            t.join()
            atexit.unregister(self.stop)
        with self.cv:
            self.busy.clear()
            self.done.clear()

    def _next(self) -> Optional[_Read]:
        with self.cv:
            self.cv.wait_for(lambda: self.queue or self.stopping)
            if self.stopping:
                return None
            return self.queue.popleft()

    def _run(self) -> None:
        while (item := self._next()) is not None:
            key, h, gen = item
            where = self._read_one(h)
            with self.cv:
                if self.busy.get(key) == gen and gen == self.generation:
                    del self.busy[key]
                    self.done[key] = where
                    while len(self.done) > self.max_queue:  # never asked again
                        self.done.popitem(last=False)
                elif self.busy.get(key) == gen:
                    del self.busy[key]
                self.cv.notify_all()

    def _read_one(self, h: bytes) -> Optional[int]:
        """kvrt_lookup_tiers of one hash; the reference goes at once."""
        try:
            got = self.space.lookup_one(h, tiers=True)
            if got is None:
                return None
            self.space.release([got[0]])
            return got[1]
        except Exception as e:  # noqa: BLE001 - the thread must live on: a miss
            logger.warning("kvpool: a tier read failed: %s", e)
            return None


class KvpoolOffloadingManager(OffloadingManager):
    """lookup/prepare_*/complete_* as kvpool calls; kvpool does the eviction.

    References held, and when they go:

    * a lookup HIT pins the block (one reader reference) until the
      prepare_load of the same step takes it over, else until
      on_schedule_end: nothing can evict a block between HIT and load;
    * prepare_load holds one reference per key until complete_load;
    * prepare_store allocates blocks owned by this handle; complete_store
      publishes them (and drops the reference publish leaves) or frees them.

    With tiers (kvpool_tier_ssd, kvpool_tier_redis) on the space, a lookup
    asks the pool only; a pool miss is RETRY while one background thread
    reads the key up from the tiers into the pool, and the lookup after is
    a pool HIT or a MISS.  complete_store hands what it published to the
    tiers as well; a tier that fails costs hits, never a store.

    reset_cache starts a new hash generation (:func:`offload_hash`): what
    this engine stored before is unreachable to it, and stays for the
    engines that share the space.
    """

    #: Where the last hits came from, for get_load_source: keys kept at most.
    MAX_SOURCES = 4096
    #: Tier reads queued or in flight at most; a pool miss past it is a MISS.
    MAX_TIER_READS = 256
    #: False: a pool miss reads the tiers in the lookup (the scheduler waits).
    ASYNC_TIER_READS = True

    def __init__(self, space: kvrt.Space, priority: int = kvrt.PRIO_DEFAULT,
                 on_shutdown: Optional[Callable[[], None]] = None,
                 tiers: Union[bool, TierConfig] = False, events: bool = False,
                 async_tier_reads: Optional[bool] = None) -> None:
        self.space = space
        self.priority = priority
        self._on_shutdown = on_shutdown
        self._step_pins: Dict[OffloadKey, List[int]] = defaultdict(list)
        self._loads: Dict[OffloadKey, List[int]] = defaultdict(list)
        self._pending: Dict[OffloadKey, int] = {}
        # Blocks of jobs in flight at reset_cache, let go at on_reset_flushed.
        self._reset_free: List[int] = []
        self._reset_release: List[int] = []
        self._closed = False
        self.generation = b""
        self.tiers = bool(tiers)
        self.tier_sources = _tier_sources(tiers)
        self.tier_store_errors = 0
        self._reader = (_TierReader(space, self.MAX_TIER_READS)
                        if self.tiers and _either(async_tier_reads, self.ASYNC_TIER_READS)
                        else None)
        self._block_bytes = space.info().block_bytes
        self._counts: Dict[Tuple[str, Tuple[str, ...]], int] = defaultdict(int)
        self._evictions_seen = space.stats().evictions
        self._sources: "collections.OrderedDict[OffloadKey, str]" = collections.OrderedDict()
        self._init_events(events)

    # ---- hashes and kvrt calls ---------------------------------------------------

    def _hash(self, key: OffloadKey) -> bytes:
        return offload_hash(key, self.generation)

    def _lookup_one(self, key: OffloadKey, tiers: bool = False) -> Optional[Tuple[int, int]]:
        """kvrt_lookup (or _tiers) of one key: (block, where) with a reader
        reference, or None.  One call: vLLM looks keys up one at a time."""
        return self.space.lookup_one(self._hash(key), tiers)

    def _source(self, where: int) -> str:
        """The source label of ``where`` (0 the pool, n the n-th tier)."""
        if where == 0:
            return "pool"
        if where <= len(self.tier_sources):
            return self.tier_sources[where - 1]
        return self.tier_sources[-1] if self.tier_sources else "pool"

    # ---- lookups and loads ---------------------------------------------------

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        if self._step_pins.get(key):
            return LookupResult.HIT
        if key in self._pending:
            return LookupResult.HIT_PENDING
        if self._reader is None:
            return self._lookup_now(key, tiers=self.tiers)
        reading, where, resolved = self._reader.state(key)
        if reading:
            return LookupResult.RETRY
        if resolved:
            # The read is over: the pool has the block now (maybe stored since
            # a result of None), or it is a MISS; the tiers are not asked again.
            return self._lookup_now(key, False, where or 0)
        got = self._lookup_one(key)
        if got is not None:
            return self._hit(key, *got)
        if self._reader.submit(key, self._hash(key)):
            return LookupResult.RETRY
        self._counts[(KvpoolMetric.TIER_READS_DROPPED, ())] += 1
        return self._miss()

    def _lookup_now(self, key: OffloadKey, tiers: bool,
                    where: Optional[int] = None) -> LookupResult:
        got = self._lookup_one(key, tiers)
        if got is None:
            return self._miss()
        return self._hit(key, got[0], got[1] if where is None else where)

    def _hit(self, key: OffloadKey, bid: int, where: int) -> LookupResult:
        self._step_pins[key].append(bid)
        source = self._source(where)
        self._counts[(KvpoolMetric.HITS, (source,))] += 1
        if where or key not in self._sources:  # a tier's block keeps its origin in the pool
            self._sources[key] = source
        self._sources.move_to_end(key)
        while len(self._sources) > self.MAX_SOURCES:
            self._sources.popitem(last=False)
        return LookupResult.HIT

    def _miss(self) -> LookupResult:
        self._counts[(KvpoolMetric.MISSES, ())] += 1
        return LookupResult.MISS

    def get_load_source(self, key: OffloadKey, req_context: ReqContext) -> CacheHitSource:
        """HOST for a pool hit, DISK for the SSD tier; Redis, a remote store,
        is EXTERNAL_UNSPECIFIED (vLLM has no member for it).  A block a tier
        read brought into the pool keeps the tier as its source."""
        source = self._sources.get(key)
        if source is None:
            return CacheHitSource.EXTERNAL_UNSPECIFIED
        return _CACHE_HIT_SOURCE[source]

    def _take(self, key: OffloadKey) -> Optional[int]:
        pins = self._step_pins.get(key)
        if pins:
            return pins.pop()
        got = self._lookup_one(key)
        return got[0] if got else None

    def prepare_load(self, keys: Collection[OffloadKey],
                     req_context: ReqContext) -> KvpoolLoadStoreSpec:
        keys = list(keys)
        got: List[int] = []
        for key in keys:
            bid = self._take(key)
            if bid is None:
                if got:
                    self.space.release(got)
                raise RuntimeError(f"kvpool: block {key.hex()} was not looked up as a HIT "
                                   "in this step; call lookup() first")
            got.append(bid)
        for key, bid in zip(keys, got):
            self._loads[key].append(bid)
        return KvpoolLoadStoreSpec(got)

    def complete_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        ids = [self._loads[k].pop() for k in keys if self._loads.get(k)]
        for k in keys:
            if k in self._loads and not self._loads[k]:
                del self._loads[k]
        self._counts[(KvpoolMetric.LOADED_BYTES, ())] += len(ids) * self._block_bytes
        self._release(ids)

    def _release(self, ids: Sequence[int]) -> None:
        for i in range(0, len(ids), kvrt.MAX_BATCH):
            self.space.release(ids[i:i + kvrt.MAX_BATCH])

    # ---- stores --------------------------------------------------------------

    def prepare_store(self, keys: Collection[OffloadKey],
                      req_context: ReqContext) -> Optional[PrepareStoreOutput]:
        todo = [k for k in dict.fromkeys(keys) if k not in self._pending]
        if todo:
            # kvpool answers the longest present prefix; what lies past a gap
            # is stored again and deduplicated by publish.
            hits = self.space.lookup([self._hash(k) for k in todo])
            if hits.size:
                self.space.release(hits)
            todo = todo[hits.size:]
        if not todo:
            return PrepareStoreOutput(keys_to_store=[], store_spec=KvpoolLoadStoreSpec([]),
                                      evicted_keys=[])
        try:
            ids = self.space.alloc(len(todo))  # kvpool evicts cached blocks to make room
        except kvrt.NoSpaceError:
            return None  # everything is referenced: vLLM skips this store
        for k, bid in zip(todo, ids.tolist()):
            self._pending[k] = bid
        # kvpool's evictions reach take_events through the space's events.
        return PrepareStoreOutput(keys_to_store=todo, store_spec=KvpoolLoadStoreSpec(ids),
                                  evicted_keys=[])

    def complete_store(self, keys: Collection[OffloadKey], req_context: ReqContext,
                       success: bool = True) -> None:
        done = [k for k in keys if k in self._pending]
        if not done:
            return
        ids = np.array([self._pending.pop(k) for k in done], dtype=np.uint32)
        for i in range(0, len(done), kvrt.MAX_BATCH):
            part, pk = ids[i:i + kvrt.MAX_BATCH], done[i:i + kvrt.MAX_BATCH]
            if success:
                self._publish(part, pk)
            else:
                self.space.free(part)

    def _publish(self, ids: np.ndarray, keys: List[OffloadKey]) -> None:
        hashes = [self._hash(k) for k in keys]
        for k in keys:
            self._sources.pop(k, None)  # computed here now, not read from a tier
        res = self.space.publish(ids, hashes, [self.priority] * len(keys))
        if self.tiers:
            self._tier_store(res.ids, hashes)
        self.space.release(res.ids)  # the cache keeps them; we need no pin
        self._counts[(KvpoolMetric.STORED_BYTES, ())] += len(keys) * self._block_bytes
        self._note_stored(keys, hashes)

    def _tier_store(self, ids: np.ndarray, hashes: List[bytes]) -> None:
        try:
            self.space.tier_store(ids, hashes, [self.priority] * len(hashes))
        except kvrt.KvrtError as e:
            self.tier_store_errors += 1
            logger.warning("kvpool: the tiers did not take %d blocks: %s", len(hashes), e)

    # ---- events ----------------------------------------------------------------

    def _init_events(self, enabled: bool) -> None:
        """Events only with enable_kv_cache_events: else nobody drains them."""
        self._events: Optional[List[OffloadingEvent]] = [] if enabled else None
        self._hub = _EventHub.subscribe(self.space, self) if enabled else None
        # kvpool hash -> the key this engine stored under it, oldest first.
        self._stored: "collections.OrderedDict[bytes, OffloadKey]" = collections.OrderedDict()
        self.max_tracked = max(int(self.space.info().nr_blocks), 1024)

    def _note_stored(self, keys: List[OffloadKey], hashes: List[bytes]) -> None:
        if self._events is None:
            return
        for k, h in zip(keys, hashes):
            self._stored[h] = k
            self._stored.move_to_end(h)
        # Past the bound the oldest mappings go: their evictions go unreported.
        while len(self._stored) > self.max_tracked:
            self._stored.popitem(last=False)
        self._events.append(OffloadingEvent(keys=list(keys), medium=Medium.CPU,
                                            removed=False, locality=Locality.LOCAL))

    def take_events(self) -> Iterable[OffloadingEvent]:
        """Stored: what complete_store published; removed: which of those
        kvpool evicted since (read from the space's event queue)."""
        if self._events is None or self._hub is None:
            return []
        removed = [self._stored.pop(h) for h in self._hub.take(self) if h in self._stored]
        if removed:
            self._events.append(OffloadingEvent(keys=removed, medium=Medium.CPU,
                                                removed=True, locality=Locality.LOCAL))
        events, self._events = self._events, []
        return events

    # ---- stats -------------------------------------------------------------------

    def get_stats(self) -> Optional[OffloadingConnectorStats]:
        """Counters since the last call (see :func:`metric_definitions`)."""
        stats = OffloadingConnectorStats()
        for (name, labels), n in self._counts.items():
            stats.increase_counter(name, n, labels)
        self._counts.clear()
        if not self.space.closed:
            now = self.space.stats().evictions
            for cause, (a, b) in enumerate(zip(self._evictions_seen, now)):
                if b > a:
                    stats.increase_counter(KvpoolMetric.EVICTIONS, b - a, (_CAUSES[cause],))
            self._evictions_seen = now
        return stats

    # ---- step and lifetime -----------------------------------------------------

    def on_schedule_end(self, context: object) -> None:
        pins = [b for ids in self._step_pins.values() for b in ids]
        self._step_pins.clear()
        self._release(pins)

    def has_pending_work(self) -> bool:
        """Tier reads queued or in flight: keep stepping to take their results."""
        return self._reader is not None and self._reader.pending() > 0

    def wait_tier_reads(self, timeout: float = 10.0) -> bool:
        """Wait for the tier reads queued or in flight (tests, tools); False on timeout."""
        return self._reader is None or self._reader.wait(timeout)

    def reset_cache(self) -> None:
        # The space is shared: only this engine's references go, not others'
        # blocks; a new generation makes what it stored unreachable to it.
        self._drop_refs()
        self.generation = os.urandom(GENERATION_BYTES)
        if self._reader is not None:
            self._reader.new_generation(self.generation)
        self._sources.clear()
        self._stored.clear()

    def _drop_refs(self) -> None:
        self.on_schedule_end(None)
        self._reset_free += list(self._pending.values())
        self._reset_release += [b for ids in self._loads.values() for b in ids]
        self._pending.clear()
        self._loads.clear()

    def on_reset_flushed(self) -> None:
        free, self._reset_free = self._reset_free, []
        rel, self._reset_release = self._reset_release, []
        for i in range(0, len(free), kvrt.MAX_BATCH):
            self.space.free(free[i:i + kvrt.MAX_BATCH])
        self._release(rel)

    def held_blocks(self) -> Dict[str, int]:
        """What this manager holds now: pins, load refs, pending stores."""
        return {"pins": sum(len(v) for v in self._step_pins.values()),
                "loads": sum(len(v) for v in self._loads.values()),
                "pending": len(self._pending)}

    def shutdown(self) -> None:
        """Leave the space: closing the last handle frees blocks and references."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.stop()  # before the space can close under its read
        if self._hub is not None:
            self._hub.unsubscribe(self)
        if not self.space.closed:
            self._drop_refs()
            self.on_reset_flushed()
        if self._on_shutdown is not None:
            self._on_shutdown()


def _either(value: Optional[bool], default: bool) -> bool:
    return default if value is None else value


def _tier_sources(tiers: Union[bool, TierConfig]) -> Tuple[str, ...]:
    """Source labels of the tiers in the order spec.py opens them (SSD first).

    An SSD tier left out (another process has it open, EBUSY) shifts the
    order: Redis hits are then labelled 'ssd'.  A bare True: all 'ssd'.
    """
    if isinstance(tiers, TierConfig):
        return tuple(n for n, on in (("ssd", tiers.ssd), ("redis", tiers.redis)) if on)
    return ("ssd",) if tiers else ()
