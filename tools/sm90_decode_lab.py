#!/usr/bin/env python3
"""Lab prototypes of split-KV decode in Gluon for SM90, checked against the shipped (portable Triton) decode and timed
beside it in one GPU call. Not used by the package: a measured winner is written into notebook 07 by hand.

Two kernels, both with the shipped decode's arithmetic (P in e4m3 clamped at 448, the row sum of the e4m3 P, lazy
rescale past `threshold`, the same splits and the shipped merge), so with the same key tiles their outputs match it
up to the accumulation order:
- `mma_v2`: one warp per (request, KV head, split) and 32-key tiles, as the shipped kernel; Q stays in registers as
  the A operand of `mma_v2`, each K tile is loaded from the paged cache straight into the e4m3 B-operand layout, V is
  loaded row-major and converted in registers. ptxas expands the e4m3 `mma.sync` into conversions and f16 MMAs on
  SM90, so the saving is in the operand path. No cp.async pipeline: latency is hidden by the programs resident per
  SM (a register prefetch of the next tile, tried offline, spilled 1,935 times).
- `wgmma`: one warpgroup per split and 64-key tiles, the keys as wgmma's M: S^T = K.Q^T on e4m3 wgmma (K needs no
  conversion), O^T = V^T.P^T on f16 wgmma (V converted once on its way to shared memory).

  python tools/sm90_decode_lab.py --compile          any machine: the far and near loops compiled for sm_90a (SASS counts)
  TRITON_INTERPRET=1 python tools/sm90_decode_lab.py --emulate
                                                     a CPU: both kernels' index logic and arithmetic, rewritten as
                                                     Triton kernels (layouts dropped), against the shipped decode
  PYTHONPATH=$PWD python tools/sm90_decode_lab.py [--out DIR] [--budget S]
                                                     on an SM90 GPU: both kernels checked against the shipped decode
                                                     (mixed lengths, pages 16/64, a window, Hq 16 and 8), then
                                                     CUDA-graph times of the three and of a copy of the same bytes at
                                                     five decode shapes
-> sm90_decode_lab.json in --out, else $OUT, else a new temporary folder (a lab record: read, then kept in bench/notes).
"""
import argparse, collections, itertools, json, os, re, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma
from inkling_fp8kv.attention_kernels import _LOG2E, _decode_split_range, _decode_merge_kernel
from inkling_fp8kv.attention_sm90 import _cta_barrier
from inkling_fp8kv.rescale import LOG2E, MAX_OFFSET, SAFE_RESCALE_THRESHOLD, lazy_rescale_max


