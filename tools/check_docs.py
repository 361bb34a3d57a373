"""Check that the built docs (_docs/) read well in a browser: every page in headless Chromium at a desktop and a laptop
width, measured in the rendered page, not guessed from the HTML.

Per page and width it reports what a reader would run into:
- `overflow`: an element wider than the content column (it runs under the table of contents or off the page);
- `clipped`: content cut off with no way to scroll to it (overflow hidden);
- `code scrolls`: a code block or output whose lines are longer than its box, so the end of a line is hidden until
  the reader scrolls that box sideways (the docs wrap code instead);
- `image shrunk`: an image drawn at less than 70 % of its natural width (a plot's text becomes unreadable); for a
  retina plot, natural is the width its notebook shows it at (half its pixels; `data-width`, set by build_docs);
- `image narrow`: an image drawn narrower than both its natural width and the column it could fill;
- `page scrolls`: the whole page is wider than the window.
A wide table that scrolls sideways inside its own box is allowed (the stylesheet draws its scrollbar and edge shadows)
and listed as a note with how much of it is out of view. Exit status 1 when any page has a problem.

Stdlib only: Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`), nothing listens on
a port and nothing remote is loaded. Debian: `apt-get install -y chromium`.

Usage: python tools/check_docs.py [--docs _docs] [--widths 1280,1024] [--shots DIR] [PAGE ...]
  PAGE: a page name or prefix (index, 13, 15_bench); default every page. --shots writes PNGs: the top of each page
  and one per image and per problem, at each width.
"""
import argparse, base64, json, os, select, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--remote-debugging-pipe"]
PROBLEMS = ("overflow", "clipped", "code scrolls", "image shrunk", "image narrow", "page scrolls")
MIN_IMAGE_SCALE = 0.7

# Runs in the page; returns {column, height, findings, images}. Only the outermost offending element of a subtree is
# reported; each reported element gets a data-check-id, so that a screenshot can scroll to it.
MEASURE = r"""
(async (minScale) => {
  await document.fonts.ready;
  await Promise.all([...document.images].map(i => i.complete ? 0 : new Promise(r => { i.onload = i.onerror = r; })));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const main = document.querySelector('main.content') || document.body;
  const col = main.getBoundingClientRect(), css = getComputedStyle(main);
  const left = col.left + parseFloat(css.paddingLeft), right = col.right - parseFloat(css.paddingRight);
  const width = Math.round(right - left);
  const st = e => getComputedStyle(e);
  const scrolls = e => ['auto', 'scroll'].includes(st(e).overflowX);
  const heading = e => {            // the nearest section heading above e, to say where on the page it is
    const before = h => h.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING;
    const hs = [...main.querySelectorAll('h1, h2, h3, h4')].filter(before);
    return hs.length ? hs[hs.length - 1].textContent.trim().replace(/\s+/g, ' ').slice(0, 60) : '(top)';
  };
  const what = e => {
    const tag = e.tagName.toLowerCase(), cls = [...e.classList].slice(0, 2).join('.');
    const text = (e.tagName === 'IMG' ? (e.alt || '') : e.textContent).trim().replace(/\s+/g, ' ');
    return `${tag}${cls ? '.' + cls : ''} "${text.slice(0, 70)}${text.length > 70 ? '…' : ''}" under "${heading(e)}"`;
  };
  const out = [], seen = new Set();
  let ids = 0;
  const id = e => { if (!e.dataset.checkId) e.dataset.checkId = ++ids; return e.dataset.checkId; };
  const above = function* (e) { for (let p = e.parentElement; p && p !== main; p = p.parentElement) yield p; };
  const inside = e => [...above(e)].some(p => seen.has(p));
  const add = (kind, e, detail) => {
    if (kind !== 'note') { if (inside(e)) return; seen.add(e); }
    out.push({kind, what: what(e), detail, id: id(e)});
  };
  const inScroller = e => [...above(e)].some(scrolls);
  // margin notes and wide columns may leave the body by design; MathJax's copy for screen readers is hidden on purpose
  const exempt = ['[class*="column-margin"]', '[class*="column-page"]', '[class*="column-screen"]', '.sidebar',
                  'mjx-assistive-mml'].join(', ');
  for (const e of main.querySelectorAll('*')) {
    if (e.closest(exempt)) continue;
    const r = e.getBoundingClientRect();
    if (!r.width || st(e).position === 'fixed') continue;
    if (e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0) {
      const hidden = e.scrollWidth - e.clientWidth, o = st(e).overflowX;
      const code = e.matches('pre, pre *, .sourceCode, .cell-output') || e.querySelector(':scope > pre, :scope > code');
      if (o === 'hidden' || o === 'clip') add('clipped', e, `${hidden} px cut off`);
      else if (scrolls(e) && code) add('code scrolls', e, `${hidden} px of its longest line out of view`);
      else if (scrolls(e)) add('note', e, `scrolls sideways in its own box: ${hidden} of ${e.scrollWidth} px hidden`);
    }
    const past = Math.round(Math.max(r.right - right, left - r.left));
    if (past > 1 && !inScroller(e)) add('overflow', e, `${past} px past the ${width} px column`);
  }
  const images = [];
  for (const img of main.querySelectorAll('img')) {
    // a retina plot has twice the pixels of the width its notebook shows it at (build_docs puts that in data-width)
    const w = img.getBoundingClientRect().width, nat = +img.dataset.width || img.naturalWidth;
    if (!nat || !w) continue;
    images.push({what: what(img), natural: nat, pixels: img.naturalWidth, drawn: Math.round(w), id: id(img)});
    const drawn = `drawn ${Math.round(w)} px`;
    if (w < minScale * nat) add('image shrunk', img, `${drawn} of its ${nat} px (${Math.round(100 * w / nat)} %)`);
    else if (w < Math.min(nat, width) - 2) add('image narrow', img, `${drawn}; natural ${nat} px, column ${width} px`);
  }
  const doc = document.documentElement;
  if (doc.scrollWidth > innerWidth + 1)
    out.push({kind: 'page scrolls', what: 'the page', detail: `${doc.scrollWidth} px wide, window ${innerWidth} px`});
  return {column: width, height: doc.scrollHeight, findings: out, images};
})(MIN_SCALE)
""".replace("MIN_SCALE", str(MIN_IMAGE_SCALE))


