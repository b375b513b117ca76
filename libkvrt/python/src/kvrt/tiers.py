# SPDX-License-Identifier: MIT
"""Tiers below the pool (libkvrt 0.6; write-back 0.7): ``struct kvrt_tier``.

A tier keeps a space's blocks, by their chained prefix hashes, below host
memory: on a local SSD (:meth:`Space.open_ssd_tier`) or on a Redis Cluster
shared by many hosts (:meth:`Space.open_redis_tier`).  The space handle
that opened a tier uses it: :meth:`Space.lookup_tiers` asks the pool,
then each tier in the order opened, and brings hits up into the pool;
:meth:`Space.tier_store` writes blocks to every tier (or queues them, for
a tier opened with ``write_back=True``); :meth:`Space.tier_flush` waits
for the queues.  A tier stays open until :meth:`Tier.close` or until its
space closes; dropping the :class:`Tier` object does not close it.

Documentation/libkvrt.rst ("Tiers below the pool") has the formats, the
isolation model on Redis and the failure behaviour.
"""
from __future__ import annotations

import ctypes
import dataclasses
import enum
import errno
import logging
import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._arrays import HashesLike, IdsLike, batch_arrays, hashes_array
from ._call import call, need_uint
from .errors import make_error, too_old
from .layout import Layout

if TYPE_CHECKING:
    from .pool import Space

WRITE_BACK = 0x1  # KVRT_TIER_WRITE_BACK
logger = logging.getLogger("kvrt")


class TierKind(enum.IntEnum):
    SSD = 1
    REDIS = 2


@dataclasses.dataclass(frozen=True)
class TierStats:
    """``struct kvrt_tier_stats``.  On Redis, capacity, used bytes and blocks
    are not known to the client (0); ``queued`` and ``deferred`` are the
    write-back queue's (0 for a write-through tier)."""

    kind: TierKind
    capacity_bytes: int
    used_bytes: int
    blocks: int
    hits: int
    misses: int
    stores: int
    store_skips: int
    read_bytes: int
    write_bytes: int
    evictions: int
    checksum_errors: int
    io_errors: int
    redirects: int
    queued: int
    deferred: int


def _need_support(function: str, write_back: bool) -> None:
    why = _lib.tiers_missing or (_lib.write_back_missing if write_back else None)
    if why is not None:
        raise too_old(function, why)


def _policy(write_back: bool, writeback_max: int) -> Tuple[int, int]:
    if not isinstance(write_back, bool):
        raise TypeError(f"write_back: pass True or False, not {type(write_back).__name__}")
    wm = need_uint(writeback_max, "writeback_max")
    if wm and not write_back:
        raise ValueError("writeback_max bounds a write-back queue: pass write_back=True too, "
                         "or leave it 0")
    if wm > _lib.MAX_BATCH:
        raise ValueError(f"writeback_max {wm}: pass 0 (the default) to {_lib.MAX_BATCH}")
    return (WRITE_BACK if write_back else 0), wm


def _layout_ptr(layout: Optional[Layout]) -> Optional[ctypes._Pointer]:  # type: ignore[type-arg]
    if layout is None:
        return None
    if not isinstance(layout, Layout):
        raise TypeError("layout: pass a kvrt.Layout (part of the tier's identity) or None")
    return ctypes.pointer(layout._c)


def _path_arg(value: Any, what: str, advice: str) -> str:
    """value as a path, or a TypeError / ValueError that names ``what`` and says ``advice``."""
    try:
        p = os.fspath(value)
    except TypeError:
        raise TypeError(f"{what}: pass a path (str or os.PathLike), not "
                        f"{type(value).__name__}") from None
    if not isinstance(p, str) or not p or "\0" in p:
        raise ValueError(f"{what}: {value!r}; {advice}")
    return p


_KEY_FILE_ADVICE = "pass the path of a file of yours, mode 0600, with 16 to 4096 bytes of secret"


def _key_file(key_file: Any) -> Optional[bytes]:
    """key_file as the C string the opts take; a missing file or a bad value raises
    here, naming key_file (the library's -ENOENT would not say which path)."""
    if key_file is None:
        return None
    k = _path_arg(key_file, "key_file", _KEY_FILE_ADVICE)
    if not os.path.lexists(k):
        raise FileNotFoundError(errno.ENOENT, f"key_file {k!r}: no such file; "
                                + _KEY_FILE_ADVICE.replace("pass the path of", "pass"))
    return k.encode()


