# SPDX-License-Identifier: MIT
"""KvpoolStorage: SGLang's ``HiCacheStorage`` (0.5.23) over one kvpool space.

SGLang keeps a host (L2) copy of KV pages in its host memory pool
(``MHATokenToKVPoolHost``: one pinned CPU tensor, ``kv_buffer``) and asks an
L3 storage backend to keep pages under their page hash.  This backend keeps
each page in one kvpool block, published in the space's prefix cache under
the page hash, so that engines on one machine (or participants of one
space) find each other's pages, and kvpool's quota evicts the oldest.

Pages move between the host pool and the space with libkvrt's batched block
copy (``Pool.copy_blocks``, no staging buffer): the host tensor is one
``kvrt.BlockArray`` whose ``kvrt.Layout`` carries its own byte strides
(the four MHA host layouts, ``layer_first``, ``page_first``,
``page_first_direct`` and ``page_head``, are all expressible), the space's
blocks are the block-major preset.  Not taken: MHA ``page_unified`` (K and
V interleaved per head group inside a page, no per-element stride formula).
A block therefore holds a page in one canonical order whatever the host
layout, and engines with different host layouts but the same model geometry
share pages.

MLA models (``MLATokenToKVPoolHost``: one latent row of kv_lora_rank +
qk_rope_head_dim elements per token and layer, no V) are taken too: a page's
rows are one block, and since every TP rank holds the same rows, the space
has no TP rank in its name and only SGLang's storage writer
(``is_storage_writer``, TP rank 0) stores; the other ranks' sets store
nothing and report success, and every rank reads.

Call pattern (SGLang's cache controller): the prefetch thread asks
``batch_exists`` for the longest stored prefix, the ranks agree on the
minimum, and later ``batch_get_v1`` loads that prefix; a request may be
cancelled between the two, with no call back to the backend.  So
``batch_exists`` moves no data and keeps no reference: it asks the pool
(a lookup whose references it drops at once) and the tiers
(``kvrt_tier_contains``: the SSD index, Redis EXISTS).  ``batch_get_v1``
looks the pages up again, bringing up what only a tier has, and holds them
only while it copies; a page evicted (or failing its check) in between is
reported False (SGLang then loads the shorter prefix).

Hybrid models (SGLang's v2 calls, ``HybridCacheController``): the host pool
group's ``kv`` pool is the one above; an ``swa`` sidecar (an MHA host pool
of the sliding-window layers) keeps its pages in a space of its own, named
like the main one with the pool kind in its identity, under the same keys.
Sidecar spaces are in the pool only (no tiers): a page a tier brings back
without its SWA part is a miss, not a wrong hit.  ``batch_exists_v2`` folds
the pools' presence (each pool's hit policy) without moving data; a
``batch_get_v2`` page counts only where every transfer carrying its key
loaded it.  Mamba state, indexer, DeepSeek V4 and draft pools are refused
at registration: their bytes are not one K/V tensor of fixed bytes per page.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo, PoolHitPolicy,
                                                  PoolName, PoolTransferResult)

import kvrt
from kvrt import process_pool
from kvrt.layout import DType, Layout, LayoutKind
from kvrt.revision import model_revision
from kvrt.tiers import CONFIG_KEYS as TIER_KEYS
from kvrt.tiers import TierConfig

logger = logging.getLogger("kvrt.sglang")

#: The ``--hicache-storage-backend-extra-config`` keys this backend reads,
#: besides SGLang's own (backend_name, module_path, class_name, interface_v1).
CONFIG_KEYS: Dict[str, str] = {
    "kvpool_backend": "'auto' (default), 'kmod' or 'embedded': which pool libkvrt opens",
    "kvpool_device": "the kvpool device path for kmod (default: libkvrt's, /dev/kvpool)",
    "kvpool_pool_bytes": "embedded only: cap of the in-process pool in bytes (default 0: "
                         "libkvrt's)",
    "kvpool_quota_bytes": "quota of the space when this instance creates it (default 8 GiB); "
                          "pages past it evict the least recently used",
    "kvpool_tenant": "a string that separates tenants: same model, different tenant, "
                     "different space (default '')",
    "kvpool_space_prefix": "first part of the space name, [A-Za-z0-9._-]{1,16} "
                           "(default 'sgl')",
    "kvpool_model_revision": "the weights' revision in the space identity (default: from "
                             "the model directory's weight and config files' names, sizes "
                             "and mtimes, or a Hugging Face cache's commit; '' for the name "
                             "only)",
    "kvpool_mode": "permission bits of a space this instance creates, an int (default "
                   "0o600 = 384; 0o660 = 432 lets the group's engines join)",
    **TIER_KEYS,
}

_DEFAULT_QUOTA = 8 << 30
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
# MLA host layouts; page_unified is page_first_direct's bytes for MLA (pool_host/mla.py)
_MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_unified")
_KVRT_DTYPE = {torch.float32: DType.F32, torch.float16: DType.F16,
               torch.bfloat16: DType.BF16}


# ---- layouts ----------------------------------------------------------------

def _axes(host_layout: str, shape: Sequence[int], strides: Sequence[int], page_size: int
          ) -> Tuple[int, Dict[str, int]]:
    """(number of pages, byte strides by axis) of a K/V tensor in one of
    SGLang's MHA host layouts; ``strides`` in bytes, shape starting with 2 (K, V)."""
    s = list(strides)
    if host_layout == "layer_first":        # [kv][layer][token][head][dim]
        st = dict(kv=s[0], layer=s[1], token=s[2], head=s[3], block=page_size * s[2])
        pages = shape[2] // page_size
    elif host_layout == "page_first":       # [kv][token][layer][head][dim]
        st = dict(kv=s[0], token=s[1], layer=s[2], head=s[3], block=page_size * s[1])
        pages = shape[1] // page_size
    elif host_layout == "page_first_direct":  # [kv][page][layer][slot][head][dim]
        st = dict(kv=s[0], block=s[1], layer=s[2], token=s[3], head=s[4])
        pages = shape[1]
    elif host_layout == "page_head":        # [kv][page][head][slot][layer][dim]
        st = dict(kv=s[0], block=s[1], head=s[2], token=s[3], layer=s[4])
        pages = shape[1]
    else:
        raise ValueError(f"host layout {host_layout!r}: kvpool storage takes "
                         f"{', '.join(_LAYOUTS)} (pass --hicache-mem-layout with one)")
    return pages, st


