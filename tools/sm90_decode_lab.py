#!/usr/bin/env python3
"""The SM90 decode's split count, measured: notebook 07c's Gluon decode (`decode_sm90`, a warpgroup per split on
wgmma) at 2, 4, 8 and 16 programs per SM (`decode_num_splits(..., block_n=64, waves=W)`), beside the portable decode
and a copy of the same K/V bytes, as CUDA-graph replays at five decode shapes, after a check of the kernel against the
portable decode with the same tiles and splits. 07c's `DECODE_WAVES` is this sweep's winner.

The lab's earlier records (`bench/notes/sm90_decode_lab_h100.json.gz`) timed two Gluon prototypes written here: an
mma_v2 decode, which failed its checks and was dropped, and the wgmma decode that became 07c's kernel. Their code is
in the repository's history; the kernel's CPU checks (its index logic in the interpreter, its sm_90a build) are 07c's.

  python tools/sm90_decode_lab.py --compile          any machine: the kernel compiled for sm_90a (tools/sm90_compile.py)
  PYTHONPATH=$PWD python tools/sm90_decode_lab.py [--out DIR] [--budget S] [--waves 4,5] [--variant NAME]
                                                     on an SM90 GPU: the checks, then the times (with --variant, of
                                                     that edit of the kernel, recorded as "sm90 NAME": `VARIANTS`)
-> sm90_decode_lab.json in --out, else $OUT, else a new temporary folder (a lab record: read, then kept in bench/notes).
"""
import argparse, itertools, json, os, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import torch

CHECKS = [  # (B, kv, Hq, page, window, varlen, num_splits)
    (3, 3000, 16, 64, None, True, 7), (3, 3000, 16, 16, None, True, 5), (2, 2500, 16, 16, 512, True, 3),
    (4, 1500, 8, 64, None, False, 1), (2, 70000, 16, 64, None, False, 33), (5, 40, 16, 16, None, True, 4)]
SHAPES = [("decode B=32, KV 64K", 32, 65536), ("decode B=8, KV 128K", 8, 131072), ("decode B=1, KV 64K", 1, 65536),
          ("decode B=16, KV 32K", 16, 32768), ("decode B=64, KV 16K", 64, 16384)]
WAVES = (2, 4, 8, 16)


from sm90_lab import edit as _edit      # the prefill lab's: exactly one occurrence, or it fails


TILE_BLOCKS = '''
@gluon.jit
def _tile_blocks(bt_row, j0, limit, BLOCK_N: gl.constexpr, PAGE: gl.constexpr, layout: gl.constexpr):
    # the block of each key j0 ... j0 + BLOCK_N - 1 (0 at or past limit), in the row layout of `layout`
    n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    return gl.load(bt_row + n // PAGE, mask=n < limit, other=0).to(gl.int64)

'''

BT_HELPERS = TILE_BLOCKS + '''
@gluon.jit
def _rows_of(X, blk, j0, head_off, stride_b, stride_s, BLOCK_N: gl.constexpr, PAGE: gl.constexpr,
             layout: gl.constexpr):
    # keys j0 ... of whole far tiles, from their blocks `blk` (`_tile_blocks`)
    n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    d = gl.arange(0, 128, layout=gl.SliceLayout(0, layout))
    slot = blk * stride_b + (n % PAGE) * stride_s + head_off
    return gl.load(X + slot[:, None] + d[None, :])

'''


