"""Build the docs site into _docs/ without quarto (nbdev 2.4.14 + smalldocs), offline, and check it.

Notebooks are not executed here: the rendered pages show their saved outputs. Steps:
README.md from nbs/index.ipynb; nbdev's processing into _proc/; API links rewritten to the pages this build
writes; smalldocs renders _docs/; maths is typeset by a MathJax copied from the pinned `django-static-mathjax`
wheel (no network at view time); then the site is checked: every notebook has a page, and every link or
resource in every page resolves to a file (and anchor) that exists in _docs/ (CI fails otherwise).

What nbdev's processing runs: `show_doc` needs each page's exported names, so the export cells, the `show_doc` cells
and the imports run once per notebook. A cell that mixes imports with other code (a test, usually) has only its own
top-level imports run, so its saved output stays and no test runs here; a cell that carries a test flag of
settings.ini (`#| cuda`, `#| vllm`) is skipped, as `nbdev_test` skips it without `--flags`, so the build needs
neither a GPU nor vLLM: the package and its `[test]` extra are enough.

Quiet unless something is wrong: what nbdev and smalldocs print goes to _proc/build_docs.log, smalldocs' known
notices are dropped, and a successful build prints one summary line. A notebook cell that fails, a missing page, a
broken link or a remote resource prints its reason and exits 1. `--verbose` shows everything as it comes.

Usage: python tools/build_docs.py [--verbose]   (from anywhere; without nbdev on this interpreter it re-runs itself
with $VENV/bin/python, default .venv-test, the environment `bash tools/test.sh` creates; an absolute VENV works too)
Docs-only setup: python3 -m venv .venv-test && .venv-test/bin/pip install -c constraints.txt -e '.[test]'
"""
import ast, contextlib, html, json, os, re, shutil, sys, tempfile, time, traceback
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / os.environ.get("VENV", ".venv-test")
MATHJAX = "site_libs/mathjax/tex-svg-full.js"   # the combined build: every TeX extension, SVG glyphs, no font files
SETUP = "python3 -m venv .venv-test && .venv-test/bin/pip install -c constraints.txt -e '.[test]'"
# smalldocs' notices that say nothing about this site: nbdev writes quarto's `output-file` into every page's front
# matter (this build names pages after their notebooks and points the API links there), and nbdev's quarto settings ask
# for a commonmark copy and `keep-md`, which only quarto makes. Any other notice is printed.
KNOWN_NOTICES = re.compile(r"\b(output-file|keep-md) is not read by smalldocs|format commonmark is not built|"
                           r"ignores? .*\b(format\.commonmark|keep-md|output-file)\b")
MATHJAX_CONFIG = ("window.MathJax={tex:{inlineMath:[['\\\\(','\\\\)']],displayMath:[['\\\\[','\\\\]']]},"
                  "svg:{fontCache:'global'},options:{enableMenu:false}};")

def _reexec_in_venv():
    "Run this script with the test venv's Python when this interpreter lacks the docs toolchain."
    try:
        import nbdev, smalldocs  # noqa: F401
        return
    except ImportError as e: missing = e.name
    py = VENV / "bin" / "python"
    if py.exists() and Path(sys.prefix).resolve() != VENV.resolve() and not os.environ.get("_BUILD_DOCS_REEXEC"):
        os.environ["_BUILD_DOCS_REEXEC"] = "1"
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])
    sys.exit(f"build_docs: `{missing}` is not importable by {sys.executable} and {py} does not provide it. Set up the "
             f"docs environment (the package and its pinned [test] extra, no vLLM) in {ROOT} with\n  {SETUP}\nor run "
             "`bash tools/test.sh` once (it makes .venv-test with the whole test set).")

def _src(c): return ''.join(c['source']) if isinstance(c['source'], list) else c['source']

def _write_atomic(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text); f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)

