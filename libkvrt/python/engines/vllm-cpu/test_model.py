# SPDX-License-Identifier: MIT
"""Tiny models served by vLLM's CPU engine with kvpool as its offloading spec.

Each test compares what vLLM generates after loading KV blocks from kvpool
with what it generates recomputing them, and checks from kvpool's side
(the blocks the kvpool worker copied in) that the blocks were loaded.
vLLM's own prefix caching is off throughout: a prompt token that vLLM did
not compute (num_cached_tokens) came from kvpool.

Log-probs are compared with LOGPROB_TOL: the loaded bytes are the bytes
vLLM wrote, but a prefill over a loaded prefix may sum float32 attention
in another order than one full prefill.  Measured on 2 cores: Llama and
Gemma2 equal to the bit (vLLM's CPU attention), MLA's first token within
1e-5; a perturbed or misplaced block moves them by far more (see
test_perturbed_space_changes_output).  1e-3 leaves room for other thread
counts without letting a wrong block through.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Any, Dict, List

import numpy as np

import model_util as mu  # sets the vLLM environment before vLLM is imported
import kvrt
from kvrt.vllm import spec as kspec

LOGPROB_TOL = 1e-3
HERE = os.path.dirname(os.path.abspath(__file__))


def full_blocks(n_tokens: int) -> int:
    """Prompt tokens vLLM can take from an offloaded prefix: whole blocks,
    less the last token, which it always computes to sample from."""
    return (n_tokens - 1) // mu.BLOCK * mu.BLOCK


class _ModelCase(unittest.TestCase):
    """One engine with kvpool and one without, on the same checkpoint."""

    model: str
    llm: Any
    ref: Any
    counter: mu.LoadCounter
    EXTRA: Dict[str, Any] = {}  # more kv_connector_extra_config

    @classmethod
    def make_model(cls) -> str:
        return mu.llama()

    @classmethod
    def setUpClass(cls) -> None:
        cls.model = cls.make_model()
        cls.ref = mu.make_llm(cls.model)
        cls.llm = mu.make_llm(cls.model, mu.kvpool_config(**cls.EXTRA))
        w = mu.kvpool_worker(cls.llm)
        assert type(w).__name__ == "KvpoolOffloadingWorker", type(w)
        cls.counter = mu.LoadCounter(w)

    @classmethod
    def tearDownClass(cls) -> None:
        for name in ("llm", "ref"):
            if getattr(cls, name, None) is not None:
                mu.close_llm(getattr(cls, name))
                setattr(cls, name, None)

    def space(self) -> kvrt.Space:
        """The engine's kvpool space, from kvrt.vllm's registry of this process."""
        want = mu.kvpool_manager(self.llm).space.name
        found = [sp for (_pk, name), (sp, _n, _p) in kspec._spaces.items() if name == want]
        self.assertEqual(len(found), 1, list(kspec._spaces))
        return found[0]

    def run_both(self, prompts: List[List[int]], max_tokens: int = 8) -> List[Dict]:
        """Generate on the kvpool engine; compare each prompt with the engine
        without a connector; return the kvpool engine's outputs with the
        blocks kvpool loaded for each."""
        outs = []
        for p in prompts:
            before = self.counter.loaded
            got = mu.generate(self.llm, [p], max_tokens)[0]
            got["loaded"] = self.counter.loaded - before
            want = mu.generate(self.ref, [p], max_tokens)[0]
            self.assertEqual(want["cached"], 0)
            # a saturated model (every log-prob 0) would make the comparison vacuous
            self.assertLess(min(want["logprobs"]), -0.01, want)
            self.assert_same(got, want)
            outs.append(got)
        return outs

    def assert_same(self, got: Dict, want: Dict) -> None:
        self.assertEqual(got["tokens"], want["tokens"])
        diff = np.abs(np.array(got["logprobs"]) - np.array(want["logprobs"]))
        self.assertLessEqual(float(diff.max()), LOGPROB_TOL, (got, want))

    def assert_loaded(self, out: Dict, tokens: int) -> None:
        """``tokens`` prompt tokens came from kvpool: vLLM skipped them and
        the kvpool worker copied their blocks in."""
        self.assertGreater(tokens, 0)
        self.assertEqual(out["cached"], tokens, out)
        self.assertEqual(out["loaded"], tokens // mu.BLOCK, out)


class LlamaTest(_ModelCase):
    """Full attention: hits on shared prefixes, multi-turn, perturbation, reset."""

    # vLLM offloads only prompt blocks by default; a second turn wants the
    # blocks the first turn's output filled as well
    EXTRA = {"offload_prompt_only": False}

    def test_engine_runs_the_worker_in_this_process(self) -> None:
        from vllm.v1.executor.uniproc_executor import UniProcExecutor
        ex = mu.engine_core(self.llm).model_executor
        self.assertIsInstance(ex, UniProcExecutor)
        self.assertEqual(type(mu.kvpool_manager(self.llm)).__name__,
                         "KvpoolOffloadingManager")

    def test_shared_prefixes_load_from_kvpool(self) -> None:
        base = mu.prompt(200, 1)
        prompts = [base + mu.prompt(40, 2), base + mu.prompt(75, 3), base[:100] + mu.prompt(9, 4),
                   base + mu.prompt(40, 2)]
        outs = self.run_both(prompts)
        self.assertEqual(outs[0]["cached"], 0)
        self.assertEqual(outs[0]["loaded"], 0)
        self.assert_loaded(outs[1], 200 // mu.BLOCK * mu.BLOCK)
        self.assert_loaded(outs[2], 100 // mu.BLOCK * mu.BLOCK)
        self.assert_loaded(outs[3], full_blocks(len(prompts[3])))
        st = self.space().stats()
        self.assertGreater(st.published_blocks + st.cached_blocks, 0, st)

    def test_multi_turn_loads_turn_one(self) -> None:
        turn1 = mu.prompt(300, 10)
        out1 = self.run_both([turn1], max_tokens=40)[0]
        turn2 = turn1 + out1["tokens"] + mu.prompt(30, 11)
        out2 = self.run_both([turn2])[0]
        # turn 1 stored its prompt's full blocks and those the generated tokens
        # filled (the last generated token has no KV yet): 10 blocks, not 9
        n = (len(turn1) + len(out1["tokens"]) - 1) // mu.BLOCK * mu.BLOCK
        self.assertGreater(n, len(turn1) // mu.BLOCK * mu.BLOCK)
        self.assert_loaded(out2, n)

    def test_perturbed_space_changes_output(self) -> None:
        p = mu.prompt(400, 20)
        first, again = self.run_both([p, p])
        self.assert_loaded(again, full_blocks(len(p)))
        sp = self.space()
        view = sp.view().reshape(-1)  # every backed byte of the space
        # float32 little-endian: byte 3 of a value holds its sign and exponent,
        # so +1 is never lost in rounding (byte 0 would be a last-bit change)
        idx = np.arange(3, view.size, 4096)
        view[idx] += 1
        try:
            before = self.counter.loaded
            bad = mu.generate(self.llm, [p])[0]
            self.assertEqual(self.counter.loaded - before, full_blocks(len(p)) // mu.BLOCK)
        finally:
            view[idx] -= 1
        diff = np.abs(np.array(bad["logprobs"]) - np.array(first["logprobs"]))
        self.assertTrue(bad["tokens"] != first["tokens"] or diff.max() > 100 * LOGPROB_TOL,
                        (bad, first))
        # restored bytes give the recomputed output back
        before = self.counter.loaded
        fixed = mu.generate(self.llm, [p])[0]
        self.assertGreater(self.counter.loaded, before)
        self.assert_same(fixed, first)

    def test_reset_connector_drops_kvpool_hits(self) -> None:
        """reset_prefix_cache(reset_connector=True) makes everything stored
        before it unreachable: the next run of a prompt loads nothing."""
        p = mu.prompt(300, 30)
        _first, again = self.run_both([p, p])
        self.assert_loaded(again, full_blocks(len(p)))
        self.assertTrue(self.llm.reset_prefix_cache(reset_connector=True))
        after = self.run_both([p])[0]
        self.assertEqual(after["loaded"], 0, after)
        self.assertEqual(after["cached"], 0, after)
        # kvpool still works after the reset: the recomputed blocks are stored anew
        self.assert_loaded(self.run_both([p])[0], full_blocks(len(p)))


class HybridSlidingWindowTest(_ModelCase):
    """Gemma2: sliding-window and full-attention layers, two KV cache groups.
    Compared against recomputation (vLLM's CPU path gives the same outputs)."""

    WINDOW = 64

    @classmethod
    def make_model(cls) -> str:
        return mu.gemma2_sliding(window=cls.WINDOW)

    def test_groups(self) -> None:
        groups = mu.engine_core(self.llm).scheduler.kv_cache_config.kv_cache_groups
        kinds = sorted(type(g.kv_cache_spec).__name__ for g in groups)
        self.assertEqual(kinds, ["FullAttentionSpec", "SlidingWindowSpec"])

    def test_prefix_loads_from_kvpool(self) -> None:
        base = mu.prompt(300, 40)
        outs = self.run_both([base + mu.prompt(20, 41), base + mu.prompt(33, 42),
                              base + mu.prompt(20, 41)])
        self.assertEqual(outs[0]["loaded"], 0)
        for out, n in ((outs[1], 300 // mu.BLOCK * mu.BLOCK),
                       (outs[2], full_blocks(320))):
            self.assertEqual(out["cached"], n, out)
            # every block of the full-attention group, and of the sliding
            # group only the blocks the window reaches back to
            sliding = -(-(self.WINDOW - 1) // mu.BLOCK)
            self.assertEqual(out["loaded"], n // mu.BLOCK + sliding, out)


class MlaTest(_ModelCase):
    """DeepSeek-V2 shape: MLA, one latent KV (kv_lora_rank + rope) per token.

    Compared against recomputation for the first generated token only, the
    one the prefill over the loaded prefix produces: vLLM 0.32's CPU MLA
    backend runs with chunked prefill and prefix caching disabled (its
    cpu_mla.py says so), so decoding after a prefill over cached context is
    a path it does not run itself, and there is no prefix-cache hit of
    vLLM's own to compare with.  On this path the later decode steps differ
    from recomputation for some prompts, with vLLM's paged cache holding the
    right latents (the prefill that reads them matches).
    """

    @classmethod
    def make_model(cls) -> str:
        return mu.deepseek_mla()

    def test_mla_is_used(self) -> None:
        self.assertTrue(self.llm.llm_engine.model_config.use_mla)
        self.assertEqual(self.llm.llm_engine.vllm_config.cache_config.block_size, 16)

    def test_prefix_loads_from_kvpool(self) -> None:
        block = 16  # forced by vLLM's CPU MLA
        base = mu.prompt(250, 50)
        prompts = [base + mu.prompt(20, 51), base + mu.prompt(31, 52), mu.prompt(200, 53),
                   mu.prompt(200, 53)]
        for i, p in enumerate(prompts):
            before = self.counter.loaded
            got = mu.generate(self.llm, [p], max_tokens=1)[0]
            got["loaded"] = self.counter.loaded - before
            want = mu.generate(self.ref, [p], max_tokens=1)[0]
            self.assert_same(got, want)
            n = {0: 0, 1: 250 // block * block, 2: 0, 3: (200 - 1) // block * block}[i]
            self.assertEqual(got["cached"], n, (i, got))
            self.assertEqual(got["loaded"], n // block, (i, got))


def run_child(args: List[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, os.path.join(HERE, "model_child.py")] + args,
                          env=e, capture_output=True, text=True, timeout=timeout)


def child_result(cp: subprocess.CompletedProcess) -> Dict:
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT ")]
    if cp.returncode != 0 or not lines:
        raise AssertionError(f"child rc {cp.returncode}\n{cp.stdout[-3000:]}\n"
                             f"{cp.stderr[-6000:]}")
    return json.loads(lines[-1][len("RESULT "):])


class RestartTest(unittest.TestCase):
    """Two engine processes one after the other, with an SSD tier: the second
    finds the first one's blocks there (its embedded pool starts empty)."""

    def test_second_process_loads_from_ssd_tier(self) -> None:
        with tempfile.TemporaryDirectory(prefix="kvrt-vllm-cpu-ssd-") as tmp:
            key = os.path.join(tmp, "tier.key")
            kvrt.create_tier_key(key)
            ssd = os.path.join(tmp, "ssd")
            os.mkdir(ssd)
            model = mu.llama(seed=3)
            args = ["ssd", model, ssd, key]
            env = {"PYTHONHASHSEED": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
            first = child_result(run_child(args, env, 300))
            second = child_result(run_child(args, env, 300))
        self.assertEqual(first["cached"], 0, first)   # nothing there yet: recomputed
        self.assertEqual(first["loaded"], 0, first)
        n = full_blocks(first["prompt_len"])
        self.assertEqual(second["cached"], n, second)
        self.assertEqual(second["loaded"], n // mu.BLOCK, second)
        self.assertEqual(second["tokens"], first["tokens"])
        diff = np.abs(np.array(second["logprobs"]) - np.array(first["logprobs"]))
        self.assertLessEqual(float(diff.max()), LOGPROB_TOL)


class MultiprocessLayoutTest(unittest.TestCase):
    """vLLM's CPU default puts the worker in another process than the
    scheduler, where an embedded pool cannot be shared: the engine must
    refuse at start-up, saying so, never crash at the first request."""

    def test_embedded_backend_refused_at_startup(self) -> None:
        model = mu.llama(seed=4)
        try:
            cp = run_child(["mp", model], {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, 240)
        except subprocess.TimeoutExpired as e:
            self.fail(f"the engine neither started nor refused in 240 s: {e}")
        out = cp.stdout + cp.stderr
        self.assertNotEqual(cp.returncode, -11, out[-4000:])
        self.assertNotIn("SIGSEGV", out, out[-4000:])
        self.assertNotIn("Segmentation fault", out, out[-4000:])
        self.assertNotIn("CONSTRUCTED", cp.stdout, out[-4000:])
        self.assertNotEqual(cp.returncode, 0, out[-4000:])
        self.assertIn("kvpool_backend", out, out[-4000:])
        self.assertIn("other processes", out, out[-4000:])


def tearDownModule() -> None:
    mu.cleanup()


if __name__ == "__main__":
    unittest.main()