def bt_ahead(src: str) -> str:
    """The far loop reads the next tile's block-table entries a tile ahead, so that a tile's K and V loads wait on one
    memory latency instead of two (the entry, then the rows it points at)."""
    src = _edit(src, "\n@gluon.jit\ndef _decode_smem(", BT_HELPERS + "\n@gluon.jit\ndef _decode_smem(")
    old = """    for j0 in range(start, far_end, BLOCK_N):          # far tiles: whole, unbiased, unmasked
        k = _paged_rows(K, bt_row, j0, kv_len, kh, stride_kb, stride_ks, BLOCK_N, PAGE, ld, True)
        v = _paged_rows(V, bt_row, j0, kv_len, vh, stride_vb, stride_vs, BLOCK_N, PAGE, ld, True)
"""
    new = """    blk = _tile_blocks(bt_row, start, far_end, BLOCK_N, PAGE, ld)
    for j0 in range(start, far_end, BLOCK_N):          # far tiles: whole, unbiased, unmasked
        blk_next = _tile_blocks(bt_row, j0 + BLOCK_N, far_end, BLOCK_N, PAGE, ld)
        k = _rows_of(K, blk, j0, kh, stride_kb, stride_ks, BLOCK_N, PAGE, ld)
        v = _rows_of(V, blk, j0, vh, stride_vb, stride_vs, BLOCK_N, PAGE, ld)
        blk = blk_next
"""
    return _edit(src, old, new)


RING_HELPERS = TILE_BLOCKS + '''
@gluon.jit
def _issue_tile(K, V, k_dst, v_dst, blk, j0, limit, kh, vh, stride_kb, stride_ks, stride_vb, stride_vs,
                BLOCK_N: gl.constexpr, PAGE: gl.constexpr, layout: gl.constexpr):
    # keys j0 ... of K and V into a ring stage by cp.async, 16 bytes a copy; keys at or past limit are zero-filled
    n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    d = gl.arange(0, 128, layout=gl.SliceLayout(0, layout))
    ok = (n < limit)[:, None]
    off = (n % PAGE).to(gl.int64)
    async_copy.async_copy_global_to_shared(k_dst, K + (blk * stride_kb + off * stride_ks + kh)[:, None] + d[None, :],
                                           mask=ok)
    async_copy.async_copy_global_to_shared(v_dst, V + (blk * stride_vb + off * stride_vs + vh)[:, None] + d[None, :],
                                           mask=ok)
    async_copy.commit_group()


'''

# a ring stage's tile through _decode_step, far or near: the end of ring()'s and tma_ring()'s loops (NEAR_FIRST, a
# line of its own: what a near tile does first)
STAGE_STEP = """        if t < n_far:
            acc, l_i, m_i = _decode_step(0, v, acc, l_i, m_i, q_smem, k_ring.index(s), v_smem, p_smem, REL, j0, end,
                                         pos, rel_off, row_valid, sm_scale_log2, threshold, E, W, BLOCK_N, N, False,
                                         HAS_WINDOW, P_OFFSET, s_l, o_l)
        else:
NEAR_FIRST
            acc, l_i, m_i = _decode_step(0, v, acc, l_i, m_i, q_smem, k_ring.index(s), v_smem, p_smem, REL, j0, end,
                                         pos, rel_off, row_valid, sm_scale_log2, threshold, E, W, BLOCK_N, N, True,
                                         HAS_WINDOW, P_OFFSET, s_l, o_l)
"""


def step_from_stage(src: str) -> str:
    """_decode_step's Q.K^T reads the tile where the ring holds it (its `k_smem` argument; its `k` is unused), and the
    barrier _decode_st gave the Vᵀ and Pᵀ stores (the last tile's wgmma read them) stands before them."""
    src = _edit(src, "    s = _decode_st(k, q_smem, k_smem, s_l, BLOCK_N, N) * sm_scale_log2\n",
                "    s = warpgroup_mma(k_smem, q_smem.permute((1, 0)), gl.zeros([BLOCK_N, N], gl.float32, s_l),\n"
                "                      use_acc=False) * sm_scale_log2\n")
    return _edit(src, "    acc = _decode_ot(v.to(gl.float16), p8.to(gl.float16), acc, v_smem, p_smem)\n",
                 "    _cta_barrier()\n    acc = _decode_ot(v.to(gl.float16), p8.to(gl.float16), acc, v_smem, p_smem)\n")


