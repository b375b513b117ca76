# SPDX-License-Identifier: MIT
"""Cross-process prefix sharing through the real kvpool module, from Python.

Runs in the test VM under host-run (the host's python3, numpy and the kvrt
package, chrooted; /dev/kvpool is the guest's module).  Modes:

  run      the test: runs the others, one after the other, each in its own
           forked process (a fresh interpreter would import numpy again:
           ~20 s under TCG), checks what they report, prints TAP
  writer   creates the space, allocates blocks, fills them through zero-copy
           views, publishes them under chained prompt hashes, reports, then
           stays (holding its references) until the run says it may go
  reader   joins the space, looks the prompt up, reads the prefix back and
           compares it with the pattern; then fills a separate space (a
           second tier) with the same prefix to measure what a copy costs
  foreign  drops to another uid, then tries to join the space without and
           with KVRT_SPACE_FOREIGN (expect_uid)

The other modes also run on their own, as `kvrt_share.py MODE JSON-ARGS`
(the keys are those that mode_run passes), for scenarios that start them
from elsewhere.  Each writes its findings as JSON to the file args["out"]
names; a failed check raises, so the process exits non-zero and its
traceback goes into the TAP output.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Optional

import numpy as np

import kvrt

BLOCK_BYTES = 64 * 1024
BLOCK_TOKENS = 16
PREFIX_BLOCKS = 32          # 2 MiB: one 2 MiB chunk when the pool has them
QUOTA_BYTES = 8 << 20
FOREIGN_UID = 1000
DEVICE = "/dev/kvpool"
PAGE = os.sysconf("SC_PAGE_SIZE")
WAIT_S = 120.0


def need(ok: bool, what: str) -> None:
    """Fail the mode (an assert would vanish under python -O)."""
    if not ok:
        raise AssertionError(what)


def prompt_tokens(extra_blocks: int = 0) -> List[int]:
    """The prompt: PREFIX_BLOCKS full blocks (+ extra_blocks never published)."""
    return list(range(1000, 1000 + (PREFIX_BLOCKS + extra_blocks) * BLOCK_TOKENS))


def pattern() -> np.ndarray:
    """The prefix's bytes, (PREFIX_BLOCKS, BLOCK_BYTES); every process derives it alike."""
    rng = np.random.default_rng(20261126)
    return rng.integers(0, 256, size=(PREFIX_BLOCKS, BLOCK_BYTES), dtype=np.uint8)


def pfns(view: np.ndarray) -> List[int]:
    """Physical frame of each page under ``view`` (/proc/self/pagemap; needs root)."""
    addr = view.ctypes.data
    if addr % PAGE or view.nbytes % PAGE:
        raise ValueError("pfns: pass a page-aligned view of whole pages")
    n = view.nbytes // PAGE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(addr // PAGE * 8)
        raw = f.read(n * 8)
    out = []
    for e in np.frombuffer(raw, dtype="<u8").tolist():
        need(bool(e >> 63), "a page of the view is not present after it was touched")
        pfn = e & ((1 << 55) - 1)
        need(pfn != 0, "pagemap hides the PFNs (not CAP_SYS_ADMIN?)")
        out.append(pfn)
    return out


def prefix_view(space: kvrt.Space, ids: np.ndarray) -> List[np.ndarray]:
    """Zero-copy uint8 views of the blocks ``ids``, in order."""
    return [space.block_view(int(i)) for i in ids]


def used(pool: kvrt.Pool) -> int:
    """Bytes of the pool held by spaces (the module's accounting)."""
    return pool.info().used_bytes


