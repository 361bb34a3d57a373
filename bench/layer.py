"""H200 benchmark of one attention layer (inkling_fp8kv.layer.InklingAttention): fp8 vs bf16 KV cache, and the layer
against the sum of its own kernels timed alone in the same run.

Run on a CUDA machine from the repo root:  python bench/layer.py --out DIR
Writes DIR/layer.json (every number, GPU name, versions, date, command) and prints a short table last.

Cases (global layers, relative extent 1024): decode of 32 requests at 64K keys each, and a prefill chunk of 8K new
tokens onto a 56K cached prefix (64K keys), for two per-rank geometries: inkling_small().rank(4) (8 q / 2 KV heads)
and the 16 q / 2 KV geometry of bench/attention.py. Timings are CUDA-graph replay medians (do_bench): the layer's
forward captured with LayerGraph, and each of its parts (prep with quant-on-store, query quantization, attention)
captured alone on the same inputs. Pages: 64 tokens for fp8, 32 for bf16 (vLLM's unified sizes at TP4).
"""
import argparse, json, math, os, sys, time
import torch, triton
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inkling_fp8kv.config import InklingConfig, inkling_small
from inkling_fp8kv.layer import InklingAttention, LayerGraph
from inkling_fp8kv.reference import BatchMeta, random_prep_weights
from inkling_fp8kv.descale import quantize_query
from inkling_fp8kv import store, attention

dev = torch.device("cuda")

def graphed(fn):
    "A CUDA graph of `fn` (run once eagerly first); returns its replay."
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    return g.replay

def timed(fn) -> float:
    return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3     # microseconds

