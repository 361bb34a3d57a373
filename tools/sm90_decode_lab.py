#!/usr/bin/env python3
"""The SM90 decode's split count, measured: notebook 07c's Gluon decode (`decode_sm90`, a warpgroup per split on
wgmma) at 2, 4, 8 and 16 programs per SM (`decode_num_splits(..., block_n=64, waves=W)`), beside the portable decode
and a copy of the same K/V bytes, as CUDA-graph replays at five decode shapes, after a check of the kernel against the
portable decode with the same tiles and splits. 07c's `DECODE_WAVES` is this sweep's winner.

The lab's earlier records (`bench/notes/sm90_decode_lab_h100.json.gz`) timed two Gluon prototypes written here: an
mma_v2 decode, which failed its checks and was dropped, and the wgmma decode that became 07c's kernel. Their code is
in the repository's history; the kernel's CPU checks (its index logic in the interpreter, its sm_90a build) are 07c's.

  python tools/sm90_decode_lab.py --compile          any machine: the kernel compiled for sm_90a (tools/sm90_compile.py)
  PYTHONPATH=$PWD python tools/sm90_decode_lab.py [--out DIR] [--budget S] [--waves 4,5] [--variant NAME | --module F]
                                                     on an SM90 GPU: the checks, then the times (with --variant, of
                                                     that edit of the kernel, recorded as "sm90 NAME": `VARIANTS`;
                                                     with --module, of that file's decode)
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


# gone from here (their source is in the repository at commit 489fb6d or before, their records in bench/notes):
# bt_ahead (the next tile's block-table entries a tile ahead), ring2 / ring3 (a cp.async ring, with or without
# lsum), tma2 (K and V by TMA through a two-stage ring: since folded, notebook 07c's kernel), tma3 / tma4 (deeper TMA
# rings: wrong outputs, cause not found), tma2+lsum (no faster than tma2), prefetch and block128
VARIANTS = {"lsum": lsum}


LABEL = "sm90"      # the kernel's name in the record: "sm90 VARIANT" when a variant runs


def use_variant(name: str, module: Path | None = None):
    """Make `rel_attention`'s SM90 decode run variant `name` of the kernel (the module's source with its edits), or
    with `module`, the decode of that file (another version of `attention_sm90.py`, such as one from the history)."""
    import importlib.util, inspect
    import inkling_fp8kv.attention_sm90 as shipped
    path = Path(tempfile.mkdtemp()) / f"sm90_decode_{name}.py"
    path.write_text(Path(module).read_text() if module else VARIANTS[name](inspect.getsource(shipped)))
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
    ap.add_argument("--module", type=Path, help="time the decode of this attention_sm90.py instead (another version, "
                    "e.g. `git show REV:inkling_fp8kv/attention_sm90.py`), recorded as 'sm90 STEM'")
    a = ap.parse_args(argv)
    if a.variant and a.module: sys.exit("--variant and --module: one or the other")
    if a.variant: use_variant(a.variant)
    if a.module: use_variant(a.module.stem, a.module)
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
