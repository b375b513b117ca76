# SPDX-License-Identifier: MIT
"""Tiers below the pool from Python: the SSD tier (write-through and
write-back, across a restart in a new pool), errors with their errnos and
hints, handle lifetimes, and the Redis Cluster tier against a real cluster
(selftests/redis/cluster.sh) with a second "host" and another tenant."""
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kvrt
from kvrt import _lib
from kvrt.pool import hashes_array

from .util import BLOCK, PoolCase, name, stand_in_library


def tier_root():
    """A directory on a file system with O_DIRECT (not tmpfs before 6.6)."""
    return tempfile.mkdtemp(prefix="kvrt-py-tier.",
                            dir=os.environ.get("KVRT_TIER_DIR") or "/var/tmp")


def hashes(tag, n):
    return [kvrt.hash_block([tag, i]) for i in range(n)]


def pattern(h, nbytes):
    """Contents that follow from the hash: a block read back checks itself."""
    rng = np.random.default_rng(int.from_bytes(h[:8], "little"))
    return rng.integers(0, 256, nbytes, dtype=np.uint8)


class TierCase(PoolCase):
    def setUp(self):
        super().setUp()
        self.root = tier_root()
        self.addCleanup(shutil.rmtree, self.root, True)

    def fill_publish(self, sp, tag, n):
        """n blocks with tag's patterns, published; ids (with references) and hashes."""
        hs = hashes(tag, n)
        ids = sp.alloc(n)
        for i, h in zip(ids, hs):
            sp.block_view(int(i))[:] = pattern(h, BLOCK)
        return sp.publish(ids, hs).ids, hs

    def new_host(self, space_name):
        """Another process's view: a new embedded pool, its own space of that name."""
        pool = kvrt.Pool("embedded", no_hugetlb=True)
        self.addCleanup(pool.close)
        sp = pool.create_space(space_name, block_bytes=BLOCK, quota_bytes=64 * BLOCK)
        self.addCleanup(sp.close)
        return sp

    def check_hits(self, sp, hs, want_where):
        ids, where = sp.lookup_tiers(hs)
        self.assertEqual(len(ids), len(hs))
        self.assertTrue((where == want_where).all(), where)
        for i, h in zip(ids, hs):
            self.assertTrue(np.array_equal(sp.block_view(int(i)), pattern(h, BLOCK)))
        sp.release(ids)


