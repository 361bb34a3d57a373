#!/usr/bin/env python3
"""Lab variants of the SM90 fp8 prefill (notebook 07c) and of split-KV decode's launch, measured in one GPU call.

A prefill variant is the shipped module's source with named edits (`VARIANTS`), imported as a module of the package
the way notebook 07c builds its one-level control: the shipped kernel itself is never changed by this script.

  python tools/sm90_lab.py --compile [VARIANT...]     any machine, no GPU: each variant compiled for sm_90a by Triton
                                                      and its ptxas (tools/sm90_compile.py): registers, spills, shared
                                                      memory, wgmma shapes; a variant that no longer applies fails here
  PYTHONPATH=$PWD python tools/sm90_lab.py [--out DIR] [--breakdown] [--no-decode] [VARIANT...]
                                                      on the H200: each variant checked against the shipped fast path
                                                      and the portable kernel on mixed batches (global and window
                                                      layers, pages 16/64/128, Hq 16/8), then timed beside the shipped
                                                      kernel; then the decode launch sweep at the issue's three shapes
-> sm90_lab.json in --out, else $OUT, else a new temporary folder (never bench/results: a lab run is read, then the
   winners are folded into 07c / 06b and measured again by bench/attention_sm90.py).
  python tools/sm90_lab.py --fold VARIANT            writes a prefill variant's edits into nbs/07c_attention_sm90.ipynb's
                                                      cells (checked to export to exactly its source); nbdev_export
                                                      then makes it the shipped kernel, to be tested on the H200
"""
import argparse, inspect, itertools, json, math, os, re, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def edit(src: str, old: str, new: str, count: int = 1) -> str:
    "`src` with `old` replaced by `new`: exactly `count` times (None: at least once); a stale edit fails, never half-applies."
    n = src.count(old)
    if n != count and not (count is None and n):
        raise ValueError(f"edit expects {count or 'some'} occurrence(s) of {old[:70]!r}, the source has {n}")
    return src.replace(old, new)

def stages4(src: str) -> str:
    return edit(src, "_CONSUMER_REGS, _MAXNREG = 128, 128, 3, 4,", "_CONSUMER_REGS, _MAXNREG = 128, 128, 4, 4,")

# ---- programmatic dependent launch: the prefill kernel is launched while the Vᵀ pre-pass runs (launch_pdl); its
# prologue (Q into shared memory, the barriers, the key range) overlaps the pre-pass, and only the producer, the one
# partition that reads the scratch, waits for it (griddepcontrol.wait). The pre-pass lets its dependent launch as it
# starts. At 1K x 4K the pre-pass and the launch gap are 5 % of the call on the H100 (sm90_lab_h100_breakdown) --------
def pdl(src: str) -> str:
    src = edit(src, "    t, b, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)\n",
               "    t, b, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)\n"
               "    tl.inline_asm_elementwise(\"griddepcontrol.launch_dependents; // $0\", \"=r\", [], dtype=tl.int32,\n"
               "                              is_pure=False, pack=1)\n")
    src = edit(src, "def _producer(cfg, keys, tiles, kv):\n",
               "def _producer(cfg, keys, tiles, kv):\n"
               "    # the Vᵀ pre-pass launched this kernel early: its scratch is complete and visible past this wait\n"
               "    gl.inline_asm_elementwise(\"griddepcontrol.wait; // $0\", \"=r\", [], dtype=gl.int32, is_pure=False,\n"
               "                              pack=1)\n")
    return edit(src, "    _prefill_sm90_kernel[grid](*args, **meta, maxnreg=_MAXNREG)\n",
                "    _prefill_sm90_kernel[grid](*args, **meta, maxnreg=_MAXNREG, launch_pdl=True)\n")

# ---- the near tiles' bias rows prefetched into L2 by the producer, once the ring's first stages are issued: the far
# tiles (most of a small prefill's tiles come first) run while they stream in, so a near tile's bias gather waits on
# L2 rather than HBM (a benchmark's L2 is flushed between calls; serving's rel_logits are freshly written) ----------
BIAS_PREFETCH = '''
@gluon.jit
def _prefetch_bias(cfg, qt):
    # every bias row of this program's queries (row r: token tok0 + r // G, head hkv·G + r % G), one 128-byte line of
    # its band a step, one row a thread: prefetch.global.L2, a hint that loads nothing into registers
    rows_l: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    r = gl.arange(0, 128, layout=rows_l)
    tok = gl.minimum(qt.tok0 + r // cfg.G, qt.q_len - 1)
    row = qt.REL + (qt.q_start + tok).to(gl.int64) * qt.stride_rt + (qt.hkv * cfg.G + r % cfg.G) * qt.stride_rh
    band = gl.minimum(qt.E, qt.W) if cfg.HAS_WINDOW else qt.E
    for line in range(0, gl.cdiv(band, 64)):                        # 64 bf16 a line
        gl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [row + line * 64], dtype=gl.int32,
                                  is_pure=False, pack=1)

'''

def bias_prefetch(src: str) -> str:
    src = edit(src, "\n@gluon.jit\ndef _producer(", BIAS_PREFETCH + "\n@gluon.jit\ndef _producer(")
    src = edit(src, "def _producer(cfg, keys, tiles, kv):\n", "def _producer(cfg, keys, tiles, kv, qt):\n")
    src = edit(src, "        _issue(cfg, keys, tiles, kv, i)\n",
               "        _issue(cfg, keys, tiles, kv, i)\n"
               "        if i == gl.minimum(keys.n_tiles, cfg.STAGES) - 1:\n"
               "            _prefetch_bias(cfg, qt)\n")
    return edit(src, "(_producer, (cfg, keys, tiles, kv))", "(_producer, (cfg, keys, tiles, kv, qt))")

