# SPDX-License-Identifier: MIT
"""Append and paged attention on the CPU: ``kvrt_append_kv``,
``kvrt_attn_decode``/``_prefill`` and their kept-worker (``_on``) forms.

Arrays are numpy arrays or torch CPU tensors (torch CUDA tensors go to
:mod:`kvrt.gpu`), C-contiguous, of float32, float16 or bfloat16 (numpy has
no bfloat16: pass its bits as uint16 with ``dtype="bf16"``).  Wrong types,
dtypes, shapes or devices raise TypeError/ValueError before the library is
called; what the library refuses raises a :class:`kvrt.KvrtError`.
"""
from __future__ import annotations

import array
import ctypes
import enum
import math
import threading
from typing import Any, Optional, Sequence, Tuple, Union, cast

import numpy as np

from . import _handles, _lib
from ._buffer import as_buffer, is_torch_tensor
from ._call import call, need_int, need_uint
from .blocks import BlockArray
from .layout import DType, DTypeLike, Layout, as_dtype
from .pool import _Closable

IntsLike = Union[Sequence[int], np.ndarray, Any]

_TORCH_DTYPES = {"torch.float32": DType.F32, "torch.float16": DType.F16,
                 "torch.bfloat16": DType.BF16}
_TORCH_NAMES = {DType.F32: "float32", DType.F16: "float16", DType.BF16: "bfloat16"}
_NP_INTS = {np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}


class AttnImpl(enum.IntEnum):
    """``enum kvrt_attn_impl``."""

    FAST = 0
    REFERENCE = 1


# ---- arrays ----------------------------------------------------------------


def device_of(x: Any) -> str:
    """"cpu", or "cuda:N" for a CUDA tensor."""
    if is_torch_tensor(x):
        d = x.device
        return f"cuda:{d.index}" if d.type == "cuda" else d.type
    return "cpu"


def float_dtype(x: Any, what: str, dtype: Optional[DTypeLike] = None) -> DType:
    """The kvrt element type of a float array (numpy bf16: uint16 with dtype="bf16")."""
    if is_torch_tensor(x):
        got = _TORCH_DTYPES.get(str(x.dtype))
        if got is None:
            raise TypeError(f"{what}: dtype {x.dtype}; pass torch.float32, float16 or bfloat16")
        if dtype is not None and as_dtype(dtype) != got:
            raise TypeError(f"{what}: tensor of {x.dtype} but dtype={as_dtype(dtype).name}: "
                            "leave dtype out for a torch tensor")
        return got
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{what}: pass a numpy array or a torch tensor, not {type(x).__name__}")
    if x.dtype == np.uint16:
        if dtype is None or as_dtype(dtype) != DType.BF16:
            raise TypeError(f"{what}: uint16 array: pass dtype='bf16' if it holds bfloat16 bits")
        return DType.BF16
    if dtype is not None and as_dtype(dtype) == DType.BF16:
        raise TypeError(f"{what}: dtype='bf16' needs the bits as uint16, not {x.dtype}")
    if x.dtype == np.float32:
        return DType.F32
    if x.dtype == np.float16:
        return DType.F16
    raise TypeError(f"{what}: dtype {x.dtype}; pass float32, float16, or bf16 bits as uint16")


def tensor_ptr(x: Any, what: str, shape: Tuple[int, ...], *, cuda: bool,
               writable: bool = False) -> int:
    """Address of a C-contiguous array of ``shape`` on the host (or CUDA)."""
    dev = device_of(x)
    if cuda and not dev.startswith("cuda"):
        raise ValueError(f"{what}: on {dev}; pass a CUDA tensor (x.cuda()) for the GPU call")
    if not cuda and dev != "cpu":
        raise ValueError(f"{what}: on {dev}; the CPU call takes host memory: pass a CPU "
                         "tensor, or use kvrt.gpu for CUDA tensors")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{what}: shape {tuple(x.shape)}; pass shape {tuple(shape)}")
    buf = as_buffer(x, what)
    if writable and not buf.writable:
        raise ValueError(f"{what}: read-only; pass a writable array")
    return buf.address