# ---- the kernel (from here to the launcher: `emulated` rewrites this part for the interpreter) -------------------
@gluon.jit
def _kv_rows(X, bt_row, j0, limit, head_off, stride_b, stride_s, BLOCK_N: gl.constexpr, PAGE: gl.constexpr,
             layout: gl.constexpr, FULL: gl.constexpr, KEYS: gl.constexpr):
    # keys j0 … j0 + BLOCK_N − 1 of one KV head from a paged cache, in `layout`: [BLOCK_N, 128] as stored (KEYS = 0)
    # or transposed, [128, BLOCK_N] (KEYS = 1: Kᵀ, still d-contiguous per key); keys >= limit read as zeros
    n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1 - KEYS, layout))
    d = gl.arange(0, 128, layout=gl.SliceLayout(KEYS, layout))
    if FULL:
        ok = gl.full([BLOCK_N], 1, gl.int1, gl.SliceLayout(1 - KEYS, layout))
    else:
        ok = n < limit
    if BLOCK_N <= PAGE:
        blk = gl.load(bt_row + j0 // PAGE).to(gl.int64)
    else:
        blk = gl.load(bt_row + n // PAGE, mask=ok, other=0).to(gl.int64)
    slot = blk * stride_b + (n % PAGE) * stride_s + head_off
    if KEYS == 0:
        return gl.load(X + slot[:, None] + d[None, :], mask=ok[:, None], other=0.0)
    else:
        return gl.load(X + slot[None, :] + d[:, None], mask=ok[None, :], other=0.0)


@gluon.jit
def _step(q, kt, v, acc, l_i, m_i, REL, j0, end, pos, rel_off, row_valid, sm_scale_log2, threshold, E, W,
          BLOCK_N: gl.constexpr, MASKED: gl.constexpr, HAS_WINDOW: gl.constexpr, P_OFFSET: gl.constexpr,
          mma: gl.constexpr, la: gl.constexpr, lb: gl.constexpr):
    s = mma_v2(q, kt, gl.zeros([16, BLOCK_N], gl.float32, mma)) * sm_scale_log2
    if MASKED:
        offs_n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        d = pos - offs_n
        in_e = ((d >= 0) & (d < E))[None, :] & row_valid[:, None]
        rel = gl.load(REL + rel_off[:, None] + d[None, :], mask=in_e, other=0.0).to(gl.float32)
        vis = (d >= 0) & (offs_n < end)
        if HAS_WINDOW:
            vis = vis & (d < W)
        s = gl.where(vis[None, :], s + rel * _LOG2E, float("-inf"))
    m_new, m_safe, moved = lazy_rescale_max(m_i, gl.max(s, 1), threshold)
    if gl.max(moved.to(gl.int32), 0) > 0:       # lazy rescale: the accumulator is touched only when a row's max moved
        alpha = gl.exp2(m_i - m_safe)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
    p8 = gl.minimum(gl.exp2(s - m_safe[:, None] + P_OFFSET), 448.0).to(gl.float8e4nv)
    l_i = l_i + gl.sum(p8.to(gl.float32), 1)
    acc = mma_v2(gl.convert_layout(p8, la), gl.convert_layout(v, lb), acc)
    return acc, l_i, m_new


@gluon.jit(do_not_specialize=["num_blocks"])
def _decode_split_gluon(Q, K, V, REL, OPART, LSE, BT, SEQ, CU,
                        sm_scale_log2, threshold, E, W, num_splits, num_blocks,
                        stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                        stride_rt, stride_rh, stride_btb, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                        G: gl.constexpr, BLOCK_N: gl.constexpr, PAGE: gl.constexpr, HAS_WINDOW: gl.constexpr,
                        P_OFFSET: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=16)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=16)
    rows: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [1, 1], [1, 0])     # V row-major, 16-byte vectors
    b = gl.program_id(0)
    hkv = gl.program_id(1)
    sp = gl.program_id(2)
    t = gl.load(CU + b).to(gl.int64)
    kv_len = gl.load(SEQ + b)
    gq = gl.arange(0, 16, layout=gl.SliceLayout(1, la))
    dq = gl.arange(0, 128, layout=gl.SliceLayout(0, la))
    q = gl.load(Q + t * stride_qt + (hkv * G + gq)[:, None] * stride_qh + dq[None, :], mask=(gq < G)[:, None],
                other=0.0)                                                     # G heads in 16 rows, the rest zeros
    g = gl.arange(0, 16, layout=gl.SliceLayout(1, mma))
    row_valid = g < G
    head = hkv * G + gl.where(row_valid, g, 0)
    rel_off = t * stride_rt + head * stride_rh
    pos = kv_len - 1
    start, far_end, end = _decode_split_range(kv_len, E, W, num_splits, sp, BLOCK_N, HAS_WINDOW)   # the shipped rule
    bt_row = BT + b.to(gl.int64) * stride_btb
    kh = hkv.to(gl.int64) * stride_kh
    vh = hkv.to(gl.int64) * stride_vh
    m_i = gl.full([16], float("-inf"), gl.float32, gl.SliceLayout(1, mma))
    l_i = gl.zeros([16], gl.float32, gl.SliceLayout(1, mma))
    acc = gl.zeros([16, 128], gl.float32, mma)
    # far tiles: whole, unmasked; then the near tiles: the bias band, the causal edge and the window, masked loads
    for j0 in range(start, far_end, BLOCK_N):
        kt = _kv_rows(K, bt_row, j0, kv_len, kh, stride_kb, stride_ks, BLOCK_N, PAGE, lb, True, 1)
        v = _kv_rows(V, bt_row, j0, kv_len, vh, stride_vb, stride_vs, BLOCK_N, PAGE, rows, True, 0)
        acc, l_i, m_i = _step(q, kt, v, acc, l_i, m_i, REL, j0, end, pos, rel_off, row_valid, sm_scale_log2,
                              threshold, E, W, BLOCK_N, False, HAS_WINDOW, P_OFFSET, mma, la, lb)
    for j0 in range(far_end, end, BLOCK_N):
        kt = _kv_rows(K, bt_row, j0, end, kh, stride_kb, stride_ks, BLOCK_N, PAGE, lb, False, 1)
        v = _kv_rows(V, bt_row, j0, end, vh, stride_vb, stride_vs, BLOCK_N, PAGE, rows, False, 0)
        acc, l_i, m_i = _step(q, kt, v, acc, l_i, m_i, REL, j0, end, pos, rel_off, row_valid, sm_scale_log2,
                              threshold, E, W, BLOCK_N, True, HAS_WINDOW, P_OFFSET, mma, la, lb)
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse = gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(l_safe) - P_OFFSET)   # log2-sum-exp in true units
    d = gl.arange(0, 128, layout=gl.SliceLayout(0, mma))
    ob = OPART + b.to(gl.int64) * stride_ob + sp * stride_os
    gl.store(ob + head[:, None] * stride_oh + d[None, :], o, mask=row_valid[:, None])
    gl.store(LSE + b.to(gl.int64) * stride_lb + head * stride_lh + sp, lse, mask=row_valid)


