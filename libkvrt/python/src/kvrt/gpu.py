# SPDX-License-Identifier: MIT
"""The GPU calls (``kvrt_gpu_*``) on torch CUDA tensors.

    ok, why = kvrt.gpu.probe()
    with kvrt.gpu.Gpu(pool, device=0) as gpu:
        gpu.register_space(space)
        gpu.copy_blocks(pool_array, cuda_array, pairs, stream=torch.cuda.current_stream())

libkvrt loads the CUDA driver at run time, so this module imports and
:func:`probe` answers on any host; :class:`Gpu` raises
:class:`kvrt.NoDeviceError` (ENODEV) with the library's reason where no GPU
can be used.  Device memory is given as CUDA tensors (on the Gpu's
device), or as int addresses with an owner (``device="cuda"`` in
:class:`kvrt.BlockArray`).  A ``stream`` is None (the legacy default
stream), an int ``CUstream`` handle, or a ``torch.cuda.Stream`` (its
``cuda_stream``); every call is queued on it, asynchronously, as in CUDA:
keep the tensors alive until the stream has run it.  Arguments are checked
(types, devices, shapes) before the library is called.
"""
from __future__ import annotations

import ctypes
import dataclasses
import enum
import errno
import threading
from typing import Any, Dict, Optional, Tuple, Union, cast

import numpy as np

from . import _handles, _lib
from ._call import call, need_int, need_uint
from .attention import (AttnImpl, BlockTable, IntsLike, KvCache, append_args, attn_params,
                        check_out, device_of, int_array, q_info, tensor_ptr)
from .blocks import BlockArray, PairsLike, check_copy, pairs_pointer
from .errors import KvrtError, make_error
from .layout import DTypeLike
from .pool import Pool, Space, _Closable


def probe() -> Tuple[bool, str]:
    """``kvrt_gpu_probe``: (True, "") when a GPU can be used, else (False, why),
    e.g. "libcuda.so.1: cannot open shared object file", "built without nvcc"."""
    buf = ctypes.create_string_buffer(512)
    ret = _lib.lib.kvrt_gpu_probe(buf, len(buf))
    return ret == 0, buf.value.decode("utf-8", "replace")


class CopyMethod(enum.IntEnum):
    """``enum kvrt_gpu_copy_method``."""

    AUTO = 0
    BATCH = 1
    KERNEL = 2
    MEMCPY = 3


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """``struct kvrt_gpu_info``."""

    name: str
    device: int
    cc_major: int
    cc_minor: int
    driver_version: int
    sm_count: int
    batch_memcpy: bool
    total_mem: int
    kernel_copy_max: int
    registered_bytes: int


@dataclasses.dataclass(frozen=True)
class PlanInfo:
    """``struct kvrt_gpu_plan_info``: the last plan's tasks and splits."""

    num_seqs: int
    num_work: int
    num_split: int
    split_tokens: int
    grid: int


StreamLike = Union[None, int, Any]


