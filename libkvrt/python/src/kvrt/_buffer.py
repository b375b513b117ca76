# SPDX-License-Identifier: MIT
"""Memory the library reads or writes: numpy arrays, torch tensors, addresses.

torch is never imported here: a tensor is recognised by its type's module,
so ``import kvrt`` works without torch and costs nothing with it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from ._call import need_int


def is_torch_tensor(obj: Any) -> bool:
    """True for a torch.Tensor (or subclass), without importing torch."""
    for cls in type(obj).__mro__:
        if cls.__name__ == "Tensor" and cls.__module__.split(".")[0] == "torch":
            return True
    return False


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One contiguous range of memory and what keeps it alive.

    ``nbytes`` is None for a bare address (its size is the caller's word);
    ``device`` is "cpu" or "cuda"; ``index`` the CUDA ordinal (None on CPU).
    """

    address: int
    nbytes: Optional[int]
    device: str
    index: Optional[int]
    writable: bool
    itemsize: Optional[int]
    kind: str            # "numpy", "torch" or "address"
    keep: Any            # the object that owns the memory

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def where(self) -> str:
        return "cuda:%d" % self.index if self.is_cuda and self.index is not None else self.device


def as_buffer(obj: Any, what: str, *, owner: Any = None, device: Optional[str] = None,
              device_index: Optional[int] = None) -> Buffer:
    """A :class:`Buffer` over ``obj``: a C-contiguous numpy array, a contiguous
    torch tensor (CPU or CUDA), or an int address with ``owner`` keeping the
    memory alive (``device`` "cpu", the default, or "cuda")."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError(f"{what}: the array is not C-contiguous (strides {obj.strides}): "
                             "pass the cache array itself, not a strided view of it "
                             "(np.ascontiguousarray would copy, and the copy is not the cache)")
        if device not in (None, "cpu"):
            raise ValueError(f"{what}: a numpy array is host memory; device must be 'cpu'")
        return Buffer(obj.ctypes.data, obj.nbytes, "cpu", None, bool(obj.flags.writeable),
                      obj.itemsize, "numpy", obj)
    if is_torch_tensor(obj):
        if not obj.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (strides {tuple(obj.stride())}):"
                             " pass the cache tensor itself, not a strided view of it "
                             "(.contiguous() would copy, and the copy is not the cache)")
        dev = obj.device
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"{what}: tensor on {dev}; pass a CPU or CUDA tensor")
        return Buffer(int(obj.data_ptr()), obj.numel() * obj.element_size(), dev.type,
                      dev.index if dev.type == "cuda" else None, True, obj.element_size(),
                      "torch", obj)
    if isinstance(obj, int) and not isinstance(obj, bool):
        addr = need_int(obj, what)
        if addr <= 0 or addr >= 1 << 64:
            raise ValueError(f"{what}: address {addr:#x}: pass a non-NULL 64-bit address")
        if owner is None:
            raise TypeError(f"{what}: a bare address needs owner=, the object that keeps "
                            "its memory alive (or pass the numpy array / torch tensor itself)")
        dev_s = device or "cpu"
        if dev_s not in ("cpu", "cuda"):
            raise ValueError(f"{what}: device {device!r}: pass 'cpu' or 'cuda'")
        return Buffer(addr, None, dev_s, device_index if dev_s == "cuda" else None, True, None,
                      "address", owner)
    raise TypeError(f"{what}: pass a numpy array, a torch tensor, or an int address with "
                    f"owner=, not {type(obj).__name__}")