def int_array(x: IntsLike, what: str, dtype: type, length: Optional[int] = None,
              cuda: bool = False) -> Tuple[int, Any]:
    """(address, keep-alive) of a 1-D integer array of ``dtype``.

    Host input of any integer type is converted (a copy); a CUDA tensor must
    already be of that dtype, because a conversion would be freed while the
    kernel may still read it.
    """
    name = _NP_INTS[np.dtype(dtype)]
    if is_torch_tensor(x):
        x = cast(Any, x)  # a torch tensor: is_torch_tensor() tells, mypy cannot
        dev = device_of(x)
        if cuda:
            if not dev.startswith("cuda"):
                raise ValueError(f"{what}: on {dev}; pass a CUDA tensor for the GPU call")
            if str(x.dtype) != f"torch.{name}":
                raise TypeError(f"{what}: {x.dtype}; pass torch.{name} (x.to(torch.{name}))")
            if x.dim() != 1:
                raise ValueError(f"{what}: pass a 1-D tensor, not shape {tuple(x.shape)}")
            if length is not None and x.shape[0] != length:
                raise ValueError(f"{what}: {x.shape[0]} entries; pass {length}")
            return as_buffer(x, what).address, x
        if dev != "cpu":
            raise ValueError(f"{what}: on {dev}; the CPU call takes host memory")
        if str(x.dtype) not in ("torch.int32", "torch.int64", "torch.int16", "torch.uint8",
                                "torch.int8"):
            raise TypeError(f"{what}: {x.dtype}; pass an integer tensor")
        x = x.detach().numpy()
    elif cuda:
        raise ValueError(f"{what}: host memory; pass a CUDA torch.{name} tensor for the GPU call")
    if isinstance(x, array.array):
        # e.g. Sequences.append's slots: its buffer as it is, no per-item loop
        x = np.frombuffer(x, dtype=np.dtype(x.typecode)) if len(x) else np.zeros(0, dtype)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "iu":
            raise TypeError(f"{what}: dtype {x.dtype}; pass an integer array")
        a = x
    else:
        if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
            raise TypeError(f"{what}: pass a sequence of ints or an integer array, not "
                            f"{type(x).__name__}")
        a = np.array([need_int(v, f"{what}[{i}]") for i, v in enumerate(x)], dtype=np.int64)
    if a.ndim != 1:
        raise ValueError(f"{what}: pass a 1-D array, not shape {a.shape}")
    if length is not None and a.shape[0] != length:
        raise ValueError(f"{what}: {a.shape[0]} entries; pass {length}")
    info: Any = np.iinfo(dtype)
    if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
        raise ValueError(f"{what}: values must fit {name}")
    a = np.ascontiguousarray(a, dtype=dtype)
    return a.ctypes.data, a


# ---- the cache and the block table ----------------------------------------


class KvCache:
    """``struct kvrt_kv_cache``: one layer (``layer``) of a paged cache.

    ``layout`` and ``data`` (and fp8 ``scales`` or ``scales_offset``,
    ``owner``, ``device``) are those of a :class:`kvrt.BlockArray`, which
    checks them; ``KvCache.of(block_array, layer)`` reuses one.  Append
    writes through it, so ``data`` must be writable for :func:`append_kv`.
    """

    __slots__ = ("array", "layer", "_c")

    def __init__(self, layout: Layout, data: Any, scales: Any = None, *, layer: int = 0,
                 scales_offset: Optional[int] = None, owner: Any = None,
                 device: Optional[str] = None) -> None:
        self._init(BlockArray(layout, data, scales, scales_offset=scales_offset, owner=owner,
                              device=device), layer)

    @classmethod
    def of(cls, array: BlockArray, layer: int = 0) -> "KvCache":
        """The cache over an existing :class:`BlockArray` (e.g. ``Space.block_array``)."""
        if not isinstance(array, BlockArray):
            raise TypeError(f"array: pass a kvrt.BlockArray, not {type(array).__name__}")
        self = cls.__new__(cls)
        self._init(array, layer)
        return self

    def _init(self, array: BlockArray, layer: int) -> None:
        lay = need_uint(layer, "layer")
        if lay >= array.layout.num_layers:
            raise ValueError(f"layer {lay}: the layout has {array.layout.num_layers} layers; "
                             f"pass 0..{array.layout.num_layers - 1}")
        self.array = array
        self.layer = lay
        self._c = _lib.KvCacheC(ctypes.pointer(array.layout._c), array.address,
                                array.scales_address or None, lay)

    def with_layer(self, layer: int) -> "KvCache":
        """The same memory, another layer."""
        return KvCache.of(self.array, layer)

    @property
    def layout(self) -> Layout:
        return self.array.layout

    @property
    def device(self) -> str:
        return self.array.device

    def __repr__(self) -> str:
        return f"<kvrt.KvCache layer {self.layer} of {self.array!r}>"


