# SPDX-License-Identifier: MIT
"""KvpoolOffloadingSpec: the OffloadingSpec vLLM loads through spec_module_path."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from vllm.v1.kv_offload.base import (CanonicalKVCaches, OffloadingManager, OffloadingSpec,
                                     OffloadingWorker)
from vllm.v1.kv_offload.config import OffloadingConfig

import kvrt
from kvrt import process_pool
from kvrt.revision import model_revision  # noqa: F401 (kvrt.vllm.spec.model_revision)
from kvrt.tiers import CONFIG_KEYS as TIER_KEYS
from kvrt.tiers import TierConfig

PAGE_BYTES = 4096
NAME_MAX = kvrt.SPACE_NAME_MAX

#: The kvpool keys of kv_connector_extra_config, with their meaning.
KEYS: Dict[str, str] = {
    "kvpool_backend": "'auto' (module if /dev/kvpool opens, else embedded), 'kmod' or "
                      "'embedded' (in-process: scheduler and worker must share the "
                      "process, i.e. TP=1)",
    "kvpool_device": "the kvpool device for kmod, default /dev/kvpool",
    "kvpool_pool_bytes": "embedded backend: cap of the in-process pool (0: library default)",
    "kvpool_space_prefix": "first part of the space name, default 'vllm'",
    "kvpool_tenant": "tenant tag in the space name ([A-Za-z0-9._-], may be empty); "
                     "engines of different tenants never share a space",
    "kvpool_quota_bytes": "quota of the space when this engine creates it",
    "kvpool_quota_blocks": "the quota in blocks instead of bytes (one of the two)",
    "kvpool_priority": "priority of the blocks this engine publishes, 0..100 (default 50)",
    "kvpool_space_name": "use exactly this space name instead of the derived one "
                         "(then only block_bytes guards the geometry)",
    "kvpool_model_revision": "the weights' revision in the space identity (default: "
                             "derived from the model directory's files, or the "
                             "Hugging Face cache's commit)",
    **TIER_KEYS,
}


@dataclasses.dataclass(frozen=True)
class KvpoolSettings:
    """The kvpool keys of kv_connector_extra_config, checked."""

    backend: str = "auto"
    device: Optional[str] = None
    pool_bytes: int = 0
    space_prefix: str = "vllm"
    tenant: str = ""
    quota_bytes: int = 0
    quota_blocks: int = 0
    priority: int = kvrt.PRIO_DEFAULT
    space_name: Optional[str] = None
    model_revision: Optional[str] = None
    tiers: TierConfig = TierConfig()

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any]) -> "KvpoolSettings":
        """Parse and check; ValueError/TypeError name the key and what to pass."""
        unknown = sorted(k for k in extra if k.startswith("kvpool_") and k not in KEYS)
        if unknown:
            raise ValueError(f"kv_connector_extra_config: unknown key(s) {unknown}; the "
                             f"kvpool keys are {sorted(KEYS)}")

        def _int(key: str, default: int, lo: int, hi: int) -> int:
            v = extra.get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, str)):
                raise TypeError(f"{key}: pass an integer, not {type(v).__name__}")
            try:
                n = int(v)
            except ValueError:
                raise ValueError(f"{key}: {v!r} is not an integer") from None
            if not lo <= n <= hi:
                raise ValueError(f"{key}: {n} is outside [{lo}, {hi}]")
            return n

        def _str(key: str, default: Optional[str]) -> Optional[str]:
            v = extra.get(key, default)
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{key}: pass a string, not {type(v).__name__}")
            return v

        backend = (_str("kvpool_backend", "auto") or "").lower()
        if backend not in ("auto", "kmod", "embedded"):
            raise ValueError(f"kvpool_backend: {backend!r}; pass 'auto', 'kmod' or 'embedded'")
        prefix = _str("kvpool_space_prefix", "vllm") or ""
        tenant = _str("kvpool_tenant", "") or ""
        for key, v in (("kvpool_space_prefix", prefix), ("kvpool_tenant", tenant)):
            kvrt.check_name_part(v, key, empty_ok=True)
        if not prefix:
            raise ValueError("kvpool_space_prefix: pass a non-empty prefix, e.g. 'vllm'")
        qb = _int("kvpool_quota_bytes", 0, 0, 1 << 40)
        qn = _int("kvpool_quota_blocks", 0, 0, 1 << 32)
        if qb and qn:
            raise ValueError("pass one of kvpool_quota_bytes and kvpool_quota_blocks, not both")
        if not qb and not qn:
            raise ValueError("kv_connector_extra_config: pass kvpool_quota_bytes (or "
                             "kvpool_quota_blocks): the size of the space this engine "
                             "creates")
        name = _str("kvpool_space_name", None)
        if name is not None:
            kvrt.check_space_name(name, "kvpool_space_name")
        revision = _str("kvpool_model_revision", None)
        if revision is not None and not 0 < len(revision) <= 256:
            raise ValueError(f"kvpool_model_revision: pass 1..256 characters (a commit, a "
                             f"tag, a checksum), not {len(revision)}")
        return cls(backend=backend, device=_str("kvpool_device", None),
                   pool_bytes=_int("kvpool_pool_bytes", 0, 0, 1 << 48),
                   space_prefix=prefix, tenant=tenant, quota_bytes=qb, quota_blocks=qn,
                   priority=_int("kvpool_priority", kvrt.PRIO_DEFAULT, 0, kvrt.PRIO_MAX),
                   space_name=name, model_revision=revision,
                   tiers=TierConfig.from_extra(extra))


def geometry_fingerprint(config: OffloadingConfig, revision: str = "") -> Dict[str, Any]:
    """Everything that must match for two engines to read each other's blocks.

    The model, its weights' revision and KV dtype, each offloaded group
    (id, tokens per block, layer names), the bytes one worker stores per
    block (layers x kv heads x head dim x dtype x tokens), the hash
    granularity and the parallel layout (TP/PP/CP sizes, world size, one
    replicated copy or a slice per rank) and vLLM's KV cache layout.  The
    worker rank is not in it: all ranks of one engine share a block.
    """
    p = config.parallel
    return {
        "v": 2,
        "model": config.model.name,
        "revision": revision,
        "replicated": bool(config.replicated_layout),
        "dtype": config.model.dtype,
        "groups": [[g.group_id, g.tokens_per_block, list(g.layer_names)]
                   for g in config.groups],
        "worker_kv_bytes_per_block": config.worker_kv_bytes_per_block,
        "tokens_per_hash": config.cache.tokens_per_hash,
        "blocks_per_chunk": config.cache.blocks_per_chunk,
        "world_size": p.world_size, "tp": p.tp_size, "pp": p.pp_size,
        "pcp": p.pcp_size, "dcp": p.dcp_size,
        "kv_cache_layout": config.kv_cache_layout,
        "canonical_layout": config.canonical_layout,
    }


def space_name_for(settings: KvpoolSettings, fingerprint: Mapping[str, Any]) -> str:
    """``<prefix>-<tenant>-<24 hex of sha256(tenant, geometry)>`` (at most 58 chars).

    The long parts (model path, layer names) only enter through the hash, so
    the name keeps kvpool's rule ([A-Za-z0-9._-]+, shorter than 64 bytes).
    """
    if settings.space_name is not None:
        return settings.space_name
    blob = json.dumps({"tenant": settings.tenant, "geometry": fingerprint},
                      sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(blob).hexdigest()[:24]
    name = f"{settings.space_prefix}-{settings.tenant}-{digest}"
    return kvrt.check_space_name(name)


# ---- one Space per name in this process, counted --------------------------------
#
# The Pool comes from kvrt.process_pool: embedded spaces live in the struct
# kvrt that created them, so the scheduler and the worker of one process
# (TP=1) must share it to meet; kmod spaces are host-wide anyway.

_lock = threading.Lock()
_spaces: Dict[Tuple[Tuple[str, Optional[str], int], str], Tuple[kvrt.Space, int, kvrt.Pool]] = {}


def _pool_key(s: KvpoolSettings) -> Tuple[str, Optional[str], int]:
    return (s.backend, s.device, s.pool_bytes)


def check_backend(backend: kvrt.Backend, world_size: int) -> None:
    """An embedded pool is private to its process: with several workers
    (TP/PP > 1, each its own process) the scheduler and the workers would
    each see a space of their own, and loads would read blocks nobody wrote."""
    if backend == kvrt.Backend.EMBEDDED and world_size > 1:
        raise ValueError(f"kvpool: the embedded pool lives in one process, and this engine "
                         f"has {world_size} worker processes: load the kvpool module and "
                         "pass kvpool_backend 'kmod' (or run with one worker)")


# Workers alive in this process, per space: vLLM builds its workers (and
# their KV caches) before the scheduler, so a scheduler that finds none
# here has its workers in other processes.
_workers: Dict[Tuple[Tuple[str, Optional[str], int], str], int] = {}


def check_workers_here(space: kvrt.Space, settings: KvpoolSettings, name: str) -> None:
    """Refuse, at start-up, an embedded pool whose workers are elsewhere.

    Without this the engine would start and its worker, in a process of its
    own with a pool of its own, would copy into blocks nothing backs.
    """
    if space.pool.backend != kvrt.Backend.EMBEDDED:
        return
    with _lock:
        if _workers.get((_pool_key(settings), name)):
            return
    how = ("found no kvpool module (/dev/kvpool), so the pool is embedded"
           if settings.backend == "auto" else "puts the pool in this process")
    raise ValueError(
        f"kvpool: vLLM runs this engine's workers in other processes (its "
        f"multiprocess executor: the default on CPU, and --distributed-executor-backend "
        f"mp), and kvpool_backend {settings.backend!r} {how}: an embedded pool lives "
        f"inside one process, where those workers cannot reach it. Load the kvpool "
        f"module and pass kvpool_backend 'kmod' (or 'auto'), or run the worker in the "
        f"scheduler's process: one worker, --distributed-executor-backend uni and "
        f"VLLM_ENABLE_V1_MULTIPROCESSING=0")


def open_shared_space(settings: KvpoolSettings, name: str, block_bytes: int,
                      world_size: int = 1) -> kvrt.Space:
    """Create or join ``name`` through this process's shared Pool; counted."""
    quota = settings.quota_bytes or settings.quota_blocks * block_bytes
    if quota < block_bytes:
        raise ValueError(f"kvpool quota {quota} bytes is less than one block "
                         f"({block_bytes} bytes): raise kvpool_quota_bytes")
    with _lock:
        pk = _pool_key(settings)
        entry = _spaces.get((pk, name))
        if entry is not None:
            sp, n, pool = entry
            if sp.info().block_bytes != block_bytes:
                raise ValueError(_mismatch(name, sp.info().block_bytes, block_bytes))
            _spaces[(pk, name)] = (sp, n + 1, pool)
            return sp
        pool = process_pool.acquire(settings.backend, settings.device, settings.pool_bytes)
        try:
            sp = _create_or_join(pool, name, block_bytes, quota, world_size)
        except BaseException:
            process_pool.release(pool)
            raise
        try:
            settings.tiers.open(sp, quota)
        except BaseException:
            sp.close()
            process_pool.release(pool)
            raise
        _spaces[(pk, name)] = (sp, 1, pool)
        return sp


