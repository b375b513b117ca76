# SPDX-License-Identifier: MIT
"""Pools, spaces, blocks, the prefix cache, events and zero-copy views."""
from __future__ import annotations

import ctypes
import dataclasses
import enum
import errno
import weakref
from typing import (TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Tuple, TypeVar,
                    Union)

import numpy as np

from . import _checks, _handles, _lib
from ._call import LOG_CALLBACK, LOG_WARNING, call, check, need_int, need_uint
from .blocks import BlockArray, Copy, PairsLike, check_copy, pairs_pointer
from ._arrays import HashesLike, IdsLike, batch_arrays, hashes_array
from .layout import DType, Layout, LayoutKind

if TYPE_CHECKING:
    from .tiers import Tier

HASH_BYTES = _lib.HASH_BYTES
MAX_BATCH = _lib.MAX_BATCH
PRIO_MAX = _checks.PRIO_MAX
PRIO_DEFAULT = 50



class Backend(enum.IntEnum):
    """``enum kvrt_backend``."""

    AUTO = 0
    KMOD = 1
    EMBEDDED = 2


class NumaPolicy(enum.IntEnum):
    """``enum kvrt_numa_policy``."""

    PREFERRED = 0
    BIND = 1
    INTERLEAVE = 2


class Feature(enum.IntFlag):
    """``KVRT_FEAT_*``: bits of :attr:`PoolInfo.features`."""

    SPACES = 1 << 0
    NUMA = 1 << 1
    PREFIX = 1 << 2
    PERSIST = 1 << 3
    RESIDENCY = 1 << 4
    EVENTS = 1 << 5
    RECLAIM = 1 << 6


class EvictCause(enum.IntEnum):
    """``enum kvrt_evict_cause``."""

    QUOTA = 0
    POOL = 1
    TENANT = 2
    RECLAIM = 3
    ADMIN = 4


class EventType(enum.IntEnum):
    """``enum kvrt_event_type``."""

    EVICTED = 1
    SPACE_DESTROYED = 2
    QUOTA_PRESSURE = 3
    OVERFLOW = 4


# KVRT_OPEN_* and KVRT_SPACE_* flags
OPEN_NO_HUGETLB = 1 << 0
OPEN_NO_THP = 1 << 1
OPEN_NO_MLOCK = 1 << 2
_SPACE_CREATE, _SPACE_EXCL, _SPACE_PERSIST, _SPACE_FOREIGN = 1, 2, 4, 8
_COPY_ASYNC = 1


def _struct_dict(c: ctypes.Structure) -> dict:
    out = {}
    for name, _t in c._fields_:  # type: ignore[attr-defined]
        if name.startswith("reserved"):
            continue
        v = getattr(c, name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, ctypes.Array):
            v = tuple(v)
        out[name] = v
    return out


@dataclasses.dataclass(frozen=True)
class PoolInfo:
    """``struct kvrt_pool_info``."""

    backend: Backend
    api_version: int
    features: Feature
    page_size: int
    chunk_size: int
    nr_nodes: int
    max_batch: int
    node_mask: int
    pool_bytes: int
    used_bytes: int
    free_bytes: int


@dataclasses.dataclass(frozen=True)
class SpaceInfo:
    """``struct kvrt_space_info``."""

    space_id: int
    created: bool
    uid: int
    gid: int
    mode: int
    numa_policy: NumaPolicy
    node_mask: int
    block_bytes: int
    nr_blocks: int
    map_bytes: int
    backed_blocks: int
    free_blocks: int
    owned_blocks: int
    my_blocks: int
    backed_bytes: int


@dataclasses.dataclass(frozen=True)
class MemInfo:
    """``struct kvrt_mem_info``: what memory backs a space."""

    kind: int
    chunk_bytes: int
    backed_bytes: int
    hugetlb_bytes: int
    thp_bytes: int
    locked_bytes: int
    hugetlb_errno: int
    thp_errno: int
    mlock_errno: int
    numa_errno: int
    disabled: int
    summary: str


