# SPDX-License-Identifier: MIT
"""kvrt.sglang.KvpoolStorage under SGLang's own HiCacheController, on the CPU.

SGLang's pieces, none replaced: the device pool (MHATokenToKVPool on
device="cpu"), its paged allocator, the MHA host pool built from the device
pool's buffer info, HiCacheController attaching the backend through its
dynamic factory, a gloo process group of one rank, and the controller's
own threads (backup, prefetch, prefetch I/O, prefetch sync).  The test
plays the scheduler's part between them (what UnifiedRadixCache does:
hand a hit its host pages, terminate, drain the acks).

What needs a GPU and is not run here: the L1<->L2 copies,
``HiCacheController.write``/``load`` (cache_controller.py:882 and
``start_loading``), end in the host pool's ``transfer_kv_*`` kernels, which
pool_host/mha.py:60-88 imports only on CUDA/HIP/XPU (on the CPU
mha.py:677 raises NameError).  The test writes the host pages itself,
where ``write`` would have put them.  The prefetch stop policies
(best_effort, wait_complete, timeout) are decided in the tree cache
(unified_radix_cache.py:2294-2310), not in a controller: here the
controller mechanisms they use are driven (terminate_prefetch; draining
the acks until completed_req).  The write policies likewise act in the
tree cache; a controller only checks the name.  Both controllers run:
HiCacheController and HybridCacheController (the one the server builds,
with clear_storage_backend and assume_stored).
"""
import itertools
import os
import shutil
import tempfile
import threading
import unittest

import torch
import torch.distributed as dist

from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
from sglang.srt.mem_cache.hicache_storage import PoolName
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_pool_entry
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host import HostPoolGroup
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.utils import get_storage_hash_str
from sglang.srt.runtime_context import get_parallel

from kvrt.sglang import KvpoolStorage
from test_storage import fill, page_bytes

PAGE = 4
LAYERS, HEADS, DIM = 2, 2, 8
POLICIES = ("write_through", "write_through_selective", "write_back")
WAIT = 20  # seconds for a controller thread to answer
_tenants = itertools.count()
_store_dir = None


def setUpModule():
    global _store_dir
    # the controller reads the parallel widths; state them as SGLang's
    # tests do without a published server config
    get_parallel().override_permanently(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
                                        attn_dcp_size=1, attn_dcp_rank=0)
    _store_dir = tempfile.mkdtemp(prefix="kvrt-sgl-gloo.")
    dist.init_process_group("gloo", init_method="file://" + os.path.join(_store_dir, "s"),
                            rank=0, world_size=1)


def tearDownModule():
    dist.destroy_process_group()
    get_parallel().clear_stamp()
    shutil.rmtree(_store_dir, True)


