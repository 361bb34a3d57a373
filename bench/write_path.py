#!/usr/bin/env python3
"""Write-path benchmark: `store.qkvr_prep` with an fp8 (e4m3 quant-on-store) KV cache vs a bf16 KV cache.

12 cases: 2 head configurations (Inkling-Small and upstream's large Inkling, both per rank at TP4)
x {local, global} layer x {33, 2048, 16384} tokens. For each case and cache dtype, over 5 rounds (15 for the
33-token cases) that alternate the dtypes: the median of the per-round median times with
`triton.testing.do_bench` (eager, what a caller pays including launch overhead) and with
`do_bench_cudagraph` (kernels only), achieved bandwidth against the copy bandwidth measured in the same
run, and on-hardware checks (fp8 bytes == quantize_e4m3 of the bf16 run's stored values; q, rel_logits and
the conv cache identical between the two runs). fp8 runs at two scale sets: the benchmark's (k 0.5, v 2.0), powers of
two like vLLM's default 1.0 and every calibrated k_scale of the seed's checkpoint, where the tiled kernel needs no
quotient correction; and a calibrated layer's (k 1.0, v 2.36, the seed's largest v_scale), which takes the
one-correction quotient (column `fp8c`). Then a small sweep of launch parameters on the
16,384-token cases (CUDA-graph timing). Writes write_path.json into $OUT (or bench/results/) and prints a table last.

Usage (repository root, on the GPU box; plain Python, no nbdev needed):
    PYTHONPATH=$PWD python bench/write_path.py [--quick] [--no-sweep] [--out DIR]
"""
import argparse, datetime, json, os, statistics, sys, tempfile, time, traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path: sys.path.insert(0, str(REPO))

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

from inkling_fp8kv.config import InklingConfig, inkling_small
from inkling_fp8kv.numerics import E4M3_DTYPE, quantize_e4m3
from inkling_fp8kv.reference import BlockAllocator, build_batch, random_prep_weights, log_scaling_tau
from inkling_fp8kv import store
from inkling_fp8kv.store import qkvr_prep, write_path_bytes, CONFIGS

T0 = time.time()
def log(msg): print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)

SMOKE = '--smoke-cpu' in sys.argv      # plumbing check on a CPU under TRITON_INTERPRET=1: tiny shapes, wall-clock timer
if SMOKE:
    def do_bench(fn, warmup=0, rep=0, return_mode='median'):
        t = time.perf_counter(); fn(); return (time.perf_counter() - t) * 1e3
    def do_bench_cudagraph(fn, rep=0, return_mode='median'): raise RuntimeError("no CUDA graphs on a CPU")
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None

ATTN_B, CONV_N = 64, 32          # fp8 attention block size and unified conv block size of Inkling-Small at TP4 (same for both dtypes)
TOKENS = (33, 2048, 16384)
ROUNDS = 1 if SMOKE else 5     # timing rounds per case, the two dtypes alternating; medians reported
ROUNDS_SMALL = 1 if SMOKE else 15   # the fused-path cases run ~3 us, where one round's median moves by a few percent
SCALES = {'fp8': (0.5, 2.0), 'fp8c': (1.0, 2.36)}    # (k_scale, v_scale) per fp8 column: powers of two / a calibrated layer's

def head_configs():
    "(name, InklingConfig): Inkling-Small and upstream's large Inkling; tau active from position 4096 on global layers."
    if SMOKE:
        from inkling_fp8kv.config import tiny
        return [('small', tiny(num_attention_heads=16, num_kv_heads=4, swa_num_kv_heads=4, rel_extent=64, sliding_window=32,
                               log_scaling_n_floor=64)),
                ('large', tiny(num_attention_heads=16, num_kv_heads=4, swa_num_kv_heads=8, rel_extent=64, sliding_window=32,
                               log_scaling_n_floor=64))]
    small = inkling_small(log_scaling_n_floor=4096)
    large = InklingConfig(num_layers=2, local_layer_ids=(0,), hidden_size=6144, num_attention_heads=64, num_kv_heads=8,
                          swa_num_kv_heads=16, rel_extent=1024, sliding_window=512, log_scaling_n_floor=4096)
    return [('small', small), ('large', large)]

