# SPDX-License-Identifier: MIT
"""Block arrays and kvrt_copy_blocks between numpy caches and pool spaces."""
import errno
import gc
import json
import subprocess
import sys
import unittest
import weakref

import numpy as np

import kvrt
from kvrt import _handles

from .util import BLOCK, PoolCase

BM = kvrt.LayoutKind.BLOCK_MAJOR
LM = kvrt.LayoutKind.LAYER_MAJOR
L, H, D, T = 2, 4, 64, 16   # layers, KV heads, head dim, block tokens


def layer_major_cache(nb, seed=0, dtype=np.float16):
    """A vLLM-style cache: [layer][K/V][block][token][head][dim], random."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((L, 2, nb, T, H, D)).astype(dtype)


class TestCopy(PoolCase):
    def test_layer_major_numpy_to_pool_and_back(self):
        nb = 6
        cache = layer_major_cache(nb)
        src = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, nb, "f16"), cache)
        sp = self.space()
        ids = sp.alloc(3)
        pool = sp.block_array(kvrt.Layout.preset(BM, L, H, D, T, 1, "f16"))
        self.assertEqual(pool.num_blocks, sp.info().nr_blocks)
        self.pool.copy_blocks(pool, src, [(4, int(ids[0])), (1, int(ids[2]))])
        lay = kvrt.Layout.preset(BM, L, H, D, T, 1, "f16")
        np.testing.assert_array_equal(sp.block_view(int(ids[0]), lay), cache[:, :, 4])
        np.testing.assert_array_equal(sp.block_view(int(ids[2]), lay), cache[:, :, 1])
        # back into another cache, pairs as an (n, 2) array
        out = np.zeros_like(cache)
        dst = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, nb, "f16"), out)
        self.pool.copy_blocks(dst, pool, np.array([[ids[0], 0], [ids[2], 5]], dtype=np.int64))
        np.testing.assert_array_equal(out[:, :, 0], cache[:, :, 4])
        np.testing.assert_array_equal(out[:, :, 5], cache[:, :, 1])
        self.assertFalse(out[:, :, 1:5].any())

    def test_async_copy(self):
        nb = 8
        cache = layer_major_cache(nb, seed=1)
        src = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, nb, "f16"), cache)
        out = np.zeros_like(cache)
        dst = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, nb, "f16"), out)
        c = self.pool.copy_blocks_async(dst, src, [(i, nb - 1 - i) for i in range(nb)])
        c.wait()
        self.assertTrue(c.poll())     # after wait: done, and stays done
        np.testing.assert_array_equal(out, cache[:, :, ::-1])
        out[:] = 0
        with self.pool.copy_blocks_async(dst, src, [(2, 3)]) as c2:
            while not c2.poll():
                pass
        np.testing.assert_array_equal(out[:, :, 3], cache[:, :, 2])
        # an empty batch is a no-op that completes
        self.assertTrue(self.pool.copy_blocks_async(dst, src, []).poll())

    def test_async_copy_keeps_its_arrays(self):
        nb = 4
        cache = layer_major_cache(nb, seed=2)
        out = np.zeros_like(cache)
        ref = weakref.ref(out)
        dst = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, nb, "f16"), out)
        src = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, nb, "f16"), cache)
        c = self.pool.copy_blocks_async(dst, src, [(0, 1)])
        del dst, out
        gc.collect()
        self.assertIsNotNone(ref())   # the copy holds its destination
        out = ref()
        c.wait()
        np.testing.assert_array_equal(out[:, :, 1], cache[:, :, 0])
        del out
        gc.collect()   # waited for: the handle let go of its arrays
        self.assertIsNone(ref())

    def test_fp8_scales_travel_inline(self):
        nb = 3
        lay = kvrt.Layout.preset(BM, L, H, D, T, nb, "fp8_e4m3")
        rng = np.random.default_rng(3)
        data = rng.integers(0, 255, (nb, lay.block_stride), dtype=np.uint8)
        scales = rng.random(nb * lay.scale_block_stride, dtype=np.float32)
        src = kvrt.BlockArray(lay, data, scales)
        sp = self.space()
        ids = sp.alloc(2)
        pool = sp.block_array(lay)
        self.pool.copy_blocks(pool, src, [(2, int(ids[1]))])
        inl = lay.copy()
        off = inl.inline_scales()
        raw = sp.block_view(int(ids[1]))
        np.testing.assert_array_equal(raw[:lay.block_stride], data[2])
        sps = lay.scale_block_stride
        np.testing.assert_array_equal(raw[off:off + 4 * sps].view(np.float32),
                                      scales[2 * sps:3 * sps])
        # the inlined preset names the same pool array
        pool2 = sp.block_array(inl)
        self.assertEqual(pool2.scales_address, pool.scales_address)
        out, out_s = np.zeros_like(data), np.zeros_like(scales)
        self.pool.copy_blocks(kvrt.BlockArray(lay, out, out_s), pool2, [(int(ids[1]), 0)])
        np.testing.assert_array_equal(out[0], data[2])
        np.testing.assert_array_equal(out_s[:sps], scales[2 * sps:3 * sps])

    def test_address_with_owner(self):
        nb = 2
        cache = layer_major_cache(nb, seed=4)
        lay = kvrt.Layout.preset(LM, L, H, D, T, nb, "f16")
        with self.assertRaisesRegex(TypeError, "owner="):
            kvrt.BlockArray(lay, cache.ctypes.data)
        holder = [cache]
        arr = kvrt.BlockArray(lay, cache.ctypes.data, owner=holder)
        self.assertEqual(arr.address, cache.ctypes.data)
        ref = weakref.ref(cache)
        del cache, holder
        gc.collect()
        self.assertIsNotNone(ref())   # the owner keeps the memory
        out = np.zeros_like(ref())
        self.pool.copy_blocks(kvrt.BlockArray(lay, out), arr, [(1, 0)])
        np.testing.assert_array_equal(out[:, :, 0], ref()[:, :, 1])

    def test_space_array_keeps_the_mapping(self):
        sp = self.space()
        ids = sp.alloc(1)
        sp.block_view(int(ids[0]))[:] = 9
        arr = sp.block_array(kvrt.Layout.preset(BM, L, H, D, T, 1, "f16"))
        gc.collect()
        closed = _handles.counters["spaces_closed"]
        sp.close()
        self.assertEqual(_handles.counters["spaces_closed"], closed)  # still mapped
        out = np.zeros((1, L, 2, T, H, D), dtype=np.float16)
        self.pool.copy_blocks(
            kvrt.BlockArray(kvrt.Layout.preset(BM, L, H, D, T, 1, "f16"), out), arr,
            [(int(ids[0]), 0)])
        self.assertTrue((out.view(np.uint8) == 9).all())
        del arr
        gc.collect()
        self.assertEqual(_handles.counters["spaces_closed"], closed + 1)


class TestCustomLayouts(PoolCase):
    def test_per_layer_caches_into_pool_blocks(self):
        # an engine keeping one tensor per layer, [K/V][block][token][head][dim]
        # (vLLM's flash-attention shape): layer l of each goes to layer l of
        # the pool block, through a one-layer layout over the pool's memory
        nb, es = 5, 2
        sp = self.space()
        ids = sp.alloc(2)
        whole = sp.blocks_view(0, sp.info().backed_blocks)
        bm = kvrt.Layout.preset(BM, L, H, D, T, 1, "f16")
        rng = np.random.default_rng(11)
        layers = [rng.standard_normal((2, nb, T, H, D)).astype(np.float16) for _ in range(L)]
        plane = T * H * D * es
        for li, t in enumerate(layers):
            src = kvrt.BlockArray(kvrt.Layout.preset(LM, 1, H, D, T, nb, "f16"), t)
            dst_lay = kvrt.Layout.custom(1, H, D, T, sp.info().backed_blocks, "f16",
                                         layer_stride=2 * plane, kv_stride=plane,
                                         block_stride=BLOCK, token_stride=H * D * es,
                                         head_stride=D * es)
            dst = kvrt.BlockArray(dst_lay, sp.base_address + li * bm.layer_stride,
                                  owner=whole)
            self.pool.copy_blocks(dst, src, [(3, int(ids[1])), (0, int(ids[0]))])
        for li, t in enumerate(layers):
            np.testing.assert_array_equal(sp.block_view(int(ids[1]), bm)[li], t[:, 3])
            np.testing.assert_array_equal(sp.block_view(int(ids[0]), bm)[li], t[:, 0])

    def test_custom_checks(self):
        with self.assertRaisesRegex(ValueError, "non-negative stride"):
            kvrt.Layout.custom(1, 1, 64, 16, 2, "f16", layer_stride=0, kv_stride=-1,
                               block_stride=0, token_stride=0, head_stride=0)
        # no KV heads: the library's check
        with self.assertRaises(kvrt.InvalidArgumentError):
            kvrt.Layout.custom(1, 0, 64, 16, 2, "f16", layer_stride=8192, kv_stride=4096,
                               block_stride=16384, token_stride=256, head_stride=128)
        p = kvrt.Layout.preset(LM, 2, 2, 64, 16, 4, "bf16")
        c = kvrt.Layout.custom(2, 2, 64, 16, 4, "bf16", layer_stride=p.layer_stride,
                               kv_stride=p.kv_stride, block_stride=p.block_stride,
                               token_stride=p.token_stride, head_stride=p.head_stride)
        self.assertEqual(repr(c), repr(p))


class TestCopyErrors(PoolCase):
    def setUp(self):
        super().setUp()
        self.nb = 4
        self.cache = layer_major_cache(self.nb, seed=5)
        self.lay = kvrt.Layout.preset(LM, L, H, D, T, self.nb, "f16")
        self.src = kvrt.BlockArray(self.lay, self.cache)
        self.out = np.zeros_like(self.cache)
        self.dst = kvrt.BlockArray(self.lay, self.out)

    def assertUntouched(self):
        self.assertFalse(self.out.any())

    def test_bad_data(self):
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            kvrt.BlockArray(self.lay, self.cache[:, :, ::2])
        with self.assertRaisesRegex(ValueError, "addresses .* bytes from its base"):
            kvrt.BlockArray(self.lay, self.cache[:1])
        with self.assertRaisesRegex(ValueError, "elements of 4 bytes"):
            kvrt.BlockArray(self.lay, np.zeros(self.cache.size, np.float32))
        with self.assertRaisesRegex(TypeError, "numpy array, a torch tensor"):
            kvrt.BlockArray(self.lay, bytearray(self.cache.nbytes))
        with self.assertRaisesRegex(TypeError, "kvrt.Layout"):
            kvrt.BlockArray("f16", self.cache)
        # raw bytes are fine
        kvrt.BlockArray(self.lay, self.cache.view(np.uint8))

    def test_bad_scales(self):
        with self.assertRaisesRegex(ValueError, "only fp8 layouts have scales"):
            kvrt.BlockArray(self.lay, self.cache, np.zeros(4, np.float32))
        f8 = kvrt.Layout.preset(BM, L, H, D, T, 2, "fp8")
        data = np.zeros((2, f8.block_stride), np.uint8)
        with self.assertRaisesRegex(ValueError, "exactly one of scales="):
            kvrt.BlockArray(f8, data)
        with self.assertRaisesRegex(ValueError, "scales take"):
            kvrt.BlockArray(f8, data, np.zeros(3, np.float32))
        with self.assertRaisesRegex(ValueError, "pass float32"):
            kvrt.BlockArray(f8, data, np.zeros(4096, np.float16))
        with self.assertRaisesRegex(ValueError, "must lie inside data"):
            kvrt.BlockArray(f8, data, scales_offset=data.nbytes - 4)

    def test_bad_pairs(self):
        cp = self.pool.copy_blocks
        for bad, exc, msg in (
                ([(0, 4)], ValueError, "< dst's 4 blocks"),
                ([(4, 0)], ValueError, "< src's 4 blocks"),
                ([(0, 1), (2, 1)], ValueError, "destination block appears twice"),
                ([(0, -1)], ValueError, r"\[0, 2\*\*32\)"),
                ([(0,)], TypeError, "pass a \\(src, dst\\) pair"),
                (np.zeros((2, 3), np.int32), ValueError, "shape \\(n, 2\\)"),
                (np.zeros((2, 2), np.float32), TypeError, "integer array"),
                ([(0, 1.0)], TypeError, "pass an int"),
                (5, TypeError, "sequence of \\(src, dst\\) tuples")):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(exc, msg):
                    cp(self.dst, self.src, bad)
                self.assertUntouched()

    def test_geometry_and_direction(self):
        other = kvrt.BlockArray(kvrt.Layout.preset(LM, L, H, D, T, self.nb, "bf16"),
                                self.cache.view(np.uint16))
        with self.assertRaisesRegex(ValueError, "differ in kv_dtype"):
            self.pool.copy_blocks(self.dst, other, [(0, 0)])
        ro = self.cache.copy()
        ro.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            self.pool.copy_blocks(kvrt.BlockArray(self.lay, ro), self.src, [(0, 1)])
        gpu_like = kvrt.BlockArray(self.lay, 0x7f0000000000, owner=self, device="cuda")
        self.assertTrue(gpu_like.is_cuda)
        with self.assertRaisesRegex(ValueError, "kvrt.gpu.Gpu"):
            self.pool.copy_blocks(self.dst, gpu_like, [(0, 0)])
        with self.assertRaisesRegex(TypeError, "kvrt.BlockArray"):
            self.pool.copy_blocks(self.out, self.src, [(0, 0)])
        self.assertUntouched()

    def test_library_refuses_aliasing(self):
        # same array, block 1 both a source and a destination: the library's check
        e = self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL,
                                 self.pool.copy_blocks, self.src, self.src,
                                 [(0, 1), (1, 2)])
        self.assertIn("kvrt_copy_blocks", str(e))
        np.testing.assert_array_equal(self.cache, layer_major_cache(self.nb, seed=5))

    def test_bounds_rule(self):
        # a block-major array whose blocks straddle two pool blocks: ERANGE
        sp = self.space()
        ids = sp.alloc(3)
        whole = sp.blocks_view(0, 3)
        lay = kvrt.Layout.preset(BM, 1, 1, 64, 16, 2, "f32")   # 8 KiB blocks
        lay_b = lay.block_stride
        self.assertLess(lay_b, BLOCK)
        addr = sp.base_address + BLOCK - lay_b // 2
        arr = kvrt.BlockArray(lay, addr, owner=whole)
        src = kvrt.BlockArray(lay, np.ones(2 * lay_b // 4, np.float32))
        self.assertKvrtError(kvrt.OutOfBoundsError, errno.ERANGE,
                             self.pool.copy_blocks, arr, src, [(0, 0)])
        self.assertFalse(whole.any())
        self.pool.copy_blocks(kvrt.BlockArray(lay, sp.base_address, owner=whole), src,
                              [(0, 0)])   # inside pool block 0: fine
        self.assertTrue(whole[0, :lay_b].view(np.float32).all())
        del ids


class TestImportWithoutTorch(PoolCase):
    def test_no_torch_needed(self):
        code = ("import sys; sys.modules['torch'] = None\n"
                "import numpy as np, kvrt\n"
                "lay = kvrt.Layout.preset(kvrt.LayoutKind.BLOCK_MAJOR, 1, 1, 64, 16, 2, 'f16')\n"
                "a = kvrt.BlockArray(lay, np.zeros(2 * 16 * 64 * 2, np.float16))\n"
                "print('torch' in sys.modules and sys.modules['torch'] is not None)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False")


# A space of two 2 MiB chunks of 64 KiB blocks with one block allocated:
# blocks [32, 64) have no memory behind them.  Run in a child, so that a
# signal is this test's failure, not the end of the test runner.
UNBACKED_CHILD = r"""
import errno, json, sys
import numpy as np
import kvrt

