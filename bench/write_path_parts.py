"""Where the tiled write path spends its time at 16,384 tokens: the K/V programs against the q + logit programs.

Run on a CUDA machine from the repo root:  python bench/write_path_parts.py   (writes write_path_parts.json to $OUT, or to .)
The one-launch tiled prep interleaves two kinds of programs. This launches the same kernel three ways per case
and dtype (the bench/write_path.py inputs, CUDA-graph medians): the whole grid, only its K/V programs (conv insert,
4-tap conv, k-norm, K/V store) and only its q + logit programs, and reports each part's bytes over its time as a
fraction of the measured copy bandwidth, beside the write-only (fill) bandwidth.
"""
import json, os, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), 'bench'))
import torch
import write_path as WP
from inkling_fp8kv import store
from inkling_fp8kv.numerics import E4M3_DTYPE
from triton.testing import do_bench_cudagraph
dev = torch.device('cuda')
orig = store._tiled_prep_kernel
class Wrap:
    "Stands in for the kernel: n_rel = 0 makes every program a K/V program (the kernel's program split), n_kv = 0 every one a q + logit program."
    def __init__(self, mode): self.mode = mode
    def __getitem__(self, grid):
        def launch(*args, **kw):
            args = list(args); n_kv, n_rel = args[-2], args[-1]
            if self.mode == 'kv': args[-1] = 0; grid2 = (n_kv,)
            elif self.mode == 'rel': args[-2] = 0; grid2 = (n_rel,)
            else: grid2 = grid
            return orig[grid2](*args, **kw)
        return launch
bw = WP.copy_bandwidth(dev); fill = WP.fill_bandwidth(dev)
print(f"copy {bw:.2f} TB/s fill {fill:.2f} TB/s")
R = dict(copy_tbs=bw, fill_tbs=fill, rows=[])
T = 16384
for name, cfg in WP.head_configs():
    for local in (True, False):
        geom = cfg.rank(4, local=local)
        case = WP.make_case(geom, cfg, T, seed=5, dev=dev)
        Hq, Hkv, E = geom.num_heads, geom.num_kv_heads, geom.rel_extent
        for dt in (torch.bfloat16, E4M3_DTYPE):
            esz = 1 if dt == E4M3_DTYPE else 2
            kvb = T * Hkv * (2 * 128 * 2 + 256 * 2 + 2 * 128 * esz)
            relb = T * Hq * ((128 + 16) * 2 + 128 * 2 + E * 2)
            assert kvb + relb == store.write_path_bytes(geom, T, dt)          # the two parts split the benchmark's byte count
            row = dict(case=f"{name}-{'local' if local else 'global'}", dtype=str(dt)[6:], kv_bytes=kvb, rel_bytes=relb)
            for mode in ('full', 'kv', 'rel'):
                store._tiled_prep_kernel = Wrap(mode)
                fn, _ = WP.prep_fn(case, geom, dt, dev)
                fn(); torch.cuda.synchronize()
                us = do_bench_cudagraph(fn, rep=50, return_mode='median') * 1e3
                row[mode + '_us'] = us
            store._tiled_prep_kernel = orig
            row['full_frac'] = (kvb + relb) / (row['full_us'] * 1e-6) / 1e12 / bw
            row['kv_frac'] = kvb / (row['kv_us'] * 1e-6) / 1e12 / bw
            row['rel_frac'] = relb / (row['rel_us'] * 1e-6) / 1e12 / bw
            R['rows'].append(row)
            print(f"{row['case']:13s} {row['dtype'][:5]:6s} full {row['full_us']:7.1f} us ({row['full_frac']:.0%})  kv-only {row['kv_us']:7.1f} ({row['kv_frac']:.0%})  rel-only {row['rel_us']:7.1f} ({row['rel_frac']:.0%})", flush=True)
R.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=__import__('triton').__version__, date=time.strftime('%Y-%m-%d'), tokens=T,
         timing='do_bench_cudagraph median, microseconds')
json.dump(R, open(os.path.join(os.environ.get('OUT', '.'), 'write_path_parts.json'), 'w'), indent=1)
