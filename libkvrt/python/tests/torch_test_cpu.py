# SPDX-License-Identifier: MIT
"""The kvrt package with torch CPU tensors: block arrays and copies, append,
attention, and the checks that turn away what the CPU calls cannot take.

Run by tests/check-torch.sh in an engine venv (torch is not in Debian);
it fails, not skips, without torch."""
import unittest

import numpy as np
import torch

import kvrt

from . import refattn
from .refattn import TOL, row_error
from .test_gpu_api import unopened_gpu
from .util import PoolCase

LM = kvrt.LayoutKind.LAYER_MAJOR
BM = kvrt.LayoutKind.BLOCK_MAJOR
L, H, HQ, D, T, NB = 2, 2, 4, 64, 16, 8


def t2np(x):
    """A CPU tensor as numpy, bf16 as its uint16 bits."""
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


class TestTorchCopies(PoolCase):
    def test_tensor_to_pool_and_back(self):
        for dt, kd in ((torch.float16, "f16"), (torch.bfloat16, "bf16"), (torch.float32, "f32")):
            g = torch.Generator().manual_seed(1)
            cache = torch.randn((L, 2, NB, T, H, D), generator=g).to(dt)
            lay = kvrt.Layout.preset(LM, L, H, D, T, NB, kd)
            src = kvrt.BlockArray(lay, cache)
            self.assertEqual(src.address, cache.data_ptr())
            sp = self.space()
            ids = sp.alloc(2)
            pool = sp.block_array(kvrt.Layout.preset(BM, L, H, D, T, 1, kd))
            self.pool.copy_blocks(pool, src, [(5, int(ids[0])), (2, int(ids[1]))])
            view = sp.block_view(int(ids[0]), kvrt.Layout.preset(BM, L, H, D, T, 1, kd))
            with self.subTest(dtype=kd):
                np.testing.assert_array_equal(view, t2np(cache[:, :, 5].contiguous()))
                back = torch.zeros_like(cache)
                self.pool.copy_blocks(kvrt.BlockArray(lay, back), pool,
                                      torch.tensor([[int(ids[1]), 7]]).numpy())
                self.assertTrue(torch.equal(back[:, :, 7], cache[:, :, 2]))
                self.assertFalse(back[:, :, :7].any())

    def test_tensor_checks(self):
        lay = kvrt.Layout.preset(LM, L, H, D, T, NB, "f16")
        cache = torch.zeros((L, 2, NB, T, H, D), dtype=torch.float16)
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            kvrt.BlockArray(lay, cache.transpose(0, 1))
        with self.assertRaisesRegex(ValueError, "addresses .* bytes"):
            kvrt.BlockArray(lay, cache[:1])
        with self.assertRaisesRegex(ValueError, "elements of 4 bytes"):
            kvrt.BlockArray(lay, cache.float())
        kvrt.BlockArray(lay, cache.view(torch.uint8))     # raw bytes are fine
        meta = torch.empty((L, 2, NB, T, H, D), dtype=torch.float16, device="meta")
        with self.assertRaisesRegex(ValueError, "CPU or CUDA tensor"):
            kvrt.BlockArray(lay, meta)


