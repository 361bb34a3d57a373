"""Compile the SM90 Gluon prefill and decode kernels for sm_90a on any machine (no GPU needed: Triton's compiler and its bundled
ptxas), and print one JSON line per build: its wgmma shapes and types, TMA copies, shared memory, registers (and those
`setmaxnreg` gives each warp-specialized partition), spills, its hot loops' per-tile instruction counts, and the
sha256 of the cubin. Notebook 07c's CPU test runs it; run it without TRITON_INTERPRET.

  python tools/sm90_compile.py '[{"page": 64, "window": null}, ...]'     # builds (optional "path": a variant module)
  python tools/sm90_compile.py --record bench/results/sm90_cubins.json   # the shipped builds' cubin hashes under
                                                                         # this Triton, added to the record
"""
import datetime, hashlib, importlib.util, json, os, re, subprocess, sys, tempfile, time
from pathlib import Path
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"     # a script, not the library: cubins without line tables, so that their
                                                 # hashes change with the code and not with where it sits in the file
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from inkling_fp8kv.checkpoint import atomic_write
from inkling_fp8kv.numerics import E4M3_DTYPE
from inkling_fp8kv.reference import alloc_kv_cache

# the builds the record covers: global and window layers, pages of 64 and 16 (G = 8, Hkv = 2, E = 1024)
SHIPPED = [dict(page=p, window=w) for p in (64, 16) for w in (None, 512)]
TYPES = {E4M3_DTYPE: "fp8e4nv", torch.bfloat16: "bf16", torch.int32: "i32", torch.float32: "fp32"}

def arg_type(x):
    if isinstance(x, torch.Tensor): return "*" + TYPES[x.dtype]
    if isinstance(x, TensorDescriptor): return f"tensordesc<{TYPES[x.base.dtype]}{list(x.block_shape)},{x.layout!r}>"
    if isinstance(x, float): return "fp32"
    return "i32" if -2 ** 31 <= x < 2 ** 31 else "i64"

def load(path):
    if path is None:
        import inkling_fp8kv.attention_sm90 as m
        return m
    spec = importlib.util.spec_from_file_location("inkling_fp8kv._sm90_variant", path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

def case_key(page, window, kernel="prefill") -> str:
    return ("decode " if kernel == "decode" else "") + f"page {page}, " + (f"window {window}" if window else "global")

def build(page, window, path=None, G=8, Hkv=2, E=1024, T=8, sass_out=False, kernel="prefill"):
    "One build's measures (with `sass_out`, its SASS text too, under 'sass'); `kernel=\"decode\"`: `build_decode`'s."
    if kernel == "decode": return build_decode(page, window, G=G, Hkv=Hkv, E=E)
    m = load(path)
    _, kc, vc = alloc_kv_cache(4, page, Hkv, dtype=E4M3_DTYPE)
    q = torch.zeros(T, G * Hkv, 128, dtype=torch.uint8).view(E4M3_DTYPE)
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)
    grid, args, meta = m._launch_args(q, kc, vc, torch.zeros(T, G * Hkv, E, dtype=torch.bfloat16),
                                      block_table=i32(0, 1, 2, 3)[None], seq_lens=i32(T), cu_seqlens_q=i32(0, T),
                                      max_seqlen_q=T, softmax_scale=1 / 128, window=window, v_scale=1.0, threshold=0.75,
                                      out=torch.zeros(T, G * Hkv, 128, dtype=torch.bfloat16))
    fn, names = m._prefill_sm90_kernel, m._prefill_sm90_kernel.arg_names
    values = dict(zip(names, args))
    sig = {n: "constexpr" if n in meta else arg_type(values[n]) for n in names}
    t0 = time.time()
    k = triton.compile(GluonASTSource(fn, sig, {(names.index(n),): v for n, v in meta.items()}),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=meta["num_warps"], maxnreg=m._MAXNREG))
    secs = time.time() - t0
    ptx = k.asm["ptx"]
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx)
    res, sass = cuobjdump(k, "-res-usage"), cuobjdump(k, "-sass")
    use = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", res))
    # P.V's wgmmas, the ones whose A operand (P) is registers: "{d...}, {a0, a1, a2, a3}, desc_b" has two brace groups,
    # Q.K^T's "{d...}, desc_a, desc_b" one; and how many start from a zero accumulator (scale-d, third operand from the
    # end, 0)
    pv = [l.rstrip().rstrip(";").split(",")[-3].strip() for l in ptx.splitlines()
          if "wgmma.mma_async" in l and l.count("{") >= 2]
    return dict(variant=Path(path).stem if path else "shipped", case=case_key(page, window), page=page, window=window,
                seconds=round(secs, 2),
                wgmma=sorted({s for s, *_ in mma}), wgmma_types=sorted({".".join(t) for _, *t in mma}),
                tma=ptx.count("cp.async.bulk.tensor"), shared=k.metadata.shared, qgmma=sass.count("QGMMA"),
                setmaxreg=sass.count("SETMAXREG"), pv_mma=len(pv), pv_fresh=sum(x == "0" for x in pv),
                spill_stores=len(re.findall(r"\bSTL\b", sass)), spill_loads=len(re.findall(r"\bLDL\b", sass)),
                regs=int(use["REG"]), stack=int(use["STACK"]), local=int(use.get("LOCAL", 0)),
                partition_regs=sorted({int(x, 16) for x in
                                       re.findall(r"SETMAXREG\.\w+\.CTAPOOL (?:UP0, )?0x([0-9a-f]+)", sass)}),
                loops=hot_loops(sass), cubin_sha256=hashlib.sha256(k.asm["cubin"]).hexdigest(),
                **(dict(sass=sass) if sass_out else {}))

