# SPDX-License-Identifier: MIT
"""The worker side: copies between vLLM's KV tensors and the kvpool space."""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Sequence, Tuple

import numpy as np
import torch
from vllm.v1.kv_offload.base import (BlockIDsLoadStoreSpec, CanonicalKVCaches,
                                     GPULoadStoreSpec, LoadStoreSpec, OffloadingWorker,
                                     TransferResult)

import kvrt


def _page_layout(layers: int, layer_stride: int, page: int, num_blocks: int,
                 block_stride: int) -> kvrt.Layout:
    """``layers`` raw pages of ``page`` bytes per block, as a kvrt layout.

    kvrt layouts always have K and V: a page is its two halves, each one
    token of one head of ``page / 4`` f16 elements; copies move bytes, so
    the element type does not matter, only the geometry (same on both sides).
    """
    return kvrt.Layout.custom(layers, 1, page // 4, 1, num_blocks, kvrt.DType.F16,
                              layer_stride=layer_stride, kv_stride=page // 2,
                              block_stride=block_stride, token_stride=page // 2,
                              head_stride=page // 2)


class _Plan:
    """One copy call: a run of tensors (layers) with equal pages and spacing."""

    __slots__ = ("torch_side", "pool_side", "bytes_per_block")

    def __init__(self, torch_side: kvrt.BlockArray, pool_side: kvrt.BlockArray,
                 bytes_per_block: int) -> None:
        self.torch_side = torch_side
        self.pool_side = pool_side
        self.bytes_per_block = bytes_per_block


class KvpoolOffloadingWorker(OffloadingWorker):
    """Stores and loads of whole blocks, one libkvrt copy per run of layers.

    Rank ``rank`` owns bytes ``[rank * worker_bytes, +worker_bytes)`` of each
    kvpool block (with ``replicated``, every rank's KV is the same and all
    use the one slice at 0, which only rank 0 writes); inside them, the offloaded tensors' pages follow each
    other in the order of ``kv_caches.tensors``.  Host tensors are copied by
    :meth:`kvrt.Pool.copy_blocks` in the caller (the job is finished on
    return); CUDA tensors by :meth:`kvrt.gpu.Gpu.copy_blocks` on a stream
    that waits for the compute stream, finished when its event is.
    """

    def __init__(self, space: kvrt.Space, kv_caches: CanonicalKVCaches, rank: int,
                 worker_bytes: int, on_shutdown: Optional[Callable[[], None]] = None,
                 replicated: bool = False) -> None:
        self.space = space
        # A replicated layout's other ranks have nothing of their own to store.
        self._skip_stores = replicated and rank > 0
        slot = 0 if replicated else rank
        self._on_shutdown = on_shutdown
        self._finished: List[TransferResult] = []
        self._pending_gpu: Deque[Tuple[int, Any, int, float]] = deque()
        info = space.info()
        tensors = kv_caches.tensors
        if not tensors:
            raise ValueError("kvpool worker: vLLM registered no KV tensor to offload")
        devs = {t.tensor.device.type for t in tensors}
        if len(devs) != 1:
            raise ValueError(f"kvpool worker: KV tensors on several devices {sorted(devs)}")
        self.device_type = devs.pop()
        self._gpu: Any = None
        if self.device_type == "cuda":
            from kvrt import gpu as kgpu
            dev = tensors[0].tensor.device
            self._gpu = kgpu.Gpu(space.pool, dev.index if dev.index is not None
                                 else torch.cuda.current_device())
            # once: blocks backed later are registered by the copy that reaches them
            self._gpu.register_space(space)
        elif self.device_type != "cpu":
            raise ValueError(f"kvpool worker: KV tensors on {self.device_type!r}; kvpool "
                             "copies to and from 'cpu' and 'cuda' tensors")
        # Where each tensor's page lives in this rank's slice.
        pages = [int(t.page_size_bytes) for t in tensors]
        for i, (t, page) in enumerate(zip(tensors, pages)):
            nbytes = t.tensor.element_size() * t.tensor.numel()
            if page % 4 or page <= 0:
                raise ValueError(f"kvpool worker: tensor {i} has pages of {page} bytes; "
                                 "kvpool copies pages that are a multiple of 4 bytes")
            if not t.tensor.is_contiguous() or nbytes % page:
                raise ValueError(f"kvpool worker: tensor {i} is not a contiguous array "
                                 f"of {page}-byte pages")
        if sum(pages) > worker_bytes:
            raise ValueError(f"kvpool worker: the KV tensors hold {sum(pages)} bytes per "
                             f"block, more than the {worker_bytes} vLLM announced")
        if (slot + 1) * worker_bytes > info.block_bytes:
            raise ValueError(f"kvpool worker: rank {rank} needs bytes up to "
                             f"{(slot + 1) * worker_bytes} of a block, the space's blocks "
                             f"have {info.block_bytes}: the space belongs to another "
                             "parallel layout")
        slice_base = space.base_address + slot * worker_bytes
        pool_blocks = info.nr_blocks
        self.bytes_per_block = sum(pages)
        self._plans = self._make_plans(tensors, pages, slice_base, pool_blocks,
                                       info.block_bytes, space, self.device_type)

    @staticmethod
    def _make_plans(tensors: Sequence[Any], pages: List[int], slice_base: int,
                    pool_blocks: int, block_bytes: int, space: kvrt.Space,
                    device: str) -> List[_Plan]:
        plans: List[_Plan] = []
        off = 0
        i = 0
        while i < len(tensors):
            page = pages[i]
            base = tensors[i].tensor.data_ptr()
            nblocks = tensors[i].tensor.element_size() * tensors[i].tensor.numel() // page
            # Extend over the following tensors with the same page, block count
            # and a constant distance between bases: one call for all of them.
            j, step = i + 1, None
            while j < len(tensors):
                t = tensors[j]
                nb = t.tensor.element_size() * t.tensor.numel() // pages[j]
                d = t.tensor.data_ptr() - tensors[j - 1].tensor.data_ptr()
                if pages[j] != page or nb != nblocks or d <= 0 or (step is not None
                                                                  and d != step):
                    break
                step = d
                j += 1
            n = j - i
            tl = _page_layout(n, step or 0, page, nblocks, page)
            pl = _page_layout(n, page, page, pool_blocks, block_bytes)
            # Addresses, not tensors: one array spans several layer tensors.
            owner = tensors[i].tensor
            plans.append(_Plan(kvrt.BlockArray(tl, base, owner=owner, device=device),
                               kvrt.BlockArray(pl, slice_base + off, owner=space),
                               n * page))
            off += n * page
            i = j
        return plans

    def _pairs(self, gpu_spec: GPULoadStoreSpec, pool_spec: LoadStoreSpec,
               store: bool) -> np.ndarray:
        if not isinstance(pool_spec, BlockIDsLoadStoreSpec):
            raise TypeError(f"kvpool worker: pass a KvpoolLoadStoreSpec, not "
                            f"{type(pool_spec).__name__}")
        g = np.asarray(gpu_spec.block_ids, dtype=np.int64)
        p = np.asarray(pool_spec.block_ids, dtype=np.int64)
        if g.shape != p.shape:
            raise ValueError(f"kvpool worker: {g.size} vLLM blocks for {p.size} kvpool "
                             "blocks; a transfer pairs them one to one")
        src, dst = (g, p) if store else (p, g)
        return np.stack([src, dst], axis=1).astype(np.uint32)

    def _transfer(self, job_id: int, pairs: np.ndarray, store: bool, stream: Any = None) -> bool:
        t0 = time.perf_counter()
        if pairs.shape[0]:
            for plan in self._plans:
                dst, src = ((plan.pool_side, plan.torch_side) if store
                            else (plan.torch_side, plan.pool_side))
                if self._gpu is not None:
                    self._gpu.copy_blocks(dst, src, pairs, stream=stream)
                else:
                    self.space.pool.copy_blocks(dst, src, pairs)
        nbytes = int(pairs.shape[0]) * self.bytes_per_block
        if self._gpu is not None:
            ev = torch.cuda.Event()
            ev.record(stream)
            self._pending_gpu.append((job_id, ev, nbytes, t0))
        else:
            self._finished.append(TransferResult(job_id=job_id, success=True,
                                                 transfer_size=nbytes,
                                                 transfer_time=time.perf_counter() - t0))
        return True

    def _stream(self) -> Any:
        if self._gpu is None:
            return None
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())  # after the model wrote the KV
        return s

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec,
                     dst_spec: LoadStoreSpec) -> bool:
        """vLLM blocks ``src_spec.block_ids`` into kvpool blocks ``dst_spec.block_ids``."""
        pairs = self._pairs(src_spec, dst_spec, True)
        if self._skip_stores:
            pairs = pairs[:0]
        return self._transfer(job_id, pairs, True, self._stream())

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec,
                    expedited: bool = False) -> bool:
        """kvpool blocks ``src_spec.block_ids`` into vLLM blocks ``dst_spec.block_ids``."""
        return self._transfer(job_id, self._pairs(dst_spec, src_spec, False), False,
                              self._stream())

    def get_finished(self) -> List[TransferResult]:
        """Jobs done since the last call (GPU: their events have completed)."""
        while self._pending_gpu and self._pending_gpu[0][1].query():
            job, _ev, nbytes, t0 = self._pending_gpu.popleft()
            self._finished.append(TransferResult(job_id=job, success=True,
                                                 transfer_size=nbytes,
                                                 transfer_time=time.perf_counter() - t0))
        out, self._finished = self._finished, []
        return out

    def wait(self, job_ids: set) -> None:
        """Host copies are done on return; GPU jobs wait for their events."""
        for job, ev, _n, _t in list(self._pending_gpu):
            if job in job_ids:
                ev.synchronize()

    def shutdown(self) -> None:
        """Drain GPU jobs and leave the space."""
        for _job, ev, _n, _t in self._pending_gpu:
            ev.synchronize()
        self._pending_gpu.clear()
        if self._gpu is not None:
            self._gpu.close()  # unregisters the space
            self._gpu = None
        if self._on_shutdown is not None:
            cb, self._on_shutdown = self._on_shutdown, None
            cb()