def _mla_axes(host_layout: str, shape: Sequence[int], strides: Sequence[int],
              page_size: int, row_bytes: int) -> Tuple[int, Dict[str, int]]:
    """(number of pages, byte strides) of an MLA host buffer.  kvrt's layouts
    have K and V, MLA one latent row per token: the row's first half is
    carried as "K" and its second half as "V" (kv stride: half a row)."""
    s = list(strides)
    if host_layout == "layer_first":          # [layer][token][1][row]
        st = dict(layer=s[0], token=s[1], block=page_size * s[1])
        pages = shape[1] // page_size
    elif host_layout == "page_first":         # [token][layer][1][row]
        st = dict(token=s[0], layer=s[1], block=page_size * s[0])
        pages = shape[0] // page_size
    elif host_layout in ("page_first_direct", "page_unified"):  # [page][layer][slot](1)[row]
        st = dict(block=s[0], layer=s[1], token=s[2])
        pages = shape[0]
    else:
        raise ValueError(f"MLA host layout {host_layout!r}: kvpool storage takes "
                         f"{', '.join(_MLA_LAYOUTS)} (pass --hicache-mem-layout with one)")
    st.update(kv=row_bytes // 2, head=row_bytes)
    return pages, st


def _flat_page_shape(host_layout: str, layers: int, heads: int, dim: int, page: int
                     ) -> Tuple[int, ...]:
    """The shape SGLang's ``get_data_page`` gives one page (before flattening)."""
    return {"layer_first": (2, layers, page, heads, dim),
            "page_first": (2, page, layers, heads, dim),
            "page_first_direct": (2, 1, layers, page, heads, dim),
            "page_head": (2, 1, heads, page, layers, dim)}[host_layout]


def _mla_flat_page_shape(host_layout: str, layers: int, row: int, page: int
                         ) -> Tuple[int, ...]:
    """The shape of one MLA page as SGLang's get_data_page / set_from_flat_data_page
    order it (page_unified, which SGLang's MLA pool does not page, as page_first_direct)."""
    return {"layer_first": (layers, page, 1, row),
            "page_first": (page, layers, 1, row),
            "page_first_direct": (1, layers, page, 1, row),
            "page_unified": (1, layers, page, row)}[host_layout]


def _contiguous_strides(shape: Sequence[int], itemsize: int) -> List[int]:
    out, acc = [], itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


class _Geometry:
    """What one page is: layers, heads, head dim, tokens, dtype; and how
    kvrt sees it (its dtype, and head_dim in units of that dtype).

    MLA (``mla`` = (kv_lora_rank, qk_rope_head_dim)): one head whose
    ``head_dim`` is the latent row, no V; kvrt sees each half of the row
    as K and V, in 2-byte units, so a block is exactly the page's rows."""

    def __init__(self, layers: int, heads: int, head_dim: int, page_size: int,
                 dtype: torch.dtype, mla: Optional[Tuple[int, int]] = None) -> None:
        self.layers, self.heads, self.head_dim = layers, heads, head_dim
        self.page_size, self.dtype, self.mla = page_size, dtype, mla
        self.itemsize = torch.empty((), dtype=dtype).element_size()
        if mla is not None:
            row = head_dim * self.itemsize
            if row % 4:
                raise ValueError(f"MLA latent row of {head_dim} {dtype} elements is {row} "
                                 "bytes, not a multiple of 4: kvpool storage splits it "
                                 "into two halves of 2-byte units; use another HiCache "
                                 "backend for this model")
            self.row_bytes = row
            self.kdtype, self.kdim = DType.F16, row // 4
            self.page_bytes = layers * row * page_size
            return
        if dtype in _KVRT_DTYPE:
            self.kdtype, self.kdim = _KVRT_DTYPE[dtype], head_dim
        else:
            # fp8/uint8 pools: kvrt's fp8 carries per-block scales SGLang does
            # not have; the copy moves bytes, so carry them as 2-byte units.
            row = head_dim * self.itemsize
            if row % 2:
                raise ValueError(f"dtype {dtype} with head_dim {head_dim}: a head row of "
                                 f"{row} bytes is odd; kvpool storage takes f32, f16, "
                                 "bf16, or 1-byte types with an even head_dim")
            self.kdtype, self.kdim = DType.F16, row // 2
        self.page_bytes = 2 * layers * heads * head_dim * page_size * self.itemsize

    def layout(self, num_blocks: int, st: Optional[Dict[str, int]] = None) -> Layout:
        """A kvrt layout of ``num_blocks`` pages: block-major, or with strides ``st``."""
        if st is None:
            return Layout.preset(LayoutKind.BLOCK_MAJOR, self.layers, self.heads, self.kdim,
                                 self.page_size, num_blocks, self.kdtype)
        return Layout.custom(self.layers, self.heads, self.kdim, self.page_size, num_blocks,
                             self.kdtype, layer_stride=st["layer"], kv_stride=st["kv"],
                             block_stride=st["block"], token_stride=st["token"],
                             head_stride=st["head"])

    def identity(self) -> Dict[str, Any]:
        if self.mla is not None:
            return {"mla": [self.mla[0], self.mla[1]], "layers": self.layers,
                    "latent_row": self.head_dim, "page_size": self.page_size,
                    "dtype": str(self.dtype).replace("torch.", "")}
        return {"layers": self.layers, "heads": self.heads, "head_dim": self.head_dim,
                "page_size": self.page_size, "dtype": str(self.dtype).replace("torch.", "")}


def _host_geometry(host: Any) -> Tuple[_Geometry, int, Dict[str, int]]:
    """Check an SGLang host pool; its geometry, page count and byte strides."""
    kind = type(host).__name__
    if getattr(host, "kv_lora_rank", None) is not None or "MLA" in kind:
        return _mla_host_geometry(host)
    for attr in ("layout", "kv_buffer", "page_size", "layer_num", "head_num", "head_dim",
                 "dtype"):
        if not hasattr(host, attr):
            raise TypeError(f"host pool {kind} has no {attr!r}: pass SGLang's "
                            "MHATokenToKVPoolHost")
    if getattr(host, "v_head_dim", host.head_dim) != host.head_dim:
        raise ValueError(f"host pool: v_head_dim {host.v_head_dim} != head_dim "
                         f"{host.head_dim}; kvpool storage takes equal K and V widths")
    if getattr(host, "dcp_size", 1) != 1:
        raise ValueError("host pool: decode context parallel (dcp_size > 1) is not supported")
    buf = host.kv_buffer
    if not isinstance(buf, torch.Tensor) or buf.device.type != "cpu":
        raise TypeError("host pool kv_buffer: expected one CPU tensor (SGLang's host pool "
                        "memory)")
    if host.layout not in _LAYOUTS:
        raise ValueError(f"host layout {host.layout!r}: kvpool storage takes "
                         f"{', '.join(_LAYOUTS)} (pass --hicache-mem-layout with one)")
    geo = _Geometry(int(host.layer_num), int(host.head_num), int(host.head_dim),
                    int(host.page_size), buf.dtype)
    _check_whole(host, geo)
    if buf.dim() < 5 or buf.shape[0] != 2 or buf.shape[-1] != geo.head_dim \
            or buf.stride(-1) != 1:
        raise ValueError(f"host pool kv_buffer shape {tuple(buf.shape)} strides "
                         f"{tuple(buf.stride())}: not SGLang's {host.layout} K/V layout")
    es = buf.element_size()
    pages, st = _axes(host.layout, tuple(buf.shape), [x * es for x in buf.stride()],
                      geo.page_size)
    return geo, pages, st


def _mla_host_geometry(host: Any) -> Tuple[_Geometry, int, Dict[str, int]]:
    """_host_geometry for SGLang's MLATokenToKVPoolHost."""
    kind = type(host).__name__
    for attr in ("layout", "kv_buffer", "page_size", "layer_num", "kv_lora_rank",
                 "qk_rope_head_dim", "kv_cache_dim", "dtype"):
        if not hasattr(host, attr):
            raise TypeError(f"host pool {kind} has no {attr!r}: pass SGLang's "
                            "MLATokenToKVPoolHost")
    if getattr(host, "dcp_size", 1) != 1:
        raise ValueError("host pool: decode context parallel (dcp_size > 1) is not supported")
    if host.layout not in _MLA_LAYOUTS:
        raise ValueError(f"MLA host layout {host.layout!r}: kvpool storage takes "
                         f"{', '.join(_MLA_LAYOUTS)} (pass --hicache-mem-layout with one)")
    buf = host.kv_buffer
    if buf is None:
        raise ValueError(f"host pool {kind} has no kv_buffer (an allocator-only or "
                         "deduplicated MLA host pool): kvpool storage copies host pages, "
                         "so every rank needs its own host buffer")
    if not isinstance(buf, torch.Tensor) or buf.device.type != "cpu":
        raise TypeError("host pool kv_buffer: expected one CPU tensor (SGLang's host pool "
                        "memory)")
    row = int(host.kv_cache_dim)
    geo = _Geometry(int(host.layer_num), 1, row, int(host.page_size), buf.dtype,
                    mla=(int(host.kv_lora_rank), int(host.qk_rope_head_dim)))
    _check_whole(host, geo)
    if buf.dim() != (4 if host.layout != "page_first_direct" else 5) \
            or buf.shape[-1] != row or buf.stride(-1) != 1 \
            or (host.layout != "page_unified" and buf.shape[-2] != 1):
        raise ValueError(f"host pool kv_buffer shape {tuple(buf.shape)} strides "
                         f"{tuple(buf.stride())}: not SGLang's MLA {host.layout} layout")
    es = buf.element_size()
    pages, st = _mla_axes(host.layout, tuple(buf.shape), [x * es for x in buf.stride()],
                          geo.page_size, geo.row_bytes)
    return geo, pages, st


def _check_whole(host: Any, geo: _Geometry) -> None:
    """Refuse a host pool whose pages have bytes outside ``kv_buffer`` (such as
    MXFP8's scales): kvpool storage copies kv_buffer only, so it would store
    pages that load back without them."""
    kind = type(host).__name__
    in_buffer = (1 if geo.mla else 2) * geo.layers * geo.heads * geo.head_dim * geo.itemsize
    per_token = getattr(host, "size_per_token", in_buffer)
    outside = [a for a in ("k_scale_host", "v_scale_host")
               if getattr(host, a, None) is not None]
    if outside or "MXFP8" in kind or per_token != in_buffer:
        what = ", ".join(outside) or "tensors besides kv_buffer"
        use = ("an MLA model whose host pool is MLATokenToKVPoolHost's latent rows "
               "alone (no indexer, DSA, or scale tensors)" if geo.mla else
               "a KV cache dtype whose host pool is MHATokenToKVPoolHost alone (bf16, "
               "fp16, fp8_e4m3 without MXFP8 scales)")
        raise ValueError(f"host pool {kind}: {per_token} bytes per token, kv_buffer holds "
                         f"{in_buffer}; the rest ({what}) lives outside kv_buffer, which is "
                         f"all kvpool storage copies. Use {use}, or another HiCache "
                         "storage backend")


def space_name(config: HiCacheStorageConfig, identity: Dict[str, Any], tenant: str = "",
               prefix: str = "sgl", revision: str = "") -> str:
    """The kvpool space of one model shard and page geometry.

    ``prefix-model-digest``: the model's last path part (sanitised, at most
    24 characters) for people, and 16 hex digits of SHA-256 over everything
    that decides a page's bytes (model, tenant, page geometry and dtype, TP
    rank and size, PP stage, attention CP rank, the weights' ``revision``)
    so that incompatible pages never meet.  The host layout is not part of
    it: blocks are block-major whatever the host layout.  Fits kvpool's 63
    characters [A-Za-z0-9._-].

    MLA (``identity`` has ``mla``): no TP rank or size, since every TP rank
    holds the same latent rows whatever the TP size; one space for all.
    """
    model = config.model_name or ""
    ident = dict(identity, v=2, model=model, tenant=tenant, revision=revision,
                 pp=[config.pp_rank, config.pp_size],
                 cp=[config.attn_cp_rank, config.attn_cp_size])
    if "mla" not in identity:
        ident["tp"] = [config.tp_rank, config.tp_size]
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    tail = re.sub(r"[^A-Za-z0-9._-]", "_", model.rstrip("/").rsplit("/", 1)[-1])[:24]
    name = f"{prefix}-{tail}-{digest}" if tail else f"{prefix}-{digest}"
    return kvrt.check_space_name(name)


# ---- the backend --------------------------------------------------------------

#: Sidecar pools (v2) whose host pool is an MHA K/V pool of fixed bytes per page.
_SIDECARS = (PoolName.SWA.value,)


class _Side:
    """One sidecar host pool of a hybrid model and the space its pages go to."""

    def __init__(self, kind: str, host: Any, geo: _Geometry, pages: int,
                 st: Dict[str, int], space: kvrt.Space) -> None:
        self.kind, self.host, self._geo, self._host_pages = kind, host, geo, pages
        self.space: Optional[kvrt.Space] = space
        self.host_array = kvrt.BlockArray(geo.layout(pages, st), host.kv_buffer)
        self.space_array: Optional[kvrt.BlockArray] = space.block_array(geo.layout(1))

    def need_space(self) -> kvrt.Space:
        if self.space is None:
            raise ValueError(f"kvpool storage: the {self.kind} pool's space is closed")
        return self.space

    def close(self) -> None:
        self.space_array = None  # it keeps the space mapped
        if self.space is not None:
            self.space.close()
            self.space = None


def _opt(extra: Dict[str, Any], key: str, kind: type, default: Any) -> Any:
    v = extra.get(key, default)
    if v is None or (kind is int and isinstance(v, bool)) or not isinstance(v, kind):
        if v is None and default is None:
            return None
        raise TypeError(f"extra_config {key}: pass a {kind.__name__} ({CONFIG_KEYS[key]}), "
                        f"not {type(v).__name__}")
    return v


class KvpoolStorage(HiCacheStorage):
    """HiCache L3 storage in a kvpool space (see the module's docstring).

    SGLang's dynamic backend constructs it as ``KvpoolStorage(storage_config,
    kwargs)`` and then calls :meth:`register_mem_pool_host`, which opens the
    space (its name and block size come from the host pool's geometry).
    Configuration: :data:`CONFIG_KEYS` in ``storage_config.extra_config``.
    """

    def __init__(self, storage_config: HiCacheStorageConfig,
                 kwargs: Optional[Dict[str, Any]] = None) -> None:
        if not isinstance(storage_config, HiCacheStorageConfig):
            raise TypeError("storage_config: pass SGLang's HiCacheStorageConfig, not "
                            f"{type(storage_config).__name__}")
        if storage_config.should_split_heads:
            raise ValueError("kvpool storage does not split heads across TP sizes: "
                             "remove tp_lcm_size from the extra config")
        extra = storage_config.extra_config or {}
        if not isinstance(extra, dict):
            raise TypeError("extra_config: pass a dict (the JSON object of "
                            "--hicache-storage-backend-extra-config)")
        unknown = sorted(k for k in extra if isinstance(k, str) and k.startswith("kvpool_")
                         and k not in CONFIG_KEYS)
        if unknown:
            raise ValueError(f"extra_config: unknown key(s) {unknown}; kvpool storage "
                             f"reads {sorted(CONFIG_KEYS)}")
        self.config = storage_config
        # MLA: all TP ranks hold the same latent rows, so one rank stores them
        # (SGLang's HiCacheStorageConfig.is_storage_writer; rank 0 without DCP)
        self.is_writer = bool(getattr(storage_config, "is_storage_writer",
                                      not storage_config.is_mla_model
                                      or storage_config.tp_rank == 0))
        self._backend = _opt(extra, "kvpool_backend", str, "auto")
        self._device = _opt(extra, "kvpool_device", str, None)
        self._pool_bytes = _opt(extra, "kvpool_pool_bytes", int, 0)
        self._quota = _opt(extra, "kvpool_quota_bytes", int, _DEFAULT_QUOTA)
        self._tenant = _opt(extra, "kvpool_tenant", str, "")
        self._prefix = _opt(extra, "kvpool_space_prefix", str, "sgl")
        self._mode = _opt(extra, "kvpool_mode", int, 0o600)
        self._revision = _opt(extra, "kvpool_model_revision", str, None)
        if self._revision is not None and len(self._revision) > 256:
            raise ValueError("extra_config kvpool_model_revision: pass at most 256 "
                             "characters (a commit, a tag, a checksum)")
        if self._pool_bytes < 0:
            raise ValueError(f"extra_config kvpool_pool_bytes {self._pool_bytes}: pass >= 0")
        if self._quota <= 0:
            raise ValueError(f"extra_config kvpool_quota_bytes {self._quota}: pass a "
                             "positive byte count")
        kvrt.check_name_part(self._prefix, "extra_config kvpool_space_prefix")
        if not 0 <= self._mode <= 0o777:
            raise ValueError(f"extra_config kvpool_mode {self._mode:#o}: pass permission "
                             "bits, 0 to 0o777")
        self._tiers = TierConfig.from_extra(extra)
        self.tier_store_errors = 0
        self._lock = threading.RLock()
        self._pool: Optional[kvrt.Pool] = process_pool.acquire(self._backend, self._device,
                                                            self._pool_bytes)
        self._space: Optional[kvrt.Space] = None
        self._sides: Dict[str, _Side] = {}
        # mixed into every page hash; b"" until clear() (see _hashes)
        self._generation = b""
        self._metrics: Dict[str, List[float]] = {"get": [], "set": [], "get_bw": [],
                                                 "set_bw": []}

    # ---- setup ----------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Take SGLang's host pool and open (or create) the space its pages go to."""
        geo, pages, st = _host_geometry(mem_pool_host)
        if (geo.mla is not None) != bool(self.config.is_mla_model):
            raise ValueError(f"host pool {type(mem_pool_host).__name__} is "
                             f"{'MLA' if geo.mla else 'MHA'} but storage_config."
                             f"is_mla_model is {self.config.is_mla_model}: pass the "
                             "config SGLang made for this model")
        revision = self._revision
        if revision is None:
            revision = model_revision(self.config.model_name or "")
        self._revision_used = revision
        name = space_name(self.config, geo.identity(), self._tenant, self._prefix, revision)
        with self._lock:
            pool = self._need_pool()
            block = geo.layout(1)
            space = self._open_space(name, geo, tiers=True)
            if self._space is not None:
                self._space.close()
            super().register_mem_pool_host(mem_pool_host)
            self._space, self._geo, self._host_pages = space, geo, pages
            # the host pool's tensor and the space, as libkvrt block arrays
            self._host_array = kvrt.BlockArray(geo.layout(pages, st), mem_pool_host.kv_buffer)
            self._space_array: Optional[kvrt.BlockArray] = space.block_array(block)
            if geo.mla is not None:
                fshape = _mla_flat_page_shape(mem_pool_host.layout, geo.layers,
                                              geo.head_dim, geo.page_size)
                _n, fst = _mla_axes(mem_pool_host.layout, fshape,
                                    _contiguous_strides(fshape, geo.itemsize),
                                    geo.page_size, geo.row_bytes)
            else:
                fshape = _flat_page_shape(mem_pool_host.layout, geo.layers, geo.heads,
                                          geo.head_dim, geo.page_size)
                _n, fst = _axes(mem_pool_host.layout, fshape,
                                _contiguous_strides(fshape, geo.itemsize), geo.page_size)
            self._flat_layout = geo.layout(1, fst)
            self.space_name = name
        logger.info("kvpool storage: space %s (%s), host layout %s, %d-byte pages",
                    name, pool.backend_info, mem_pool_host.layout, geo.page_bytes)

    def _open_space(self, name: str, geo: _Geometry, tiers: bool) -> kvrt.Space:
        """Create or join space ``name`` for pages of ``geo`` (and open the tiers)."""
        pool = self._need_pool()
        block = geo.layout(1)
        page = pool.info().page_size or 4096
        block_bytes = -(-block.block_bytes // page) * page
        try:
            space = pool.create_space(name, block_bytes=block_bytes,
                                      quota_bytes=max(self._quota, block_bytes),
                                      mode=self._mode)
            got = space.info().block_bytes
            if got != block_bytes:
                space.close()
        except kvrt.InvalidArgumentError:
            # a join with other block_bytes is EINVAL: say which and why
            with pool.join_space(name) as other:
                got = other.info().block_bytes
            if got == block_bytes:
                raise
        if got != block_bytes:
            what = (f"MLA pages ({geo.layers} layers x {geo.page_size} tokens x "
                    f"{geo.head_dim}-element latent rows) need {block_bytes}"
                    if geo.mla else f"pages need {block_bytes}")
            raise ValueError(f"space {name!r} holds {got}-byte blocks, this model's "
                             f"{what}: another page geometry uses the name; set "
                             "kvpool_space_prefix or kvpool_tenant")
        if tiers:
            try:
                self._tiers.open(space, max(self._quota, block_bytes))
            except BaseException:
                space.close()
                raise
        return space

    def _need_pool(self) -> kvrt.Pool:
        if self._pool is None:
            raise ValueError("kvpool storage is closed: construct a new KvpoolStorage")
        return self._pool

    def _need_space(self) -> kvrt.Space:
        if self._space is None:
            self._need_pool()
            raise ValueError("kvpool storage has no host pool yet: call "
                             "register_mem_pool_host(host_pool) first (SGLang does)")
        return self._space

    def close(self) -> None:
        """Leave the space and drop this instance's pool reference (idempotent)."""
        with self._lock:
            for side in self._sides.values():
                side.close()
            self._sides = {}
            if self._space is not None:
                self._space_array = None  # it keeps the space mapped
                self._space.close()
                self._space = None
            if self._pool is not None:
                process_pool.release(self._pool)
                self._pool = None

    # ---- argument checks ------------------------------------------------

    def _hashes(self, keys: Sequence[str]) -> np.ndarray:
        """kvpool hashes of SGLang's page keys: the keys themselves, or after
        a clear() SHA-256(generation, key), which nothing stored before can match."""
        if isinstance(keys, (str, bytes)):
            raise TypeError("keys: pass a list of page hashes (hex str), not one "
                            f"{type(keys).__name__}")
        rows = []
        for i, k in enumerate(keys):
            if not isinstance(k, str):
                raise TypeError(f"keys[{i}]: pass SGLang's page hash as a hex str, not "
                                f"{type(k).__name__}")
            if not _HEX64.fullmatch(k):
                raise ValueError(f"keys[{i}] {k[:80]!r}: pass SGLang's page hash, 64 hex "
                                 "digits (a SHA-256 digest)")
            rows.append(bytes.fromhex(k))
        gen = self._generation
        if gen:
            rows = [hashlib.sha256(gen + r).digest() for r in rows]
        return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, kvrt.HASH_BYTES)

    def _pages(self, host_indices: Any, n: int, distinct: bool,
               side: Optional["_Side"] = None) -> np.ndarray:
        """Host page numbers of ``n`` pages from SGLang's token indices."""
        if not isinstance(host_indices, torch.Tensor):
            raise TypeError("host_indices: pass a torch tensor of host token indices, not "
                            f"{type(host_indices).__name__}")
        ps = (side or self)._geo.page_size
        host_pages = (side or self)._host_pages
        if host_indices.dtype.is_floating_point or host_indices.dtype == torch.bool:
            raise TypeError(f"host_indices: dtype {host_indices.dtype}; pass integer indices")
        idx = host_indices.detach().reshape(-1).to("cpu", torch.int64)
        if idx.numel() != n * ps:
            raise ValueError(f"host_indices: {idx.numel()} indices for {n} keys; pass "
                             f"page_size ({ps}) token indices per key")
        rows = idx.view(n, ps)
        first = rows[:, 0]
        bad = (first < 0) | (first % ps != 0) | (first >= host_pages * ps)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"host_indices: page {i} starts at token {int(first[i])}; pass "
                             f"page-aligned indices below {host_pages * ps}")
        if ps > 1 and not torch.equal(rows - first[:, None],
                                      torch.arange(ps).expand(n, ps)):
            raise ValueError("host_indices: a page's token indices are not consecutive; "
                             "pass whole host pages")
        pages = (first // ps).numpy().astype(np.uint32)
        if distinct and len(np.unique(pages)) != n:
            raise ValueError("host_indices: the same host page twice in one get; pass "
                             "distinct pages")
        return pages

    def _page_tensor(self, t: Any, what: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: pass a torch tensor (a flat host page), not "
                            f"{type(t).__name__}")
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"{what}: pass a contiguous CPU tensor")
        if t.numel() * t.element_size() != self._geo.page_bytes:
            raise ValueError(f"{what}: {t.numel() * t.element_size()} bytes; a page is "
                             f"{self._geo.page_bytes} (get_dummy_flat_data_page())")
        return t

    # ---- copies ---------------------------------------------------------

    def _copy(self, dst: Optional[kvrt.BlockArray], src: Optional[kvrt.BlockArray],
              pairs: np.ndarray) -> None:
        """libkvrt's batched block copy; ``pairs`` rows are (src, dst) block ids."""
        pool = self._need_pool()  # raises before a closed space's arrays are used
        assert dst is not None and src is not None
        pool.copy_blocks(dst, src, pairs)

    def _lookup(self, h: np.ndarray, tiers: bool = False,
                side: Optional["_Side"] = None) -> np.ndarray:
        """Ids of the longest present prefix, in the pool or (tiers) also below it,
        brought up; the caller releases them.  Sidecar spaces have no tiers."""
        sp = self._need_space() if side is None else side.need_space()
        tiers = bool(tiers and self._tiers and side is None)
        out: List[np.ndarray] = []
        for i in range(0, len(h), kvrt.MAX_BATCH):
            part = h[i:i + kvrt.MAX_BATCH]
            ids = sp.lookup_tiers(part)[0] if tiers else sp.lookup(part)
            out.append(ids)
            if len(ids) < len(part):
                break
        return np.concatenate(out) if out else np.zeros(0, np.uint32)

    def _release(self, ids: np.ndarray, side: Optional["_Side"] = None) -> None:
        sp = self._need_space() if side is None else side.need_space()
        for i in range(0, len(ids), kvrt.MAX_BATCH):
            sp.release(ids[i:i + kvrt.MAX_BATCH])

    def _read(self, h: np.ndarray, dst: kvrt.BlockArray, dst_blocks: np.ndarray,
              side: Optional["_Side"] = None) -> int:
        """Copy the stored prefix of ``h`` into dst's blocks; how many pages."""
        with self._lock:
            ids = self._lookup(h, tiers=True, side=side)
            try:
                if len(ids):
                    pairs = np.stack([ids, dst_blocks[:len(ids)]], axis=1)
                    self._copy(dst, self._space_array if side is None else side.space_array,
                               pairs)
            finally:
                if len(ids):
                    self._release(ids, side)
        return len(ids)

    def _write(self, h: np.ndarray, src: kvrt.BlockArray, src_blocks: np.ndarray,
               side: Optional["_Side"] = None) -> int:
        """Store src's blocks under ``h``; how many (a prefix) are stored."""
        n = len(h)
        with self._lock:
            sp = self._need_space() if side is None else side.need_space()
            have = self._lookup(h, side=side)
            if len(have):
                self._release(have, side)
            k = len(have)
            if k == n:
                return n
            # all or none per alloc: halve until it fits, keeping a prefix
            m = min(n - k, kvrt.MAX_BATCH)
            while True:
                try:
                    ids = sp.alloc(m)
                    break
                except kvrt.NoSpaceError:
                    if m == 1:
                        logger.warning("kvpool storage: space %s is full (quota or pool); "
                                       "%d page(s) not stored", sp.name, n - k)
                        return k
                    m //= 2
            try:
                self._copy(self._space_array if side is None else side.space_array, src,
                           np.stack([src_blocks[k:k + m], ids], axis=1))
                res = sp.publish(ids, h[k:k + m])
            except BaseException:
                sp.free(ids)
                raise
            if self._tiers and side is None:
                self._tier_store(res.ids, h[k:k + m])
            sp.release(res.ids)
            return k + m

    def _tier_store(self, ids: np.ndarray, h: np.ndarray) -> None:
        """Hand published pages to the tiers; a tier that fails costs hits, not the set."""
        try:
            self._space.tier_store(ids, h)  # type: ignore[union-attr]
        except kvrt.KvrtError as e:
            self.tier_store_errors += 1
            logger.warning("kvpool storage: the tiers did not take %d page(s): %s", len(h), e)

    # ---- HiCacheStorage: zero-copy (interface_v1) ------------------------

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many leading ``keys`` are stored, in the pool or a tier; nothing
        is read, brought up or kept referenced (see the module's docstring)."""
        h = self._hashes(keys)
        if len(h) == 0:
            return 0
        with self._lock:
            if self._tiers and kvrt.library_missing("tier_contains"):
                # libkvrt before 0.9 cannot ask a tier without reading it
                ids = self._lookup(h, tiers=True)
                if len(ids):
                    self._release(ids)
                return len(ids)
            return self._stored_prefix(h)

    def _stored_prefix(self, h: np.ndarray, side: Optional["_Side"] = None) -> int:
        """Runs from the pool and from the tiers, in turn, until neither has the next."""
        sp = self._need_space() if side is None else side.need_space()
        n = 0
        while n < len(h):
            part = h[n:n + kvrt.MAX_BATCH]
            ids = sp.lookup(part)
            if len(ids):
                self._release(ids, side)
            step = len(ids)
            if not step and self._tiers and side is None:
                step = sp.tier_contains(part)[0]
            if not step:
                break
            n += step
        return n

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Load the stored prefix of ``keys`` into the host pages at ``host_indices``."""
        h = self._hashes(keys)
        self._need_space()
        if len(h) == 0:
            return []
        pages = self._pages(host_indices, len(h), distinct=True)
        t0 = time.perf_counter()
        got = self._read(h, self._host_array, pages)
        self._account("get", got, t0)
        return [i < got for i in range(len(h))]

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Store the host pages at ``host_indices`` under ``keys``.  An MLA rank
        that is not the writer checks the call and stores nothing: the writer
        stores the same bytes (all True, as SGLang's other backends answer)."""
        h = self._hashes(keys)
        self._need_space()
        if len(h) == 0:
            return []
        pages = self._pages(host_indices, len(h), distinct=False)
        if not self.is_writer:
            return [True] * len(h)
        t0 = time.perf_counter()
        done = self._write(h, self._host_array, pages)
        self._account("set", done, t0)
        return [i < done for i in range(len(h))]

    # ---- HiCacheStorage: hybrid models' pools (v2) -----------------------

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Take one pool of SGLang's host pool group.  ``kv`` is the pool
        :meth:`register_mem_pool_host` took; ``swa`` (an MHA K/V host pool of
        its own geometry) gets a space of its own, named like the main one
        with the pool kind in its identity.  Any other kind is refused: its
        bytes are not one plain K/V tensor of fixed bytes per page."""
        kind = str(getattr(host_pool_name, "value", host_pool_name))
        if kind == PoolName.KV.value:
            if host_pool is not getattr(self, "mem_pool_host", None):
                raise ValueError("pool kv: not the host pool given to register_mem_pool_host;"
                                 " pass the host pool group's anchor KV pool")
            return
        if kind not in _SIDECARS:
            raise ValueError(
                f"pool {kind!r} ({type(host_pool).__name__}): kvpool storage keeps the KV "
                f"pool and the {', '.join(_SIDECARS)} sidecar, not this kind (Mamba state, "
                "indexer and DeepSeek V4 pools are not one K/V tensor with fixed bytes per "
                "page); use --hicache-storage-backend file or mooncake for this model")
        try:
            geo, pages, st = _host_geometry(host_pool)
        except (TypeError, ValueError) as e:
            raise ValueError(f"pool {kind!r} ({type(host_pool).__name__}): {e}; kvpool "
                             "storage keeps an SWA pool that is SGLang's "
                             "MHATokenToKVPoolHost; use --hicache-storage-backend file "
                             "for this model") from None
        if geo.mla is not None:
            raise ValueError(f"pool {kind!r}: an MLA host pool as a sidecar; kvpool storage "
                             "keeps MHA SWA pools; use --hicache-storage-backend file")
        self._need_space()
        ident = dict(geo.identity(), pool=kind)
        # sidecar state is per TP rank even where the KV pool is MLA
        cfg = self.config
        name = space_name(cfg, ident, self._tenant, self._prefix, self._revision_used)
        with self._lock:
            # no tiers: a sidecar lives in the pool only (see the module's docstring)
            space = self._open_space(name, geo, tiers=False)
            try:
                side = _Side(kind, host_pool, geo, pages, st, space)
            except BaseException:
                space.close()
                raise
            old = self._sides.pop(kind, None)
            if old is not None:
                old.close()
            self._sides[kind] = side
            super().register_mem_host_pool_v2(host_pool, host_pool_name)
        logger.info("kvpool storage: %s pool in space %s, %d-byte pages", kind, name,
                    geo.page_bytes)

    def on_host_pools_registered(self) -> None:
        self._need_space()  # the KV pool must be there; sidecars were checked one by one

    def _side(self, name: Any) -> Optional[_Side]:
        """The sidecar of a transfer's pool name; None for the KV pool."""
        kind = str(getattr(name, "value", name))
        if kind == PoolName.KV.value:
            return None
        side = self._sides.get(kind)
        if side is None:
            raise ValueError(f"pool {kind!r}: not registered; call "
                             "register_mem_host_pool_v2 with it first (SGLang's controller "
                             "does on attach)")
        return side

    def _present(self, h: np.ndarray, side: Optional[_Side]) -> List[bool]:
        """Which of ``h`` are stored, page by page (a lookup per run or gap)."""
        out: List[bool] = []
        while len(out) < len(h):
            run = self._stored_prefix(h[len(out):], side)
            out += [True] * run
            if len(out) < len(h):
                out.append(False)
        return out

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Any:
        """The usable prefix of ``keys``: the KV prefix, cut where a pool the
        transfers name lacks what that prefix length needs (every page for
        ALL_PAGES, the last ``len(keys)`` pages of the transfer for
        TRAILING_PAGES).  Nothing is read or kept referenced."""
        h = self._hashes(keys)
        transfers = list(pool_transfers or [])
        sides = [self._side(t.name) for t in transfers]
        with self._lock:
            kv = self.batch_exists(keys) if len(h) else 0
            hits: Dict[str, int] = {PoolName.KV.value: kv} if kv else {}
            ok = set(range(1, kv + 1))
            for t, side in zip(transfers, sides):
                if not ok:
                    break
                have = self._present(h[:kv], side)
                if t.hit_policy == PoolHitPolicy.ALL_PAGES:
                    lead = have.index(False) if False in have else kv
                    mine = set(range(1, lead + 1))
                elif t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                    w = max(1, len(t.keys or ()))
                    mine = {n for n in range(1, kv + 1) if all(have[max(0, n - w):n])}
                else:
                    raise ValueError(f"pool {t.name}: hit policy {t.hit_policy}; kvpool "
                                     "storage answers all_pages and trailing_pages")
                if mine:
                    hits[str(getattr(t.name, "value", t.name))] = max(mine)
                ok &= mine
        restorable = sorted(ok)
        return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)

    def _transfer_pages(self, t: Any, side: Optional[_Side], distinct: bool
                        ) -> Tuple[np.ndarray, np.ndarray]:
        if t.keys is None or t.host_indices is None:
            raise ValueError(f"pool {t.name}: pass keys and host_indices (host<->storage)")
        h = self._hashes(t.keys)
        return h, (self._pages(t.host_indices, len(h), distinct, side) if len(h)
                   else np.zeros(0, np.uint32))

    def batch_get_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> Dict[str, List[bool]]:
        """Load each transfer's stored prefix into its pool's host pages.  A
        key that several transfers carry counts only where every one of them
        loaded it, and each list stays a prefix: a page never hits with a
        part missing."""
        got: Dict[str, Tuple[List[str], int]] = {}
        for t in transfers:
            side = self._side(t.name)
            h, pages = self._transfer_pages(t, side, distinct=True)
            n = 0
            if len(h):
                dst = self._host_array if side is None else side.host_array
                n = self._read(h, dst, pages, side)
            got[str(getattr(t.name, "value", t.name))] = (list(t.keys), n)
        missing = {k for ks, n in got.values() for k in ks[n:]}
        out: Dict[str, List[bool]] = {}
        for name, (ks, n) in got.items():
            lead = next((i for i, k in enumerate(ks[:n]) if k in missing), n)
            out[name] = [i < lead for i in range(len(ks))]
        return out

    def batch_set_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> Dict[str, List[bool]]:
        """Store each transfer's host pages under its keys, in its pool's space."""
        out: Dict[str, List[bool]] = {}
        for t in transfers:
            side = self._side(t.name)
            h, pages = self._transfer_pages(t, side, distinct=False)
            name = str(getattr(t.name, "value", t.name))
            if side is None and not self.is_writer:
                out[name] = [True] * len(h)  # MLA: the writer rank stores it
                continue
            n = 0
            if len(h):
                src = self._host_array if side is None else side.host_array
                n = self._write(h, src, pages, side)
            out[name] = [i < n for i in range(len(h))]
        return out

    # ---- HiCacheStorage: one page at a time (without interface_v1) ---------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        """Load page ``key`` into a flat page tensor (SGLang's flat page order
        for its host layout); None when it is not stored."""
        h = self._hashes([key])
        self._need_space()
        if target_location is None:
            target_location = self.mem_pool_host.get_dummy_flat_data_page()
        t = self._page_tensor(target_location, "target_location")
        got = self._read(h, kvrt.BlockArray(self._flat_layout, t), np.zeros(1, np.uint32))
        return t if got else None

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Optional[torch.Tensor]]:
        targets = target_locations if target_locations is not None else [None] * len(keys)
        if len(targets) != len(keys):
            raise ValueError(f"target_locations: {len(targets)} for {len(keys)} keys; pass "
                             "one each")
        return [self.get(k, t) for k, t in zip(keys, targets)]

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        """Store one flat page tensor (as ``get_data_page(i, flat=True)`` gives it)."""
        h = self._hashes([key])
        self._need_space()
        t = self._page_tensor(value, "value")
        if not self.is_writer:
            return True  # MLA: the writer rank stores it (see batch_set_v1)
        return self._write(h, kvrt.BlockArray(self._flat_layout, t), np.zeros(1, np.uint32)) == 1

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        if values is None or len(values) != len(keys):
            raise ValueError("values: pass one flat page tensor per key")
        return all(self.set(k, v) for k, v in zip(keys, values))

    # ---- the rest -------------------------------------------------------

    def clear(self) -> bool:
        """Make every page stored so far unreachable for this instance: a
        fresh random generation enters every later page hash (pool and
        tiers alike).  Other engines sharing the space keep their pages and
        hits; the old pages leave by the quota.  True when done; raises
        (SGLang then reports failure) on a closed instance."""
        with self._lock:
            self._need_pool()
            self._generation = os.urandom(16)
        logger.info("kvpool storage: clear(): pages stored before are no longer hit by this "
                    "instance (new generation in space %s; other engines keep theirs)",
                    getattr(self, "space_name", "(none)"))
        return True

    def _account(self, op: str, pages: int, t0: float) -> None:
        dt = time.perf_counter() - t0
        with self._lock:
            self._metrics[op].append(pages)
            if pages and dt > 0:
                self._metrics[op + "_bw"].append(pages * self._geo.page_bytes / dt / 1e9)

    def get_stats(self) -> Any:
        """SGLang's StorageMetrics for the calls since the last get_stats
        (pages per call, GB/s); the space's own figures are in :meth:`space_stats`."""
        from sglang.srt.observability.metrics_collector import StorageMetrics
        with self._lock:
            m, self._metrics = self._metrics, {k: [] for k in self._metrics}
        return StorageMetrics(prefetch_pgs=m["get"], backup_pgs=m["set"],
                              prefetch_bandwidth=m["get_bw"], backup_bandwidth=m["set_bw"])

    def space_stats(self) -> kvrt.SpaceStats:
        """The space's prefix-cache figures (hits, inserts, evictions, ...)."""
        with self._lock:
            return self._need_space().stats()