class BlockTable:
    """``struct kvrt_block_table`` in CSR form: sequence s owns blocks
    ``indices[indptr[s]:indptr[s + 1]]`` and ``seq_lens[s]`` tokens.

    Host arrays (lists, numpy, torch CPU) of any integer type are copied to
    int32; CUDA tensors (for :mod:`kvrt.gpu`) must be int32 already, and are
    used in place.
    """

    __slots__ = ("num_seqs", "device", "seq_lens_host", "_keep", "_c")

    def __init__(self, indptr: IntsLike, indices: IntsLike, seq_lens: IntsLike) -> None:
        cuda = device_of(indptr).startswith("cuda")
        self.device = device_of(indptr) if cuda else "cpu"
        lens_len = (len(seq_lens) if not is_torch_tensor(seq_lens)
                    else int(cast(Any, seq_lens).shape[0]))
        p_ptr, p = int_array(indptr, "indptr", np.int32, lens_len + 1, cuda)
        i_ptr, i = int_array(indices, "indices", np.int32, None, cuda)
        s_ptr, s = int_array(seq_lens, "seq_lens", np.int32, None, cuda)
        for x, n in ((i, "indices"), (s, "seq_lens")):
            if device_of(x) != device_of(p):
                raise ValueError(f"{n} on {device_of(x)}, indptr on {device_of(p)}: pass all "
                                 "three on one device")
        if not cuda:
            if p[0] != 0 or (p.size > 1 and (np.diff(p) < 0).any()):
                raise ValueError("indptr: pass 0 first and non-decreasing offsets")
            if int(p[-1]) > i.shape[0]:
                raise ValueError(f"indptr ends at {int(p[-1])} but indices has {i.shape[0]} "
                                 "entries")
            self.seq_lens_host: Optional[np.ndarray] = s
        else:
            self.seq_lens_host = None
        self.num_seqs = lens_len
        self._keep = (p, i, s)
        P32 = ctypes.POINTER(ctypes.c_int32)
        self._c = _lib.BlockTableC(lens_len, ctypes.cast(p_ptr, P32), ctypes.cast(i_ptr, P32),
                                   ctypes.cast(s_ptr, P32))

    @classmethod
    def from_lists(cls, blocks: Sequence[Sequence[int]], seq_lens: Sequence[int]) -> "BlockTable":
        """From one list of block ids per sequence."""
        indptr = np.zeros(len(blocks) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(b) for b in blocks])
        flat = [int(x) for b in blocks for x in b]
        return cls(indptr, np.array(flat, dtype=np.int64), seq_lens)


# ---- parameters ------------------------------------------------------------