def write_json(path: str, obj: Dict[str, Any]) -> None:
    """Write ``obj`` to ``path`` so that a poller never sees half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)   # the run polls for the file: it appears whole


# ---- children -------------------------------------------------------------

def mode_writer(a: Dict[str, Any]) -> None:
    """Publish the prefix in a new space ``a["space"]``; report to ``a["out"]``;
    hold it until the file ``a["done"]`` exists."""
    with kvrt.Pool("kmod") as pool:
        u0 = used(pool)
        # 0666: the foreign check must be refused by the owner check, not the mode.
        sp = pool.create_space(a["space"], BLOCK_BYTES, QUOTA_BYTES, exclusive=True,
                               mode=0o666)
        ids = sp.alloc(PREFIX_BLOCKS)
        pat = pattern()
        views = prefix_view(sp, ids)
        for v, row in zip(views, pat):
            v[:] = row
        hashes = kvrt.hash_prompt(prompt_tokens(), BLOCK_TOKENS)
        need(len(hashes) == PREFIX_BLOCKS, f"hash_prompt gave {len(hashes)} hashes")
        res = sp.publish(ids, hashes)
        need(res.dedups == 0 and list(res.ids) == list(ids), f"publish: {res}")
        u1 = used(pool)
        st = sp.stats()
        write_json(a["out"], {
            "pid": os.getpid(), "used_before": u0, "used_after": u1,
            "backed_bytes": sp.info().backed_bytes, "published": st.published_blocks,
            "ids": [int(i) for i in ids], "pfns": [p for v in views for p in pfns(v)],
            "sha256": hashlib.sha256(pat.tobytes()).hexdigest(),
            "chunk_size": pool.info().chunk_size,
        })
        # Stay, references held, until the run has done its checks.
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(a["done"]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"writer: no {a['done']} within {WAIT_S}s")
            time.sleep(0.05)
        del views
        sp.release(res.ids)
        sp.close()


def mode_reader(a: Dict[str, Any]) -> None:
    """Join ``a["space"]``, read the prefix back; cost a second tier; report."""
    with kvrt.Pool("kmod") as pool:
        u0 = used(pool)
        sp = pool.join_space(a["space"])
        # One more block than was published: the lookup must stop at the prefix.
        hashes = kvrt.hash_prompt(prompt_tokens(extra_blocks=1), BLOCK_TOKENS)
        hit = sp.lookup(hashes)
        need(len(hit) == PREFIX_BLOCKS, f"lookup hit {len(hit)} of {PREFIX_BLOCKS} blocks")
        views = prefix_view(sp, hit)
        got = np.stack([v.copy() for v in views])
        want = pattern()
        bad = int(np.count_nonzero((got != want).any(axis=1)))
        need(bad == 0, f"{bad} of {PREFIX_BLOCKS} blocks differ from the writer's bytes")
        my_pfns = [p for v in views for p in pfns(v)]
        u1 = used(pool)
        st = sp.stats()
        joined = {"used_before": u0, "used_after": u1, "ids": [int(i) for i in hit],
                  "pfns": my_pfns, "sha256": hashlib.sha256(got.tobytes()).hexdigest(),
                  "backed_bytes": sp.info().backed_bytes, "published": st.published_blocks,
                  "hits": st.hits}
        del views
        sp.release(hit)
        sp.close()

        # A second, separate tier holding the same prefix: what it costs.
        c0 = used(pool)
        with pool.create_space(a["space"] + "-copy", BLOCK_BYTES, QUOTA_BYTES,
                               exclusive=True) as cp:
            cids = cp.alloc(PREFIX_BLOCKS)
            for i, row in zip(cids, got):
                cp.block_view(int(i))[:] = row
            c1 = used(pool)
        write_json(a["out"], dict(joined, copy_used_before=c0, copy_used_after=c1))


def mode_foreign(a: Dict[str, Any]) -> None:
    """As uid FOREIGN_UID: try ``a["space"]`` without, then with expect_uid; report."""
    uid = FOREIGN_UID
    # kvpool fixes rights when the device is opened: drop first, then open.
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    out: Dict[str, Any] = {"uid": os.geteuid()}
    with kvrt.Pool("kmod") as pool:
        for what, fn in (
                ("join", lambda: pool.join_space(a["space"])),
                ("join_expect_other", lambda: pool.join_space(a["space"],
                                                              expect_uid=uid + 1)),
                ("create_or_join", lambda: pool.create_space(a["space"], BLOCK_BYTES,
                                                             QUOTA_BYTES, mode=0o666))):
            try:
                fn().close()
                out[what] = "joined"
            except kvrt.KvrtError as e:
                out[what] = type(e).__name__
        # The positive control: naming the owner lets the same uid in.
        with pool.join_space(a["space"], expect_uid=0) as sp:
            hit = sp.lookup(kvrt.hash_prompt(prompt_tokens(), BLOCK_TOKENS))
            got = np.stack([sp.block_view(int(i)).copy() for i in hit]) if len(hit) else None
            out["foreign_hits"] = len(hit)
            out["foreign_sha256"] = (hashlib.sha256(got.tobytes()).hexdigest()
                                     if got is not None else "")
            out["foreign_owner"] = sp.info().uid
            if len(hit):
                sp.release(hit)
    write_json(a["out"], out)


# ---- the run ----------------------------------------------------------------

class Tap:
    """TAP lines, one per check; a failed check's reason follows as comments."""

    def __init__(self) -> None:
        self.n = 0
        self.failed = 0

    def check(self, ok: bool, what: str, why: str = "") -> bool:
        self.n += 1
        print(f"{'ok' if ok else 'not ok'} {self.n} - {what}", flush=True)
        if not ok:
            self.failed += 1
            for line in why.splitlines():
                print(f"# {line}", flush=True)
        return ok