def cuobjdump(k, flag: str) -> str:
    "Triton's bundled `cuobjdump FLAG` on compiled kernel `k`'s cubin (`-sass`, `-res-usage`)."
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"]); f.flush()
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True, check=True).stdout

def backward_loops(sass: str) -> list:
    "Each loop of a SASS listing: the instructions (opcode and operands) a backward branch spans, slow paths left out."
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", line)
        if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
    loops = []
    for a, text in ins:
        m = re.search(r"BRA (?:`\(\.L_x_\d+\) )?0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= a: continue
        body = [t for b, t in ins if int(m.group(1), 16) <= b <= a]
        if not any(t.startswith("EXIT") for t in body): loops.append(body)   # an EXIT: a slow path jumping back
    return loops

_OPS = dict(instrs=None, LDL=r"^LDL", STL=r"^STL", MUFU=r"^MUFU", QGMMA=r"^QGMMA", HGMMA=r"^HGMMA", SHFL=r"^SHFL",
            LDS=r"^LDS\b", STS=r"^STS\b", PRMT=r"^PRMT", LDG=r"^LDG")

def hot_loops(sass: str) -> dict:
    """Opcode counts of the kernel's hot loops, from its SASS: the consumers' far-tile loop (8 QGMMA: Q.K^T's 4
    k-steps and P.V's 4; 12 where P.V runs in two halves of D, as the one-level control does; no bias), their
    near-tile loop (as many QGMMA, and the bias: its gather's loads, or the bf16 HGMMA that reverses its TMA window;
    the smallest such loop, an unmasked one; "near_largest": the largest, a masked one, where there are several)
    and a producer loop that stores to shared memory (none in the shipped kernel, whose producer only issues TMA
    copies); each the smallest loop (a backward branch's span) that matches."""
    found = {}
    for body in backward_loops(sass):
        n = {k: len(body) if v is None else sum(bool(re.search(v, t)) for t in body) for k, v in _OPS.items()}
        utma = sum(t.startswith("UTMALDG") for t in body)
        tile = n["QGMMA"] in (8, 12)
        kind = ("far" if tile and not (n["LDG"] or n["HGMMA"]) else "near" if tile else
                "producer" if utma and n["STS"] and not n["QGMMA"] else None)
        if kind and (kind not in found or n["instrs"] < found[kind]["instrs"]):
            found[kind] = {k: v for k, v in n.items() if v}
        if kind == "near" and ("near_largest" not in found or n["instrs"] > found["near_largest"]["instrs"]):
            found["near_largest"] = {k: v for k, v in n.items() if v}
    if "near_largest" in found and found["near_largest"]["instrs"] < 1.1 * found["near"]["instrs"]:
        found.pop("near_largest")             # one kind of bias loop (a copy per consumer warpgroup): "near" is it
    return found

DECODE_SHIPPED = [dict(kernel="decode", page=p, window=w) for p in (64, 16) for w in (None, 512)]

def build_decode(page, window, G=8, Hkv=2, E=1024, B=2):
    "One build of the SM90 decode kernel (`_decode_sm90_kernel`, launched as `launch_decode_sm90` launches it)."
    import inkling_fp8kv.attention_sm90 as m
    _, kc, vc = alloc_kv_cache(4, page, Hkv, dtype=E4M3_DTYPE)
    k_desc, _, rows = m._decode_tma(kc, vc)          # K and V as 2-D TMA descriptors; BOX, keys a box
    meta = dict(G=G, N=max(8, triton.next_power_of_2(G)), BLOCK_N=m.DECODE_BLOCK_N, PAGE=page, BOX=rows["BOX"],
                HAS_WINDOW=window is not None, P_OFFSET=float(m.MAX_OFFSET))
    fn, names = m._decode_sm90_kernel, m._decode_sm90_kernel.arg_names
    ptrs = dict(Q="*fp8e4nv", k_desc=arg_type(k_desc), v_desc=arg_type(k_desc), REL="*bf16", OPART="*fp32",
                LSE="*fp32", BT="*i32", SEQ="*i32", CU="*i32")
    sig = {n: "constexpr" if n in meta else ptrs.get(n, "fp32" if n in ("sm_scale_log2", "threshold") else "i32")
           for n in names}
    # what Triton's launcher infers for these arguments: 16-byte aligned pointers, the strides of a cache like kc's
    # (multiples of 16), E; num_blocks is not specialized
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if sig[n].startswith("*") or n.startswith(("stride_k", "stride_v", "stride_q", "stride_r", "stride_o"))
             or n == "E"}
    t0 = time.time()
    k = triton.compile(GluonASTSource(fn, sig, {(names.index(n),): v for n, v in meta.items()}, attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=m._DECODE_WARPS))
    secs = time.time() - t0
    ptx, sass = k.asm["ptx"], cuobjdump(k, "-sass")
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx)
    use = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", cuobjdump(k, "-res-usage")))
    loops = sorted((l for l in backward_loops(sass) if any(t.startswith(("QGMMA", "HGMMA")) for t in l)), key=len)
    far = loops[0] if loops else []
    return dict(variant="decode", case=case_key(page, window, "decode"), page=page, window=window,
                seconds=round(secs, 2), wgmma=sorted({f"{s}.{'.'.join(t)}" for s, *t in mma}),
                shared=k.metadata.shared, qgmma=sass.count("QGMMA"), hgmma=sass.count("HGMMA"),
                f2fp=sass.count("F2FP"), spill_stores=len(re.findall(r"\bSTL\b", sass)),
                spill_loads=len(re.findall(r"\bLDL\b", sass)), regs=int(use["REG"]), stack=int(use["STACK"]),
                far_loop=dict(instrs=len(far), bytes=2 * m.DECODE_BLOCK_N * 128,
                              **{o: sum(t.startswith(o) for t in far)
                                 for o in ("QGMMA", "HGMMA", "F2FP", "LDG", "STS", "PRMT", "IMAD")}),
                cubin_sha256=hashlib.sha256(k.asm["cubin"]).hexdigest())