def attn_params(cache: KvCache, num_q_heads: int, q_dtype: DType, o_dtype: DType,
                sm_scale: Optional[float], window_left: int, logit_softcap: float,
                impl: Union[AttnImpl, int, str], num_threads: int) -> _lib.AttnParamsC:
    lay = cache.layout
    if num_q_heads % lay.num_kv_heads:
        raise ValueError(f"q has {num_q_heads} heads: pass a multiple of the cache's "
                         f"{lay.num_kv_heads} KV heads")
    scale = 1.0 / math.sqrt(lay.head_dim) if sm_scale is None else float(sm_scale)
    if not math.isfinite(scale):
        raise ValueError(f"sm_scale {sm_scale}: pass a finite number")
    w = need_int(window_left, "window_left")
    if w < -1 or w >= 1 << 31:
        raise ValueError(f"window_left {w}: pass -1 (no window) or a key count >= 0")
    cap = float(logit_softcap)
    if not math.isfinite(cap) or cap < 0:
        raise ValueError(f"logit_softcap {logit_softcap}: pass 0 (none) or a positive cap")
    if isinstance(impl, str):
        try:
            impl = AttnImpl[impl.upper()]
        except KeyError:
            raise ValueError(f"impl {impl!r}: pass 'fast' or 'reference'") from None
    return _lib.AttnParamsC(num_q_heads, scale, w, cap, int(q_dtype), int(o_dtype),
                            int(AttnImpl(impl)), need_uint(num_threads, "num_threads"))


def new_out(q: Any, shape: Tuple[int, ...], o_dtype: DType) -> Any:
    """An output array like q (numpy or torch, same device) of o_dtype."""
    if is_torch_tensor(q):
        import torch  # the caller has torch, since q is a tensor
        return torch.empty(shape, dtype=getattr(torch, _TORCH_NAMES[o_dtype]), device=q.device)
    return np.empty(shape, dtype=o_dtype.numpy)


def check_out(out: Any, q: Any, shape: Tuple[int, ...], o_dtype: Optional[DTypeLike],
              cuda: bool) -> Tuple[Any, DType, int]:
    if out is None:
        if o_dtype is None:
            od = float_dtype(q, "q") if is_torch_tensor(q) else \
                (DType.BF16 if q.dtype == np.uint16 else float_dtype(q, "q"))
        else:
            od = as_dtype(o_dtype)
        if od not in (DType.F32, DType.F16, DType.BF16):
            raise ValueError(f"out_dtype {od.name}: pass f32, f16 or bf16")
        out = new_out(q, shape, od)
    else:
        if is_torch_tensor(out) != is_torch_tensor(q):
            raise TypeError("out: pass the same kind of array as q (numpy or torch)")
        od = float_dtype(out, "out", o_dtype)
    if device_of(out) != device_of(q):
        raise ValueError(f"out on {device_of(out)}, q on {device_of(q)}: pass one device")
    return out, od, tensor_ptr(out, "out", shape, cuda=cuda, writable=True)


def q_info(q: Any, cache: KvCache, q_dtype: Optional[DTypeLike], cuda: bool
           ) -> Tuple[DType, int, int]:
    """(dtype, rows, heads) of a query array [rows][heads][head_dim]."""
    qd = float_dtype(q, "q", q_dtype)
    if len(q.shape) != 3 or q.shape[2] != cache.layout.head_dim:
        raise ValueError(f"q: shape {tuple(q.shape)}; pass [tokens][q_heads]"
                         f"[{cache.layout.head_dim}] (the cache's head_dim)")
    return qd, int(q.shape[0]), int(q.shape[1])


def check_cache_device(cache: KvCache, cuda: bool, like: Any) -> None:
    if not isinstance(cache, KvCache):
        raise TypeError(f"cache: pass a kvrt.KvCache, not {type(cache).__name__}")
    if cuda:
        if not cache.array.is_cuda:
            raise ValueError(f"cache on {cache.device}: the GPU call needs the cache in "
                             "device memory (a CUDA tensor)")
        dev = device_of(like)
        if cache.device != "cuda" and cache.device != dev:
            raise ValueError(f"cache on {cache.device}, q on {dev}: pass one device")
    elif cache.array.is_cuda:
        raise ValueError(f"cache on {cache.device}: the CPU call needs host memory; use "
                         "kvrt.gpu for CUDA caches")


# ---- append ---------------------------------------------------------------