def readme_text(root: Path) -> str:
    "README.md from nbs/index.ipynb: markdown cells, visible code and saved outputs (`#| hide` cells left out)."
    nb = json.loads((root / 'nbs/index.ipynb').read_text())
    parts = []
    for c in nb['cells']:
        src = _src(c)
        if re.search(r'^#\|\s*hide\s*$', src, re.M): continue
        if c['cell_type'] == 'markdown': parts.append(src); continue
        if c['cell_type'] != 'code': continue
        code = '\n'.join(l for l in src.split('\n') if not l.startswith('#|')).strip()
        if code and not re.search(r'^#\|\s*echo:\s*false', src, re.M): parts.append(f"```python\n{code}\n```")
        for o in c.get('outputs', []):
            d = o.get('data', {})
            if 'text/markdown' in d: parts.append(_src(dict(source=d['text/markdown'])))
            elif o.get('output_type') == 'stream': parts.append("```\n" + _src(dict(source=o['text'])).rstrip() + "\n```")
            elif 'text/plain' in d: parts.append("```\n" + _src(dict(source=d['text/plain'])).rstrip() + "\n```")
    text = "\n\n".join(p.strip('\n') for p in parts if p.strip()) + "\n"
    # pages of the site are relative links in the notebook; on the repository front page they point at the site
    return re.sub(r'\]\((\d\w*\.html)', r'](https://inkling-fp8kv.github.io/inkling_fp8kv/\1', text)

def write_readme(root: Path) -> bool:
    "Write README.md from nbs/index.ipynb; True if it changed."
    text, p = readme_text(root), root / 'README.md'
    old = p.read_text() if p.exists() else ''
    if old != text: _write_atomic(p, text)
    return old != text

def notebooks(root: Path) -> list:
    return sorted(p for p in (root / 'nbs').glob('*.ipynb') if not p.name.startswith(('_', '.')))

def page_of(nb: Path) -> str: return nb.stem + '.html'

def site_url() -> str:
    from nbdev.config import get_config
    cfg = get_config()
    return cfg.doc_host.rstrip('/') + '/' + cfg.doc_baseurl.strip('/') + '/'

def rewrite_api_links(proc: Path, root: Path) -> int:
    """nbdev links a symbol to `<site>/<notebook name without its number>.html#sym` (quarto's `output-file`);
    smalldocs names a page after its notebook (`00_numerics.html`). Point each link at the page this build writes.
    A private name (`_tap_major`) has no `show_doc` and so no anchor to land on: it stays code, unlinked."""
    pages = {re.sub(r'^\d+[a-zA-Z0-9]*_', '', nb.stem.lower()) + '.html': page_of(nb) for nb in notebooks(root)}
    site = re.escape(site_url())
    private = re.compile(r'\[(`_[^`]*`)\]\(' + site + r'[\w.-]+\.html#_[^)]*\)')
    pat = re.compile(site + r'([\w.-]+\.html)')
    n = 0
    for f in proc.glob('*.ipynb'):
        s = f.read_text()
        s1, k1 = private.subn(r'\1', s)
        new, k = pat.subn(lambda m: pages.get(m.group(1), m.group(1)), s1)
        if k or k1: f.write_text(new); n += k
    return n

def install_mathjax(docs: Path) -> int:
    "Typeset maths offline: copy MathJax from the pinned wheel and swap smalldocs' CDN KaTeX tags for it."
    import importlib.util
    spec = importlib.util.find_spec('mathjax')   # django-static-mathjax; found, not imported
    if spec is None: sys.exit("build_docs: the `mathjax` package (django-static-mathjax, pinned in settings.ini) is not installed")
    src = Path(list(spec.submodule_search_locations)[0]) / 'static/mathjax'
    dst = docs / MATHJAX
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / 'es5' / dst.name, dst); shutil.copy2(src / 'LICENSE', dst.parent / 'LICENSE')
    katex = re.compile(r'<link rel="stylesheet" href="https://cdn\.jsdelivr\.net/npm/katex@[^"]*">|'
                       r'<script src="https://cdn\.jsdelivr\.net/npm/katex@[^"]*"[^>]*></script>')
    n = 0
    for f in docs.glob('*.html'):
        s = f.read_text()
        if 'katex' not in s: continue
        s = katex.sub('', s)
        off = re.search(r'<meta name="smalldocs:offset" content="([^"]*)">', s).group(1)
        tag = f'<script>{MATHJAX_CONFIG}</script><script src="{off if off != "./" else ""}{MATHJAX}" defer></script>'
        f.write_text(s.replace('</head>', tag + '</head>', 1)); n += 1
    return n