L, H, D, T = 2, 4, 64, 16
pool = kvrt.Pool("embedded", no_hugetlb=True)
sp = pool.create_space("unbacked", block_bytes=64 * 1024, quota_bytes=64 * 64 * 1024)
sp.alloc(1)
backed = sp.info().backed_blocks
lay = kvrt.Layout.preset(kvrt.LayoutKind.BLOCK_MAJOR, L, H, D, T, 1, "f16")
arr = sp.block_array(lay)
cache = np.full((L, 2, 2, T, H, D), 1.5, np.float16)
own = kvrt.BlockArray(kvrt.Layout.preset(kvrt.LayoutKind.LAYER_MAJOR, L, H, D, T, 2, "f16"),
                      cache)
out = {"backed": backed}
for name, dst, src, pairs in (("into", arr, own, [(0, 63)]), ("from", own, arr, [(63, 1)])):
    try:
        pool.copy_blocks(dst, src, pairs)
        out[name] = None
    except kvrt.KvrtError as e:
        out[name] = {"errno": e.errno, "cls": type(e).__name__, "msg": str(e)}
out["cache_unchanged"] = bool((cache == np.float16(1.5)).all())
print(json.dumps(out))
"""


class TestUnbackedCopy(unittest.TestCase):
    def test_copy_blocks_on_an_unbacked_id_raises_instead_of_killing_python(self):
        r = subprocess.run([sys.executable, "-c", UNBACKED_CHILD], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0,
                         f"the interpreter exited with {r.returncode} (a negative number is "
                         f"the signal that killed it): {r.stderr[-2000:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(out["backed"], 32)
        for way in ("into", "from"):
            e = out[way]
            self.assertIsNotNone(e, f"a copy {way} unbacked block 63 was accepted")
            self.assertEqual(e["errno"], errno.EFAULT, e)
            self.assertEqual(e["cls"], "BadAddressError", e)
            # what was wrong, and how to do it right
            self.assertIn("block 63", e["msg"])
            self.assertIn("no memory behind it", e["msg"])
            self.assertIn("alloc", e["msg"])
        self.assertTrue(out["cache_unchanged"])
