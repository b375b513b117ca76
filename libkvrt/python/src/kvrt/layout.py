# SPDX-License-Identifier: MIT
"""Element types, KV layouts and the memory formula."""
from __future__ import annotations

import ctypes
import enum
from typing import Optional, Tuple, Union

import numpy as np

from . import _lib
from ._call import check, need_int, need_uint


class DType(enum.IntEnum):
    """``enum kvrt_dtype``."""

    F32 = 0
    F16 = 1
    BF16 = 2
    FP8_E4M3 = 3

    @property
    def size(self) -> int:
        """Bytes per element."""
        return int(_lib.lib.kvrt_dtype_size(int(self)))

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds this type's elements.

        numpy has no bfloat16 or fp8: those come as their raw bits
        (``uint16``, ``uint8``).
        """
        return np.dtype(_NUMPY[self])


_NUMPY = {DType.F32: np.float32, DType.F16: np.float16, DType.BF16: np.uint16,
          DType.FP8_E4M3: np.uint8}

DTypeLike = Union[DType, int, str]


def as_dtype(d: DTypeLike) -> DType:
    """A :class:`DType` from a DType, its value, or a name ("f16", "bf16", ...)."""
    if isinstance(d, DType):
        return d
    if isinstance(d, bool):
        raise TypeError("dtype: pass a kvrt.DType, e.g. kvrt.DType.F16")
    if isinstance(d, int):
        try:
            return DType(d)
        except ValueError:
            raise ValueError(f"dtype {d}: pass one of {[m.name for m in DType]}") from None
    if isinstance(d, str):
        key = d.upper().replace("FLOAT", "F").replace("FP8", "FP8_E4M3").replace(
            "FP8_E4M3_E4M3", "FP8_E4M3")
        if key in DType.__members__:
            return DType[key]
        raise ValueError(f"dtype {d!r}: pass one of 'f32', 'f16', 'bf16', 'fp8_e4m3'")
    raise TypeError(f"dtype: pass a kvrt.DType, not {type(d).__name__}")


def from_numpy_dtype(dt: np.dtype, what: str) -> DType:
    """The DType of a float32/float16 numpy array (bf16 is not a numpy type)."""
    if dt == np.float32:
        return DType.F32
    if dt == np.float16:
        return DType.F16
    raise ValueError(f"{what}: dtype {dt} is not supported: pass float32 or float16 "
                     f"(bf16 as uint16 bits with src_dtype=kvrt.DType.BF16)")


class LayoutKind(enum.IntEnum):
    """``enum kvrt_layout_kind``."""

    BLOCK_MAJOR = 0
    LAYER_MAJOR = 1


class Layout:
    """A ``struct kvrt_layout``: where each K/V element of a paged cache lives.

    Build one with :meth:`preset`; the fields are readable attributes
    (``num_layers``, ``block_stride``, ...).
    """

    __slots__ = ("_c",)

    def __init__(self, c: Optional[_lib.LayoutC] = None) -> None:
        self._c = c if c is not None else _lib.LayoutC()

    @classmethod
    def preset(cls, kind: Union[LayoutKind, int], num_layers: int, num_kv_heads: int,
               head_dim: int, block_tokens: int, num_blocks: int,
               kv_dtype: DTypeLike) -> "Layout":
        """``kvrt_layout_init``: a block-major or layer-major layout."""
        lay = cls()
        d = as_dtype(kv_dtype)
        args = [need_uint(v, n) for v, n in ((num_layers, "num_layers"),
                                             (num_kv_heads, "num_kv_heads"),
                                             (head_dim, "head_dim"),
                                             (block_tokens, "block_tokens"),
                                             (num_blocks, "num_blocks"))]
        check(_lib.lib.kvrt_layout_init(ctypes.byref(lay._c), int(kind), *args, int(d)),
              "kvrt_layout_init")
        return lay

    @classmethod
    def custom(cls, num_layers: int, num_kv_heads: int, head_dim: int, block_tokens: int,
               num_blocks: int, kv_dtype: DTypeLike, *, layer_stride: int, kv_stride: int,
               block_stride: int, token_stride: int, head_stride: int,
               scale_layer_stride: int = 0, scale_kv_stride: int = 0,
               scale_block_stride: int = 0) -> "Layout":
        """A layout with explicit strides (bytes; scale strides in floats, fp8
        only), e.g. one layer of an engine's cache, or one layer's slice of
        each pool block.  The library checks the sizes and that the extent
        fits in 63 bits (``kvrt_layout_block_bytes``: InvalidArgumentError,
        LimitOverflowError); strides that make elements overlap are the
        caller's to avoid."""
        lay = cls()
        c = lay._c
        for f, v in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                     ("head_dim", head_dim), ("block_tokens", block_tokens),
                     ("num_blocks", num_blocks)):
            setattr(c, f, need_uint(v, f))
        c.kv_dtype = int(as_dtype(kv_dtype))
        for f, v in (("layer_stride", layer_stride), ("kv_stride", kv_stride),
                     ("block_stride", block_stride), ("token_stride", token_stride),
                     ("head_stride", head_stride), ("scale_layer_stride", scale_layer_stride),
                     ("scale_kv_stride", scale_kv_stride),
                     ("scale_block_stride", scale_block_stride)):
            i = need_int(v, f)
            if i < 0 or i >= 1 << 63:
                raise ValueError(f"{f} {i}: pass a non-negative stride below 2**63")
            setattr(c, f, i)
        lay.block_bytes  # noqa: B018 - the library's consistency check
        return lay

    def copy(self) -> "Layout":
        c = _lib.LayoutC()
        ctypes.pointer(c)[0] = self._c
        return Layout(c)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._c, name)

    @property
    def dtype(self) -> DType:
        return DType(self._c.kv_dtype)

    @property
    def block_bytes(self) -> int:
        """``kvrt_layout_block_bytes``: one block, all layers, K and V (and fp8 scales)."""
        out = ctypes.c_uint64()
        check(_lib.lib.kvrt_layout_block_bytes(ctypes.byref(self._c), ctypes.byref(out)),
              "kvrt_layout_block_bytes")
        return out.value

    def inline_scales(self) -> int:
        """``kvrt_layout_inline_scales``: keep fp8 scales inside each block.

        Changes this layout; returns the byte offset of the first scale.
        """
        off = ctypes.c_uint64()
        check(_lib.lib.kvrt_layout_inline_scales(ctypes.byref(self._c), ctypes.byref(off)),
              "kvrt_layout_inline_scales")
        return off.value

    def extent(self) -> int:
        """Bytes from the base to the end of the last element the layout addresses."""
        c = self._c
        for f in ("layer_stride", "kv_stride", "block_stride", "token_stride", "head_stride"):
            if getattr(c, f) < 0:
                raise ValueError(f"layout {f} is negative: the binding takes layouts "
                                 "with non-negative strides only")
        es = self.dtype.size
        return ((c.num_layers - 1) * c.layer_stride + c.kv_stride
                + (c.num_blocks - 1) * c.block_stride + (c.block_tokens - 1) * c.token_stride
                + (c.num_kv_heads - 1) * c.head_stride + c.head_dim * es)

    def block_shape(self) -> Tuple[int, int, int, int, int]:
        """(num_layers, 2, block_tokens, num_kv_heads, head_dim): one block's K/V."""
        c = self._c
        return (c.num_layers, 2, c.block_tokens, c.num_kv_heads, c.head_dim)

    def block_strides(self) -> Tuple[int, int, int, int, int]:
        """Byte strides matching :meth:`block_shape`."""
        c = self._c
        return (c.layer_stride, c.kv_stride, c.token_stride, c.head_stride, self.dtype.size)

    def __repr__(self) -> str:
        c = self._c
        return (f"Layout(layers={c.num_layers}, kv_heads={c.num_kv_heads}, "
                f"head_dim={c.head_dim}, block_tokens={c.block_tokens}, "
                f"num_blocks={c.num_blocks}, dtype={self.dtype.name}, "
                f"strides=({c.layer_stride}, {c.kv_stride}, {c.block_stride}, "
                f"{c.token_stride}, {c.head_stride}))")


def kv_bytes(num_layers: int, num_kv_heads: int, head_dim: int, tokens: int,
             dtype: DTypeLike) -> int:
    """``kvrt_kv_bytes``, the memory formula: bytes of K and V for ``tokens`` tokens."""
    out = ctypes.c_uint64()
    t = int(tokens)
    if t < 0 or t >= 1 << 64:
        raise ValueError(f"tokens {tokens}: pass a count in [0, 2**64)")
    check(_lib.lib.kvrt_kv_bytes(need_uint(num_layers, "num_layers"),
                                 need_uint(num_kv_heads, "num_kv_heads"),
                                 need_uint(head_dim, "head_dim"), t, int(as_dtype(dtype)),
                                 ctypes.byref(out)), "kvrt_kv_bytes")
    return out.value
