# SPDX-License-Identifier: MIT
"""Every wrapped error path: the exact exception class and errno."""
import errno
import os
import unittest

import numpy as np

import kvrt

from .util import BLOCK, PoolCase, name


class TestErrorClasses(unittest.TestCase):
    def test_builtin_bases(self):
        self.assertTrue(issubclass(kvrt.NotFoundError, FileNotFoundError))
        self.assertTrue(issubclass(kvrt.ExistsError, FileExistsError))
        self.assertTrue(issubclass(kvrt.AccessError, PermissionError))
        self.assertTrue(issubclass(kvrt.WouldBlockError, BlockingIOError))
        self.assertTrue(issubclass(kvrt.InterruptedCallError, InterruptedError))
        for cls in (kvrt.InvalidArgumentError, kvrt.NoSpaceError, kvrt.TooBigError):
            self.assertTrue(issubclass(cls, kvrt.KvrtError))
            self.assertTrue(issubclass(cls, OSError))

    def test_mapping(self):
        self.assertIs(kvrt.error_class(errno.EINVAL), kvrt.InvalidArgumentError)
        self.assertIs(kvrt.error_class(errno.EPERM), kvrt.AccessError)
        self.assertIs(kvrt.error_class(errno.EACCES), kvrt.AccessError)
        self.assertIs(kvrt.error_class(errno.ENOTSUP), kvrt.NotSupportedError)
        t = kvrt.error_class(errno.ETIMEDOUT)  # no kvrt class: Python's, made a KvrtError
        self.assertTrue(issubclass(t, TimeoutError) and issubclass(t, kvrt.KvrtError))
        self.assertIs(kvrt.error_class(errno.ETIMEDOUT), t)
        self.assertIs(kvrt.error_class(errno.EXDEV), kvrt.KvrtError)


class TestLibraryErrors(PoolCase):
    def test_open_kmod_without_device(self):
        e = self.assertKvrtError(kvrt.NoDeviceError, errno.ENODEV, kvrt.Pool, "kmod",
                                 device="/nonexistent/kvpool")
        self.assertEqual(e.function, "kvrt_open")
        # the library's own message, from its log callback
        self.assertIn("kmod backend", e.library_message)
        self.assertIn("/nonexistent/kvpool", str(e))

    def test_bad_env_backend(self):
        os.environ["KVRT_BACKEND"] = "bogus"
        try:
            self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, kvrt.Pool)
        finally:
            del os.environ["KVRT_BACKEND"]

    def test_space_open_errors(self):
        n = name()
        e = self.assertKvrtError(kvrt.NotFoundError, errno.ENOENT, self.pool.join_space, n)
        self.assertIsInstance(e, FileNotFoundError)
        self.assertIn(repr(n), str(e))
        sp = self.space()
        self.assertKvrtError(kvrt.ExistsError, errno.EEXIST, self.pool.create_space, sp.name,
                             block_bytes=BLOCK, quota_bytes=BLOCK, exclusive=True)
        # a space of another owner: FOREIGN with a uid that is not the owner
        self.assertKvrtError(kvrt.AccessError, errno.EACCES, self.pool.join_space, sp.name,
                             expect_uid=os.geteuid() + 4242)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, self.pool.join_space,
                             sp.name, block_bytes=2 * BLOCK)
        # API 4: a join (no create) names no create field
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, self.pool.open_space,
                             sp.name, mode=0o600)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, self.pool.open_space,
                             sp.name, quota_bytes=BLOCK)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, self.pool.open_space,
                             name(), create=True, block_bytes=BLOCK, quota_bytes=BLOCK,
                             expect_uid=0)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, self.pool.open_space,
                             name(), exclusive=True)
        # name, block_bytes and quota rules: ValueError first (test_checks.py)

    def test_block_errors(self):
        sp = self.space(blocks=4)
        self.assertKvrtError(kvrt.NoSpaceError, errno.ENOSPC, sp.alloc, 5)
        ids = sp.alloc(2)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, sp.free, [ids[0], ids[0]])
        other = self.pool.join_space(sp.name)
        self.addCleanup(other.close)
        self.assertKvrtError(kvrt.AccessError, errno.EPERM, other.free, ids[:1])
        hs = kvrt.hash_prompt(list(range(32)), 16)
        self.assertKvrtError(kvrt.AccessError, errno.EPERM, other.publish, ids, hs)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, sp.release, ids[:1])
        sp.publish(ids, hs)
        self.assertKvrtError(kvrt.AccessError, errno.EPERM, sp.free, ids[:1])  # published
        sp.release(ids)
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, sp.release, ids[:1])

    def test_destroy_errors(self):
        self.assertKvrtError(kvrt.NotFoundError, errno.ENOENT, self.pool.destroy_space, name())

    def test_residency_errors(self):
        sp = self.space()
        uuid = b"\x01" * 16
        self.assertKvrtError(kvrt.NotFoundError, errno.ENOENT, sp.residency_clear, uuid)
        self.assertKvrtError(kvrt.NotFoundError, errno.ENOENT, sp.residency_del, uuid, [0])
        ids = sp.alloc(1)
        other = self.pool.join_space(sp.name)
        self.addCleanup(other.close)
        self.assertKvrtError(kvrt.AccessError, errno.EPERM, other.residency_add, uuid,
                             [(int(ids[0]), 0)])
        sp.residency_add(uuid, [])
        self.assertKvrtError(kvrt.NotFoundError, errno.ENOENT, sp.residency_del, uuid, ids)

    def test_layout_errors(self):
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, kvrt.Layout.preset,
                             kvrt.LayoutKind.BLOCK_MAJOR, 0, 1, 64, 16, 1, "f16")
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, kvrt.Layout.preset,
                             7, 1, 1, 64, 16, 1, "f16")
        self.assertKvrtError(kvrt.LimitOverflowError, errno.EOVERFLOW, kvrt.kv_bytes,
                             2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 40, "f32")
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, kvrt.kv_bytes,
                             0, 1, 1, 1, "f32")
        lay = kvrt.Layout.preset(kvrt.LayoutKind.BLOCK_MAJOR, 1, 1, 64, 16, 1, "f16")
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, lay.inline_scales)
        big = kvrt.Layout.preset(kvrt.LayoutKind.BLOCK_MAJOR, 64, 8, 128, 16, 1, "f16")
        sp = self.space()
        self.assertKvrtError(kvrt.TooBigError, errno.E2BIG, sp.layout_for, big)
        lm = kvrt.Layout.preset(kvrt.LayoutKind.LAYER_MAJOR, 1, 1, 64, 16, 4, "f16")
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, sp.layout_for, lm)


