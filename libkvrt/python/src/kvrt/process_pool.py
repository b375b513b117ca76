# SPDX-License-Identifier: MIT
"""One Pool per process and set of open options, shared by engine adapters.

With the embedded backend the pool is the process's own memory, so every
user in one process (vLLM's scheduler and worker at TP=1, several SGLang
storage instances) must hold the same Pool to meet in a space, as separate
processes do through the module.  Counted: the last release closes it.
"""
from __future__ import annotations

import threading
from typing import Dict, List, Optional, Tuple

from .pool import Pool

_Key = Tuple[str, Optional[str], int]
_pools: Dict[_Key, List] = {}   # key -> [Pool, holders]
_lock = threading.Lock()


def acquire(backend: str, device: Optional[str] = None, pool_bytes: int = 0) -> Pool:
    """The process's Pool for these options, opened on first use; counted."""
    key = (backend, device, pool_bytes)
    with _lock:
        ent = _pools.get(key)
        if ent is None or ent[0].closed:
            ent = [Pool(backend, device=device, pool_bytes=pool_bytes), 0]
            _pools[key] = ent
        ent[1] += 1
        return ent[0]


def release(pool: Pool) -> None:
    """Undo one :func:`acquire`; the last one closes the Pool."""
    with _lock:
        for key, ent in list(_pools.items()):
            if ent[0] is pool:
                ent[1] -= 1
                if ent[1] <= 0:
                    del _pools[key]
                    pool.close()
                return