# ---- window layers on qk_next_pp's schedule (commit 72450f7: 9 % faster than the free schedule at window 512 on the
# H100): Q.K^T(j + 1) issued right behind P.V(j) in the warpgroup's turn, one wait for both. A window layer's tiles are
# all near ones. The global builds are untouched (the same cubins): `_tile_next` is `_tile` edited, beside it -------
QK_ISSUE = '''
@gluon.jit
def _qk_issue(cfg, tiles, kv, q_wg, j):
    kv.wait_ready(j)
    s_acc = gl.zeros([cfg.M, cfg.BLOCK_N], gl.float32, cfg.s_layout)
    return warpgroup_mma(q_wg, tiles.k_smem.index(j % cfg.STAGES).permute((1, 0)), s_acc, use_acc=False, is_async=True)

'''

def window_next(src: str) -> str:
    a = src.index("@gluon.jit\ndef _tile(")
    tile = src[a:src.index("\n# %% ", a)]
    nxt = edit(tile, "def _tile(", "def _tile_next(")
    nxt = edit(nxt, "row_valid, WG: gl.constexpr,\n          MASKED: gl.constexpr):\n",
               "row_valid, qk,\n               WG: gl.constexpr, MASKED: gl.constexpr, NEXT: gl.constexpr):\n")
    i, k = nxt.index("    kv.wait_ready(j)\n"), nxt.index("    if MASKED:\n")
    nxt = nxt[:i] + nxt[k:]
    nxt = edit(nxt, "    pv = warpgroup_mma_wait(0, deps=(pv,))\n",
               "    if NEXT:\n"
               "        qk = _qk_issue(cfg, tiles, kv, q_wg, j + 1)\n"
               "        turns.give(WG)             # the block is issued: the other warpgroup's turn\n"
               "        pv, qk = warpgroup_mma_wait(0, deps=(pv, qk))\n"
               "    else:\n"
               "        turns.give(WG)\n"
               "        pv = warpgroup_mma_wait(0, deps=(pv,))\n")
    nxt = edit(nxt, "    return acc0, acc1, l_i, m_new\n", "    return acc0, acc1, l_i, m_new, qk\n")
    src = src[:a] + QK_ISSUE + tile + "\n\n" + nxt + src[a + len(tile):]
    loops = src[src.index("    turns.take(WG, 0)"):src.index("    # the epilogue: out = v_scale")]
    window = """    if cfg.HAS_WINDOW:                 # every tile near; Q.K^T(j + 1) in P.V(j)'s turn
        turns.take(WG, 0)
        qk = _qk_issue(cfg, tiles, kv, q_wg, 0)
        turns.give(WG)
        qk = warpgroup_mma_wait(0, deps=(qk,))
        n_last = keys.n_tiles - 1
        for j in range(0, n_last):
            acc0, acc1, l_i, m_i, qk = _tile_next(cfg, keys, tiles, kv, turns, qt, acc0, acc1, l_i, m_i, q_wg, j,
                                                  pos, rel_off, row_valid, qk, WG, True, True)
        acc0, acc1, l_i, m_i, qk = _tile_next(cfg, keys, tiles, kv, turns, qt, acc0, acc1, l_i, m_i, q_wg, n_last,
                                              pos, rel_off, row_valid, qk, WG, True, False)
    else:
"""
    src = edit(src, loops, window + "".join("    " + l if l.strip() else l for l in loops.splitlines(True)))
    return edit(src, "mbarrier.MBarrierLayout()), not HAS_WINDOW)", "mbarrier.MBarrierLayout()), True)")

# ---- ablation: the far tiles' exp2 (MUFU) replaced by its argument: wrong outputs; times what MUFU costs -----------
def no_exp2(src: str) -> str:
    return edit(src, "        p = gl.exp2(qk * qt.sm_scale_log2 - m_off[:, None])     # one FMA per score",
                "        p = qk * qt.sm_scale_log2 - m_off[:, None]")

# name: (edits, what it tries, exact: the arithmetic is the shipped kernel's, so its outputs must be bit-identical).
# Gone from here: regs240 and bias_rows (folded into 07c on 2026-12-06), key_slots (folded on 2026-12-07),
# bias_early (not exact, no faster), the pre-pass in 32/64-key programs, pingpong_gemms' combinations, interior
# (unmasked interior near tiles: no faster before the row-wise bias load, and on it 1 % faster at 8K x 64K only,
# slower elsewhere), acc_late (a far tile's accumulator update deferred under the next tile's Q.K^T: no faster),
# pv_under (P.V(j - 1) under tile j's softmax, P through shared memory: 46-73 % slower, spills; commit 9c0957c; its
# diagnosis pv_half, pv_regs and pv_serial in commit cc5233f), exp_poly25/50 (a share of the far exp2 on the FMA
# pipe: slower; commit 79e3995), tree_max/tree_sum/tree_both (a tile's row max and sum as trees: no faster;
# commit a50fd2b), pv_full (P.V as one N = 128 wgmma: folded into 07c on 2026-12-07), pv_one (its accumulator as one
# [64, 128] tensor: level; commit 46760f5) and q_regs (Q as Q.K^T's register operand: no faster in any record, and
# its register A operand would read as P.V's in tools/sm90_compile.py's count), bias_tma/bias_tma_int/bias_tma_int_w
# (the near tiles' bias windows by per-token TMA boxes, reversed by an anti-identity wgmma: they fault, a TMA box must
# start at a 16-byte multiple and 7 tokens in 8 do not; commit c078bbd, tools/sm90_bias_probe.py), pingpong_gemms (the
# tensor cores' turn from a warpgroup's P.V(j) to its Q.K^T(j + 1): folded into 07c for global layers on 2026-12-07),
# pingpong (the turn around Q.K^T alone: slower), qk_next and qk_next_pp (Q.K^T(j + 1) issued behind P.V(j), one wait
# for both, without and with turns: slower on the small prefills; commit 72450f7); their records in bench/notes
VARIANTS = {
    "stages4": ([stages4], "four K/V^T stages", True),
    "pdl": ([pdl], "the prefill kernel launched while the Vᵀ pre-pass runs; its producer waits for the scratch", True),
    "bias_prefetch": ([bias_prefetch], "the near tiles' bias rows prefetched into L2 by the producer while the far "
                                       "tiles run", True),
    "window_next": ([window_next], "window layers: Q.K^T(j + 1) issued behind P.V(j) in the warpgroup's turn (qk_next_pp)",
                    True),
    "ablation: no far exp2": ([no_exp2], "the far tiles' exp2 left out: wrong outputs, times the rest", None),
}

