# SPDX-License-Identifier: MIT
"""Two TP ranks of one engine, each a process with SGLang's HiCacheController
and kvpool as its storage backend, joined by a gloo group of two.

SGLang's prefetch thread asks its backend how much is stored
(``batch_exists``), then reduces the answer over the TP ranks with MIN so
that every rank loads the same prefix; the I/O thread's acks are reduced
the same way.  Here rank 0 has stored 3 pages and rank 1 only 2 (each
rank's slice of a page is its own kvpool block), so each backend answers
its own count and both controllers must settle on 2 and load those bytes.

Each rank runs in a child process (``python test_tp_controller.py RANK
STORE OUT``); the parent checks what they wrote.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

PAGE = 4                      # test_controller's page size
STORED = {0: 3, 1: 2}         # pages each rank backs up
ASKED = 4                     # pages in the request both ranks prefetch
WAIT = 240                    # seconds for a rank (imports SGLang and torch)


def rank_main(rank, store, out):
    """One TP rank: back up STORED[rank] pages, prefetch ASKED, report."""

    import torch
    import torch.distributed as dist
    from sglang.srt.runtime_context import get_parallel

    get_parallel().override_permanently(tp_rank=rank, tp_size=2, pp_rank=0, pp_size=1,
                                        attn_dcp_size=1, attn_dcp_rank=0)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    import test_controller
    from test_storage import fill, page_bytes

    class Fake(unittest.TestCase):
        def runTest(self):
            pass

    case = Fake()
    eng = test_controller.Engine(case, f"tp-{os.getppid()}")
    tokens = list(range(7000, 7000 + ASKED * PAGE))
    src = eng.host_pages(STORED[rank])
    pages = test_controller.host_page_numbers(src)
    want = [fill(eng.host, p, 10 * rank + i) for i, p in enumerate(pages)]
    stored = eng.backup(src, tokens[:STORED[rank] * PAGE])
    keys = test_controller.get_storage_hash_str(tokens, None, page_size=PAGE)
    own = eng.cc.storage_backend.batch_exists(keys)   # this rank's backend alone
    op = eng.query("tp", tokens)
    done = eng.transfer(op)
    loaded = [torch.equal(page_bytes(eng.host, p), w)
              for p, w in zip(test_controller.host_page_numbers(op.host_indices), want)]
    groups = len(eng.cc.prefetch_hits_sync_groups)
    case.doCleanups()
    with open(out, "w") as f:
        json.dump({"stored": stored, "own": own, "hit": op.storage_hit_count,
                   "done": done, "loaded": loaded, "groups": groups}, f)
    dist.barrier()
    dist.destroy_process_group()


class TestTwoRanks(unittest.TestCase):
    def test_the_hit_is_the_min_over_ranks(self):
        with tempfile.TemporaryDirectory(prefix="kvrt-sgl-tp.") as d:
            store = os.path.join(d, "store")
            outs = [os.path.join(d, f"rank{r}.json") for r in (0, 1)]
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), str(r), store,
                                       outs[r]], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
                     for r in (0, 1)]
            logs = []
            for p in procs:
                try:
                    logs.append(p.communicate(timeout=WAIT)[0])
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    raise
            for r, p in enumerate(procs):
                self.assertEqual(p.returncode, 0, f"rank {r}:\n{logs[r][-3000:]}")
            got = []
            for o in outs:
                with open(o) as f:
                    got.append(json.load(f))
        for r in (0, 1):
            g = got[r]
            with self.subTest(rank=r, got=g):
                self.assertEqual(g["groups"], 1)          # SGLang made its TP sync group
                self.assertEqual(g["stored"], STORED[r] * PAGE)
                self.assertEqual(g["own"], STORED[r])     # each backend tells its own truth
                self.assertEqual(g["hit"], 2 * PAGE)      # the controllers agree on the MIN
                self.assertEqual(g["done"], [2 * PAGE])
                self.assertEqual(g["loaded"], [True, True])


if __name__ == "__main__":
    rank_main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
