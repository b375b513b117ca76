# SPDX-License-Identifier: MIT
"""Shared helpers: an embedded pool per test, unique space names."""
import itertools
import os
import shutil
import subprocess
import tempfile
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


STUB = r"""
int kvrt_version_number(void) { return %(num)d; }
const char *kvrt_version(void) { return "%(ver)s"; }
%(stubs)s
"""


def stand_in_library(case, num, ver, names):
    """Build a libkvrt.so.0 of version num ("ver") exporting names (each
    returning -ENOSYS) and nothing newer; its path.  Skips without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        case.skipTest("no C compiler to build a stand-in for an old libkvrt")
    stubs = "\n".join(f"long {n}(void) {{ return -38; }}" for n in names
                      if n not in ("kvrt_version", "kvrt_version_number"))
    d = tempfile.mkdtemp()
    case.addCleanup(shutil.rmtree, d)
    with open(os.path.join(d, "old.c"), "w") as f:
        f.write(STUB % {"num": num, "ver": ver, "stubs": stubs})
    so = os.path.join(d, "libkvrt.so.0")
    subprocess.run([cc, "-shared", "-fPIC", "-o", so, os.path.join(d, "old.c")], check=True)
    return so
