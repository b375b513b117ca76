# SPDX-License-Identifier: MIT
"""kvrt: libkvrt from Python (ctypes over libkvrt.so.0, no compiler needed).

    import kvrt
    with kvrt.Pool("embedded") as pool:
        with pool.create_space("demo", block_bytes=65536, quota_bytes=1 << 20) as sp:
            ids = sp.alloc(2)
            sp.block_view(int(ids[0]))[:5] = list(b"hello")

See Documentation/python.rst.  The library is found through $KVRT_LIBRARY,
then the in-tree build, then the loader, then pkg-config (see kvrt._lib).
Block copies take numpy arrays, torch tensors (torch is imported only by
the caller: ``import kvrt`` never needs it) and raw addresses.
"""
from typing import Optional

from . import _lib
from .errors import (AccessError, BadAddressError, BusyError, ExistsError,
                     InterruptedCallError, InvalidArgumentError, KvrtError, LimitOverflowError,
                     NoDeviceError, NoSpaceError, NotFoundError, NotSupportedError,
                     OutOfBoundsError, OutOfMemoryError, TooBigError, WouldBlockError,
                     error_class)
from .attention import (AttnImpl, BlockTable, KvCache, Workers, append_kv, attn_decode,
                        attn_prefill)
from .blocks import BlockArray, Copy
from .hashing import HashInfo, hash_block, hash_info, hash_prompt, hash_prompt_array
from .sequences import CopyBlock, SeqsStats, Sequences
from .tiers import Tier, TierKind, TierStats, create_tier_key
from .layout import DType, Layout, LayoutKind, kv_bytes
from .pool import (HASH_BYTES, MAX_BATCH, PRIO_DEFAULT, PRIO_MAX, Backend, Event, EventType,
                   EvictCause, Feature, MemInfo, NumaPolicy, Pool, PoolInfo, PublishResult,
                   Space, SpaceInfo, SpaceStats)

from . import gpu  # noqa: E402 - kvrt.gpu.probe() etc.; imports no torch
from . import _checks

#: The longest space name libkvrt takes (KVRT_NAME_MAX less the NUL).
SPACE_NAME_MAX = _checks.NAME_MAX - 1


def check_space_name(name: str, what: str = "name") -> str:
    """``name`` when libkvrt would take it as a space name, else ValueError
    (or TypeError) saying the rule; ``what`` names the argument in the message."""
    _checks.space_name(name, what)
    return name


def check_name_part(value: str, what: str, max_len: int = 16, empty_ok: bool = False) -> str:
    """``value`` when it is 1..max_len (0.. with ``empty_ok``) space-name
    characters, for the parts an integration joins into a space name."""
    return _checks.name_part(value, what, max_len, empty_ok)

#: Where libkvrt was loaded from, e.g. "$KVRT_LIBRARY=/path/libkvrt.so.0".
LIBRARY = _lib.where


def library_version() -> str:
    """``kvrt_version()``: the loaded library's "MAJOR.MINOR.PATCH"."""
    return _lib.lib.kvrt_version().decode()


_FEATURES = {"sequences": "seqs_missing", "tiers": "tiers_missing",
             "write_back": "write_back_missing", "tier_keys": "tier_keys_missing",
             "tier_contains": "tier_contains_missing", "gpu_limits": "gpu_limits_missing"}


def library_missing(feature: str) -> Optional[str]:
    """None when the loaded library has ``feature`` (one of "sequences",
    "tiers", "write_back", "tier_keys", "tier_contains", "gpu_limits"), else why not (the
    version found and the one needed)."""
    if feature not in _FEATURES:
        raise ValueError(f"feature {feature!r}: pass one of {sorted(_FEATURES)}")
    return getattr(_lib, _FEATURES[feature])


#: The package follows the library: kvrt 0.10 wraps every call of libkvrt
#: 0.10 but its two GPU benchmark calls, which it only declares.  It loads
#: libkvrt 0.4 or newer; a call a loaded library is too old
#: for raises NotSupportedError naming both versions.
__version__ = "0.10.0"

__all__ = [
    "AccessError", "BadAddressError", "BusyError", "ExistsError", "InterruptedCallError",
    "InvalidArgumentError", "KvrtError", "LimitOverflowError", "NoDeviceError",
    "NoSpaceError", "NotFoundError", "NotSupportedError", "OutOfBoundsError",
    "OutOfMemoryError", "TooBigError", "WouldBlockError", "error_class",
    "BlockArray", "Copy", "AttnImpl", "BlockTable", "KvCache", "Workers", "append_kv",
    "attn_decode", "attn_prefill",
    "HashInfo", "hash_block", "hash_info", "hash_prompt", "hash_prompt_array",
    "DType", "Layout", "LayoutKind", "kv_bytes",
    "HASH_BYTES", "MAX_BATCH", "PRIO_DEFAULT", "PRIO_MAX", "Backend", "Event", "EventType",
    "EvictCause", "Feature", "MemInfo", "NumaPolicy", "Pool", "PoolInfo", "PublishResult",
    "Space", "SpaceInfo", "SpaceStats", "Sequences", "SeqsStats", "CopyBlock", "LIBRARY",
    "library_version", "library_missing", "SPACE_NAME_MAX", "check_space_name",
    "check_name_part", "gpu", "Tier", "TierKind", "TierStats", "create_tier_key",
]