def append_kv(cache: KvCache, k: Any, v: Any, slots: IntsLike,
              dtype: Optional[DTypeLike] = None) -> None:
    """``kvrt_append_kv``: write K and V of new tokens into their cache slots.

    ``k``, ``v``: [tokens][num_kv_heads][head_dim] of one float type
    (``dtype="bf16"`` for numpy uint16 bits); ``slots``: one per token,
    ``block * block_tokens + offset``; a negative slot skips its token.
    All or nothing: nothing is written when the library refuses a slot.
    """
    check_cache_device(cache, False, k)
    args, _keep = append_args(cache, k, v, slots, dtype, False)
    call("kvrt_append_kv", ctypes.byref(cache._c), *args,
         detail="slots must be < num_blocks * block_tokens, in blocks inside the pool")


def append_args(cache: KvCache, k: Any, v: Any, slots: IntsLike,
                dtype: Optional[DTypeLike], cuda: bool) -> Tuple[Tuple[int, ...], Any]:
    """(k, v, src_dtype, slots, num_tokens) for the C call, and what keeps
    the slots array alive."""
    if not cache.array.writable:
        raise ValueError("cache: its memory is read-only; pass a writable array")
    kd = float_dtype(k, "k", dtype)
    vd = float_dtype(v, "v", dtype)
    if kd != vd:
        raise TypeError(f"k is {kd.name}, v is {vd.name}: pass one dtype")
    lay = cache.layout
    if len(k.shape) != 3:
        raise ValueError(f"k: shape {tuple(k.shape)}; pass [tokens][{lay.num_kv_heads}]"
                         f"[{lay.head_dim}]")
    n = int(k.shape[0])
    shape = (n, lay.num_kv_heads, lay.head_dim)
    kp = tensor_ptr(k, "k", shape, cuda=cuda)
    vp = tensor_ptr(v, "v", shape, cuda=cuda)
    if device_of(k) != device_of(v):
        raise ValueError(f"k on {device_of(k)}, v on {device_of(v)}: pass one device")
    sp, s = int_array(slots, "slots", np.int64, n, cuda)
    return (kp, vp, int(kd), sp, n), s


# ---- attention --------------------------------------------------------------


class Workers(_Closable, _handles.CloseOnCollect):
    """``kvrt_workers_create``: threads kept between attention calls.

    ``num_threads`` in all, the calling thread included (0: one per CPU of
    the caller's affinity mask).  Pass it as ``workers=`` to
    :func:`attn_decode` / :func:`attn_prefill` (or call :meth:`decode`,
    :meth:`prefill`).  Results are bitwise those without workers.  A
    context manager; :meth:`close` (``kvrt_workers_destroy``) waits for a
    call running on it.
    """

    def __init__(self, num_threads: int = 0) -> None:
        n = need_uint(num_threads, "num_threads")
        self._lock = threading.Lock()
        self._ptr: Optional[int] = None
        p = ctypes.c_void_p()
        call("kvrt_workers_create", n, ctypes.byref(p), detail=f"num_threads {n}")
        self._ptr = p.value

    def _p(self) -> int:
        if self._ptr is None:
            raise ValueError("workers are closed: create a new kvrt.Workers")
        return self._ptr

    def close(self) -> None:
        with self._lock:   # no call may be running on the object
            p, self._ptr = self._ptr, None
            if p is not None:
                _lib.lib.kvrt_workers_destroy(p)

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def decode(self, q: Any, cache: KvCache, table: BlockTable, **kw: Any) -> Any:
        """:func:`attn_decode` on these workers."""
        return attn_decode(q, cache, table, workers=self, **kw)

    def prefill(self, q: Any, q_indptr: IntsLike, cache: KvCache, table: BlockTable,
                **kw: Any) -> Any:
        """:func:`attn_prefill` on these workers."""
        return attn_prefill(q, q_indptr, cache, table, workers=self, **kw)


def _check_table(table: BlockTable, cuda: bool) -> None:
    if not isinstance(table, BlockTable):
        raise TypeError(f"table: pass a kvrt.BlockTable, not {type(table).__name__}")
    if cuda != table.device.startswith("cuda"):
        raise ValueError(f"table on {table.device}: the {'GPU' if cuda else 'CPU'} call needs "
                         f"it in {'device' if cuda else 'host'} memory")


