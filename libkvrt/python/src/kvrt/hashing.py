# SPDX-License-Identifier: MIT
"""Prefix hashing: ``kvrt_hash_block``, ``kvrt_hash_prompt``, ``kvrt_hash_info``.

Block j's hash is SHA-256 over ``parent || le32(n) || le32(tokens...) ||
le64(len(extra)) || extra``, parent being block j-1's hash (the root for
j = 0: 32 zero bytes unless given).
"""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._call import call, need_uint

HASH_BYTES = _lib.HASH_BYTES
TokensLike = Union[Sequence[int], np.ndarray]


def _tokens(tokens: Any) -> np.ndarray:
    if isinstance(tokens, (bytes, bytearray, str)):
        raise TypeError("tokens: pass a sequence of int token ids or an integer array")
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise ValueError(f"tokens: pass a 1-D array, not shape {tokens.shape}")
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens: pass an integer array, not dtype {tokens.dtype}")
        # tokens are hashed as the uint32 bit pattern (negative int32 wraps, as in C)
        return np.ascontiguousarray(tokens.astype(np.int64) & 0xFFFFFFFF, dtype=np.uint32) \
            if tokens.dtype != np.uint32 else np.ascontiguousarray(tokens)
    try:
        vals = [int(t) & 0xFFFFFFFF if -(1 << 31) <= int(t) < (1 << 32) else None
                for t in tokens]
    except TypeError:
        raise TypeError(f"tokens: pass a sequence of int token ids, not "
                        f"{type(tokens).__name__}") from None
    if any(v is None for v in vals):
        raise ValueError("tokens: each token id must fit in 32 bits")
    return np.array(vals, dtype=np.uint32)


def _digest(d: Any, what: str) -> Optional[bytes]:
    if d is None:
        return None
    if not isinstance(d, (bytes, bytearray, memoryview)) or len(d) != HASH_BYTES:
        raise TypeError(f"{what}: pass a {HASH_BYTES}-byte bytes digest or None")
    return bytes(d)


def _bytes(b: Any, what: str) -> bytes:
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b)
    raise TypeError(f"{what}: pass bytes, not {type(b).__name__}")


def hash_block(tokens: TokensLike, parent: Optional[bytes] = None,
               extra: bytes = b"") -> bytes:
    """``kvrt_hash_block``: one block's 32-byte hash."""
    t = _tokens(tokens)
    p = _digest(parent, "parent")
    e = _bytes(extra, "extra")
    out = (ctypes.c_uint8 * HASH_BYTES)()
    call("kvrt_hash_block", p, t.ctypes.data if t.size else None, t.size,
         e if e else None, len(e), out)
    return bytes(out)


def hash_prompt(tokens: TokensLike, block_tokens: int, root: Optional[bytes] = None,
                extra: Optional[Sequence[bytes]] = None,
                max_hashes: Optional[int] = None) -> List[bytes]:
    """``kvrt_hash_prompt``: the chained hashes of the prompt's full blocks.

    ``extra``, when given, holds one bytes per hashed block (its extra keys,
    e.g. a LoRA id or image hash).  To continue a prompt, pass the last hash
    as ``root`` and the tokens after it.
    """
    arr = hash_prompt_array(tokens, block_tokens, root, extra, max_hashes)
    return [bytes(r) for r in arr]


def hash_prompt_array(tokens: TokensLike, block_tokens: int, root: Optional[bytes] = None,
                      extra: Optional[Sequence[bytes]] = None,
                      max_hashes: Optional[int] = None) -> np.ndarray:
    """:func:`hash_prompt` as an (n, 32) uint8 array, the form Space.lookup takes."""
    t = _tokens(tokens)
    bt = need_uint(block_tokens, "block_tokens")
    if bt == 0:
        raise ValueError("block_tokens: pass a positive count")
    n = t.size // bt
    if max_hashes is not None:
        n = min(n, need_uint(max_hashes, "max_hashes", 63))
    r = _digest(root, "root")
    ex_buf = None
    indptr = None
    if extra is not None:
        if isinstance(extra, (bytes, str)):
            raise TypeError("extra: pass a list with one bytes per block")
        parts = [_bytes(x, f"extra[{i}]") for i, x in enumerate(extra)]
        if len(parts) < n:
            raise ValueError(f"extra: {len(parts)} given for {n} blocks; pass one bytes "
                             "per hashed block")
        parts = parts[:n]
        indptr = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum([len(x) for x in parts], out=indptr[1:]) if n else None
        ex_buf = b"".join(parts) or b"\0"
    out = np.zeros((max(n, 1), HASH_BYTES), dtype=np.uint8)
    got = call("kvrt_hash_prompt", r, t.ctypes.data if t.size else None, t.size, bt,
               ex_buf, indptr.ctypes.data if indptr is not None else None,
               out.ctypes.data, n)
    return out[:got].copy()


@dataclasses.dataclass(frozen=True)
class HashInfo:
    """``struct kvrt_hash_info``: whether SHA-NI is in use, and libcrypto's version."""

    cpu_sha_ni: bool
    ia32cap_override: bool
    libcrypto: str


def hash_info() -> HashInfo:
    c = _lib.HashInfoC()
    call("kvrt_hash_info", ctypes.byref(c))
    return HashInfo(bool(c.cpu_sha_ni), bool(c.ia32cap_override),
                    c.libcrypto.decode("utf-8", "replace"))