_re_pre = re.compile(r'(<pre\b[^>]*>\s*<code\b[^>]*>)(.*?)(</code>\s*</pre>)', re.S)
_re_tag = re.compile(r'(<[^>]+>)')

def code_lines(inner: str) -> str:
    """One `<span class="sd-line">` per line of a code block's HTML, so that a long line the stylesheet wraps continues
    indented past its own indentation (`--i`: its leading spaces) instead of at column 0, where it would read as a new,
    dedented line. Tags open across a line end are closed and reopened; the text (and so what the copy button copies)
    is unchanged."""
    lines, cur, open_ = [], [], []
    for tok in _re_tag.split(inner):
        if not tok: continue
        if tok.startswith('<'):
            cur.append(tok)
            if tok.startswith('</'):
                if open_: open_.pop()
            elif not tok.endswith('/>'): open_.append(tok)
            continue
        for k, part in enumerate(tok.split('\n')):
            if k:
                cur += [f"</{re.match(r'<([A-Za-z0-9]+)', t).group(1)}>" for t in reversed(open_)]
                lines.append(''.join(cur)); cur = list(open_)
            cur.append(part)
    lines.append(''.join(cur))
    text = lambda l: html.unescape(_re_tag.sub('', l))
    if len(lines) > 1 and not text(lines[-1]):   # the newline before </code> ends no line
        last = lines.pop(); lines[-1] += last
    def span(l):
        n = len(text(l)) - len(text(l).lstrip(' '))
        style = f' style="--i:{n}"' if n else ''
        return f'<span class="sd-line"{style}>{l}</span>'
    return '\n'.join(map(span, lines))   # the newlines stay text: copying a block gives back its exact source

def mark_code_lines(docs: Path) -> int:
    "Split every code block of every page into line spans (see `code_lines`); the number of blocks."
    n = 0
    for f in docs.glob('*.html'):
        s, k = _re_pre.subn(lambda m: m[1] + code_lines(m[2]) + m[3], f.read_text())
        if k: f.write_text(s); n += k
    return n

def mark_image_widths(proc: Path, docs: Path) -> int:
    """Give each plot the width its notebook shows it at (`data-width`): a retina PNG has twice the pixels and records
    its display width in the output's metadata, which smalldocs drops. The stylesheet still draws plots as wide as the
    text column; tools/check_docs.py compares the drawn width with this one, the size the plot's text was made for."""
    widths = {}
    for f in proc.glob('*.ipynb'):
        for c in json.loads(f.read_text()).get('cells', []):
            for o in c.get('outputs', []):
                w = o.get('metadata', {}).get('image/png', {}).get('width')
                if w and 'image/png' in o.get('data', {}):
                    widths[re.sub(r'\s', '', _src(dict(source=o['data']['image/png'])))] = w
    n = 0
    def mark(m):
        nonlocal n
        w = widths.get(m[2])
        if w is None: return m[0]
        n += 1
        return f'{m[1]} data-width="{int(w)}"'
    for f in docs.glob('*.html'):
        s = f.read_text()
        new = re.sub(r'(<img src="data:image/png;base64,([^"]+)")', mark, s)
        if new != s: f.write_text(new)
    return n

_re_ref = re.compile(r'''\s(href|src)="([^"]*)"''')
_re_id = re.compile(r'''\sid="([^"]*)"''')

