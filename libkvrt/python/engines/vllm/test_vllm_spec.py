# SPDX-License-Identifier: MIT
"""What the spec decides before any block moves: which process layouts an
embedded pool can serve, MLA's replicated layout, the weights' revision in
the space identity, and refusals that name what the user set."""
from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
import unittest

import numpy as np
import torch

import vllm_util as vu  # sets HF_HUB_OFFLINE before vLLM is imported
from kvrt.vllm import KvpoolLoadStoreSpec, KvpoolOffloadingSpec, KvpoolOffloadingWorker
from kvrt.vllm import spec as kspec

_tenants = itertools.count()


def tenant() -> str:
    return f"s{next(_tenants)}"


def gpu_spec(ids):
    from vllm.v1.kv_offload.base import GPULoadStoreSpec
    return GPULoadStoreSpec(list(ids), group_sizes=[len(ids)], block_indices=[0])


class ProcessLayoutTest(unittest.TestCase):
    """vLLM builds its workers before its scheduler: a scheduler on an
    embedded pool that finds no worker in its process has them elsewhere
    (vLLM's multiprocess executor), where they could not reach its pool."""

    def test_workers_elsewhere_are_refused_at_start_up(self) -> None:
        for backend in ("embedded", "auto"):
            with self.subTest(backend=backend):
                extra = vu.kvpool_extra(kvpool_tenant=tenant(), kvpool_backend=backend)
                with self.assertRaises(ValueError) as cm:
                    vu.make_scheduler(extra, with_worker=False)
                msg = str(cm.exception)
                for words in ("other processes", f"kvpool_backend {backend!r}",
                              "'kmod'", "VLLM_ENABLE_V1_MULTIPROCESSING=0"):
                    self.assertIn(words, msg)
                if backend == "auto":
                    self.assertIn("found no kvpool module", msg)
                # nothing is left open: the refused scheduler's space is gone
                self.assertEqual([k for k in kspec._spaces if k[1].startswith(
                    f"vllm-{extra['kvpool_tenant']}-")], [])

    def test_a_worker_in_this_process_is_enough(self) -> None:
        extra = vu.kvpool_extra(kvpool_tenant=tenant())
        sched = vu.make_scheduler(extra)
        name = sched.connector.connector_scheduler.manager.spec.space_name
        key = (kspec._pool_key(kspec.KvpoolSettings.from_extra_config(extra)), name)
        self.assertEqual(kspec._workers.get(key), 1)
        vu.shutdown_scheduler(sched)
        self.assertNotIn(key, kspec._workers)
        self.assertNotIn(key, kspec._spaces)  # the last handle closed the space
        # the worker has gone: a scheduler alone is refused again
        with self.assertRaisesRegex(ValueError, "other processes"):
            vu.make_scheduler(extra, with_worker=False)


class ReplicatedLayoutTest(unittest.TestCase):
    """MLA with TP on one node: vLLM sets replicated_layout; every rank's
    latent cache is the same, so a block holds one copy that rank 0 writes
    and every rank loads."""

    def setUp(self) -> None:
        self.extra = vu.kvpool_extra(kvpool_tenant=tenant())
        self.sched = vu.make_scheduler(self.extra, num_blocks=16)
        self.base = self.sched.connector.connector_scheduler.manager.spec

    def tearDown(self) -> None:
        vu.shutdown_scheduler(self.sched)

    def spec(self, rank: int, replicated: bool = True, **kw) -> KvpoolOffloadingSpec:
        cfg = self.base.config
        par = dataclasses.replace(cfg.parallel, rank=rank, world_size=2, tp_size=2)
        return KvpoolOffloadingSpec(dataclasses.replace(cfg, parallel=par,
                                                        replicated_layout=replicated, **kw))

    def test_one_copy_written_by_rank_0_loaded_by_every_rank(self) -> None:
        specs = [self.spec(0), self.spec(1)]
        self.assertEqual(specs[0].block_bytes, self.base.block_bytes)  # not 2x
        self.assertEqual(specs[0].space_name, specs[1].space_name)
        self.assertNotEqual(specs[0].space_name, self.spec(0, replicated=False).space_name)
        caches = [vu.host_kv_caches(16, seed=40 + r) for r in range(2)]
        # Two ranks are two processes, which an embedded pool cannot serve
        # (the spec refuses it): here both open the space the specs name.
        space = self.base.open_space()
        self.addCleanup(self.base.close_space)
        self.assertLessEqual(specs[0].block_bytes, space.info().block_bytes)
        workers = [KvpoolOffloadingWorker(space, c, rank=r, worker_bytes=s.worker_bytes,
                                          replicated=s.replicated_layout)
                   for r, (s, (c, _)) in enumerate(zip(specs, caches))]
        try:
            ids = space.alloc(3)
            before = space.block_view(int(ids[0])).copy()
            # rank 1's store is vLLM's non-writer ack: it must not write
            self.assertTrue(workers[1].submit_store(1, gpu_spec([4, 5, 6]),
                                                    KvpoolLoadStoreSpec(ids)))
            self.assertEqual([r.transfer_size for r in workers[1].get_finished()], [0])
            self.assertTrue(np.array_equal(space.block_view(int(ids[0])), before))
            self.assertTrue(workers[0].submit_store(2, gpu_spec([1, 2, 3]),
                                                    KvpoolLoadStoreSpec(ids)))
            workers[0].get_finished()
            # rank 1 loads rank 0's bytes into its own blocks 7, 8, 9
            self.assertTrue(workers[1].submit_load(3, KvpoolLoadStoreSpec(ids),
                                                   gpu_spec([7, 8, 9])))
            workers[1].get_finished()
            for s, d in zip([1, 2, 3], [7, 8, 9]):
                for t0, t1 in zip(caches[0][1], caches[1][1]):
                    self.assertTrue(torch.equal(t0[s], t1[d]))
            space.free(ids)
        finally:
            for w in workers:
                w.shutdown()

    def test_canonical_layout_is_named(self) -> None:
        with self.assertRaisesRegex(ValueError, "drop 'canonical_layout'"):
            self.spec(0, replicated=False, canonical_layout=True)


