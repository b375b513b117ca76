#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What the Python binding costs over C: the same libkvrt calls timed from
Python (through the kvrt package) and from C (bind_overhead.c, compiled
here against the same library) in one run, printed as kvbench JSON lines:

    {"bench":"python","case":"lookup_prefix1000","value":<Python ns/block>,
     "unit":"ns/block (cost; ratio = limit/value)","limit":<C ns/block>,
     "limit_unit":"ns/block same calls from C","ratio":<C / Python>}

Cases: lookup_prefix1000 (kvrt_lookup of 1,000 cached hashes, all hits,
then kvrt_release of the ids: Space.lookup + Space.release) and
publish_batch1000 (kvrt_publish of 1,000 owned blocks under new hashes:
Space.publish; the alloc before and the release after are not timed).
C and Python take turns, one repetition of --iters calls each, --reps
times; the pair reported is the one whose ratio is the median (as
kvbench's kvb_middle_pair: a value and the limit measured next to it saw
the same machine).

    python3 libkvrt/python/bench/bind_overhead.py [--reps 11] [--iters 200]

Uses the in-tree build (libkvrt/build) unless KVRT_LIBRARY is set, and
CC (default cc) for the C side.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIBKVRT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(LIBKVRT, "python", "src"))
os.environ.setdefault("KVRT_LIBRARY", os.path.join(LIBKVRT, "build", "libkvrt.so.0"))

import numpy as np  # noqa: E402

import kvrt  # noqa: E402

N = 1000


def hashes(series):
    """As bind_overhead.c makes them: le32(i), le32(series), zeros, 0xA5."""
    h = np.zeros((N, 32), np.uint8)
    h[:, 0:4] = np.arange(N, dtype="<u4").view(np.uint8).reshape(N, 4)
    h[:, 4:8] = np.frombuffer(np.uint32(series).astype("<u4").tobytes(), np.uint8)
    h[:, 31] = 0xA5
    return h


class PythonSide:
    """The Python calls, on one pool and space kept for the whole run."""

    def __init__(self):
        self.pool = kvrt.Pool("embedded", no_hugetlb=True)
        self.sp = self.pool.create_space("bind-overhead-py", block_bytes=4096,
                                         quota_bytes=4096 * 4 * N)
        self.prefix = hashes(0)
        ids = self.sp.alloc(N)
        # the highest priority: the publish cases' blocks are evicted first
        self.sp.publish(ids, self.prefix, priorities=[kvrt.PRIO_MAX] * N)
        self.sp.release(ids)
        self.series = 1 << 16    # apart from the prefix's series 0

    def rep(self, iters):
        sp, prefix = self.sp, self.prefix
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            got = sp.lookup(prefix)
            sp.release(got)
        lookup = (time.perf_counter_ns() - t0) / iters / N
        if len(got) != N:
            raise SystemExit(f"bind_overhead: lookup found {len(got)} of {N}")
        total = 0
        for _ in range(iters):
            h = hashes(self.series)
            self.series += 1
            ids = sp.alloc(N)
            t0 = time.perf_counter_ns()
            res = sp.publish(ids, h)
            total += time.perf_counter_ns() - t0
            sp.release(res.ids)
        return {"lookup_prefix1000": lookup, "publish_batch1000": total / iters / N}

    def close(self):
        self.sp.close()
        self.pool.close()


def build_c(d):
    lib = os.environ["KVRT_LIBRARY"]
    exe = os.path.join(d, "bind_overhead")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-std=gnu11", "-I",
                    os.path.join(LIBKVRT, "include"), "-o", exe,
                    os.path.join(HERE, "bind_overhead.c"), lib,
                    "-Wl,-rpath," + os.path.dirname(lib)], check=True)
    return exe


def c_rep(exe, iters):
    out = subprocess.run([exe, "1", str(iters)], check=True, capture_output=True,
                         text=True).stdout
    return {name: float(v) for name, v in (line.split() for line in out.splitlines())}


def middle_pair(vals, lims):
    """The (value, limit) pair measured side by side whose ratio is the
    median (the upper middle for an even count), as kvbench reports."""
    pairs = sorted(zip(vals, lims), key=lambda p: p[1] / p[0])
    return pairs[len(pairs) // 2]


def fmt(x):
    return float(f"{x:.4g}") if x < 1000 else round(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--iters", type=int, default=200)
    a = ap.parse_args()
    if not 1 <= a.reps <= 99 or a.iters < 1:
        ap.error("--reps 1..99, --iters >= 1")
    cases = ("lookup_prefix1000", "publish_batch1000")
    py_v = {c: [] for c in cases}
    c_v = {c: [] for c in cases}
    py = PythonSide()
    with tempfile.TemporaryDirectory() as d:
        exe = build_c(d)
        # C and Python alternate, so each pair saw the same machine
        for _ in range(a.reps):
            cr, pr = c_rep(exe, a.iters), py.rep(a.iters)
            for c in cases:
                c_v[c].append(cr[c])
                py_v[c].append(pr[c])
    py.close()
    for case in cases:
        v, lim = middle_pair(py_v[case], c_v[case])
        print(json.dumps({"bench": "python", "case": case, "value": fmt(v),
                          "unit": "ns/block (cost; ratio = limit/value)", "limit": fmt(lim),
                          "limit_unit": "ns/block same calls from C",
                          "ratio": float(f"{lim / v:.4g}")}, separators=(",", ":")))

if __name__ == "__main__":
    main()
