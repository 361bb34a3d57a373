"""H200 benchmark of inkling_fp8kv.attention against the peers a user would pick instead.

Run on a CUDA machine from the repo root:  python bench/attention.py [--fa4] --out DIR
Writes DIR/attention.json (every number, GPU name, versions, date) and prints a short table last.
Peers, all bf16 (no stock fp8 path with a relative bias exists on Hopper): FA4 (flash-attn-4) with a
score-mod relative bias (if importable), FlexAttention with the same score-mod, SDPA without bias
(a ceiling that ignores the bias), our bf16 mode, and the floor (KV bytes / measured copy bandwidth).
"""
import argparse, itertools, json, math, os, sys, time, traceback
import torch, triton
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inkling_fp8kv.attention import rel_attention, ATTN_CONFIGS
from inkling_fp8kv.bench import check_device, write_json_atomic

dev = torch.device("cuda")
F8, BF = torch.float8_e4m3fn, torch.bfloat16
RES = {}   # main() fills the header, then the rows (no CUDA work at import: --help answers on any machine)

def header():
    return dict(gpu=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()),
                torch=torch.__version__, triton=triton.__version__, date=time.strftime("%Y-%m-%d"),
                command=" ".join(["python", "bench/attention.py", *sys.argv[1:]]))

def log(**kw):
    RES["rows"].append(kw); print(json.dumps(kw), flush=True)

def q8(x): return x.float().clamp(-448, 448).to(F8)

def paged(B, kv, Hq, qlen, dtype, E, Hkv=2, page=None):
    "Random Inkling-like inputs in a shuffled paged cache (fp8 pages of 64 tokens, bf16 of 32: vLLM's unified sizes)."
    page = page or (64 if dtype == F8 else 32)
    nblk = math.ceil(kv / page)
    bt = torch.randperm(B * nblk, device=dev).to(torch.int32).view(B, nblk)
    raw = torch.randn(B * nblk, page, Hkv, 256, device=dev, dtype=BF)
    cache = q8(raw) if dtype == F8 else raw
    del raw
    T = B * qlen
    q = torch.randn(T, Hq, 128, device=dev)
    q = q * (128 ** 0.5) / q.norm(dim=-1, keepdim=True)
    q = q8(q) if dtype == F8 else q.to(BF)
    rel = (0.5 * torch.randn(T, Hq, E, device=dev)).to(BF)
    cu = torch.arange(B + 1, device=dev, dtype=torch.int32) * qlen
    sl = torch.full((B,), kv, device=dev, dtype=torch.int32)
    return q, cache[..., :128], cache[..., 128:], rel, bt, sl, cu

def timed(fn, graph=False):
    fn(); torch.cuda.synchronize()
    if graph:
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s): fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g): fn()
        fn = g.replay
    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3   # microseconds

def attn_call(dtype, B, kv, Hq, qlen, E=1024, window=None, config=None):
    q, k, v, rel, bt, sl, cu = paged(B, kv, Hq, qlen, dtype, E)
    out = torch.empty(q.shape, dtype=BF, device=dev)
    return lambda: rel_attention(q, k, v, rel, block_table=bt, seq_lens=sl, cu_seqlens_q=cu, max_seqlen_q=qlen, softmax_scale=1 / 128,
                                 window=window, max_seqlen_k=kv, out=out, config=config, validate=False)   # timed and graph-captured: trusted path

def kv_bytes(B, kv, dtype, window=None, Hkv=2):
    return B * (min(kv, window) if window else kv) * Hkv * 2 * 128 * (1 if dtype == F8 else 2)

def prefill_flops(Q, kv, Hq, window=None):
    P = torch.arange(kv - Q, kv, dtype=torch.float64)
    vis = torch.clamp(P + 1, max=window) if window else P + 1
    return 4 * vis.sum().item() * Hq * 128

