"""FA4 (flash-attn-4, CuTe DSL) bf16 with a score-mod relative bias: what vLLM's Inkling runs on Hopper."""
# Usage on the GPU box (repo root, after carrying .fa4a/.fa4b from ../shared/tools/fa4-carry.sh):
#   source bench/fa4-unpack.sh && python bench/fa4_peer.py full   (writes $OUT/fa4_peer.json)
import json, math, os, sys, time, traceback
import torch
from triton.testing import do_bench
import cutlass, cutlass.cute as cute
from flash_attn.cute.interface import flash_attn_func
OUT = os.environ.get("OUT", "/tmp")
dev = torch.device("cuda")
rows = []

def make_mod(SQ, HQ, E):
    # rel_pad [B, SQ, HQ, E+1] flattened; column E is zero: d >= E (no bias) maps there, d < 0 is masked causally
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
        bias[0] = rel[((bf[0] * SQ + qf[0]) * HQ + hf[0]) * (E + 1) + dc]
        return tSrS_ssa + bias.load().to(cutlass.Float32)
    return rel_bias_mod

def run(B, SQ, KV, HQ=16, HKV=2, E=1024, bias=True, check=False):
    q = torch.randn(B, SQ, HQ, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, KV, HKV, 128, device=dev, dtype=torch.bfloat16); v = torch.randn_like(k)
    rel = (torch.randn(B, SQ, HQ, E, device=dev) * 0.5).bfloat16()
    relp = torch.cat([rel, torch.zeros(B, SQ, HQ, 1, device=dev, dtype=torch.bfloat16)], -1).contiguous()
    kw = dict(softmax_scale=1 / 128, causal=True)
    if bias: kw.update(score_mod=make_mod(SQ, HQ, E), aux_tensors=[relp.view(-1)])
    f = lambda: flash_attn_func(q, k, v, **kw)
    o = f(); o = o[0] if isinstance(o, tuple) else o
    if check:
        b, h = 0, 3
        P = KV - SQ + torch.arange(SQ, device=dev); j = torch.arange(KV, device=dev); d = P[:, None] - j[None]
        s = q[b, :, h].float() @ k[b, :, h // (HQ // HKV)].float().T / 128
        if bias: s = s + torch.where((d >= 0) & (d < E), rel[b, :, h].float().gather(1, d.clamp(0, E - 1)), torch.zeros((), device=dev))
        ref = torch.softmax(s.masked_fill(d < 0, float('-inf')), -1) @ v[b, :, h // (HQ // HKV)].float()
        err = (o[b, :, h].float() - ref).abs().max().item()
        rows.append(dict(kind="fa4_check", B=B, SQ=SQ, KV=KV, bias=bias, max_abs=err)); print(rows[-1], flush=True)
    ms = do_bench(f, warmup=10, rep=50, return_mode="median")
    r = dict(kind="peer", name="fa4_scoremod" if bias else "fa4_nobias", B=B, SQ=SQ, KV=KV, HQ=HQ, us=ms * 1e3)
    rows.append(r); print(r, flush=True)

if __name__ == "__main__":
    cases = [(2, 1, 4096, True, True), (1, 256, 4096, True, True)]
    if len(sys.argv) > 1 and sys.argv[1] == "full":
        cases += [(32, 1, 65536, True, False), (1, 1, 65536, True, False), (1, 8192, 65536, True, False),
                  (32, 1, 65536, False, False), (1, 1, 65536, False, False), (1, 8192, 65536, False, False)]
    for B, SQ, KV, bias, check in cases:
        t = time.time()
        try: run(B, SQ, KV, bias=bias, check=check)
        except Exception as e:
            traceback.print_exc(); rows.append(dict(kind="fa4_fail", B=B, SQ=SQ, KV=KV, bias=bias, err=str(e)[-400:]))
        print("  took", round(time.time() - t, 1), "s", flush=True)
    json.dump(rows, open(os.path.join(OUT, "fa4_peer.json"), "w"), indent=1)
