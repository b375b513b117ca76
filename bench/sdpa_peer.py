#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""sdpa_peer.py: PyTorch's scaled_dot_product_attention as the peer of
`kvbench gpu-attn`, for decode (--case) and chunked prefill (--prefill-case).

Decode: for each case BATCHxCTX it builds dense q [B, Hq, 1, D] and k, v
[B, Hkv, CTX, D] on the GPU (bf16 by default), then times
torch.nn.functional.scaled_dot_product_attention for decode (one query
token per sequence, no mask: every key is visible, as for the last token of
a sequence).  Grouped-query attention goes through enable_gqa=True where
this torch has it (2.5+); otherwise k and v are expanded to Hq heads with
repeat_interleave once, before timing (the kernel then reads Hq/Hkv times
the K/V bytes; "kv_bytes" stays the logical figure, "kv_bytes_read" says
what was read).

Timing: --warmup calls, then --iters repetitions of --inner back-to-back
calls between two torch.cuda.Event records (inner chosen so one repetition
lasts about 2 ms unless given); the time per call of each repetition; the
median and minimum are printed.  Launch cost is included, as kvbench
includes it for libkvrt's calls.

Output: one JSON object per case per line on stdout:
  {"case": "8x4096", "batch": 8, "ctx": 4096, "q_heads": 32, "kv_heads": 8,
   "head_dim": 128, "dtype": "bf16", "median_ms": ..., "min_ms": ...,
   "iters": ..., "inner": ..., "kv_bytes": ..., "kv_bytes_read": ...,
   "gqa": "enable_gqa" | "repeat_interleave", "torch": "...", "device": "..."}
or {"case": "...", "error": "..."} for a case that failed (out of memory).

Prefill: for each case BxQxCTX (B sequences whose last Q of CTX tokens are
the new chunk: query r sees keys 0 .. CTX-Q+r, as kvbench's
kvrt_gpu_attn_prefill cases), dense q [B, Hq, Q, D] and k, v [B, Hkv, CTX,
D].  SDPA has no flash kernel for that mask: is_causal=True is aligned
top-left (query r sees keys 0 .. r) when Q < CTX, and the lower-right
CausalBias never goes to flash.  So up to three figures, each with the
FLOPs of the work it does (4 x D x Hq per query/key pair it computes):
  flash_causal  Q == CTX only: the flash backend forced, is_causal=True
                (exact there), the causal pairs counted
  flash_full    the flash backend forced, no mask: every query over all
                CTX keys, B x Q x CTX pairs counted.  The flash kernel's
                speed on the same q/K/V shapes, without the causal skip:
                the figure the issue's "0.7 of SDPA flash" goal means
  lower_right_<backend>  Q < CTX: torch.nn.attention.bias.causal_lower_right,
                the right mask, on the first of the efficient and cuDNN
                backends that takes it, causal pairs counted
The peer's figure ("tflops", the limit kvbench uses) is the best TFLOP/s of
those that ran; "best" names it.  A prefill line:
  {"case": "8x512x4096", "mode": "prefill", "batch": 8, "q": 512, "ctx": 4096,
   "tflops": ..., "best": "flash_full", "median_ms": ..., "flops_causal": ...,
   ..., "variants": {"flash_full": {"median_ms": ..., "flops": ...,
   "tflops": ..., "gqa": ...}, "lower_right_efficient": {"failed": "..."}}}
--dry-run prints each case's shapes and FLOP counts without torch.

