"""FA4 (flash-attn-4, CuTe DSL) bf16 with a score-mod relative bias: what vLLM's Inkling runs on Hopper.

Usage on the GPU box (repo root, after carrying .fa4a/.fa4b made by ../shared/tools/fa4-carry.sh):
  source bench/fa4-unpack.sh && python bench/fa4_peer.py full      (writes $OUT/fa4_peer.json)
Checks the score-mod bias against an fp32 reference on small shapes first, then times the peer cases.
"""
import json, os, sys, time, traceback
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention import fa4_inputs, fa4, timed   # the same score-mod and timing as bench/attention.py

OUT = os.environ.get("OUT", "/tmp")
rows = []

def check(B, Sq, kv, Hq=16, Hkv=2, E=1024):
    "max |FA4 + score-mod − fp32 reference| for one (request, head)."
    ins = fa4_inputs(B, Sq, kv, Hq, Hkv, E)
    o = fa4(B, Sq, kv, Hq, Hkv, E, inputs=ins)()
    o = o[0] if isinstance(o, tuple) else o
    q, k, v, relp = ins
    b, h, dev = 0, 3, q.device
    P = kv - Sq + torch.arange(Sq, device=dev); j = torch.arange(kv, device=dev); d = P[:, None] - j[None]
    s = q[b, :, h].float() @ k[b, :, h // (Hq // Hkv)].float().T / 128
    s = s + torch.where((d >= 0) & (d < E), relp[b, :, h, :E].float().gather(1, d.clamp(0, E - 1)), torch.zeros((), device=dev))
    ref = torch.softmax(s.masked_fill(d < 0, float('-inf')), -1) @ v[b, :, h // (Hq // Hkv)].float()
    return (o[b, :, h].float() - ref).abs().max().item()

if __name__ == "__main__":
    cases = [(2, 1, 4096, True, True), (1, 256, 4096, True, True)]
    if len(sys.argv) > 1 and sys.argv[1] == "full":
        cases += [(B, Sq, 65536, bias, False) for bias in (True, False) for B, Sq in ((32, 1), (1, 1), (1, 8192))]
    for B, Sq, KV, bias, do_check in cases:
        t = time.time()
        try:
            if do_check: rows.append(dict(kind="fa4_check", B=B, SQ=Sq, KV=KV, bias=bias, max_abs=check(B, Sq, KV)))
            rows.append(dict(kind="peer", name="fa4_scoremod" if bias else "fa4_nobias", B=B, SQ=Sq, KV=KV, HQ=16, us=timed(fa4(B, Sq, KV, bias=bias))))
        except Exception as e:
            traceback.print_exc(); rows.append(dict(kind="fa4_fail", B=B, SQ=Sq, KV=KV, bias=bias, err=str(e)[-400:]))
        print(rows[-1], f"({time.time() - t:.1f} s)", flush=True)
    json.dump(rows, open(os.path.join(OUT, "fa4_peer.json"), "w"), indent=1)
