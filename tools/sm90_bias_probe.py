"""The former lab variant bias_tma's (tools/sm90_lab.py at commit c078bbd) two mechanisms alone, in one warpgroup
without warp specialization, on an SM90 GPU: the per-token TMA boxes of the bias window ([G heads, 64 columns] each,
two halves, into a 128-byte-swizzled [64, 64] view), and the bf16 wgmma against the anti-identity J that reverses the
window into the scores' columns. It checks, bit for bit, the window as loaded (U) and as reversed (R = U flipped), at
a window inside the band and at windows that run past either end of it (those columns read as zeros).

  python tools/sm90_bias_probe.py MODE [D ...]   # one JSON line per window offset D (default 200, -100, 950)
  MODE 0: the bias wgmma alone; 1: an fp8 wgmma (Q.K^T's shape, K = I) in flight while the bias mbarrier is waited,
  then the bias wgmma (bias_tma's order); 2: the bias mbarrier waited first (bias_tma_int_w's order); 3: the TMA boxes
  alone (no wgmma: R stays zero); 4: no TMA (the window gathered by loads and stored into the tile), then the wgmma;
  5: one [64, 64] TMA box a half (64 consecutive rows: not the bias window, a plain tile), then the wgmma.

Its purpose: bias_tma's folded kernel faulted with "an illegal instruction" on an H100
(bench/notes/sm90_bias_tma_fold_h100.json.gz); a fault here, or wrong bytes, names the mechanism. What it found
(bench/notes/sm90_bias_probe_h100.json.gz): the wgmma is exact, and a TMA box faults unless its innermost start
coordinate is a 16-byte multiple, which 7 tokens in 8 of a bias window are not."""
import sys, json, torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (tma, mbarrier, fence_async_shared, warpgroup_mma,
                                                               warpgroup_mma_wait)
_bar = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier   # Triton 3.6 / 3.7 spelling