# ---- the wgmma kernel (to the launcher; `emulated` rewrites it too, its "gluon-only" helpers replaced) ------------
# One warpgroup per (request, KV head, split) and 64-key tiles, with the keys as wgmma's M: S^T = K.Q^T reads e4m3
# K and Q from shared memory (both d-contiguous, as fp8 wgmma requires; the G query heads are N = 8 or 16), and
# O^T = V^T.P^T runs in f16 (16-bit wgmma reads V's tile transposed from shared memory, which e4m3 cannot). K needs
# no conversion; V is converted once per element on its way to shared memory.
@gluon.jit
def _wg_smem(q, N: gl.constexpr, BLOCK_N: gl.constexpr):
    # gluon-only: Q in shared memory, and the K, V and P^T tiles' buffers
    sh8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    sh16: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    q_smem = gl.allocate_shared_memory(gl.float8e4nv, [N, 128], sh8)
    q_smem.store(q)
    k_smem = gl.allocate_shared_memory(gl.float8e4nv, [BLOCK_N, 128], sh8)
    v_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_N, 128], sh16)
    p_smem = gl.allocate_shared_memory(gl.float16, [N, BLOCK_N], sh16)
    return q_smem, k_smem, v_smem, p_smem


@gluon.jit
def _wg_st(k, q_smem, k_smem, s_l: gl.constexpr, BLOCK_N: gl.constexpr, N: gl.constexpr):
    # gluon-only: S^T [BLOCK_N, N] = K . Q^T, e4m3 wgmma (the barrier first: the last tile's MMAs read k_smem)
    _cta_barrier()
    k_smem.store(k)
    fence_async_shared()
    _cta_barrier()
    return warpgroup_mma(k_smem, q_smem.permute((1, 0)), gl.zeros([BLOCK_N, N], gl.float32, s_l), use_acc=False)


@gluon.jit
def _wg_ot(v16, p16, acc, v_smem, p_smem):
    # gluon-only: O^T [128, N] += V^T . P^T, f16 wgmma, V^T read transposed from V's [BLOCK_N, 128] tile
    v_smem.store(v16)
    p_smem.store(gl.permute(p16, [1, 0]))
    fence_async_shared()
    _cta_barrier()
    return warpgroup_mma(v_smem.permute((1, 0)), p_smem.permute((1, 0)), acc)


@gluon.jit
def _wg_step(k, v, acc, l_i, m_i, q_smem, k_smem, v_smem, p_smem, REL, j0, end, pos, rel_off, row_valid,
             sm_scale_log2, threshold, E, W, BLOCK_N: gl.constexpr, N: gl.constexpr, MASKED: gl.constexpr,
             HAS_WINDOW: gl.constexpr, P_OFFSET: gl.constexpr, s_l: gl.constexpr, o_l: gl.constexpr):
    s = _wg_st(k, q_smem, k_smem, s_l, BLOCK_N, N) * sm_scale_log2            # keys down, heads across
    if MASKED:
        offs_n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_l))
        d = pos - offs_n
        in_e = ((d >= 0) & (d < E))[:, None] & row_valid[None, :]
        rel = gl.load(REL + rel_off[None, :] + d[:, None], mask=in_e, other=0.0).to(gl.float32)
        vis = (d >= 0) & (offs_n < end)
        if HAS_WINDOW:
            vis = vis & (d < W)
        s = gl.where(vis[:, None], s + rel * _LOG2E, float("-inf"))
    m_new, m_safe, moved = lazy_rescale_max(m_i, gl.max(s, 0), threshold)
    if gl.max(moved.to(gl.int32), 0) > 0:
        alpha = gl.exp2(m_i - m_safe)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(0, o_l))[None, :]
        l_i = l_i * alpha
    p8 = gl.minimum(gl.exp2(s - m_safe[None, :] + P_OFFSET), 448.0).to(gl.float8e4nv)
    l_i = l_i + gl.sum(p8.to(gl.float32), 0)
    acc = _wg_ot(v.to(gl.float16), p8.to(gl.float16), acc, v_smem, p_smem)
    return acc, l_i, m_new