def record(path: Path):
    "Add this Triton's cubin hashes of the shipped builds to the record at `path` (written atomically)."
    rec = json.loads(path.read_text()) if path.exists() else dict(
        what="sha256 of the SM90 kernel's sm_90a cubins, per Triton version, for the kernel verified on the H200 "
             "(bench/results/gpu_tests.json); notebook 07c's CPU test compares the shipped kernel against them",
        builds={})
    rec["builds"][triton.__version__] = {case_key(**c): build(**c)["cubin_sha256"] for c in SHIPPED + DECODE_SHIPPED}
    # the results header every file in bench/results carries (no GPU: the code is compiled for sm_90a on this machine)
    rec.update(gpu="none: compiled for sm_90a (GPUTarget cuda 90) by Triton and its ptxas, no GPU needed",
               torch=torch.__version__, triton=", ".join(sorted(rec["builds"])), python=sys.version.split()[0],
               date=datetime.date.today().isoformat(), command="python tools/sm90_compile.py --record " + str(path))
    rec.setdefault("recorded", {})[triton.__version__] = dict(date=datetime.date.today().isoformat(),
                                                              command="python tools/sm90_compile.py --record " + str(path))
    atomic_write(path, (json.dumps(rec, indent=1) + "\n").encode(), unique=True)
    print(json.dumps(rec["builds"][triton.__version__], indent=1))

if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") == "1": sys.exit("unset TRITON_INTERPRET: Triton reads it at import")
    if sys.argv[1:2] == ["--record"]: record(Path(sys.argv[2]))
    else:
        for case in json.loads(sys.argv[1]): print(json.dumps(build(**case)), flush=True)