RING_LOOP = '''    # every tile through a ring of STAGES stages filled by cp.async, STAGES - 1 tiles ahead; the
    # block-table entries of the tile to be issued are read one iteration before (its copies wait on one latency)
    STAGES: gl.constexpr = RING_STAGES
    sh8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    k_ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_N, 128], sh8)
    v_ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_N, 128], sh8)
    n_tiles = gl.cdiv(end - start, BLOCK_N)
    n_far = (far_end - start) // BLOCK_N
    for i in gl.static_range(STAGES - 1):
        blk = _tile_blocks(bt_row, start + i * BLOCK_N, end, BLOCK_N, PAGE, ld)
        _issue_tile(K, V, k_ring.index(i), v_ring.index(i), blk, start + i * BLOCK_N, end, kh, vh, stride_kb,
                    stride_ks, stride_vb, stride_vs, BLOCK_N, PAGE, ld)
    blk = _tile_blocks(bt_row, start + (STAGES - 1) * BLOCK_N, end, BLOCK_N, PAGE, ld)
    for t in range(0, n_tiles):
        j0 = start + t * BLOCK_N
        ja = j0 + (STAGES - 1) * BLOCK_N                   # the tile issued now
        blk_next = _tile_blocks(bt_row, ja + BLOCK_N, end, BLOCK_N, PAGE, ld)
        _cta_barrier()                                     # every thread is done with tile t - 1's stage
        sa = (t + STAGES - 1) % STAGES
        _issue_tile(K, V, k_ring.index(sa), v_ring.index(sa), blk, ja, end, kh, vh, stride_kb, stride_ks, stride_vb,
                    stride_vs, BLOCK_N, PAGE, ld)
        async_copy.wait_group(STAGES - 1)                  # tile t's copies (this thread's) landed
        _cta_barrier()                                     # and every thread's
        fence_async_shared()                               # visible to wgmma
        s = t % STAGES
        v = v_ring.index(s).load(ld)
''' + STAGE_STEP.replace("NEAR_FIRST\n", "") + '''        blk = blk_next
    async_copy.wait_group(0)
'''


def ring(stages: int):
    def edit_ring(src: str) -> str:
        src = _edit(src, "    from triton.language.core import _aggregate as aggregate\n",
                    "    from triton.language.core import _aggregate as aggregate\n"
                    "    from triton.experimental.gluon.language.nvidia.ampere import async_copy\n")
        src = _edit(src, "\n# %% ../nbs/07c_attention_sm90.ipynb #d5c0a004\n",
                    "\n# %% ../nbs/07c_attention_sm90.ipynb #d5c0a004\n" + RING_HELPERS)
        a = src.index("    for j0 in range(start, far_end, BLOCK_N):          # far tiles: whole, unbiased, unmasked")
        b = src.index("    l_safe = gl.where(l_i == 0.0, 1.0, l_i)\n", a)
        src = src[:a] + RING_LOOP.replace("RING_STAGES", str(stages)) + src[b:]
        return step_from_stage(src)
    edit_ring.__doc__ = (f"Every tile's K and V through a {stages}-stage shared-memory ring filled by cp.async, "
                         f"{stages - 1} tile(s) ahead; the block-table entries a tile ahead of the copies.")
    return edit_ring


TMA_HELPERS = """
@gluon.jit
def _tma_tile(k_desc, v_desc, BT, bt_off, j0, pred, kv_len, oob_row, row_blk, row_head, col_head, k_dst, v_dst, bar,
              BLOCK_N: gl.constexpr, PAGE: gl.constexpr, BOX: gl.constexpr):
    # keys j0 ... j0 + BLOCK_N - 1 of K and V into a ring stage by TMA, a box per page (`pred` false: nothing); a page
    # past the sequence is not looked up: its box starts at oob_row, past the 2-D view, and TMA writes zeros
    if pred:
        mbarrier.expect(bar, 2 * BLOCK_N * 128)
        for sub in gl.static_range(BLOCK_N // BOX):
            key = j0 + sub * BOX
            blk = gl.load(BT + bt_off + key // PAGE, mask=key < kv_len, other=0)
            row = gl.where(key < kv_len, blk * row_blk + row_head + key % PAGE, oob_row)
            tma.async_copy_global_to_shared(k_desc, [row, col_head], bar, k_dst.slice(sub * BOX, BOX))
            tma.async_copy_global_to_shared(v_desc, [row, col_head], bar, v_dst.slice(sub * BOX, BOX))

"""