def sdpa(B, Sq, kv, Hq=16, Hkv=2):
    q = torch.randn(B, Hq, Sq, 128, device=dev, dtype=BF); k = torch.randn(B, Hkv, kv, 128, device=dev, dtype=BF); v = torch.randn_like(k)
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=Sq > 1, enable_gqa=True, scale=1 / 128)

def flex(B, Sq, kv, Hq=16, Hkv=2, E=1024):
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    fa = torch.compile(flex_attention, dynamic=False)
    q = torch.randn(B, Hq, Sq, 128, device=dev, dtype=BF); k = torch.randn(B, Hkv, kv, 128, device=dev, dtype=BF); v = torch.randn_like(k)
    rel = (0.5 * torch.randn(B, Hq, Sq, E, device=dev)).to(BF)
    off = kv - Sq
    def score_mod(score, b, h, qi, ki):
        d = qi + off - ki
        return score + torch.where((d >= 0) & (d < E), rel[b, h, qi, d.clamp(0, E - 1)].float(), 0.0)
    bm = create_block_mask(lambda b, h, qi, ki: qi + off >= ki, None, None, Sq, kv, device=dev)
    return lambda: fa(q, k, v, score_mod=score_mod, block_mask=bm, scale=1 / 128, enable_gqa=True)

def fa4_inputs(B, Sq, kv, Hq=16, Hkv=2, E=1024):
    "Dense bf16 q/k/v and the bias padded with a zero column at index E (d >= E reads it; d < 0 is masked causally)."
    q = torch.randn(B, Sq, Hq, 128, device=dev, dtype=BF); k = torch.randn(B, kv, Hkv, 128, device=dev, dtype=BF); v = torch.randn_like(k)
    relp = torch.cat([(0.5 * torch.randn(B, Sq, Hq, E, device=dev)).to(BF), torch.zeros(B, Sq, Hq, 1, device=dev, dtype=BF)], -1).contiguous()
    return q, k, v, relp