def check_site(docs: Path, root: Path, counts: dict | None = None) -> list:
    """Problems with the built site: notebooks without a page, links or resources that do not resolve, remote resources.
    `counts`, when given, receives how many local links and resources were checked (`local`), and how many of them
    point at an anchor (`anchors`)."""
    problems, ids = [], {}
    n = counts if counts is not None else {}
    n.update(local=0, anchors=0)
    for nb in notebooks(root):
        if not (docs / page_of(nb)).exists(): problems.append(f"{nb.name}: no page {page_of(nb)}")
    own = site_url()
    def anchors(p: Path):
        if p not in ids: ids[p] = set(map(html.unescape, _re_id.findall(p.read_text()))) if p.suffix == '.html' else set()
        return ids[p]
    for f in sorted(docs.rglob('*.html')):
        if 'site_libs' in f.parts: continue
        text = f.read_text()
        for kind, ref in _re_ref.findall(text):
            ref = html.unescape(ref)
            if ref.startswith(own): problems.append(f"{f.name}: link to the published site instead of a local page: {ref}"); continue
            u = urlsplit(ref)
            if u.scheme == 'data': continue
            if u.scheme or ref.startswith('//'):
                if kind == 'src' or re.search(rf'<link[^>]*href="{re.escape(ref)}"', text):
                    problems.append(f"{f.name}: remote resource (the site must work offline): {ref}")
                continue
            n['local'] += 1
            target = f if not u.path else (f.parent / unquote(u.path)).resolve()
            if not target.exists(): problems.append(f"{f.name}: {kind} to a missing file: {ref}"); continue
            if u.fragment and target.suffix == '.html':
                n['anchors'] += 1
                if unquote(u.fragment) not in anchors(target): problems.append(f"{f.name}: link to a missing anchor: {ref}")
        if 'class="math' in text and MATHJAX not in text: problems.append(f"{f.name}: has maths but no local MathJax")
    search = docs / 'search.json'
    if search.exists():
        for e in json.loads(search.read_text()):
            href = e.get('href', '') if isinstance(e, dict) else ''
            if href and not (docs / unquote(urlsplit(href).path)).exists(): problems.append(f"search.json: missing page {href}")
    return problems

# ===--- what nbdev's processing runs ---===

def doc_eval(cell, flags: set):
    """What the docs build runs of a notebook cell: the whole cell ('all'), its top-level imports only (a source string),
    or nothing (None). nbdev would run every cell with an import in it, tests included, and GPU/vLLM cells too."""
    from nbdev.processors import cell_lang, _show_docs
    if cell.cell_type != 'code' or cell_lang(cell) != 'python' or not cell.source or 'nbdev_export' + '()' in cell.source: return
    trees = cell.parsed_()
    if not trees: return
    d = cell.directives_
    if d.get('eval:', [''])[0].lower() == 'false' or flags & d.keys(): return
    if d.keys() & {'export', 'exports', 'exporti', 'exec_doc'} or _show_docs(trees): return 'all'
    imps = [t for t in trees if isinstance(t, (ast.Import, ast.ImportFrom))]
    if not imps: return
    if len(imps) == len(trees): return 'all'
    return '\n'.join(ast.get_source_segment(cell.source, t) for t in imps)

class CellError(Exception):
    "A notebook cell that failed while nbdev prepared its page."
    def __init__(self, nb: str, idx: int, source: str, exc: BaseException):
        self.nb, self.idx, self.source, self.exc = nb, idx, source, exc
        line = next((l for l in source.splitlines() if l.strip() and not l.startswith('#|')), '')
        frames = ''.join(traceback.format_exception(exc, limit=-2)).rstrip()
        hint = (f"\n  (the docs build needs the package and its pinned [test] extra: {SETUP})"
                if isinstance(exc, ModuleNotFoundError) else '')
        super().__init__(f"{nb}, cell {idx} ({line.strip()[:100]}): {type(exc).__name__}: {exc}{hint}\n{frames}")

def _patch_exec_show_docs(flags: set):
    "Make nbdev's `exec_show_docs` processor run what `doc_eval` says, and fail with the notebook's file name."
    from nbdev.processors import exec_show_docs
    from fastcore.basics import str2bool
    def __call__(self, cell):
        if not self.nb.has_docs_ or not hasattr(self, 'k'): return
        if str2bool(getattr(self.nb, 'frontmatter_', {}).get('skip_showdoc', False)): return
        what = doc_eval(cell, flags)
        if what is None: return
        if what == 'all': self.k.cell(cell)
        else: self.k.run(what)   # outputs not kept: the cell's saved outputs stay on the page
        if self.k.exc: raise CellError(Path(self.nb.path_).name, cell.idx_, cell.source, self.k.exc)
    exec_show_docs.__call__ = __call__