def stream_handle(stream: StreamLike) -> Optional[int]:
    """The CUstream of None (legacy default), an int, or a torch.cuda.Stream."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0 or stream >= 1 << 64:
            raise ValueError(f"stream {stream}: pass a CUstream handle (a pointer value)")
        return stream or None
    h = getattr(stream, "cuda_stream", None)
    if isinstance(h, int):
        return h or None
    raise TypeError(f"stream: pass None, an int CUstream, or a torch.cuda.Stream, not "
                    f"{type(stream).__name__}")


class _GpuHandle:
    """The C handle, closed before its pool's (it sits in the pool's set of
    dependants, as spaces do), after unregistering its spaces, which it
    keeps mapped (a view's hold) while registered."""

    __slots__ = ("ptr", "pool", "close_requested", "spaces", "__weakref__")

    def __init__(self, ptr: int, pool: "_handles.PoolHandle") -> None:
        self.ptr: Optional[int] = ptr
        self.pool = pool
        self.close_requested = False
        self.spaces: Dict[int, "_handles.SpaceHandle"] = {}
        with _handles._lock:
            pool.spaces.add(self)  # type: ignore[arg-type]

    def request_close(self) -> None:
        with _handles._lock:
            if self.close_requested:
                return
            self.close_requested = True
            ptr, self.ptr = self.ptr, None
            if ptr is not None:
                _lib.lib.kvrt_gpu_close(ptr)   # unregisters what is registered
            spaces, self.spaces = list(self.spaces.values()), {}
        for s in spaces:
            s.view_gone()
        self.pool.space_gone(self)  # type: ignore[arg-type]


class Plan(_handles.CloseOnCollect):
    """``struct kvrt_gpu_plan``: attention work for up to ``max_seqs``
    sequences and ``max_q_tokens`` query tokens.  Made by :meth:`Gpu.plan`;
    :meth:`Gpu.attn_decode` and :meth:`Gpu.attn_prefill` keep one per
    model shape and plan on each call."""

    def __init__(self, gpu: "Gpu", max_seqs: int, max_q_tokens: int) -> None:
        self._gpu = gpu
        self.max_seqs = need_uint(max_seqs, "max_seqs")
        self.max_q_tokens = need_uint(max_q_tokens, "max_q_tokens")
        if self.max_seqs == 0:
            raise ValueError("max_seqs: pass at least 1")
        p = ctypes.c_void_p()
        call("kvrt_gpu_plan_create", gpu._p(), self.max_seqs, self.max_q_tokens,
             ctypes.byref(p))
        self._ptr: Optional[int] = p.value
        self.last_stream: Optional[int] = None
        self.ran = False

    def _p(self) -> int:
        if self._ptr is None:
            raise ValueError("the plan is destroyed")
        return self._ptr

    def close(self) -> None:
        """``kvrt_gpu_plan_destroy`` (after its last run, which it waits for)."""
        p, self._ptr = self._ptr, None
        if p is not None:
            if self.ran and self._gpu._h.ptr is not None:
                _lib.lib.kvrt_gpu_sync(self._gpu._h.ptr, self.last_stream)
            _lib.lib.kvrt_gpu_plan_destroy(p)

    def info(self) -> PlanInfo:
        """``kvrt_gpu_plan_info``."""
        c = _lib.GpuPlanInfoC()
        call("kvrt_gpu_plan_info", self._p(), ctypes.byref(c))
        return PlanInfo(c.num_seqs, c.num_work, c.num_split, c.split_tokens, c.grid)


class Gpu(_Closable, _handles.CloseOnCollect):
    """``kvrt_gpu_open``: device ordinal ``device`` for ``pool``; a context
    manager (``kvrt_gpu_close`` on exit, which unregisters what is still
    registered).  Raises :class:`kvrt.NoDeviceError` with the library's
    reason (``library_message``) where no GPU can be used."""

    def __init__(self, pool: Pool, device: int = 0) -> None:
        if not isinstance(pool, Pool):
            raise TypeError(f"pool: pass a kvrt.Pool, not {type(pool).__name__}")
        dev = need_int(device, "device")
        if dev < 0:
            raise ValueError(f"device {dev}: pass a CUDA ordinal >= 0")
        self.device = dev
        self._pool = pool
        self._lock = threading.Lock()
        self._plans: Dict[Tuple[int, int, int], Plan] = {}
        p = ctypes.c_void_p()
        try:
            call("kvrt_gpu_open", pool._ptr(), dev, ctypes.byref(p), detail=f"device {dev}")
        except KvrtError as e:
            if e.errno == errno.ENODEV and not e.library_message:
                # the reason went to the log at info level: ask the library again
                raise make_error(-e.errno, "kvrt_gpu_open", probe()[1] or None,
                                 f"device {dev}") from None
            raise
        self._h = _GpuHandle(p.value, pool._h)  # type: ignore[arg-type]

    def _p(self) -> int:
        return _handles.live_ptr(self._h, "the Gpu is closed: open kvrt.gpu.Gpu(pool) again")

    def close(self) -> None:
        """``kvrt_gpu_close`` (idempotent)."""
        h = getattr(self, "_h", None)
        if h is None:
            return
        for plan in list(self._plans.values()):
            plan.close()
        self._plans.clear()
        h.request_close()

    # ---- information and memory --------------------------------------------

    def info(self) -> GpuInfo:
        """``kvrt_gpu_info``."""
        c = _lib.GpuInfoC()
        call("kvrt_gpu_info", self._p(), ctypes.byref(c))
        return GpuInfo(c.name.decode("utf-8", "replace"), c.device, c.cc_major, c.cc_minor,
                       c.driver_version, c.sm_count, bool(c.batch_memcpy), c.total_mem,
                       c.kernel_copy_max, c.registered_bytes)

    def sync(self, stream: StreamLike = None) -> None:
        """``kvrt_gpu_sync``: wait for everything queued on ``stream``."""
        call("kvrt_gpu_sync", self._p(), stream_handle(stream))

    def register_space(self, space: Space) -> None:
        """``kvrt_gpu_register_space``: pin the space's blocks for fast copies
        (again after it grew: only what is new).  The space stays mapped
        until :meth:`unregister_space` or :meth:`close`."""
        if not isinstance(space, Space):
            raise TypeError(f"space: pass a kvrt.Space, not {type(space).__name__}")
        sp = space._ptr()
        call("kvrt_gpu_register_space", self._p(), sp, detail=f"space {space.name!r}")
        with _handles._lock:
            if sp not in self._h.spaces:
                space._h.view_added()
                self._h.spaces[sp] = space._h

    def unregister_space(self, space: Space) -> None:
        """``kvrt_gpu_unregister_space``."""
        if not isinstance(space, Space):
            raise TypeError(f"space: pass a kvrt.Space, not {type(space).__name__}")
        sp = space._ptr()
        call("kvrt_gpu_unregister_space", self._p(), sp, detail=f"space {space.name!r}")
        with _handles._lock:
            h = self._h.spaces.pop(sp, None)
        if h is not None:
            h.view_gone()

    def register_host(self, array: Any, nbytes: Optional[int] = None) -> int:
        """``kvrt_gpu_register_host``: a page-aligned host range (a numpy array
        or CPU tensor, or an int address with ``nbytes``); returns its address,
        the key for :meth:`unregister_host`.  The caller keeps it alive."""
        if isinstance(array, int) and not isinstance(array, bool):
            if nbytes is None:
                raise TypeError("nbytes: pass the range's size with an int address")
            addr, n = need_uint(array, "address", 64), need_uint(nbytes, "nbytes", 64)
        else:
            array = cast(Any, array)  # an ndarray or a tensor, past the int case
            if device_of(array) != "cpu":
                raise ValueError(f"array on {device_of(array)}: register host memory only")
            addr = tensor_ptr(array, "array", tuple(array.shape), cuda=False)
            n = int(array.nbytes) if isinstance(array, np.ndarray) else \
                array.numel() * array.element_size()
            if nbytes is not None:
                n = need_uint(nbytes, "nbytes", 64)
        import mmap
        if addr % mmap.PAGESIZE or n % mmap.PAGESIZE or n == 0:
            raise ValueError(f"address {addr:#x}, {n} bytes: pass a page-aligned range "
                             f"(multiples of {mmap.PAGESIZE})")
        call("kvrt_gpu_register_host", self._p(), addr, n)
        return addr

    def unregister_host(self, address: int) -> None:
        """``kvrt_gpu_unregister_host``."""
        call("kvrt_gpu_unregister_host", self._p(), need_uint(address, "address", 64))

    # ---- copies and append -----------------------------------------------

    def _check_cuda(self, what: str, dev: str) -> None:
        if dev.startswith("cuda") and dev not in ("cuda", f"cuda:{self.device}"):
            raise ValueError(f"{what} on {dev}, this Gpu is cuda:{self.device}: pass memory "
                             "on the Gpu's device")

    def copy_blocks(self, dst: BlockArray, src: BlockArray, pairs: PairsLike,
                    method: Union[CopyMethod, str] = "auto", stream: StreamLike = None) -> None:
        """``kvrt_gpu_copy_blocks``: copy blocks between device memory and
        registered host memory (either direction, or device to device),
        queued on ``stream``.  ``method``: "auto", "batch", "kernel", "memcpy"."""
        p = check_copy(dst, src, pairs)
        for a, n in ((dst, "dst"), (src, "src")):
            self._check_cuda(n, a.device)
        if not (dst.is_cuda or src.is_cuda):
            raise ValueError("dst and src are both host memory: use Pool.copy_blocks")
        if isinstance(method, str):
            try:
                method = CopyMethod[method.upper()]
            except KeyError:
                raise ValueError(f"method {method!r}: pass 'auto', 'batch', 'kernel' or "
                                 "'memcpy'") from None
        st = stream_handle(stream)
        call("kvrt_gpu_copy_blocks", self._p(), ctypes.byref(dst._c), ctypes.byref(src._c),
             pairs_pointer(p), p.shape[0], int(CopyMethod(method)), st)

    def append_kv(self, cache: KvCache, k: Any, v: Any, slots: Any,
                  dtype: Optional[DTypeLike] = None, stream: StreamLike = None) -> None:
        """``kvrt_gpu_append_kv``: :func:`kvrt.append_kv` with the cache, k, v
        and slots (an int64 CUDA tensor) on the device.  Slots out of range
        are skipped (the host cannot see them)."""
        self._check_cache(cache, k)
        args, _keep = append_args(cache, k, v, slots, dtype, True)
        for x, n in ((k, "k"), (v, "v"), (slots, "slots")):
            self._check_cuda(n, device_of(x))
        st = stream_handle(stream)
        call("kvrt_gpu_append_kv", self._p(), ctypes.byref(cache._c), *args, st)

    def _check_cache(self, cache: KvCache, like: Any) -> None:
        if not isinstance(cache, KvCache):
            raise TypeError(f"cache: pass a kvrt.KvCache, not {type(cache).__name__}")
        if not cache.array.is_cuda:
            raise ValueError(f"cache on {cache.device}: the GPU call needs the cache in device "
                             "memory (a CUDA tensor); use kvrt.append_kv / attn_* on host "
                             "memory")
        self._check_cuda("cache", cache.device)
        if device_of(like) == "cpu":
            raise ValueError("q/k: on cpu; pass a CUDA tensor for the GPU call")

    # ---- attention --------------------------------------------------------

    def _plan_for(self, key: Tuple[int, int, int], seqs: int, q_tokens: int,
                  stream: Optional[int]) -> Plan:
        plan = self._plans.get(key)
        if plan is not None and (plan.max_seqs < seqs or plan.max_q_tokens < q_tokens):
            plan.close()
            plan = None
        if plan is None:
            plan = Plan(self, max(seqs, 1) * 2, max(q_tokens, 0) * 2)
            self._plans[key] = plan
        elif plan.ran:
            # re-planning overwrites the task list the last run reads
            call("kvrt_gpu_sync", self._p(), plan.last_stream)
        plan.last_stream = stream
        plan.ran = True
        return plan

    def _host_lens(self, table: BlockTable, seq_lens_host: Optional[IntsLike]) -> np.ndarray:
        if seq_lens_host is None:
            seq_lens_host = table._keep[2].cpu()   # a synchronising copy
        _p, a = int_array(seq_lens_host, "seq_lens_host", np.int32, table.num_seqs)
        return a

    def _attn(self, q: Any, q_indptr: Any, cache: KvCache, table: BlockTable, out: Any,
              q_dtype: Any, out_dtype: Any, sm_scale: Any, window_left: int,
              logit_softcap: float, stream: StreamLike, seq_lens_host: Any,
              q_indptr_host: Any) -> Any:
        self._check_cache(cache, q)
        if not isinstance(table, BlockTable):
            raise TypeError(f"table: pass a kvrt.BlockTable, not {type(table).__name__}")
        if not table.device.startswith("cuda"):
            raise ValueError("table: host arrays; the GPU call needs int32 CUDA tensors")
        for n, d in (("q", device_of(q)), ("table", table.device)):
            self._check_cuda(n, d)
        qd, rows, heads = q_info(q, cache, q_dtype, True)
        qp = tensor_ptr(q, "q", tuple(q.shape), cuda=True)
        out, od, op = check_out(out, q, tuple(q.shape), out_dtype, True)
        prm = attn_params(cache, heads, qd, od, sm_scale, window_left, logit_softcap,
                          AttnImpl.FAST, 0)
        lens = self._host_lens(table, seq_lens_host)
        st = stream_handle(stream)
        lay = cache.layout
        key = (lay.num_kv_heads, heads, 0 if q_indptr is None else 1)
        with self._lock:
            if q_indptr is None:
                if rows != table.num_seqs:
                    raise ValueError(f"q: {rows} rows for {table.num_seqs} sequences; decode "
                                     "takes one each")
                plan = self._plan_for(key, table.num_seqs, 0, st)
                call("kvrt_gpu_plan_decode", plan._p(), ctypes.byref(prm),
                     ctypes.byref(lay._c), table.num_seqs, lens.ctypes.data)
                call("kvrt_gpu_attn_decode", plan._p(), qp, ctypes.byref(cache._c),
                     ctypes.byref(table._c), op, st)
            else:
                ip, _qi = int_array(q_indptr, "q_indptr", np.int32, table.num_seqs + 1, True)
                if q_indptr_host is None:
                    q_indptr_host = q_indptr.cpu()
                _hp, qh = int_array(q_indptr_host, "q_indptr_host", np.int32,
                                    table.num_seqs + 1)
                if int(qh[0]) != 0 or (np.diff(qh) < 0).any() or int(qh[-1]) != rows:
                    raise ValueError(f"q_indptr: pass 0 first, non-decreasing, ending at q's "
                                     f"{rows} rows")
                plan = self._plan_for(key, table.num_seqs, rows, st)
                call("kvrt_gpu_plan_prefill", plan._p(), ctypes.byref(prm),
                     ctypes.byref(lay._c), table.num_seqs, qh.ctypes.data, lens.ctypes.data)
                call("kvrt_gpu_attn_prefill", plan._p(), qp, ip, ctypes.byref(cache._c),
                     ctypes.byref(table._c), op, st)
        return out

    def attn_decode(self, q: Any, cache: KvCache, table: BlockTable, *, out: Any = None,
                    q_dtype: Optional[DTypeLike] = None, out_dtype: Optional[DTypeLike] = None,
                    sm_scale: Optional[float] = None, window_left: int = -1,
                    logit_softcap: float = 0.0, stream: StreamLike = None,
                    seq_lens_host: Optional[IntsLike] = None) -> Any:
        """Plan and run ``kvrt_gpu_attn_decode``: :func:`kvrt.attn_decode` on
        CUDA tensors (q, cache, table of int32 CUDA tensors; out allocated
        on the device when not given).  Planning needs the lengths on the
        host: pass ``seq_lens_host`` to avoid a synchronising copy.  Planning
        again waits for the plan's previous run (its stream)."""
        return self._attn(q, None, cache, table, out, q_dtype, out_dtype, sm_scale,
                          window_left, logit_softcap, stream, seq_lens_host, None)

    def attn_prefill(self, q: Any, q_indptr: Any, cache: KvCache, table: BlockTable, *,
                     out: Any = None, q_dtype: Optional[DTypeLike] = None,
                     out_dtype: Optional[DTypeLike] = None, sm_scale: Optional[float] = None,
                     window_left: int = -1, logit_softcap: float = 0.0,
                     stream: StreamLike = None, seq_lens_host: Optional[IntsLike] = None,
                     q_indptr_host: Optional[IntsLike] = None) -> Any:
        """Plan and run ``kvrt_gpu_attn_prefill``; ``q_indptr`` an int32 CUDA
        tensor (``q_indptr_host`` its host copy, else one is made)."""
        return self._attn(q, q_indptr, cache, table, out, q_dtype, out_dtype, sm_scale,
                          window_left, logit_softcap, stream, seq_lens_host, q_indptr_host)

    def __repr__(self) -> str:
        return f"<kvrt.gpu.Gpu cuda:{self.device}{' closed' if self.closed else ''}>"
