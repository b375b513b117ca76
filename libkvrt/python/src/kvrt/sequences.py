# SPDX-License-Identifier: MIT
"""Sequence block tables (libkvrt 0.5): ``struct kvrt_seqs``.

A :class:`Sequences` hands out the block ids ``0 .. nr_blocks - 1`` of a
paged cache that stays the caller's (a numpy array, a torch tensor, a pool
space, GPU memory), to many sequences, with a reference count per block.
:meth:`Sequences.fork` shares every block of a sequence (beam search,
parallel sampling); the first :meth:`Sequences.append` by either side into
a shared partial last block copies it first through the caller's
``copy_block(src, dst, ntokens)`` (copy-on-write); :meth:`Sequences.truncate`
rolls tokens back (speculative decoding).  :meth:`Sequences.append` returns
the slots to write with :func:`kvrt.append_kv`, :meth:`Sequences.block_table`
the CSR table for :func:`kvrt.attn_decode` / :func:`kvrt.attn_prefill`.

Every method is thread-safe, as the C calls are (a mutex per table);
:meth:`Sequences.close` waits for the calls in flight and then refuses new
ones.  The callback runs under the table's lock, in the thread that called
:meth:`Sequences.append`: it must not call into the same table (that
raises ``RuntimeError`` instead of deadlocking).
"""
from __future__ import annotations

import array
import ctypes
import dataclasses
import errno
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, cast

import numpy as np

from . import _lib
from ._call import call, need_uint
from .attention import BlockTable
from .errors import KvrtError, too_old

#: copy_block(src_block, dst_block, ntokens) -> None
CopyBlock = Callable[[int, int, int], None]

_I32 = "i"
_I64 = "q"
_U32 = "I"
_U64 = "Q"
for _code, _size in ((_I32, 4), (_I64, 8), (_U32, 4), (_U64, 8)):
    assert array.array(_code).itemsize == _size, _code  # noqa: S101 - a platform this binding does not know

_ENOENT = ("not a live sequence of this table (freed, or another table's): pass an id "
           "that add(), add_blocks() or fork() returned")


def _unknown(what: str) -> Dict[int, str]:
    return {errno.ENOENT: f"{what}: {_ENOENT}"}


@dataclasses.dataclass(frozen=True)
class SeqsStats:
    """``struct kvrt_seqs_stats``.

    ``used_blocks`` against ``block_refs`` is what sharing saves: the blocks
    in use, and the blocks the same sequences would use as independent copies.
    """

    nr_blocks: int
    block_tokens: int
    free_blocks: int
    used_blocks: int
    shared_blocks: int
    nr_seqs: int
    block_refs: int
    copies: int


class _CallbackState:
    """What the C callback reaches: the caller's function, and per thread
    whether it is running and what it raised (so the exception is re-raised
    by the append that called it, in that thread)."""

    __slots__ = ("fn", "tls")

    def __init__(self, fn: CopyBlock) -> None:
        self.fn = fn
        self.tls = threading.local()


def _trampoline(state: _CallbackState) -> Any:
    def copy_block(_arg: Any, src: int, dst: int, ntokens: int) -> int:
        tls = state.tls
        tls.inside = True
        try:
            ret = state.fn(src, dst, ntokens)
            if ret is not None:
                raise TypeError(f"copy_block returned {ret!r}: return None when the copy is "
                                "done, raise to fail it")
            return 0
        except BaseException as e:  # noqa: BLE001 - a C callback must not propagate
            tls.error = e
            err = getattr(e, "errno", None)
            # The C call reports the exception's errno (or EIO); Python re-raises it.
            return -err if isinstance(err, int) and 0 < err < 4096 else -errno.EIO
        finally:
            tls.inside = False
    return _lib.COPY_BLOCK_FN(copy_block)


def _destroy(ptr: int, _keep: Any) -> None:
    # _keep: the C callback object, which must outlive the table.
    _lib.lib.kvrt_seqs_destroy(ptr)


def _seq_id(v: Any, what: str = "seq_id") -> int:
    return need_uint(v, what, 64)


