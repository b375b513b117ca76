# SPDX-License-Identifier: MIT
"""Loading libkvrt.so.0 and declaring its C API for ctypes.

The library is looked for, in order:

1. ``$KVRT_LIBRARY``: a path to the library file (nothing else is tried
   when it is set, so a wrong path is an error, not a silent fallback);
2. the copy bundled into the installed package (``kvrt/_bundled/``), which
   ``pip install ./libkvrt/python`` puts there from the tree's build;
3. the in-tree build, ``libkvrt/build/libkvrt.so.0``, when this package is
   imported from the source tree (``libkvrt/python/src``);
4. the dynamic loader, ``libkvrt.so.0`` (``LD_LIBRARY_PATH``, ld.so.cache);
5. ``pkg-config --variable=libdir kvrt``, for an install outside the
   loader's path (``PKG_CONFIG_PATH`` finds it).

The structures mirror ``kvrt.h`` field by field; their sizes are checked
against the header's layout in the tests.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
from ctypes import (CFUNCTYPE, POINTER, c_char, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p)
from typing import List, Optional, Tuple

SONAME = "libkvrt.so.0"
#: The oldest library this package binds: 0.4 (worker threads) and all before.
MIN_VERSION_NUMBER = 400

HASH_BYTES = 32
NAME_MAX = 64
MAX_BATCH = 65536
UUID_BYTES = 16


class LayoutC(ctypes.Structure):
    _fields_ = [
        ("num_layers", c_uint32), ("num_kv_heads", c_uint32), ("head_dim", c_uint32),
        ("block_tokens", c_uint32), ("num_blocks", c_uint32), ("kv_dtype", c_int),
        ("layer_stride", c_int64), ("kv_stride", c_int64), ("block_stride", c_int64),
        ("token_stride", c_int64), ("head_stride", c_int64),
        ("scale_layer_stride", c_int64), ("scale_kv_stride", c_int64),
        ("scale_block_stride", c_int64),
    ]


class BlockTableC(ctypes.Structure):
    _fields_ = [("num_seqs", c_uint32), ("indptr", POINTER(c_int32)),
                ("indices", POINTER(c_int32)), ("seq_lens", POINTER(c_int32))]


class KvCacheC(ctypes.Structure):
    _fields_ = [("layout", POINTER(LayoutC)), ("base", c_void_p),
                ("scales", c_void_p), ("layer", c_uint32)]


class AttnParamsC(ctypes.Structure):
    _fields_ = [("num_q_heads", c_uint32), ("sm_scale", c_float), ("window_left", c_int32),
                ("logit_softcap", c_float), ("q_dtype", c_int), ("o_dtype", c_int),
                ("impl", c_int), ("num_threads", c_uint32)]


LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class OpenOptsC(ctypes.Structure):
    _fields_ = [("backend", c_int), ("flags", c_uint32), ("device", c_char_p),
                ("pool_bytes", c_uint64), ("log", LOG_FN), ("log_arg", c_void_p),
                ("log_level", c_int), ("reserved0", c_uint32), ("reserved", c_uint64 * 4)]


class PoolInfoC(ctypes.Structure):
    _fields_ = [("backend", c_int), ("api_version", c_uint32), ("features", c_uint64),
                ("page_size", c_uint32), ("chunk_size", c_uint32), ("nr_nodes", c_uint32),
                ("max_batch", c_uint32), ("node_mask", c_uint64), ("pool_bytes", c_uint64),
                ("used_bytes", c_uint64), ("free_bytes", c_uint64)]


class SpaceOptsC(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("flags", c_uint32), ("mode", c_uint32),
                ("block_bytes", c_uint64), ("quota_bytes", c_uint64), ("node_mask", c_uint64),
                ("numa_policy", c_int), ("expect_uid", c_uint32), ("reserved", c_uint64 * 4)]


class SpaceInfoC(ctypes.Structure):
    _fields_ = [("space_id", c_uint32), ("created", c_uint32), ("uid", c_uint32),
                ("gid", c_uint32), ("mode", c_uint32), ("numa_policy", c_int),
                ("node_mask", c_uint64), ("block_bytes", c_uint64), ("nr_blocks", c_uint64),
                ("map_bytes", c_uint64), ("backed_blocks", c_uint64), ("free_blocks", c_uint64),
                ("owned_blocks", c_uint64), ("my_blocks", c_uint64), ("backed_bytes", c_uint64)]


class MemInfoC(ctypes.Structure):
    _fields_ = [("kind", c_int), ("chunk_bytes", c_uint32), ("backed_bytes", c_uint64),
                ("hugetlb_bytes", c_uint64), ("thp_bytes", c_uint64), ("locked_bytes", c_uint64),
                ("hugetlb_errno", c_int32), ("thp_errno", c_int32), ("mlock_errno", c_int32),
                ("numa_errno", c_int32), ("disabled", c_uint32), ("reserved0", c_uint32),
                ("summary", c_char * 512)]


class HashInfoC(ctypes.Structure):
    _fields_ = [("cpu_sha_ni", c_int32), ("ia32cap_override", c_int32),
                ("libcrypto", c_char * 64)]


class BlockArrayC(ctypes.Structure):
    _fields_ = [("layout", POINTER(LayoutC)), ("base", c_void_p), ("scales", c_void_p)]


class BlockPairC(ctypes.Structure):
    _fields_ = [("src", c_uint32), ("dst", c_uint32)]


class SpaceStatsC(ctypes.Structure):
    _fields_ = [("space_id", c_uint32), ("reserved0", c_uint32), ("hits", c_uint64),
                ("misses", c_uint64), ("inserts", c_uint64), ("dedups", c_uint64),
                ("evictions", c_uint64 * 5), ("pressure", c_uint64),
                ("published_blocks", c_uint64), ("cached_blocks", c_uint64),
                ("hole_blocks", c_uint64), ("readers", c_uint64), ("my_refs", c_uint64),
                ("allocs", c_uint64), ("frees", c_uint64), ("reserved", c_uint64 * 4)]


class EventC(ctypes.Structure):
    _fields_ = [("seq", c_uint64), ("type", c_uint32), ("cause", c_uint32),
                ("block", c_uint32), ("count", c_uint32), ("hash", c_uint8 * HASH_BYTES),
                ("reserved", c_uint64)]


class ResidencyEntryC(ctypes.Structure):
    _fields_ = [("block", c_uint32), ("gpu_block", c_uint32)]


class GpuInfoC(ctypes.Structure):
    _fields_ = [("name", c_char * 128), ("device", c_int32), ("cc_major", c_int32),
                ("cc_minor", c_int32), ("driver_version", c_int32), ("sm_count", c_uint32),
                ("batch_memcpy", c_uint32), ("total_mem", c_uint64),
                ("kernel_copy_max", c_uint64), ("registered_bytes", c_uint64),
                ("reserved", c_uint64 * 4)]


class GpuPlanInfoC(ctypes.Structure):
    _fields_ = [("num_seqs", c_uint32), ("num_work", c_uint32), ("num_split", c_uint32),
                ("split_tokens", c_uint32), ("grid", c_uint32), ("reserved", c_uint32 * 3)]


#: int copy_block(void *arg, uint32_t src, uint32_t dst, uint32_t ntokens)
COPY_BLOCK_FN = CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint32, c_uint32)


class SeqsOptsC(ctypes.Structure):
    _fields_ = [("nr_blocks", c_uint32), ("block_tokens", c_uint32),
                ("copy_block", COPY_BLOCK_FN), ("copy_arg", c_void_p),
                ("reserved", c_uint64 * 4)]


class SeqsStatsC(ctypes.Structure):
    _fields_ = [("nr_blocks", c_uint32), ("block_tokens", c_uint32),
                ("free_blocks", c_uint32), ("used_blocks", c_uint32),
                ("shared_blocks", c_uint32), ("nr_seqs", c_uint32), ("block_refs", c_uint64),
                ("copies", c_uint64), ("reserved", c_uint64 * 4)]


class TierSsdOptsC(ctypes.Structure):
    _fields_ = [("dir", c_char_p), ("capacity_bytes", c_uint64), ("queue_depth", c_uint32),
                ("flags", c_uint32), ("layout", POINTER(LayoutC)), ("writeback_max", c_uint32),
                ("reserved0", c_uint32), ("key_file", c_char_p), ("reserved", c_uint64 * 2)]


class TierRedisOptsC(ctypes.Structure):
    _fields_ = [("nodes", c_char_p), ("user", c_char_p), ("password", c_char_p),
                ("key_prefix", c_char_p), ("timeout_ms", c_uint32), ("flags", c_uint32),
                ("layout", POINTER(LayoutC)), ("ttl_s", c_uint32), ("writeback_max", c_uint32),
                ("key_file", c_char_p), ("reserved", c_uint64 * 2)]


class TierStatsC(ctypes.Structure):
    _fields_ = [("kind", c_uint32), ("reserved0", c_uint32), ("capacity_bytes", c_uint64),
                ("used_bytes", c_uint64), ("blocks", c_uint64), ("hits", c_uint64),
                ("misses", c_uint64), ("stores", c_uint64), ("store_skips", c_uint64),
                ("read_bytes", c_uint64), ("write_bytes", c_uint64), ("evictions", c_uint64),
                ("checksum_errors", c_uint64), ("io_errors", c_uint64), ("redirects", c_uint64),
                ("queued", c_uint64), ("deferred", c_uint64), ("reserved", c_uint64 * 3)]


HashArray = c_uint8 * HASH_BYTES
P = c_void_p  # opaque handles travel as void *

# name: (restype, argtypes).  Pointers to arrays are passed as c_void_p so
# that numpy arrays (ndarray.ctypes.data) and ctypes buffers both fit.
_PROTOS = {
    "kvrt_version": (c_char_p, []),
    "kvrt_version_number": (c_int, []),
    "kvrt_dtype_size": (c_size_t, [c_int]),
    "kvrt_layout_init": (c_int, [POINTER(LayoutC), c_int, c_uint32, c_uint32, c_uint32,
                                 c_uint32, c_uint32, c_int]),
    "kvrt_layout_block_bytes": (c_int, [POINTER(LayoutC), POINTER(c_uint64)]),
    "kvrt_kv_bytes": (c_int, [c_uint32, c_uint32, c_uint32, c_uint64, c_int,
                              POINTER(c_uint64)]),
    "kvrt_layout_inline_scales": (c_int, [POINTER(LayoutC), POINTER(c_uint64)]),
    "kvrt_attn_decode": (c_int, [POINTER(AttnParamsC), P, POINTER(KvCacheC),
                                 POINTER(BlockTableC), P]),
    "kvrt_attn_prefill": (c_int, [POINTER(AttnParamsC), P, P, POINTER(KvCacheC),
                                  POINTER(BlockTableC), P]),
    "kvrt_append_kv": (c_int, [POINTER(KvCacheC), P, P, c_int, P, c_uint32]),
    "kvrt_open": (c_int, [POINTER(P), POINTER(OpenOptsC)]),
    "kvrt_close": (None, [P]),
    "kvrt_backend": (c_int, [P]),
    "kvrt_backend_info": (c_char_p, [P]),
    "kvrt_pool_info": (c_int, [P, POINTER(PoolInfoC)]),
    "kvrt_space_open": (c_int, [P, POINTER(SpaceOptsC), POINTER(P)]),
    "kvrt_space_close": (None, [P]),
    "kvrt_space_info": (c_int, [P, POINTER(SpaceInfoC)]),
    "kvrt_alloc_blocks": (c_int, [P, c_uint32, P]),
    "kvrt_free_blocks": (c_int, [P, c_uint32, P]),
    "kvrt_space_base": (c_void_p, [P]),
    "kvrt_block_addr": (c_void_p, [P, c_uint32]),
    "kvrt_space_mem_info": (c_int, [P, POINTER(MemInfoC)]),
    "kvrt_hash_block": (c_int, [P, P, c_uint32, P, c_size_t, P]),
    "kvrt_hash_prompt": (c_int, [P, P, c_size_t, c_uint32, P, P, P, c_size_t]),
    "kvrt_hash_info": (c_int, [POINTER(HashInfoC)]),
    "kvrt_copy_blocks": (c_int, [P, POINTER(BlockArrayC), POINTER(BlockArrayC), P, c_uint32,
                                 c_uint32, POINTER(P)]),
    "kvrt_copy_poll": (c_int, [P]),
    "kvrt_copy_wait": (c_int, [P]),
    "kvrt_copy_free": (None, [P]),
    "kvrt_layout_for_space": (c_int, [POINTER(LayoutC), P]),
    "kvrt_publish": (c_int, [P, c_uint32, P, P, P, P]),
    "kvrt_lookup": (c_int, [P, c_uint32, P, P, P]),
    "kvrt_release": (c_int, [P, c_uint32, P]),
    "kvrt_space_destroy": (c_int, [P, c_char_p]),
    "kvrt_space_stats": (c_int, [P, POINTER(SpaceStatsC)]),
    "kvrt_residency_add": (c_int, [P, P, c_uint32, P]),
    "kvrt_residency_del": (c_int, [P, P, c_uint32, P]),
    "kvrt_residency_clear": (c_int, [P, P]),
    "kvrt_events_fd": (c_int, [P]),
    "kvrt_read_events": (c_int, [P, POINTER(EventC), c_uint32]),
    "kvrt_workers_create": (c_int, [c_uint32, POINTER(P)]),
    "kvrt_workers_destroy": (None, [P]),
    "kvrt_attn_decode_on": (c_int, [P, POINTER(AttnParamsC), P, POINTER(KvCacheC),
                                    POINTER(BlockTableC), P]),
    "kvrt_attn_prefill_on": (c_int, [P, POINTER(AttnParamsC), P, P, POINTER(KvCacheC),
                                     POINTER(BlockTableC), P]),
    "kvrt_gpu_probe": (c_int, [c_char_p, c_size_t]),
    "kvrt_gpu_open": (c_int, [P, c_int, POINTER(P)]),
    "kvrt_gpu_close": (None, [P]),
    "kvrt_gpu_info": (c_int, [P, POINTER(GpuInfoC)]),
    "kvrt_gpu_alloc": (c_int, [P, c_size_t, POINTER(P)]),
    "kvrt_gpu_free": (c_int, [P, P]),
    "kvrt_gpu_memcpy": (c_int, [P, P, P, c_size_t]),
    "kvrt_gpu_sync": (c_int, [P, P]),
    "kvrt_gpu_register_space": (c_int, [P, P]),
    "kvrt_gpu_unregister_space": (c_int, [P, P]),
    "kvrt_gpu_register_host": (c_int, [P, P, c_size_t]),
    "kvrt_gpu_unregister_host": (c_int, [P, P]),
    "kvrt_gpu_copy_blocks": (c_int, [P, POINTER(BlockArrayC), POINTER(BlockArrayC), P,
                                     c_uint32, c_int, P]),
    "kvrt_gpu_append_kv": (c_int, [P, POINTER(KvCacheC), P, P, c_int, P, c_uint32, P]),
    "kvrt_gpu_plan_create": (c_int, [P, c_uint32, c_uint32, POINTER(P)]),
    "kvrt_gpu_plan_destroy": (None, [P]),
    "kvrt_gpu_plan_decode": (c_int, [P, POINTER(AttnParamsC), POINTER(LayoutC), c_uint32, P]),
    "kvrt_gpu_plan_prefill": (c_int, [P, POINTER(AttnParamsC), POINTER(LayoutC), c_uint32, P,
                                      P]),
    "kvrt_gpu_plan_info": (c_int, [P, POINTER(GpuPlanInfoC)]),
    "kvrt_gpu_attn_decode": (c_int, [P, P, POINTER(KvCacheC), POINTER(BlockTableC), P, P]),
    "kvrt_gpu_attn_prefill": (c_int, [P, P, P, POINTER(KvCacheC), POINTER(BlockTableC), P, P]),
}


#: 0.5 (KVRT_0.5): sequence block tables.  Declared only when the loaded
#: library has them, so that the package still binds a 0.4 library.
SEQS_VERSION_NUMBER = 500
_PROTOS_SEQS = {
    "kvrt_seqs_create": (c_int, [POINTER(P), POINTER(SeqsOptsC)]),
    "kvrt_seqs_destroy": (None, [P]),
    "kvrt_seq_add": (c_int, [P, POINTER(c_uint64)]),
    "kvrt_seq_add_blocks": (c_int, [P, c_uint32, P, c_uint32, POINTER(c_uint64)]),
    "kvrt_seq_append": (c_int, [P, c_uint64, c_uint32, P]),
    "kvrt_seq_fork": (c_int, [P, c_uint64, POINTER(c_uint64)]),
    "kvrt_seq_truncate": (c_int, [P, c_uint64, c_uint32]),
    "kvrt_seq_free": (c_int, [P, c_uint64]),
    "kvrt_seq_len": (c_int, [P, c_uint64]),
    "kvrt_seq_blocks": (c_int, [P, c_uint64, P, c_uint32]),
    "kvrt_seqs_csr_size": (c_int, [P, c_uint32, P, POINTER(c_uint32)]),
    "kvrt_seqs_csr": (c_int, [P, c_uint32, P, P, P, c_uint32, P]),
    "kvrt_seqs_block_refs": (c_int, [P, c_uint32]),
    "kvrt_seqs_stats": (c_int, [P, POINTER(SeqsStatsC)]),
}


#: 0.6 (KVRT_0.6): tiers below the pool; 0.7 (KVRT_0.7): write-back; 0.8 (KVRT_0.8): keys;
#: 0.9 (KVRT_0.9): asking the tiers what they hold.
TIERS_VERSION_NUMBER = 600
WRITE_BACK_VERSION_NUMBER = 700
TIER_KEYS_VERSION_NUMBER = 800
TIER_CONTAINS_VERSION_NUMBER = 900
_PROTOS_TIERS = {
    "kvrt_tier_open_ssd": (c_int, [P, POINTER(TierSsdOptsC), POINTER(P)]),
    "kvrt_tier_open_redis": (c_int, [P, POINTER(TierRedisOptsC), POINTER(P)]),
    "kvrt_tier_close": (None, [P]),
    "kvrt_tier_stats": (c_int, [P, POINTER(TierStatsC)]),
    "kvrt_lookup_tiers": (c_int, [P, c_uint32, P, P, P]),
    "kvrt_tier_store": (c_int, [P, c_uint32, P, P, P]),
}
_PROTOS_WRITE_BACK = {
    "kvrt_tier_flush": (c_int, [P]),
}
_PROTOS_TIER_KEYS = {
    "kvrt_tier_key_create": (c_int, [c_char_p]),
}
_PROTOS_TIER_CONTAINS = {
    "kvrt_tier_contains": (c_int, [P, c_uint32, P, P]),
}
#: 0.10 (KVRT_0.10): the limits benchmarks measure against (declared, not wrapped).
GPU_LIMITS_VERSION_NUMBER = 1000
_PROTOS_GPU_LIMITS = {
    "kvrt_gpu_read_stream": (c_int, [P, P, c_size_t, POINTER(c_uint64), P]),
    "kvrt_gpu_copy_calibration": (c_int, [P, P]),
}


def _bundled_candidate() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bundled", SONAME)


def _in_tree_candidate() -> str:
    # src/kvrt/_lib.py -> libkvrt/python/src/kvrt -> libkvrt/build
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "build", SONAME))


def _pkg_config_candidate() -> Optional[str]:
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "kvrt"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = out.stdout.strip()
    if out.returncode != 0 or not libdir:
        return None
    return os.path.join(libdir, SONAME)


def find_library() -> Tuple[ctypes.CDLL, str]:
    """Load libkvrt; return the CDLL and a line saying where it came from.

    Raises ImportError saying what was tried when nothing loads.
    """
    tried: List[str] = []
    env = os.environ.get("KVRT_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), f"$KVRT_LIBRARY={env}"
        except OSError as e:
            raise ImportError(f"kvrt: $KVRT_LIBRARY={env} does not load: {e}; "
                              "set it to the path of libkvrt.so.0 or unset it") from e
    for cand, what in ((_bundled_candidate(), "bundled"),
                       (_in_tree_candidate(), "in-tree build")):
        if os.path.exists(cand):
            try:
                return ctypes.CDLL(cand), f"{what} {cand}"
            except OSError as e:
                tried.append(f"{cand}: {e}")
        else:
            tried.append(f"{cand}: absent")
    try:
        return ctypes.CDLL(SONAME), f"loader: {SONAME}"
    except OSError as e:
        tried.append(f"loader: {e}")
    pc = _pkg_config_candidate()
    if pc:
        try:
            return ctypes.CDLL(pc), f"pkg-config: {pc}"
        except OSError as e:
            tried.append(f"pkg-config {pc}: {e}")
    else:
        tried.append("pkg-config kvrt: not found")
    raise ImportError("kvrt: libkvrt.so.0 not found (tried " + "; ".join(tried) +
                      "); `make lib` at the top of the kvpool tree, then `pip install "
                      "./libkvrt/python` bundles it, or `make install` puts it on the "
                      "loader's path, or set KVRT_LIBRARY=/path/to/libkvrt.so.0")


def _declare(lib: ctypes.CDLL) -> None:
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


lib, where = find_library()
_num = lib.kvrt_version_number
_num.restype = c_int
_num.argtypes = []
version_number = _num()
if version_number // 10000 != 0 or version_number < MIN_VERSION_NUMBER:
    raise ImportError(f"kvrt: {where} is libkvrt {version_number}; this package needs "
                      f"0.x with x >= {MIN_VERSION_NUMBER // 100}")
_declare(lib)


def _declare_since(lib: ctypes.CDLL, protos: dict, since: int, what: str) -> Optional[str]:
    """Declare calls that came with version ``since``; None, or why the library lacks them."""
    need = f"{since // 10000}.{since // 100 % 100}"
    if version_number < since:
        return (f"{where} is libkvrt {version_number // 10000}.{version_number // 100 % 100}."
                f"{version_number % 100}; {what} need {need} or newer")
    missing = [n for n in protos if not hasattr(lib, n)]
    if missing:
        return (f"{where} says version {version_number} but lacks {', '.join(missing)}; "
                f"{what} need a complete libkvrt {need} or newer")
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return None


#: None when kvrt.Sequences can be used, else the reason it cannot.
seqs_missing = _declare_since(lib, _PROTOS_SEQS, SEQS_VERSION_NUMBER,
                              "sequence block tables")
#: None when tiers (Space.open_ssd_tier, ...) can be used, else why not.
tiers_missing = _declare_since(lib, _PROTOS_TIERS, TIERS_VERSION_NUMBER,
                               "tiers below the pool")
#: None when tiers can be opened write-back and flushed, else why not.
write_back_missing = _declare_since(lib, _PROTOS_WRITE_BACK, WRITE_BACK_VERSION_NUMBER,
                                    "write-back tiers")
#: None when tier keys can be created (and given as key_file), else why not.
tier_keys_missing = _declare_since(lib, _PROTOS_TIER_KEYS, TIER_KEYS_VERSION_NUMBER,
                                   "tier keys")
#: None when Space.tier_contains can ask the tiers without reading, else why not.
tier_contains_missing = _declare_since(lib, _PROTOS_TIER_CONTAINS,
                                       TIER_CONTAINS_VERSION_NUMBER,
                                       "tier queries that read nothing (tier_contains)")
#: None when the benchmark limits (kvrt_gpu_read_stream, ...) are there, else why not.
gpu_limits_missing = _declare_since(lib, _PROTOS_GPU_LIMITS, GPU_LIMITS_VERSION_NUMBER,
                                    "benchmark limits (kvrt_gpu_read_stream, kvrt_gpu_copy_calibration)")