@dataclasses.dataclass(frozen=True)
class SpaceStats:
    """``struct kvrt_space_stats``; ``evictions`` is indexed by :class:`EvictCause`."""

    space_id: int
    hits: int
    misses: int
    inserts: int
    dedups: int
    evictions: Tuple[int, ...]
    pressure: int
    published_blocks: int
    cached_blocks: int
    hole_blocks: int
    readers: int
    my_refs: int
    allocs: int
    frees: int


@dataclasses.dataclass(frozen=True)
class Event:
    """``struct kvrt_event``.  ``hash`` is 32 bytes (EVICTED), else zeros."""

    seq: int
    type: EventType
    cause: int
    block: int
    count: int
    hash: bytes


@dataclasses.dataclass(frozen=True)
class PublishResult:
    """What :meth:`Space.publish` did.

    ``ids[i]`` is the block that now holds ``hashes[i]`` (one reader
    reference each, to be released); ``dedup[i]`` is True where the hash
    was present and the caller's block was freed.
    """

    ids: np.ndarray
    dedup: np.ndarray
    dedups: int


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


_C = TypeVar("_C", bound="_Closable")


class _Closable:
    """What every handle class shares: ``closed``, and ``with`` closing on exit."""

    _h: Any

    def close(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return bool(self._h.close_requested)

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Pool(_Closable):
    """A connection to a pool: ``kvrt_open`` / ``kvrt_close``.

    ``backend`` is ``"auto"``, ``"kmod"``, ``"embedded"`` or a
    :class:`Backend`; ``device`` names the kvpool device (kmod);
    ``pool_bytes`` caps the embedded pool; ``no_hugetlb``, ``no_thp``,
    ``no_mlock`` are the embedded backend's memory choices.  libkvrt's log
    lines go to the ``logging`` logger ``"kvrt"`` at ``log_level`` and
    above (syslog numbers: 3 err, 4 warning, 6 info, 7 debug).

    Use it as a context manager; :meth:`close` closes its spaces (a space
    with live numpy views stays mapped until they are gone).
    """

    def __init__(self, backend: Union[Backend, str] = Backend.AUTO, *,
                 device: Optional[str] = None, pool_bytes: int = 0, no_hugetlb: bool = False,
                 no_thp: bool = False, no_mlock: bool = False,
                 log_level: int = LOG_WARNING) -> None:
        if isinstance(backend, str):
            try:
                backend = Backend[backend.upper()]
            except KeyError:
                raise ValueError(f"backend {backend!r}: pass 'auto', 'kmod' or 'embedded'"
                                 ) from None
        elif not isinstance(backend, Backend):
            raise TypeError("backend: pass 'auto', 'kmod', 'embedded' or a kvrt.Backend")
        if device is not None and not isinstance(device, str):
            raise TypeError("device: pass a path as str, e.g. '/dev/kvpool'")
        opts = _lib.OpenOptsC()
        opts.backend = int(backend)
        opts.flags = ((OPEN_NO_HUGETLB if no_hugetlb else 0) | (OPEN_NO_THP if no_thp else 0)
                      | (OPEN_NO_MLOCK if no_mlock else 0))
        self._device = device.encode() if device is not None else None
        opts.device = self._device
        opts.pool_bytes = need_uint(pool_bytes, "pool_bytes", 64)
        opts.log = LOG_CALLBACK
        opts.log_level = need_uint(log_level, "log_level")
        ptr = ctypes.c_void_p()
        call("kvrt_open", ctypes.byref(ptr), ctypes.byref(opts),
             detail=f"backend {backend.name.lower()}")
        self._h = _handles.PoolHandle(ptr.value)  # type: ignore[arg-type]
        self._page: Optional[int] = None
        self._finalizer = weakref.finalize(self, self._h.request_close)

    def _ptr(self) -> int:
        return _handles.live_ptr(self._h, "the pool is closed: open a new kvrt.Pool")

    def _page_size(self) -> int:
        # what the library checks block_bytes against (fixed for the pool)
        if self._page is None:
            self._page = self.info().page_size
        return self._page

    def close(self) -> None:
        """Close the pool and its spaces (idempotent)."""
        self._finalizer()

    @property
    def backend(self) -> Backend:
        """The live backend."""
        return Backend(_lib.lib.kvrt_backend(self._ptr()))

    @property
    def backend_info(self) -> str:
        """Which backend and why, e.g. ``"embedded: /dev/kvpool: No such file ..."``."""
        return (_lib.lib.kvrt_backend_info(self._ptr()) or b"").decode("utf-8", "replace")

    def info(self) -> PoolInfo:
        """``kvrt_pool_info``."""
        c = _lib.PoolInfoC()
        call("kvrt_pool_info", self._ptr(), ctypes.byref(c))
        d = _struct_dict(c)
        d["backend"] = Backend(d["backend"])
        d["features"] = Feature(d["features"])
        return PoolInfo(**d)

    def open_space(self, name: str, *, create: bool = False, exclusive: bool = False,
                   persist: bool = False, block_bytes: int = 0, quota_bytes: int = 0,
                   mode: Optional[int] = None, node_mask: int = 0,
                   numa_policy: NumaPolicy = NumaPolicy.PREFERRED,
                   expect_uid: Optional[int] = None) -> "Space":
        """``kvrt_space_open``: join (or with ``create`` create) a space and map it.

        ``exclusive`` (EXCL) and ``persist`` (PERSIST) go with ``create``, as
        do the create fields ``mode`` (default 0o600), ``quota_bytes``,
        ``node_mask`` and ``numa_policy``: a join without ``create`` must
        leave them at their defaults (API 4; InvalidArgumentError otherwise).
        ``expect_uid`` joins a space owned by that uid (KVRT_SPACE_FOREIGN,
        join only); without it a join lands only in a space the caller owns.
        Errors are the library's: NotFoundError, ExistsError, AccessError,
        InvalidArgumentError, TooBigError, ...
        """
        opts = _lib.SpaceOptsC()
        opts.name = _checks.space_name(name)
        flags = 0
        if create:
            flags |= _SPACE_CREATE
        if exclusive:
            flags |= _SPACE_EXCL
        if persist:
            flags |= _SPACE_PERSIST
        if expect_uid is not None:
            flags |= _SPACE_FOREIGN
            opts.expect_uid = need_uint(expect_uid, "expect_uid")
        opts.flags = flags
        if mode is None:
            mode = 0o600 if create else 0
        opts.mode = need_uint(mode, "mode")
        if create:
            # libkvrt checks these whenever CREATE is set, even when it joins
            opts.block_bytes = _checks.block_bytes(block_bytes, self._page_size())
            opts.quota_bytes = _checks.quota_bytes(quota_bytes, opts.block_bytes)
        else:
            # a join: 0 or the space's block_bytes, and no quota (the library says)
            opts.block_bytes = need_uint(block_bytes, "block_bytes", 64)
            opts.quota_bytes = need_uint(quota_bytes, "quota_bytes", 64)
        opts.node_mask = need_uint(node_mask, "node_mask", 64)
        opts.numa_policy = int(NumaPolicy(numa_policy))
        ptr = ctypes.c_void_p()
        call("kvrt_space_open", self._ptr(), ctypes.byref(opts), ctypes.byref(ptr),
             detail=f"space {name!r}")
        return Space(self, _handles.SpaceHandle(ptr.value, self._h), name)  # type: ignore

    def create_space(self, name: str, block_bytes: int, quota_bytes: int, *,
                     exclusive: bool = False, persist: bool = False, mode: int = 0o600,
                     node_mask: int = 0,
                     numa_policy: NumaPolicy = NumaPolicy.PREFERRED) -> "Space":
        """Create a space (or join it when present, unless ``exclusive``)."""
        return self.open_space(name, create=True, exclusive=exclusive, persist=persist,
                               block_bytes=block_bytes, quota_bytes=quota_bytes, mode=mode,
                               node_mask=node_mask, numa_policy=numa_policy)

    def join_space(self, name: str, *, block_bytes: int = 0,
                   expect_uid: Optional[int] = None) -> "Space":
        """Join an existing space (NotFoundError when absent)."""
        return self.open_space(name, block_bytes=block_bytes, expect_uid=expect_uid)

    # ---- block copies ---------------------------------------------------

    def _copy(self, dst: BlockArray, src: BlockArray, pairs: PairsLike,
              done: Optional[ctypes.c_void_p]) -> np.ndarray:
        p = check_copy(dst, src, pairs)
        for a, n in ((dst, "dst"), (src, "src")):
            if a.is_cuda:
                raise ValueError(f"{n} is on {a.device}: Pool.copy_blocks copies host memory; "
                                 "for GPU memory use kvrt.gpu.Gpu(pool).copy_blocks")
        call("kvrt_copy_blocks", self._ptr(), ctypes.byref(dst._c), ctypes.byref(src._c),
             pairs_pointer(p), p.shape[0], _COPY_ASYNC if done is not None else 0,
             ctypes.byref(done) if done is not None else None,
             detail="ids < num_blocks, no dst twice, no block both src and dst of one "
                    "array, every pool block inside one space block")
        return p

    def copy_blocks(self, dst: BlockArray, src: BlockArray, pairs: PairsLike) -> None:
        """``kvrt_copy_blocks``: copy whole blocks, synchronously, on the CPU.

        ``pairs``: (src, dst) block ids, as a sequence of tuples or an (n, 2)
        integer array.  All or nothing: the arguments are checked before any
        byte moves (ValueError/TypeError here; the library's checks, such as
        the bounds rule, as KvrtError).
        """
        self._copy(dst, src, pairs, None)

    def copy_blocks_async(self, dst: BlockArray, src: BlockArray, pairs: PairsLike) -> Copy:
        """``kvrt_copy_blocks`` with KVRT_COPY_ASYNC: queued on the handle's copy
        thread (copies complete in submission order); returns a :class:`Copy`
        to ``poll()``/``wait()``.  The arrays are kept alive until it is done."""
        done = ctypes.c_void_p()
        self._copy(dst, src, pairs, done)
        return Copy(done.value, (dst, src, self))  # type: ignore[arg-type]

    def destroy_space(self, name: str) -> None:
        """``kvrt_space_destroy``: unlink a space by name."""
        call("kvrt_space_destroy", self._ptr(), _checks.space_name(name),
             detail=f"space {name!r}")

    def __repr__(self) -> str:
        if self.closed:
            return "<kvrt.Pool closed>"
        return f"<kvrt.Pool {self.backend_info!r}>"


class Space(_Closable):
    """One participant in a space (``struct kvrt_space``); open it with
    :meth:`Pool.open_space`.  A context manager; :meth:`close` frees this
    participant's blocks and references and unmaps, once no numpy view of
    the space is left."""

    def __init__(self, pool: Pool, h: _handles.SpaceHandle, name: str) -> None:
        self._pool = pool  # keeps the Pool object (and its finalizer) alive
        self._h = h
        self.name = name
        self._finalizer = weakref.finalize(self, h.request_close)
        self._events: Optional[np.ndarray] = None
        self._nr: Optional[int] = None

    def _ptr(self) -> int:
        return _handles.live_ptr(self._h, f"space {self.name!r} is closed: open it again with "
                                 "Pool.open_space")

    def _nr_blocks(self) -> int:
        # the ids the library takes are below it; fixed for the space's life
        if self._nr is None:
            self._nr = self.info().nr_blocks
        return self._nr

    def close(self) -> None:
        """Leave the space (idempotent); the mapping stays while views exist."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"<kvrt.Space {self.name!r}{' closed' if self.closed else ''}>"

    # ---- information ----------------------------------------------------

    def info(self) -> SpaceInfo:
        """``kvrt_space_info``."""
        c = _lib.SpaceInfoC()
        call("kvrt_space_info", self._ptr(), ctypes.byref(c))
        d = _struct_dict(c)
        d["created"] = bool(d["created"])
        d["numa_policy"] = NumaPolicy(d["numa_policy"])
        return SpaceInfo(**d)

    def mem_info(self) -> MemInfo:
        """``kvrt_space_mem_info``."""
        c = _lib.MemInfoC()
        call("kvrt_space_mem_info", self._ptr(), ctypes.byref(c))
        return MemInfo(**_struct_dict(c))

    def stats(self) -> SpaceStats:
        """``kvrt_space_stats``: the prefix cache's figures."""
        c = _lib.SpaceStatsC()
        call("kvrt_space_stats", self._ptr(), ctypes.byref(c))
        d = _struct_dict(c)
        return SpaceStats(**d)

    @property
    def pool(self) -> "Pool":
        """The :class:`Pool` this space was opened in."""
        return self._pool

    @property
    def base_address(self) -> int:
        """``kvrt_space_base`` as an int (for C code; prefer the views)."""
        return int(_lib.lib.kvrt_space_base(self._ptr()) or 0)

    # ---- blocks ---------------------------------------------------------

    def alloc(self, count: int) -> np.ndarray:
        """``kvrt_alloc_blocks``: ``count`` blocks, all or none; their ids (uint32)."""
        n = need_int(count, "count")
        if n <= 0 or n > MAX_BATCH:
            raise ValueError(f"count {n}: pass 1..{MAX_BATCH}")
        ids = np.zeros(n, dtype=np.uint32)
        call("kvrt_alloc_blocks", self._ptr(), n, _ptr(ids))
        return ids

    def free(self, ids: IdsLike) -> None:
        """``kvrt_free_blocks``: free blocks this handle owns, all or none.

        A block this handle does not own (another's, free, published or
        cached) is AccessError (EPERM); the message names the block.
        """
        a = _checks.block_ids(ids, nr_blocks=self._nr_blocks())
        # libkvrt does not say which id it refused: one is named, more are listed
        if a.size == 1:
            which = f"block {int(a[0])} is"
        else:
            shown = ", ".join(str(int(i)) for i in a[:8]) + (", ..." if a.size > 8 else "")
            which = f"a block of [{shown}] is"
        call("kvrt_free_blocks", self._ptr(), a.size, _ptr(a),
             why={errno.EPERM: f"{which} not owned by this handle: free only blocks this "
                               "handle allocated and has not published"})

    # ---- prefix cache ---------------------------------------------------

    def publish(self, ids: IdsLike, hashes: HashesLike,
                priorities: Optional[Sequence[int]] = None) -> PublishResult:
        """``kvrt_publish``: publish owned blocks under their 32-byte hashes.

        Each entry leaves one reader reference on ``result.ids[i]``.
        """
        a, h, pr = batch_arrays(ids, hashes, priorities, self._nr_blocks())
        flags = np.zeros(a.size, dtype=np.uint32)
        n = call("kvrt_publish", self._ptr(), a.size, _ptr(a), _ptr(h),
                 _ptr(pr) if pr is not None else None, _ptr(flags))
        return PublishResult(ids=a, dedup=(flags & 1).astype(bool), dedups=n)

    def lookup(self, hashes: HashesLike) -> np.ndarray:
        """``kvrt_lookup``: ids of the longest present prefix of ``hashes``.

        The handle takes one reader reference per hit; :meth:`release` them.
        """
        h = hashes_array(hashes)
        if h.shape[0] == 0:
            raise ValueError("hashes: pass at least one hash")
        ids = np.zeros(h.shape[0], dtype=np.uint32)
        # devices NULL: the library then skips gathering residency bits
        n = call("kvrt_lookup", self._ptr(), h.shape[0], _ptr(h), _ptr(ids), None)
        return ids[:n].copy()

    def lookup_one(self, hash: bytes, tiers: bool = False) -> Optional[Tuple[int, int]]:
        """One 32-byte hash, for schedulers that look keys up one at a time:
        ``(id, where)`` with a reader reference (where: 0 the pool, n the
        n-th tier opened; with ``tiers`` a miss in the pool is read up from
        the tiers, as :meth:`lookup_tiers`), or None.  No arrays: one call."""
        if not isinstance(hash, (bytes, bytearray)) or len(hash) != HASH_BYTES:
            raise TypeError(f"hash: pass {HASH_BYTES} bytes, not {type(hash).__name__}"
                            + (f" of {len(hash)}" if isinstance(hash, (bytes, bytearray))
                               else ""))
        one, where = ctypes.c_uint32(), ctypes.c_uint8()
        if tiers:
            from .tiers import _need_support
            _need_support("kvrt_lookup_tiers", False)
            n = _lib.lib.kvrt_lookup_tiers(self._ptr(), 1, bytes(hash), ctypes.byref(one),
                                           ctypes.byref(where))
        else:
            n = _lib.lib.kvrt_lookup(self._ptr(), 1, bytes(hash), ctypes.byref(one), None)
        if n < 0:
            check(n, "kvrt_lookup_tiers" if tiers else "kvrt_lookup", f"space {self.name!r}")
        return (one.value, where.value) if n else None

    def lookup_with_devices(self, hashes: HashesLike) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup`, plus each hit's residency device bits (uint64)."""
        h = hashes_array(hashes)
        if h.shape[0] == 0:
            raise ValueError("hashes: pass at least one hash")
        ids = np.zeros(h.shape[0], dtype=np.uint32)
        dev = np.zeros(h.shape[0], dtype=np.uint64)
        n = call("kvrt_lookup", self._ptr(), h.shape[0], _ptr(h), _ptr(ids), _ptr(dev))
        return ids[:n].copy(), dev[:n].copy()

    def release(self, ids: IdsLike) -> None:
        """``kvrt_release``: drop one reader reference per listed id."""
        a = _checks.block_ids(ids, nr_blocks=self._nr_blocks())
        call("kvrt_release", self._ptr(), a.size, _ptr(a))

    # ---- tiers below the pool (kvrt.tiers) -------------------------------

    def open_ssd_tier(self, path: Any, capacity_bytes: int, *, queue_depth: int = 0,
                      layout: Optional[Layout] = None, write_back: bool = False,
                      writeback_max: int = 0, key_file: Any = None) -> "Tier":
        """``kvrt_tier_open_ssd``: this space's SSD tier below ``path`` (O_DIRECT through
        io_uring; survives restarts).  ``layout`` joins the identity; ``write_back``
        queues stores for the tier's thread (``writeback_max`` blocks at most);
        ``key_file`` (yours, mode 0600) holds the tenant's key that tags each block
        (None: the tier directory's own key).  ``path`` must be yours or root's, sticky
        if others may write it."""
        from .tiers import open_ssd
        return open_ssd(self, path, capacity_bytes, queue_depth=queue_depth, layout=layout,
                        write_back=write_back, writeback_max=writeback_max, key_file=key_file)

    def open_redis_tier(self, nodes: str, *, user: Optional[str] = None,
                        password: Optional[str] = None, key_prefix: Optional[str] = None,
                        timeout_ms: int = 0, layout: Optional[Layout] = None, ttl_s: int = 0,
                        write_back: bool = False, writeback_max: int = 0,
                        key_file: Any = None) -> "Tier":
        """``kvrt_tier_open_redis``: a Redis Cluster tier shared by many hosts, as the
        tenant's ACL ``user``, under its ``key_prefix``; ``key_file`` (yours, mode 0600)
        holds the tenant's tier key (None: derived from user and password)."""
        from .tiers import open_redis
        return open_redis(self, nodes, user=user, password=password, key_prefix=key_prefix,
                          timeout_ms=timeout_ms, layout=layout, ttl_s=ttl_s,
                          write_back=write_back, writeback_max=writeback_max,
                          key_file=key_file)

    def lookup_tiers(self, hashes: HashesLike) -> Tuple[np.ndarray, np.ndarray]:
        """``kvrt_lookup_tiers``: ids of the longest prefix found in the pool or a tier,
        and where each came from (0 the pool, n the n-th tier opened).  One reader
        reference per hit, as :meth:`lookup`; :meth:`release` them."""
        from .tiers import lookup
        return lookup(self, hashes)

    def tier_contains(self, hashes: HashesLike) -> Tuple[int, np.ndarray]:
        """``kvrt_tier_contains`` (libkvrt 0.9): how many leading ``hashes`` this
        handle's tiers hold, and which tier (n: the n-th opened) holds each; the
        pool is not asked, nothing is read or allocated (the SSD tier's index;
        Redis EXISTS).  :meth:`lookup_tiers` has the last word."""
        from .tiers import contains
        return contains(self, hashes)

    def tier_store(self, ids: IdsLike, hashes: HashesLike,
                   priorities: Optional[Sequence[int]] = None) -> int:
        """``kvrt_tier_store``: write (or queue, write-back) blocks to every tier that
        lacks them; the most written or queued by any tier."""
        from .tiers import store
        return store(self, ids, hashes, priorities)

    def tier_flush(self) -> None:
        """``kvrt_tier_flush``: wait for the write-back queues; raises their first error
        since the last flush (once)."""
        from .tiers import flush
        flush(self)

    # ---- residency ------------------------------------------------------

    @staticmethod
    def _uuid(uuid: bytes) -> bytes:
        if not isinstance(uuid, (bytes, bytearray)) or len(uuid) != _lib.UUID_BYTES:
            raise TypeError(f"uuid: pass the device's {_lib.UUID_BYTES}-byte UUID as bytes")
        return bytes(uuid)

    def residency_add(self, uuid: bytes, entries: Sequence[Tuple[int, int]]) -> int:
        """``kvrt_residency_add``: (host block, gpu block) pairs; returns the device slot."""
        u = self._uuid(uuid)
        arr = (_lib.ResidencyEntryC * max(len(entries), 1))()
        for i, (b, g) in enumerate(entries):
            arr[i].block = _checks.block_id(b, f"entries[{i}] block", self._nr_blocks())
            arr[i].gpu_block = need_uint(g, "gpu_block")
        return call("kvrt_residency_add", self._ptr(), u, len(entries),
                    ctypes.cast(arr, ctypes.c_void_p) if entries else None)

    def residency_del(self, uuid: bytes, blocks: IdsLike) -> int:
        """``kvrt_residency_del``."""
        u = self._uuid(uuid)
        a = _checks.block_ids(blocks, "blocks", self._nr_blocks())
        return call("kvrt_residency_del", self._ptr(), u, a.size, _ptr(a))

    def residency_clear(self, uuid: bytes) -> int:
        """``kvrt_residency_clear``."""
        return call("kvrt_residency_clear", self._ptr(), self._uuid(uuid))

    # ---- events ---------------------------------------------------------

    def fileno(self) -> int:
        """``kvrt_events_fd``: readable while events are pending.

        For ``selectors``/``select``/``asyncio`` (``loop.add_reader``); do not
        read or close it: use :meth:`read_events`.
        """
        return call("kvrt_events_fd", self._ptr())

    def read_events(self, max_events: int = 64) -> List[Event]:
        """``kvrt_read_events``: up to ``max_events`` pending events, never waits."""
        n = need_int(max_events, "max_events")
        if n <= 0:
            raise ValueError(f"max_events {n}: pass a positive count")
        buf = (_lib.EventC * n)()
        got = call("kvrt_read_events", self._ptr(), buf, n)
        return [Event(seq=e.seq, type=EventType(e.type), cause=e.cause, block=e.block,
                      count=e.count, hash=bytes(e.hash)) for e in buf[:got]]

    def events(self) -> Iterator[Event]:
        """Iterate over the events pending now (stops when none is left)."""
        while True:
            batch = self.read_events(64)
            if not batch:
                return
            yield from batch

    # ---- layouts and views ----------------------------------------------

    def layout_for(self, layout: Layout) -> Layout:
        """``kvrt_layout_for_space``: a copy of ``layout`` addressing this space's blocks."""
        if not isinstance(layout, Layout):
            raise TypeError("layout: pass a kvrt.Layout (Layout.preset(...))")
        lay = layout.copy()
        call("kvrt_layout_for_space", ctypes.byref(lay._c), self._ptr())
        return lay

    def block_array(self, layout: Layout) -> BlockArray:
        """The whole space as a :class:`BlockArray` (``kvrt_layout_for_space``):
        block id i of the array is block id i of the space.

        ``layout``: the block-major preset of the model's shape (any
        num_blocks); for fp8 either that preset or it after
        :meth:`Layout.inline_scales`: the scales go inside each block.  The
        array keeps the space mapped while it exists, as views do.
        """
        if not isinstance(layout, Layout):
            raise TypeError("layout: pass a kvrt.Layout (Layout.preset(...))")
        lay = layout.copy()
        off = None
        if lay.dtype == DType.FP8_E4M3:
            plain = Layout.preset(LayoutKind.BLOCK_MAJOR, lay.num_layers, lay.num_kv_heads,
                                  lay.head_dim, lay.block_tokens, lay.num_blocks, lay.dtype)
            inl = plain.copy()
            off = inl.inline_scales()
            fields = [f for f, _ in _lib.LayoutC._fields_]
            same = lambda a, b: all(getattr(a, f) == getattr(b, f) for f in fields)  # noqa: E731
            if same(lay, plain):
                lay = inl
            elif not same(lay, inl):
                raise ValueError("fp8 layout: pass the block-major preset, or it after "
                                 "inline_scales(): a pool block holds its own scales")
        lay = self.layout_for(lay)
        info = self.info()
        iface = {"version": 3, "data": (self.base_address, False), "shape": (info.map_bytes,),
                 "strides": None, "typestr": "|u1"}
        whole = np.asarray(_handles.ViewOwner(self._h, iface))
        return BlockArray(lay, whole, scales_offset=off)

    def _view(self, first: int, count: int, layout: Optional[Layout],
              squeeze: bool) -> np.ndarray:
        info = self.info()
        if count <= 0:
            raise ValueError(f"count {count}: pass at least one block")
        if first < 0 or first + count > info.backed_blocks:
            raise IndexError(f"blocks [{first}, {first + count}) are outside the backed "
                             f"range [0, {info.backed_blocks}): allocate them first")
        base = int(_lib.lib.kvrt_block_addr(self._ptr(), first) or 0)
        if not base:
            raise IndexError(f"block {first}: outside the space")
        bb = info.block_bytes
        if layout is None:
            shape: Tuple[int, ...] = (count, bb)
            strides: Tuple[int, ...] = (bb, 1)
            typestr = "|u1"
        else:
            if not isinstance(layout, Layout):
                raise TypeError("layout: pass a kvrt.Layout or None for raw bytes")
            lay = self.layout_for(layout)  # checks the block fits (TooBigError)
            if lay.extent() - (lay.num_blocks - 1) * lay.block_stride > bb:
                raise ValueError("layout: its block does not fit in the space's block_bytes")
            shape = (count,) + lay.block_shape()
            strides = (bb,) + lay.block_strides()
            typestr = lay.dtype.numpy.str
        iface = {"version": 3, "data": (base, False), "shape": shape,
                 "strides": strides, "typestr": typestr}
        arr = np.asarray(_handles.ViewOwner(self._h, iface))
        return arr[0] if squeeze else arr

    def block_view(self, block: int, layout: Optional[Layout] = None) -> np.ndarray:
        """A zero-copy array over block ``block``.

        Without a layout: ``block_bytes`` uint8.  With a block-major layout:
        shape ``(num_layers, 2, block_tokens, num_kv_heads, head_dim)`` of its
        dtype (bf16 and fp8 as raw ``uint16``/``uint8``).  The view keeps
        the space mapped until it is gone, even past :meth:`close`.
        """
        return self._view(need_int(block, "block"), 1, layout, True)

    def blocks_view(self, first: int, count: int,
                    layout: Optional[Layout] = None) -> np.ndarray:
        """Blocks ``first .. first + count - 1`` as one array, leading axis the block."""
        return self._view(need_int(first, "first"), need_int(count, "count"), layout, False)

    def view(self, layout: Optional[Layout] = None) -> np.ndarray:
        """Every backed block of the space (as :meth:`blocks_view` from 0)."""
        n = self.info().backed_blocks
        if n == 0:
            raise IndexError("the space has no backed block yet: allocate first")
        return self._view(0, n, layout, False)
