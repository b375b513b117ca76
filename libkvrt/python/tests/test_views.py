# SPDX-License-Identifier: MIT
"""Zero-copy numpy views over a space's mapping, and their lifetime."""
import gc
import unittest

import numpy as np

import kvrt
from kvrt import _handles

from .util import BLOCK, PoolCase

BM = kvrt.LayoutKind.BLOCK_MAJOR


class TestViews(PoolCase):
    def test_raw_block_view_is_the_mapping(self):
        sp = self.space()
        ids = sp.alloc(3)
        v = sp.block_view(int(ids[1]))
        self.assertEqual((v.shape, v.dtype), ((BLOCK,), np.uint8))
        self.assertEqual(v.ctypes.data, sp.base_address + int(ids[1]) * BLOCK)
        v[:] = 7
        run = sp.blocks_view(0, 3)
        self.assertEqual(run.shape, (3, BLOCK))
        self.assertTrue((run[int(ids[1])] == 7).all())
        whole = sp.view()
        self.assertEqual(whole.shape[0], sp.info().backed_blocks)
        whole[int(ids[2]), :4] = [1, 2, 3, 4]
        self.assertEqual(list(sp.block_view(int(ids[2]))[:4]), [1, 2, 3, 4])

    def test_layout_view(self):
        sp = self.space()
        ids = sp.alloc(2)
        lay = kvrt.Layout.preset(BM, 2, 4, 64, 16, 1, "f16")
        v = sp.block_view(int(ids[0]), lay)
        self.assertEqual(v.shape, (2, 2, 16, 4, 64))
        self.assertEqual(v.dtype, np.float16)
        v[1, 0, 3, 2, :] = np.arange(64, dtype=np.float16)
        # the same element through the raw bytes, at the layout's offset
        off = 1 * lay.layer_stride + 0 * lay.kv_stride + 3 * lay.token_stride + \
            2 * lay.head_stride
        raw = sp.block_view(int(ids[0]))[off:off + 128].view(np.float16)
        self.assertTrue((raw == np.arange(64, dtype=np.float16)).all())
        run = sp.blocks_view(int(ids[0]), 2, lay)
        self.assertEqual(run.shape, (2, 2, 2, 16, 4, 64))
        self.assertEqual(run.strides[0], BLOCK)
        bf = sp.block_view(int(ids[0]), kvrt.Layout.preset(BM, 1, 1, 64, 16, 1, "bf16"))
        self.assertEqual(bf.dtype, np.uint16)

    def test_view_bounds(self):
        sp = self.space(blocks=64)
        with self.assertRaisesRegex(IndexError, "allocate first"):
            sp.view()
        sp.alloc(1)
        backed = sp.info().backed_blocks
        with self.assertRaisesRegex(IndexError, "outside the backed range"):
            sp.block_view(backed)
        with self.assertRaisesRegex(IndexError, "outside the backed range"):
            sp.block_view(-1)
        with self.assertRaisesRegex(IndexError, "outside the backed range"):
            sp.blocks_view(backed - 1, 2)
        with self.assertRaisesRegex(TypeError, "layout: pass a kvrt.Layout"):
            sp.block_view(0, "f16")
        big = kvrt.Layout.preset(BM, 64, 8, 128, 16, 1, "f16")
        with self.assertRaises(kvrt.TooBigError):
            sp.block_view(0, big)

    def test_view_keeps_the_space_mapped(self):
        """Drop every other reference, collect, then use the view."""
        before = dict(_handles.counters)
        pool = kvrt.Pool("embedded", no_hugetlb=True)
        sp = pool.create_space("keep", block_bytes=BLOCK, quota_bytes=4 * BLOCK)
        ids = sp.alloc(2)
        lay = kvrt.Layout.preset(BM, 1, 2, 64, 16, 1, "f32")
        view = sp.blocks_view(int(ids[0]), 2, lay)[1, 0, 1]  # a slice of a view
        view[:] = 1.5
        raw = sp.block_view(int(ids[1]))
        del sp, pool, ids, lay
        gc.collect()
        closed = lambda k: _handles.counters[k] - before[k]  # noqa: E731
        self.assertEqual((closed("spaces_closed"), closed("pools_closed")), (0, 0))
        # reads and writes through the view, with nothing else left
        self.assertTrue((view == 1.5).all())
        self.assertEqual(view.shape, (16, 2, 64))  # block 1, layer 0, V
        view[0, 0, :] = np.arange(64, dtype=np.float32)
        self.assertEqual(float(view[0, 0, 63]), 63.0)
        del raw
        gc.collect()
        self.assertEqual(closed("spaces_closed"), 0)
        self.assertEqual(float(view.sum()), 1.5 * (16 * 2 * 64 - 64) + sum(range(64)))
        del view
        gc.collect()
        self.assertEqual((closed("spaces_closed"), closed("pools_closed")), (1, 1))

    def test_explicit_close_with_a_view(self):
        before = _handles.counters["spaces_closed"]
        with kvrt.Pool("embedded") as pool:
            with pool.create_space("c", block_bytes=BLOCK, quota_bytes=BLOCK) as sp:
                sp.alloc(1)
                v = sp.block_view(0)
        self.assertTrue(sp.closed)
        v[:3] = [9, 8, 7]  # the mapping is still there
        self.assertEqual(list(v[:3]), [9, 8, 7])
        self.assertEqual(_handles.counters["spaces_closed"], before)
        w = v[1:]  # numpy keeps the owner as base of derived views
        del v
        gc.collect()
        self.assertEqual(list(w[:2]), [8, 7])
        del w
        gc.collect()
        self.assertEqual(_handles.counters["spaces_closed"], before + 1)


if __name__ == "__main__":
    unittest.main()
