# SPDX-License-Identifier: MIT
"""Block arrays and block copies (``kvrt_copy_blocks``).

A :class:`BlockArray` is a ``struct kvrt_block_array``: a layout and the
memory it describes (a numpy array, a torch tensor on CPU or CUDA, or an
int address with an owner object).  It keeps that memory alive while it
exists, so a copy never reads freed memory.  :meth:`kvrt.Pool.copy_blocks`
copies on the CPU; :meth:`kvrt.gpu.Gpu.copy_blocks` on the GPU.
"""
from __future__ import annotations

import ctypes
import errno
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._buffer import Buffer, as_buffer
from ._call import need_int
from .errors import make_error
from .layout import DType, Layout

PairsLike = Union[Sequence[Tuple[int, int]], np.ndarray]

_GEOMETRY = ("num_layers", "num_kv_heads", "head_dim", "block_tokens", "kv_dtype")


def _scale_extent(lay: Layout) -> int:
    """Bytes from the scales pointer to the end of the last fp8 scale."""
    for f in ("scale_layer_stride", "scale_kv_stride", "scale_block_stride"):
        if getattr(lay, f) < 0:
            raise ValueError(f"layout {f} is negative: the binding takes layouts with "
                             "non-negative strides only")
    n = ((lay.num_layers - 1) * lay.scale_layer_stride + lay.scale_kv_stride
         + (lay.num_blocks - 1) * lay.scale_block_stride + lay.num_kv_heads)
    return 4 * n


class BlockArray:
    """``struct kvrt_block_array``: ``layout`` over ``data`` (and fp8 ``scales``).

    ``data``: a C-contiguous numpy array, a contiguous torch tensor (CPU or
    CUDA; its ``data_ptr()``), or an int address with ``owner=`` the object
    that keeps the memory alive (``device="cuda"`` for device memory).  Its
    element size must be the layout's or 1 (raw bytes), and it must hold
    ``layout.extent()`` bytes.  fp8 layouts need scales: ``scales`` (float32
    memory of the same kinds, on the same device) or ``scales_offset``, the
    byte offset of the first scale inside ``data`` (inline scales, as
    :meth:`Layout.inline_scales` returns it).  The layout is copied: later
    changes to the caller's object do not reach this array.
    """

    __slots__ = ("layout", "data", "scales", "_buf", "_sbuf", "_c")

    def __init__(self, layout: Layout, data: Any, scales: Any = None, *,
                 scales_offset: Optional[int] = None, owner: Any = None,
                 device: Optional[str] = None) -> None:
        if not isinstance(layout, Layout):
            raise TypeError("layout: pass a kvrt.Layout (Layout.preset(...) or "
                            "Space.layout_for(...))")
        lay = layout.copy()
        buf = as_buffer(data, "data", owner=owner, device=device)
        es = lay.dtype.size
        if buf.itemsize is not None and buf.itemsize not in (1, es):
            raise ValueError(f"data: elements of {buf.itemsize} bytes; the layout's dtype "
                             f"{lay.dtype.name} has {es}: pass memory of that element size "
                             "or raw bytes (uint8)")
        extent = lay.extent()
        if buf.nbytes is not None and buf.nbytes < extent:
            raise ValueError(f"data: {buf.nbytes} bytes, but the layout addresses {extent} "
                             f"bytes from its base ({lay!r}): pass memory that holds the "
                             "whole cache, or a layout with fewer blocks")
        sbuf: Optional[Buffer] = None
        scales_addr = 0
        if lay.dtype == DType.FP8_E4M3:
            sext = _scale_extent(lay)
            if (scales is None) == (scales_offset is None):
                raise ValueError("fp8 layout: pass exactly one of scales= (float32 memory) "
                                 "and scales_offset= (inline scales, Layout.inline_scales())")
            if scales is not None:
                sbuf = as_buffer(scales, "scales", owner=owner, device=device)
                if sbuf.itemsize is not None and sbuf.itemsize not in (1, 4):
                    raise ValueError(f"scales: elements of {sbuf.itemsize} bytes: pass float32")
                if sbuf.nbytes is not None and sbuf.nbytes < sext:
                    raise ValueError(f"scales: {sbuf.nbytes} bytes, the layout's scales take "
                                     f"{sext}: pass one float per (layer, K/V, block, head)")
                if sbuf.where() != buf.where():
                    raise ValueError(f"scales on {sbuf.where()}, data on {buf.where()}: "
                                     "pass both on the same device")
                scales_addr = sbuf.address
            else:
                off = need_int(scales_offset, "scales_offset")
                if off < 0 or (buf.nbytes is not None and off + sext > buf.nbytes):
                    raise ValueError(f"scales_offset {off}: the scales ({sext} bytes) must "
                                     f"lie inside data ({buf.nbytes} bytes)")
                scales_addr = buf.address + off
            if scales_addr % 4:
                raise ValueError(f"scales at {scales_addr:#x}: pass 4-byte aligned floats")
        elif scales is not None or scales_offset is not None:
            raise ValueError(f"scales: only fp8 layouts have scales; this one is "
                             f"{lay.dtype.name}: pass scales=None")
        self.layout = lay
        self.data = data
        self.scales = scales
        self._buf = buf
        self._sbuf = sbuf
        self._c = _lib.BlockArrayC(ctypes.pointer(lay._c), buf.address, scales_addr or None)

    @property
    def address(self) -> int:
        """The base address the library gets."""
        return self._buf.address

    @property
    def scales_address(self) -> int:
        """The scales address the library gets (0: none)."""
        return int(self._c.scales or 0)

    @property
    def device(self) -> str:
        """"cpu", or "cuda:N" (or "cuda" for a bare device address)."""
        return self._buf.where()

    @property
    def is_cuda(self) -> bool:
        return self._buf.is_cuda

    @property
    def writable(self) -> bool:
        return self._buf.writable

    @property
    def num_blocks(self) -> int:
        return int(self.layout.num_blocks)

    def __repr__(self) -> str:
        return (f"<kvrt.BlockArray {self.num_blocks} blocks {self.layout.dtype.name} on "
                f"{self.device} at {self.address:#x}>")