class TestSsdTier(TierCase):
    def test_write_through_then_a_new_pool_reads_them_back(self):
        nm = name("ssd")
        sp = self.pool.create_space(nm, block_bytes=BLOCK, quota_bytes=64 * BLOCK)
        self.addCleanup(sp.close)
        tier = sp.open_ssd_tier(self.root, 32 * BLOCK)
        self.assertEqual(tier.kind, kvrt.TierKind.SSD)
        ids, hs = self.fill_publish(sp, 1, 8)
        self.assertEqual(sp.tier_store(ids, hs), 8)
        self.assertEqual(sp.tier_store(ids, hs), 0)  # present: only marked used
        sp.release(ids)
        st = tier.stats()
        self.assertEqual((st.stores, st.store_skips, st.blocks), (8, 8, 8))
        self.assertEqual(st.used_bytes, 8 * BLOCK)
        self.assertEqual(st.queued, 0)
        sp.close()  # closes the tier
        self.assertTrue(tier.closed)
        self.assertRaises(ValueError, tier.stats)
        other = self.new_host(nm)
        t2 = other.open_ssd_tier(self.root, 32 * BLOCK)
        self.check_hits(other, hs, 1)
        self.assertEqual(t2.stats().hits, 8)
        self.check_hits(other, hs, 0)  # brought up: the pool has them now

    def test_write_back_queues_then_flush_and_close_write(self):
        nm = name("wb")
        sp = self.pool.create_space(nm, block_bytes=BLOCK, quota_bytes=64 * BLOCK)
        self.addCleanup(sp.close)
        tier = sp.open_ssd_tier(self.root, 64 * BLOCK, write_back=True, writeback_max=16)
        ids, hs = self.fill_publish(sp, 2, 12)
        self.assertEqual(sp.tier_store(ids, hs), 12)
        sp.release(ids)  # the queue holds its own references
        sp.tier_flush()
        st = tier.stats()
        self.assertEqual((st.deferred, st.queued, st.stores), (12, 0, 12))
        ids, hs3 = self.fill_publish(sp, 3, 12)
        self.assertEqual(sp.tier_store(ids, hs3), 12)
        sp.release(ids)
        tier.close()  # writes what is queued first
        tier.close()  # idempotent
        self.assertRaises(ValueError, tier.stats)
        sp.close()
        other = self.new_host(nm)
        other.open_ssd_tier(self.root, 64 * BLOCK)
        self.check_hits(other, hs + hs3, 1)

    def test_tier_contains_reads_nothing(self):
        nm = name("has")
        sp = self.pool.create_space(nm, block_bytes=BLOCK, quota_bytes=64 * BLOCK)
        self.addCleanup(sp.close)
        sp.open_ssd_tier(self.root, 32 * BLOCK)
        ids, hs = self.fill_publish(sp, 6, 4)
        sp.tier_store(ids[:3], hs[:3])           # hs[3] only in this pool
        sp.release(ids)
        sp.close()
        other = self.new_host(nm)
        tier = other.open_ssd_tier(self.root, 32 * BLOCK)
        before, pool_before = tier.stats(), other.stats()
        n, where = other.tier_contains(hs)
        self.assertEqual((n, where.tolist()), (3, [1, 1, 1]))
        self.assertEqual(other.tier_contains(hashes(7, 2))[0], 0)
        after, pool_after = tier.stats(), other.stats()
        self.assertEqual((after.read_bytes, after.hits), (before.read_bytes, before.hits))
        self.assertEqual((pool_after.allocs, pool_after.inserts),
                         (pool_before.allocs, pool_before.inserts))
        self.assertEqual(len(other.lookup(hs[:1])), 0)    # nothing brought up
        self.check_hits(other, hs[:3], 1)
        with self.assertRaisesRegex(ValueError, "pass at least one hash"):
            other.tier_contains([])

    def test_errors_say_what_to_do(self):
        sp = self.space(blocks=16)
        tier = sp.open_ssd_tier(self.root, 8 * BLOCK)
        e = self.assertKvrtError(kvrt.BusyError, 16, sp.open_ssd_tier, self.root, 8 * BLOCK)
        self.assertIn("one user per identity", str(e))
        self.assertKvrtError(kvrt.InvalidArgumentError, 22, sp.open_ssd_tier,
                             os.path.join(self.root, "small"), BLOCK - 1)
        with self.assertRaisesRegex(ValueError, "pass write_back=True too"):
            sp.open_ssd_tier(self.root, 8 * BLOCK, writeback_max=4)
        with self.assertRaisesRegex(ValueError, "writeback_max 65537"):
            sp.open_ssd_tier(self.root, 8 * BLOCK, write_back=True, writeback_max=65537)
        with self.assertRaisesRegex(TypeError, "write_back: pass True or False"):
            sp.open_ssd_tier(self.root, 8 * BLOCK, write_back=1)
        with self.assertRaisesRegex(ValueError, "pass the directory"):
            sp.open_ssd_tier("", 8 * BLOCK)
        with self.assertRaisesRegex(ValueError, "pass at least one hash"):
            sp.lookup_tiers([])
        with self.assertRaisesRegex(ValueError, "2 given for 1 ids"):
            sp.tier_store([0], hashes(4, 2))
        # an id outside the space, a priority above PRIO_MAX: refused in words, and
        # by the library too (asked directly), nothing stored
        with self.assertRaisesRegex(ValueError, r"^ids: block 16 is outside the space: pass "
                                    r"ids below its nr_blocks \(16\)$"):
            sp.tier_store([16], hashes(4, 1))
        with self.assertRaisesRegex(ValueError, r"^priorities\[0\] 101: pass 0\.\.100"):
            sp.tier_store([0], hashes(4, 1), [kvrt.PRIO_MAX + 1])
        h = hashes_array(hashes(4, 1))
        for i, p in ((16, 50), (0, kvrt.PRIO_MAX + 1)):
            a, pr = np.array([i], dtype=np.uint32), np.array([p], dtype=np.uint32)
            self.assertEqual(_lib.lib.kvrt_tier_store(sp._ptr(), 1, a.ctypes.data, h.ctypes.data,
                                                      pr.ctypes.data), -errno.EINVAL)
        self.assertEqual(tier.stats().stores, 0)
        sp.tier_flush()  # no write-back tier: nothing to wait for
        tier.close()
        e = self.assertKvrtError(kvrt.NoDeviceError, 19, sp.tier_store, [0], hashes(4, 1))
        self.assertIn("no tier is open on this space handle: open one first", str(e))

    def key(self, secret, mode=0o600):
        """A key file of this uid's below the test's root."""
        fd, path = tempfile.mkstemp(dir=self.root, prefix="key.")
        os.write(fd, secret)
        os.close(fd)
        os.chmod(path, mode)
        return path

    def test_create_tier_key_makes_a_key_the_tier_accepts_and_never_overwrites(self):
        path = os.path.join(self.root, "made.key")
        kvrt.create_tier_key(path)
        st = os.stat(path)
        self.assertEqual((st.st_mode & 0o7777, st.st_size), (0o600, 32))
        with open(path, "rb") as f:
            first = f.read()
        with self.assertRaises(kvrt.ExistsError) as cm:
            kvrt.create_tier_key(path)
        self.assertIn("never overwritten", str(cm.exception))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), first)
        with self.assertRaises(kvrt.NotFoundError) as cm:
            kvrt.create_tier_key(os.path.join(self.root, "absent", "k"))
        self.assertIn("does not exist", str(cm.exception))
        with self.assertRaisesRegex(TypeError, "path: pass a path"):
            kvrt.create_tier_key(3)
        sp = self.pool.create_space(name("made"), block_bytes=BLOCK, quota_bytes=16 * BLOCK)
        self.addCleanup(sp.close)
        sp.open_ssd_tier(os.path.join(self.root, "made-tiers"), 8 * BLOCK, key_file=path)

    def test_key_file_tags_blocks_and_bad_ones_are_refused(self):
        nm = name("key")
        mine, theirs = self.key(b"tenant A's secret: 32 bytes long"), self.key(b"b" * 32)
        tiers = os.path.join(self.root, "tiers")
        sp = self.pool.create_space(nm, block_bytes=BLOCK, quota_bytes=64 * BLOCK)
        self.addCleanup(sp.close)
        # Refused before anything is made below the tier's directory.
        with self.assertRaisesRegex(FileNotFoundError, "key_file '/nonexistent/k': no such"):
            sp.open_ssd_tier(tiers, 8 * BLOCK, key_file="/nonexistent/k")
        with self.assertRaisesRegex(TypeError, "key_file: pass a path"):
            sp.open_ssd_tier(tiers, 8 * BLOCK, key_file=3)
        with self.assertRaisesRegex(ValueError, "key_file: ''"):
            sp.open_ssd_tier(tiers, 8 * BLOCK, key_file="")
        e = self.assertKvrtError(kvrt.AccessError, 1, sp.open_ssd_tier, tiers, 8 * BLOCK,
                                 key_file=self.key(b"k" * 32, 0o644))
        self.assertIn("key_file, when given, must be yours with mode 0600", str(e))
        link = os.path.join(self.root, "key.link")
        os.symlink(mine, link)
        with self.assertRaises(kvrt.KvrtError) as cm:
            sp.open_ssd_tier(tiers, 8 * BLOCK, key_file=link)
        self.assertEqual(cm.exception.errno, 40)  # ELOOP
        self.assertIn("is a symlink", str(cm.exception))
        self.assertKvrtError(kvrt.InvalidArgumentError, 22, sp.open_ssd_tier, tiers,
                             8 * BLOCK, key_file=self.key(b"short"))
        self.assertFalse(os.path.exists(tiers))
        # Found again with that key only.
        sp.open_ssd_tier(tiers, 32 * BLOCK, key_file=mine)
        ids, hs = self.fill_publish(sp, 5, 4)
        self.assertEqual(sp.tier_store(ids, hs), 4)
        sp.release(ids)
        sp.close()
        other = self.new_host(nm)
        t2 = other.open_ssd_tier(tiers, 32 * BLOCK, key_file=theirs)
        self.assertEqual(len(other.lookup_tiers(hs)[0]), 0)
        t2.close()
        other.open_ssd_tier(tiers, 32 * BLOCK, key_file=mine)
        self.assertEqual(len(other.lookup_tiers(hs)[0]), 0)  # the other key's index replaced

    def test_a_shared_root_others_may_write_must_be_sticky(self):
        sp = self.space(blocks=16)
        shared = os.path.join(self.root, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        e = self.assertKvrtError(kvrt.AccessError, 1, sp.open_ssd_tier, shared, 8 * BLOCK)
        self.assertIn("sticky if others may write it", str(e))
        os.chmod(shared, 0o1777)
        sp.open_ssd_tier(shared, 8 * BLOCK).close()

    def test_config_ssd_bytes_as_text(self):
        # JSON from a command line gives strings; the quota keys take them too
        cfg = kvrt.tiers.TierConfig.from_extra({"kvpool_tier_ssd": self.root,
                                                "kvpool_tier_ssd_bytes": "1048576"})
        self.assertEqual(cfg.ssd_bytes, 1 << 20)
        for bad in ("1e6", "-1", "", str((1 << 50) + 1), 1.5, True):
            with self.assertRaisesRegex(ValueError, "kvpool_tier_ssd_bytes: .*byte count"):
                kvrt.tiers.TierConfig.from_extra({"kvpool_tier_ssd": self.root,
                                                  "kvpool_tier_ssd_bytes": bad})

    def test_config_key_file(self):
        kf = self.key(b"k" * 32)
        cfg = kvrt.tiers.TierConfig.from_extra({"kvpool_tier_ssd": self.root,
                                                "kvpool_tier_key_file": kf})
        self.assertEqual(cfg.key_file, kf)
        self.assertIn("kvpool_tier_key_file", kvrt.tiers.CONFIG_KEYS)
        with self.assertRaisesRegex(ValueError, "kvpool_tier_key_file keys the tiers: pass "
                                                "kvpool_tier_ssd or kvpool_tier_redis too"):
            kvrt.tiers.TierConfig.from_extra({"kvpool_tier_key_file": kf})
        with self.assertRaisesRegex(TypeError, "kvpool_tier_key_file: pass a string"):
            kvrt.tiers.TierConfig.from_extra({"kvpool_tier_ssd": self.root,
                                              "kvpool_tier_key_file": 7})
        sp = self.space(blocks=16)
        bad = kvrt.tiers.TierConfig.from_extra({"kvpool_tier_ssd": self.root,
                                                "kvpool_tier_key_file": kf + ".nope"})
        with self.assertRaisesRegex(FileNotFoundError, "key_file .*: no such file"):
            bad.open(sp, 16 * BLOCK)
        tiers = cfg.open(sp, 16 * BLOCK)
        self.assertEqual([t.kind for t in tiers], [kvrt.TierKind.SSD])


class TestOldLibrary(unittest.TestCase):
    """A 0.6 library (tiers, no write-back): write-through works, write-back
    refuses with what was found; a 0.5 one refuses tiers altogether."""

    def refusal(self, num, ver, protos, write_back):
        from kvrt import _lib
        so = stand_in_library(self, num, ver, protos)
        code = ("import errno, kvrt\n"
                "from kvrt import tiers\n"
                "try:\n"
                f"    tiers._need_support('kvrt_tier_open_ssd', {write_back})\n"
                "except kvrt.NotSupportedError as e:\n"
                "    assert e.errno == errno.EOPNOTSUPP, e.errno\n"
                "    print(e)\n"
                "else:\n"
                "    raise SystemExit('no refusal')\n")
        out = self.run_on(so, code)
        self.assertIn("KVRT_LIBRARY", out)
        self.assertIsNone(_lib.tiers_missing)
        self.assertIsNone(_lib.write_back_missing)
        return out

    def run_on(self, so, code):
        # a fresh interpreter: the stand-in library must be the one kvrt loads
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KVRT_LIBRARY=so),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        return out.stdout

    def test_0_6_has_no_write_back(self):
        from kvrt import _lib
        protos = {**_lib._PROTOS, **_lib._PROTOS_SEQS, **_lib._PROTOS_TIERS}
        msg = self.refusal(600, "0.6.0", protos, True)
        self.assertIn("libkvrt 0.6.0; write-back tiers need 0.7 or newer", msg)

    def test_0_8_has_no_tier_contains(self):
        from kvrt import _lib
        protos = {**_lib._PROTOS, **_lib._PROTOS_SEQS, **_lib._PROTOS_TIERS,
                  **_lib._PROTOS_WRITE_BACK, **_lib._PROTOS_TIER_KEYS}
        so = stand_in_library(self, 800, "0.8.0", protos)
        code = ("import kvrt\n"
                "from kvrt import _lib\n"
                "assert _lib.tiers_missing is None\n"
                "assert kvrt.library_missing('tiers') is None\n"
                "print(_lib.tier_contains_missing)\n"
                "assert kvrt.library_missing('tier_contains') == _lib.tier_contains_missing\n")
        self.assertIn("libkvrt 0.8.0; tier queries that read nothing (tier_contains) need 0.9 or newer",
                      self.run_on(so, code))

    def test_0_5_has_no_tiers(self):
        from kvrt import _lib
        msg = self.refusal(500, "0.5.0", {**_lib._PROTOS, **_lib._PROTOS_SEQS}, False)
        self.assertIn("tiers below the pool need 0.6 or newer", msg)


