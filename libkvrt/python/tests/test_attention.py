# SPDX-License-Identifier: MIT
"""Append and CPU attention on numpy arrays, against tests/refattn.py's
float64 attention, within libkvrt's documented tolerances (refattn.TOL)."""
import errno
import itertools
import unittest

import numpy as np

import kvrt

from . import refattn
from .refattn import TOL, row_error
from .util import PoolCase

BM = kvrt.LayoutKind.BLOCK_MAJOR
LM = kvrt.LayoutKind.LAYER_MAJOR
NPT = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "fp8": np.uint8}
KD = {"f32": "f32", "f16": "f16", "bf16": "bf16", "fp8": "fp8_e4m3"}


def make_q(rng, shape, dt):
    x = rng.standard_normal(shape).astype(np.float32)
    if dt == "bf16":
        return refattn.f32_to_bf16(x)
    return x.astype(NPT[dt])


class Case:
    """A paged cache with random contents, a block table over it, and a
    float64 reference attention over the same memory."""

    L, H, HQ, D, T, NB = 2, 2, 4, 64, 16, 12
    LENS = [1, 16, 37, 50]

    def __init__(self, kv="f16", kind=LM, seed=0, lens=None):
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.kv = kv
        self.lens = list(lens or self.LENS)
        self.lay = kvrt.Layout.preset(kind, self.L, self.H, self.D, self.T, self.NB, KD[kv])
        n = self.lay.extent()
        if kv == "fp8":
            b = rng.integers(0, 256, n, dtype=np.uint8)
            b[(b & 0x7F) == 0x7F] = 0x3C          # no NaN codes
            self.data = b
            ns = refattn_scale_count(self.lay)
            self.scales = rng.uniform(0.01, 1.0, ns).astype(np.float32)
        else:
            x = rng.standard_normal(n // self.lay.dtype.size).astype(np.float32)
            self.data = refattn.f32_to_bf16(x) if kv == "bf16" else x.astype(NPT[kv])
            self.scales = None
        self.cache = kvrt.KvCache(self.lay, self.data, self.scales, layer=1)
        # blocks: each sequence gets its own, in a shuffled order
        perm = rng.permutation(self.NB)
        need = [-(-n // self.T) for n in self.lens]
        self.indptr = np.concatenate([[0], np.cumsum(need)]).astype(np.int32)
        self.indices = perm[:self.indptr[-1]].astype(np.int32)
        self.table = kvrt.BlockTable(self.indptr, self.indices, self.lens)

    def dense(self):
        K = refattn.kv_dense(self.data, self.scales, self.lay, 1, 0, self.kv)
        V = refattn.kv_dense(self.data, self.scales, self.lay, 1, 1, self.kv)
        return K, V

    def reference(self, q, qdt, q_indptr=None, **kw):
        K, V = self.dense()
        return refattn.attention(refattn.to_f64(q, qdt), K, V, self.indptr, self.indices,
                                 self.lens, q_indptr, **kw)


def refattn_scale_count(lay):
    return ((lay.num_layers - 1) * lay.scale_layer_stride + lay.scale_kv_stride
            + (lay.num_blocks - 1) * lay.scale_block_stride + lay.num_kv_heads)


def out_f64(out, odt):
    return refattn.to_f64(out, odt)


class TestReference(unittest.TestCase):
    """The comparison itself can fail."""

    def test_perturbed_output_fails(self):
        c = Case("f32", seed=1)
        q = make_q(c.rng, (4, c.HQ, c.D), "f32")
        ref, vs = c.reference(q, "f32")
        self.assertLessEqual(row_error(ref, ref, vs), 0)
        bad = ref.copy()
        bad[2, 1, 5] += 3 * TOL["f32"] * vs[2, 1]
        self.assertGreater(row_error(bad, ref, vs), TOL["f32"])
        bad[2, 1, 5] = np.nan
        self.assertGreater(row_error(bad, ref, vs), TOL["f32"])

    def test_a_wrong_block_fails(self):
        c = Case("f32", seed=2)
        q = make_q(c.rng, (4, c.HQ, c.D), "f32")
        ref, vs = c.reference(q, "f32")
        swapped = c.indices.copy()
        swapped[[1, 2]] = swapped[[2, 1]]    # seq 1's block and seq 2's first
        out = kvrt.attn_decode(q, c.cache, kvrt.BlockTable(c.indptr, swapped, c.lens))
        self.assertGreater(row_error(out_f64(out, "f32"), ref, vs), 100 * TOL["f32"])


class TestDecodePrefill(unittest.TestCase):
    def check_decode(self, kv, qdt, odt, kind=LM, seed=0, **kw):
        c = Case(kv, kind, seed)
        q = make_q(c.rng, (len(c.lens), c.HQ, c.D), qdt)
        rkw = {k: v for k, v in kw.items() if k in ("sm_scale", "window_left")}
        if "logit_softcap" in kw:
            rkw["softcap"] = kw["logit_softcap"]
        ref, vs = c.reference(q, qdt, **rkw)
        out = kvrt.attn_decode(q, c.cache, c.table, q_dtype=qdt if qdt == "bf16" else None,
                               out_dtype=odt, **kw)
        self.assertEqual(out.shape, q.shape)
        self.assertEqual(out.dtype, NPT[odt])
        err = row_error(out_f64(out, odt), ref, vs)
        self.assertLessEqual(err, TOL[odt], f"kv {kv} q {qdt} out {odt} {kw}")
        return c, q, out

    def test_decode_dtypes(self):
        for kv, qdt, odt in itertools.product(("f32", "f16", "bf16", "fp8"),
                                              ("f32", "f16", "bf16"), ("f32", "f16", "bf16")):
            if qdt != odt and kv != "f16" and odt != "f32":
                continue    # keep the matrix small: every pair still appears
            with self.subTest(kv=kv, q=qdt, out=odt):
                self.check_decode(kv, qdt, odt)

    def test_decode_options(self):
        for kw in ({"window_left": 7}, {"logit_softcap": 5.0}, {"sm_scale": 0.3},
                   {"impl": "reference"}, {"num_threads": 1}):
            with self.subTest(**kw):
                self.check_decode("f16", "f32", "f32", kind=BM, seed=3, **kw)

    def test_prefill_in_chunks(self):
        for kv, odt in (("f16", "f32"), ("bf16", "bf16"), ("fp8", "f16")):
            c = Case(kv, BM, seed=4)
            # two chunks: rows for the first half of each sequence, then the rest
            first = [max(1, n // 2) for n in c.lens]
            for part in (0, 1):
                lens = first if part == 0 else c.lens
                nq = first if part == 0 else [n - f for n, f in zip(c.lens, first)]
                qi = np.concatenate([[0], np.cumsum(nq)]).astype(np.int32)
                q = make_q(c.rng, (int(qi[-1]), c.HQ, c.D), "f16")
                tab = kvrt.BlockTable(c.indptr, c.indices, lens)
                K, V = c.dense()
                ref, vs = refattn.attention(q.astype(np.float64), K, V, c.indptr, c.indices,
                                            lens, qi)
                out = kvrt.attn_prefill(q, qi, c.cache, tab, out_dtype=odt)
                with self.subTest(kv=kv, part=part):
                    self.assertLessEqual(row_error(out_f64(out, odt), ref, vs), TOL[odt])

    def test_workers_are_bitwise_the_same(self):
        c = Case("bf16", BM, seed=5)
        q = make_q(c.rng, (len(c.lens), c.HQ, c.D), "f32")
        plain = kvrt.attn_decode(q, c.cache, c.table)
        with kvrt.Workers(3) as w:
            kept = kvrt.attn_decode(q, c.cache, c.table, workers=w)
            kept2 = w.decode(q, c.cache, c.table)
            qi = np.arange(len(c.lens) + 1, dtype=np.int32)
            pre = w.prefill(q, qi, c.cache, c.table)
        np.testing.assert_array_equal(plain, kept)
        np.testing.assert_array_equal(plain, kept2)
        ref, vs = c.reference(q, "f32")
        self.assertLessEqual(row_error(out_f64(pre, "f32"), ref, vs), TOL["f32"])
        self.assertTrue(w.closed)
        with self.assertRaisesRegex(ValueError, "workers are closed"):
            kvrt.attn_decode(q, c.cache, c.table, workers=w)

    def test_out_given(self):
        c = Case("f16", seed=6)
        q = make_q(c.rng, (len(c.lens), c.HQ, c.D), "f16")
        out = np.full(q.shape, np.nan, np.float32)
        r = kvrt.attn_decode(q, c.cache, c.table, out=out)
        self.assertIs(r, out)
        ref, vs = c.reference(q, "f16")
        self.assertLessEqual(row_error(out.astype(np.float64), ref, vs), TOL["f32"])


class TestAttentionErrors(unittest.TestCase):
    def setUp(self):
        self.c = Case("f16", seed=7)
        self.q = make_q(self.c.rng, (len(self.c.lens), self.c.HQ, self.c.D), "f32")

    def test_python_side(self):
        c, q = self.c, self.q
        dec = kvrt.attn_decode
        for args, kw, exc, msg in (
                ((q.astype(np.float64), c.cache, c.table), {}, TypeError, "pass float32"),
                ((q.view(np.uint16)[..., ::2], c.cache, c.table), {}, TypeError, "bf16"),
                ((np.asfortranarray(q), c.cache, c.table), {}, ValueError, "not C-contiguous"),
                ((np.ascontiguousarray(q[:, :, :32]), c.cache, c.table), {}, ValueError, "head_dim"),
                ((np.ascontiguousarray(q[:, :3]), c.cache, c.table), {}, ValueError, "multiple of the cache's 2"),
                ((q[:3], c.cache, c.table), {}, ValueError, "3 rows for 4 sequences"),
                ((q, c.cache, c.table), {"out": np.zeros((4, 4, 32), np.float32)},
                 ValueError, "pass shape"),
                ((q, c.cache, c.table), {"out_dtype": "fp8"}, ValueError, "pass f32, f16"),
                ((q, c.cache, c.table), {"sm_scale": float("inf")}, ValueError, "finite"),
                ((q, c.cache, c.table), {"window_left": -2}, ValueError, "window_left"),
                ((q, c.cache, c.table), {"impl": "slow"}, ValueError, "'fast'"),
                ((q, c.lay, c.table), {}, TypeError, "kvrt.KvCache"),
                ((q, c.cache, (c.indptr, c.indices)), {}, TypeError, "kvrt.BlockTable")):
            with self.subTest(msg=msg):
                with self.assertRaisesRegex(exc, msg):
                    dec(*args, **kw)

    def test_tables(self):
        c = self.c
        with self.assertRaisesRegex(ValueError, "indptr: 4 entries; pass 5"):
            kvrt.BlockTable(c.indptr[:4], c.indices, c.lens)
        with self.assertRaisesRegex(ValueError, "0 first"):
            kvrt.BlockTable(c.indptr + 1, c.indices, c.lens)
        with self.assertRaisesRegex(ValueError, "indices has"):
            kvrt.BlockTable(c.indptr, c.indices[:3], c.lens)
        with self.assertRaisesRegex(TypeError, "integer array"):
            kvrt.BlockTable(c.indptr.astype(np.float32), c.indices, c.lens)
        t = kvrt.BlockTable.from_lists([[3], [5, 6]], [4, 20])
        self.assertEqual(t.num_seqs, 2)

    def test_library_refuses_a_bad_length(self):
        c, q = self.c, self.q
        out = np.full(q.shape, 7, np.float32)
        bad = kvrt.BlockTable(c.indptr, c.indices, [1, 17, 37, 50])   # 17 > 1 block
        with self.assertRaises(kvrt.InvalidArgumentError) as cm:
            kvrt.attn_decode(q, c.cache, bad, out=out)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertEqual(cm.exception.function, "kvrt_attn_decode")
        self.assertTrue((out == 7).all())     # untouched
        bad_idx = c.indices.copy()
        bad_idx[0] = c.NB
        with self.assertRaises(kvrt.InvalidArgumentError):
            kvrt.attn_decode(q, c.cache, kvrt.BlockTable(c.indptr, bad_idx, c.lens), out=out)
        self.assertTrue((out == 7).all())

    def test_cuda_cache_refused(self):
        c = self.c
        cc = kvrt.KvCache(c.lay, 0x7f0000000000, owner=self, device="cuda", layer=1)
        with self.assertRaisesRegex(ValueError, "kvrt.gpu"):
            kvrt.attn_decode(self.q, cc, c.table)
        with self.assertRaisesRegex(ValueError, "layer 2: the layout has 2 layers"):
            kvrt.KvCache(c.lay, c.data, layer=2)


class TestAppend(PoolCase):
    L, H, D, T = 2, 2, 64, 16

    def pool_cache(self, kv, nblocks=3):
        sp = self.space()
        ids = sp.alloc(nblocks)
        lay = kvrt.Layout.preset(BM, self.L, self.H, self.D, self.T, 1, KD[kv])
        cache = kvrt.KvCache.of(sp.block_array(lay), layer=1)
        return sp, ids, lay, cache

    def test_append_f16_and_bf16_read_back(self):
        rng = np.random.default_rng(8)
        for kv in ("f16", "bf16", "f32"):
            sp, ids, lay, cache = self.pool_cache(kv)
            n = 20
            k = rng.standard_normal((n, self.H, self.D)).astype(np.float32)
            v = rng.standard_normal((n, self.H, self.D)).astype(np.float32)
            # tokens 0..15 to block ids[2], 16..19 to ids[0] offsets 3..6; token 5 padding
            slots = np.array([int(ids[2]) * self.T + t for t in range(16)]
                             + [int(ids[0]) * self.T + 3 + t for t in range(4)], np.int64)
            slots[5] = -1
            kvrt.append_kv(cache, k, v, slots)
            conv = (refattn.f32_to_bf16 if kv == "bf16" else
                    (lambda x: x.astype(NPT[kv])))
            b2 = sp.block_view(int(ids[2]), lay)       # [layer][K/V][token][head][dim]
            b0 = sp.block_view(int(ids[0]), lay)
            with self.subTest(kv=kv):
                keep = [t for t in range(16) if t != 5]
                np.testing.assert_array_equal(b2[1, 0, keep], conv(k[keep]))
                np.testing.assert_array_equal(b2[1, 1, keep], conv(v[keep]))
                self.assertFalse(b2[1, :, 5].any())   # skipped: still zero
                self.assertFalse(b2[0].any())         # layer 0 untouched
                np.testing.assert_array_equal(b0[1, 0, 3:7], conv(k[16:]))
                np.testing.assert_array_equal(b0[1, 1, 3:7], conv(v[16:]))

    def test_append_fp8_scale_rule(self):
        rng = np.random.default_rng(9)
        sp, ids, lay, cache = self.pool_cache("fp8", 1)
        k = rng.standard_normal((2, self.H, self.D)).astype(np.float32)
        v = rng.standard_normal((2, self.H, self.D)).astype(np.float32)
        b = int(ids[0])
        kvrt.append_kv(cache, k, v, [b * self.T, b * self.T + 1])
        inl = lay.copy()
        off = inl.inline_scales()
        raw = sp.block_view(b)
        sc = raw[off:off + 4 * inl.scale_block_stride].view(np.float32)
        view = sp.block_view(b, inl)
        for kvi, x in ((0, k), (1, v)):
            for h in range(self.H):
                s = sc[1 * inl.scale_layer_stride + kvi * inl.scale_kv_stride + h]
                want = max(np.abs(x[0, h]).max(), np.abs(x[1, h]).max()) / 448
                self.assertAlmostEqual(float(s), float(want), delta=float(want) * 2 ** -20)
                got = refattn.FP8[view[1, kvi, :2, h]] * s
                # e4m3 keeps 3 mantissa bits: half an ulp is 2^-4 relative,
                # subnormals (below 2^-6 x scale) 2^-10 x scale absolute;
                # token 0 may be requantised when token 1 raised the scale,
                # which rounds it twice
                err = np.abs(got - x[:2, h])
                bound = np.abs(x[:2, h]) * 2 ** -4 + s * 2 ** -9
                bound[0] *= 2
                self.assertTrue((err <= bound).all(), (err / bound).max())

    def test_append_errors_write_nothing(self):
        sp, ids, lay, cache = self.pool_cache("f16", 2)
        k = np.ones((2, self.H, self.D), np.float32)
        before = sp.blocks_view(0, 2).copy()
        nb = sp.info().nr_blocks
        with self.assertRaises(kvrt.InvalidArgumentError):
            kvrt.append_kv(cache, k, k, [int(ids[0]) * self.T, nb * self.T])
        for args, exc, msg in (
                ((cache, k, k.astype(np.float16), [0, 1]), TypeError, "one dtype"),
                ((cache, k, k, [0]), ValueError, "slots: 1 entries; pass 2"),
                ((cache, k[:, :1], k[:, :1], [0, 1]), ValueError, "pass shape"),
                ((cache, k.astype(np.float64), k, [0, 1]), TypeError, "float32"),
                ((cache, k, k, np.array([0.0, 1.0])), TypeError, "integer array"),
                ((lay, k, k, [0, 1]), TypeError, "kvrt.KvCache")):
            with self.subTest(msg=msg):
                with self.assertRaisesRegex(exc, msg):
                    kvrt.append_kv(*args)
        np.testing.assert_array_equal(sp.blocks_view(0, 2), before)
        ro = np.zeros(lay.extent(), np.uint8)
        ro.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            kvrt.append_kv(kvrt.KvCache(lay, ro), k, k, [0, 1])

    def test_append_then_attend(self):
        # the two calls agree: attention over appended tokens equals the reference
        rng = np.random.default_rng(10)
        sp, ids, lay, cache = self.pool_cache("f16", 3)
        n = 40
        k = rng.standard_normal((n, self.H, self.D)).astype(np.float32)
        v = rng.standard_normal((n, self.H, self.D)).astype(np.float32)
        blocks = [int(i) for i in ids]
        slots = [blocks[p // self.T] * self.T + p % self.T for p in range(n)]
        kvrt.append_kv(cache, k, v, slots)
        q = rng.standard_normal((1, 4, self.D)).astype(np.float32)
        out = kvrt.attn_decode(q, cache, kvrt.BlockTable.from_lists([blocks], [n]))
        ks, vs16 = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(
            np.float64)
        Kd = np.zeros((max(blocks) + 1, self.T, self.H, self.D))
        Vd = np.zeros_like(Kd)
        for p in range(n):
            Kd[blocks[p // self.T], p % self.T] = ks[p]
            Vd[blocks[p // self.T], p % self.T] = vs16[p]
        ref, vsc = refattn.attention(q.astype(np.float64), Kd, Vd, np.array([0, 3]),
                                     np.array(blocks), [n])
        self.assertLessEqual(row_error(out.astype(np.float64), ref, vsc), TOL["f32"])