Without torch or without CUDA: {"error": "..."} and exit status 3.
Exit status 1 when every case failed, 2 on a usage error, else 0.
"""
import argparse
import json
import math
import statistics
import sys


def case_arg(s):
    try:
        b, c = s.lower().split("x")
        b, c = int(b), int(c)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not BATCHxCTX, e.g. 8x4096")
    if b < 1 or c < 1:
        raise argparse.ArgumentTypeError(f"'{s}': batch and context must be >= 1")
    return b, c


def prefill_case_arg(s):
    try:
        b, q, c = (int(x) for x in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not BxQxCTX, e.g. 8x512x4096")
    if b < 1 or q < 1 or c < 1:
        raise argparse.ArgumentTypeError(f"'{s}': B, Q and CTX must be >= 1")
    if q > c:
        raise argparse.ArgumentTypeError(f"'{s}': Q ({q} new tokens) is more than CTX ({c})")
    return b, q, c


def causal_pairs(b, q, ctx):
    """(query, key) pairs of chunked prefill: query r of q sees ctx - q + r + 1 keys."""
    return b * (q * (ctx - q) + q * (q + 1) // 2)


def attn_flops(pairs, q_heads, head_dim):
    """q.k and p.v, a multiply and an add per element each, per query head."""
    return 4 * head_dim * q_heads * pairs


def parse(argv=None):
    p = argparse.ArgumentParser(
        description="Time torch SDPA decode on dense K/V: the peer of kvbench gpu-attn. "
        "Prints one JSON object per case per line.")
    p.add_argument("--case", type=case_arg, action="append", metavar="BxCTX",
                   help="batch x tokens per sequence, e.g. 8x4096 (repeatable)")
    p.add_argument("--prefill-case", type=prefill_case_arg, action="append", default=[],
                   metavar="BxQxCTX", help="chunked prefill: B sequences, the last Q of CTX "
                   "tokens new, e.g. 8x512x4096 (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="print each case's shapes and FLOP counts; no torch, no GPU")
    p.add_argument("--batch", type=int, help="one case: batch (with --ctx)")
    p.add_argument("--ctx", type=int, help="one case: tokens per sequence (with --batch)")
    p.add_argument("--q-heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    p.add_argument("--iters", type=int, default=20, help="timed repetitions (default 20)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls first (default 10)")
    p.add_argument("--inner", type=int, default=0,
                   help="calls per repetition (default: about 2 ms worth)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    a = p.parse_args(argv)
    cases = list(a.case or [])
    if a.batch is not None or a.ctx is not None:
        if a.batch is None or a.ctx is None:
            p.error("--batch and --ctx go together")
        cases.append((a.batch, a.ctx))
    if not cases and not a.prefill_case:
        p.error("no case: give --case BxCTX (or --batch and --ctx) or --prefill-case BxQxCTX")
    if a.q_heads % a.kv_heads:
        p.error("--q-heads must be a multiple of --kv-heads")
    if a.iters < 1 or a.warmup < 0 or a.inner < 0:
        p.error("--iters >= 1, --warmup >= 0, --inner >= 0")
    return a, cases


def emit(obj):
    print(json.dumps(obj), flush=True)


def time_calls(torch, call, warmup, iters, inner=0):
    """(ms per call of each of iters repetitions, calls per repetition):
    warmup calls (at least one), then repetitions of inner back-to-back
    calls between two CUDA events, inner chosen for about 2 ms when 0.
    flashinfer_peer.py times its calls with this too."""
    for _ in range(max(warmup, 1)):
        call()
    torch.cuda.synchronize()
    if not inner:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(5):
            call()
        e.record()
        e.synchronize()
        per = max(s.elapsed_time(e) / 5, 1e-4)
        inner = max(1, min(1000, math.ceil(2.0 / per)))
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            call()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / inner)
    return times, inner


def dry_run(a, cases):
    """Each case's shapes and FLOP counts, as the real run would use them."""
    for b, c in cases:
        emit({"case": f"{b}x{c}", "mode": "decode", "dry_run": True, "batch": b, "ctx": c,
              "kv_bytes": 2 * b * a.kv_heads * c * a.head_dim * 2})
    for b, q, c in a.prefill_case:
        emit({"case": f"{b}x{q}x{c}", "mode": "prefill", "dry_run": True, "batch": b, "q": q,
              "ctx": c, "q_shape": [b, a.q_heads, q, a.head_dim],
              "kv_shape": [b, a.kv_heads, c, a.head_dim],
              "flops_causal": attn_flops(causal_pairs(b, q, c), a.q_heads, a.head_dim),
              "flops_full": attn_flops(b * q * c, a.q_heads, a.head_dim),
              "variants": prefill_variants(q, c)})
    return 0


