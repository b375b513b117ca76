# SPDX-License-Identifier: MIT
"""The arrays a batch call hands libkvrt: hashes as (n, 32) uint8, a
publish's ids, hashes and priorities.  Shared by pool.py and tiers.py
(which kvrt.pool also imports), so it lives below both."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import _checks, _lib

IdsLike = Union[Sequence[int], np.ndarray]
HashesLike = Union[bytes, bytearray, memoryview, Sequence[bytes], np.ndarray]

HASH_BYTES = _lib.HASH_BYTES
MAX_BATCH = _lib.MAX_BATCH


def hashes_array(hashes: HashesLike, what: str = "hashes") -> np.ndarray:
    """A contiguous (n, 32) uint8 array from hashes given as bytes or arrays."""
    if isinstance(hashes, (bytes, bytearray, memoryview)):
        b = bytes(hashes)
        if len(b) % HASH_BYTES:
            raise ValueError(f"{what}: {len(b)} bytes is not a multiple of {HASH_BYTES}: "
                             "pass concatenated 32-byte digests or a list of them")
        arr = np.frombuffer(b, dtype=np.uint8).reshape(-1, HASH_BYTES).copy()
    elif isinstance(hashes, np.ndarray):
        if hashes.dtype != np.uint8:
            raise TypeError(f"{what}: pass a uint8 array of shape (n, 32), not {hashes.dtype}")
        if hashes.ndim == 1 and hashes.size == HASH_BYTES:
            hashes = hashes.reshape(1, HASH_BYTES)
        if hashes.ndim != 2 or hashes.shape[1] != HASH_BYTES:
            raise ValueError(f"{what}: pass shape (n, 32), not {hashes.shape}")
        arr = np.ascontiguousarray(hashes)
    elif isinstance(hashes, str):
        raise TypeError(f"{what}: pass 32-byte bytes digests, not str")
    else:
        rows = []
        for n, h in enumerate(hashes):
            if not isinstance(h, (bytes, bytearray, memoryview)):
                raise TypeError(f"{what}[{n}]: pass a 32-byte bytes digest, not "
                                f"{type(h).__name__}")
            if len(h) != HASH_BYTES:
                raise ValueError(f"{what}[{n}]: {len(h)} bytes; a digest is {HASH_BYTES}")
            rows.append(bytes(h))
        arr = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, HASH_BYTES).copy()
    if arr.shape[0] > MAX_BATCH:
        raise ValueError(f"{what}: {arr.shape[0]} hashes; pass at most {MAX_BATCH} per call")
    return arr


def batch_arrays(ids: IdsLike, hashes: HashesLike, priorities: Optional[Sequence[int]],
                 nr_blocks: Optional[int] = None
                 ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """A publish's (or tier store's) arrays: ids (a copy), one hash and at most
    one priority each."""
    a = _checks.block_ids(ids, nr_blocks=nr_blocks).copy()
    h = hashes_array(hashes)
    if h.shape[0] != a.size:
        raise ValueError(f"hashes: {h.shape[0]} given for {a.size} ids; pass one each")
    return a, h, _checks.priorities(priorities, a.size)
