"""Paired bf16-vs-fp8 evaluation of the shipped tiny Inkling and its planted-outlier twin (GPU, one command).

    PYTHONPATH=$PWD python tools/evaluate_tiny.py --out bench/results/evaluate.json [--n 200] [--depths 512 2048]
"""
import argparse, json, platform, sys, tempfile, time
from pathlib import Path
import torch
from inkling_fp8kv.evaluate import paired_eval
from inkling_fp8kv.model import plant_v_outliers, tiny_checkpoint

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/evaluate.json")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--depths", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    planted = Path(tempfile.mkdtemp()) / "planted"
    meta = plant_v_outliers(tiny_checkpoint(), planted)
    res = dict(models={}, planted=dict(factor=meta["factor"], channels=meta["channels"], layers=list(meta["planted"])))
    for name, ck in (("planted", planted), ("clean", tiny_checkpoint())):
        t = time.time()
        res["models"][name] = r = paired_eval(ck, depths=tuple(a.depths), n=a.n, device=a.device)
        r["checkpoint"] = name
        print(name, f"{time.time() - t:.0f}s", json.dumps({k: dict(acc=v["accuracy"], inside=v["inside_band"],
              p={d: x["p"] for d, x in v["paired"].items()}) for k, v in r["arm"].items()}), flush=True)
        write(res, a)

def write(res, a):
    dev = torch.device(a.device) if a.device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    res["env"] = dict(gpu=torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor() or "cpu", torch=torch.__version__,
                      triton=__import__("triton").__version__, python=platform.python_version(), date=time.strftime("%Y-%m-%d"), command="python " + " ".join(sys.argv))
    res.update({k: res["env"][k] for k in ("gpu", "torch", "triton", "date", "command")})   # the header every results file carries
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")

if __name__ == "__main__":
    main()