class RevisionTest(unittest.TestCase):
    """The space identity carries the weights' revision: a model replaced
    in place, or another commit, gets a space (and tiers) of its own."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kvrt-rev-")
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name: str, data: bytes, mtime_ns: int) -> None:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, ns=(mtime_ns, mtime_ns))

    def test_local_directory(self) -> None:
        self.write("config.json", b"{}", 10**18)
        self.write("model.safetensors", b"w" * 100, 10**18)
        self.write("notes.txt", b"x", 10**18)
        r1 = kspec.model_revision(self.dir)
        self.assertRegex(r1, r"^files:[0-9a-f]{32}$")
        self.write("notes.txt", b"yy", 2 * 10**18)  # not a weight or config file
        self.assertEqual(kspec.model_revision(self.dir), r1)
        self.write("model.safetensors", b"v" * 100, 10**18 + 1)  # replaced in place
        r2 = kspec.model_revision(self.dir)
        self.assertNotEqual(r2, r1)
        self.write("model.safetensors", b"v" * 101, 10**18 + 1)  # same time, other size
        self.assertNotIn(kspec.model_revision(self.dir), (r1, r2))

    def test_hugging_face_cache_commit(self) -> None:
        refs = os.path.join(self.dir, "models--org--m", "refs")
        os.makedirs(refs)
        commit = "0123456789abcdef0123456789abcdef01234567"
        with open(os.path.join(refs, "main"), "w") as f:
            f.write(commit + "\n")
        old = os.environ.get("HF_HUB_CACHE")
        os.environ["HF_HUB_CACHE"] = self.dir
        try:
            self.assertEqual(kspec.model_revision("org/m"), "hf:" + commit)
            self.assertEqual(kspec.model_revision("org/other"), "")
            self.assertEqual(kspec.model_revision("../org/m"), "")
            with open(os.path.join(refs, "main"), "w") as f:
                f.write("not a commit")
            self.assertEqual(kspec.model_revision("org/m"), "")
        finally:
            if old is None:
                del os.environ["HF_HUB_CACHE"]
            else:
                os.environ["HF_HUB_CACHE"] = old

    def test_revision_changes_the_space(self) -> None:
        t = tenant()
        names = {}
        for rev in ("a", "b", None):
            extra = vu.kvpool_extra(kvpool_tenant=t)
            if rev is not None:
                extra["kvpool_model_revision"] = rev
            sched = vu.make_scheduler(extra)
            spec = sched.connector.connector_scheduler.manager.spec
            names[rev] = spec.space_name
            self.assertEqual(spec.fingerprint["revision"],
                             rev if rev is not None else
                             kspec.model_revision(vu.model_dir()))
            vu.shutdown_scheduler(sched)
        self.assertEqual(len(set(names.values())), 3, names)

    def test_bad_revision(self) -> None:
        for bad, err in (("", ValueError), ("r" * 257, ValueError), (7, TypeError)):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(err, "kvpool_model_revision"):
                    kspec.KvpoolSettings.from_extra_config(
                        {"kvpool_quota_bytes": 1 << 20, "kvpool_model_revision": bad})


if __name__ == "__main__":
    unittest.main()
