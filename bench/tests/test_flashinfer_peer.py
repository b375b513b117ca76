#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""bench/flashinfer_peer.py without a GPU: its page tables are kvbench
gpu-attn's (the shuffle reproduces kvb_shuffle's numbers, taken from
tools/kvbench/data.c), each case's table is valid, the layout is libkvrt's
layer-major one, --dry-run imports neither torch nor flashinfer, and bad
arguments are usage errors."""
import contextlib
import io
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flashinfer_peer as fp  # noqa: E402


class PageTable(unittest.TestCase):
    def test_shuffle_is_kvbenchs(self):
        # kvb_shuffle(v, n, &seed) in C, first numbers printed there
        self.assertEqual(fp.shuffle(16384, 1000)[:8],
                         [13504, 2905, 5041, 2922, 5585, 9519, 15917, 6595])
        self.assertEqual(fp.shuffle(16384, 1032)[:8],
                         [15074, 2314, 15981, 10899, 175, 10183, 11970, 12719])
        self.assertEqual(fp.shuffle(8, 1001), [1, 2, 5, 3, 7, 4, 0, 6])

    def test_cases_are_valid_tables(self):
        batches, contexts = [1, 8, 32, 64], [1024, 4096, 1000]
        pages = fp.cache_pages(batches, contexts)
        self.assertEqual(pages, 64 * 4096 // 16)
        for bi, b in enumerate(batches):
            for ci, c in enumerate(contexts):
                t = fp.case_table(bi, ci, batches, contexts, pages)
                self.assertEqual(t["ctx"], c // 16 * 16)
                per = t["ctx"] // 16
                self.assertEqual(t["indptr"], [s * per for s in range(b + 1)])
                self.assertEqual(len(t["indices"]), b * per)
                self.assertEqual(len(set(t["indices"])), b * per)  # no page twice
                self.assertTrue(all(0 <= i < pages for i in t["indices"]))
                self.assertEqual(t["last_page_len"], [16] * b)
                self.assertEqual(t["kv_bytes"], b * t["ctx"] * 2 * 8 * 128 * 2)

    def test_layout_is_libkvrts_layer_major(self):
        lay = fp.layout(100)
        plane = 16 * 8 * 128 * 2
        self.assertEqual(lay["strides_bytes"],
                         {"kv": 100 * plane, "block": plane, "token": 8 * 128 * 2,
                          "head": 128 * 2})
        self.assertEqual(lay["cache_shape"], [2, 100, 16, 8, 128])


class Cli(unittest.TestCase):
    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = fp.main(argv)
            except SystemExit as e:
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    def test_dry_run_describes_every_case_without_torch(self):
        rc, out, _ = self.run_main(["--dry-run", "--batches", "1,8", "--contexts", "64,1024",
                                    "--decode", "tc", "--no-prefill"])
        self.assertEqual(rc, 0)
        lines = [json.loads(x) for x in out.splitlines()]
        self.assertEqual([x["case"] for x in lines],
                         ["layout_b1_ctx64", "layout_b1_ctx1024", "layout_b8_ctx64",
                          "layout_b8_ctx1024"])
        self.assertTrue(all(x["bench"] == "flashinfer-peer" and x["dry_run"] for x in lines))
        self.assertEqual(lines[3]["indptr_last"], 8 * 64)
        self.assertEqual(lines[0]["decode"], ["tc"])
        self.assertFalse(lines[0]["prefill"])
        self.assertNotIn("torch", sys.modules)
        self.assertNotIn("flashinfer", sys.modules)

    def test_usage_errors(self):
        for argv in (["--decode", "fast"], ["--decode", "tc,tc"], ["--batches", "0"],
                     ["--contexts", "1,x"], ["--iters", "0"],
                     ["--batches", ",".join(["1"] * 9), "--contexts", ",".join(["16"] * 8)]):
            rc, _, err = self.run_main(argv + ["--dry-run"])
            self.assertEqual(rc, 2, argv)
            self.assertIn("error", err)


if __name__ == "__main__":
    unittest.main()