def cluster_script():
    s = os.environ.get("KVRT_REDIS_CLUSTER_SH")
    if s:
        return s, True
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "selftests", "redis",
                                         "cluster.sh")), False


class TestRedisTier(TierCase):
    """Against three real redis-server masters.  check.sh names the script
    (KVRT_REDIS_CLUSTER_SH), and then a cluster that does not start fails;
    a run from the source tree without redis-server skips, saying why."""

    @classmethod
    def setUpClass(cls):
        script, required = cluster_script()
        cls.dir = tempfile.mkdtemp(prefix="kvrt-py-redis.")
        have = shutil.which("redis-server") and os.path.exists(script)
        if not have and not required:
            shutil.rmtree(cls.dir, True)
            raise unittest.SkipTest("redis-server or selftests/redis/cluster.sh not here "
                                    "(make check runs this with both)")
        r = subprocess.run(["bash", script, "start", cls.dir], capture_output=True, text=True,
                           timeout=120, check=False)
        if r.returncode:
            subprocess.run(["bash", script, "stop", cls.dir], check=False, timeout=60)
            raise AssertionError(f"cluster.sh start failed: {r.stderr.strip()}")
        cls.script = script
        cls.seeds = r.stdout.strip().splitlines()[-1]

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["bash", cls.script, "stop", cls.dir], check=False, timeout=60)
        shutil.rmtree(cls.dir, True)

    def open(self, sp, user, prefix, **kw):
        return sp.open_redis_tier(self.seeds, user=user, password=f"{user}-pw",
                                  key_prefix=prefix, timeout_ms=1000, **kw)

    def test_a_second_host_finds_them_and_another_tenant_does_not(self):
        nm = name("redis")
        sp = self.pool.create_space(nm, block_bytes=BLOCK, quota_bytes=64 * BLOCK)
        self.addCleanup(sp.close)
        tier = self.open(sp, "alice", "tenA:", write_back=True)
        self.assertEqual(tier.kind, kvrt.TierKind.REDIS)
        ids, hs = self.fill_publish(sp, 5, 10)
        self.assertEqual(sp.tier_store(ids, hs), 10)
        sp.release(ids)
        sp.tier_flush()
        self.assertEqual(tier.stats().stores, 10)
        host2 = self.new_host(nm)
        self.open(host2, "alice", "tenA:")
        self.check_hits(host2, hs, 1)
        # bob on alice's prefix: Redis refuses (NOPERM), a miss here
        host3 = self.new_host(nm)
        t3 = self.open(host3, "bob", "tenA:")
        ids, _ = host3.lookup_tiers(hs)
        self.assertEqual(len(ids), 0)
        self.assertEqual(t3.stats().hits, 0)

    def test_wrong_credentials_and_no_cluster(self):
        sp = self.space(blocks=8)
        e = self.assertKvrtError(kvrt.AccessError, 13, sp.open_redis_tier, self.seeds,
                                 user="alice", password="wrong")
        self.assertIn("tenant's ACL user and password", str(e))
        with self.assertRaises(ConnectionRefusedError) as cm:
            sp.open_redis_tier("127.0.0.1:1")
        self.assertIsInstance(cm.exception, kvrt.KvrtError)
        self.assertIn("no seed answered", str(cm.exception))
        with self.assertRaisesRegex(ValueError, "at most 128 bytes"):
            sp.open_redis_tier(self.seeds, key_prefix="x" * 129)


if __name__ == "__main__":
    unittest.main()