class TestPythonArgumentErrors(PoolCase):
    """Wrong Python arguments: TypeError/ValueError naming what to pass."""

    def test_pool_args(self):
        with self.assertRaisesRegex(ValueError, "pass 'auto', 'kmod' or 'embedded'"):
            kvrt.Pool("gpu")
        with self.assertRaisesRegex(TypeError, "pass 'auto'"):
            kvrt.Pool(3.5)
        with self.assertRaisesRegex(TypeError, "device: pass a path"):
            kvrt.Pool("embedded", device=b"/dev/kvpool")
        with self.assertRaisesRegex(ValueError, r"pool_bytes -1: pass an int in \[0, 2\*\*64\)"):
            kvrt.Pool("embedded", pool_bytes=-1)
        with self.assertRaisesRegex(TypeError, "pool_bytes: pass an int, not str"):
            kvrt.Pool("embedded", pool_bytes="1G")

    def test_space_args(self):
        with self.assertRaisesRegex(TypeError, "name: pass a str"):
            self.pool.join_space(b"x")
        with self.assertRaisesRegex(ValueError, r"pass 1\.\.63 of \[A-Za-z0-9\._-\]"):
            self.pool.join_space("a\0b")
        sp = self.space()
        with self.assertRaisesRegex(ValueError, r"count 0: pass 1\.\.65536"):
            sp.alloc(0)
        with self.assertRaisesRegex(TypeError, "count: pass an int, not str"):
            sp.alloc("2")
        with self.assertRaisesRegex(TypeError, "count: pass an int, not bool"):
            sp.alloc(True)
        with self.assertRaisesRegex(ValueError, "at least one block id"):
            sp.free([])
        with self.assertRaisesRegex(ValueError, r"ids\[1\] -1: pass an int"):
            sp.free([0, -1])
        with self.assertRaisesRegex(TypeError, "integer array"):
            sp.free(np.zeros(2, dtype=np.float32))
        with self.assertRaisesRegex(ValueError, "1-D array"):
            sp.free(np.zeros((2, 2), dtype=np.uint32))
        with self.assertRaisesRegex(TypeError, "sequence of int block ids"):
            sp.free(5)
        with self.assertRaisesRegex(ValueError, "at most 65536"):
            sp.release(np.zeros(65537, dtype=np.uint32))

    def test_hash_args(self):
        sp = self.space()
        ids = sp.alloc(1)
        with self.assertRaisesRegex(ValueError, "multiple of 32"):
            sp.publish(ids, b"x" * 31)
        with self.assertRaisesRegex(ValueError, r"hashes\[0\]: 31 bytes"):
            sp.publish(ids, [b"x" * 31])
        with self.assertRaisesRegex(TypeError, "not str"):
            sp.lookup("ab" * 16)
        with self.assertRaisesRegex(ValueError, "2 given for 1 ids"):
            sp.publish(ids, [bytes(32)] * 2)
        with self.assertRaisesRegex(TypeError, "uint8 array"):
            sp.lookup(np.zeros((1, 32), dtype=np.int32))
        with self.assertRaisesRegex(ValueError, "at least one hash"):
            sp.lookup(b"")
        with self.assertRaisesRegex(TypeError, "uuid: pass"):
            sp.residency_clear(b"short")
        with self.assertRaisesRegex(TypeError, "parent: pass a 32-byte"):
            kvrt.hash_block([1], parent=b"x")
        with self.assertRaisesRegex(ValueError, "block_tokens: pass a positive"):
            kvrt.hash_prompt([1, 2], 0)
        with self.assertRaisesRegex(ValueError, "fit in 32 bits"):
            kvrt.hash_block([1 << 33])
        with self.assertRaisesRegex(TypeError, "tokens: pass a sequence"):
            kvrt.hash_block(b"abc")

    def test_dtype_args(self):
        with self.assertRaisesRegex(ValueError, "pass one of 'f32'"):
            kvrt.Layout.preset(0, 1, 1, 64, 16, 1, "f64")
        with self.assertRaisesRegex(TypeError, "dtype: pass a kvrt.DType"):
            kvrt.Layout.preset(0, 1, 1, 64, 16, 1, 1.0)

    def test_closed_space(self):
        sp = self.space()
        sp.close()
        for call in (sp.info, sp.stats, lambda: sp.alloc(1), sp.fileno,
                     lambda: sp.block_view(0)):
            with self.assertRaisesRegex(ValueError, "is closed: open it again"):
                call()


if __name__ == "__main__":
    unittest.main()