def variant_source(name: str) -> str:
    import inkling_fp8kv.attention_sm90 as shipped
    src = inspect.getsource(shipped)
    for f in VARIANTS[name][0]: src = f(src)
    return src

def fold(name: str, notebook: Path = ROOT / "nbs" / "07c_attention_sm90.ipynb",
         module: Path = ROOT / "inkling_fp8kv" / "attention_sm90.py", write: bool = True) -> list:
    """Write variant `name`'s edits into the notebook's exported cells, so that `nbdev_export` gives the variant's
    module: the ids of the cells it changed. The module is split at nbdev's `# %% ... #id` markers; each changed piece
    goes back into the cell of that id (its `#|` directives kept), and the cells are checked to export to exactly the
    variant's source before anything is written. An edit outside the cells' code (the markers, `__all__`) is refused."""
    old = module.read_text()
    new = old
    for f in VARIANTS[name][0]: new = f(new)
    marker = re.compile(r"^(# %% .+ #(\w+)\n)", re.M)
    def pieces(src):
        parts = marker.split(src)            # [head, marker, id, body, marker, id, body, ...]
        return parts[0], [(parts[i], parts[i + 1], parts[i + 2]) for i in range(1, len(parts), 3)]
    (h0, p0), (h1, p1) = pieces(old), pieces(new)
    if h0 != h1 or [m for m, _, _ in p0] != [m for m, _, _ in p1]:
        raise ValueError(f"{name}: its edits touch the module's header or nbdev's cell markers; fold it by hand")
    nb = json.loads(notebook.read_text())
    cells = {c.get("id"): c for c in nb["cells"]}
    # as nbdev exports a cell: its `#|` lines dropped, the package's absolute imports made relative
    code = lambda c: re.sub(r"^(\s*)from inkling_fp8kv\.", r"\1from .", "".join(
        l for l in "".join(c["source"]).splitlines(True) if not l.startswith("#|")), flags=re.M)
    absolute = lambda t: re.sub(r"^(\s*)from \.(?=\w)", r"\1from inkling_fp8kv.", t, flags=re.M)
    changed = []
    for (m, cid, body0), (_, _, body1) in zip(p0, p1):
        if body0 == body1: continue
        if cid not in cells or code(cells[cid]).rstrip() != body0.rstrip():
            raise ValueError(f"{name}: cell {cid} of {notebook.name} does not export to the module's piece (run "
                             "nbdev_export first, or the edit is outside a notebook cell)")
        directives = "".join(l for l in "".join(cells[cid]["source"]).splitlines(True) if l.startswith("#|"))
        cells[cid]["source"] = (directives + absolute(body1.rstrip("\n"))).splitlines(True)
        changed.append(cid)
    rebuilt = h0 + "".join(m + (code(cells[cid]).rstrip() + body0[len(body0.rstrip()):] if cid in changed else body1)
                           for (m, cid, body0), (_, _, body1) in zip(p0, p1))
    if rebuilt != new: raise ValueError(f"{name}: the folded cells would not export to the variant's source")
    if write and changed:
        notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return changed

def write_variant(name: str, folder: Path) -> Path:
    path = Path(folder) / f"sm90_{re.sub(r'[^a-z0-9]+', '_', name)}.py"
    path.write_text(variant_source(name))
    return path

def load_variant(path: Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"inkling_fp8kv._{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def compile_stats(names, builds=((64, None), (64, 512))) -> list:
    "Each variant (and the shipped kernel) compiled for sm_90a in a clean process (tools/sm90_compile.py): (page, window) builds."
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {None: None} | {n: str(write_variant(n, Path(tmp))) for n in names}
        cases = [dict(path=p, page=pg, window=w) for p in paths.values() for pg, w in builds]
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "sm90_compile.py"), json.dumps(cases)], env=env,
                           capture_output=True, text=True)
    if r.returncode: raise RuntimeError(r.stderr[-3000:])
    out = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    for row, name in zip(out, [n for n in paths for _ in builds]):
        row["variant"] = name or "shipped"
    return out

# ---- on the H200: each variant against the shipped kernel and the portable one, then timed -------------------------
CHECKS = [  # (B, Sq, kv, Hq, page, window, varlen): varlen B = 3 requests of kv, kv·3/5 and Sq keys with Sq, Sq·3/7, 2 new
    (3, 700, 3000, 16, 64, None, True), (3, 700, 3000, 16, 16, 512, True), (2, 300, 2000, 8, 128, None, False),
    (1, 256, 65536, 16, 64, None, False)]
TIMED = [  # (case, B, Sq, kv, window, mode): the issue's prefill cases
    ("prefill 8K x 64K", 1, 8192, 65536, None, "eager"), ("prefill 8K x 64K, window 512", 1, 8192, 65536, 512, "eager"),
    ("prefill 2K x 8K", 1, 2048, 8192, None, "replay"), ("prefill 1K x 4K", 1, 1024, 4096, None, "replay"),
    ("prefill 4 x 512 x 2K", 4, 512, 2048, None, "replay")]