@gluon.jit(do_not_specialize=["num_blocks"])
def _decode_split_wgmma(Q, K, V, REL, OPART, LSE, BT, SEQ, CU,
                        sm_scale_log2, threshold, E, W, num_splits, num_blocks,
                        stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                        stride_rt, stride_rh, stride_btb, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                        G: gl.constexpr, N: gl.constexpr, BLOCK_N: gl.constexpr, PAGE: gl.constexpr,
                        HAS_WINDOW: gl.constexpr, P_OFFSET: gl.constexpr):
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 32])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    ld: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])       # [rows, 128] bytes, 16-byte vectors
    b = gl.program_id(0)
    hkv = gl.program_id(1)
    sp = gl.program_id(2)
    t = gl.load(CU + b).to(gl.int64)
    kv_len = gl.load(SEQ + b)
    gq = gl.arange(0, N, layout=gl.SliceLayout(1, ld))
    dq = gl.arange(0, 128, layout=gl.SliceLayout(0, ld))
    q = gl.load(Q + t * stride_qt + (hkv * G + gq)[:, None] * stride_qh + dq[None, :], mask=(gq < G)[:, None],
                other=0.0)                                                     # G heads in N rows, the rest zeros
    q_smem, k_smem, v_smem, p_smem = _wg_smem(q, N, BLOCK_N)
    g = gl.arange(0, N, layout=gl.SliceLayout(0, s_l))
    row_valid = g < G
    head = hkv * G + gl.where(row_valid, g, 0)
    rel_off = t * stride_rt + head * stride_rh
    pos = kv_len - 1
    start, far_end, end = _decode_split_range(kv_len, E, W, num_splits, sp, BLOCK_N, HAS_WINDOW)   # the shipped rule
    bt_row = BT + b.to(gl.int64) * stride_btb
    kh = hkv.to(gl.int64) * stride_kh
    vh = hkv.to(gl.int64) * stride_vh
    m_i = gl.full([N], float("-inf"), gl.float32, gl.SliceLayout(0, s_l))
    l_i = gl.zeros([N], gl.float32, gl.SliceLayout(0, s_l))
    acc = gl.zeros([128, N], gl.float32, o_l)
    for j0 in range(start, far_end, BLOCK_N):
        k = _kv_rows(K, bt_row, j0, kv_len, kh, stride_kb, stride_ks, BLOCK_N, PAGE, ld, True, 0)   # K row-major too
        v = _kv_rows(V, bt_row, j0, kv_len, vh, stride_vb, stride_vs, BLOCK_N, PAGE, ld, True, 0)
        acc, l_i, m_i = _wg_step(k, v, acc, l_i, m_i, q_smem, k_smem, v_smem, p_smem, REL, j0, end, pos, rel_off,
                                 row_valid, sm_scale_log2, threshold, E, W, BLOCK_N, N, False, HAS_WINDOW, P_OFFSET,
                                 s_l, o_l)
    for j0 in range(far_end, end, BLOCK_N):
        k = _kv_rows(K, bt_row, j0, end, kh, stride_kb, stride_ks, BLOCK_N, PAGE, ld, False, 0)
        v = _kv_rows(V, bt_row, j0, end, vh, stride_vb, stride_vs, BLOCK_N, PAGE, ld, False, 0)
        acc, l_i, m_i = _wg_step(k, v, acc, l_i, m_i, q_smem, k_smem, v_smem, p_smem, REL, j0, end, pos, rel_off,
                                 row_valid, sm_scale_log2, threshold, E, W, BLOCK_N, N, True, HAS_WINDOW, P_OFFSET,
                                 s_l, o_l)
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    lse = gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(l_safe) - P_OFFSET)   # log2-sum-exp in true units
    gl.store(LSE + b.to(gl.int64) * stride_lb + head * stride_lh + sp, lse, mask=row_valid)
    o = acc / gl.convert_layout(l_safe, gl.SliceLayout(0, o_l))[None, :]          # O^T: dims down, heads across
    go = gl.arange(0, N, layout=gl.SliceLayout(0, o_l))
    d = gl.arange(0, 128, layout=gl.SliceLayout(1, o_l))
    ob = OPART + b.to(gl.int64) * stride_ob + sp * stride_os
    gl.store(ob + (hkv * G + gl.where(go < G, go, 0))[None, :] * stride_oh + d[:, None], o, mask=(go < G)[None, :])


# ---- the launcher ----------------------------------------------------------------------------------------------
KINDS = dict(mma_v2=dict(block_n=32, num_warps=1), wgmma=dict(block_n=64, num_warps=4))


