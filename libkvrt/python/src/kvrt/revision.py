# SPDX-License-Identifier: MIT
"""What identifies a model's weights, for the engines' space identities.

Engine-free (no vLLM, SGLang or torch import), so that every engine
integration derives the same revision from the same model.
"""
from __future__ import annotations

import hashlib
import os
import re

#: Top-level files whose name, size and mtime stand for a local model's weights.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json")


def model_revision(model: str) -> str:
    """What identifies the weights of ``model``, without reading them.

    A local directory: SHA-256 of each top-level weight or config file's
    name, size and modification time (a model replaced in place, even with
    the same name, gets another revision).  A Hugging Face id: the commit
    its cache's ``refs/main`` names.  Otherwise "" (only the name counts:
    pass kvpool_model_revision).
    """
    if os.path.isdir(model):
        h = hashlib.sha256()
        for entry in sorted(os.scandir(model), key=lambda e: e.name):
            if entry.name.endswith(WEIGHT_SUFFIXES) and entry.is_file():
                st = entry.stat()
                h.update(f"{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return "files:" + h.hexdigest()[:32]
    return _hf_cache_commit(model)


def _hf_cache_commit(repo_id: str) -> str:
    if repo_id.count("/") != 1 or ".." in repo_id:
        return ""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
    ref = os.path.join(hub, "models--" + repo_id.replace("/", "--"), "refs", "main")
    try:
        with open(ref, encoding="ascii") as f:
            commit = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return "hf:" + commit if re.fullmatch(r"[0-9a-f]{40}", commit) else ""
