# SPDX-License-Identifier: MIT
"""The argument rules kvrt checks before calling libkvrt (kvrt._checks).

Each rule is tried twice with the same values: through the Python API,
which must refuse with the rule in words, and straight into the C function
with the check bypassed, which must refuse too (with the errno kvrt.h
documents).  So the Python check can never be stricter than libkvrt; the
values it accepts, the library accepts as well.
"""
import ctypes
import errno

import numpy as np

import kvrt
from kvrt import _lib
from kvrt.pool import hashes_array

from .util import BLOCK, PoolCase, name

EINVAL, E2BIG = -errno.EINVAL, -errno.E2BIG
NAME_RULE = "pass 1..63 of [A-Za-z0-9._-]"


def ptr(a):
    return a.ctypes.data


class CheckCase(PoolCase):
    def c_open(self, nm, create=True, block_bytes=BLOCK, quota_bytes=BLOCK):
        """kvrt_space_open straight from ctypes; its return (the space closed)."""
        o = _lib.SpaceOptsC()
        o.name = nm.encode("utf-8")
        o.flags = 1 if create else 0          # KVRT_SPACE_CREATE
        o.mode = 0o600 if create else 0
        o.block_bytes = block_bytes
        o.quota_bytes = quota_bytes if create else 0
        out = ctypes.c_void_p()
        ret = _lib.lib.kvrt_space_open(self.pool._ptr(), ctypes.byref(o), ctypes.byref(out))
        if ret == 0:
            _lib.lib.kvrt_space_close(out.value)
        return ret

    def refused(self, msg, fn, *args, **kw):
        """fn raises ValueError with exactly msg."""
        with self.assertRaises(ValueError) as cm:
            fn(*args, **kw)
        self.assertNotIsInstance(cm.exception, kvrt.KvrtError)  # not the library's
        self.assertEqual(str(cm.exception), msg)


class TestSpaceName(CheckCase):
    BAD = ["", "a b", "bad name!", "x" * 64, "a/b", "caf\u00e9", "tab\t", "a:b"]
    GOOD = ["a", "x" * 63, "A-z_0.9", "..", "-"]

    def test_bad_names_refused_in_words_and_by_the_library(self):
        for nm in self.BAD:
            with self.subTest(name=nm):
                msg = f"name {nm!r}: {NAME_RULE}"
                self.refused(msg, self.pool.create_space, nm, BLOCK, BLOCK)
                self.refused(msg, self.pool.join_space, nm)
                self.refused(msg, self.pool.open_space, nm, create=True,
                             block_bytes=BLOCK, quota_bytes=BLOCK)
                self.refused(msg, self.pool.destroy_space, nm)
                self.assertEqual(self.c_open(nm), EINVAL)
                self.assertEqual(_lib.lib.kvrt_space_destroy(self.pool._ptr(),
                                                              nm.encode("utf-8")), EINVAL)

    def test_good_names_pass_to_the_library(self):
        for nm in self.GOOD:
            with self.subTest(name=nm):
                self.assertEqual(self.c_open(nm), 0)
                self.pool.create_space(nm, BLOCK, BLOCK).close()

    def test_nul_and_type(self):
        # C sees "a" (a NUL ends the string): the name asked for cannot reach it
        self.refused(f"name {'a' + chr(0) + 'b'!r}: {NAME_RULE}", self.pool.join_space,
                     "a\0b")
        with self.assertRaisesRegex(TypeError, "^name: pass a str, not bytes$"):
            self.pool.join_space(b"x")
        with self.assertRaisesRegex(TypeError, "^name: pass a str, not int$"):
            self.pool.destroy_space(3)


class TestPublicNameChecks(CheckCase):
    """kvrt.check_space_name / check_name_part: what the integrations build
    names with; the same rule as create_space, so a name they pass opens."""

    def test_check_space_name_is_the_create_rule(self):
        for nm in TestSpaceName.BAD:
            with self.subTest(name=nm):
                self.refused(f"kvpool_space_name {nm!r}: {NAME_RULE}", kvrt.check_space_name,
                             nm, "kvpool_space_name")
        for nm in TestSpaceName.GOOD:
            with self.subTest(name=nm):
                self.assertEqual(kvrt.check_space_name(nm), nm)
                self.assertEqual(self.c_open(nm), 0)
        self.assertEqual(kvrt.SPACE_NAME_MAX, 63)

    def test_name_part(self):
        self.assertEqual(kvrt.check_name_part("x" * 16, "prefix"), "x" * 16)
        self.assertEqual(kvrt.check_name_part("", "tenant", empty_ok=True), "")
        self.refused("prefix '': pass 1..16 of [A-Za-z0-9._-]", kvrt.check_name_part, "",
                     "prefix")
        self.refused(f"tenant {'x' * 17!r}: pass 0..16 of [A-Za-z0-9._-]",
                     kvrt.check_name_part, "x" * 17, "tenant", empty_ok=True)
        self.refused("prefix 'a/b': pass 1..8 of [A-Za-z0-9._-]", kvrt.check_name_part, "a/b",
                     "prefix", 8)
        with self.assertRaisesRegex(TypeError, "^tenant: pass a str, not int$"):
            kvrt.check_name_part(5, "tenant")


