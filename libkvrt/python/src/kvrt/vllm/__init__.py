# SPDX-License-Identifier: MIT
"""kvpool as a KV offloading backend of vLLM (pinned: 0.33.0).

Switched on by configuration only::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "KvpoolOffloadingSpec",
                                    "spec_module_path": "kvrt.vllm",
                                    "kvpool_backend": "auto",
                                    "kvpool_quota_bytes": 8589934592}}'

``import kvrt`` never imports this package (nor vLLM); vLLM imports it
through ``spec_module_path``.  See Documentation/python.rst, "vLLM".
"""
from .spec import (KvpoolOffloadingSpec, KvpoolSettings, geometry_fingerprint,  # noqa: F401
                   space_name_for)
from .manager import KvpoolLoadStoreSpec, KvpoolOffloadingManager, offload_hash  # noqa: F401
from .worker import KvpoolOffloadingWorker  # noqa: F401

#: The vLLM version this backend is written and tested against.
VLLM_VERSION = "0.33.0"

__all__ = ["KvpoolOffloadingSpec", "KvpoolSettings", "KvpoolOffloadingManager",
           "KvpoolLoadStoreSpec", "KvpoolOffloadingWorker", "geometry_fingerprint",
           "space_name_for", "offload_hash", "VLLM_VERSION"]
