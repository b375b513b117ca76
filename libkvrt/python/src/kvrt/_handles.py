# SPDX-License-Identifier: MIT
"""Lifetimes of the C handles, so that nothing Python holds can dangle.

libkvrt's rules: kvrt_close() closes the handle's spaces; a space's
mapping goes with kvrt_space_close().  The Python rules built on them:

- a :class:`SpaceHandle` holds its :class:`PoolHandle`, so the pool's C
  handle is closed only after every space's;
- every numpy view holds a :class:`ViewOwner`, which holds the
  SpaceHandle, so a space is unmapped only after its last view is gone;
- closing (explicitly, by ``with``, or by garbage collection of the public
  object) *requests* the close; the C close runs once nothing needs the
  handle any more.  A closed Python object refuses further calls.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Set

from . import _lib

_lock = threading.RLock()

#: Counts for the tests: C handles opened and closed so far.
counters: Dict[str, int] = {"pools_opened": 0, "pools_closed": 0, "spaces_opened": 0,
                            "spaces_closed": 0, "views_alive": 0}


def live_ptr(h: Any, closed: str) -> int:
    """The handle's C pointer; ValueError(closed) once its close was asked for."""
    p = h.ptr
    if p is None or h.close_requested:
        raise ValueError(closed)
    return p


class CloseOnCollect:
    """Mixin: ``close()`` when garbage collected; an error then (at
    interpreter shutdown, the library may be gone) is dropped."""

    def close(self) -> None:
        raise NotImplementedError

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class PoolHandle:
    __slots__ = ("ptr", "close_requested", "spaces", "__weakref__")

    def __init__(self, ptr: int) -> None:
        self.ptr: Optional[int] = ptr
        self.close_requested = False
        self.spaces: Set["SpaceHandle"] = set()
        counters["pools_opened"] += 1

    def request_close(self) -> None:
        with _lock:
            if self.close_requested:
                return
            self.close_requested = True
            for s in list(self.spaces):
                s.request_close()
            self._maybe_close()

    def _maybe_close(self) -> None:
        if self.close_requested and not self.spaces and self.ptr is not None:
            ptr, self.ptr = self.ptr, None
            _lib.lib.kvrt_close(ptr)
            counters["pools_closed"] += 1

    def space_gone(self, s: "SpaceHandle") -> None:
        with _lock:
            self.spaces.discard(s)
            self._maybe_close()


class SpaceHandle:
    __slots__ = ("ptr", "pool", "close_requested", "views", "__weakref__")

    def __init__(self, ptr: int, pool: PoolHandle) -> None:
        self.ptr: Optional[int] = ptr
        self.pool = pool
        self.close_requested = False
        self.views = 0
        with _lock:
            pool.spaces.add(self)
        counters["spaces_opened"] += 1

    def request_close(self) -> None:
        with _lock:
            self.close_requested = True
            self._maybe_close()

    def _maybe_close(self) -> None:
        if self.close_requested and self.views == 0 and self.ptr is not None:
            ptr, self.ptr = self.ptr, None
            _lib.lib.kvrt_space_close(ptr)
            counters["spaces_closed"] += 1
            self.pool.space_gone(self)

    def view_added(self) -> None:
        with _lock:
            self.views += 1
            counters["views_alive"] += 1

    def view_gone(self) -> None:
        with _lock:
            self.views -= 1
            counters["views_alive"] -= 1
            self._maybe_close()


class ViewOwner:
    """The base object of a numpy view over a space's mapping.

    numpy reads ``__array_interface__`` once and keeps this object as the
    array's ``base`` (every further view of the array keeps it too), so the
    mapping stays until the last array over it is gone.
    """

    __slots__ = ("__array_interface__", "_space", "__weakref__")

    def __init__(self, space: SpaceHandle, interface: Dict[str, Any]) -> None:
        self.__array_interface__ = interface
        self._space: Optional[SpaceHandle] = space
        space.view_added()

    def __del__(self) -> None:
        s, self._space = self._space, None
        if s is not None:
            s.view_gone()