class TestTorchAttention(unittest.TestCase):
    def setUp(self):
        g = torch.Generator().manual_seed(2)
        self.g = g
        self.lens = [1, 16, 37, 50]
        self.indptr = torch.tensor([0, 1, 2, 5, 9], dtype=torch.int32)
        self.indices = torch.randperm(NB + 4, generator=g)[:9].to(torch.int32)
        self.nb = NB + 4

    def case(self, kd, dt):
        cache = torch.randn((L, 2, self.nb, T, H, D), generator=self.g).to(dt)
        lay = kvrt.Layout.preset(LM, L, H, D, T, self.nb, kd)
        arr = t2np(cache)
        K = refattn.kv_dense(arr, None, lay, 1, 0, kd)
        V = refattn.kv_dense(arr, None, lay, 1, 1, kd)
        return kvrt.KvCache(lay, cache, layer=1), K, V

    def test_decode_and_prefill(self):
        for kd, kdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
            for qd, qdt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
                cache, K, V = self.case(kd, kdt)
                table = kvrt.BlockTable(self.indptr, self.indices, torch.tensor(self.lens))
                q = torch.randn((4, HQ, D), generator=self.g).to(qdt)
                out = kvrt.attn_decode(q, cache, table)
                self.assertIsInstance(out, torch.Tensor)
                self.assertEqual(out.dtype, qdt)
                ref, vs = refattn.attention(refattn.to_f64(t2np(q), qd), K, V,
                                            self.indptr.numpy(), self.indices.numpy(),
                                            self.lens)
                with self.subTest(kv=kd, q=qd):
                    self.assertLessEqual(row_error(refattn.to_f64(t2np(out), qd), ref, vs),
                                         TOL[qd])
                # prefill: the last 3 tokens of each sequence (1 of the first)
                nq = [min(3, n) for n in self.lens]
                qi = torch.tensor(np.concatenate([[0], np.cumsum(nq)]), dtype=torch.int32)
                qp = torch.randn((int(qi[-1]), HQ, D), generator=self.g).to(qdt)
                with kvrt.Workers(2) as w:
                    outp = w.prefill(qp, qi, cache, table, out_dtype="f32")
                self.assertEqual(outp.dtype, torch.float32)
                ref, vs = refattn.attention(refattn.to_f64(t2np(qp), qd), K, V,
                                            self.indptr.numpy(), self.indices.numpy(),
                                            self.lens, qi.numpy())
                with self.subTest(kv=kd, q=qd, prefill=True):
                    self.assertLessEqual(row_error(t2np(outp).astype(np.float64), ref, vs),
                                         TOL["f32"])

    def test_checks(self):
        cache, _K, _V = self.case("f16", torch.float16)
        table = kvrt.BlockTable(self.indptr, self.indices, self.lens)
        q = torch.randn((4, HQ, D), generator=self.g)
        with self.assertRaisesRegex(TypeError, "torch.float32, float16 or bfloat16"):
            kvrt.attn_decode(q.double(), cache, table)
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            kvrt.attn_decode(q.transpose(0, 1).contiguous().transpose(0, 1), cache, table)
        with self.assertRaisesRegex(TypeError, "same kind of array as q"):
            kvrt.attn_decode(q, cache, table, out=np.zeros((4, HQ, D), np.float32))
        with self.assertRaisesRegex(TypeError, "leave dtype out"):
            kvrt.attn_decode(q, cache, table, q_dtype="f16")
        with self.assertRaisesRegex(TypeError, "integer tensor"):
            kvrt.BlockTable(self.indptr.float(), self.indices, self.lens)


class TestTorchAppend(PoolCase):
    def test_append_bf16_source(self):
        sp = self.space()
        ids = sp.alloc(2)
        lay = kvrt.Layout.preset(BM, L, H, D, T, 1, "f32")
        cache = kvrt.KvCache.of(sp.block_array(lay), layer=0)
        g = torch.Generator().manual_seed(3)
        k = torch.randn((3, H, D), generator=g).to(torch.bfloat16)
        v = torch.randn((3, H, D), generator=g).to(torch.bfloat16)
        b = int(ids[1])
        kvrt.append_kv(cache, k, v, torch.tensor([b * T, b * T + 1, b * T + 9]))
        view = sp.block_view(b, lay)
        # bf16 -> f32 is exact
        np.testing.assert_array_equal(view[0, 0, [0, 1, 9]], k.float().numpy())
        np.testing.assert_array_equal(view[0, 1, [0, 1, 9]], v.float().numpy())

    def test_gpu_calls_refuse_cpu_tensors(self):
        g = unopened_gpu(self.pool)
        lay = kvrt.Layout.preset(LM, L, H, D, T, NB, "f16")
        dev_cache = kvrt.KvCache(lay, 0x7f0000000000, owner=self, device="cuda")
        k = torch.zeros((2, H, D))
        with self.assertRaisesRegex(ValueError, "q/k: on cpu; pass a CUDA tensor"):
            g.append_kv(dev_cache, k, k, torch.tensor([0, 1]))
        with self.assertRaisesRegex(ValueError, "cache on cpu"):
            g.attn_decode(k, kvrt.KvCache(lay, torch.zeros((L, 2, NB, T, H, D),
                                                           dtype=torch.float16)),
                          kvrt.BlockTable([0, 1], [0], [1]))


class TestSdpaReference(unittest.TestCase):
    """gpu_test_torch's SDPA reference agrees with refattn's on the CPU, so
    a GPU failure there is the GPU's, not the reference's."""

    def test_agree(self):
        from .gpu_test_torch import sdpa_reference
        g = torch.Generator().manual_seed(7)
        cache = torch.randn((2, 12, T, H, D), generator=g, dtype=torch.float64)
        lens = [3, 20, 40]
        indptr = torch.tensor([0, 1, 3, 6])
        indices = torch.randperm(12, generator=g)[:6]
        qi = torch.tensor([0, 2, 5, 9])
        q = torch.randn((9, HQ, D), generator=g, dtype=torch.float64)
        out, vs, S = sdpa_reference(q, cache[0], cache[1], lens, indptr, indices, qi, T,
                                    0.125)
        ref, rvs = refattn.attention(q.numpy(), cache[0].numpy(), cache[1].numpy(),
                                     indptr.numpy(), indices.numpy(), lens, qi.numpy(),
                                     sm_scale=0.125)
        np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(vs.numpy(), rvs, rtol=0, atol=0)
        self.assertTrue((S > 0).all())


if __name__ == "__main__":
    unittest.main()