class Chromium:
    "A headless Chromium driven over the DevTools protocol on a pipe (fd 3 in, fd 4 out: NUL-terminated JSON)."

    def __init__(self, exe: str):
        self.profile = tempfile.mkdtemp(prefix="check_docs-")
        to_r, self._to = os.pipe()          # our writes -> its fd 3
        self._from, from_w = os.pipe()      # its fd 4 -> our reads
        def child():   # fresh copies first: a pipe end may already be fd 3 or 4, and os.pipe's fds close on exec
            r, w = os.dup(to_r), os.dup(from_w)
            os.dup2(r, 3); os.dup2(w, 4)
        self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"], preexec_fn=child,
                                     close_fds=False, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r); os.close(from_w)
        self._buf, self._id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for m in ("Page.enable", "Runtime.enable"): self.call(m, session=True)

    def _read(self, timeout: float) -> dict:
        end = time.time() + timeout
        while b"\0" not in self._buf:
            if not select.select([self._from], [], [], max(end - time.time(), 0))[0]:
                raise TimeoutError(f"Chromium did not answer within {timeout:.0f} s")
            chunk = os.read(self._from, 1 << 20)
            if not chunk: raise RuntimeError(f"Chromium exited (status {self.proc.poll()})")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session: msg["sessionId"] = self.session
        os.write(self._to, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read(timeout)
            if m.get("id") == self._id:
                if "error" in m: raise RuntimeError(f"{method}: {m['error'].get('message')}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60):
        end = time.time() + timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method: return self.events.pop(i)
            self.events.append(self._read(max(end - time.time(), 0.01)))

    def evaluate(self, js: str):
        r = self.call("Runtime.evaluate", session=True, expression=js, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"in the page: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r["result"].get("value")

    def open(self, url: str, width: int, height: int = 900):
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")

    def shot(self, path: Path, check_id=None):
        "A PNG of the window, scrolled to the element tagged `check_id` (just below the sticky header) or to the top."
        where = f'document.querySelector(\'[data-check-id="{check_id}"]\')' if check_id else 'null'
        self.evaluate(f"""(async () => {{ const e = {where};
            const head = (document.querySelector('#quarto-header') || {{offsetHeight: 0}}).offsetHeight;
            window.scrollTo({{top: e ? e.getBoundingClientRect().top + scrollY - head - 30 : 0, behavior: 'instant'}});
            await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))); }})()""")
        r = self.call("Page.captureScreenshot", session=True, format="png")
        path.write_bytes(base64.b64decode(r["data"]))

    def close(self):
        try: self.call("Browser.close", timeout=5)
        except Exception: pass
        try: self.proc.wait(5)
        except subprocess.TimeoutExpired:   # its own process group (start_new_session): the browser and its helpers
            os.killpg(self.proc.pid, 9); self.proc.wait()
        os.close(self._to); os.close(self._from)
        shutil.rmtree(self.profile, ignore_errors=True)


def pages(docs: Path, names) -> list:
    every = sorted(docs.glob("*.html"))
    if not names: return every
    return [p for p in every if any(p.stem == n or p.stem.startswith(n) or p.name == n for n in names)]


def check(docs: Path, widths, names=(), shots: Path | None = None, exe: str = "chromium") -> dict:
    "{page: {width: measurement}} for every page (or those named) at every width; screenshots into `shots`."
    if shots: shots.mkdir(parents=True, exist_ok=True)
    b, res = Chromium(exe), {}
    try:
        for page in pages(docs, names):
            for w in widths:
                b.open(page.resolve().as_uri(), w)
                m = res.setdefault(page.name, {})[w] = b.evaluate(MEASURE)
                if not shots: continue
                b.shot(shots / f"{page.stem}-{w}.png")
                for k, f in enumerate(m["findings"]):
                    if f.get("id"): b.shot(shots / f"{page.stem}-{w}-{f['kind'].replace(' ', '_')}{k}.png", f["id"])
                for k, f in enumerate(m["images"]): b.shot(shots / f"{page.stem}-{w}-img{k}.png", f["id"])
    finally: b.close()
    return res


def report(res: dict) -> int:
    "Print one block per page; return the number of problems."
    total = 0
    for page, by_w in res.items():
        lines = []
        for w, m in by_w.items():
            probs = [f for f in m["findings"] if f["kind"] in PROBLEMS]
            notes = [f for f in m["findings"] if f["kind"] == "note"]
            total += len(probs)
            imgs = ", ".join(f"{i['drawn']}/{i['natural']}" + (f" ({i['pixels']} px PNG)" if i["pixels"] != i["natural"]
                                                               else "") for i in m["images"])
            lines.append(f"  {w} px (column {m['column']} px): {len(probs)} problem(s)"
                         + (f"; images drawn/natural px: {imgs}" if imgs else ""))
            lines += [f"    {f['kind']}: {f['what']}: {f['detail']}" for f in probs]
            lines += [f"    note: {f['what']}: {f['detail']}" for f in notes]
        ok = all(not [f for f in m["findings"] if f["kind"] in PROBLEMS] for m in by_w.values())
        print(f"{'ok  ' if ok else 'FAIL'} {page}"); print("\n".join(lines))
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="page names or prefixes (default: every page)")
    ap.add_argument("--docs", type=Path, default=ROOT / "_docs")
    ap.add_argument("--widths", default="1280,1024", help="window widths in CSS px, comma-separated")
    ap.add_argument("--shots", type=Path, help="write screenshots (PNG) into this folder")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM") or shutil.which("chromium")
                    or shutil.which("chromium-browser") or shutil.which("google-chrome"))
    ap.add_argument("--json", type=Path, help="also write the measurements as JSON")
    a = ap.parse_args(argv)
    if not a.chromium: sys.exit("check_docs: no Chromium (Debian: apt-get install -y chromium; or --chromium PATH)")
    if not (a.docs / "index.html").exists():
        sys.exit(f"check_docs: no {a.docs}/index.html; build the docs first (python tools/build_docs.py)")
    widths = [int(w) for w in a.widths.split(",")]
    res = check(a.docs, widths, a.pages, a.shots, a.chromium)
    if not res: sys.exit(f"check_docs: no page matches {a.pages}")
    if a.json: a.json.write_text(json.dumps(res, indent=1))
    n = report(res)
    bad = sum(any(f["kind"] in PROBLEMS for m in by_w.values() for f in m["findings"]) for by_w in res.values())
    print(f"check_docs: {len(res)} pages at {', '.join(map(str, widths))} px: "
          + (f"{n} problem(s) on {bad} page(s)" if n else "no problems"))
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