def create_tier_key(path: Any) -> None:
    """``kvrt_tier_key_create``: a new key file at ``path`` (mode 0600, 32 random bytes,
    never overwriting a file, never following a symlink), to pass as ``key_file``."""
    if _lib.tier_keys_missing:
        raise too_old("kvrt_tier_key_create", _lib.tier_keys_missing)
    p = _path_arg(path, "path", "pass the path of a new file in a directory of yours")
    ret = _lib.lib.kvrt_tier_key_create(p.encode())
    if ret < 0:
        hint = {errno.EEXIST: f"{p!r} exists: a key is never overwritten; pass it as key_file, "
                              "or remove it first if it is really unused",
                errno.ENOENT: f"the directory of {p!r} does not exist: create it (mode 0700)"}
        raise make_error(ret, "kvrt_tier_key_create", None, hint.get(-ret, p))


def _text(v: Optional[str], what: str) -> Optional[bytes]:
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{what}: pass a str, not {type(v).__name__}")
    return v.encode()


#: errno -> what to do, for the opens.
_SSD_HINTS: Dict[int, str] = {
    errno.EBUSY: "another process or handle has this space's tier directory open: one user "
                 "per identity; the other processes reach its blocks through the pool",
    errno.ENOSYS: "io_uring is not available here (kernel.io_uring_disabled, a seccomp "
                  "filter)",
    errno.EINVAL: "capacity_bytes must hold one block and be at most 2**50 and 2**31 blocks; "
                  "queue_depth at "
                  "most 4096; and the file system must take O_DIRECT (tmpfs does not before "
                  "Linux 6.6); key_file, when given, a regular file of 16 to 4096 bytes",
    errno.EPERM: "key_file, when given, must be yours with mode 0600; the directory must be "
                 "yours or root's, sticky if others may write it, and the space's identity "
                 "directory below it yours, 0700 (another user may have made it first: the "
                 "library's log names it)",
    errno.ELOOP: "key_file, or an entry of the tier's identity directory, is a symlink: pass "
                 "the file itself",
}
_REDIS_HINTS: Dict[int, str] = {
    errno.EACCES: "the cluster refused these credentials: pass the tenant's ACL user and "
                  "password",
    errno.ECONNREFUSED: "no seed answered: pass host:port of running cluster nodes",
    errno.ETIMEDOUT: "no seed answered within timeout_ms",
    errno.EPROTO: "the seeds are not a Redis Cluster (cluster-enabled yes)",
    errno.EINVAL: "nodes is host:port[,host:port...]; key_prefix at most 128 bytes; "
                  "key_file, when given, a regular file of 16 to 4096 bytes",
    errno.EPERM: "key_file must be yours with mode 0600 (chmod 600 KEY_FILE)",
    errno.ELOOP: "key_file is a symlink: pass the file itself",
}
_STORE_HINTS: Dict[int, str] = {
    errno.ENODEV: "no tier is open on this space handle: open one first "
                  "(Space.open_ssd_tier, Space.open_redis_tier)",
}


class Tier:
    """One tier of a space handle (``struct kvrt_tier``)."""

    def __init__(self, space: "Space", ptr: int, kind: TierKind, where: str) -> None:
        self._space = space
        self._p: Optional[int] = ptr
        self.kind = kind
        self.where = where

    def _ptr(self) -> int:
        if self._p is None:
            raise ValueError(f"{self!r} is closed: open it again on its space")
        self._space._ptr()  # a closed space closed its tiers: raises
        return self._p

    @property
    def closed(self) -> bool:
        return self._p is None or self._space.closed

    def close(self) -> None:
        """``kvrt_tier_close`` (idempotent): writes what a write-back tier has queued first."""
        p, self._p = self._p, None
        if p is not None and not self._space.closed:
            _lib.lib.kvrt_tier_close(p)

    def stats(self) -> TierStats:
        """``kvrt_tier_stats``."""
        c = _lib.TierStatsC()
        call("kvrt_tier_stats", self._ptr(), ctypes.byref(c))
        d = {f: getattr(c, f) for f, _ in c._fields_ if not f.startswith("reserved")}
        d["kind"] = TierKind(d["kind"])
        return TierStats(**d)

    def __enter__(self) -> "Tier":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kvrt.Tier {self.kind.name.lower()}:{self.where}{' closed' if self.closed else ''}>"


def _open(space: "Space", kind: TierKind, opts: ctypes.Structure, layout: Optional[Layout],
          where: str) -> Tier:
    """kvrt_tier_open_ssd or _redis with these options (and layout, if any)."""
    lay = _layout_ptr(layout)
    if lay is not None:
        opts.layout = lay  # type: ignore[attr-defined]
    out = ctypes.c_void_p()
    name = "kvrt_tier_open_ssd" if kind == TierKind.SSD else "kvrt_tier_open_redis"
    call(name, space._ptr(), ctypes.byref(opts), ctypes.byref(out), detail=where,
         why=_SSD_HINTS if kind == TierKind.SSD else _REDIS_HINTS)
    return Tier(space, int(out.value or 0), kind, where)