class Engine:
    """One engine's memory and SGLang controller, with kvpool as L3."""

    def __init__(self, case, tenant, write_policy="write_through", layout="layer_first",
                 tokens=64, hybrid=False):
        self.device = MHATokenToKVPool(
            size=tokens, page_size=PAGE, dtype=torch.bfloat16, head_num=HEADS,
            head_dim=DIM, layer_num=LAYERS, device="cpu", enable_memory_saver=False,
            start_layer=0, end_layer=LAYERS - 1, enable_alt_stream=False)
        self.allocator = PagedTokenToKVPoolAllocator(tokens, PAGE, torch.bfloat16, "cpu",
                                                     self.device, need_sort=False)
        self.host = MHATokenToKVPoolHost(
            self.device.get_device_pool_infos()[0].buffer_info, host_to_device_ratio=2.0,
            host_size=0, page_size=PAGE, layout=layout, pin_memory=False, device="cpu",
            device_capacity_tokens=tokens, start_layer=0, end_layer=LAYERS - 1)
        extra = {"backend_name": "kvpool", "module_path": "kvrt.sglang",
                 "class_name": "KvpoolStorage", "interface_v1": 1,
                 "kvpool_backend": "embedded", "kvpool_tenant": tenant,
                 "kvpool_quota_bytes": 1 << 20}
        args = dict(write_policy=write_policy, io_backend="direct", storage_backend="dynamic",
                    model_name="org/Tiny-Model", storage_backend_extra_config=extra)
        self.hybrid = hybrid
        if hybrid:
            # the server's controller: a host pool group of one KV entry, as
            # hybrid_pool_assembler.build_kv_only_stack builds for MHA models
            group = HostPoolGroup([build_pool_entry(
                name=PoolName.KV, host_pool=self.host, device_pool=self.device,
                layer_mapping={i: i for i in range(LAYERS)}, transfer_layer_id_max=LAYERS,
                is_anchor=True)])
            self.cc = HybridCacheController(self.allocator, group, PAGE, dist.group.WORLD,
                                            threading.Event(), transfer_layer_id_max=LAYERS,
                                            **args)
        else:
            self.cc = HiCacheController(self.allocator, self.host, PAGE, dist.group.WORLD,
                                        threading.Event(), **args)
        case.addCleanup(self.cc.detach_storage_backend)
        case.assertIs(type(self.cc.storage_backend), KvpoolStorage)
        # interface_v1: the controller moves pages with batch_get_v1/batch_set_v1
        case.assertEqual(self.cc.page_get_func.__name__, "_page_get_zero_copy")
        case.assertEqual(self.cc.page_set_func.__name__, "_page_set_zero_copy")

    def host_pages(self, n):
        idx = self.host.alloc(n * PAGE)
        assert idx is not None
        return idx

    def filled_pages(self, n, base):
        """n new host pages, page i filled by fill(..., base + i): the pages
        and what each holds."""
        src = self.host_pages(n)
        return src, [fill(self.host, p, base + i) for i, p in enumerate(host_page_numbers(src))]

    def backup(self, host_indices, tokens):
        """SGLang's backup thread: write_storage, then its ack."""
        hashes = get_storage_hash_str(tokens, None, page_size=PAGE)
        op_id = self.cc.write_storage(host_indices, tokens, hash_value=hashes)
        op = self.cc.ack_backup_queue.get(timeout=WAIT)
        assert op.id == op_id
        return op.completed_tokens

    def query(self, rid, tokens, **kw):
        """SGLang's prefetch thread: the hit query (batch_exists), rank-reduced."""
        op = self.cc.prefetch(CacheRequestHandle(rid, 0) if self.hybrid else rid, tokens, **kw)
        hit = self.cc.prefetch_hit_queue.get(timeout=WAIT)
        assert hit is op
        return op

    def transfer(self, op, terminate=False):
        """The scheduler's half of a hit: host pages for it, the I/O thread
        loads them (batch_get_v1); the acks until completed_req."""
        op.host_indices = self.cc.alloc_prefetch_host_buffers(op, op.storage_hit_count)
        if terminate:
            self.cc.terminate_prefetch(op)
        self.cc.prefetch_buffer.put(op)
        acks = []
        while not acks or not acks[-1].completed_req:
            acks.append(self.cc.ack_prefetch_queue.get(timeout=WAIT))
        return [a.completed_tokens for a in acks[:-1]]


