# SPDX-License-Identifier: MIT
"""One engine process for test_model.py's tests that need a process of
their own; prints one ``RESULT {json}`` line.

    model_child.py ssd MODEL SSD_DIR KEY_FILE   kvpool with an SSD tier
    model_child.py mp MODEL                     embedded kvpool, vLLM's own layout
"""
from __future__ import annotations

import json
import sys

import model_util as mu


def main() -> None:
    mode, model = sys.argv[1], sys.argv[2]
    if mode == "ssd":
        ssd, key = sys.argv[3], sys.argv[4]
        cfg = mu.kvpool_config(quota_bytes=8 << 20, kvpool_tier_ssd=ssd,
                               kvpool_tier_ssd_bytes=32 << 20,
                               kvpool_tier_key_file=key)
        llm = mu.make_llm(model, cfg)
        counter = mu.LoadCounter(mu.kvpool_worker(llm))
        p = mu.prompt(600, 60)
        out = mu.generate(llm, [p])[0]
        out["loaded"] = counter.loaded
        out["prompt_len"] = len(p)
        mu.close_llm(llm)  # closes the space: the write-back tier writes its queue
        print("RESULT " + json.dumps(out), flush=True)
    elif mode == "mp":
        # vLLM's CPU default: the engine core (and its worker) in a process
        # of its own; no distributed_executor_backend="uni"
        llm = mu.make_llm(model, mu.kvpool_config(), distributed_executor_backend=None)
        print("CONSTRUCTED", flush=True)
        out = mu.generate(llm, [mu.prompt(100, 70)])[0]
        print("RESULT " + json.dumps(out), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