def decode_gluon(q, k_cache, v_cache, rel_logits, *, block_table, seq_lens, cu_seqlens_q, softmax_scale, num_splits,
                 window=None, v_scale=1.0, threshold=SAFE_RESCALE_THRESHOLD, kind="mma_v2", out=None, kernels=None):
    """Split-KV fp8 decode on the `kind` kernel (`KINDS`; from `kernels`, `emulated()`'s, when given), merged by the
    shipped `_decode_merge_kernel`: bf16 `[B, Hq, 128]`."""
    (Hq, D), Hkv, B = q.shape[1:], k_cache.shape[2], seq_lens.shape[0]
    G = Hq // Hkv
    assert D == 128 and G <= 16 and q.dtype == k_cache.dtype == torch.float8_e4m3fn, (D, G, q.dtype)
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device) if out is None else out
    opart = torch.empty(B, Hq, num_splits, D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, Hq, num_splits, dtype=torch.float32, device=q.device)
    ks = kernels or dict(mma_v2=_decode_split_gluon, wgmma=_decode_split_wgmma)
    extra = dict(N=max(8, triton.next_power_of_2(G))) if kind == "wgmma" else {}
    ks[kind][(B, Hkv, num_splits)](
        q, k_cache, v_cache, rel_logits, opart, lse, block_table, seq_lens, cu_seqlens_q, softmax_scale * LOG2E,
        threshold, rel_logits.shape[2], window or 0, num_splits, k_cache.shape[0],
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), rel_logits.stride(0), rel_logits.stride(1),
        block_table.stride(0), opart.stride(0), opart.stride(1), opart.stride(2), lse.stride(0), lse.stride(1),
        G=G, BLOCK_N=KINDS[kind]["block_n"], PAGE=k_cache.shape[1], HAS_WINDOW=window is not None,
        P_OFFSET=float(MAX_OFFSET), num_warps=KINDS[kind]["num_warps"], **extra)
    _decode_merge_kernel[(B, Hq)](opart, lse, out, cu_seqlens_q, v_scale, num_splits,
                                  opart.stride(0), opart.stride(1), opart.stride(2), lse.stride(0), lse.stride(1),
                                  out.stride(0), out.stride(1), BLOCK_S=triton.next_power_of_2(num_splits), HEAD_DIM=D)
    return out


# ---- on a CPU: the kernel's index logic in Triton's interpreter --------------------------------------------------
_EMULATION = [  # (pattern, replacement, occurrences or None): the Gluon kernels as Triton ones, the same arithmetic
    (r"@gluon\.jit", "@triton.jit", 5),
    (r"= gl\.(?:NVMMADistributedLayout|DotOperandLayout|BlockedLayout)\(.*\)", "= 0", 7),      # layouts: unused
    (r",\s*layout=gl\.SliceLayout\([^()]*\)", "", None),
    (r"gl\.convert_layout\((\w+), gl\.SliceLayout\(\d, \w+\)\)", r"\1", 2),
    (r", gl\.SliceLayout\([^()]*\)\)", ")", None),
    (r"(gl\.zeros\(\[[\w, ]+\], gl\.float32), (?:mma|o_l)\)", r"\1)", 3),
    (r"gl\.convert_layout\((\w+), l[ab]\)", r"\1", 2),
    (r"mma_v2\((\w+), (\w+), ", r"tl.dot(\1.to(tl.float32), \2.to(tl.float32), ", 2),
    # P as the portable kernel rounds it in the interpreter (its fp32 -> e4m3 cast is not the hardware's there)
    (r"gl\.minimum\((gl\.exp2\(.*?\)), 448\.0\)\.to\(gl\.float8e4nv\)",
     r"tl_quantize_e4m3(\1).to(tl.float8e4nv, bitcast=True)", 2),
    (r"\bgl\.", "tl.", None),
]
_GLUON_ONLY = re.compile(r"@gluon\.jit\ndef (\w+)\([^@]*?\):\n    # gluon-only:[^@]*?\n\n\n")
_EMULATED_HELPERS = '''
@triton.jit
def _wg_smem(q, N: tl.constexpr, BLOCK_N: tl.constexpr):
    return q, 0, 0, 0


@triton.jit
def _wg_st(k, q_smem, k_smem, s_l: tl.constexpr, BLOCK_N: tl.constexpr, N: tl.constexpr):
    return tl.dot(k.to(tl.float32), tl.trans(q_smem.to(tl.float32)))


@triton.jit
def _wg_ot(v16, p16, acc, v_smem, p_smem):
    return tl.dot(tl.trans(v16.to(tl.float32)), p16.to(tl.float32), acc)
'''