def _create_or_join(pool: kvrt.Pool, name: str, block_bytes: int, quota: int,
                    world_size: int) -> kvrt.Space:
    """Create or join ``name`` in ``pool``, with errors that say what differs."""
    check_backend(pool.backend, world_size)
    try:
        sp = pool.create_space(name, block_bytes=block_bytes, quota_bytes=quota)
    except kvrt.InvalidArgumentError as e:
        # A join with another block_bytes is EINVAL: say which geometry differs.
        try:
            other = pool.join_space(name)
        except kvrt.KvrtError:
            raise e from None
        have = other.info().block_bytes
        other.close()
        if have != block_bytes:
            raise ValueError(_mismatch(name, have, block_bytes)) from None
        raise
    except (kvrt.ExistsError, kvrt.AccessError) as e:
        # kmod: the name is taken by a space another uid owns (or its mode
        # keeps this uid out); say so instead of a bare EEXIST/EACCES.
        err = type(e)(e.errno, f"kvpool space {name!r} exists and this process (uid "
                               f"{os.geteuid()}) may not join it: a space belongs to "
                               "the uid that created it; run this engine as that "
                               "user, or pass another kvpool_tenant (or "
                               "kvpool_space_name) for a space of its own "
                               f"[{e.strerror}]")
        err.function = e.function
        err.library_message = e.library_message
        raise err from None
    return sp


