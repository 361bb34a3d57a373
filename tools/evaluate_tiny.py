"""The evidence instrument's full run on the embedded tiny Inkling (GPU; one command per part, each <= 10 minutes on an H200).

    PYTHONPATH=$PWD python tools/evaluate_tiny.py --part clean --out $OUT/evaluate_clean.json
    PYTHONPATH=$PWD python tools/evaluate_tiny.py --part doses --out $OUT/evaluate_doses.json
    python tools/evaluate_tiny.py --merge clean.json doses.json --out bench/results/evaluate.json

`clean`: `evaluate.text_eval` of the shipped checkpoint on the held-out books, all five arms, with pass keys at depths
256..2048 and beyond the training length. `doses`: `evaluate.dose_response` (the planted V-outlier doses, every arm, pass keys
at two depths). Every file carries the header keys (gpu, torch, triton, date, command).
"""
import argparse, json, platform, sys, time
from pathlib import Path
import torch
from inkling_fp8kv.evaluate import dose_findings, dose_response, text_eval
from inkling_fp8kv.model import heldout_documents, tiny_checkpoint

CLEAN_DEPTHS = (256, 512, 1024, 2048, 6144)          # 6144: beyond the 4096-byte training windows

def header(device) -> dict:
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = dict(gpu=torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor() or "cpu", torch=torch.__version__,
               triton=__import__("triton").__version__, python=platform.python_version(), date=time.strftime("%Y-%m-%d"),
               command="python " + " ".join(sys.argv))
    return dict(env, env=env)

def jsonable(x):
    if isinstance(x, dict): return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [jsonable(v) for v in x]
    if hasattr(x, "item"): return x.item()
    return x

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("clean", "doses"), help="which part to run")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="merge part files (clean, doses) into --out instead of running")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the shipped tiny model)")
    ap.add_argument("--passkey-n", type=int, default=100, help="pass-key prompts per depth (clean); doses use half")
    ap.add_argument("--max-bytes", type=int, default=12_000, help="score the first N bytes of each held-out document")
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    out = Path(a.out)
    if a.merge:                                     # one results file from the parts; each part's header is kept
        parts = [json.loads(Path(f).read_text()) for f in a.merge]
        res = {k: v for p in parts for k, v in p.items() if k not in ("env", "gpu", "torch", "triton", "python", "date", "command", "seconds")}
        res["parts"] = [dict(p["env"], seconds=p.get("seconds")) for p in parts]
        res.update({k: parts[0]["env"][k] for k in ("gpu", "torch", "triton", "python", "date")})
        res["command"] = " && ".join(p["env"]["command"] for p in parts)
        out.write_text(json.dumps(res, indent=1) + "\n"); print("merged", out); return
    if not a.part: ap.error("give --part or --merge")
    ck = Path(a.checkpoint) if a.checkpoint else tiny_checkpoint()
    docs = heldout_documents()
    texts = [t[:a.max_bytes] for _, t in docs]
    t0 = time.time()
    if a.part == "clean":
        r = text_eval(ck, texts, device=a.device, passkey_depths=CLEAN_DEPTHS, passkey_n=a.passkey_n, progress=True)
        res = dict(clean=r, passkey=r.get("passkey"), documents=[n for n, _ in docs])
    else:
        dr = dose_response(ck, texts, device=a.device, passkey_n=a.passkey_n // 2, progress=True)
        clean = dr.pop("clean")
        res = dict(dose_response=dr["rows"], dose_meta={k: v for k, v in dr.items() if k != "rows"},
                   findings=dose_findings(dr | dict(rows=dr["rows"])), clean_at_doses=dict(band=clean["band"]))
    res.update(header(a.device)); res["seconds"] = round(time.time() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(jsonable(res), indent=1) + "\n")
    print(f"wrote {out} in {res['seconds']} s")

if __name__ == "__main__":
    main()