TMA_LOOP = """    # every tile through a ring of STAGES stages filled by TMA, STAGES - 1 tiles ahead; a barrier a stage
    STAGES: gl.constexpr = RING_STAGES
    BOX: gl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N
    sh8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    k_ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_N, 128], sh8)
    v_ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_N, 128], sh8)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    fence_async_shared()
    _cta_barrier()
    n_tiles = gl.cdiv(end - start, BLOCK_N)
    n_far = (far_end - start) // BLOCK_N
    bt_off = b.to(gl.int64) * stride_btb
    rh = hkv * row_head
    ch = hkv * col_head
    for i in gl.static_range(STAGES - 1):
        _tma_tile(k_desc, v_desc, BT, bt_off, start + i * BLOCK_N, i < n_tiles, kv_len, oob_row, row_blk, rh, ch,
                  k_ring.index(i), v_ring.index(i), ready.index(i), BLOCK_N, PAGE, BOX)
    for t in range(0, n_tiles):
        j0 = start + t * BLOCK_N
        _cta_barrier()                                     # every thread is done with tile t - 1's stage
        sa = (t + STAGES - 1) % STAGES
        _tma_tile(k_desc, v_desc, BT, bt_off, j0 + (STAGES - 1) * BLOCK_N, t + STAGES - 1 < n_tiles, kv_len, oob_row,
                  row_blk, rh, ch, k_ring.index(sa), v_ring.index(sa), ready.index(sa), BLOCK_N, PAGE, BOX)
        s = t % STAGES
        mbarrier.wait(ready.index(s), (t // STAGES) & 1)
        v = v_ring.index(s).load(ld)
""" + STAGE_STEP.replace("NEAR_FIRST\n", """\
            if j0 + BLOCK_N > kv_len:      # the sequence's last tile: its page's slots past it read as zeros in V
                n = j0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ld))
                v = gl.where((n < kv_len)[:, None], v, gl.zeros_like(v))
""") + """    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
"""

TMA_LAUNCH = """

class _TmaDecodeLaunch:
    "`kernel[grid](q, k_cache, v_cache, ...)` as `_split_kv` calls it, with K and V passed as 2-D TMA descriptors."
    def __init__(self, kernel): self.kernel = kernel
    def __getitem__(self, grid):
        def launch(q, k_cache, v_cache, *args, **meta):
            return self.kernel[grid](q, *_decode_tma_descs(k_cache, v_cache), *args, **meta)
        return launch

def _decode_tma_descs(k_cache, v_cache):
    "2-D TMA descriptors of the K and V caches' row views (`_rows_2d`), boxes of a page (at most a tile) x 128 bytes."
    smem = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    box = min(k_cache.shape[1], DECODE_BLOCK_N)
    (k2, *geo), (v2, *vgeo) = _rows_2d(k_cache), _rows_2d(v_cache)
    assert geo == vgeo and k2.shape == v2.shape, "K and V caches of one layout"
    desc = lambda x: TensorDescriptor(x, list(x.shape), list(x.stride()), [box, 128], smem)
    return desc(k2), desc(v2)

def _decode_tma_geometry(k_cache) -> dict:
    "The kernel's last arguments: the row view's first row past its end, and its block, head and column strides."
    k2, row_blk, row_head, col_head = _rows_2d(k_cache)
    return dict(oob_row=k2.shape[0], row_blk=row_blk, row_head=row_head, col_head=col_head)
"""


