# SPDX-License-Identifier: MIT
"""kvrt.h's argument rules, checked once here before libkvrt is called.

One helper per rule, used by every caller, so each refusal says the rule in
words (ValueError/TypeError).  Each refuses only what libkvrt refuses too
(tests/test_checks.py hands the library the same values): the library stays
the authority, these only answer earlier and say why.
"""
from __future__ import annotations

import string
from typing import Any, Optional

import numpy as np

from . import _lib
from ._call import need_int, need_uint

NAME_MAX = _lib.NAME_MAX          # KVRT_NAME_MAX, with the NUL
MAX_BATCH = _lib.MAX_BATCH        # KVRT_MAX_BATCH
MAX_BLOCK_BYTES = 1 << 30         # KVRT_MAX_BLOCK_BYTES
MAX_SPACE_BYTES = 1 << 40         # KVRT_MAX_SPACE_BYTES
PRIO_MAX = 100                    # KVRT_PRIO_MAX

_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "._-")


def space_name(name: Any, what: str = "name") -> bytes:
    """A space name as libkvrt takes it (kvc_space_name_valid's rule)."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: pass a str, not {type(name).__name__}")
    if not 0 < len(name) < NAME_MAX or not _NAME_CHARS.issuperset(name):
        raise ValueError(f"{what} {name!r}: pass 1..{NAME_MAX - 1} of [A-Za-z0-9._-]")
    return name.encode("ascii")


def name_part(value: Any, what: str, max_len: int = 16, empty_ok: bool = False) -> str:
    """A piece an integration builds a space name from (prefix, tenant):
    the space-name characters, short enough to leave room for the rest."""
    if not isinstance(value, str):
        raise TypeError(f"{what}: pass a str, not {type(value).__name__}")
    least = 0 if empty_ok else 1
    if not least <= len(value) <= max_len or not _NAME_CHARS.issuperset(value):
        raise ValueError(f"{what} {value!r}: pass {least}..{max_len} of [A-Za-z0-9._-]")
    return value


def block_bytes(value: Any, page_size: int) -> int:
    """A creating open's block_bytes: a page multiple, at most 2**30."""
    b = need_uint(value, "block_bytes", 64)
    # page_size 0 would be a library that does not say: leave that part to it
    if b == 0 or (page_size and b % page_size):
        raise ValueError(f"block_bytes {b}: pass a non-zero multiple of the page size "
                         f"({page_size})")
    if b > MAX_BLOCK_BYTES:
        raise ValueError(f"block_bytes {b}: pass at most {MAX_BLOCK_BYTES} (2**30, "
                         "KVRT_MAX_BLOCK_BYTES)")
    return b


def quota_bytes(value: Any, block: int) -> int:
    """A creating open's quota_bytes: at least one block, at most 2**40.

    Not a multiple of block_bytes: libkvrt takes any quota (it rounds down
    to whole blocks), so this does not ask for one either.
    """
    q = need_uint(value, "quota_bytes", 64)
    if q < block:
        raise ValueError(f"quota_bytes {q}: pass at least block_bytes ({block})")
    if q > MAX_SPACE_BYTES:
        raise ValueError(f"quota_bytes {q}: pass at most {MAX_SPACE_BYTES} (2**40, "
                         "KVRT_MAX_SPACE_BYTES)")
    return q


def priorities(values: Any, count: int) -> Optional[np.ndarray]:
    """Eviction priorities, one per block, 0..PRIO_MAX; None stays None."""
    if values is None:
        return None
    if isinstance(values, (bytes, str)):
        raise TypeError("priorities: pass a sequence of ints 0..100 or None")
    pr = []
    for n, p in enumerate(values):
        i = need_int(p, f"priorities[{n}]")
        if not 0 <= i <= PRIO_MAX:
            raise ValueError(f"priorities[{n}] {i}: pass 0..{PRIO_MAX} (lower is evicted "
                             "first)")
        pr.append(i)
    if len(pr) != count:
        raise ValueError(f"priorities: {len(pr)} given for {count} ids; pass one each or None")
    return np.array(pr, dtype=np.uint32)


def _outside(what: str, bad: int, nr_blocks: int) -> ValueError:
    return ValueError(f"{what}: block {bad} is outside the space: pass ids below its "
                      f"nr_blocks ({nr_blocks})")


def block_id(value: Any, what: str, nr_blocks: Optional[int] = None) -> int:
    """One block id: a uint32, below nr_blocks when the handle knows it."""
    i = need_uint(value, what)
    if nr_blocks is not None and i >= nr_blocks:
        raise _outside(what, i, nr_blocks)
    return i


def block_ids(ids: Any, what: str = "ids", nr_blocks: Optional[int] = None,
              allow_empty: bool = False) -> np.ndarray:
    """A contiguous uint32 array of block ids (1..MAX_BATCH of them, each
    below nr_blocks when the handle knows it)."""
    if isinstance(ids, (bytes, str)):
        raise TypeError(f"{what}: pass a sequence of int block ids or a uint32 array")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"{what}: pass a 1-D array, not shape {ids.shape}")
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{what}: pass an integer array, not dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= 1 << 32):
            raise ValueError(f"{what}: block ids are in [0, 2**32)")
        arr = np.ascontiguousarray(ids, dtype=np.uint32)
    else:
        try:
            lst = [need_uint(i, f"{what}[{n}]") for n, i in enumerate(ids)]
        except TypeError as e:
            if "object is not iterable" in str(e):
                raise TypeError(f"{what}: pass a sequence of int block ids, not "
                                f"{type(ids).__name__}") from None
            raise
        arr = np.array(lst, dtype=np.uint32)
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{what}: pass at least one block id")
    if arr.size > MAX_BATCH:
        raise ValueError(f"{what}: {arr.size} ids; pass at most {MAX_BATCH} per call "
                         "(split the batch)")
    if nr_blocks is not None and arr.size and int(arr.max()) >= nr_blocks:
        raise _outside(what, int(arr.max()), nr_blocks)
    return arr
