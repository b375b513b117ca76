# SPDX-License-Identifier: MIT
"""kvrt.sglang.KvpoolStorage with an MLA model under SGLang's HiCacheController, on the CPU.

SGLang's pieces: the MLA device pool (MLATokenToKVPool on device="cpu"),
its paged allocator, MLATokenToKVPoolHost built from the device pool's
buffer info, and HiCacheController, which decides is_mla_model from the
device pool and the TP rank from SGLang's parallel state.  Two TP ranks of
one engine are two controllers in this process, the second built under
``get_parallel().override(tp_rank=1, tp_size=2)``; the gloo group stays of
one rank (the prefetch's rank reduction over it is then the identity).
As in test_controller.py, the test writes the host pages where the
GPU-only ``write`` would have put them.
"""
import threading

import torch
import torch.distributed as dist

from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.utils import get_storage_hash_str
from sglang.srt.runtime_context import get_parallel

from kvrt.sglang import KvpoolStorage
import test_controller
from test_controller import PAGE, Case, Engine, host_page_numbers
from test_mla import fill_latent, latent_bytes

LAYERS, LORA, ROPE = 2, 16, 8


def setUpModule():
    test_controller.setUpModule()  # SGLang's parallel state and a gloo group


def tearDownModule():
    test_controller.tearDownModule()


class MLAEngine(Engine):
    """One TP rank of an MLA engine: SGLang's MLA pools and controller."""

    def __init__(self, case, tenant, tp_rank=0, tp_size=2, layout="layer_first", tokens=64):
        self.hybrid = False
        self.device = MLATokenToKVPool(
            size=tokens, page_size=PAGE, dtype=torch.bfloat16, kv_lora_rank=LORA,
            qk_rope_head_dim=ROPE, layer_num=LAYERS, device="cpu",
            enable_memory_saver=False, start_layer=0, end_layer=LAYERS - 1)
        self.allocator = PagedTokenToKVPoolAllocator(tokens, PAGE, torch.bfloat16, "cpu",
                                                     self.device, need_sort=False)
        self.host = MLATokenToKVPoolHost(
            self.device.get_device_pool_infos()[0].buffer_info, host_to_device_ratio=2.0,
            host_size=0, page_size=PAGE, layout=layout, pin_memory=False, device="cpu",
            device_capacity_tokens=tokens, start_layer=0, end_layer=LAYERS - 1,
            target_layer_num=LAYERS)
        extra = {"backend_name": "kvpool", "module_path": "kvrt.sglang",
                 "class_name": "KvpoolStorage", "interface_v1": 1,
                 "kvpool_backend": "embedded", "kvpool_tenant": tenant,
                 "kvpool_quota_bytes": 1 << 20}
        with get_parallel().override(tp_rank=tp_rank, tp_size=tp_size):
            self.cc = HiCacheController(
                self.allocator, self.host, PAGE, dist.group.WORLD, threading.Event(),
                write_policy="write_through", io_backend="direct", storage_backend="dynamic",
                model_name="org/Tiny-MLA", storage_backend_extra_config=extra)
        case.addCleanup(self.cc.detach_storage_backend)
        case.assertIs(type(self.cc.storage_backend), KvpoolStorage)
        case.assertTrue(self.cc.storage_config.is_mla_model)
        case.assertEqual(self.cc.storage_config.tp_rank, tp_rank)


class TestMLAController(Case):
    def test_rank0_backs_up_rank1_loads(self):
        r0 = MLAEngine(self, self.tenant, tp_rank=0)
        r1 = MLAEngine(self, self.tenant, tp_rank=1, layout="page_first")
        st0, st1 = r0.cc.storage_backend, r1.cc.storage_backend
        self.assertEqual(st0.space_name, st1.space_name)
        self.assertFalse(r0.cc.backup_skip)
        self.assertTrue(r1.cc.backup_skip)
        toks = self.tokens(3, 21)
        # rank 1's backup: SGLang skips it, and the backend would store nothing
        src1 = r1.host_pages(3)
        for i, p in enumerate(host_page_numbers(src1)):
            fill_latent(r1.host, p, 500 + i)
        r1.backup(src1, toks)
        self.assertEqual(st1.space_stats().inserts, 0)
        hashes = get_storage_hash_str(toks, None, page_size=PAGE)
        self.assertEqual(st1.batch_set_v1(hashes, src1), [True] * 3)
        self.assertEqual(st1.space_stats().inserts, 0)
        # rank 0's backup stores; rank 1's prefetch finds and loads it
        src0 = r0.host_pages(3)
        want = [fill_latent(r0.host, p, 50 + i) for i, p in enumerate(host_page_numbers(src0))]
        self.assertEqual(r0.backup(src0, toks), 3 * PAGE)
        self.assertEqual(st0.space_stats().inserts, 3)
        op = r1.query("m1", toks)
        self.assertEqual(op.storage_hit_count, 3 * PAGE)
        self.assertEqual(r1.transfer(op), [3 * PAGE])
        for p, w in zip(host_page_numbers(op.host_indices), want):
            self.assertTrue(torch.equal(latent_bytes(r1.host, p), w), p)
        self.assertEqual(st1.space_stats().my_refs, 0)