def tma_ring(stages: int):
    def edit_tma(src: str) -> str:
        src = _edit(src, "\n# %% ../nbs/07c_attention_sm90.ipynb #d5c0a004\n",
                    "\n# %% ../nbs/07c_attention_sm90.ipynb #d5c0a004\n" + TMA_HELPERS)
        src = _edit(src, "@gluon.jit(do_not_specialize=[\"num_blocks\"])\ndef _decode_sm90_kernel(Q, K, V, REL,",
                    "@gluon.jit(do_not_specialize=[\"num_blocks\", \"oob_row\"])\n"
                    "def _decode_sm90_kernel(Q, k_desc, v_desc, REL,")
        src = _edit(src, "                        stride_rt, stride_rh, stride_btb, stride_ob, stride_oh, stride_os, "
                    "stride_lb, stride_lh,\n",
                    "                        stride_rt, stride_rh, stride_btb, stride_ob, stride_oh, stride_os, "
                    "stride_lb, stride_lh,\n                        oob_row, row_blk, row_head, col_head,\n")
        a = src.index("    for j0 in range(start, far_end, BLOCK_N):          # far tiles: whole, unbiased, unmasked")
        b = src.index("    l_safe = gl.where(l_i == 0.0, 1.0, l_i)\n    lse", a)
        src = src[:a] + TMA_LOOP.replace("RING_STAGES", str(stages)) + src[b:]
        src = step_from_stage(src)
        # the launch passes the descriptors and the views' geometry; the rows' other arguments are unused
        src = _edit(src, "    return _split_kv(_decode_sm90_kernel, q, k_cache, v_cache, rel_logits,",
                    "    return _split_kv(_TmaDecodeLaunch(_decode_sm90_kernel), q, k_cache, v_cache, rel_logits,")
        src = _edit(src, "                     P_OFFSET=float(MAX_OFFSET), num_warps=_DECODE_WARPS)\n",
                    "                     P_OFFSET=float(MAX_OFFSET), num_warps=_DECODE_WARPS,\n"
                    "                     **_decode_tma_geometry(k_cache))\n")
        return src + TMA_LAUNCH
    edit_tma.__doc__ = (f"Every tile's K and V through a {stages}-stage shared-memory ring filled by TMA (a box per "
                        f"page, one mbarrier a stage), {stages - 1} tile(s) ahead; no address arithmetic per thread.")
    return edit_tma


def lsum(src: str) -> str:
    """The softmax's row sums kept per element, [BLOCK_N, N] in Sᵀ's layout, and summed over the keys once after the
    last tile: a tile's sum then costs an add per element instead of a reduction across the warpgroup's four warps
    (shuffles, then shared memory and a barrier). The same e4m3 P is summed, in another order."""
    src = _edit(src, "        l_i = l_i * alpha\n", "        l_i = l_i * alpha[None, :]\n")
    src = _edit(src, "    l_i = l_i + gl.sum(p8.to(gl.float32), 0)          # the row sum of the e4m3 P that the "
                "product reads\n", "    l_i = l_i + p8.to(gl.float32)                      # per element: summed over "
                "the keys at the end\n")
    src = _edit(src, "    l_i = gl.zeros([N], gl.float32, gl.SliceLayout(0, s_l))\n",
                "    l_i = gl.zeros([BLOCK_N, N], gl.float32, s_l)\n")
    end = ("    l_safe = gl.where(l_i == 0.0, 1.0, l_i)\n"
           "    lse = gl.where(l_i == 0.0, float(\"-inf\"), m_i + gl.log2(l_safe) - P_OFFSET)")
    return _edit(src, end, "    l_i = gl.sum(l_i, 0)\n" + end)


def compose(*edits):
    def edit_all(src: str) -> str:
        for e in edits: src = e(src)
        return src
    edit_all.__doc__ = " Then: ".join(e.__doc__ for e in edits)
    return edit_all


