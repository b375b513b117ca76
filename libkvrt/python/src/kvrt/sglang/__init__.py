# SPDX-License-Identifier: MIT
"""kvpool as SGLang's hierarchical-cache (HiCache) L3 storage.

Load it with SGLang's dynamic storage backend::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvpool",
        "module_path": "kvrt.sglang", "class_name": "KvpoolStorage",
        "interface_v1": 1}'

This package imports SGLang and torch; ``import kvrt`` does not import it.
See Documentation/python.rst, section "SGLang".
"""
from .storage import CONFIG_KEYS, KvpoolStorage, space_name

__all__ = ["CONFIG_KEYS", "KvpoolStorage", "space_name"]
