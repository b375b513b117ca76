# SPDX-License-Identifier: MIT
"""kvrt.Sequences (libkvrt 0.5 sequence block tables): a model-based random
test, every errno with the table unchanged, the copy_block callback's
exceptions, threads, real K/V through append_kv and attention against a
float64 reference, and the refusal of a library older than 0.5."""
import errno
import os
import random
import subprocess
import sys
import threading
import unittest

import numpy as np

import kvrt

from .refattn import TOL, row_error
from .util import PoolCase, stand_in_library


def snapshot(t, ids):
    """Everything observable about a table (and the given sequences)."""
    st = t.stats()
    return (st, tuple((i, t.len(i), tuple(t.blocks(i))) for i in ids),
            tuple(t.block_refs(b) for b in range(t.nr_blocks)))


class SlotCache:
    """A cache of one int64 value per token slot, and the copy_block that
    copies a block's first ntokens values (the callback under test)."""

    def __init__(self, nr_blocks, bt):
        self.bt = bt
        self.v = np.full(nr_blocks * bt, -1, dtype=np.int64)
        self.calls = []
        self.fail = None          # an exception to raise instead of copying

    def copy_block(self, src, dst, ntokens):
        self.calls.append((src, dst, ntokens))
        if self.fail is not None:
            raise self.fail
        b = self.bt
        self.v[dst * b:dst * b + ntokens] = self.v[src * b:src * b + ntokens]