class Child:
    """A mode run in a forked process: its own pid and address space, but no
    second interpreter start (importing numpy takes ~20 s under TCG)."""

    def __init__(self, mode: str, args: Dict[str, Any], log: str) -> None:
        self.log = log
        self.returncode: Optional[int] = None
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            rc = 1
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                MODES[mode](args)
                rc = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(st)
        return self.returncode

    def finish(self, timeout: float = WAIT_S) -> str:
        """Wait (killing it after ``timeout``); its status and output."""
        deadline = time.monotonic() + timeout
        note = ""
        while self.poll() is None:
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self.returncode = -signal.SIGKILL
                note = f"\n(killed after {timeout}s)"
                break
            time.sleep(0.05)
        try:
            with open(self.log) as f:
                out = f.read()
        except OSError as e:
            out = f"(no output: {e})"
        return f"exit status {self.returncode}\n{out}{note}"


def wait_file(path: str, child: Child, wait_s: float = WAIT_S) -> bool:
    """Whether path appeared before child ended or wait_s passed."""
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path):
        if child.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def load(path: str) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def first_report(tap: Tap, child: Child, path: str, what: str,
                 wait_s: float = WAIT_S) -> Optional[Dict[str, Any]]:
    """The first child's JSON report, checked as what; None (the check
    failed, with the child's output) when it ended or wait_s passed first."""
    ok = wait_file(path, child, wait_s)
    if not tap.check(ok, what, "" if ok else child.finish(1)):
        return None
    return load(path)