def _inputs(B, Sq, kv, Hq, page, window, varlen=False, seed=0):
    from inkling_fp8kv.bench.attention_suites import paged_attention_inputs
    from inkling_fp8kv.numerics import E4M3_DTYPE
    import torch
    inp = paged_attention_inputs(B, kv, Hq, Sq, E4M3_DTYPE, E=window or 1024, page=page, seed=seed)
    if varlen:       # requests of different lengths in one batch: the last has 2 new tokens
        q_lens, kv_lens = [Sq, Sq * 3 // 7, 2][:B], [kv, kv * 3 // 5, Sq][:B]
        cu = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32, device="cuda")
        inp.update(seq_lens=torch.tensor(kv_lens, dtype=torch.int32, device="cuda"), cu_seqlens_q=cu)
        bt = inp["block_table"]   # as vLLM's, wider than the longest sequence: unused columns point at block 0
        inp["block_table"] = torch.cat([bt, torch.zeros_like(bt)], dim=1)
    return inp

def _call(mod, inp, window, out):
    kw = {k: inp[k] for k in ("block_table", "seq_lens", "cu_seqlens_q", "max_seqlen_q", "max_seqlen_k")}
    return lambda: mod.prefill_sm90(inp["q"], inp["k_cache"], inp["v_cache"], inp["rel_logits"], **kw,
                                    softmax_scale=1 / 128, window=window, out=out)

def check_variant(mod, shipped, checks=None) -> list:
    "The variant's outputs against the shipped kernel's (bit for bit where `exact`) and the portable kernel's."
    import torch
    from inkling_fp8kv.bench.attention_suites import ours
    rows = []
    for B, Sq, kv, Hq, page, window, varlen in (CHECKS if checks is None else checks):
        inp = _inputs(B, Sq, kv, Hq, page, window, varlen)
        T = int(inp["cu_seqlens_q"][-1])
        outs = []
        for m in (mod, shipped):
            o = torch.zeros(inp["q"].shape, dtype=torch.bfloat16, device="cuda")
            _call(m, inp, window, o)()
            outs.append(o[:T].float())
        port = ours(inp, window=window, fast_path=False)()[:T].float()
        fro = lambda a: ((a - port).norm() / port.norm()).item()
        rows.append(dict(B=B, Sq=Sq, kv=kv, Hq=Hq, page=page, window=window, varlen=varlen,
                         identical=bool(torch.equal(outs[0], outs[1])), finite=bool(outs[0].isfinite().all()),
                         rel_fro_vs_portable=fro(outs[0]), shipped_rel_fro_vs_portable=fro(outs[1])))
    return rows

def time_variants(mods: dict, deadline: float = math.inf) -> list:
    "Every module in `mods` (shipped first and again last, to see drift) on each `TIMED` case, in µs, until `deadline`."
    import torch
    from inkling_fp8kv.bench.harness import time_us
    from inkling_fp8kv.bench.attention_suites import causal_flops
    rows, order = [], list(mods) + ["shipped"]
    for case, B, Sq, kv, window, mode in TIMED:
        if time.time() > deadline:
            rows.append(dict(case=case, skipped="the run's time budget ran out")); continue
        inp = _inputs(B, Sq, kv, 16, 64, window, seed=kv + Sq + B)
        out = torch.empty(inp["q"].shape, dtype=torch.bfloat16, device="cuda")
        for i, name in enumerate(order):
            try: us = time_us(_call(mods[name], inp, window, out), mode)
            except Exception as e: rows.append(dict(case=case, variant=name, error=f"{type(e).__name__}: {e}"[:400])); continue
            rows.append(dict(case=case, variant=name, repeat=i == len(order) - 1, mode=mode, us=us,
                             tflops=B * causal_flops(Sq, kv, 16, window) / (us * 1e-6) / 1e12))
        del inp, out
        torch.cuda.empty_cache()
    return rows

def breakdown(cases=TIMED) -> list:
    """The shipped fast path's time per `TIMED` case split into its two launches, each timed alone the way the case
    is (graph replay or eager): the Vᵀ pre-pass, the prefill kernel on a filled scratch, and both as `prefill_sm90`
    runs them; with a copy of the V bytes the pre-pass reads, as its floor."""
    import torch
    import inkling_fp8kv.attention_sm90 as m
    from inkling_fp8kv.bench.harness import time_us
    rows = []
    for case, B, Sq, kv, window, mode in cases:
        inp = _inputs(B, Sq, kv, 16, 64, window, seed=kv + Sq + B)
        out = torch.empty(inp["q"].shape, dtype=torch.bfloat16, device="cuda")
        kw = dict(block_table=inp["block_table"], seq_lens=inp["seq_lens"], cu_seqlens_q=inp["cu_seqlens_q"],
                  max_seqlen_q=Sq, softmax_scale=1 / 128, window=window, v_scale=1.0, threshold=0.75,
                  max_seqlen_k=kv)
        grid, args, meta = m._launch_args(inp["q"], inp["k_cache"], inp["v_cache"], inp["rel_logits"], out=out, **kw)
        pre = lambda: m._vt_prepass(inp["v_cache"], args[2].base, kw["block_table"], kw["seq_lens"],
                                    kw["cu_seqlens_q"], window)
        kern = lambda: m._prefill_sm90_kernel[grid](*args, **meta, maxnreg=m._MAXNREG)
        both = lambda: (pre(), kern())
        pre(); kern(); torch.cuda.synchronize()
        nbytes = B * kv * 2 * 128                        # the V bytes the pre-pass reads (and writes transposed)
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(src)
        row = dict(case=case, mode=mode, grid=list(grid), ctas=math.prod(grid),
                   num_sms=torch.cuda.get_device_properties(0).multi_processor_count, v_bytes=nbytes)
        for name, fn in (("prepass", pre), ("kernel", kern), ("both", both), ("copy_v", lambda: dst.copy_(src))):
            try: row[f"{name}_us"] = time_us(fn, mode)
            except Exception as e: row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
        del inp, out, args, src, dst
        torch.cuda.empty_cache()
    return rows

