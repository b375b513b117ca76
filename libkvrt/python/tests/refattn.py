# SPDX-License-Identifier: MIT
"""A float64 paged attention written from the definition, for the tests,
and the element conversions it needs (no kvrt code is used here).

Tolerance (Documentation/libkvrt.rst, libkvrt/tests/test_attn.c): per
output row (token, q head), max over dims of |out - ref| divided by the
largest |v| the row attends to must be at most 1e-5 for f32 output,
1e-5 + 2^-11 for f16, 1e-5 + 2^-8 for bf16.  Inputs enter the reference
as stored (f16/bf16 values, fp8 byte x scale), so input rounding is not
part of the error.
"""
import numpy as np

TOL = {"f32": 1e-5, "f16": 1e-5 + 2.0 ** -11, "bf16": 1e-5 + 2.0 ** -8}


def bf16_to_f64(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)


def f32_to_bf16(x):
    """Round-to-nearest-even float32 -> bf16 bits (finite inputs)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def _fp8_table():
    t = np.zeros(256)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            t[c] = np.nan
        elif e == 0:
            t[c] = m / 8 * 2.0 ** -6
        else:
            t[c] = (1 + m / 8) * 2.0 ** (e - 7)
        if s:
            t[c] = -t[c]
    return t


FP8 = _fp8_table()


def to_f64(a, dtype):
    """Stored elements as float64: dtype one of f32, f16, bf16, fp8."""
    if dtype == "bf16":
        return bf16_to_f64(a)
    if dtype == "fp8":
        return FP8[np.asarray(a, np.uint8)]
    return np.asarray(a).astype(np.float64)


def kv_dense(cache, scales, lay, layer, kv, dtype):
    """K (kv=0) or V (kv=1) of ``layer`` as float64 [block][token][head][dim].

    ``cache`` is the cache's memory (any numpy array), read through the
    layout's byte strides, so the layout is checked as well as the math.
    """
    raw = cache.view(np.uint8).reshape(-1)
    es = {"f32": 4, "f16": 2, "bf16": 2, "fp8": 1}[dtype]
    npt = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "fp8": np.uint8}[dtype]
    view = np.lib.stride_tricks.as_strided(
        raw[layer * lay.layer_stride + kv * lay.kv_stride:].view(npt),
        shape=(lay.num_blocks, lay.block_tokens, lay.num_kv_heads, lay.head_dim),
        strides=(lay.block_stride, lay.token_stride, lay.head_stride, es), writeable=False)
    out = to_f64(view, dtype)
    if dtype == "fp8":
        for b in range(lay.num_blocks):
            for h in range(lay.num_kv_heads):
                out[b, :, h, :] *= scales[layer * lay.scale_layer_stride
                                          + kv * lay.scale_kv_stride
                                          + b * lay.scale_block_stride + h]
    return out


def attention(q, K, V, indptr, indices, seq_lens, q_indptr=None, sm_scale=None,
              window_left=-1, softcap=0.0):
    """float64 outputs [rows][q_heads][dim] and each row's vscale [rows][q_heads].

    q_indptr None: decode (one row per sequence, at seq_len - 1); else
    prefill, rows q_indptr[s]..q_indptr[s+1] are the last tokens of seq s.
    """
    rows, hq, d = q.shape
    nb, bt, hk, _ = K.shape
    group = hq // hk
    scale = 1 / np.sqrt(d) if sm_scale is None else sm_scale
    out = np.zeros((rows, hq, d))
    vs = np.zeros((rows, hq))
    nseq = len(seq_lens)
    if q_indptr is None:
        q_indptr = np.arange(nseq + 1)
    for s in range(nseq):
        n = int(seq_lens[s])
        blocks = indices[indptr[s]:indptr[s + 1]]
        pos = np.arange(n)
        ks = K[blocks[pos // bt], pos % bt]     # [n][hk][d]
        vv = V[blocks[pos // bt], pos % bt]
        r0, r1 = int(q_indptr[s]), int(q_indptr[s + 1])
        for j, r in enumerate(range(r0, r1)):
            qpos = n - (r1 - r0) + j
            keep = pos <= qpos
            if window_left >= 0:
                keep &= pos >= qpos - window_left
            for h in range(hq):
                kh = h // group
                lg = scale * (ks[keep, kh, :] @ q[r, h])
                if softcap:
                    lg = softcap * np.tanh(lg / softcap)
                w = np.exp(lg - lg.max())
                w /= w.sum()
                out[r, h] = w @ vv[keep, kh, :]
                vs[r, h] = np.abs(vv[keep, kh, :]).max()
    return out, vs


def row_error(out, ref, vscale):
    """The largest row error in units of its vscale (NaN counts as infinite)."""
    e = np.abs(out - ref).max(axis=-1) / np.maximum(vscale, 1e-30)
    e = np.where(np.isnan(e), np.inf, e)
    return float(e.max())