def requests_for(T):
    "A decode batch for 33 tokens; else a chunked prefill after 3,000 cached tokens, a fresh prefill and 16 decodes."
    if T <= 64: return [(f'd{i}', 100 + 37 * i, 1) for i in range(T)]
    n = T - 16
    return [('p', 3000, n // 2), ('f', 0, n - n // 2)] + [(f'd{i}', 700 + 53 * i, 1) for i in range(16)]

def make_case(geom, cfg, T, seed, dev):
    "Inputs of one case (identical for both cache dtypes): qkvr, weights, metadata, tau, garbage conv cache."
    reqs = requests_for(T)
    nb_attn = sum(-(-(c + n) // ATTN_B) for _, c, n in reqs) + 8
    nb_conv = sum(-(-(c + n) // CONV_N) for _, c, n in reqs) + 8
    attn, conv = BlockAllocator(nb_attn, ATTN_B, seed=seed), BlockAllocator(nb_conv, CONV_N, seed=seed + 1)
    history = [(r, 0, c) for r, c, _ in reqs if c]
    if history: build_batch(history, attn, conv)                       # earlier forwards: blocks of the cached tokens
    m = build_batch(reqs, attn, conv, device=dev)
    gen = torch.Generator(device=dev).manual_seed(seed)
    qkvr = (2 * torch.randn(T, geom.qkvr_width, generator=gen, device=dev)).bfloat16()
    w = random_prep_weights(geom, seed=seed + 2, device=dev)
    conv_cache = (8 * torch.randn(nb_conv, geom.num_kv_heads, CONV_N, geom.conv_width_padded, generator=gen, device=dev)).bfloat16()
    tau = None if geom.local else log_scaling_tau(m.positions, cfg.log_scaling_alpha, cfg.log_scaling_n_floor)
    return dict(qkvr=qkvr, w=w, meta=m, tau=tau, conv_cache=conv_cache, nb_attn=nb_attn, gen=gen)

def make_kv(case, geom, kv_dtype, dev):
    "A packed HND KV cache [nb, Hkv, B, 256] (as upstream allocates it) filled with random bytes, and its K/V views."
    kv = torch.randint(0, 0x7F, (case['nb_attn'], geom.num_kv_heads, ATTN_B, 256 * (1 if kv_dtype == E4M3_DTYPE else 2)),
                       generator=case['gen'], device=dev, dtype=torch.uint8)
    kv = kv.view(E4M3_DTYPE) if kv_dtype == E4M3_DTYPE else kv.view(torch.bfloat16)
    by_token = kv.transpose(1, 2)
    return kv, by_token[..., :128], by_token[..., 128:]

def prep_fn(case, geom, kv_dtype, dev, configs=None, conv_cache=None, scales=SCALES['fp8']):
    "A zero-argument closure running qkvr_prep on this case (validate=False: no host syncs, graph-capturable)."
    kv, kc, vc = make_kv(case, geom, kv_dtype, dev)
    cc = case['conv_cache'].clone() if conv_cache is None else conv_cache
    m = case['meta']
    scales = dict(k_scale=torch.tensor([scales[0]], device=dev), v_scale=torch.tensor([scales[1]], device=dev)) if kv_dtype == E4M3_DTYPE else {}
    def fn():
        return qkvr_prep(case['qkvr'], case['w'], geom=geom, positions=m.positions, seq_idx=m.seq_idx, query_start=m.query_start,
                         conv_cache=cc, conv_block_table=m.conv_block_table, conv_slot_mapping=m.conv_slot_mapping,
                         k_cache=kc, v_cache=vc, slot_mapping=m.slot_mapping, tau=case['tau'], configs=configs, validate=False, **scales)
    return fn, dict(kv=kv, k=kc, v=vc, conv=cc)

def timed(fn):
    "(eager median us, cuda-graph median us or None)."
    eager = do_bench(fn, warmup=25, rep=100, return_mode='median') * 1e3
    try: graph = do_bench_cudagraph(fn, rep=50, return_mode='median') * 1e3
    except Exception as e:
        log(f"    cuda-graph timing failed: {type(e).__name__}: {e}")
        graph = None
    return eager, graph

def check_case(case, geom, dev):
    "On-hardware checks at each fp8 scale set: fp8 bytes == quantize_e4m3(bf16 store), q/rel/conv identical between the bf16 and fp8 runs."
    fb, cb = prep_fn(case, geom, torch.bfloat16, dev)
    qb, rb = fb()
    s = case['meta'].slot_mapping
    blk, off = s // ATTN_B, s % ATTN_B
    out = {}
    for tag, (ks, vs) in SCALES.items():
        ff, cf = prep_fn(case, geom, E4M3_DTYPE, dev, scales=(ks, vs))
        qf, rf = ff()
        out.update({f'{tag}_q_equal': torch.equal(qb, qf), f'{tag}_rel_equal': torch.equal(rb, rf),
                    f'{tag}_conv_equal': torch.equal(cb['conv'].view(torch.int16), cf['conv'].view(torch.int16)),
                    f'{tag}_k_bytes_equal': torch.equal(cf['k'][blk, off].view(torch.uint8), quantize_e4m3(cb['k'][blk, off], ks).view(torch.uint8)),
                    f'{tag}_v_bytes_equal': torch.equal(cf['v'][blk, off].view(torch.uint8), quantize_e4m3(cb['v'][blk, off], vs).view(torch.uint8))})
    torch.cuda.synchronize()
    return out

def copy_bandwidth(dev, nbytes=1 << 30):
    "Measured device copy bandwidth in TB/s (bytes read + written / time)."
    if SMOKE: nbytes = 1 << 24
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode='median')
    del src, dst
    return 2 * nbytes / (ms * 1e-3) / 1e12

def fill_bandwidth(dev, nbytes=1 << 30):
    "Measured device write-only bandwidth in TB/s (a fill: bytes written / time), the ceiling of a store-bound kernel."
    if SMOKE: nbytes = 1 << 24
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    ms = do_bench(lambda: dst.fill_(1), warmup=25, rep=200, return_mode='median')
    del dst
    return nbytes / (ms * 1e-3) / 1e12

def run_cases(dev, bw, quick):
    rows = []
    for cname, cfg in head_configs():
        for local in (True, False):
            geom = cfg.rank(4, local=local)
            for T in ((9, 130) if SMOKE else TOKENS[:2] if quick else TOKENS):
                name = f"{cname}-{'local' if local else 'global'}"
                row = dict(case=name, tokens=T, hq=geom.num_heads, hkv=geom.num_kv_heads, E=geom.rel_extent, tau=not local,
                           path='fused' if T < store.SMALL_TOKEN_THRESHOLD else 'tiled')
                try:
                    log(f"{name} T={T}: building inputs")
                    case = make_case(geom, cfg, T, seed=T + 31 * len(name) + local, dev=dev)
                    row['checks'] = check_case(case, geom, dev)
                    row['checks_ok'] = all(row['checks'].values())
                    tags = (('bf16', torch.bfloat16), ('fp8', E4M3_DTYPE), ('fp8c', E4M3_DTYPE))
                    fns = {tag: prep_fn(case, geom, dt, dev, scales=SCALES.get(tag, SCALES['fp8']))[0] for tag, dt in tags}
                    times = {tag: [] for tag in fns}
                    for rnd in range(ROUNDS_SMALL if row['path'] == 'fused' else ROUNDS):
                        for tag, fn in (list(fns.items()) if rnd % 2 == 0 else list(fns.items())[::-1]):   # alternate dtypes and order
                            fn(); torch.cuda.synchronize()                   # compile outside the timing
                            times[tag].append(timed(fn))
                    for tag, dt in tags:
                        eager = statistics.median(e for e, _ in times[tag])
                        graphs = [g for _, g in times[tag] if g is not None]
                        graph = statistics.median(graphs) if graphs else None
                        nbytes = write_path_bytes(geom, T, dt)
                        row.update({f'{tag}_us': eager, f'{tag}_graph_us': graph, f'{tag}_bytes': nbytes,
                                    f'{tag}_bw_frac': nbytes / (eager * 1e-6) / 1e12 / bw,
                                    f'{tag}_graph_bw_frac': None if graph is None else nbytes / (graph * 1e-6) / 1e12 / bw})
                    for t in ('fp8', 'fp8c'):
                        sfx = '' if t == 'fp8' else '_c'
                        row[f'ratio{sfx}'] = row[f'{t}_us'] / row['bf16_us']
                        row[f'graph_ratio{sfx}'] = None if row['bf16_graph_us'] is None or row[f'{t}_graph_us'] is None else row[f'{t}_graph_us'] / row['bf16_graph_us']
                    log(f"  bf16 {row['bf16_us']:.1f} us, fp8 {row['fp8_us']:.1f} us, ratio {row['ratio']:.3f}; "
                        f"graph ratio {row['graph_ratio'] if row['graph_ratio'] is None else round(row['graph_ratio'], 3)}; "
                        f"checks {'ok' if row['checks_ok'] else row['checks']}")
                    del case
                except Exception as e:
                    row['error'] = f"{type(e).__name__}: {e}"
                    log(f"  FAILED: {row['error']}\n{traceback.format_exc()}")
                rows.append(row)
                torch.cuda.empty_cache()
    return rows

def sweep(dev, bw, budget_s):
    "Time variants of the tiled launch parameters on the 16,384-token cases of both head configurations (CUDA-graph median)."
    out = []
    variants = ([dict(tiled=dict(mode='fma_dot'))]
                + [dict(tiled=dict(BLOCK_T=bt)) for bt in (2, 8, 16)]
                + [dict(tiled=dict(BLOCK_M=bm)) for bm in (16, 64)]
                + [dict(tiled=dict(E_BLOCKS=ne)) for ne in (2, 4)]
                + [dict(tiled=dict(num_warps=8)), dict(tiled=dict(BLOCK_T=16, num_warps=8))])
    T = 130 if SMOKE else 16384
    for cname, cfg in head_configs():
        for local in (False, True):
            geom = cfg.rank(4, local=local)
            case = make_case(geom, cfg, T, seed=7 + local, dev=dev)
            for over in [None] + variants:
                if time.time() - T0 > budget_s:
                    log("sweep: time budget reached, stopping"); return out
                for tag, dt in (('bf16', torch.bfloat16), ('fp8', E4M3_DTYPE)):
                    rec = dict(case=f"{cname}-{'local' if local else 'global'}", tokens=T, kv_dtype=tag, override=over)
                    try:
                        fn, _ = prep_fn(case, geom, dt, dev, configs=over)
                        fn(); torch.cuda.synchronize()
                        rec['us'] = (do_bench(fn, warmup=5, rep=20) if SMOKE else do_bench_cudagraph(fn, rep=50, return_mode='median')) * 1e3
                        rec['bw_frac'] = write_path_bytes(geom, T, dt) / (rec['us'] * 1e-6) / 1e12 / bw
                        log(f"  sweep {rec['case']} {tag} {over}: {rec['us']:.1f} us ({rec['bw_frac']:.0%} of copy)")
                    except Exception as e:
                        rec['error'] = f"{type(e).__name__}: {e}"
                        log(f"  sweep {rec['case']} {tag} {over}: FAILED {rec['error']}")
                    out.append(rec)
            del case
            torch.cuda.empty_cache()
    return out

def write_json_atomic(path: Path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix='.tmp')
    try:
        with os.fdopen(fd, 'w') as f:
            json.dump(obj, f, indent=1); f.flush(); os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp): os.unlink(tmp)
        raise

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=os.environ.get('OUT') or str(REPO / 'bench' / 'results'), help="output folder (default $OUT or bench/results)")
    ap.add_argument('--quick', action='store_true', help="skip the 16,384-token cases and the sweep (smoke test)")
    ap.add_argument('--no-sweep', action='store_true', help="skip the launch-parameter sweep")
    ap.add_argument('--budget', type=float, default=210.0, help="stop the sweep after this many seconds in total")
    ap.add_argument('--smoke-cpu', action='store_true', help="plumbing check only: CPU interpreter, tiny shapes, no real timing")
    args = ap.parse_args()
    if SMOKE:
        if os.environ.get('TRITON_INTERPRET') != '1': sys.exit("--smoke-cpu needs TRITON_INTERPRET=1 set before start")
        dev, gpu_name, cap = torch.device('cpu'), 'cpu (smoke test: numbers are meaningless)', [0, 0]
    else:
        if not torch.cuda.is_available(): sys.exit("needs a CUDA GPU")
        if os.environ.get('TRITON_INTERPRET') == '1': sys.exit("TRITON_INTERPRET=1 is set: unset it to benchmark the GPU kernels")
        dev, gpu_name, cap = torch.device('cuda'), torch.cuda.get_device_name(), list(torch.cuda.get_device_capability())
    torch.manual_seed(0)
    log(f"{gpu_name} | torch {torch.__version__} | triton {triton.__version__}")
    bw = copy_bandwidth(dev)
    fill = fill_bandwidth(dev)
    log(f"copy bandwidth {bw:.2f} TB/s, write-only (fill) {fill:.2f} TB/s")
    rows = run_cases(dev, bw, args.quick)
    sw = [] if (args.quick or args.no_sweep) else sweep(dev, bw, args.budget)
    ok = [r for r in rows if 'error' not in r]
    ratios = [r['ratio'] for r in ok]
    graph_ratios = [r['graph_ratio'] for r in ok if r.get('graph_ratio') is not None]
    big = [r for r in ok if r['tokens'] == 16384]
    summary = dict(n_cases=len(rows), n_ok=len(ok), all_checks_ok=all(r['checks_ok'] for r in ok) and len(ok) == len(rows),
                   median_ratio=statistics.median(ratios) if ratios else None, max_ratio=max(ratios) if ratios else None,
                   min_ratio=min(ratios) if ratios else None,
                   median_graph_ratio=statistics.median(graph_ratios) if graph_ratios else None,
                   max_graph_ratio=max(graph_ratios) if graph_ratios else None,
                   min_bw_frac_16k=min(min(r['bf16_bw_frac'], r['fp8_bw_frac']) for r in big) if big else None,
                   max_bw_frac_16k=max(max(r['bf16_bw_frac'], r['fp8_bw_frac']) for r in big) if big else None,
                   min_graph_bw_frac_16k=min(min(r['bf16_graph_bw_frac'], r['fp8_graph_bw_frac']) for r in big if r['fp8_graph_bw_frac']) if big and not SMOKE else None,
                   max_graph_bw_frac_16k=max(max(r['bf16_graph_bw_frac'], r['fp8_graph_bw_frac']) for r in big if r['fp8_graph_bw_frac']) if big and not SMOKE else None,
                   median_graph_ratio_c=statistics.median(gc) if (gc := [r['graph_ratio_c'] for r in ok if r.get('graph_ratio_c') is not None]) else None,
                   max_graph_ratio_c=max(gc) if gc else None,
                   min_graph_bw_frac_16k_c=min(r['fp8c_graph_bw_frac'] for r in big if r['fp8c_graph_bw_frac']) if big and not SMOKE else None)
    res = dict(gpu=gpu_name, capability=cap, torch=torch.__version__,
               triton=triton.__version__, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
               copy_tbs=bw, fill_tbs=fill, attn_block_size=ATTN_B, conv_block_size=CONV_N, kv_layout='HND', scales={t: dict(k=k, v=v) for t, (k, v) in SCALES.items()},
               timing="triton.testing.do_bench median (eager: includes the wrapper's launch overhead) and do_bench_cudagraph median",
               bytes="write_path_bytes: qkvr read + conv-cache insert + K/V store + q and rel_logits writes",
               configs=CONFIGS['interpreter' if SMOKE else 'cuda'], small_token_threshold=store.SMALL_TOKEN_THRESHOLD, rounds=ROUNDS, rounds_fused=ROUNDS_SMALL,
               cases=rows, summary=summary, sweep=sw, wall_s=time.time() - T0)
    path = Path(args.out) / 'write_path.json'
    write_json_atomic(path, res)
    log(f"wrote {path}")
    print(f"\n{res['gpu']} | torch {res['torch']} | triton {res['triton']} | copy {bw:.2f} TB/s | fill {fill:.2f} TB/s")
    print(f"{'case':<14}{'T':>6}{'path':>6}{'bf16 us':>9}{'fp8 us':>9}{'fp8/bf16':>9}{'graph':>7}{'fp8c':>7}{'bf16 BW':>8}{'fp8 BW':>7}  checks")
    for r in rows:
        if 'error' in r: print(f"{r['case']:<14}{r['tokens']:>6}  ERROR {r['error']}"); continue
        g = '' if r['graph_ratio'] is None else f"{r['graph_ratio']:.3f}"
        gc = '' if r['graph_ratio_c'] is None else f"{r['graph_ratio_c']:.3f}"
        print(f"{r['case']:<14}{r['tokens']:>6}{r['path']:>6}{r['bf16_us']:>9.1f}{r['fp8_us']:>9.1f}{r['ratio']:>9.3f}{g:>7}{gc:>7}"
              f"{r['bf16_bw_frac']:>8.0%}{r['fp8_bw_frac']:>7.0%}  {'ok' if r['checks_ok'] else 'FAILED ' + str(r['checks'])}")
    s = summary
    if graph_ratios:
        print(f"CUDA graphs: median fp8/bf16 {s['median_graph_ratio']:.3f} (target <= 1.00), max {s['max_graph_ratio']:.3f} (target <= 1.03)"
              + ("" if s['min_graph_bw_frac_16k'] is None else f"; 16,384-token cases at {s['min_graph_bw_frac_16k']:.2%}..{s['max_graph_bw_frac_16k']:.2%} of copy"))
        if s['median_graph_ratio_c'] is not None:
            print(f"CUDA graphs, calibrated-layer scales (k 1.0, v 2.36): median fp8/bf16 {s['median_graph_ratio_c']:.3f}, max {s['max_graph_ratio_c']:.3f}"
                  + ("" if s['min_graph_bw_frac_16k_c'] is None else f"; fp8 16,384-token cases from {s['min_graph_bw_frac_16k_c']:.2%} of copy"))
    if ratios:
        print(f"eager: median fp8/bf16 {s['median_ratio']:.3f} (target <= 1.00), max {s['max_ratio']:.3f} (target <= 1.03)"
              + ("" if s['min_bw_frac_16k'] is None else f"; 16,384-token cases at {s['min_bw_frac_16k']:.2%}..{s['max_bw_frac_16k']:.2%} of copy (target >= 80%)"))
    print(f"all checks ok: {s['all_checks_ok']}; wall {time.time() - T0:.0f} s")

if __name__ == '__main__':
    main()