# ---- split-KV decode: launch configurations around the shipped pick, at the issue's three decode shapes -------------
DECODE = [("decode B=32, KV 64K", 32, 65536), ("decode B=8, KV 128K", 8, 131072), ("decode B=1, KV 64K", 1, 65536)]
DECODE_SMOKE = [("decode B=2, KV 160", 2, 160)]

def decode_candidates(smoke: bool = False) -> list:
    "Stage 1 of the sweep: key tile, warps, pipeline stages and V's column order (72 compilations; 2 in a smoke run)."
    if smoke: return [dict(block_n=32, num_warps=1, num_stages=1, perm_v=p) for p in (False, True)]
    return [dict(block_n=n, num_warps=w, num_stages=s, perm_v=p)
            for n, w, s, p in itertools.product((16, 32, 64), (1, 2, 4), (2, 3, 4, 5), (False, True))]

DECODE_KEYS = ("block_n", "num_warps", "num_stages", "split_waves", "perm_v", "lazy_skip", "split_keys")

def decode_grid(spec: str) -> list:
    """Stage-1 candidates from 'block_n=16,32 num_stages=5 split_waves=4,8,16': the product of the listed values (keys of
    `DECODE_KEYS`; perm_v and lazy_skip take 0/1). `split_keys` is the lab's own axis, not a launch parameter: the split
    count becomes ceil(KV / split_keys) (at most `MAX_SPLITS`) instead of the waves rule's, to test a rule by split
    length. A grid that names split_waves or split_keys has no stage 2."""
    axes = {}
    for item in spec.split():
        key, _, vals = item.partition("=")
        if key not in DECODE_KEYS or not vals:
            raise argparse.ArgumentTypeError(f"{item!r}: expected KEY=V1,V2 with KEY one of {', '.join(DECODE_KEYS)}")
        try: vs = [int(v) for v in vals.split(",")]
        except ValueError: raise argparse.ArgumentTypeError(f"{item!r}: values must be whole numbers") from None
        axes[key] = [bool(v) for v in vs] if key in ("perm_v", "lazy_skip") else vs
    if not axes: raise argparse.ArgumentTypeError("an empty grid")
    return [dict(zip(axes, vals)) for vals in itertools.product(*axes.values())]

def decode_shapes(spec: str) -> list:
    "`DECODE`-style shapes from 'B:KV,...' (KV in keys, a K suffix for 1024s): '8:32K,16:64K'."
    out = []
    for item in filter(None, spec.split(",")):
        try:
            b, kv = item.strip().upper().split(":")
            B, KV = int(b), int(kv[:-1]) * 1024 if kv.endswith("K") else int(kv)
        except ValueError: raise argparse.ArgumentTypeError(f"{item!r}: expected B:KV such as 8:32K") from None
        if B < 1 or KV < 1: raise argparse.ArgumentTypeError(f"{item!r}: B and KV must be positive")
        out.append((f"decode B={B}, KV {KV // 1024}K" if KV % 1024 == 0 else f"decode B={B}, KV {KV}", B, KV))
    return out

