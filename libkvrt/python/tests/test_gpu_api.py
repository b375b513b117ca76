# SPDX-License-Identifier: MIT
"""kvrt.gpu on any host: probe, opening (ENODEV where no GPU can be used),
and the argument checks that come before any library call.  The GPU's own
results are tested by gpu_test_torch.py on a GPU machine."""
import errno
import threading
import unittest

import numpy as np

import kvrt
from kvrt import gpu as kgpu

from .util import PoolCase

LM = kvrt.LayoutKind.LAYER_MAJOR
BM = kvrt.LayoutKind.BLOCK_MAJOR
FAKE_DEV = 0x7f0000000000   # never dereferenced: every check below fires first


class _NoHandle:
    ptr = None
    close_requested = False

    def request_close(self):
        pass


def unopened_gpu(pool):
    """A Gpu whose C handle is NULL: a call that got past the Python checks
    would raise "the Gpu is closed", which the tests below tell apart."""
    g = object.__new__(kgpu.Gpu)
    g.device, g._pool, g._lock, g._plans, g._h = 0, pool, threading.Lock(), {}, _NoHandle()
    return g


class TestProbeAndOpen(PoolCase):
    def test_probe_and_open_agree(self):
        ok, why = kgpu.probe()
        self.assertIsInstance(ok, bool)
        if ok:
            self.assertEqual(why, "")
            with kgpu.Gpu(self.pool) as g:
                self.assertEqual(g.info().device, 0)
            return
        self.assertTrue(why, "probe() must say why no GPU can be used")
        with self.assertRaises(kvrt.NoDeviceError) as cm:
            kgpu.Gpu(self.pool)
        e = cm.exception
        self.assertEqual((e.errno, e.function), (errno.ENODEV, "kvrt_gpu_open"))
        self.assertEqual(e.library_message, why)
        self.assertIn(why, str(e))

    def test_open_checks(self):
        with self.assertRaisesRegex(TypeError, "kvrt.Pool"):
            kgpu.Gpu("embedded")
        with self.assertRaisesRegex(ValueError, "ordinal >= 0"):
            kgpu.Gpu(self.pool, -1)
        with self.assertRaisesRegex(TypeError, "pass an int"):
            kgpu.Gpu(self.pool, "0")

    def test_streams(self):
        self.assertIsNone(kgpu.stream_handle(None))
        self.assertEqual(kgpu.stream_handle(0x1234), 0x1234)

        class TorchLikeStream:
            cuda_stream = 0x5678
        self.assertEqual(kgpu.stream_handle(TorchLikeStream()), 0x5678)
        with self.assertRaisesRegex(TypeError, "torch.cuda.Stream"):
            kgpu.stream_handle("default")
        with self.assertRaisesRegex(ValueError, "CUstream"):
            kgpu.stream_handle(-1)


class TestChecksBeforeTheLibrary(PoolCase):
    def setUp(self):
        super().setUp()
        self.g = unopened_gpu(self.pool)
        self.lay = kvrt.Layout.preset(LM, 2, 2, 64, 16, 4, "f16")
        self.host = np.zeros(self.lay.extent() // 2, np.float16)
        self.dev_arr = kvrt.BlockArray(self.lay, FAKE_DEV, owner=self, device="cuda")
        self.dev_cache = kvrt.KvCache(self.lay, FAKE_DEV, owner=self, device="cuda")
        self.host_cache = kvrt.KvCache(self.lay, self.host)

    def test_the_probe_object_is_really_unopened(self):
        with self.assertRaisesRegex(ValueError, "the Gpu is closed"):
            self.g.info()

    def test_copy(self):
        h = kvrt.BlockArray(self.lay, self.host)
        with self.assertRaisesRegex(ValueError, "both host memory: use Pool.copy_blocks"):
            self.g.copy_blocks(h, h, [(0, 1)])
        with self.assertRaisesRegex(ValueError, "'auto', 'batch'"):
            self.g.copy_blocks(self.dev_arr, h, [(0, 1)], method="fast")
        with self.assertRaisesRegex(TypeError, "torch.cuda.Stream"):
            self.g.copy_blocks(self.dev_arr, h, [(0, 1)], stream=1.5)
        with self.assertRaisesRegex(ValueError, "< dst's 4 blocks"):
            self.g.copy_blocks(self.dev_arr, h, [(0, 4)])
        with self.assertRaisesRegex(ValueError, "the Gpu is closed"):
            self.g.copy_blocks(self.dev_arr, h, [(0, 1)])   # valid: reaches the call

    def test_append(self):
        k = np.zeros((2, 2, 64), np.float32)
        with self.assertRaisesRegex(ValueError, "cache on cpu: the GPU call needs"):
            self.g.append_kv(self.host_cache, k, k, [0, 1])
        with self.assertRaisesRegex(ValueError, "q/k: on cpu; pass a CUDA tensor"):
            self.g.append_kv(self.dev_cache, k, k, [0, 1])
        with self.assertRaisesRegex(TypeError, "kvrt.KvCache"):
            self.g.append_kv(self.lay, k, k, [0, 1])

    def test_attention(self):
        q = np.zeros((1, 4, 64), np.float32)
        t = kvrt.BlockTable([0, 1], [0], [1])
        with self.assertRaisesRegex(ValueError, "cache on cpu: the GPU call needs"):
            self.g.attn_decode(q, self.host_cache, t)
        with self.assertRaisesRegex(ValueError, "q/k: on cpu"):
            self.g.attn_decode(q, self.dev_cache, t)
        with self.assertRaisesRegex(ValueError, "q/k: on cpu"):
            self.g.attn_prefill(q, [0, 1], self.dev_cache, t)

    def test_register(self):
        with self.assertRaisesRegex(TypeError, "kvrt.Space"):
            self.g.register_space(self.pool)
        with self.assertRaisesRegex(ValueError, "page-aligned"):
            self.g.register_host(np.zeros(100, np.uint8))
        with self.assertRaisesRegex(TypeError, "nbytes"):
            self.g.register_host(4096)

    def test_cpu_calls_refuse_device_memory(self):
        q = np.zeros((1, 4, 64), np.float32)
        with self.assertRaisesRegex(ValueError, "use kvrt.gpu"):
            kvrt.attn_decode(q, self.dev_cache, kvrt.BlockTable([0, 1], [0], [1]))
        with self.assertRaisesRegex(ValueError, "use kvrt.gpu"):
            kvrt.append_kv(self.dev_cache, q[:, :2], q[:, :2], [0])


if __name__ == "__main__":
    unittest.main()
