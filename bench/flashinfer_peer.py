#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""flashinfer_peer.py: FlashInfer's paged decode and prefill on the page
layout and page table of `kvbench gpu-attn`, side by side with libkvrt.

What it builds, per case BATCH x CTX (the lists as kvbench's --batches and
--contexts, so the cases and their seeds are kvbench's):

  - one K/V cache for all cases, as kvbench's: libkvrt's layer-major layout
    of one layer, [K/V][page][16 tokens][8 KV heads][128] bf16, as many pages
    as the largest case needs; FlashInfer gets (cache[0], cache[1]), each
    [pages, 16, 8, 128]: its "NHD" paged layout, the same bytes;
  - the page table kvbench's gpu-attn uses: a Fisher-Yates shuffle of every
    page with kvbench's xorshift64 and seed (1000 + 31 * batch index +
    context index), sequence s taking pages [s * P, (s + 1) * P) of it,
    P = CTX / 16, CTX rounded down to a multiple of 16 as kvbench does;
  - decode: BatchDecodeWithPagedKVCacheWrapper, 32 query heads over 8 KV
    heads, head dim 128, sm_scale 1/sqrt(128), one query token per sequence
    seeing all CTX keys; with use_tensor_cores off ("simt") and on ("tc");
  - prefill: BatchPrefillWithPagedKVCacheWrapper, causal, the last
    --prefill-q query tokens of each sequence (default: all CTX) over its
    CTX keys.

Timing: CUDA events around --inner back-to-back run() calls (plan once,
before), --warmup calls first (the JIT build happens there), --iters
repetitions, the median per call.  Launch cost is included, as kvbench
includes it.