class TestBlockAndQuota(CheckCase):
    def setUp(self):
        super().setUp()
        self.page = self.pool.info().page_size

    def test_block_bytes(self):
        page = self.page
        rule = f"pass a non-zero multiple of the page size ({page})"
        top = "pass at most 1073741824 (2**30, KVRT_MAX_BLOCK_BYTES)"
        for bb, err, why in ((0, EINVAL, rule), (1000, EINVAL, rule), (page + 1, EINVAL, rule),
                             (3 * page // 2, EINVAL, rule), ((1 << 30) + page, E2BIG, top),
                             (2 << 30, E2BIG, top)):
            with self.subTest(block_bytes=bb):
                self.refused(f"block_bytes {bb}: {why}", self.pool.create_space, name(), bb,
                             4 << 30)
                self.assertEqual(self.c_open(name(), block_bytes=bb, quota_bytes=4 << 30), err)
        for bb in (page, BLOCK, 1 << 30):
            with self.subTest(block_bytes=bb):
                self.assertEqual(self.c_open(name(), block_bytes=bb, quota_bytes=1 << 30), 0)
                self.pool.create_space(name(), bb, 1 << 30).close()

    def test_quota_bytes(self):
        top = "pass at most 1099511627776 (2**40, KVRT_MAX_SPACE_BYTES)"
        low = f"pass at least block_bytes ({BLOCK})"
        for q, err, why in ((0, EINVAL, low), (BLOCK - 1, EINVAL, low),
                            (BLOCK // 2, EINVAL, low), ((1 << 40) + 1, E2BIG, top),
                            (2 << 40, E2BIG, top)):
            with self.subTest(quota_bytes=q):
                self.refused(f"quota_bytes {q}: {why}", self.pool.create_space, name(), BLOCK, q)
                self.assertEqual(self.c_open(name(), quota_bytes=q), err)
        # no multiple of block_bytes asked: libkvrt rounds the quota down to blocks
        for q in (BLOCK, BLOCK + 1, 3 * BLOCK // 2, 1 << 40):
            with self.subTest(quota_bytes=q):
                self.assertEqual(self.c_open(name(), quota_bytes=q), 0)
                with self.pool.create_space(name(), BLOCK, q) as sp:
                    self.assertEqual(sp.info().nr_blocks, q // BLOCK)

    def test_a_join_leaves_block_bytes_to_the_library(self):
        # without CREATE block_bytes is 0 or the space's: the library decides
        sp = self.space()
        self.assertKvrtError(kvrt.InvalidArgumentError, errno.EINVAL, self.pool.join_space,
                             sp.name, block_bytes=1000)
        self.assertEqual(self.c_open(sp.name, create=False, block_bytes=1000), EINVAL)
        self.assertKvrtError(kvrt.NotFoundError, errno.ENOENT, self.pool.join_space, name(),
                             block_bytes=1000)


class TestPriorities(CheckCase):
    def test_priority_rule(self):
        sp = self.space(blocks=4)
        ids = sp.alloc(1)
        h = kvrt.hash_prompt(list(range(16)), 16)
        hs = hashes_array(h)
        for p in (kvrt.PRIO_MAX + 1, 1 << 31, (1 << 32) - 1, -1):
            with self.subTest(priority=p):
                self.refused(f"priorities[0] {p}: pass 0..100 (lower is evicted first)",
                             sp.publish, ids, h, [p])
                pr = np.array([p & 0xFFFFFFFF], dtype=np.uint32)
                a = ids.copy()
                self.assertEqual(_lib.lib.kvrt_publish(sp._ptr(), 1, ptr(a), ptr(hs), ptr(pr),
                                                       None), EINVAL)
        self.refused("priorities[1] 101: pass 0..100 (lower is evicted first)", sp.publish,
                     [0, 0], [bytes(32), bytes(32)], [0, 101])
        self.assertEqual(sp.stats().inserts, 0)  # nothing published by any of these
        for n, p in enumerate((0, kvrt.PRIO_MAX)):
            with self.subTest(priority=p):
                pr = np.array([p], dtype=np.uint32)
                one = kvrt.hash_prompt(list(range(100 * n + 100, 100 * n + 116)), 16)
                self.assertEqual(_lib.lib.kvrt_publish(sp._ptr(), 1, ptr(sp.alloc(1)),
                                                       ptr(hashes_array(one)), ptr(pr),
                                                       None), 0)
        self.assertEqual(sp.stats().inserts, 2)
        r = sp.publish(ids, h, [kvrt.PRIO_MAX])  # the Python check lets both ends through
        self.assertEqual((r.dedups, sp.stats().inserts), (0, 3))


class TestBlockIds(CheckCase):
    def test_ids_at_or_past_nr_blocks(self):
        sp = self.space(blocks=4)
        ids = sp.alloc(2)
        uuid = b"\x02" * 16
        sp.residency_add(uuid, [])
        h32 = bytes(32)
        hs = np.zeros((1, 32), dtype=np.uint8)
        for bad in (4, 5, 1 << 20, (1 << 32) - 1):
            out = f"block {bad} is outside the space: pass ids below its nr_blocks (4)"
            a = np.array([bad], dtype=np.uint32)
            with self.subTest(id=bad):
                self.refused(f"ids: {out}", sp.free, [bad])
                self.refused(f"ids: {out}", sp.free, np.array([0, bad], dtype=np.uint32))
                self.refused(f"ids: {out}", sp.release, [bad])
                self.refused(f"ids: {out}", sp.publish, [bad], [h32])
                self.refused(f"blocks: {out}", sp.residency_del, uuid, [bad])
                self.refused(f"entries[0] block: {out}", sp.residency_add, uuid, [(bad, 0)])
                lib, p = _lib.lib, sp._ptr()
                self.assertEqual(lib.kvrt_free_blocks(p, 1, ptr(a)), EINVAL)
                self.assertEqual(lib.kvrt_release(p, 1, ptr(a)), EINVAL)
                self.assertEqual(lib.kvrt_publish(p, 1, ptr(a.copy()), ptr(hs), None, None),
                                 EINVAL)
                self.assertEqual(lib.kvrt_residency_del(p, uuid, 1, ptr(a)), EINVAL)
                ent = (_lib.ResidencyEntryC * 1)()
                ent[0].block = bad
                self.assertEqual(lib.kvrt_residency_add(p, uuid, 1,
                                                        ctypes.cast(ent, ctypes.c_void_p)),
                                 EINVAL)
        self.assertEqual(sp.info().my_blocks, 2)  # nothing freed by the refusals
        # below nr_blocks the library is asked (and has its own reasons)
        self.assertKvrtError(kvrt.AccessError, errno.EPERM, sp.free, [3])
        sp.free(ids)


class TestFreeNotOwned(CheckCase):
    WHY = ("is not owned by this handle: free only blocks this handle allocated and has "
           "not published")

    def test_free_of_a_block_this_handle_does_not_hold(self):
        sp = self.space(blocks=4)
        ids = sp.alloc(2)
        other = self.pool.join_space(sp.name)
        self.addCleanup(other.close)
        eperm = "kvrt_free_blocks: Operation not permitted"
        b = int(ids[0])
        e = self.assertKvrtError(kvrt.AccessError, errno.EPERM, other.free, [b])
        self.assertEqual(str(e), f"[Errno 1] {eperm} (block {b} {self.WHY})")
        self.assertIsInstance(e, PermissionError)
        # the library does not say which of several: all are listed
        e = self.assertKvrtError(kvrt.AccessError, errno.EPERM, other.free, ids)
        self.assertEqual(str(e), f"[Errno 1] {eperm} (a block of [{ids[0]}, {ids[1]}] "
                                 f"{self.WHY})")
        # a published block is no longer this handle's to free
        hs = kvrt.hash_prompt(list(range(16)), 16)
        sp.publish(ids[:1], hs)
        e = self.assertKvrtError(kvrt.AccessError, errno.EPERM, sp.free, [b])
        self.assertIn(f"(block {b} {self.WHY})", str(e))
        # a free block: the library's EPERM too
        self.assertKvrtError(kvrt.AccessError, errno.EPERM, sp.free, [3])
        sp.free(ids[1:])  # owned: freed
        self.assertEqual(sp.info().my_blocks, 0)