def decode_sweep(device="cuda", *, smoke: bool = False, budget_s: float = 420, top: int = 4,
                 waves=(2, 4, 8, 16, 32, 64), shapes=None, grid=None) -> list:
    """Each decode shape: a copy of its K/V bytes, the shipped pick, then stage 1 (`grid`, else `decode_candidates`, at
    the shipped split waves unless the grid names them) and stage 2 (the `top` fastest of stage 1 at each of `waves`;
    none when the grid names split_waves or split_keys), as CUDA-graph replays; each row records its split count."""
    import torch
    from inkling_fp8kv.bench.harness import time_us, timing_for
    from inkling_fp8kv.bench.attention_suites import paged_attention_inputs, ours, kv_bytes, copy_row
    from inkling_fp8kv.attention_launch import decode_config, decode_num_splits, MAX_SPLITS, _num_sms
    from inkling_fp8kv.numerics import E4M3_DTYPE
    rows, t0, mode = [], time.time(), timing_for(device, "replay")
    for case, B, kv in DECODE_SMOKE if smoke else shapes or DECODE:
        inp = paged_attention_inputs(B, kv, 4 if smoke else 16, 1, E4M3_DTYPE, E=32 if smoke else 1024, seed=kv + B,
                                     device=device)
        copy = copy_row(case, B, kv, 2, device, mode)
        rows.append(copy)
        name, shipped = decode_config(B, fp8=True, device=device)
        def run(cfg, stage):
            cfg = dict(cfg or {})
            keys = cfg.pop("split_keys", None)
            launch = {**shipped, **cfg}
            splits = (min(MAX_SPLITS, -(-kv // keys)) if keys else
                      decode_num_splits(B, 2, kv, block_n=launch["block_n"], waves=launch["split_waves"],
                                        num_sms=_num_sms(torch.device(device))))
            label = {**launch, **({"split_keys": keys} if keys else {})}
            if time.time() - t0 > budget_s:
                return rows.append(dict(case=case, config=label, skipped=f"the sweep's {budget_s:.0f} s budget ran out"))
            try: us = time_us(ours(inp, config=cfg or None, num_splits=splits if keys else None), mode)
            except Exception as e:
                return rows.append(dict(case=case, config=label, stage=stage, error=f"{type(e).__name__}: {e}"[:300]))
            tbps = kv_bytes(B, kv, E4M3_DTYPE) / (us * 1e-6) / 1e12
            rows.append(dict(case=case, B=B, kv=kv, stage=stage, config=label, num_splits=splits, us=us, tbps=tbps,
                             of_copy=tbps / copy["tbps"], timing=mode))
        run(None, f"shipped ({name})")
        for cfg in grid or decode_candidates(smoke): run(cfg, "1")
        best = sorted((r for r in rows if r.get("case") == case and r.get("stage") == "1" and "us" in r),
                      key=lambda r: r["us"])[:top]
        if grid and any("split_waves" in g or "split_keys" in g for g in grid): best = []   # the grid sets the splits
        for r in best:
            for w in (waves[:1] if smoke else waves):
                if w != r["config"]["split_waves"]: run(dict(r["config"], split_waves=w), "2")
        del inp
        if device != "cpu": torch.cuda.empty_cache()
    return rows

def decode_compile_stats(configs=None) -> list:
    """Split-KV decode's kernel compiled for sm_90a on any machine (Triton's compiler and ptxas, no GPU): per launch
    config, the far-tile loop's SASS (the smallest backward-branch loop with the tile's MMAs) per thread and tile: its
    instructions, MMAs, e4m3 conversions (F2FP), spills; the bytes one tile reads and the warp-instructions the
    program issues per KB of it (what an issue-bound decode pays per byte); and the PTX's MMA shape and types.
    Strides and pointers carry the divisibility by 16 that real launches specialize on (without it the loads scalarize).
    Run in a process without TRITON_INTERPRET."""
    import collections, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from inkling_fp8kv.attention_kernels import _decode_split_kernel as kern
    from inkling_fp8kv.attention_launch import ATTN_CONFIGS
    configs = configs or [("decode_fp8 (shipped)", True, ATTN_CONFIGS["decode_fp8"]),
                          ("decode_bf16 (shipped)", False, ATTN_CONFIGS["decode_bf16"]),
                          ("decode1_fp8 (shipped)", True, ATTN_CONFIGS["decode1_fp8"]),
                          ("B=8 128K lab best", True, dict(block_n=16, num_warps=1, num_stages=5, lazy_skip=True,
                                                           perm_v=False))]
    sys.path.insert(0, str(ROOT / "tools"))
    from sm90_compile import backward_loops, cuobjdump
    names, out = kern.arg_names, []
    for label, fp8, cfg in configs:
        dt = "*fp8e4nv" if fp8 else "*bf16"
        ptrs = dict(Q=dt, K=dt, V=dt, REL="*bf16", OPART="*fp32", LSE="*fp32", BT="*i32", SEQ="*i32", CU="*i32")
        const = dict(G=8, BLOCK_G=16, BLOCK_N=cfg["block_n"], HEAD_DIM=128, PAGE=64 if fp8 else 32, HAS_WINDOW=False,
                     IS_FP8=fp8, P_OFFSET=8.0 if fp8 else 0.0, INTERP=False, LAZY_SKIP=cfg["lazy_skip"],
                     PERM_V=cfg.get("perm_v", False))
        sig = {n: "constexpr" if n in const else ptrs.get(n, "fp32" if n in ("sm_scale_log2", "threshold") else "i32")
               for n in names}
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                 if sig[n].startswith("*") or n.startswith("stride_") or n == "E"}
        k = triton.compile(ASTSource(kern, sig, {(names.index(n),): v for n, v in const.items()}, attrs),
                           target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
        sass = cuobjdump(k, "-sass")
        loops = [collections.Counter(t.split()[0].split(".")[0] for t in body) for body in backward_loops(sass)]
        ops = min((c for c in loops if c["HMMA"] or c["QMMA"]), key=lambda c: c.total())   # the far loop: no bias
        n = ops.total()
        tile_bytes = 2 * cfg["block_n"] * 128 * (1 if fp8 else 2)
        regs = int(re.search(r"REG:(\d+)", cuobjdump(k, "-res-usage")).group(1))
        out.append(dict(config=label, fp8=fp8, launch=cfg, shared=k.metadata.shared, regs=regs, instrs=n,
                        bytes_per_tile=tile_bytes,
                        warp_instrs_per_kb=round(1024 * n * cfg["num_warps"] / tile_bytes, 1),
                        mma=ops["HMMA"] + ops["QMMA"], f2fp=ops["F2FP"], prmt=ops["PRMT"], imad=ops["IMAD"],
                        spills=len(re.findall(r"\b(?:LDL|STL)\b", sass)),
                        ptx_mma=sorted(set(re.findall(r"mma\.sync\.aligned\.([\w.]+)", k.asm["ptx"])))))
    return out

def decode_lab_stats() -> list:
    """Notebook 07c's SM90 decode (`_decode_sm90_kernel`, its wgmma kernel) compiled for sm_90a like the portable
    launches, page 64: its far loop per tile, in `decode_compile_stats`'s row format."""
    sys.path.insert(0, str(ROOT / "tools"))
    from sm90_compile import build_decode
    from inkling_fp8kv.attention_sm90 import DECODE_BLOCK_N, _DECODE_WARPS
    b = build_decode(64, None)
    f = b["far_loop"]
    return [dict(config="sm90 decode (07c)", fp8=True, launch=dict(block_n=DECODE_BLOCK_N, num_warps=_DECODE_WARPS),
                 instrs=f["instrs"], bytes_per_tile=f["bytes"],
                 warp_instrs_per_kb=round(1024 * f["instrs"] * _DECODE_WARPS / f["bytes"], 1),
                 mma=f["QGMMA"] + f["HGMMA"], f2fp=f["F2FP"], prmt=f["PRMT"], imad=f["IMAD"],
                 spills=b["spill_stores"] + b["spill_loads"], shared=b["shared"], ptx_mma=b["wgmma"])]

def warm_timed(mod) -> None:
    "Compile `mod`'s builds that `TIMED` uses (page 64, each window) with one small call each: timing finds them built."
    import torch
    for window in sorted({c[4] for c in TIMED}, key=str):
        inp = _inputs(1, 128, 1024, 16, 64, window)
        _call(mod, inp, window, torch.empty(inp["q"].shape, dtype=torch.bfloat16, device="cuda"))()
    torch.cuda.synchronize()

def preflight(name: str, timeout_s: float = 240) -> dict:
    """Build `name` and check it in a child process: every `CHECKS` case against the shipped and the portable kernel
    (the first only for an ablation, which is not checked), then the builds `TIMED` needs, compiled into Triton's cache.
    Children run side by side (the host's cores compile in parallel); a variant whose barriers deadlock hangs its
    child, which is killed after `timeout_s`, and the variant is left out of the run instead of hanging it."""
    t0 = time.time()
    try:
        r = subprocess.run([sys.executable, __file__, "--preflight", name], capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return dict(ok=False, why=f"no result in {timeout_s:.0f} s (a hang: killed)")
    if r.returncode: return dict(ok=False, why=r.stderr.strip()[-600:])
    return dict(ok=True, seconds=time.time() - t0, rows=json.loads(r.stdout.strip().splitlines()[-1]))

def row_failed(x: dict, exact: bool) -> bool:
    """A check row the variant failed: non-finite outputs, not bit-identical to the shipped kernel's where its arithmetic
    is the shipped one (`exact`), or farther from the portable kernel than 1.5 x the shipped kernel's distance (or 2e-3
    more)."""
    return (not x["finite"] or (exact and not x["identical"])
            or x["rel_fro_vs_portable"] > max(1.5 * x["shipped_rel_fro_vs_portable"], x["shipped_rel_fro_vs_portable"] + 2e-3))

def check_passed(c: dict) -> bool:
    "Whether a variant passed its `checks` entry `c` (records without `exact` were all exact)."
    return not any(row_failed(x, c.get("exact", True)) for x in c["rows"])

def _table(res: dict) -> str:
    lines = []
    for r in res.get("timed", []):
        if "us" in r: lines.append(f"{r['case']:30s} {r['variant']:34s} {r['us']:9.1f} us {r['tflops']:6.0f} TFLOP/s")
    for n, p in res.get("preflight", {}).items():
        if not p["ok"]: lines.append(f"preflight {n:30s} FAILED: {p['why'][-200:]}")
    for c in res.get("checks", []):
        bad = [x for x in c["rows"] if row_failed(x, c["exact"])]
        lines.append(f"check {c['variant']:34s} {'FAILED ' + str(len(bad)) if bad else 'ok'}")
    for case in dict.fromkeys(r["case"] for r in res.get("decode", [])):
        rs = [r for r in res.get("decode", []) if r.get("case") == case and "of_copy" in r]
        if rs:
            ship, best = rs[0], max(rs, key=lambda r: r["of_copy"])
            lines.append(f"{case:30s} shipped {ship['us']:7.1f} us ({ship['of_copy']:.1%} of copy); best {best['us']:7.1f} us "
                         f"({best['of_copy']:.1%}) {best['config']}")
    return "\n".join(lines)

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", help=f"variants to run (default: all): {', '.join(VARIANTS)}")
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a and report (no GPU needed)")
    ap.add_argument("--json", action="store_true", help="with --compile: one JSON line per build instead of text")
    ap.add_argument("--compile-decode", action="store_true", help="split-KV decode's shipped launches compiled for "
                                                                  "sm_90a (no GPU): the far-tile loop's instructions "
                                                                  "per tile and per KB read, MMAs, e4m3 conversions; "
                                                                  "then notebook 07c's SM90 decode")
    ap.add_argument("--out", help="output folder (default $OUT, else a new temporary folder)")
    ap.add_argument("--no-decode", action="store_true", help="skip the decode sweep")
    ap.add_argument("--no-prefill", action="store_true", help="skip the prefill variants")
    ap.add_argument("--breakdown", action="store_true", help="on the GPU: the shipped fast path's time per case split "
                                                              "into the Vt pre-pass and the prefill kernel (`breakdown`), "
                                                              "before anything else")
    ap.add_argument("--decode-shapes", metavar="B:KV,...", type=decode_shapes, default=None,
                    help="the decode sweep's shapes instead of the issue's three (B=32 64K, B=8 128K, B=1 64K), "
                         "e.g. 4:128K,8:32K,16:64K")
    ap.add_argument("--decode-grid", metavar="'KEY=V,... ...'", type=decode_grid, default=None,
                    help="the decode sweep's stage-1 candidates instead of its 72-launch grid, e.g. 'block_n=16,32 "
                         "num_stages=5 split_waves=4,8,16' (keys: " + ", ".join(DECODE_KEYS) + "; split_keys=2048 sets "
                         "ceil(KV / 2048) splits instead of the waves rule)")
    ap.add_argument("--budget", type=float, default=540, help="seconds for the whole run (default 540: one 10-minute "
                                                                "device call with room to start); what is left out says "
                                                                "so. The prefill timing comes before the decode sweep, "
                                                                "which gets what is left (60 s at least); for both in "
                                                                "full, run --no-decode and --no-prefill as two calls")
    ap.add_argument("--preflight", metavar="VARIANT", help=argparse.SUPPRESS)   # one variant, one small case (a child)
    ap.add_argument("--fold", metavar="VARIANT", help="write VARIANT's edits into nbs/07c_attention_sm90.ipynb (then "
                                                      "run nbdev_export): how a measured winner becomes the shipped "
                                                      "kernel, to be tested again on the H200")
    ap.add_argument("--smoke", action="store_true", help="on a CPU with TRITON_INTERPRET=1: the decode sweep's plumbing "
                                                          "on a tiny shape (the Gluon variants cannot run there)")
    a = ap.parse_args(argv)
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad: ap.error(f"unknown variants {bad}; known: {', '.join(VARIANTS)}")
    names = a.variants or list(VARIANTS)
    if a.fold:
        if a.fold not in VARIANTS: ap.error(f"unknown variant {a.fold!r}; known: {', '.join(VARIANTS)}")
        ids = fold(a.fold)
        print(f"{a.fold}: {len(ids)} cells of nbs/07c_attention_sm90.ipynb changed ({', '.join(ids)}); now run "
              "nbdev_export, then the 07c/07/08 tests on the H200 and tools/sm90_compile.py --record")
        return 0
    if a.compile_decode:
        for r in decode_compile_stats() + decode_lab_stats():
            print(json.dumps(r) if a.json else
                  f"{r['config']:24s} {r['instrs']:5d} instrs per {r['bytes_per_tile']:5d}-byte tile "
                  f"x {r['launch']['num_warps']} warps ({r['warp_instrs_per_kb']:5.1f} warp-instrs per KB): "
                  f"{r['mma']} MMA, {r['f2fp']} F2FP, {r['prmt']} PRMT, {r['imad']} IMAD; spills {r['spills']}; "
                  f"{r['shared']} B shared; PTX mma {', '.join(r['ptx_mma'])}")
        return 0
    if a.compile:
        for r in compile_stats(names):
            if a.json:
                print(json.dumps({k: v for k, v in r.items() if k not in ("sass", "path")}))
                continue
            print(f"{r['variant']:34s} {r['case']:20s} {r['shared'] / 1024:5.1f} KB shared, registers "
                  + "/".join(map(str, r["partition_regs"])) + f", P.V wgmmas from zero {r['pv_fresh']:2d}/"
                  f"{r['pv_mma']}, per-tile loops: " + "; ".join(
                      f"{k} {v['instrs']} instrs" + "".join(f", {o} {v[o]}" for o in ("LDL", "STL") if o in v)
                      for k, v in sorted(r["loops"].items())))
        return 0
    import torch
    if a.smoke:
        if os.environ.get("TRITON_INTERPRET") != "1": sys.exit("--smoke runs the interpreter: set TRITON_INTERPRET=1")
        a.no_prefill = True
    elif not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("the lab run needs an SM90 GPU (--compile runs on any machine, --smoke on a CPU)")
    device = "cpu" if a.smoke else "cuda"
    from inkling_fp8kv.bench.harness import run_header, write_json_atomic
    import inkling_fp8kv.attention_sm90 as shipped
    if a.preflight:     # built, checked and its timed builds compiled, in a process of its own (see `preflight`)
        with tempfile.TemporaryDirectory() as tmp:
            mod = load_variant(write_variant(a.preflight, Path(tmp)))
            rows = check_variant(mod, shipped, CHECKS if VARIANTS[a.preflight][2] is not None else CHECKS[:1])
            warm_timed(mod)
            print(json.dumps(rows))
        return 0
    t0 = time.time()
    out = Path(a.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="sm90-lab-"))
    res = dict(run_header("python tools/sm90_lab.py " + " ".join(argv if argv is not None else sys.argv[1:]), device),
               what=__doc__.split("\n\n")[0], variants={n: VARIANTS[n][1] for n in names})
    def save(): write_json_atomic(out / "sm90_lab.json", res | dict(wall_s=time.time() - t0))
    if a.breakdown:
        res["breakdown"] = breakdown()
        save()
        for r in res["breakdown"]:
            print(f"{r['case']:30s} {r['ctas']:4d} CTAs: " + ", ".join(f"{k[:-3]} {r[k]:8.1f} us" for k in r
                                                                       if k.endswith("_us")), flush=True)
    if not a.no_prefill:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max(1, min(8, (os.cpu_count() or 2) // 2))) as pool:   # children compile side by side
            res["preflight"] = dict(zip(names, pool.map(preflight, names)))
        save()
        res["checks"] = [dict(variant=n, exact=VARIANTS[n][2], rows=res["preflight"][n].pop("rows"))
                         for n in names if res["preflight"][n]["ok"] and VARIANTS[n][2] is not None]
        save()
        with tempfile.TemporaryDirectory() as tmp:
            mods = {"shipped": shipped}
            warm_timed(shipped)
            passed = {c["variant"] for c in res["checks"] if not c["exact"] or all(x["identical"] for x in c["rows"])}
            for n in [n for n in names if res["preflight"][n]["ok"] and (VARIANTS[n][2] is None or n in passed)]:
                try: mods[n] = load_variant(write_variant(n, Path(tmp)))      # its builds are in the cache already
                except Exception as e: res["preflight"][n].update(ok=False, why=f"{type(e).__name__}: {e}"[:400])
            print(f"[{time.time() - t0:5.0f}s] {len(mods) - 1} variants built and checked", file=sys.stderr, flush=True)
            res["timed"] = time_variants(mods, t0 + a.budget - 60 * (not a.no_decode))
            save()
    if not a.no_decode:
        res["decode"] = decode_sweep(device, smoke=a.smoke, budget_s=max(60.0, t0 + a.budget - time.time()),
                                     shapes=a.decode_shapes, grid=a.decode_grid)
    save()
    print(_table(res))
    print(f"-> {out / 'sm90_lab.json'} ({time.time() - t0:.0f} s)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