class TestModel(unittest.TestCase):
    """Random add/add_blocks/append/fork/truncate/free against a model of
    sequences as lists of the values written at their positions."""

    def run_model(self, seed, nr_blocks=24, bt=4, steps=500):
        rng = random.Random(seed)
        cache = SlotCache(nr_blocks, bt)
        t = kvrt.Sequences(nr_blocks, bt, cache.copy_block)
        self.addCleanup(t.close)
        model = {}                 # id -> list of values, one per token
        nxt = [0]
        copies = 0

        def fresh(n):
            nxt[0] += n
            return list(range(nxt[0] - n, nxt[0]))

        def held():
            return {i: t.blocks(i) for i in model}

        for step in range(steps):
            op = rng.choice(["add", "add_blocks", "append", "append", "append", "fork",
                             "truncate", "free", "fail"])
            ids = list(model)
            ctx = f"seed {seed} step {step} op {op}"
            hb = held()
            used = set(b for bl in hb.values() for b in bl)
            free = [b for b in range(nr_blocks) if b not in used]
            if op == "add" or not ids and op not in ("add_blocks",):
                i = t.add()
                self.assertNotIn(i, model)
                self.assertNotEqual(i, 0)
                model[i] = []
            elif op == "add_blocks":
                if not free:
                    continue
                k = rng.randint(0, min(3, len(free)))
                blocks = rng.sample(free, k)
                n = 0 if k == 0 else rng.randint((k - 1) * bt + 1, k * bt)
                vals = fresh(n)
                for p, val in enumerate(vals):
                    cache.v[blocks[p // bt] * bt + p % bt] = val
                i = t.add_blocks(blocks, n)
                model[i] = vals
                self.assertEqual(t.blocks(i), blocks, ctx)
            elif op in ("append", "fail"):
                i = rng.choice(ids)
                n = rng.randint(0, 3 * bt)
                ln = len(model[i])
                last = hb[i][-1] if hb[i] else None
                cow = ln % bt != 0 and t.block_refs(last) > 1
                need = -(-(ln + n) // bt) - len(hb[i]) + (cow and n > 0)
                before = snapshot(t, ids)
                values_before = cache.v.copy()
                if op == "fail" and cow and n > 0 and need <= len(free):
                    cache.fail = LookupError(f"injected at step {step}")
                    with self.assertRaises(LookupError) as cm:
                        t.append(i, n)
                    self.assertIs(cm.exception, cache.fail, ctx)
                    cache.fail = None
                    self.assertEqual(snapshot(t, ids), before, ctx)
                    np.testing.assert_array_equal(cache.v, values_before, ctx)
                    continue
                if need > len(free):
                    with self.assertRaises(kvrt.NoSpaceError, msg=ctx) as cm:
                        t.append(i, n)
                    self.assertEqual(cm.exception.errno, errno.ENOSPC)
                    self.assertEqual(snapshot(t, ids), before, ctx)
                    continue
                ncalls = len(cache.calls)
                slots = t.append(i, n)
                self.assertEqual(len(slots), n)
                if cow and n > 0:
                    copies += 1
                    self.assertEqual(cache.calls[ncalls:], [(last, cache.calls[-1][1], ln % bt)],
                                     ctx)
                else:
                    self.assertEqual(len(cache.calls), ncalls, ctx)
                vals = fresh(n)
                for s, val in zip(slots, vals):
                    cache.v[s] = val
                model[i] = model[i] + vals
            elif op == "fork":
                i = rng.choice(ids)
                c = t.fork(i)
                self.assertEqual(t.blocks(c), hb[i], ctx)
                model[c] = list(model[i])
            elif op == "truncate":
                i = rng.choice(ids)
                ln = rng.randint(0, len(model[i]))
                t.truncate(i, ln)
                del model[i][ln:]
            elif op == "free":
                i = rng.choice(ids)
                t.free(i)
                del model[i]
                with self.assertRaises(kvrt.NotFoundError):
                    t.len(i)
            self.check_invariants(t, cache, model, copies, ctx)

    def check_invariants(self, t, cache, model, copies, ctx):
        bt = t.block_tokens
        hb = {i: t.blocks(i) for i in model}
        holders = [0] * t.nr_blocks
        for i, bl in hb.items():
            self.assertEqual(t.len(i), len(model[i]), ctx)
            self.assertEqual(len(bl), -(-len(model[i]) // bt), ctx)
            self.assertEqual(len(set(bl)), len(bl), ctx)
            for b in bl:
                holders[b] += 1
        for b in range(t.nr_blocks):
            self.assertEqual(t.block_refs(b), holders[b], f"{ctx}: block {b}")
        st = t.stats()
        used = sum(1 for h in holders if h)
        self.assertEqual((st.used_blocks, st.free_blocks), (used, t.nr_blocks - used), ctx)
        self.assertEqual(st.free_blocks + st.used_blocks, t.nr_blocks, ctx)
        self.assertEqual(st.shared_blocks, sum(1 for h in holders if h > 1), ctx)
        self.assertEqual(st.block_refs, sum(holders), ctx)
        self.assertEqual(st.nr_seqs, len(model), ctx)
        self.assertEqual(st.copies, copies, ctx)
        # Each sequence reads back its own history through the CSR.
        ids = list(model)
        indptr, indices, lens = t.csr(ids)
        self.assertEqual(len(indptr), len(ids) + 1)
        self.assertEqual(indptr[-1], len(indices))
        for k, i in enumerate(ids):
            self.assertEqual(lens[k], len(model[i]), ctx)
            got = [cache.v[indices[indptr[k] + p // bt] * bt + p % bt]
                   for p in range(lens[k])]
            self.assertEqual(got, model[i], f"{ctx}: sequence {i}")

    def test_random(self):
        for seed in range(4):
            self.run_model(seed)

    def test_one_token_blocks_and_large_blocks(self):
        self.run_model(11, nr_blocks=10, bt=1, steps=200)
        self.run_model(12, nr_blocks=6, bt=16, steps=200)

    def test_the_model_check_can_fail(self):
        # A copy_block that does not copy: the read-back must notice.
        cache = SlotCache(8, 4)
        t = kvrt.Sequences(8, 4, lambda s, d, n: None)
        self.addCleanup(t.close)
        a = t.add()
        for s, v in zip(t.append(a, 2), (10, 11)):
            cache.v[s] = v
        b = t.fork(a)
        s = t.append(a, 1)[0]
        cache.v[s] = 12
        with self.assertRaises(AssertionError):
            self.check_invariants(t, cache, {a: [10, 11, 12], b: [10, 11]}, 1, "no copy")


class TestErrors(unittest.TestCase):
    """Every refusal: its class, errno and advice, and nothing changed."""

    def setUp(self):
        self.cache = SlotCache(8, 4)
        self.t = kvrt.Sequences(8, 4, self.cache.copy_block)
        self.addCleanup(self.t.close)
        self.a = self.t.add()
        self.t.append(self.a, 6)
        self.b = self.t.fork(self.a)
        self.ids = [self.a, self.b]

    def refused(self, cls, err, fn, *args, text=None):
        before = snapshot(self.t, self.ids)
        with self.assertRaises(cls) as cm:
            fn(*args)
        if err is not None:
            self.assertIsInstance(cm.exception, kvrt.KvrtError)
            self.assertEqual(cm.exception.errno, err)
            self.assertTrue(cm.exception.function.startswith("kvrt_seq"))
        if text:
            self.assertIn(text, str(cm.exception))
        self.assertEqual(snapshot(self.t, self.ids), before)
        return cm.exception

    def test_unknown_ids(self):
        t = self.t
        gone = t.fork(self.a)
        t.free(gone)
        for bad in (gone, 0, 12345, 2**64 - 1):
            e = self.refused(kvrt.NotFoundError, errno.ENOENT, t.append, bad, 1,
                             text="not a live sequence")
            self.assertIsInstance(e, FileNotFoundError)
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.fork, bad, text="parent")
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.truncate, bad, 0)
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.free, bad)
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.len, bad)
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.blocks, bad)
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.csr, [self.a, bad])
        other = kvrt.Sequences(8, 4, self.cache.copy_block)
        self.addCleanup(other.close)
        o = other.add()
        if o != self.a:   # ids are per table: another table's id is unknown here
            self.refused(kvrt.NotFoundError, errno.ENOENT, t.len, o)

    def test_no_space(self):
        t = self.t
        # 2 of 8 blocks used: 6 free.  a's last block is shared and partial,
        # so 22 more tokens need ceil(28/4) - 2 = 5 new blocks + 1 copy = 6: fits;
        # 23 would need 7.
        e = self.refused(kvrt.NoSpaceError, errno.ENOSPC, t.append, self.a, 23,
                         text="free or truncate")
        self.assertIn("kvrt_seq_append", str(e))
        self.assertEqual(self.cache.calls, [])
        # Exactly the copy is missing: 5 free blocks, and a's 22 more tokens
        # need 5 new ones plus 1 for copying its shared partial block.
        c = t.add()
        self.ids.append(c)
        t.append(c, 4)
        self.refused(kvrt.NoSpaceError, errno.ENOSPC, t.append, self.a, 22)
        self.assertEqual(self.cache.calls, [])
        self.assertEqual(len(t.append(self.a, 18)), 18)   # 4 new + 1 copy: fits
        self.assertEqual(len(self.cache.calls), 1)
        self.assertEqual(t.stats().free_blocks, 0)

    def test_truncate_past_the_end(self):
        e = self.refused(kvrt.OutOfBoundsError, errno.ERANGE, self.t.truncate, self.a, 7,
                         text="at most its len()")
        self.assertIn("kvrt_seq_truncate", str(e))
        self.t.truncate(self.a, 6)    # equal: a no-op
        self.assertEqual(self.t.len(self.a), 6)

    def test_add_blocks(self):
        t = self.t
        self.refused(kvrt.InvalidArgumentError, errno.EINVAL, t.add_blocks, [5, 6], 4,
                     text="pass ceil(ntokens / 4) = 1")
        self.refused(kvrt.InvalidArgumentError, errno.EINVAL, t.add_blocks, [5], 5)
        self.refused(kvrt.InvalidArgumentError, errno.EINVAL, t.add_blocks, [5, 5], 6)
        self.refused(kvrt.InvalidArgumentError, errno.EINVAL, t.add_blocks, [8], 1,
                     text="< 8")
        self.refused(kvrt.BusyError, errno.EBUSY, t.add_blocks, [5, 1], 5,
                     text="free blocks only")
        self.refused(ValueError, None, t.add_blocks, [-1], 1)
        self.refused(TypeError, None, t.add_blocks, 5, 1)
        self.refused(TypeError, None, t.add_blocks, ["5"], 1)
        e = t.add_blocks([], 0)
        self.assertEqual(t.len(e), 0)

    def test_python_side_checks(self):
        t = self.t
        self.refused(ValueError, None, t.append, self.a, -1, text="[0, 2**32)")
        self.refused(ValueError, None, t.append, self.a, 33, text="whole table")
        self.refused(TypeError, None, t.append, self.a, 1.0, text="not float")
        self.refused(TypeError, None, t.append, self.a, True, text="not bool")
        self.refused(TypeError, None, t.append, str(self.a), 1)
        self.refused(ValueError, None, t.append, -self.a, 1)
        self.refused(ValueError, None, t.truncate, self.a, -1)
        self.refused(ValueError, None, t.block_refs, 8, text="pass 0..7")
        self.refused(TypeError, None, t.csr, self.a, text="sequence of sequence ids")
        self.refused(TypeError, None, t.csr, [self.a, None])
        # numpy integers are ints
        self.assertEqual(t.len(np.uint64(self.a)), 6)

    def test_create(self):
        cb = self.cache.copy_block
        for nb, bt in ((0, 4), (4, 0)):
            with self.assertRaises(kvrt.InvalidArgumentError) as cm:
                kvrt.Sequences(nb, bt, cb)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIn("pass both >= 1", str(cm.exception))
        with self.assertRaises(kvrt.LimitOverflowError) as cm:
            kvrt.Sequences(2**16, 2**15, cb)
        self.assertEqual(cm.exception.errno, errno.EOVERFLOW)
        self.assertIn("2**31 - 1", str(cm.exception))
        with self.assertRaisesRegex(TypeError, "pass a callable"):
            kvrt.Sequences(4, 4, None)
        with self.assertRaisesRegex(ValueError, "nr_blocks -1"):
            kvrt.Sequences(-1, 4, cb)
        with self.assertRaisesRegex(TypeError, "block_tokens: pass an int"):
            kvrt.Sequences(4, "4", cb)
        with kvrt.Sequences(2**16, 2**15 - 1, cb) as big:     # the largest that fits
            self.assertEqual(big.stats().free_blocks, 2**16)

    def test_closed(self):
        t = kvrt.Sequences(4, 4, self.cache.copy_block)
        a = t.add()
        with t:
            pass
        self.assertTrue(t.closed)
        with self.assertRaisesRegex(ValueError, "closed"):
            t.len(a)
        with self.assertRaisesRegex(ValueError, "closed"):
            t.add()
        t.close()   # idempotent
        self.assertEqual(repr(t), "<kvrt.Sequences closed>")


class TestCallback(unittest.TestCase):
    def shared_partial(self, cb):
        t = kvrt.Sequences(8, 4, cb)
        self.addCleanup(t.close)
        a = t.add()
        t.append(a, 6)
        b = t.fork(a)
        return t, a, b

    def test_exception_is_reraised_and_changes_nothing(self):
        boom = KeyError("copy failed")
        state = {"fail": True, "calls": []}

        def cb(src, dst, n):
            state["calls"].append((src, dst, n))
            if state["fail"]:
                raise boom

        t, a, b = self.shared_partial(cb)
        before = snapshot(t, [a, b])
        try:
            t.append(a, 1)
        except KeyError as e:   # not assertRaises: it drops the traceback
            caught = e
        else:
            self.fail("no exception")
        self.assertIs(caught, boom)
        # the traceback reaches into the callback, and a note says which call
        tb = caught.__traceback__
        names = []
        while tb is not None:
            names.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        self.assertEqual(names[0], "test_exception_is_reraised_and_changes_nothing")
        self.assertIn("append", names)
        self.assertEqual(names[-1], "cb")
        if sys.version_info >= (3, 11):
            self.assertIn("kvrt_seq_append", " ".join(caught.__notes__))
        self.assertIsNone(caught.__cause__)
        self.assertEqual(snapshot(t, [a, b]), before)
        self.assertEqual(state["calls"], [(1, 2, 2)])
        # the same append succeeds once the callback does, and copies then
        state["fail"] = False
        slots = t.append(a, 1)
        self.assertEqual(list(slots), [2 * 4 + 2])
        self.assertEqual(state["calls"][-1], (1, 2, 2))
        self.assertEqual(t.stats().copies, 1)

    def test_base_exceptions_and_oserrors_are_reraised(self):
        for exc in (KeyboardInterrupt(), SystemExit(3), OSError(errno.EIO, "device"),
                    kvrt.error_class(errno.ENOSPC)(errno.ENOSPC, "full")):
            def cb(src, dst, n, exc=exc):
                raise exc
            t, a, b = self.shared_partial(cb)
            before = snapshot(t, [a, b])
            with self.assertRaises(type(exc)) as cm:
                t.append(b, 3)
            self.assertIs(cm.exception, exc)
            self.assertEqual(snapshot(t, [a, b]), before)

    def test_callback_must_return_none(self):
        t, a, b = self.shared_partial(lambda s, d, n: 0)
        before = snapshot(t, [a, b])
        with self.assertRaisesRegex(TypeError, "return None"):
            t.append(a, 1)
        self.assertEqual(snapshot(t, [a, b]), before)

    def test_callback_may_not_reenter(self):
        holder = {}

        def cb(src, dst, n):
            holder["t"].stats()

        t, a, b = self.shared_partial(cb)
        holder["t"] = t
        before = snapshot(t, [a, b])
        with self.assertRaisesRegex(RuntimeError, "under the table's lock"):
            t.append(a, 1)
        self.assertEqual(snapshot(t, [a, b]), before)
        # another table may be used from the callback
        other = kvrt.Sequences(4, 4, lambda s, d, n: None)
        self.addCleanup(other.close)
        holder["t"] = other
        t.append(a, 1)
        self.assertEqual(t.stats().copies, 1)

    def test_threads_get_their_own_exceptions(self):
        # Several threads append on one table; each copy fails with an
        # exception naming the thread: each thread must get its own.
        def cb(src, dst, n):
            raise ValueError(threading.current_thread().name)   # idents may be reused

        t = kvrt.Sequences(256, 4, cb)
        self.addCleanup(t.close)
        got = {}
        errors = []

        start = threading.Barrier(4)

        def work():
            me = threading.current_thread().name
            start.wait()
            try:
                for _ in range(50):
                    a = t.add()
                    t.append(a, 2)
                    b = t.fork(a)
                    try:
                        t.append(b, 1)
                    except ValueError as e:
                        got.setdefault(me, set()).add(e.args[0])
                    t.free(a)
                    t.free(b)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ths = [threading.Thread(target=work, name=f"seqs-{k}") for k in range(4)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(got), 4)
        for me, seen in got.items():
            self.assertEqual(seen, {me})
        st = t.stats()
        self.assertEqual((st.nr_seqs, st.free_blocks, st.copies), (0, 256, 0))


class TestThreads(unittest.TestCase):
    def test_close_waits_for_a_call_in_flight(self):
        inside, go = threading.Event(), threading.Event()

        def cb(src, dst, n):
            inside.set()
            go.wait(10)

        t = kvrt.Sequences(8, 4, cb)
        a = t.add()
        t.append(a, 2)
        t.fork(a)
        res = {}
        app = threading.Thread(target=lambda: res.setdefault("slots", t.append(a, 1)))
        app.start()
        self.assertTrue(inside.wait(10))
        closer = threading.Thread(target=t.close)
        closer.start()
        closer.join(0.3)
        self.assertTrue(closer.is_alive(), "close did not wait for the append")
        with self.assertRaisesRegex(ValueError, "closed"):   # no new call starts meanwhile
            t.stats()
        go.set()
        app.join(10)
        closer.join(10)
        self.assertFalse(closer.is_alive())
        self.assertEqual(list(res["slots"]), [1 * 4 + 2])   # block 0 copied to block 1
        self.assertTrue(t.closed)

    def test_concurrent_sequences_keep_their_histories(self):
        nb, bt = 512, 4
        cache = SlotCache(nb, bt)
        lock = threading.Lock()   # the cache's values: written by several threads

        def cb(src, dst, n):
            cache.copy_block(src, dst, n)   # under the table's lock: no two at once

        t = kvrt.Sequences(nb, bt, cb)
        self.addCleanup(t.close)
        models = []
        errors = []

        def work(seed):
            rng = random.Random(seed)
            mine = {}
            try:
                for step in range(150):
                    ids = list(mine)
                    op = rng.choice(["add", "append", "append", "fork", "truncate", "free"])
                    if op == "add" or not ids:
                        mine[t.add()] = []
                    elif op == "append":
                        i = rng.choice(ids)
                        n = rng.randint(1, 6)
                        slots = t.append(i, n)
                        with lock:
                            for k, s in enumerate(slots):
                                cache.v[s] = seed * 10**6 + step * 10 + k
                        mine[i] += [seed * 10**6 + step * 10 + k for k in range(n)]
                    elif op == "fork":
                        i = rng.choice(ids)
                        mine[t.fork(i)] = list(mine[i])
                    elif op == "truncate":
                        i = rng.choice(ids)
                        ln = rng.randint(0, len(mine[i]))
                        t.truncate(i, ln)
                        del mine[i][ln:]
                    else:
                        i = rng.choice(ids)
                        t.free(i)
                        del mine[i]
                models.append(mine)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ths = [threading.Thread(target=work, args=(s,)) for s in range(1, 5)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        self.assertEqual(errors, [])
        model = {k: v for m in models for k, v in m.items()}
        TestModel.check_invariants(self, t, cache, model, t.stats().copies, "threads")


class TestRealData(PoolCase):
    """K/V through append_kv into the slots append returns, copy-on-write
    through kvrt_copy_blocks, decode over block_table(): against float64
    attention over each sequence's own history (no block table involved)."""

    L, H, HQ, D, T, NB = 2, 2, 4, 16, 4, 12

    def test_fork_append_truncate_decode(self):
        rng = np.random.default_rng(7)
        lay = kvrt.Layout.preset(kvrt.LayoutKind.LAYER_MAJOR, self.L, self.H, self.D, self.T,
                                 self.NB, "f32")
        data = np.full(lay.extent() // 4, np.nan, dtype=np.float32)  # unwritten reads: NaN
        arr = kvrt.BlockArray(lay, data)
        pool = self.pool
        t = kvrt.Sequences(self.NB, self.T,
                           lambda s, d, n: pool.copy_blocks(arr, arr, [(s, d)]))
        self.addCleanup(t.close)
        hist = {}

        def append(i, n):
            slots = t.append(i, n)
            kv = rng.standard_normal((self.L, 2, n, self.H, self.D)).astype(np.float32)
            for layer in range(self.L):
                kvrt.append_kv(kvrt.KvCache.of(arr, layer), kv[layer, 0], kv[layer, 1], slots)
            hist[i] = np.concatenate([hist.get(i, np.zeros((self.L, 2, 0, self.H, self.D))),
                                      kv.astype(np.float64)], axis=2)

        a = t.add()
        append(a, 6)                  # the prompt: blocks 0 (full) and 1 (2 tokens)
        b = t.fork(a)
        hist[b] = hist[a].copy()
        c = t.fork(a)
        hist[c] = hist[a].copy()
        append(a, 1)                  # copy-on-write of block 1
        append(b, 3)                  # another copy: c still holds block 1
        append(c, 2)                  # c alone holds block 1: written in place
        self.assertEqual(t.stats().copies, 2)
        append(a, 3)                  # speculative: 3 draft tokens on a ...
        t.truncate(a, 8)              # ... 1 accepted
        hist[a] = hist[a][:, :, :8]
        append(a, 1)
        self.assertEqual(t.blocks(a)[0], t.blocks(b)[0])   # the full prompt block is shared
        ids = [a, b, c]
        table = t.block_table(ids)
        for layer in range(self.L):
            q = rng.standard_normal((3, self.HQ, self.D)).astype(np.float32)
            out = kvrt.attn_decode(q, kvrt.KvCache.of(arr, layer), table)
            ref = np.zeros((3, self.HQ, self.D))
            vs = np.zeros((3, self.HQ))
            for r, i in enumerate(ids):
                K, V = hist[i][layer, 0], hist[i][layer, 1]     # [len][H][D]
                for h in range(self.HQ):
                    kh = h // (self.HQ // self.H)
                    lg = (K[:, kh] @ q[r, h].astype(np.float64)) / np.sqrt(self.D)
                    w = np.exp(lg - lg.max())
                    ref[r, h] = (w / w.sum()) @ V[:, kh]
                    vs[r, h] = np.abs(V[:, kh]).max()
            self.assertLessEqual(row_error(out.astype(np.float64), ref, vs), TOL["f32"],
                                 f"layer {layer}")
        # and the check can fail: b's rows against a's history
        self.assertGreater(row_error(out.astype(np.float64)[[1, 0, 2]], ref, vs),
                           100 * TOL["f32"])


class TestOldLibrary(unittest.TestCase):
    """A library without the 0.5 calls: import works, Sequences refuses."""

    def test_real_library_has_them(self):
        from kvrt import _lib
        self.assertIsNone(_lib.seqs_missing)
        self.assertGreaterEqual(_lib.version_number, 500)

    def stand_in(self, num, ver):
        """A library with every symbol the package declares up to 0.4 but none of 0.5's."""
        from kvrt import _lib
        return stand_in_library(self, num, ver, _lib._PROTOS)

    def refusal(self, so):
        code = ("import errno, kvrt\n"
                "try:\n"
                "    kvrt.Sequences(4, 4, lambda s, d, n: None)\n"
                "except kvrt.NotSupportedError as e:\n"
                "    assert e.errno == errno.EOPNOTSUPP, e.errno\n"
                "    print(e)\n"
                "else:\n"
                "    raise SystemExit('no refusal')\n")
        env = dict(os.environ, KVRT_LIBRARY=so)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        return out.stdout

    def test_version_0_4(self):
        msg = self.refusal(self.stand_in(400, "0.4.0"))
        self.assertIn("libkvrt 0.4.0", msg)
        self.assertIn("need 0.5 or newer", msg)
        self.assertIn("KVRT_LIBRARY", msg)

    def test_0_5_without_the_symbols(self):
        msg = self.refusal(self.stand_in(500, "0.5.0"))
        self.assertIn("lacks kvrt_seqs_create", msg)


if __name__ == "__main__":
    unittest.main()