def pairs_array(pairs: PairsLike, what: str = "pairs") -> np.ndarray:
    """A C-contiguous (n, 2) uint32 array of (src, dst): ``struct kvrt_block_pair``."""
    if isinstance(pairs, np.ndarray):
        if pairs.dtype.kind not in "iu":
            raise TypeError(f"{what}: pass an integer array of shape (n, 2), not "
                            f"dtype {pairs.dtype}")
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError(f"{what}: pass shape (n, 2) of (src, dst), not {pairs.shape}")
        if pairs.size and (pairs.min() < 0 or pairs.max() >= 1 << 32):
            raise ValueError(f"{what}: block ids are in [0, 2**32)")
        return np.ascontiguousarray(pairs, dtype=np.uint32)
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__iter__"):
        raise TypeError(f"{what}: pass a sequence of (src, dst) tuples or an (n, 2) integer "
                        f"array, not {type(pairs).__name__}")
    rows = []
    for i, p in enumerate(pairs):
        try:
            s, d = p
        except (TypeError, ValueError):
            raise TypeError(f"{what}[{i}]: pass a (src, dst) pair, not {p!r}") from None
        rows.append((need_int(s, f"{what}[{i}].src"), need_int(d, f"{what}[{i}].dst")))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 2)
    if arr.size and (arr.min() < 0 or arr.max() >= 1 << 32):
        raise ValueError(f"{what}: block ids are in [0, 2**32)")
    return np.ascontiguousarray(arr, dtype=np.uint32)


def check_copy(dst: BlockArray, src: BlockArray, pairs: PairsLike) -> np.ndarray:
    """The checks with an answer Python can word better than an errno."""
    for a, n in ((dst, "dst"), (src, "src")):
        if not isinstance(a, BlockArray):
            raise TypeError(f"{n}: pass a kvrt.BlockArray, not {type(a).__name__}")
    for f in _GEOMETRY:
        if getattr(dst.layout, f) != getattr(src.layout, f):
            raise ValueError(f"dst and src differ in {f} ({getattr(dst.layout, f)} vs "
                             f"{getattr(src.layout, f)}): copies keep the geometry; pass "
                             "layouts of one model shape")
    if not dst.writable:
        raise ValueError("dst: its memory is read-only: pass a writable array")
    p = pairs_array(pairs)
    if p.size:
        if int(p[:, 0].max()) >= src.num_blocks or int(p[:, 1].max()) >= dst.num_blocks:
            raise ValueError(f"pairs: ids must be < src's {src.num_blocks} blocks (column 0) "
                             f"and < dst's {dst.num_blocks} blocks (column 1)")
        if np.unique(p[:, 1]).size != p.shape[0]:
            raise ValueError("pairs: a destination block appears twice: pass each dst once")
    return p


def pairs_pointer(p: np.ndarray) -> Optional[int]:
    return p.ctypes.data if p.size else None


class Copy:
    """A copy started by :meth:`kvrt.Pool.copy_blocks_async`.

    ``poll()`` is True once done (raising the copy's error, if any);
    ``wait()`` blocks until done.  The arrays stay alive until the handle
    is waited for, closed or collected (which waits).
    """

    __slots__ = ("_ptr", "_keep", "_result")

    def __init__(self, ptr: int, keep: Tuple[Any, ...]) -> None:
        self._ptr: Optional[int] = ptr
        self._keep: Optional[Tuple[Any, ...]] = keep
        self._result: Optional[int] = None

    def poll(self) -> bool:
        """``kvrt_copy_poll``: True when the copy completed."""
        if self._ptr is None:
            return self._finish(self._result or 0)
        ret = _lib.lib.kvrt_copy_poll(self._ptr)
        if ret == -errno.EAGAIN:  # still running
            return False
        return self._finish(ret)

    def wait(self) -> None:
        """``kvrt_copy_wait``: block until the copy completed (the GIL is released)."""
        if self._ptr is None:
            self._finish(self._result or 0)
            return
        self._finish(_lib.lib.kvrt_copy_wait(self._ptr))

    def _finish(self, ret: int) -> bool:
        self._result = ret
        self.close()
        if ret < 0:
            raise make_error(ret, "kvrt_copy_wait")
        return True

    def close(self) -> None:
        """``kvrt_copy_free``: wait if needed, then free the handle (idempotent)."""
        p, self._ptr = self._ptr, None
        if p is not None:
            _lib.lib.kvrt_copy_free(p)
        self._keep = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> "Copy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