def emulated(folder: Path) -> dict:
    """Both kernels rewritten as Triton kernels with the same index logic and arithmetic (`_EMULATION`: layouts
    dropped, MMAs as fp32 `tl.dot`s; the wgmma kernel's shared-memory helpers replaced by `_EMULATED_HELPERS`),
    written to `folder` and imported: they run under TRITON_INTERPRET=1, so a CPU checks the splits, ranges, masks,
    bias and LSE against the portable decode. `{kind: kernel}` for `decode_gluon(kernels=)`."""
    import importlib.util
    src = Path(__file__).read_text()
    body = src[src.index("# ---- the kernel"):src.index("# ---- the launcher")]
    body, k = _GLUON_ONLY.subn("", body)
    if k != 3: raise RuntimeError(f"{k} gluon-only helpers found, expected 3")
    for pat, rep, n in _EMULATION:
        body, k = re.subn(pat, rep, body)
        if n is not None and k != n: raise RuntimeError(f"emulation rule {pat!r} applied {k} times, expected {n}")
    head = ("import triton\nimport triton.language as tl\nfrom inkling_fp8kv.attention_kernels import _decode_split_range\n"
            "from inkling_fp8kv.attention_kernels import _LOG2E\nfrom inkling_fp8kv.numerics import tl_quantize_e4m3\n"
            "from inkling_fp8kv.rescale import lazy_rescale_max\n")
    path = folder / "decode_gluon_emulated.py"
    path.write_text(head + _EMULATED_HELPERS + "\n\n" + body)
    spec = importlib.util.spec_from_file_location("decode_gluon_emulated", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mma_v2=mod._decode_split_gluon, wgmma=mod._decode_split_wgmma)