def open_ssd(space: "Space", path: Union[str, os.PathLike], capacity_bytes: int, *,
             queue_depth: int = 0, layout: Optional[Layout] = None, write_back: bool = False,
             writeback_max: int = 0, key_file: Any = None) -> Tier:
    _need_support("kvrt_tier_open_ssd", write_back)
    d = os.fspath(path)
    if not isinstance(d, str) or not d:
        raise ValueError("path: pass the directory the tier lives below (created 0700)")
    flags, wm = _policy(write_back, writeback_max)
    o = _lib.TierSsdOptsC(dir=d.encode(), capacity_bytes=need_uint(capacity_bytes,
                                                                     "capacity_bytes", 64),
                          queue_depth=need_uint(queue_depth, "queue_depth"), flags=flags,
                          writeback_max=wm, key_file=_key_file(key_file))
    return _open(space, TierKind.SSD, o, layout, d)


def open_redis(space: "Space", nodes: str, *, user: Optional[str] = None,
               password: Optional[str] = None, key_prefix: Optional[str] = None,
               timeout_ms: int = 0, layout: Optional[Layout] = None, ttl_s: int = 0,
               write_back: bool = False, writeback_max: int = 0, key_file: Any = None) -> Tier:
    _need_support("kvrt_tier_open_redis", write_back)
    if not isinstance(nodes, str) or not nodes:
        raise ValueError("nodes: pass the cluster's seeds, \"host:port[,host:port...]\"")
    flags, wm = _policy(write_back, writeback_max)
    if key_prefix is not None and len(key_prefix.encode()) > 128:
        raise ValueError("key_prefix: at most 128 bytes (the tenant's ACL pattern, e.g. "
                         "\"tenA:\")")
    o = _lib.TierRedisOptsC(nodes=nodes.encode(), user=_text(user, "user"),
                            password=_text(password, "password"),
                            key_prefix=_text(key_prefix, "key_prefix"),
                            timeout_ms=need_uint(timeout_ms, "timeout_ms"), flags=flags,
                            ttl_s=need_uint(ttl_s, "ttl_s"), writeback_max=wm,
                            key_file=_key_file(key_file))
    return _open(space, TierKind.REDIS, o, layout, nodes)


def lookup(space: "Space", hashes: "HashesLike") -> Tuple[np.ndarray, np.ndarray]:
    _need_support("kvrt_lookup_tiers", False)
    h = hashes_array(hashes)
    if h.shape[0] == 0:
        raise ValueError("hashes: pass at least one hash")
    ids = np.zeros(h.shape[0], dtype=np.uint32)
    where = np.zeros(h.shape[0], dtype=np.uint8)
    n = call("kvrt_lookup_tiers", space._ptr(), h.shape[0], h.ctypes.data, ids.ctypes.data,
             where.ctypes.data)
    return ids[:n].copy(), where[:n].copy()


def contains(space: "Space", hashes: "HashesLike") -> Tuple[int, np.ndarray]:
    _need_support("kvrt_tier_contains", False)
    if _lib.tier_contains_missing:
        raise too_old("kvrt_tier_contains", _lib.tier_contains_missing)
    h = hashes_array(hashes)
    if h.shape[0] == 0:
        raise ValueError("hashes: pass at least one hash")
    where = np.zeros(h.shape[0], dtype=np.uint8)
    n = call("kvrt_tier_contains", space._ptr(), h.shape[0], h.ctypes.data,
             where.ctypes.data)
    return n, where[:n].copy()


def store(space: "Space", ids: "IdsLike", hashes: "HashesLike",
          priorities: Optional[Sequence[int]] = None) -> int:
    _need_support("kvrt_tier_store", False)
    a, h, pr = batch_arrays(ids, hashes, priorities, space._nr_blocks())
    return call("kvrt_tier_store", space._ptr(), a.size, a.ctypes.data, h.ctypes.data,
                pr.ctypes.data if pr is not None else None, why=_STORE_HINTS)


def flush(space: "Space") -> None:
    _need_support("kvrt_tier_flush", True)
    call("kvrt_tier_flush", space._ptr())


# ---- an engine connector's tier keys (kvrt.vllm, kvrt.sglang) --------------------