def prefill_variants(q, ctx):
    """The figures a prefill case times (see the top)."""
    if q == ctx:
        return ["flash_causal", "flash_full"]
    return ["flash_full", "lower_right"]


def time_prefill_variant(torch, F, a, name, q, k, v, group, gqa):
    """One figure of a prefill case: {"median_ms", "min_ms", "inner", "gqa",
    "backend"} or {"failed": why}.  GQA through enable_gqa, else (or when the
    backend refuses it) k and v expanded to Hq heads first."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if name == "lower_right":
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(q.shape[2], k.shape[2])
        backends = [("efficient", SDPBackend.EFFICIENT_ATTENTION),
                    ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None))]
    else:
        mask = None
        backends = [("flash", SDPBackend.FLASH_ATTENTION)]
    causal = name == "flash_causal"
    why = []
    for bname, backend in backends:
        if backend is None:  # no cuDNN backend in this torch
            continue
        for how in (["enable_gqa"] if gqa == "enable_gqa" else []) + ["repeat_interleave"]:
            kk, vv, extra = k, v, {"enable_gqa": True}
            if how == "repeat_interleave":
                kk, vv, extra = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), {}
                if group == 1:
                    how = "none needed"

            def call(q=q, k=kk, v=vv, extra=extra):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                      is_causal=causal, **extra)
            try:
                with sdpa_kernel(backend):
                    times, inner = time_calls(torch, call, a.warmup, a.iters, a.inner)
                return {"median_ms": statistics.median(times), "min_ms": min(times),
                        "inner": inner, "gqa": how, "backend": bname}
            except (RuntimeError, TypeError) as e:
                if "out of memory" in str(e).lower():
                    raise
                why.append(f"{bname}/{how}: {(str(e).splitlines() or [''])[0][:120]}")
            finally:
                del kk, vv, call
    return {"failed": "; ".join(why)}


def run_prefill(torch, F, a, dev, dtype, gqa, b, qn, c):
    """One prefill case's line (see the top); RuntimeError on out of memory."""
    g = torch.Generator(device=dev)
    g.manual_seed(4321 + b * 7 + qn * 3 + c)
    q = torch.randn(b, a.q_heads, qn, a.head_dim, device=dev, dtype=dtype, generator=g)
    k = torch.randn(b, a.kv_heads, c, a.head_dim, device=dev, dtype=dtype, generator=g)
    v = torch.randn(b, a.kv_heads, c, a.head_dim, device=dev, dtype=dtype, generator=g)
    causal = attn_flops(causal_pairs(b, qn, c), a.q_heads, a.head_dim)
    full = attn_flops(b * qn * c, a.q_heads, a.head_dim)
    variants = {}
    for name in prefill_variants(qn, c):
        r = time_prefill_variant(torch, F, a, name, q, k, v, a.q_heads // a.kv_heads, gqa)
        if "median_ms" in r:
            r["flops"] = full if name == "flash_full" else causal
            r["tflops"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
            if name == "lower_right":
                name = f"lower_right_{r['backend']}"
        variants[name] = r
    ran = {n: r for n, r in variants.items() if "tflops" in r}
    label = f"{b}x{qn}x{c}"
    if not ran:
        return {"case": label, "error": "no SDPA figure ran: " +
                "; ".join(f"{n}: {r['failed']}" for n, r in variants.items())}
    best = max(ran, key=lambda n: ran[n]["tflops"])
    # "tflops", "best" and "median_ms" before "variants": kvbench reads the first of each
    return {"case": label, "mode": "prefill", "batch": b, "q": qn, "ctx": c,
            "tflops": ran[best]["tflops"], "best": best, "median_ms": ran[best]["median_ms"],
            "flops_causal": causal, "flops_full": full, "q_heads": a.q_heads,
            "kv_heads": a.kv_heads, "head_dim": a.head_dim, "dtype": a.dtype,
            "iters": a.iters, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(dev), "variants": variants}


def main(argv=None):
    a, cases = parse(argv)
    if a.dry_run:
        return dry_run(a, cases)
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or a broken install
        emit({"error": f"torch is not available: {type(e).__name__}: {e}"})
        return 3
    if not torch.cuda.is_available():
        emit({"error": f"torch {torch.__version__}: CUDA is not available"})
        return 3
    if a.device >= torch.cuda.device_count():
        emit({"error": f"no CUDA device {a.device} ({torch.cuda.device_count()} visible)"})
        return 3
    dev = torch.device("cuda", a.device)
    torch.cuda.set_device(dev)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    esize = 2
    group = a.q_heads // a.kv_heads
    name = torch.cuda.get_device_name(dev)

    # enable_gqa (torch 2.5+): try it once on a tiny problem
    gqa = "repeat_interleave"
    if group > 1:
        try:
            q = torch.zeros(1, a.q_heads, 1, a.head_dim, device=dev, dtype=dtype)
            k = torch.zeros(1, a.kv_heads, 4, a.head_dim, device=dev, dtype=dtype)
            F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            gqa = "enable_gqa"
        except (TypeError, RuntimeError):
            pass
    else:
        gqa = "none needed"

    ok = 0
    for b, c in cases:
        label = f"{b}x{c}"
        q = k = v = call = None
        try:
            g = torch.Generator(device=dev)
            g.manual_seed(1234 + b * 7 + c)
            q = torch.randn(b, a.q_heads, 1, a.head_dim, device=dev, dtype=dtype, generator=g)
            k = torch.randn(b, a.kv_heads, c, a.head_dim, device=dev, dtype=dtype, generator=g)
            v = torch.randn(b, a.kv_heads, c, a.head_dim, device=dev, dtype=dtype, generator=g)
            kv_bytes = 2 * b * a.kv_heads * c * a.head_dim * esize
            if gqa == "enable_gqa":
                def call(q=q, k=k, v=v):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                read = kv_bytes
            else:
                if group > 1:
                    k = k.repeat_interleave(group, dim=1)
                    v = v.repeat_interleave(group, dim=1)

                def call(q=q, k=k, v=v):
                    return F.scaled_dot_product_attention(q, k, v)
                read = kv_bytes * group
            times, inner = time_calls(torch, call, a.warmup, a.iters, a.inner)
            emit({"case": label, "batch": b, "ctx": c, "q_heads": a.q_heads,
                  "kv_heads": a.kv_heads, "head_dim": a.head_dim, "dtype": a.dtype,
                  "median_ms": statistics.median(times), "min_ms": min(times),
                  "iters": a.iters, "inner": inner, "kv_bytes": kv_bytes,
                  "kv_bytes_read": read, "gqa": gqa, "torch": torch.__version__,
                  "device": name})
            ok += 1
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one (1.13+)
            msg = (str(e).splitlines() or [""])[0]
            if "out of memory" in str(e).lower():
                emit({"case": label, "error": f"out of memory: {msg}"})
            else:
                emit({"case": label, "error": f"{type(e).__name__}: {msg}"})
        finally:
            del q, k, v, call  # the closure's defaults hold the tensors too
            torch.cuda.empty_cache()
    for b, qn, c in a.prefill_case:
        try:
            r = run_prefill(torch, F, a, dev, dtype, gqa, b, qn, c)
        except RuntimeError as e:
            msg = (str(e).splitlines() or [""])[0]
            kind = "out of memory" if "out of memory" in str(e).lower() else type(e).__name__
            r = {"case": f"{b}x{qn}x{c}", "error": f"{kind}: {msg}"}
        except ImportError as e:  # torch.nn.attention: torch 2.3+
            r = {"case": f"{b}x{qn}x{c}", "error": f"torch {torch.__version__}: {e}"}
        emit(r)
        ok += "error" not in r
        torch.cuda.empty_cache()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
