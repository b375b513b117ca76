# SPDX-License-Identifier: MIT
"""Shared helpers: an embedded pool per test, unique space names."""
import itertools
import unittest

import kvrt

BLOCK = 64 * 1024
_names = itertools.count()


def name(prefix="t"):
    return f"{prefix}-{next(_names)}"


class PoolCase(unittest.TestCase):
    """setUp opens an embedded pool; tearDown closes it."""

    def setUp(self):
        self.pool = kvrt.Pool("embedded", no_hugetlb=True)
        self.addCleanup(self.pool.close)

    def space(self, blocks=16, block_bytes=BLOCK, **kw):
        sp = self.pool.create_space(name(), block_bytes=block_bytes,
                                    quota_bytes=blocks * block_bytes, **kw)
        self.addCleanup(sp.close)
        return sp

    def assertKvrtError(self, cls, err, fn, *args, **kw):
        """fn raises exactly cls with errno err; returns the exception."""
        with self.assertRaises(kvrt.KvrtError) as cm:
            fn(*args, **kw)
        self.assertIs(type(cm.exception), cls)
        self.assertEqual(cm.exception.errno, err)
        self.assertIsInstance(cm.exception, OSError)
        self.assertTrue(cm.exception.function.startswith("kvrt_"))
        return cm.exception