# ---- offline: the loops' SASS ------------------------------------------------------------------------------------
def compile_stats(kinds=("mma_v2", "wgmma"), pages=(16, 64)) -> list:
    "Each kernel compiled for sm_90a (no GPU): per build, its loops' opcode counts, registers, spills, shared memory."
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    sys.path.insert(0, str(ROOT / "tools"))
    from sm90_compile import backward_loops, cuobjdump
    out = []
    for kind in kinds:
        kern = dict(mma_v2=_decode_split_gluon, wgmma=_decode_split_wgmma)[kind]
        names, bn, warps = kern.arg_names, KINDS[kind]["block_n"], KINDS[kind]["num_warps"]
        for page in pages:
            const = dict(G=8, BLOCK_N=bn, PAGE=page, HAS_WINDOW=False, P_OFFSET=float(MAX_OFFSET))
            if kind == "wgmma": const["N"] = 8
            ptrs = dict(Q="*fp8e4nv", K="*fp8e4nv", V="*fp8e4nv", REL="*bf16", OPART="*fp32", LSE="*fp32",
                        BT="*i32", SEQ="*i32", CU="*i32")
            sig = {n: "constexpr" if n in const else ptrs.get(n, "fp32" if n in ("sm_scale_log2", "threshold")
                                                            else "i32") for n in names}
            attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                     if sig[n].startswith("*") or n.startswith("stride_") or n == "E"}
            k = triton.compile(GluonASTSource(kern, sig, {(names.index(n),): v for n, v in const.items()}, attrs),
                               target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
            sass = cuobjdump(k, "-sass")
            loops = sorted((collections.Counter(t.split()[0].split(".")[0] for t in body)
                            for body in backward_loops(sass)), key=lambda c: c.total())
            loops = [c for c in loops if c["HMMA"] or c["HGMMA"] or c["QGMMA"]]
            regs = int(re.search(r"REG:(\d+)", cuobjdump(k, "-res-usage")).group(1))
            out.append(dict(kind=kind, block_n=bn, num_warps=warps, page=page, shared=k.metadata.shared, regs=regs,
                            ptx_mma=sorted(set(re.findall(r"(?:mma\.sync\.aligned|wgmma\.mma_async\.sync\.aligned)"
                                                          r"\.([\w.]+)", k.asm["ptx"]))),
                            spills=len(re.findall(r"\b(?:LDL|STL)\b", sass)),
                            loops=[dict(instrs=c.total(),
                                        warp_instrs_per_kb=round(1024 * c.total() * warps / (2 * bn * 128), 1),
                                        **{o: c[o] for o in ("HMMA", "HGMMA", "QGMMA", "F2FP", "PRMT", "LDG", "LDS",
                                                             "STS", "IMAD", "SHFL", "BAR")})
                                   for c in loops]))
    return out


# ---- on the GPU: checks, then times ------------------------------------------------------------------------------
CHECKS = [  # (B, kv, Hq, page, window, varlen, num_splits)
    (3, 3000, 16, 64, None, True, 7), (3, 3000, 16, 16, None, True, 5), (2, 2500, 16, 16, 512, True, 3),
    (4, 1500, 8, 64, None, False, 1), (2, 70000, 16, 64, None, False, 33), (5, 40, 16, 16, None, True, 4)]
SHAPES = [("decode B=32, KV 64K", 32, 65536), ("decode B=8, KV 128K", 8, 131072), ("decode B=1, KV 64K", 1, 65536),
          ("decode B=16, KV 32K", 16, 32768), ("decode B=64, KV 16K", 64, 16384)]


EMULATED = [  # (B, kv, Hq, page, window, varlen, num_splits) for the interpreter, with E = 64 (window: E = W)
    (3, 300, 16, 16, None, True, 3), (2, 250, 16, 16, 48, True, 2), (4, 150, 8, 64, None, False, 1),
    (2, 700, 16, 64, None, False, 5), (5, 40, 16, 16, None, True, 4)]


def _inputs(B, kv, Hq, page, window, varlen, seed, E=1024, device="cuda"):
    from inkling_fp8kv.bench.attention_suites import paged_attention_inputs
    from inkling_fp8kv.numerics import E4M3_DTYPE
    inp = paged_attention_inputs(B, kv, Hq, 1, E4M3_DTYPE, E=window or E, page=page, seed=seed, device=device)
    if varlen:       # mixed lengths, the last one short
        lens = [max(1, kv * (B - i) // B - 3 * i) for i in range(B)]
        inp["seq_lens"] = torch.tensor(lens, dtype=torch.int32, device=device)
        inp["max_seqlen_k"] = max(lens)
    return inp


def _both(inp, window, num_splits, kind, kernels=None):
    from inkling_fp8kv.attention import rel_attention
    kw = {k: inp[k] for k in ("block_table", "seq_lens", "cu_seqlens_q")}
    ship = rel_attention(inp["q"], inp["k_cache"], inp["v_cache"], inp["rel_logits"], **kw,
                         max_seqlen_q=1, max_seqlen_k=inp["max_seqlen_k"], softmax_scale=1 / 128, window=window,
                         num_splits=num_splits, config=dict(block_n=KINDS[kind]["block_n"]))   # the same key tiles
    mine = decode_gluon(inp["q"], inp["k_cache"], inp["v_cache"], inp["rel_logits"], **kw, softmax_scale=1 / 128,
                        window=window, num_splits=num_splits, kind=kind, kernels=kernels)
    return ship.float(), mine.float()


def check_rows(cases=CHECKS, *, kinds=tuple(KINDS), kernels=None, E=1024, device="cuda") -> list:
    "Each case through the shipped decode and each kind (`kernels`' when given) with the same splits: the difference."
    rows = []
    for (i, (B, kv, Hq, page, window, varlen, splits)), kind in itertools.product(enumerate(cases), kinds):
        inp = _inputs(B, kv, Hq, page, window, varlen, seed=100 + i, E=E, device=device)
        ship, mine = _both(inp, window, splits, kind, kernels)
        rel = ((mine - ship).norm() / ship.norm().clamp_min(1e-30)).item()
        rows.append(dict(kind=kind, B=B, kv=kv, Hq=Hq, page=page, window=window, varlen=varlen, num_splits=splits,
                         finite=bool(torch.isfinite(mine).all()), rel_fro_vs_shipped=rel,
                         max_abs=(mine - ship).abs().max().item()))
    return rows


def time_rows(budget_s: float, t0: float, kinds=tuple(KINDS)) -> list:
    from inkling_fp8kv.bench.harness import time_us
    from inkling_fp8kv.bench.attention_suites import ours, kv_bytes, copy_row
    from inkling_fp8kv.attention_launch import decode_num_splits
    from inkling_fp8kv.numerics import E4M3_DTYPE
    rows, sms = [], torch.cuda.get_device_properties(0).multi_processor_count
    for case, B, kv in SHAPES:
        inp = _inputs(B, kv, 16, None, None, False, seed=kv + B)
        copy = copy_row(case, B, kv, 2, "cuda", "replay")
        rows.append(copy)
        nbytes = kv_bytes(B, kv, E4M3_DTYPE)
        def add(impl, fn, **extra):
            if time.time() - t0 > budget_s:
                return rows.append(dict(case=case, impl=impl, skipped="budget", **extra))
            try: us = time_us(fn, "replay")
            except Exception as e: return rows.append(dict(case=case, impl=impl, error=f"{type(e).__name__}: {e}"[:300]))
            tb = nbytes / (us * 1e-6) / 1e12
            rows.append(dict(case=case, B=B, kv=kv, impl=impl, us=us, tbps=tb, of_copy=tb / copy["tbps"], **extra))
        add("shipped", ours(inp))
        kw = {k: inp[k] for k in ("block_table", "seq_lens", "cu_seqlens_q")}
        for kind, waves_list in [(k, w) for k, w in (("mma_v2", (4, 8, 10, 16)), ("wgmma", (2, 4, 8, 16))) if k in kinds]:
            bn = KINDS[kind]["block_n"]
            for waves in waves_list:         # programs per SM: one warp each (mma_v2) or a warpgroup (wgmma)
                splits = decode_num_splits(B, 2, kv, block_n=bn, waves=waves, num_sms=sms)
                out = torch.empty(inp["q"].shape, dtype=torch.bfloat16, device="cuda")
                fn = lambda s=splits, k=kind: decode_gluon(inp["q"], inp["k_cache"], inp["v_cache"], inp["rel_logits"],
                                                           **kw, softmax_scale=1 / 128, num_splits=s, kind=k, out=out)
                add(kind, fn, block_n=bn, split_waves=waves, num_splits=splits)
        inp = None                      # the caches freed before the next shape
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a and print the loops (no GPU needed)")
    ap.add_argument("--out", help="output folder (default $OUT, else a new temporary folder)")
    ap.add_argument("--budget", type=float, default=300, help="seconds for the timing (default 300)")
    ap.add_argument("--emulate", action="store_true", help="on a CPU with TRITON_INTERPRET=1: both kernels rewritten "
                                                          "as Triton ones (`emulated`) against the shipped decode")
    ap.add_argument("--check-timeout", type=float, default=240, help="seconds for each kernel's checks (default 240)")
    ap.add_argument("--check", choices=tuple(KINDS), help=argparse.SUPPRESS)    # a child: one kernel's checks
    a = ap.parse_args(argv)
    if a.check:
        for r in check_rows(kinds=(a.check,)): print(json.dumps(r))
        return 0
    if a.compile:
        for r in compile_stats():
            print(json.dumps(r))
        return 0
    if a.emulate:
        if os.environ.get("TRITON_INTERPRET") != "1": sys.exit("--emulate runs the interpreter: set TRITON_INTERPRET=1")
        with tempfile.TemporaryDirectory() as tmp:
            rows = check_rows(EMULATED, kernels=emulated(Path(tmp)), E=64, device="cpu")
        for r in rows: print(json.dumps(r))
        bad = [r for r in rows if not r["finite"] or r["rel_fro_vs_shipped"] > 1e-4]
        print(f"{len(rows) - len(bad)} of {len(rows)} cases match the shipped decode")
        return 1 if bad else 0
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("the lab run needs an SM90 GPU (--compile runs on any machine)")
    from inkling_fp8kv.bench.harness import run_header, write_json_atomic
    t0 = time.time()
    out = Path(a.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="sm90-decode-lab-"))
    res = dict(run_header("python tools/sm90_decode_lab.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                          "cuda"), what=__doc__.split("\n\n")[0])
    save = lambda: write_json_atomic(out / "sm90_decode_lab.json", res | dict(wall_s=time.time() - t0))
    # each kernel checked in a child process first: one whose barriers deadlock hangs its child, which is killed
    res["checks"], passed = [], []
    for kind in KINDS:
        try:
            r = subprocess.run([sys.executable, __file__, "--check", kind], capture_output=True, text=True,
                               timeout=a.check_timeout)
            rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            why = None if r.returncode == 0 else r.stderr.strip()[-800:]
        except subprocess.TimeoutExpired:
            rows, why = [], f"no result in {a.check_timeout:.0f} s (a hang: killed)"
        # both outputs are bf16: where their fp32 results agree, an element differs by at most one bf16 ulp, at most
        # 2^-7 of it, so only a relative difference above 2^-7 is more than output rounding (max_abs is recorded too)
        bad = [x for x in rows if not x["finite"] or x["rel_fro_vs_shipped"] > 2 ** -7]
        res["checks"] += rows or [dict(kind=kind, error=why)]
        if why is None and rows and not bad: passed.append(kind)
        print(f"checks {kind}:", "ok" if kind in passed else f"FAILED {why or json.dumps(bad)}", flush=True)
        save()
    if passed:
        res["timed"] = time_rows(a.budget, t0, kinds=tuple(passed))
        save()
    for r in res.get("timed", []):
        if "us" in r:
            print(f"{r['case']:24s} {r['impl']:8s} {str(r.get('block_n', '')):3s} {str(r.get('split_waves', '')):3s} "
                  f"{r['us']:8.1f} us {r.get('tbps', 0):5.2f} TB/s {r.get('of_copy', 1):6.1%} of copy")
    print(f"-> {out / 'sm90_decode_lab.json'} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