def mode_run() -> int:
    """The test: writer, then reader, then foreign; TAP out, 0 when all passed."""
    tap = Tap()
    print("TAP version 13\n1..7", flush=True)
    tmp = tempfile.mkdtemp(prefix="kvrt-share.")
    os.chmod(tmp, 0o1777)   # the foreign child writes its report as uid FOREIGN_UID
    logs = {k: os.path.join(tmp, k + ".log") for k in ("writer", "reader", "foreign")}
    space = f"kvrt-share-py-{os.getpid()}"
    files = {k: os.path.join(tmp, k + ".json") for k in ("writer", "reader", "foreign")}
    done = os.path.join(tmp, "done")
    with kvrt.Pool("kmod") as pool:
        start_used = used(pool)
        print(f"# {kvrt.LIBRARY}; {pool.backend_info}; pool {pool.info().pool_bytes} bytes",
              flush=True)

    # The pool is closed: no child inherits a kvpool fd or mapping.
    writer = Child("writer", {"space": space, "out": files["writer"], "done": done},
                   logs["writer"])
    try:
        w = first_report(tap, writer, files["writer"],
                         f"writer (pid {writer.pid}) published {PREFIX_BLOCKS} blocks")
        if w is None:
            return 1
        # The reader starts only now, after the writer published.
        r_out = Child("reader", {"space": space, "out": files["reader"]},
                      logs["reader"]).finish()
        ok = os.path.exists(files["reader"])
        r = load(files["reader"]) if ok else {}
        tap.check(ok and r["sha256"] == w["sha256"] and r["ids"] == w["ids"],
                  "reader (separate process) found the prefix and read the writer's bytes",
                  r_out if not ok else f"reader {r.get('sha256')} ids {r.get('ids')}\n"
                  f"writer {w['sha256']} ids {w['ids']}")
        same = ok and r["pfns"] == w["pfns"]
        tap.check(same, f"reader maps the writer's physical pages ({len(w['pfns'])} PFNs)",
                  "" if not ok else
                  f"{sum(a != b for a, b in zip(w['pfns'], r['pfns']))} PFNs differ")

        prefix = PREFIX_BLOCKS * BLOCK_BYTES
        shared = w["used_after"] - w["used_before"]
        joined = r.get("used_after", -1) - w["used_before"]
        second = r.get("copy_used_after", 0) - r.get("copy_used_before", 0)
        print(f"# prefix {prefix} bytes; pool used: writer +{shared}, with the reader "
              f"joined and read too +{joined}; a separate tier +{second}, so two tiers "
              f"would hold +{shared + second}", flush=True)
        tap.check(ok and shared >= prefix and joined == shared and second >= prefix
                  and r["backed_bytes"] == w["backed_bytes"]
                  and r["published"] == w["published"] == PREFIX_BLOCKS,
                  "pool accounting holds one copy of the prefix for both processes",
                  json.dumps({k: v for k, v in r.items() if k not in ("pfns", "ids")})
                  + "\n" + json.dumps({k: v for k, v in w.items()
                                       if k not in ("pfns", "ids")}))

        # Another uid may open the device here, but not the space.
        dev_mode = os.stat(DEVICE).st_mode & 0o7777
        os.chmod(DEVICE, 0o666)
        try:
            f_out = Child("foreign", {"space": space, "out": files["foreign"]},
                          logs["foreign"]).finish()
        finally:
            os.chmod(DEVICE, dev_mode)
        ok = os.path.exists(files["foreign"])
        fo = load(files["foreign"]) if ok else {}
        tap.check(ok and fo["uid"] == FOREIGN_UID and fo["join"] == "AccessError"
                  and fo["join_expect_other"] == "AccessError"
                  and fo["create_or_join"] == "ExistsError",
                  f"uid {FOREIGN_UID} cannot join root's space (EACCES), nor with the "
                  "wrong expect_uid (EACCES), nor create-or-join it (EEXIST)",
                  f_out if not ok else json.dumps(fo))
        tap.check(ok and fo["foreign_hits"] == PREFIX_BLOCKS and fo["foreign_owner"] == 0
                  and fo["foreign_sha256"] == w["sha256"],
                  f"uid {FOREIGN_UID} with expect_uid=0 (FOREIGN) joins and reads the prefix",
                  f_out if not ok else json.dumps(fo))
    finally:
        with open(done, "w"):
            pass
        w_out = writer.finish()
    with kvrt.Pool("kmod") as pool:
        end_used = used(pool)
    tap.check(writer.returncode == 0 and end_used == start_used,
              "writer exited cleanly and the pool is back to its starting use",
              f"pool used {start_used} at start, {end_used} at the end\n{w_out}")
    return 1 if tap.failed else 0


def main_run_only(mode_run_fn, started: float) -> int:
    """main() of an engine test whose children are forked, not run by mode."""
    if sys.argv[1:] != ["run"]:
        print(f"usage: {sys.argv[0]} run", file=sys.stderr)
        return 2
    rc = mode_run_fn()
    print(f"# total {time.monotonic() - started:.0f}s", flush=True)
    return rc


MODES = {"writer": mode_writer, "reader": mode_reader, "foreign": mode_foreign}


def main() -> int:
    modes = MODES
    if len(sys.argv) == 2 and sys.argv[1] == "run":
        return mode_run()
    if len(sys.argv) == 3 and sys.argv[1] in modes:
        modes[sys.argv[1]](json.loads(sys.argv[2]))
        return 0
    print(f"usage: {sys.argv[0]} run | {'|'.join(modes)} JSON-ARGS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
