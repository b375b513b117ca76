# SPDX-License-Identifier: MIT
"""kvrt.gpu on a real GPU, with torch CUDA tensors.

tests/check-torch.sh runs this module when kvrt.gpu.probe() is ok, or
when KVRT_REQUIRE_GPU=1, and then a host without a usable GPU FAILS here
(it is never skipped silently).  Run by hand on a GPU machine:

    KVRT_REQUIRE_GPU=1 bash libkvrt/python/tests/check-torch.sh VENV/bin/python

Copies must be byte-for-byte; attention is compared with
torch.nn.functional.scaled_dot_product_attention in float64, within the
GPU tolerance libkvrt/tests/test_gpu.c derives and documents
(kvrt.h gives none): per row, max |out - ref| / max|v attended| <=
u(o) + u_p + expm1(2 ds) + 8 sqrt(keys) 2^-24 + 2^-18, with u(o) the
output type's unit roundoff, u_p 2^-11 (f16 K/V) or 2^-8 (bf16), and
ds = (head_dim + 8) 2^-24 S + 2^-21, S = sm_scale * max over keys of
sum_d |q_d k_d|.  q is given in the K/V's type, so no input rounding
enters the comparison.
"""
import math
import os
import unittest

import numpy as np
import torch

import kvrt
from kvrt import gpu as kgpu

from .util import PoolCase

LM = kvrt.LayoutKind.LAYER_MAJOR
BM = kvrt.LayoutKind.BLOCK_MAJOR
U = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def setUpModule():
    ok, why = kgpu.probe()
    required = os.environ.get("KVRT_REQUIRE_GPU") == "1"
    if not ok or not torch.cuda.is_available():
        msg = (f"no usable GPU: kvrt.gpu.probe() says {why!r}, "
               f"torch.cuda.is_available() is {torch.cuda.is_available()}")
        if required:
            raise AssertionError("KVRT_REQUIRE_GPU=1: " + msg)
        raise unittest.SkipTest(msg)


class GpuCase(PoolCase):
    def setUp(self):
        super().setUp()
        self.gpu = kgpu.Gpu(self.pool, 0)
        self.addCleanup(self.gpu.close)
        self.dev = torch.device("cuda:0")


class TestGpuCopies(GpuCase):
    L, H, D, T, NB = 2, 4, 128, 16, 10

    def test_byte_for_byte_both_ways(self):
        info = self.gpu.info()
        methods = ["auto", "kernel", "memcpy"] + (["batch"] if info.batch_memcpy else [])
        L, H, D, T, NB = self.L, self.H, self.D, self.T, self.NB
        for kd, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
            for method in methods:
                g = torch.Generator(device=self.dev).manual_seed(4)
                cache = torch.randn((L, 2, NB, T, H, D), generator=g, device=self.dev).to(dt)
                lay = kvrt.Layout.preset(LM, L, H, D, T, NB, kd)
                sp = self.space(blocks=16, block_bytes=1 << 20)
                ids = sp.alloc(4)
                self.gpu.register_space(sp)
                pool = sp.block_array(kvrt.Layout.preset(BM, L, H, D, T, 1, kd))
                s = torch.cuda.Stream()
                pairs = [(7, int(ids[0])), (0, int(ids[3])), (9, int(ids[1]))]
                self.gpu.copy_blocks(pool, kvrt.BlockArray(lay, cache), pairs, method=method,
                                     stream=s)
                s.synchronize()
                host = cache.cpu()
                with self.subTest(kv=kd, method=method, dir="to pool"):
                    for src, dst in pairs:
                        raw = sp.block_view(dst)
                        want = host[:, :, src].contiguous().view(torch.uint8).numpy().ravel()
                        np.testing.assert_array_equal(raw[:want.size], want)
                back = torch.zeros_like(cache)
                self.gpu.copy_blocks(kvrt.BlockArray(lay, back), pool,
                                     [(d, s_) for s_, d in pairs], method=method, stream=s)
                s.synchronize()
                with self.subTest(kv=kd, method=method, dir="from pool"):
                    for src, _dst in pairs:
                        self.assertTrue(torch.equal(back[:, :, src], cache[:, :, src]))
                    mask = torch.ones(NB, dtype=torch.bool)
                    mask[[p[0] for p in pairs]] = False
                    self.assertFalse(back[:, :, mask].any())
                self.gpu.unregister_space(sp)

    def test_device_checks(self):
        lay = kvrt.Layout.preset(LM, 1, 1, 64, 16, 2, "f16")
        cpu = torch.zeros((1, 2, 2, 16, 1, 64), dtype=torch.float16)
        dev = cpu.to(self.dev)
        k = torch.zeros((1, 1, 64), device=self.dev)
        with self.assertRaisesRegex(ValueError, "on cpu; pass a CUDA tensor"):
            self.gpu.append_kv(kvrt.KvCache(lay, dev), k, k.cpu(), torch.zeros(1, dtype=torch.int64,
                                                                          device=self.dev))
        with self.assertRaisesRegex(TypeError, "pass torch.int64"):
            self.gpu.append_kv(kvrt.KvCache(lay, dev), k, k,
                               torch.zeros(1, dtype=torch.int32, device=self.dev))
        if torch.cuda.device_count() > 1:
            other = cpu.to("cuda:1")
            with self.assertRaisesRegex(ValueError, "this Gpu is cuda:0"):
                self.gpu.copy_blocks(kvrt.BlockArray(lay, dev), kvrt.BlockArray(lay, other),
                                     [(0, 0)])