@gluon.jit
def _probe(rel_desc, REL, U_OUT, R_OUT, S_OUT, D, row0, hq, n_rows, E, G: gl.constexpr, MODE: gl.constexpr):
    b_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    e_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    u_smem = gl.allocate_shared_memory(gl.bfloat16, [2, 64, 64], b_smem)
    jt = gl.allocate_shared_memory(gl.bfloat16, [2, 128, 64], b_smem)
    qs = gl.allocate_shared_memory(gl.float8e4nv, [64, 128], e_smem)
    ks = gl.allocate_shared_memory(gl.float8e4nv, [128, 128], e_smem)
    bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bar.index(0), count=1)
    jl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    jc = gl.arange(0, 128, layout=gl.SliceLayout(1, jl))
    je = gl.arange(0, 64, layout=gl.SliceLayout(0, jl))
    for hh in gl.static_range(2):
        one = (jc[:, None] + je[None, :] + 64 * hh) == 127
        jt.index(hh).store(gl.where(one, 1.0, 0.0).to(gl.bfloat16))
    kl: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    kr = gl.arange(0, 128, layout=gl.SliceLayout(1, kl))
    kc = gl.arange(0, 128, layout=gl.SliceLayout(0, kl))
    ks.store(gl.where(kr[:, None] == kc[None, :], 1.0, 0.0).to(gl.float8e4nv))           # K = I: S = Q
    qr = gl.arange(0, 64, layout=gl.SliceLayout(1, kl))
    qs.store(((qr[:, None] + kc[None, :]) % 7).to(gl.float32).to(gl.float8e4nv))
    fence_async_shared()
    _bar()
    ol: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, ol))
    c = gl.arange(0, 128, layout=gl.SliceLayout(0, ol))
    c64 = gl.arange(0, 64, layout=gl.SliceLayout(0, ol))
    if MODE == 4:    # no TMA: the window gathered by loads and stored into the swizzled tile
        for h in gl.static_range(2):
            col = D + r[:, None] // G + 64 * h + c64[None, :]
            row = row0 + (r[:, None] // G) * hq + r[:, None] % G
            w = gl.load(REL + row * E + col, mask=(col >= 0) & (col < E) & (row < n_rows), other=0.0)
            u_smem.index(h).store(w)
        fence_async_shared()
        _bar()
        mbarrier.arrive(bar.index(0), count=1)
    elif MODE == 5:  # one [64, 64] box a half: 64 consecutive rows, no per-token view
        mbarrier.expect(bar.index(0), 2 * 64 * 64 * 2)
        for h in gl.static_range(2):
            tma.async_copy_global_to_shared(rel_desc, [row0, D + 64 * h], bar.index(0), u_smem.index(h))
    else:
        u_rows = u_smem._reinterpret(gl.bfloat16, [2 * 64 // G, G, 64], b_smem)
        mbarrier.expect(bar.index(0), 2 * 64 * 64 * 2)
        for t in range(64 // G):
            for h in gl.static_range(2):
                tma.async_copy_global_to_shared(rel_desc, [row0 + t * hq, D + t + 64 * h], bar.index(0),
                                                u_rows.index(h * (64 // G) + t))
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32])
    b_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16])
    s = gl.zeros([64, 128], gl.float32, s_l)
    if MODE == 2:
        mbarrier.wait(bar.index(0), 0)
    if MODE == 1 or MODE == 2:
        s = warpgroup_mma(qs, ks.permute((1, 0)), s, use_acc=False, is_async=True)
    if MODE != 2:
        mbarrier.wait(bar.index(0), 0)
    rb = gl.zeros([64, 128], gl.float32, b_l)
    if MODE != 3:    # MODE 3: the TMA boxes alone
        rb = warpgroup_mma(u_smem.index(0), jt.index(0).permute((1, 0)), rb, use_acc=False, is_async=True)
        rb = warpgroup_mma(u_smem.index(1), jt.index(1).permute((1, 0)), rb, is_async=True)
    s, rb = warpgroup_mma_wait(0, deps=(s, rb))
    gl.store(R_OUT + r[:, None] * 128 + c[None, :], gl.convert_layout(rb, ol))
    gl.store(S_OUT + r[:, None] * 128 + c[None, :], gl.convert_layout(s, ol))
    for h in gl.static_range(2):
        u = u_smem.index(h).load(ol)
        gl.store(U_OUT + r[:, None] * 128 + h * 64 + c64[None, :], u.to(gl.float32))

def layout16():
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)

def run(mode, D, T=40, Hq=16, E=1024, G=8, tok0=3, hkv=1):
    torch.manual_seed(mode * 100 + D % 97)
    rel = torch.randn(T, Hq, E, device="cuda").to(torch.bfloat16)
    rel2 = rel.view(T * Hq, E)
    desc = TensorDescriptor(rel2, list(rel2.shape), list(rel2.stride()), [64 if mode == 5 else G, 64], layout16())
    U = torch.zeros(64, 128, device="cuda"); R = torch.zeros_like(U); S = torch.zeros_like(U)
    row0 = tok0 * Hq + hkv * G
    _probe[(1,)](desc, rel2, U, R, S, D, row0, Hq, T * Hq, E, G=G, MODE=mode, num_warps=4)
    torch.cuda.synchronize()
    # expected: U[m, e] = rel2[row0 + (m // G) * Hq + m % G, D + m // G + e] (zero outside [0, E));
    # R[m, c] = U[m, 127 - c]
    m = torch.arange(64, device="cuda")[:, None]; e = torch.arange(128, device="cuda")[None, :]
    rows, cols = row0 + (m // G) * Hq + m % G, D + m // G + e
    if mode == 5:
        rows, cols = row0 + m + 0 * e, D + e + 0 * m
    ok = (cols >= 0) & (cols < E) & (rows < T * Hq)
    exp = torch.where(ok, rel2.float()[rows.clamp(0, T * Hq - 1), cols.clamp(0, E - 1)], torch.zeros((), device="cuda"))
    qref = ((torch.arange(64)[:, None] + torch.arange(128)[None, :]) % 7).float().to(torch.float8_e4m3fn).float().cuda()
    return dict(mode=mode, D=D, u_equal=bool(torch.equal(U, exp)), r_equal=bool(torch.equal(R, exp.flip(1))),
                s_equal=(bool(torch.equal(S, qref)) if mode in (1, 2) else None),
                u_bad=int((U != exp).sum()), r_bad=int((R != exp.flip(1)).sum()))

if __name__ == "__main__":
    mode = int(sys.argv[1])
    for D in [int(x) for x in sys.argv[2:]] or (200, -100, 950):
        print(json.dumps(run(mode, D)), flush=True)