#: The tier keys of the engines' extra configs, with their meaning.
CONFIG_KEYS: Dict[str, str] = {
    "kvpool_tier_ssd": "a directory: libkvrt's SSD tier below the pool (O_DIRECT, survives "
                       "restarts): a restarted engine finds its blocks there",
    "kvpool_tier_ssd_bytes": "the SSD tier's capacity (default 4 x the space's quota)",
    "kvpool_tier_redis": "host:port[,host:port...] of a Redis Cluster: a tier shared by hosts "
                         "(the ACL user and password from $KVRT_REDIS_USER and "
                         "$KVRT_REDIS_PASSWORD)",
    "kvpool_tier_redis_prefix": "the tenant's key prefix on Redis (default 'kvt:')",
    "kvpool_tier_write_back": "true (default): stored blocks go to the tiers from their "
                              "own threads; false: before the store completes",
    "kvpool_tier_key_file": "a file of yours, mode 0600, 16 to 4096 bytes of secret: the "
                            "tenant's key that tags the tiers' blocks (default: the SSD "
                            "directory's own key; on Redis, derived from user and password)",
}


@dataclasses.dataclass(frozen=True)
class TierConfig:
    """The tiers an engine's configuration names (:data:`CONFIG_KEYS`), checked."""

    ssd: Optional[str] = None
    ssd_bytes: int = 0
    redis: Optional[str] = None
    redis_prefix: Optional[str] = None
    write_back: bool = True
    key_file: Optional[str] = None

    def __bool__(self) -> bool:
        return self.ssd is not None or self.redis is not None

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> "TierConfig":
        """Parse; ValueError/TypeError name the key and what to pass."""
        def _str(key: str) -> Optional[str]:
            v = extra.get(key)
            if v is None:
                return None
            if not isinstance(v, str):
                raise TypeError(f"{key}: pass a string, not {type(v).__name__}")
            if not v:
                raise ValueError(f"{key}: pass a non-empty value, or leave the key out")
            return v

        wb = extra.get("kvpool_tier_write_back", True)
        if isinstance(wb, str) and wb.lower() in ("true", "false"):
            wb = wb.lower() == "true"
        if not isinstance(wb, bool):
            raise TypeError(f"kvpool_tier_write_back: pass true or false, not {wb!r}")
        nb = extra.get("kvpool_tier_ssd_bytes", 0)
        # Decimal strings too, as the quota keys take them (JSON from a CLI).
        if isinstance(nb, str) and nb.strip().isdigit():
            nb = int(nb)
        if isinstance(nb, bool) or not isinstance(nb, int) or not 0 <= nb <= 1 << 50:
            raise ValueError(f"kvpool_tier_ssd_bytes: {nb!r}; pass a byte count up to 2**50")
        ssd, redis, prefix = (_str("kvpool_tier_ssd"), _str("kvpool_tier_redis"),
                              _str("kvpool_tier_redis_prefix"))
        key_file = _str("kvpool_tier_key_file")
        if nb and ssd is None:
            raise ValueError("kvpool_tier_ssd_bytes sizes the SSD tier: pass kvpool_tier_ssd "
                             "(its directory) too")
        if prefix is not None and redis is None:
            raise ValueError("kvpool_tier_redis_prefix belongs to the Redis tier: pass "
                             "kvpool_tier_redis (its seeds) too")
        if key_file is not None and ssd is None and redis is None:
            raise ValueError("kvpool_tier_key_file keys the tiers: pass kvpool_tier_ssd or "
                             "kvpool_tier_redis too")
        return cls(ssd=ssd, ssd_bytes=nb, redis=redis, redis_prefix=prefix, write_back=wb,
                   key_file=key_file)

    def open(self, space: "Space", quota_bytes: int) -> List[Tier]:
        """The tiers, on this handle of the space (SSD first: the nearer tier is
        asked first); they close with the space.  An SSD tier that another
        process of the host has open (EBUSY) is left out with a warning: its
        hits reach this process through the pool.  Other errors raise, naming
        the key."""
        tiers: List[Tier] = []
        try:
            if self.ssd is not None:
                try:
                    tiers.append(open_ssd(space, self.ssd, self.ssd_bytes or 4 * quota_bytes,
                                          write_back=self.write_back, key_file=self.key_file))
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        raise type(e)(e.errno, f"kvpool_tier_ssd {self.ssd!r}: "
                                               f"{e.strerror}") from None
                    logger.warning("kvpool_tier_ssd %r: another process of this host has "
                                   "the tier of space %s open; its blocks reach this one "
                                   "through the pool", self.ssd, space.name)
            if self.redis is not None:
                try:
                    tiers.append(open_redis(space, self.redis,
                                            user=os.environ.get("KVRT_REDIS_USER"),
                                            password=os.environ.get("KVRT_REDIS_PASSWORD"),
                                            key_prefix=self.redis_prefix,
                                            write_back=self.write_back,
                                            key_file=self.key_file))
                except OSError as e:
                    raise type(e)(e.errno, f"kvpool_tier_redis {self.redis!r}: "
                                           f"{e.strerror}") from None
        except BaseException:
            for t in tiers:
                t.close()
            raise
        return tiers