def fa4(B, Sq, kv, Hq=16, Hkv=2, E=1024, bias=True, inputs=None):
    import cutlass, cutlass.cute as cute
    from flash_attn.cute.interface import flash_attn_func
    q, k, v, relp = inputs or fa4_inputs(B, Sq, kv, Hq, Hkv, E)
    @cute.jit
    def rel_bias_mod(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        rel = aux_tensors[0]
        qf = cute.make_rmem_tensor(1, cutlass.Int32); qf.store(q_idx)
        kf = cute.make_rmem_tensor(1, cutlass.Int32); kf.store(kv_idx)
        bf = cute.make_rmem_tensor(1, cutlass.Int32); bf.store(b_idx)
        hf = cute.make_rmem_tensor(1, cutlass.Int32); hf.store(h_idx)
        d = qf[0] + (seqlen_info.seqlen_k - seqlen_info.seqlen_q) - kf[0]
        dc = cutlass.min(cutlass.max(d, 0), E)
        bias = cute.make_rmem_tensor(1, rel.element_type)
        bias[0] = rel[((bf[0] * Sq + qf[0]) * Hq + hf[0]) * (E + 1) + dc]
        return tSrS_ssa + bias.load().to(cutlass.Float32)
    kw = dict(softmax_scale=1 / 128, causal=True)
    if bias: kw.update(score_mod=rel_bias_mod, aux_tensors=[relp.view(-1)])
    return lambda: flash_attn_func(q, k, v, **kw)

def pick(kind, dtype, candidates, B, kv, Hq, qlen, graph):
    best = None
    for cfg in candidates:
        try:
            us = timed(attn_call(dtype, B, kv, Hq, qlen, config=cfg), graph=graph)
            log(kind="tune_" + kind, dtype=str(dtype)[6:], B=B, kv=kv, Hq=Hq, qlen=qlen, config=cfg, us=us)
            if best is None or us < best[1]: best = (cfg, us)
        except Exception as e: log(kind="tune_fail", config=cfg, err=str(e)[-300:])
        torch.cuda.empty_cache()
    return best[0]

def main():
    ap = argparse.ArgumentParser(prog="bench/attention.py", description=__doc__.splitlines()[0] + " CUDA GPU only.")
    ap.add_argument("--out", default=".", help="output folder (default: the current one)")
    ap.add_argument("--fa4", action="store_true", help="also time FlashAttention-4 (see bench/fa4-unpack.sh)")
    a = ap.parse_args()
    try: check_device("cuda")
    except RuntimeError as e: ap.error(str(e))
    RES.update(header(), configs=None, rows=[])
    x = torch.empty(2 * 1024 ** 3, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
    bw = 2 * x.numel() / (timed(lambda: y.copy_(x)) * 1e-6) / 1e12
    log(kind="copy_bandwidth", tbps=bw); del x, y
    # --- a small sweep around the committed defaults, then the grid with the winners
    plain = dict(ATTN_CONFIGS["decode_fp8"], perm_v=False)   # V columns in cache order
    perm = dict(plain, perm_v=True)                            # V columns reordered (see the 07 notebook)
    wide = [dict(plain, block_n=64, num_warps=2, num_stages=3), dict(plain, block_n=16, num_stages=6)]
    cands = [perm, plain] + [dict(plain, **o) for o in (dict(lazy_skip=False), dict(split_waves=8), dict(split_waves=32),
                                                        dict(num_stages=6))] + wide + [dict(ATTN_CONFIGS["decode_bf16"])]
    cands1 = [dict(c, split_waves=w) for c in [perm, plain, dict(ATTN_CONFIGS["decode1_fp8"], perm_v=True)] + wide
              + [dict(ATTN_CONFIGS["decode_bf16"])] for w in (2, 4)]
    cfg = {}
    for dt in (F8, BF):
        cfg[("decode", dt)] = pick("decode", dt, cands, 32, 65536, 16, 1, graph=False)
        cfg[("decode1", dt)] = pick("decode1", dt, cands1, 1, 65536, 16, 1, graph=True)
    pre = ATTN_CONFIGS["prefill_fp8"]
    for dt in (F8, BF):
        cfg[("prefill", dt)] = pick("prefill", dt, [dict(pre), dict(pre, lazy_skip=True), dict(pre, num_stages=4), dict(pre, block_n=128, num_warps=8)]
                                    + [dict(ATTN_CONFIGS["prefill_bf16"])],
                                    1, 65536, 16, 8192, graph=False)
    RES["configs"] = {f"{k[0]}_{str(k[1])[6:]}": v for k, v in cfg.items()}
    write_json_atomic(os.path.join(a.out, "attention.json"), RES)
    # --- the grid
    for Hq, dt in itertools.product((16, 8), (F8, BF)):
        name = str(dt)[6:]
        for B, kv in itertools.product((1, 8, 32), (8192, 32768, 65536, 131072)):
            c = cfg[("decode1" if B == 1 else "decode", dt)]
            try:
                f = attn_call(dt, B, kv, Hq, 1, config=c)
                us, usg = timed(f), timed(f, graph=True)
                log(kind="decode", dtype=name, Hq=Hq, B=B, kv=kv, layer="global", us=us, us_graph=usg, tbps=kv_bytes(B, kv, dt) / (min(us, usg) * 1e-6) / 1e12)
            except Exception as e: log(kind="fail", case=["decode", name, Hq, B, kv], err=str(e)[-300:])
            torch.cuda.empty_cache()
        for B in (8, 32):   # local layers: the window caps the bytes
            try:
                f = attn_call(dt, B, 65536, Hq, 1, E=512, window=512, config=cfg[("decode", dt)])
                us, usg = timed(f), timed(f, graph=True)
                log(kind="decode", dtype=name, Hq=Hq, B=B, kv=65536, layer="local", us=us, us_graph=usg, tbps=kv_bytes(B, 65536, dt, 512) / (min(us, usg) * 1e-6) / 1e12)
            except Exception as e: log(kind="fail", case=["decode_local", name, Hq, B], err=str(e)[-300:])
        for Q, kv in itertools.product((2048, 8192), (8192, 65536)):
            try:
                us = timed(attn_call(dt, 1, kv, Hq, Q, config=cfg[("prefill", dt)]))
                log(kind="prefill", dtype=name, Hq=Hq, Q=Q, kv=kv, layer="global", us=us, tflops=prefill_flops(Q, kv, Hq) / (us * 1e-6) / 1e12)
            except Exception as e: log(kind="fail", case=["prefill", name, Hq, Q, kv], err=str(e)[-300:])
            torch.cuda.empty_cache()
        try:
            us = timed(attn_call(dt, 1, 65536, Hq, 8192, E=512, window=512, config=cfg[("prefill", dt)]))
            log(kind="prefill", dtype=name, Hq=Hq, Q=8192, kv=65536, layer="local", us=us, tflops=prefill_flops(8192, 65536, Hq, 512) / (us * 1e-6) / 1e12)
        except Exception as e: log(kind="fail", case=["prefill_local", name, Hq], err=str(e)[-300:])
        write_json_atomic(os.path.join(a.out, "attention.json"), RES)
    # --- peers at Hq=16: decode B=32 / B=1 at 64K, prefill 8K x 64K
    peer_cases = [(32, 1, 65536), (1, 1, 65536), (1, 8192, 65536)]
    for B, Sq, kv in peer_cases:
        for name, mk in (("sdpa_nobias", lambda: sdpa(B, Sq, kv)), ("flex_scoremod", lambda: flex(B, Sq, kv))):
            try:
                f = mk(); us = timed(f); usg = timed(f, graph=True) if Sq == 1 and name == "sdpa_nobias" else None
                log(kind="peer", name=name, B=B, Sq=Sq, kv=kv, Hq=16, us=us, us_graph=usg)
            except Exception as e: log(kind="peer_fail", name=name, B=B, Sq=Sq, err=str(e)[-300:])
            torch.cuda.empty_cache()
        if a.fa4:
            for bias in (True, False):
                try: log(kind="peer", name="fa4_scoremod" if bias else "fa4_nobias", B=B, Sq=Sq, kv=kv, Hq=16, us=timed(fa4(B, Sq, kv, bias=bias)))
                except Exception as e: log(kind="peer_fail", name="fa4", B=B, Sq=Sq, err=str(e)[-300:])
                torch.cuda.empty_cache()
        write_json_atomic(os.path.join(a.out, "attention.json"), RES)
    # --- short table
    rows = RES["rows"]
    def get(kind, **kw): return [r for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in kw.items())]
    print(f"\n{RES['gpu']}  torch {RES['torch']}  triton {RES['triton']}  copy {bw:.2f} TB/s")
    for d in ("float8_e4m3fn", "bfloat16"):
        for B in (32, 1):
            r = get("decode", dtype=d, Hq=16, B=B, kv=65536, layer="global")
            if r: print(f"decode {d[:4]} B={B:2d} 64K Hq16: {r[0]['us']:8.1f} us eager  {r[0]['us_graph']:8.1f} us graph  {r[0]['tbps']:.2f} TB/s")
        r = get("prefill", dtype=d, Hq=16, Q=8192, kv=65536, layer="global")
        if r: print(f"prefill {d[:4]} 8K x 64K Hq16: {r[0]['us']/1e3:8.2f} ms  {r[0]['tflops']:.0f} TFLOP/s")
    for r in get("peer"): print(f"peer {r['name']:14s} B={r['B']:2d} Sq={r['Sq']:5d}: {r['us']:9.1f} us" + (f" ({r['us_graph']:.1f} graph)" if r.get("us_graph") else ""))

if __name__ == "__main__":
    main()