def copy_bandwidth() -> float:
    x = torch.empty(1 << 30, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
    return 2 * x.numel() / (timed(lambda: y.copy_(x)) * 1e-6)

def build(cfg, idx, tp, dtype, q_lens, ctx, *, seed=0):
    "A layer with random prep weights and scales, caches big enough for the batch, random K/V in every page, and the batch's metadata."
    m = InklingAttention(cfg, idx, tp=tp, kv_cache_dtype=dtype, kernels="triton", device=dev)
    g = m.geom
    w = random_prep_weights(g, seed=seed, device=dev)
    with torch.no_grad():
        for p, x in ((m.k_sconv.weight, w.k_conv_w[:, None]), (m.v_sconv.weight, w.v_conv_w[:, None]), (m.q_norm.weight, w.q_norm_w),
                     (m.k_norm.weight, w.k_norm_w), (m.rel_logits_proj.proj, w.rel_proj)): p.copy_(x)
        if m.kv.quantized: m.q_scale.fill_(0.5); m.k_scale.fill_(0.25); m.v_scale.fill_(2.0)
    m.process_weights_after_loading()
    page = 64 if m.kv.quantized else 32
    B, seq = len(q_lens), [c + q for c, q in zip(ctx, q_lens)]
    nblk = [math.ceil(s / page) for s in seq]
    N, ring = 4, [math.ceil((q + 3) / 4) + 1 for q in q_lens]                # conv: a ring of blocks per request covers taps and inserts
    kv, conv = m.alloc_caches(sum(nblk), page, sum(ring), N)
    gen = torch.Generator(device=dev).manual_seed(seed)
    if m.kv.quantized:
        kv.copy_(torch.randint(0, 0x7E, kv.shape, device=dev, dtype=torch.uint8, generator=gen)
                 | (torch.randint(0, 2, kv.shape, device=dev, dtype=torch.uint8, generator=gen) << 7))   # finite e4m3 codes
    else: kv.copy_(torch.randn(kv.shape, device=dev, generator=gen).to(torch.bfloat16))
    conv.copy_(torch.randn(conv.shape, device=dev, generator=gen).to(torch.bfloat16))
    m.bind_cache(kv, conv)
    perm = torch.randperm(sum(nblk), device=dev, generator=gen).to(torch.int32)
    bt = torch.zeros(B, max(nblk), dtype=torch.int32, device=dev)
    o = 0
    for b, n in enumerate(nblk): bt[b, :n] = perm[o:o + n]; o += n
    conv_w = max(math.ceil(s / N) for s in seq)
    cbt = torch.zeros(B, conv_w, dtype=torch.int32, device=dev)
    r0 = 0
    for b, r in enumerate(ring): cbt[b] = r0 + torch.arange(conv_w, device=dev, dtype=torch.int32) % r; r0 += r
    pos = torch.cat([torch.arange(c, c + q, device=dev) for c, q in zip(ctx, q_lens)])
    req = torch.cat([torch.full((q,), b, device=dev, dtype=torch.int64) for b, q in enumerate(q_lens)])
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    slot = bt[req, pos // page].long() * page + pos % page
    cslot = cbt[req, pos // N].long() * N + pos % N
    T = sum(q_lens)
    meta = BatchMeta(req_ids=list(range(B)), positions=pos, seq_idx=req.to(torch.int32), query_start=cu[req].to(torch.int32),
                     seq_lens=torch.tensor(seq, dtype=torch.int32, device=dev), cu_seqlens_q=cu, max_seqlen_q=max(q_lens), max_seqlen_k=max(seq),
                     num_actual_tokens=T, block_table=bt, slot_mapping=slot, conv_block_table=cbt, conv_slot_mapping=cslot)
    x = torch.randn(T, g.qkvr_width, device=dev, generator=gen).to(torch.bfloat16)
    return m, meta, x

def parts(m, meta, x):
    "The layer's three steps as separate callables on the same inputs (the same calls its forward makes)."
    g, fp8 = m.geom, m.kv.quantized
    cache = dict(positions=meta.positions, seq_idx=meta.seq_idx, query_start=meta.query_start, conv_cache=m.conv_cache,
                 conv_block_table=meta.conv_block_table, conv_slot_mapping=meta.conv_slot_mapping, k_cache=m.k_cache, v_cache=m.v_cache,
                 slot_mapping=meta.slot_mapping, tau=None, eps=m.cfg.rms_norm_eps,
                 k_scale=m._kernel_scales[1:2] if fp8 else None, v_scale=m._kernel_scales[2:3] if fp8 else None)
    q, rel = store.qkvr_prep(x, m.prep_weights(), geom=g, **cache, validate=False)
    q_in = quantize_query(q, m._kernel_scales[0], validate=False) if fp8 else q
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=dev)
    prep = lambda: store.qkvr_prep(x, m.prep_weights(), geom=g, **cache, validate=False)
    quant = (lambda: quantize_query(q, m._kernel_scales[0], validate=False)) if fp8 else None
    attn = lambda: attention.rel_attention(q_in, m.k_cache, m.v_cache, rel, block_table=meta.block_table, seq_lens=meta.seq_lens,
                                           cu_seqlens_q=meta.cu_seqlens_q, max_seqlen_q=meta.max_seqlen_q, max_seqlen_k=meta.max_seqlen_k,
                                           softmax_scale=m.folded_softmax_scale, window=g.window,
                                           v_scale=m.descales["v_scale"] if fp8 else 1.0, backend="triton", out=out, validate=False)
    return dict(prep=prep, quantize_query=quant, attention=attn), (q_in, rel, out)

GEOMS = {"inkling_small.rank(4): 8 q / 2 KV": (inkling_small(), 5, 4),
         "16 q / 2 KV": (InklingConfig(num_layers=1, local_layer_ids=(), hidden_size=1024, num_attention_heads=16, num_kv_heads=2), 0, 1)}
CASES = {"decode B=32, KV 64K": ([1] * 32, [65535] * 32), "prefill 8K onto 56K (KV 64K)": ([8192], [65536 - 8192])}

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="small cases only (a smoke test of the script)")
    a = ap.parse_args()
    cases = {"decode B=4, KV 4K": ([1] * 4, [4095] * 4), "prefill 512 onto 512": ([512], [512])} if a.quick else CASES
    res = dict(gpu=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()), torch=torch.__version__,
               triton=triton.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               command="python bench/layer.py" + (" --quick" if a.quick else ""), copy_bytes_per_s=copy_bandwidth(), rows=[])
    for gname, (cfg, idx, tp) in GEOMS.items():
        for cname, (q_lens, ctx) in cases.items():
            for dtype in ("fp8", "bfloat16"):
                t0 = time.time()
                m, meta, x = build(cfg, idx, tp, dtype, q_lens, ctx)
                fns, (q_in, rel, out) = parts(m, meta, x)
                layer_out = m(x, meta).clone()
                fns["attention"]()
                same = torch.equal(layer_out, out)                                 # the layer is exactly its parts
                graph = LayerGraph(m, x, meta)
                row = dict(geometry=gname, case=cname, dtype=dtype, Hq=m.geom.num_heads, Hkv=m.geom.num_kv_heads, tokens=meta.num_actual_tokens,
                           kv_len=meta.max_seqlen_k, layer_equals_parts=same, layer_us=timed(lambda: graph(x, meta)))
                row["replay_only_us"] = timed(graph.graph.replay)
                for k, f in fns.items():
                    if f is not None: row[f"{k}_us"] = timed(graphed(f))
                row["parts_sum_us"] = sum(row[f"{k}_us"] for k in fns if fns[k] is not None)
                row["overhead"] = row["replay_only_us"] / row["parts_sum_us"] - 1
                kvb = m.kv_cache.element_size() * 2 * 128 * m.geom.num_kv_heads * sum(s for s in meta.seq_lens.tolist())
                row["attention_TBps"] = kvb / (row["attention_us"] * 1e-6) / 1e12
                row["setup_s"] = round(time.time() - t0, 1)
                res["rows"].append(row); print(json.dumps(row), flush=True)
                del m, graph, fns, q_in, rel, out, x, meta; torch.cuda.empty_cache()
    by = {(r["geometry"], r["case"], r["dtype"]): r for r in res["rows"]}
    for r in res["rows"]:
        if r["dtype"] == "fp8": r["fp8_over_bf16"] = r["replay_only_us"] / by[(r["geometry"], r["case"], "bfloat16")]["replay_only_us"]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "layer.json"), "w") as f: json.dump(res, f, indent=1)
    print(f"\n{res['gpu']}, torch {res['torch']}, triton {res['triton']}, copy {res['copy_bytes_per_s'] / 1e12:.2f} TB/s")
    print(f"{'geometry':32s} {'case':30s} {'dtype':9s} {'layer us':>9s} {'parts us':>9s} {'overhead':>8s} {'fp8/bf16':>8s} {'attn TB/s':>9s}")
    for r in res["rows"]:
        print(f"{r['geometry']:32s} {r['case']:30s} {r['dtype']:9s} {r['replay_only_us']:9.1f} {r['parts_sum_us']:9.1f} {100 * r['overhead']:7.1f}% "
              f"{r.get('fp8_over_bf16', float('nan')):8.3f} {r['attention_TBps']:9.2f}")

if __name__ == "__main__": main()