def host_page_numbers(indices):
    return [int(i) // PAGE for i in indices[::PAGE]]


class Case(unittest.TestCase):
    def setUp(self):
        self.tenant = f"c{next(_tenants)}-{os.getpid()}"

    def tokens(self, n, seed):
        return list(range(seed * 1000, seed * 1000 + n * PAGE))

    def assertPagesHold(self, eng, host_indices, want):
        """The pages of eng's host_indices hold want's contents, in order."""
        for p, w in zip(host_page_numbers(host_indices), want):
            self.assertTrue(torch.equal(page_bytes(eng.host, p), w), p)


class TestBackupThenPrefetch(Case):
    def test_each_write_policy(self):
        # a page the backup thread stored, found by another engine's
        # prefetch thread and loaded by its I/O thread, byte for byte
        for seed, policy in enumerate(POLICIES, start=1):
            with self.subTest(write_policy=policy):
                writer = Engine(self, self.tenant, policy, "layer_first")
                reader = Engine(self, self.tenant, policy, "page_first")
                self.assertEqual(writer.cc.write_policy, policy)
                toks = self.tokens(3, seed)
                src, want = writer.filled_pages(3, 10 * seed)
                self.assertEqual(writer.backup(src, toks), 3 * PAGE)
                op = reader.query(f"r{seed}", toks)
                self.assertEqual(op.storage_hit_count, 3 * PAGE)
                self.assertEqual(op.hash_value, get_storage_hash_str(toks, None, PAGE))
                self.assertEqual(reader.transfer(op), [3 * PAGE])
                self.assertPagesHold(reader, op.host_indices, want)
                self.assertEqual(reader.cc.storage_backend.space_stats().my_refs, 0)

    def test_a_second_backup_stores_nothing_new(self):
        eng = Engine(self, self.tenant)
        toks = self.tokens(2, 7)
        src, _ = eng.filled_pages(2, 70)
        self.assertEqual(eng.backup(src, toks), 2 * PAGE)
        inserts = eng.cc.storage_backend.space_stats().inserts
        self.assertEqual(eng.backup(src, toks), 2 * PAGE)
        self.assertEqual(eng.cc.storage_backend.space_stats().inserts, inserts)


class TestPrefetch(Case):
    def test_a_stored_prefix_of_a_longer_request(self):
        eng = Engine(self, self.tenant)
        toks = self.tokens(4, 8)
        src, want = eng.filled_pages(2, 80)
        self.assertEqual(eng.backup(src, toks[:2 * PAGE]), 2 * PAGE)
        op = eng.query("prefix", toks)
        self.assertEqual(op.storage_hit_count, 2 * PAGE)
        self.assertEqual(len(op.hash_value), 2)
        self.assertEqual(eng.transfer(op), [2 * PAGE])
        self.assertPagesHold(eng, op.host_indices, want)

    def test_a_miss(self):
        eng = Engine(self, self.tenant)
        op = eng.query("miss", self.tokens(3, 9))
        self.assertEqual((op.storage_hit_count, op.hash_value), (0, []))

    def test_terminated_before_the_io_loads_nothing(self):
        # best_effort and timeout end a prefetch with terminate_prefetch
        eng = Engine(self, self.tenant)
        toks = self.tokens(2, 11)
        src, _ = eng.filled_pages(2, 110)
        eng.backup(src, toks)
        op = eng.query("cut", toks)
        self.assertEqual(op.storage_hit_count, 2 * PAGE)
        eng.cc.storage_backend.get_stats()  # drop the backup's figures
        self.assertEqual(eng.transfer(op, terminate=True), [0])
        self.assertEqual(eng.cc.storage_backend.get_stats().prefetch_pgs, [])

    def test_clear_then_no_hit(self):
        # the backend's clear() (SGLang's clear endpoint ends there)
        eng = Engine(self, self.tenant)
        toks = self.tokens(2, 12)
        src, _ = eng.filled_pages(2, 120)
        eng.backup(src, toks)
        self.assertEqual(eng.query("before", toks).storage_hit_count, 2 * PAGE)
        self.assertIs(eng.cc.storage_backend.clear(), True)
        self.assertEqual(eng.query("after", toks).storage_hit_count, 0)


class TestHybridController(Case):
    """HybridCacheController: the controller SGLang's server builds for the
    tree cache (hybrid_pool_assembler.py:547), with clear and assume_stored."""

    def stored(self, eng, n, seed):
        src, want = eng.filled_pages(n, seed * 10)
        toks = self.tokens(n, seed)
        self.assertEqual(eng.backup(src, toks), n * PAGE)
        return toks, want

    def test_each_write_policy(self):
        for seed, policy in enumerate(POLICIES, start=21):
            with self.subTest(write_policy=policy):
                writer = Engine(self, self.tenant, policy, hybrid=True)
                reader = Engine(self, self.tenant, policy, "page_head", hybrid=True)
                toks, want = self.stored(writer, 3, seed)
                op = reader.query(f"h{seed}", toks)
                self.assertEqual(op.storage_hit_count, 3 * PAGE)
                self.assertEqual(reader.transfer(op), [3 * PAGE])
                self.assertPagesHold(reader, op.host_indices, want)

    def test_clear_storage_backend(self):
        # SGLang's clear endpoint: clear_storage_backend, then no hit
        a = Engine(self, self.tenant, hybrid=True)
        b = Engine(self, self.tenant, hybrid=True)
        toks, want = self.stored(a, 3, 31)
        self.assertEqual(a.query("before", toks).storage_hit_count, 3 * PAGE)
        self.assertIs(a.cc.clear_storage_backend(), True)
        self.assertEqual(a.query("after", toks).storage_hit_count, 0)
        # the other engine of the space keeps its hits and the bytes
        op = b.query("other", toks)
        self.assertEqual(op.storage_hit_count, 3 * PAGE)
        self.assertEqual(b.transfer(op), [3 * PAGE])
        self.assertPagesHold(b, op.host_indices, want)

    def test_assume_stored_loads_what_is_there(self):
        # assume_stored skips batch_exists; batch_get_v1 then reports the
        # stored prefix (2 of 4 pages) and the prefetch completes that much
        eng = Engine(self, self.tenant, hybrid=True)
        toks, want = self.stored(eng, 2, 32)
        longer = toks + self.tokens(2, 33)
        op = eng.query("assumed", longer, assume_stored=True)
        self.assertEqual(op.storage_hit_count, 4 * PAGE)      # not verified
        self.assertEqual(eng.transfer(op), [2 * PAGE])
        self.assertPagesHold(eng, op.host_indices, want)


class TestController(Case):
    def test_sglang_refuses_an_unknown_write_policy(self):
        with self.assertRaisesRegex(ValueError, "write policy"):
            Engine(self, self.tenant, "write_sometimes")

    def test_detach_closes_the_backend(self):
        eng = Engine(self, self.tenant)
        backend = eng.cc.storage_backend
        eng.cc.detach_storage_backend()
        self.assertIsNone(eng.cc.storage_backend)
        with self.assertRaisesRegex(ValueError, "closed"):
            backend.batch_exists(["00" * 32])


if __name__ == "__main__":
    unittest.main()