Output: kvbench's JSON lines (bench, case, value, unit, limit, limit_unit,
ratio), bench "flashinfer-peer":

  flashinfer_decode_{simt,tc}_bB_ctxC
      value: GB/s of K/V read (B x C x 8 x 128 x 2 bytes x K and V, the
      count kvbench's decode lines use); limit: GB/s of torch.sum over the
      same number of cache bytes (a read-only stream, CUDA events, median);
      ratio = value / limit (compare with kvbench's decode_read_bB_ctxC,
      whose limit is kvrt_gpu_read_stream over the same count)
  flashinfer_decode_{simt,tc}_bB_ctxC_us
      value: microseconds per call; limit: the microseconds of those bytes at
      the read rate; ratio = limit / value
  flashinfer_prefill_bB_ctxC_qQ
      value: TFLOP/s of the causal attention done (4 x 128 x 32 heads x the
      visible (query, key) pairs); limit: TFLOP/s of a dense bf16 8192^3
      torch.matmul measured in the same run; ratio = value / limit

Notes (versions, device, skipped cases and why) go to stderr, as kvbench's.

--dry-run builds the page tables and the layout without torch or
flashinfer and prints one JSON line per case describing them (pages, shape,
strides, the first indices, a digest of the table), for checks on a machine
without a GPU.

Exit status: 0; 1 when every case failed; 2 usage; 3 when torch, CUDA or
flashinfer is missing (one note says which).
"""
import argparse
import hashlib
import json
import statistics
import sys

PAGE = 16
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
ESIZE = 2  # bf16
M64 = (1 << 64) - 1
BENCH = "flashinfer-peer"


def int_list(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of numbers")
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"'{s}': numbers from 1")
    return v


def parse(argv=None):
    p = argparse.ArgumentParser(
        description="FlashInfer paged decode/prefill on kvbench gpu-attn's page layout and "
        "page table; kvbench JSON lines on stdout.")
    p.add_argument("--batches", type=int_list, default=[1, 8, 32, 64],
                   help="comma-separated batch sizes, as kvbench's (default 1,8,32,64)")
    p.add_argument("--contexts", type=int_list, default=[1024, 4096],
                   help="tokens per sequence, as kvbench's (default 1024,4096)")
    p.add_argument("--decode", default="simt,tc",
                   help="decode variants: simt (use_tensor_cores=False), tc, or both "
                   "(default simt,tc); 'none' for no decode")
    p.add_argument("--no-prefill", action="store_true", help="decode only")
    p.add_argument("--prefill-q", type=int, default=0,
                   help="query tokens per sequence for prefill (default 0: the whole context)")
    p.add_argument("--iters", type=int, default=20, help="timed repetitions (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    p.add_argument("--inner", type=int, default=0,
                   help="calls per repetition (default: about 2 ms worth)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    p.add_argument("--dry-run", action="store_true",
                   help="build and describe the page tables only: no torch, no flashinfer")
    a = p.parse_args(argv)
    variants = [] if a.decode == "none" else a.decode.split(",")
    if any(v not in ("simt", "tc") for v in variants) or len(set(variants)) != len(variants):
        p.error(f"--decode takes simt, tc, simt,tc or none, not '{a.decode}'")
    a.variants = variants
    if a.iters < 1 or a.warmup < 0 or a.inner < 0 or a.prefill_q < 0:
        p.error("--iters >= 1, --warmup >= 0, --inner >= 0, --prefill-q >= 0")
    if len(a.batches) * len(a.contexts) > 64:
        p.error("at most 64 batch x context combinations (as kvbench)")
    return a


def note(msg):
    print(f"flashinfer_peer: {msg}", file=sys.stderr, flush=True)


def emit(case, value, unit, limit, limit_unit, cost=False):
    ratio = (limit / value if cost else value / limit) if value > 0 and limit > 0 else 0.0
    print(json.dumps({"bench": BENCH, "case": case, "value": round(value, 6), "unit": unit,
                      "limit": round(limit, 6), "limit_unit": limit_unit,
                      "ratio": round(ratio, 6)}), flush=True)


# ---- kvbench's page table, without torch ----------------------------------------


def xorshift(s):
    """kvb_xorshift(): (new state, value), 64-bit."""
    s ^= (s << 13) & M64
    s ^= s >> 7
    s ^= (s << 17) & M64
    return s, s


def shuffle(n, seed):
    """kvb_shuffle(): a Fisher-Yates permutation of range(n)."""
    v = list(range(n))
    for i in range(n - 1, 0, -1):
        seed, r = xorshift(seed)
        j = r % (i + 1)
        v[i], v[j] = v[j], v[i]
    return v


def cache_pages(batches, contexts):
    """Pages of kvbench's one cache: the largest case, contexts rounded up."""
    return max(b * ((c + PAGE - 1) // PAGE) for b in batches for c in contexts)


def case_table(bi, ci, batches, contexts, pages):
    """The CSR page table of case (batches[bi], contexts[ci]), as kvbench builds it."""
    b = batches[bi]
    ctx = max(contexts[ci] // PAGE * PAGE, PAGE)
    per = (ctx + PAGE - 1) // PAGE
    perm = shuffle(pages, 1000 + 31 * bi + ci)
    return {
        "batch": b, "ctx": ctx, "pages_per_seq": per,
        "indptr": [s * per for s in range(b + 1)],
        "indices": perm[:b * per],
        "last_page_len": [ctx - (per - 1) * PAGE] * b,
        "kv_bytes": b * ctx * 2 * KV_HEADS * HEAD_DIM * ESIZE,
    }


def layout(pages):
    """libkvrt's layer-major layout of one layer, in bytes, and FlashInfer's view of it."""
    row = HEAD_DIM * ESIZE
    token = row * KV_HEADS
    plane = token * PAGE
    return {"kind": "layer-major", "cache_shape": [2, pages, PAGE, KV_HEADS, HEAD_DIM],
            "strides_bytes": {"kv": pages * plane, "block": plane, "token": token,
                              "head": row},
            "flashinfer": "paged_kv_cache=(cache[0], cache[1]), kv_layout NHD, "
                          f"each [{pages}, {PAGE}, {KV_HEADS}, {HEAD_DIM}] bf16"}


def dry_run(a):
    pages = cache_pages(a.batches, a.contexts)
    lay = layout(pages)
    for bi, b in enumerate(a.batches):
        for ci in range(len(a.contexts)):
            t = case_table(bi, ci, a.batches, a.contexts, pages)
            digest = hashlib.sha256(",".join(map(str, t["indices"])).encode()).hexdigest()
            print(json.dumps({"bench": BENCH, "case": f"layout_b{b}_ctx{t['ctx']}",
                              "dry_run": True, "pages": pages, "layout": lay,
                              "pages_per_seq": t["pages_per_seq"],
                              "indptr_last": t["indptr"][-1],
                              "last_page_len": t["last_page_len"][0],
                              "indices_first": t["indices"][:8],
                              "indices_sha256": digest, "kv_bytes": t["kv_bytes"],
                              "decode": a.variants, "prefill": not a.no_prefill}),
                  flush=True)
    return 0


# ---- on the GPU ----------------------------------------------------------------


class Timer:
    """Median ms per call of fn: sdpa_peer's timing (CUDA events), so both peers time alike."""

    def __init__(self, torch, a):
        self.torch, self.a = torch, a

    def __call__(self, fn):
        from sdpa_peer import time_calls  # beside this file
        times, _ = time_calls(self.torch, fn, self.a.warmup, self.a.iters, self.a.inner)
        return statistics.median(times)


def matmul_tflops(torch, time_ms, dev):
    n = 8192
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ms = time_ms(lambda: torch.matmul(x, y))
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def read_gbps(torch, time_ms, cache, nbytes):
    """torch.sum over the first nbytes of the cache: a read-only stream of as many bytes."""
    flat = cache.view(torch.uint8).view(-1)[:nbytes // 4 * 4].view(torch.float32)
    ms = time_ms(lambda: torch.sum(flat))
    return nbytes / (ms * 1e-3) / 1e9


def run_decode(fi, torch, time_ms, a, cache, t, dev, variant, ws, rate):
    b, ctx = t["batch"], t["ctx"]
    i32 = dict(device=dev, dtype=torch.int32)
    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=(variant == "tc"))
    w.plan(torch.tensor(t["indptr"], **i32), torch.tensor(t["indices"], **i32),
           torch.tensor(t["last_page_len"], **i32), Q_HEADS, KV_HEADS, HEAD_DIM, PAGE,
           pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    q = (torch.rand(b, Q_HEADS, HEAD_DIM, device=dev) * 1.5 + 0.5).to(torch.bfloat16)
    kv, out = (cache[0], cache[1]), torch.empty_like(q)  # written in place, as kvrt's out
    ms = time_ms(lambda: w.run(q, kv, out=out))
    gbps = t["kv_bytes"] / (ms * 1e-3) / 1e9
    name = f"flashinfer_decode_{variant}_b{b}_ctx{ctx}"
    emit(name, gbps, "GB/s K/V read (ratio = value/limit)", rate,
         "GB/s torch.sum, same bytes (read-only)")
    emit(name + "_us", ms * 1e3, "us per decode call (ratio = limit/value)",
         t["kv_bytes"] / (rate * 1e9) * 1e6, "us for the K/V bytes at the read rate", cost=True)


def run_prefill(fi, torch, time_ms, a, cache, t, dev, ws, peak):
    b, ctx = t["batch"], t["ctx"]
    qn = min(a.prefill_q or ctx, ctx)
    i32 = dict(device=dev, dtype=torch.int32)
    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
    w.plan(torch.tensor([s * qn for s in range(b + 1)], **i32),
           torch.tensor(t["indptr"], **i32), torch.tensor(t["indices"], **i32),
           torch.tensor(t["last_page_len"], **i32), Q_HEADS, KV_HEADS, HEAD_DIM, PAGE,
           causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    q = (torch.rand(b * qn, Q_HEADS, HEAD_DIM, device=dev) * 1.5 + 0.5).to(torch.bfloat16)
    kv, out = (cache[0], cache[1]), torch.empty_like(q)
    ms = time_ms(lambda: w.run(q, kv, out=out))
    # query r (0-based of qn) sits at position ctx - qn + r and sees that many keys + 1
    pairs = b * sum(ctx - qn + r + 1 for r in range(qn))
    tflops = 4.0 * HEAD_DIM * Q_HEADS * pairs / (ms * 1e-3) / 1e12
    emit(f"flashinfer_prefill_b{b}_ctx{ctx}_q{qn}", tflops,
         "TFLOP/s causal attention (ratio = value/limit)", peak,
         "TFLOP/s dense bf16 8192^3 torch.matmul")


def main(argv=None):
    a = parse(argv)
    if a.dry_run:
        return dry_run(a)
    try:
        import torch
    except Exception as e:
        note(f"absent: torch: {type(e).__name__}: {e}")
        return 3
    if not torch.cuda.is_available():
        note(f"absent: torch {torch.__version__} sees no CUDA device")
        return 3
    try:
        import flashinfer as fi
    except Exception as e:
        note(f"absent: flashinfer: {type(e).__name__}: {e}")
        return 3
    dev = torch.device("cuda", a.device)
    torch.cuda.set_device(dev)
    pages = cache_pages(a.batches, a.contexts)
    note(f"flashinfer {getattr(fi, '__version__', '?')}, torch {torch.__version__}, "
         f"{torch.cuda.get_device_name(dev)}; cache of {pages} pages "
         f"({2 * pages * PAGE * KV_HEADS * HEAD_DIM * ESIZE / 2**30:.2f} GiB), layer-major")
    time_ms = Timer(torch, a)
    cache = (torch.rand(2, pages, PAGE, KV_HEADS, HEAD_DIM, device=dev) * 1.5 + 0.5)
    cache = cache.to(torch.bfloat16)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    peak = matmul_tflops(torch, time_ms, dev) if not a.no_prefill else 0.0
    ok = failed = 0
    for bi, b in enumerate(a.batches):
        for ci in range(len(a.contexts)):
            t = case_table(bi, ci, a.batches, a.contexts, pages)
            label = f"b{b}_ctx{t['ctx']}"
            try:
                if a.variants:
                    rate = read_gbps(torch, time_ms, cache, t["kv_bytes"])
                for v in a.variants:
                    run_decode(fi, torch, time_ms, a, cache, t, dev, v, ws, rate)
                if not a.no_prefill:
                    run_prefill(fi, torch, time_ms, a, cache, t, dev, ws, peak)
                ok += 1
            except Exception as e:  # OOM, a JIT build that failed, an API change
                failed += 1
                note(f"{label} absent: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
            torch.cuda.empty_cache()
    return 0 if ok or not failed else 1


if __name__ == "__main__":
    sys.exit(main())
