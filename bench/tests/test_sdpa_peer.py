#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""bench/sdpa_peer.py without a GPU: prefill cases parse as kvbench gpu-attn
passes them (BxQxCTX, Q <= CTX), their FLOPs are the causal pairs that
kvbench counts (tools/kvbench/bench_gpu_prefill.c), the best figure is
the line's limit and comes before the variants' own, --dry-run imports no
torch, and bad arguments are usage errors."""
import contextlib
import io
import json
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sdpa_peer as sp  # noqa: E402


class Flops(unittest.TestCase):
    def test_causal_pairs_by_brute_force(self):
        for b, q, c in ((1, 1, 1), (2, 8, 48), (3, 5, 5), (1, 16, 64)):
            want = b * sum(1 for r in range(q) for key in range(c) if key <= c - q + r)
            self.assertEqual(sp.causal_pairs(b, q, c), want, (b, q, c))

    def test_issue_case(self):
        # 8 x 512 over 4k: 8 x (512 x 3584 + 512 x 513 / 2) pairs, 4 x 128 x 32 each
        pairs = 8 * (512 * 3584 + 512 * 513 // 2)
        self.assertEqual(sp.causal_pairs(8, 512, 4096), pairs)
        self.assertEqual(sp.attn_flops(pairs, 32, 128), 16384 * pairs)

    def test_variants(self):
        self.assertEqual(sp.prefill_variants(64, 64), ["flash_causal", "flash_full"])
        self.assertEqual(sp.prefill_variants(16, 64), ["flash_full", "lower_right"])


class Best(unittest.TestCase):
    """run_prefill's line from canned timings: kvbench reads the first
    "tflops", "best" and "error" of it, so a variant's must come after."""

    def setUp(self):
        class Gen:
            def __init__(self, device=None):
                pass

            def manual_seed(self, s):
                pass
        cuda = types.SimpleNamespace(get_device_name=lambda d: "fake")
        self.torch = types.SimpleNamespace(Generator=Gen, randn=lambda *a, **k: None,
                                           cuda=cuda, __version__="0")
        self.a = sp.parse(["--prefill-case", "2x8x48"])[0]
        self.saved = sp.time_prefill_variant

    def tearDown(self):
        sp.time_prefill_variant = self.saved

    def line(self, times):
        sp.time_prefill_variant = lambda torch, F, a, name, *rest: dict(times[name])
        return sp.run_prefill(self.torch, None, self.a, "cuda:0", None, "enable_gqa", 2, 8, 48)

    def test_best_and_order(self):
        r = self.line({"flash_full": {"median_ms": 2.0, "backend": "flash"},
                       "lower_right": {"failed": "no kernel"}})
        self.assertEqual(r["best"], "flash_full")
        self.assertAlmostEqual(r["tflops"], 4 * 128 * 32 * 2 * 8 * 48 / 2e-3 / 1e12)
        self.assertEqual(r["variants"]["lower_right"], {"failed": "no kernel"})
        text = json.dumps(r)
        self.assertLess(text.index('"tflops"'), text.index('"variants"'))
        self.assertLess(text.index('"best"'), text.index('"variants"'))
        self.assertNotIn('"error"', text)
        r = self.line({"flash_full": {"median_ms": 2.0, "backend": "flash"},
                       "lower_right": {"median_ms": 1.0, "backend": "efficient"}})
        self.assertEqual(r["best"], "lower_right_efficient")
        self.assertEqual(r["variants"]["lower_right_efficient"]["flops"],
                         4 * 128 * 32 * sp.causal_pairs(2, 8, 48))

    def test_none_ran(self):
        r = self.line({"flash_full": {"failed": "a"}, "lower_right": {"failed": "b"}})
        self.assertEqual(r["case"], "2x8x48")
        self.assertIn("flash_full: a", r["error"])


class Cli(unittest.TestCase):
    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = sp.main(argv)
            except SystemExit as e:
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    def test_dry_run_without_torch(self):
        rc, out, _ = self.run_main(["--dry-run", "--case", "2x64", "--prefill-case", "2x8x48",
                                    "--prefill-case", "1X16X16"])
        self.assertEqual(rc, 0)
        lines = [json.loads(x) for x in out.splitlines()]
        self.assertEqual([x["case"] for x in lines], ["2x64", "2x8x48", "1x16x16"])
        self.assertEqual(lines[1]["q_shape"], [2, 32, 8, 128])
        self.assertEqual(lines[1]["kv_shape"], [2, 8, 48, 128])
        self.assertEqual(lines[1]["flops_causal"], 4 * 128 * 32 * sp.causal_pairs(2, 8, 48))
        self.assertEqual(lines[1]["flops_full"], 4 * 128 * 32 * 2 * 8 * 48)
        self.assertEqual(lines[2]["flops_causal"], 4 * 128 * 32 * 16 * 17 // 2)
        self.assertNotIn("torch", sys.modules)

    def test_usage_errors(self):
        for argv in (["--prefill-case", "2x9x8"], ["--prefill-case", "0x8x8"],
                     ["--prefill-case", "2x8"], ["--prefill-case", "axbxc"],
                     ["--prefill-case", "1x0x8"], []):
            rc, _, err = self.run_main(argv + ["--dry-run"])
            self.assertEqual(rc, 2, argv)
            self.assertIn("error", err)
        _, _, err = self.run_main(["--prefill-case", "2x9x8"])
        self.assertIn("Q (9 new tokens) is more than CTX (8)", err)


if __name__ == "__main__":
    unittest.main()
