# SPDX-License-Identifier: MIT
"""The manager's reset generations through vLLM's real Scheduler and
OffloadingConnector (on CPU)."""
from __future__ import annotations

import unittest
from typing import Any, Dict, List

import vllm_util as vu  # sets HF_HUB_OFFLINE before vLLM is imported
from kvrt.vllm import offload_hash
from kvrt.vllm.manager import GENERATION_BYTES
from test_vllm_offload import cached, prompt, tenant
from vllm.v1.kv_offload.base import make_offload_key


class EngineCase(unittest.TestCase):
    """Engines made here are shut down after the test, last first."""

    def setUp(self) -> None:
        self.engines: List[vu.Engine] = []

    def tearDown(self) -> None:
        for e in reversed(self.engines):
            e.shutdown()

    def engine(self, extra: Dict[str, Any], seed: int = 0) -> vu.Engine:
        e = vu.Engine(extra, seed=seed)
        self.engines.append(e)
        return e


# ---- 1. reset_cache: a new generation ---------------------------------------------

class ResetTest(EngineCase):
    def test_reset_connector_makes_old_blocks_unreachable(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant())
        a, b = self.engine(extra, seed=1), self.engine(extra, seed=2)
        p = prompt(3 * vu.BLOCK + 5, 21)
        a.run(vu.make_request(p))
        old = sorted(x for x, _ in a.stored_blocks)
        self.assertEqual(len(old), 3)
        self.assertEqual(a.manager.generation, b"")
        self.assertTrue(a.sched.reset_prefix_cache(reset_connector=True))
        self.assertEqual(len(a.manager.generation), GENERATION_BYTES)
        ra = vu.make_request(p)
        a.run(ra)
        self.assertEqual(a.external_tokens(ra), 0)  # recomputed, not the old KV
        self.assertEqual(a.loaded_blocks, [])
        self.assertEqual(len(a.stored_blocks), 6)  # stored again, new hashes
        self.assertEqual(cached(a.manager.space), 6)
        # B did not reset: it still loads the blocks A stored before its reset.
        rb = vu.make_request(p)
        b.run(rb)
        self.assertEqual(b.external_tokens(rb), 3 * vu.BLOCK)
        self.assertEqual(sorted(x for x, _ in b.loaded_blocks), old)

    def test_two_reset_engines_do_not_meet(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant())
        a, c = self.engine(extra, seed=1), self.engine(extra, seed=3)
        for e in (a, c):
            self.assertTrue(e.sched.reset_prefix_cache(reset_connector=True))
        self.assertNotEqual(a.manager.generation, c.manager.generation)
        p = prompt(2 * vu.BLOCK + 1, 22)
        a.run(vu.make_request(p))
        self.assertEqual(len(a.stored_blocks), 2)
        rc = vu.make_request(p)
        c.run(rc)
        self.assertEqual(c.external_tokens(rc), 0)
        self.assertEqual(cached(a.manager.space), 4)

    def test_generation_hash(self) -> None:
        k = make_offload_key(b"\x07" * 32, 0)
        g = b"\x01" * GENERATION_BYTES
        self.assertEqual(offload_hash(k, b""), offload_hash(k))
        self.assertNotEqual(offload_hash(k, g), offload_hash(k))
        self.assertEqual(len(offload_hash(k, g)), 32)
        with self.assertRaisesRegex(ValueError, "generation: pass b'' or 16 bytes, not 3"):
            offload_hash(k, b"abc")


if __name__ == "__main__":
    unittest.main()