@contextlib.contextmanager
def _captured(log, on: bool = True):
    "Send this process's stdout and stderr (Python's and C libraries') to the open binary file `log` while active."
    if not on: yield; return
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1); os.dup2(log.fileno(), 2)
    try: yield
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        os.close(saved[0]); os.close(saved[1])

def _fail(msg: str, log=None):
    "Print why the build failed (and the end of what the tools printed, when there was any) and exit 1."
    if log is not None:
        log.flush(); log.seek(0)
        tail = log.read().decode(errors='replace').strip().splitlines()[-25:]
        if tail: print("build_docs: the last lines nbdev/smalldocs printed:\n  " + "\n  ".join(tail), file=sys.stderr)
    sys.exit(f"build_docs: FAILED: {msg}")

def build(root: Path = ROOT, verbose: bool = False):
    t0 = time.time()
    os.chdir(root)
    sys.path.insert(0, str(root))   # this checkout's package (and its _modidx, which nbdev's links read), whatever is installed
    readme = "regenerated from nbs/index.ipynb" if write_readme(root) else "unchanged"
    from nbdev.config import get_config
    from nbdev.quarto import refresh_quarto_yml, nbdev_sidebar
    from nbdev.doclinks import _build_modidx
    from nbdev.serve import proc_nbs
    from smalldocs.site import build as render
    if not Path('nbs/_quarto.yml').resolve().samefile('_quarto.yml'):
        sys.exit("build_docs: nbs/_quarto.yml must be a link to the root _quarto.yml (the one file to edit)")
    flags = set(get_config().get('tst_flags', '').split())
    _patch_exec_show_docs(flags)
    log = tempfile.TemporaryFile()
    try:
        with _captured(log, not verbose):
            refresh_quarto_yml()
            _build_modidx()
            nbdev_sidebar.__wrapped__(force=True)
            shutil.rmtree('_proc', ignore_errors=True)
            proc_nbs(n_workers=0)   # worker processes die with BrokenProcessPool when fed on stdin
            n_links = rewrite_api_links(Path('_proc'), root)
            site = render('_proc', quiet=True)
    except CellError as e: _fail(f"a notebook cell failed while its page was prepared: {e}", log)
    except BaseException as e:
        _fail(f"{type(e).__name__}: {e}\n" + ''.join(traceback.format_exception(e, limit=-4)).rstrip(), log)
    notices = [w for w in site.warnings if not KNOWN_NOTICES.search(w)]
    for w in notices: print(f"build_docs: smalldocs warns: {w}", file=sys.stderr)
    log.seek(0); Path('_proc/build_docs.log').write_bytes(log.read()); log.close()
    shutil.rmtree('_docs', ignore_errors=True)
    shutil.move('_proc/_docs', '_docs')
    docs = Path('_docs')
    n_math = install_mathjax(docs)
    n_code = mark_code_lines(docs)
    mark_image_widths(Path('_proc'), docs)
    counts = {}
    problems = check_site(docs, root, counts)
    pages = sorted(p.name for p in docs.glob('*.html'))
    if 'index.html' not in pages: problems.append("no index.html")
    if problems:
        print("\n".join(f"  {p}" for p in problems), file=sys.stderr)
        _fail(f"{len(problems)} problem(s) in _docs/ (listed above)")
    print(f"docs: {len(pages)} pages in _docs/ ({len(notebooks(root))} notebooks), {counts['local']:,} local links and "
          f"resources checked ({counts['anchors']:,} to anchors, {n_links} API links pointed at local pages), "
          f"all resolve; nothing remote loaded; maths on {n_math} pages, {n_code:,} code blocks; README.md {readme}"
          f"{f'; {len(notices)} smalldocs warning(s) above' if notices else ''}; {time.time() - t0:.0f} s")

if __name__ == '__main__':
    _reexec_in_venv()
    build(verbose='--verbose' in sys.argv[1:] or '-v' in sys.argv[1:])
