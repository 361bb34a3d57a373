"""H200 check of the split-count rule of split-KV decode at batch sizes between the grid's (Hq 16, KV 64K).

Run on a CUDA machine from the repo root:  python bench/decode_splits.py --out DIR
For each batch size, times the decode with the split count `decode_num_splits` picks (rounding the programs per
launch down to at most `split_waves` per SM) and with the count rounded up instead (the rule before 2026-12-03),
as CUDA-graph replays; writes DIR/decode_splits.json and prints a table last.
"""
import argparse, json, os, sys, time
import torch, triton
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention import paged, timed, kv_bytes, dev, F8, BF
from inkling_fp8kv.attention import rel_attention, ATTN_CONFIGS, decode_num_splits, MAX_SPLITS
from inkling_fp8kv.bench import check_device, write_json_atomic

def main():
    ap = argparse.ArgumentParser(prog="bench/decode_splits.py", description=__doc__.splitlines()[0] + " CUDA GPU only.")
    ap.add_argument("--out", default=".", help="output folder (default: the current one)")
    a = ap.parse_args()
    try: check_device("cuda")
    except RuntimeError as e: ap.error(str(e))
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    res = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, date=time.strftime("%Y-%m-%d"),
               num_sms=sms, Hq=16, Hkv=2, kv=65536, timing="do_bench median of CUDA-graph replays, microseconds", rows=[])
    x = torch.empty(2 * 1024 ** 3, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
    res["copy_tbps"] = bw = 2 * x.numel() / (timed(lambda: y.copy_(x)) * 1e-6) / 1e12; del x, y
    for dt in (F8, BF):
        cfg = ATTN_CONFIGS["decode_fp8" if dt == F8 else "decode_bf16"]
        for B in ((12, 20, 24, 28, 32, 40, 48) if dt == F8 else (20, 32, 40)):
            q, k, v, rel, bt, sl, cu = paged(B, 65536, 16, 1, dt, 1024)
            out = torch.empty(q.shape, dtype=BF, device=dev)
            new = decode_num_splits(B, 2, 65536, block_n=cfg["block_n"], waves=cfg["split_waves"], num_sms=sms)
            old = max(1, min(triton.cdiv(cfg["split_waves"] * sms, B * 2), triton.cdiv(65536, cfg["block_n"]), MAX_SPLITS))
            row = dict(dtype=str(dt)[6:], B=B, splits_new=new, splits_old=old)
            for tag, n in (("new", new), ("old", old)):
                us = timed(lambda: rel_attention(q, k, v, rel, block_table=bt, seq_lens=sl, cu_seqlens_q=cu, max_seqlen_q=1, softmax_scale=1 / 128,
                                                 max_seqlen_k=65536, out=out, num_splits=n, validate=False), graph=True)
                row[f"us_{tag}"], row[f"copy_frac_{tag}"] = us, kv_bytes(B, 65536, dt) / (us * 1e-6) / 1e12 / bw
            res["rows"].append(row); print(json.dumps(row), flush=True)
            del q, k, v, rel; torch.cuda.empty_cache()
    write_json_atomic(os.path.join(a.out, "decode_splits.json"), res)
    print(f"\n{res['gpu']}  copy {bw:.2f} TB/s  ({sms} SMs)")
    print(" dtype    B  splits new/old      us new     us old   new/old  copy% new")
    for r in res["rows"]:
        print(f"{r['dtype'][:5]:6s} {r['B']:4d}  {r['splits_new']:5d}/{r['splits_old']:<5d}  {r['us_new']:10.1f} {r['us_old']:10.1f}  {r['us_new'] / r['us_old']:7.3f}  {100 * r['copy_frac_new']:6.1f}")

if __name__ == "__main__":
    main()