def _ids_array(ids: Iterable[int]) -> "array.array[int]":
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"ids: pass a sequence of sequence ids (ints), not {type(ids).__name__}")
    return array.array(_U64, [_seq_id(v, f"ids[{i}]") for i, v in enumerate(ids)])


def _addr(a: "array.array[int]") -> Optional[int]:
    return a.buffer_info()[0] if len(a) else None


class Sequences:
    """``struct kvrt_seqs``: the block tables of many sequences over a cache
    of ``nr_blocks`` blocks of ``block_tokens`` tokens.

    ``copy_block(src, dst, ntokens)`` copies the first ``ntokens`` token
    slots of block ``src`` into block ``dst`` of the caller's cache (all
    layers, K and V; copying the whole block is fine), e.g. with
    :meth:`kvrt.Pool.copy_blocks` on pair ``(src, dst)``.  It returns None;
    an exception it raises fails the append with nothing changed and is
    re-raised by that :meth:`append`.

    A context manager; :meth:`close` is ``kvrt_seqs_destroy``.  Needs
    libkvrt 0.5: with an older library, creating one raises
    :class:`kvrt.NotSupportedError` saying so.
    """

    def __init__(self, nr_blocks: int, block_tokens: int, copy_block: CopyBlock) -> None:
        self._ptr: Optional[int] = None
        if _lib.seqs_missing is not None:
            raise too_old("kvrt_seqs_create", _lib.seqs_missing)
        nb = need_uint(nr_blocks, "nr_blocks")
        bt = need_uint(block_tokens, "block_tokens")
        if not callable(copy_block):
            raise TypeError("copy_block: pass a callable (src, dst, ntokens) -> None, not "
                            f"{type(copy_block).__name__}")
        self._state = _CallbackState(copy_block)
        self._cfn = _trampoline(self._state)
        self._cond = threading.Condition()
        self._active = 0
        opts = _lib.SeqsOptsC(nb, bt, self._cfn, None)
        p = ctypes.c_void_p()
        call("kvrt_seqs_create", ctypes.byref(p), ctypes.byref(opts),
             detail=f"nr_blocks {nb}, block_tokens {bt}: pass both >= 1, with "
                    "nr_blocks * block_tokens at most 2**31 - 1 (CSR positions are int32)")
        self._ptr = p.value
        self.nr_blocks = nb
        self.block_tokens = bt
        self._finalizer = weakref.finalize(self, _destroy, cast(int, p.value), self._cfn)

    # ---- plumbing ----------------------------------------------------------

    def _enter(self) -> int:
        if getattr(self._state.tls, "inside", False):
            raise RuntimeError("copy_block called into its own kvrt.Sequences: the callback "
                               "runs under the table's lock; copy the block and return")
        with self._cond:
            if self._ptr is None:
                raise ValueError("the sequences are closed: create a new kvrt.Sequences")
            self._active += 1
            return self._ptr

    def _leave(self) -> None:
        with self._cond:
            self._active -= 1
            if not self._active:
                self._cond.notify_all()

    def _call(self, name: str, *args: Any, why: Optional[Dict[int, str]] = None) -> int:
        """The C call on this table; ``why`` words each errno's advice."""
        ptr = self._enter()
        tls = self._state.tls
        tls.error = None
        pending: Optional[BaseException] = None
        try:
            return call(name, ptr, *args, why=why)
        except KvrtError:
            pending = tls.error
            if pending is None:
                raise
        finally:
            tls.error = None
            self._leave()
        # Outside the except block, so it is not chained to the errno it became.
        if hasattr(pending, "add_note"):
            pending.add_note(f"raised by the copy_block callback of kvrt.Sequences ({name}); "
                             "the call changed nothing")
        raise pending

    def close(self) -> None:
        """``kvrt_seqs_destroy``: waits for calls in flight; then every call
        raises ValueError.  Idempotent."""
        if getattr(self._state.tls, "inside", False):
            raise RuntimeError("copy_block cannot close its own kvrt.Sequences")
        with self._cond:
            self._ptr = None
            while self._active:
                self._cond.wait()
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def __enter__(self) -> "Sequences":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._ptr is None:
            return "<kvrt.Sequences closed>"
        st = self.stats()
        return (f"<kvrt.Sequences {st.nr_seqs} sequences, {st.used_blocks}/{st.nr_blocks} "
                f"blocks of {st.block_tokens} tokens used>")

    # ---- sequences ---------------------------------------------------------

    def add(self) -> int:
        """``kvrt_seq_add``: a new empty sequence; returns its id (never 0)."""
        out = ctypes.c_uint64()
        self._call("kvrt_seq_add", ctypes.byref(out))
        return out.value

    def add_blocks(self, blocks: Iterable[int], ntokens: int) -> int:
        """``kvrt_seq_add_blocks``: a new sequence of ``ntokens`` tokens in
        ``blocks`` (free blocks the caller has filled, e.g. from a prefix-cache
        hit), in token order; ``len(blocks)`` must be ``ceil(ntokens /
        block_tokens)``.  Returns its id."""
        if isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__iter__"):
            raise TypeError(f"blocks: pass a sequence of block ids, not {type(blocks).__name__}")
        b = array.array(_U32, [need_uint(v, f"blocks[{i}]") for i, v in enumerate(blocks)])
        nt = need_uint(ntokens, "ntokens")
        out = ctypes.c_uint64()
        want = -(-nt // self.block_tokens)
        self._call("kvrt_seq_add_blocks", len(b), _addr(b), nt, ctypes.byref(out), why={
            errno.EINVAL: f"{len(b)} blocks for {nt} tokens: pass ceil(ntokens / "
                          f"{self.block_tokens}) = {want} distinct blocks < {self.nr_blocks}",
            errno.EBUSY: "a block is held by a sequence: pass free blocks only"})
        return out.value

    def append(self, seq_id: int, n: int) -> "array.array[int]":
        """``kvrt_seq_append``: reserve ``n`` more tokens; returns their slots
        (``block * block_tokens + offset``, an ``array.array`` of int64, what
        :func:`kvrt.append_kv` takes).  Copies a shared partial last block
        first (copy-on-write).  :class:`kvrt.NoSpaceError` when the free
        blocks do not suffice: then nothing is taken and nothing copied."""
        sid = _seq_id(seq_id)
        k = need_uint(n, "n")
        if k > self.nr_blocks * self.block_tokens:
            raise ValueError(f"n {k}: more tokens than the whole table holds "
                             f"({self.nr_blocks} blocks of {self.block_tokens})")
        slots = array.array(_I64, bytes(8 * k))
        self._call("kvrt_seq_append", sid, k, _addr(slots), why={
            errno.ENOENT: f"sequence {sid}: {_ENOENT}",
            errno.ENOSPC: f"sequence {sid}, {k} more tokens: too few free blocks (a shared "
                          "partial block needs one more for its copy); free or truncate "
                          "sequences first"})
        return slots

    def fork(self, parent: int) -> int:
        """``kvrt_seq_fork``: a new sequence sharing every block of ``parent``;
        returns its id."""
        pid = _seq_id(parent, "parent")
        out = ctypes.c_uint64()
        self._call("kvrt_seq_fork", pid, ctypes.byref(out), why=_unknown(f"parent {pid}"))
        return out.value

    def truncate(self, seq_id: int, length: int) -> None:
        """``kvrt_seq_truncate``: keep the first ``length`` tokens.  A length
        beyond the sequence's raises :class:`kvrt.OutOfBoundsError` (ERANGE)."""
        sid = _seq_id(seq_id)
        ln = need_uint(length, "length")
        self._call("kvrt_seq_truncate", sid, ln, why={
            errno.ENOENT: f"sequence {sid}: {_ENOENT}",
            errno.ERANGE: f"sequence {sid} to {ln} tokens: longer than the sequence; pass "
                          "at most its len()"})

    def free(self, seq_id: int) -> None:
        """``kvrt_seq_free``: drop the sequence; its id stays unknown."""
        sid = _seq_id(seq_id)
        self._call("kvrt_seq_free", sid, why=_unknown(f"sequence {sid}"))

    def len(self, seq_id: int) -> int:
        """``kvrt_seq_len``: the sequence's length in tokens."""
        sid = _seq_id(seq_id)
        return self._call("kvrt_seq_len", sid, why=_unknown(f"sequence {sid}"))

    def blocks(self, seq_id: int) -> List[int]:
        """``kvrt_seq_blocks``: the sequence's blocks in token order (the first
        ``len // block_tokens`` are full)."""
        sid = _seq_id(seq_id)
        cap = -(-self.len(sid) // self.block_tokens)
        while True:   # another thread may append between the two calls
            buf = array.array(_U32, bytes(4 * cap))
            try:
                n = self._call("kvrt_seq_blocks", sid, _addr(buf), cap,
                               why=_unknown(f"sequence {sid}"))
            except KvrtError as e:
                if e.errno != errno.ENOSPC:
                    raise
                cap = max(2 * cap, 1)
                continue
            return buf[:n].tolist()

    def csr(self, ids: Iterable[int]) -> Tuple["array.array[int]", "array.array[int]",
                                                "array.array[int]"]:
        """``kvrt_seqs_csr``: ``(indptr, indices, seq_lens)`` of the sequences
        ``ids`` (in that order, an id may repeat), as int32 ``array.array``s.
        :meth:`block_table` wraps them for the attention calls."""
        idv = _ids_array(ids)
        n = len(idv)
        if n > 2**31 - 1:
            raise ValueError(f"ids: {n} sequences; pass at most 2**31 - 1")
        why = _unknown("an id in ids")
        need = ctypes.c_uint32()
        self._call("kvrt_seqs_csr_size", n, _addr(idv), ctypes.byref(need), why=why)
        cap = need.value
        indptr = array.array(_I32, bytes(4 * (n + 1)))
        seq_lens = array.array(_I32, bytes(4 * n))
        while True:   # another thread may append between size and fill
            indices = array.array(_I32, bytes(4 * cap))
            try:
                got = self._call("kvrt_seqs_csr", n, _addr(idv), _addr(indptr),
                                 _addr(indices), cap, _addr(seq_lens), why=why)
            except KvrtError as e:
                if e.errno != errno.ENOSPC:
                    raise
                cap = max(2 * cap, 1)
                continue
            del indices[got:]
            return indptr, indices, seq_lens

    def block_table(self, ids: Iterable[int]) -> BlockTable:
        """A :class:`kvrt.BlockTable` over :meth:`csr` of ``ids``, for
        :func:`kvrt.attn_decode` / :func:`kvrt.attn_prefill` (leave empty
        sequences out: attention needs at least one token each)."""
        indptr, indices, seq_lens = self.csr(ids)
        return BlockTable(np.frombuffer(indptr, dtype=np.int32),
                          np.frombuffer(indices, dtype=np.int32) if len(indices)
                          else np.zeros(0, np.int32),
                          np.frombuffer(seq_lens, dtype=np.int32) if len(seq_lens)
                          else np.zeros(0, np.int32))

    def block_refs(self, block: int) -> int:
        """``kvrt_seqs_block_refs``: how many sequences hold ``block``."""
        b = need_uint(block, "block")
        if b >= self.nr_blocks:
            raise ValueError(f"block {b}: pass 0..{self.nr_blocks - 1}")
        return self._call("kvrt_seqs_block_refs", b)

    def stats(self) -> SeqsStats:
        """``kvrt_seqs_stats``."""
        st = _lib.SeqsStatsC()
        self._call("kvrt_seqs_stats", ctypes.byref(st))
        return SeqsStats(st.nr_blocks, st.block_tokens, st.free_blocks, st.used_blocks,
                         st.shared_blocks, st.nr_seqs, st.block_refs, st.copies)


__all__ = ["Sequences", "SeqsStats", "CopyBlock"]