_ATTN_DETAIL = ("seq_lens in 1..blocks * block_tokens, indices < num_blocks, "
                "blocks inside the pool")


def _call_attn(name: str, workers: Optional[Workers], *args: Any) -> None:
    """The C call name, or its _on variant on the threads workers keep."""
    if workers is None:
        call(name, *args, detail=_ATTN_DETAIL)
    else:
        with workers._lock:
            call(name + "_on", workers._p(), *args, detail=_ATTN_DETAIL)


def attn_decode(q: Any, cache: KvCache, table: BlockTable, *, out: Any = None,
                q_dtype: Optional[DTypeLike] = None, out_dtype: Optional[DTypeLike] = None,
                sm_scale: Optional[float] = None, window_left: int = -1,
                logit_softcap: float = 0.0, impl: Union[AttnImpl, str] = AttnImpl.FAST,
                num_threads: int = 0, workers: Optional[Workers] = None) -> Any:
    """``kvrt_attn_decode``: one query token per sequence, at seq_lens[s] - 1.

    ``q``: [num_seqs][num_q_heads][head_dim]; returns ``out`` of the same
    shape (allocated like q, of ``out_dtype`` or q's type, when not given).
    ``sm_scale`` defaults to 1/sqrt(head_dim); ``window_left`` -1 is no
    sliding window; ``logit_softcap`` 0 is none.
    """
    check_cache_device(cache, False, q)
    _check_table(table, False)
    qd, rows, heads = q_info(q, cache, q_dtype, False)
    if rows != table.num_seqs:
        raise ValueError(f"q: {rows} rows for {table.num_seqs} sequences; decode takes one each")
    qp = tensor_ptr(q, "q", (rows, heads, cache.layout.head_dim), cuda=False)
    out, od, op = check_out(out, q, tuple(q.shape), out_dtype, False)
    prm = attn_params(cache, heads, qd, od, sm_scale, window_left, logit_softcap, impl,
                      num_threads)
    _call_attn("kvrt_attn_decode", workers, ctypes.byref(prm), qp, ctypes.byref(cache._c),
               ctypes.byref(table._c), op)
    return out


def attn_prefill(q: Any, q_indptr: IntsLike, cache: KvCache, table: BlockTable, *,
                 out: Any = None, q_dtype: Optional[DTypeLike] = None,
                 out_dtype: Optional[DTypeLike] = None, sm_scale: Optional[float] = None,
                 window_left: int = -1, logit_softcap: float = 0.0,
                 impl: Union[AttnImpl, str] = AttnImpl.FAST, num_threads: int = 0,
                 workers: Optional[Workers] = None) -> Any:
    """``kvrt_attn_prefill``: chunked prefill, causal.

    Sequence s has query rows ``q[q_indptr[s]:q_indptr[s + 1]]``, the last
    tokens of its ``seq_lens[s]`` (their K/V already appended).  ``q``:
    [q_indptr[-1]][num_q_heads][head_dim]; the rest as :func:`attn_decode`.
    """
    check_cache_device(cache, False, q)
    _check_table(table, False)
    qd, rows, heads = q_info(q, cache, q_dtype, False)
    ip, qi = int_array(q_indptr, "q_indptr", np.int32, table.num_seqs + 1)
    if qi[0] != 0 or (np.diff(qi) < 0).any() or int(qi[-1]) != rows:
        raise ValueError(f"q_indptr: pass 0 first, non-decreasing, ending at q's {rows} rows")
    qp = tensor_ptr(q, "q", (rows, heads, cache.layout.head_dim), cuda=False)
    out, od, op = check_out(out, q, tuple(q.shape), out_dtype, False)
    prm = attn_params(cache, heads, qd, od, sm_scale, window_left, logit_softcap, impl,
                      num_threads)
    _call_attn("kvrt_attn_prefill", workers, ctypes.byref(prm), qp, ip,
               ctypes.byref(cache._c), ctypes.byref(table._c), op)
    return out