def _mismatch(name: str, have: int, want: int) -> str:
    return (f"kvpool space {name!r} holds blocks of {have} bytes but this engine's KV "
            f"geometry needs {want}: another model or layout uses that name; drop "
            "kvpool_space_name (the derived name keeps geometries apart) or pick another")


def close_shared_space(settings: KvpoolSettings, name: str) -> None:
    """Drop one count; the last one closes the Space (freeing its blocks, refs)."""
    with _lock:
        key = (_pool_key(settings), name)
        entry = _spaces.get(key)
        if entry is None:
            return
        sp, n, pool = entry
        if n > 1:
            _spaces[key] = (sp, n - 1, pool)
            return
        del _spaces[key]
        sp.close()
        process_pool.release(pool)


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


class KvpoolOffloadingSpec(OffloadingSpec):
    """Offload vLLM's KV blocks into a kvpool space shared by compatible engines.

    The scheduler side (:class:`KvpoolOffloadingManager`) maps vLLM's block
    hashes to kvpool hashes, looks them up, allocates and publishes; kvpool
    evicts.  The worker side (:class:`KvpoolOffloadingWorker`) copies
    between vLLM's KV tensors and the space with libkvrt's batched copies.
    One kvpool block holds one vLLM block of every worker (rank r writes
    bytes ``[r * W, (r + 1) * W)``, W = worker_kv_bytes_per_block).
    """

    @classmethod
    def build_metric_definitions(cls, extra_config: Dict[str, Any]) -> Dict[str, Any]:
        from .manager import metric_definitions
        return metric_definitions()

    def __init__(self, config: OffloadingConfig) -> None:
        super().__init__(config)
        self.settings = KvpoolSettings.from_extra_config(self.extra_config)
        if config.cache.blocks_per_chunk != 1:
            raise ValueError(f"kvpool offloading stores one vLLM block per kvpool block: "
                             f"drop 'block_size'/'blocks_per_chunk' from "
                             f"kv_connector_extra_config (got {config.cache.blocks_per_chunk} "
                             "blocks per chunk)")
        if config.worker_kv_bytes_per_block <= 0:
            raise ValueError("kvpool offloading needs the KV bytes per block, which vLLM "
                             "did not give (worker_kv_bytes_per_block is 0)")
        if config.canonical_layout:
            raise ValueError("kvpool offloading stores vLLM's own page layout, not the "
                             "canonical one: drop 'canonical_layout' from "
                             "kv_connector_extra_config")
        # vLLM sets replicated_layout itself (MLA with TP on one node): every
        # rank holds the same latent cache, so a block keeps one copy, rank 0
        # writes it (vLLM submits stores from rank 0 only) and all ranks load it.
        self.replicated_layout = bool(config.replicated_layout)
        self.worker_bytes = config.worker_kv_bytes_per_block
        copies = 1 if self.replicated_layout else config.parallel.world_size
        self.block_bytes = _round_up(self.worker_bytes * copies, PAGE_BYTES)
        revision = self.settings.model_revision
        if revision is None:
            revision = model_revision(config.model.name)
        self.fingerprint = geometry_fingerprint(config, revision)
        self.space_name = space_name_for(self.settings, self.fingerprint)
        self._manager: Optional[OffloadingManager] = None
        self._worker: Optional[OffloadingWorker] = None

    def open_space(self) -> kvrt.Space:
        """This process's (counted) handle on the engine's space."""
        return open_shared_space(self.settings, self.space_name, self.block_bytes,
                                 self.config.parallel.world_size)

    def close_space(self) -> None:
        """Undo one :meth:`open_space`."""
        close_shared_space(self.settings, self.space_name)

    def get_manager(self) -> OffloadingManager:
        """The scheduler side: one manager per spec."""
        if self._manager is None:
            from .manager import KvpoolOffloadingManager
            sp = self.open_space()
            try:
                check_workers_here(sp, self.settings, self.space_name)
            except BaseException:
                self.close_space()
                raise
            self._manager = KvpoolOffloadingManager(sp,
                                                    priority=self.settings.priority,
                                                    on_shutdown=self.close_space,
                                                    tiers=self.settings.tiers,
                                                    events=self.kv_events_config
                                                    .enable_kv_cache_events)
            self._manager.spec = self  # type: ignore[attr-defined]
        return self._manager

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        """The worker side: copies for this rank's slice of each block."""
        if self._worker is None:
            from .worker import KvpoolOffloadingWorker
            sp = self.open_space()
            key = (_pool_key(self.settings), self.space_name)
            try:
                self._worker = KvpoolOffloadingWorker(
                    sp, kv_caches, rank=self.config.parallel.rank,
                    worker_bytes=self.worker_bytes,
                    on_shutdown=lambda: self._worker_gone(key),
                    replicated=self.replicated_layout)
            except BaseException:
                self.close_space()
                raise
            with _lock:
                _workers[key] = _workers.get(key, 0) + 1
        return self._worker

    def _worker_gone(self, key: Tuple[Tuple[str, Optional[str], int], str]) -> None:
        with _lock:
            n = _workers.pop(key, 0) - 1
            if n > 0:
                _workers[key] = n
        self.close_space()
