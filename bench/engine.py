"""Engine throughput and admission, fp8 vs bf16 KV, on the embedded tiny Inkling (GPU).

    PYTHONPATH=$PWD python bench/engine.py [--out DIR]   (writes DIR/engine.json; default $OUT, else bench/results)

Throughput: 32 concurrent requests of 8,192-token prompts, 256 greedy new tokens each, through `model.Engine` (Triton kernels,
paged caches, chunked prefill under 8,192 batched tokens); output tokens/s end to end, prefill and decode step rates.
Admission: how many such requests each dtype admits at a fixed cache budget, beside `capacity.plan_pool`'s prediction for the
same geometry.
"""
import argparse, json, os, platform, sys, time
from pathlib import Path
import numpy as np
import torch

from inkling_fp8kv.model import Engine, InklingLM, sample_sequence, tiny_checkpoint
from inkling_fp8kv.capacity import plan_pool

N_REQ, PROMPT, NEW, BATCHED = 32, 8192, 256, 8192
BUDGET = 256 << 20                                     # admission comparison: 256 MiB of cache

def timed_generate(eng, prompts, new):
    "generate() with per-step wall times (each step ends in a host read of its logits, so the clock is synchronous)."
    steps, orig = [], eng._step
    def step():
        t = time.perf_counter(); n = orig(); steps.append((n, time.perf_counter() - t)); return n
    eng._step = step
    t0 = time.perf_counter()
    out = eng.generate(prompts, new)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    eng._step = orig
    dec = [(n, s) for n, s in steps if n <= eng.max_num_seqs]
    pre = [(n, s) for n, s in steps if n > eng.max_num_seqs]
    return out, dict(seconds=round(total, 3), output_tokens=sum(map(len, out)), output_tok_s=round(sum(map(len, out)) / total, 1),
                     steps=len(steps), prefill_steps=len(pre), prefill_tok_s=round(sum(n for n, _ in pre) / max(1e-9, sum(s for _, s in pre)), 1),
                     decode_steps=len(dec), decode_step_ms_median=round(1e3 * float(np.median([s for _, s in dec])), 3) if dec else None)

def admitted(model, budget, length, new):
    "Requests of `length + new` tokens the Engine admits at once with `budget` bytes of cache."
    eng = Engine(model, max_num_seqs=10_000, max_num_batched_tokens=BATCHED, block_size=16, max_model_len=length + new, cache_bytes=budget)
    for _ in range(2000):
        eng._add([1] * length, new, False)
    eng._admit()
    return len(eng.running), eng.num_blocks, eng.cache_bytes_per_token()

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench/results", help="output folder")
    ap.add_argument("--requests", type=int, default=N_REQ)
    ap.add_argument("--prompt", type=int, default=PROMPT)
    ap.add_argument("--new", type=int, default=NEW)
    a = ap.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench/engine.py needs a GPU")
    rng = np.random.default_rng(0)
    prompts = [sample_sequence(rng, a.prompt, n_pairs=64, n_queries=64).tokens for _ in range(a.requests)]
    res = dict(workload=dict(requests=a.requests, prompt_tokens=a.prompt, new_tokens=a.new, max_num_batched_tokens=BATCHED, block_size=16),
               throughput={}, admission={})
    outs = {}
    for dt in ("bfloat16", "fp8_e4m3"):
        m = InklingLM.from_pretrained(tiny_checkpoint(), kv_cache_dtype=dt, kernels="triton", device="cuda", warn=False)
        eng = Engine(m, max_num_seqs=a.requests, max_num_batched_tokens=BATCHED, block_size=16, max_model_len=a.prompt + a.new)
        eng.generate([p[:300] for p in prompts[:4]], 4)                              # warm up: compile every kernel variant once
        eng.generate([p[:2000] for p in prompts[:2]], 2)
        outs[dt], res["throughput"][dt] = timed_generate(eng, prompts, a.new)
        print(dt, res["throughput"][dt], flush=True)
        n, nb, per_tok = admitted(m, BUDGET, a.prompt, a.new)
        cfg = m.cfg
        plan = plan_pool(cfg, tp=1, kv_cache_dtype="bfloat16" if dt == "bfloat16" else "fp8", max_model_len=a.prompt + a.new,
                         max_num_batched_tokens=BATCHED, available_bytes=BUDGET, max_concurrent_batches=1)
        res["admission"][dt] = dict(cache_bytes=BUDGET, engine_admitted=n, engine_blocks=nb, engine_bytes_per_token=per_tok,
                                    plan_pool_max_concurrency=round(plan.max_concurrency, 2), plan_pool_blocks_per_request=plan.blocks_per_request,
                                    plan_pool_bytes_per_block=plan.bytes_per_block)
        print(dt, res["admission"][dt], flush=True)
        del eng, m; torch.cuda.empty_cache()
    agree = np.mean([x == y for o1, o2 in zip(outs["bfloat16"], outs["fp8_e4m3"]) for x, y in zip(o1, o2)])
    res["fp8_vs_bf16_token_agreement"] = round(float(agree), 4)
    res["env"] = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=__import__("triton").__version__,
                      python=platform.python_version(), date=time.strftime("%Y-%m-%d"), command="python " + " ".join(sys.argv))
    res.update({k: res["env"][k] for k in ("gpu", "torch", "triton", "date", "command")})   # the header every results file carries
    out = Path(a.out) / "engine.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    t, ad = res["throughput"], res["admission"]
    print(f"\n| KV dtype | output tok/s | prefill tok/s | decode step ms | admitted @ {BUDGET >> 20} MiB | plan_pool |")
    print("|---|---|---|---|---|---|")
    for dt in t: print(f"| {dt} | {t[dt]['output_tok_s']} | {t[dt]['prefill_tok_s']} | {t[dt]['decode_step_ms_median']} | {ad[dt]['engine_admitted']} | {ad[dt]['plan_pool_max_concurrency']} |")

if __name__ == "__main__":
    main()