# gone from here: prefetch (the next tile's K and V in registers: 237 registers, slower), block128 (128-key tiles,
# 3 programs an SM: slower), tma_ring(3) / tma_ring(4) (3- and 4-stage TMA rings: wrong outputs in five of the six
# checks and an illegal address in one run, where tma2 passes; the cause is not found) and tma2+lsum (no faster than
# tma2); their records in bench/notes
VARIANTS = {"bt_ahead": bt_ahead, "ring2": ring(2), "ring3": ring(3), "lsum": lsum,
            "ring2+lsum": compose(ring(2), lsum), "ring3+lsum": compose(ring(3), lsum), "tma2": tma_ring(2)}


LABEL = "sm90"      # the kernel's name in the record: "sm90 VARIANT" when a variant runs


def use_variant(name: str):
    "Make `rel_attention`'s SM90 decode run variant `name` of the kernel (the module's source with its edits)."
    import importlib.util, inspect
    import inkling_fp8kv.attention_sm90 as shipped
    path = Path(tempfile.mkdtemp()) / f"sm90_decode_{name}.py"
    path.write_text(VARIANTS[name](inspect.getsource(shipped)))
    spec = importlib.util.spec_from_file_location(f"inkling_fp8kv._sm90_decode_{name}", path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    shipped._decode_sm90_kernel = mod._decode_sm90_kernel       # launch_decode_sm90 reads the globals at each call
    shipped.launch_decode_sm90 = mod.launch_decode_sm90         # rel_attention's dispatch reads it at each call
    shipped.DECODE_BLOCK_N = mod.DECODE_BLOCK_N
    global LABEL
    LABEL = f"sm90 {name}"
    return mod


def _inputs(B, kv, Hq, page, window, varlen, seed, E=1024, device="cuda"):
    from inkling_fp8kv.bench.attention_suites import paged_attention_inputs
    from inkling_fp8kv.numerics import E4M3_DTYPE
    inp = paged_attention_inputs(B, kv, Hq, 1, E4M3_DTYPE, E=window or E, page=page, seed=seed, device=device)
    if varlen:       # mixed lengths, the last one short
        lens = [max(1, kv * (B - i) // B - 3 * i) for i in range(B)]
        inp["seq_lens"] = torch.tensor(lens, dtype=torch.int32, device=device)
        inp["max_seqlen_k"] = max(lens)
    return inp


def _call(inp, *, fast_path, num_splits, window=None, out=None, config=None):
    "`rel_attention` on a decode batch on its trusted path (no sync): a zero-argument closure."
    from inkling_fp8kv.attention import rel_attention
    kw = {k: inp[k] for k in ("block_table", "seq_lens", "cu_seqlens_q", "max_seqlen_k")}
    return lambda: rel_attention(inp["q"], inp["k_cache"], inp["v_cache"], inp["rel_logits"], **kw, max_seqlen_q=1,
                                 softmax_scale=1 / 128, window=window, num_splits=num_splits, fast_path=fast_path,
                                 config=config, out=out, validate=False)


def check_rows(cases=CHECKS) -> list:
    "Each case through the SM90 decode and the portable decode with the same 64-key tiles and splits: the difference."
    from inkling_fp8kv.attention_sm90 import DECODE_BLOCK_N
    rows = []
    for i, (B, kv, Hq, page, window, varlen, splits) in enumerate(cases):
        inp = _inputs(B, kv, Hq, page, window, varlen, seed=100 + i)
        mine = _call(inp, fast_path=True, num_splits=splits, window=window)().float()
        ship = _call(inp, fast_path=False, num_splits=splits, window=window,
                     config=dict(block_n=DECODE_BLOCK_N, num_warps=4, num_stages=2))().float()
        rows.append(dict(kind=LABEL, B=B, kv=kv, Hq=Hq, page=page, window=window, varlen=varlen, num_splits=splits,
                         finite=bool(torch.isfinite(mine).all()),
                         rel_fro_vs_shipped=((mine - ship).norm() / ship.norm().clamp_min(1e-30)).item(),
                         max_abs=(mine - ship).abs().max().item()))
    return rows


def time_rows(budget_s: float, t0: float, waves_list=WAVES) -> list:
    from inkling_fp8kv.bench.harness import time_us
    from inkling_fp8kv.bench.attention_suites import kv_bytes, copy_row
    from inkling_fp8kv.attention_launch import decode_num_splits
    from inkling_fp8kv.attention_sm90 import DECODE_BLOCK_N
    from inkling_fp8kv.numerics import E4M3_DTYPE
    rows, sms = [], torch.cuda.get_device_properties(0).multi_processor_count
    for case, B, kv in SHAPES:
        inp = _inputs(B, kv, 16, None, None, False, seed=kv + B)
        copy = copy_row(case, B, kv, 2, "cuda", "replay")
        rows.append(copy)
        nbytes = kv_bytes(B, kv, E4M3_DTYPE)
        out = torch.empty(inp["q"].shape, dtype=torch.bfloat16, device="cuda")
        def add(impl, fn, **extra):
            if time.time() - t0 > budget_s:
                return rows.append(dict(case=case, impl=impl, skipped="budget", **extra))
            try: us = time_us(fn, "replay")
            except Exception as e:
                return rows.append(dict(case=case, impl=impl, error=f"{type(e).__name__}: {e}"[:300]))
            tb = nbytes / (us * 1e-6) / 1e12
            rows.append(dict(case=case, B=B, kv=kv, impl=impl, us=us, tbps=tb, of_copy=tb / copy["tbps"], **extra))
        add("portable", _call(inp, fast_path=False, num_splits=None, out=out))      # the portable decode's own launch
        for waves in waves_list:             # programs per SM, a warpgroup each
            splits = decode_num_splits(B, 2, kv, block_n=DECODE_BLOCK_N, waves=waves, num_sms=sms)
            add(LABEL, _call(inp, fast_path=True, num_splits=splits, out=out), block_n=DECODE_BLOCK_N,
                split_waves=waves, num_splits=splits)
        inp = None                      # the caches freed before the next shape
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a and print the builds (no GPU needed)")
    ap.add_argument("--out", help="output folder (default $OUT, else a new temporary folder)")
    ap.add_argument("--budget", type=float, default=300, help="seconds for the timing (default 300)")
    ap.add_argument("--waves", type=lambda x: tuple(int(w) for w in x.split(",")), default=WAVES,
                    help="programs per SM to time, comma-separated (default %(default)s)")
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="time this variant of the kernel instead")
    a = ap.parse_args(argv)
    if a.variant: use_variant(a.variant)
    if a.compile:
        from sm90_compile import build_decode
        for page, window in itertools.product((64, 16), (None, 512)): print(json.dumps(build_decode(page, window)))
        return 0
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("the lab run needs an SM90 GPU (--compile runs on any machine)")
    from inkling_fp8kv.bench.harness import run_header, write_json_atomic
    t0 = time.time()
    out = Path(a.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="sm90-decode-lab-"))
    res = dict(run_header("python tools/sm90_decode_lab.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                          "cuda"), what=__doc__.split("\n\n")[0])
    save = lambda: write_json_atomic(out / "sm90_decode_lab.json", res | dict(wall_s=time.time() - t0))
    res["checks"] = check_rows()
    # both outputs are bf16: where their fp32 results agree, an element differs by at most one bf16 ulp, at most 2^-7
    # of it, so only a relative difference above 2^-7 is more than output rounding (max_abs is recorded too)
    bad = [x for x in res["checks"] if not x["finite"] or x["rel_fro_vs_shipped"] > 2 ** -7]
    print("checks:", "ok" if not bad else f"FAILED {json.dumps(bad)}", flush=True)
    save()
    if not bad:
        res["timed"] = time_rows(a.budget, t0, a.waves)
        save()
    for r in res.get("timed", []):
        if "us" in r:
            print(f"{r['case']:24s} {r['impl']:8s} {str(r.get('split_waves', '')):3s} "
                  f"{r['us']:8.1f} us {r.get('tbps', 0):5.2f} TB/s {r.get('of_copy', 1):6.1%} of copy")
    print(f"-> {out / 'sm90_decode_lab.json'} ({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