class TestGpuAppend(GpuCase):
    def test_matches_the_cpu_bitwise(self):
        L, H, D, T, NB = 2, 2, 128, 16, 6
        lay = kvrt.Layout.preset(LM, L, H, D, T, NB, "f16")
        dcache = torch.zeros((L, 2, NB, T, H, D), dtype=torch.float16, device=self.dev)
        hcache = np.zeros((L, 2, NB, T, H, D), np.float16)
        g = torch.Generator(device=self.dev).manual_seed(5)
        k = torch.randn((20, H, D), generator=g, device=self.dev)
        v = torch.randn((20, H, D), generator=g, device=self.dev)
        slots = torch.arange(20, dtype=torch.int64, device=self.dev) + 3 * T
        slots[4] = -1
        self.gpu.append_kv(kvrt.KvCache(lay, dcache, layer=1), k, v, slots)
        torch.cuda.synchronize()
        kvrt.append_kv(kvrt.KvCache(lay, hcache, layer=1), k.cpu().numpy(), v.cpu().numpy(),
                       slots.cpu().numpy())
        np.testing.assert_array_equal(dcache.cpu().numpy().view(np.uint16),
                                      hcache.view(np.uint16))
        self.assertTrue(hcache[1, :, 3].any())


def sdpa_reference(q, K, V, lens, indptr, indices, q_indptr, bt, sm_scale):
    """float64 SDPA per sequence over the gathered blocks; out and vscale,
    and the bound's S per row."""
    rows, hq, d = q.shape
    hk = K.shape[2]
    out = torch.zeros((rows, hq, d), dtype=torch.float64)
    vs = torch.zeros((rows, hq), dtype=torch.float64)
    S = torch.zeros((rows, hq), dtype=torch.float64)
    for s, n in enumerate(lens):
        blocks = indices[indptr[s]:indptr[s + 1]]
        pos = torch.arange(n)
        ks = K[blocks[pos // bt], pos % bt].double()       # [n][hk][d]
        vv = V[blocks[pos // bt], pos % bt].double()
        r0, r1 = int(q_indptr[s]), int(q_indptr[s + 1])
        qs = q[r0:r1].double()                               # [m][hq][d]
        m = r1 - r0
        qpos = torch.arange(n - m, n)
        mask = pos[None, :] <= qpos[:, None]                 # [m][n]
        kk = ks.repeat_interleave(hq // hk, dim=1).transpose(0, 1)   # [hq][n][d]
        vk = vv.repeat_interleave(hq // hk, dim=1).transpose(0, 1)
        o = torch.nn.functional.scaled_dot_product_attention(
            qs.transpose(0, 1), kk, vk, attn_mask=mask, scale=sm_scale)
        out[r0:r1] = o.transpose(0, 1)
        for j in range(m):
            keep = mask[j]
            vs[r0 + j] = vk[:, keep].abs().amax(dim=(1, 2))
            S[r0 + j] = sm_scale * (qs[j][:, None, :].abs() * kk[:, keep].abs()).sum(-1).amax(-1)
    return out, vs, S


class TestGpuAttention(GpuCase):
    H, HQ, D, T, NB = 2, 8, 128, 16, 40

    def run_case(self, dt, prefill):
        H, HQ, D, T, NB = self.H, self.HQ, self.D, self.T, self.NB
        kd = {torch.float16: "f16", torch.bfloat16: "bf16"}[dt]
        g = torch.Generator().manual_seed(6)
        cache = torch.randn((1, 2, NB, T, H, D), generator=g).to(dt)
        lens = [1, 17, 100, 300]
        need = [-(-n // T) for n in lens]
        indptr = torch.tensor(np.concatenate([[0], np.cumsum(need)]), dtype=torch.int32)
        indices = torch.randperm(NB, generator=g)[:int(indptr[-1])].to(torch.int32)
        nq = [min(n, 5) for n in lens] if prefill else [1] * len(lens)
        qi = torch.tensor(np.concatenate([[0], np.cumsum(nq)]), dtype=torch.int32)
        q = torch.randn((int(qi[-1]), HQ, D), generator=g).to(dt)
        scale = 1 / math.sqrt(D)
        lay = kvrt.Layout.preset(LM, 1, H, D, T, NB, kd)
        dcache = cache.to(self.dev)
        table = kvrt.BlockTable(indptr.to(self.dev), indices.to(self.dev),
                                torch.tensor(lens, dtype=torch.int32, device=self.dev))
        kv = kvrt.KvCache(lay, dcache)
        if prefill:
            out = self.gpu.attn_prefill(q.to(self.dev), qi.to(self.dev), kv, table,
                                        q_indptr_host=qi, seq_lens_host=lens)
        else:
            out = self.gpu.attn_decode(q.to(self.dev), kv, table, seq_lens_host=lens)
        torch.cuda.synchronize()
        self.assertEqual((out.dtype, out.device.type), (dt, "cuda"))
        ref, vs, S = sdpa_reference(q, cache[0, 0], cache[0, 1], lens, indptr, indices, qi, T,
                                    scale)
        keys = torch.tensor([lens[s] for s in range(len(lens)) for _ in range(nq[s])],
                            dtype=torch.float64)[:, None]
        ds = (D + 8) * 2.0 ** -24 * S + 2.0 ** -21
        tol = U[dt] + U[dt] + torch.expm1(2 * ds) + 8 * keys.sqrt() * 2.0 ** -24 + 2.0 ** -18
        err = (out.cpu().double() - ref).abs().amax(-1) / vs
        worst = float((err / tol).max())
        self.assertLessEqual(worst, 1.0, f"{kd} prefill={prefill}: {worst:.3g} tolerances")
        # the comparison can fail: a wrong scale is far outside it
        bad = self.gpu.attn_decode(q[:len(lens)].to(self.dev), kv, table, sm_scale=scale * 1.5,
                                   seq_lens_host=lens) if not prefill else None
        if bad is not None:
            torch.cuda.synchronize()
            e2 = (bad.cpu().double() - ref).abs().amax(-1) / vs
            self.assertGreater(float((e2 / tol).max()), 3.0)

    def test_decode(self):
        for dt in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=str(dt)):
                self.run_case(dt, False)

    def test_prefill(self):
        for dt in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=str(dt)):
                self.run_case(dt, True)


if __name__ == "__main__":
    unittest.main()
