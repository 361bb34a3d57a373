"""Build the docs site into _docs/ without quarto (nbdev 2.4.14 + smalldocs), offline, and check it.

Notebooks are not executed here: the rendered pages show their saved outputs. Steps:
README.md from nbs/index.ipynb; nbdev's processing into _proc/; API links rewritten to the pages this build
writes; smalldocs renders _docs/; maths is typeset by a MathJax copied from the pinned `django-static-mathjax`
wheel (no network at view time); then the site is checked: every notebook has a page, and every link or
resource in every page resolves to a file (and anchor) that exists in _docs/ (CI fails otherwise).

Usage: python tools/build_docs.py   (from anywhere; without nbdev on this interpreter it re-runs itself with
.venv-test/bin/python, the environment `bash tools/test.sh` creates)
"""
import html, json, os, re, shutil, subprocess, sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / os.environ.get("VENV", ".venv-test")
MATHJAX = "site_libs/mathjax/tex-svg-full.js"   # the combined build: every TeX extension, SVG glyphs, no font files
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
    sys.exit(f"build_docs: `{missing}` is not importable by {sys.executable} and {py} does not provide it; "
             "run `bash tools/test.sh` once (it creates .venv-test) or `pip install -c constraints.txt -e '.[test]'`")

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

_re_ref = re.compile(r'''\s(href|src)="([^"]*)"''')
_re_id = re.compile(r'''\sid="([^"]*)"''')

def check_site(docs: Path, root: Path) -> list:
    "Problems with the built site: notebooks without a page, links or resources that do not resolve, remote resources."
    problems, ids = [], {}
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
            target = f if not u.path else (f.parent / unquote(u.path)).resolve()
            if not target.exists(): problems.append(f"{f.name}: {kind} to a missing file: {ref}"); continue
            if u.fragment and target.suffix == '.html' and unquote(u.fragment) not in anchors(target):
                problems.append(f"{f.name}: link to a missing anchor: {ref}")
        if 'class="math' in text and MATHJAX not in text: problems.append(f"{f.name}: has maths but no local MathJax")
    search = docs / 'search.json'
    if search.exists():
        for e in json.loads(search.read_text()):
            href = e.get('href', '') if isinstance(e, dict) else ''
            if href and not (docs / unquote(urlsplit(href).path)).exists(): problems.append(f"search.json: missing page {href}")
    return problems

def build(root: Path = ROOT):
    os.chdir(root)
    sys.path.insert(0, str(root))   # this checkout's package (and its _modidx, which nbdev's links read), whatever is installed
    if write_readme(root): print("README.md regenerated from nbs/index.ipynb")
    from nbdev.quarto import refresh_quarto_yml, nbdev_sidebar
    from nbdev.doclinks import _build_modidx
    from nbdev.serve import proc_nbs
    if not Path('nbs/_quarto.yml').resolve().samefile('_quarto.yml'):
        sys.exit("build_docs: nbs/_quarto.yml must be a link to the root _quarto.yml (the one file to edit)")
    refresh_quarto_yml()
    _build_modidx()
    nbdev_sidebar.__wrapped__(force=True)
    shutil.rmtree('_proc', ignore_errors=True)
    proc_nbs(n_workers=0)   # worker processes die with BrokenProcessPool when fed on stdin
    print(f"API links pointed at local pages: {rewrite_api_links(Path('_proc'), root)}")
    subprocess.run([sys.executable, '-m', 'smalldocs.cli', 'render'], cwd='_proc', check=True)
    shutil.rmtree('_docs', ignore_errors=True)
    shutil.move('_proc/_docs', '_docs')
    docs = Path('_docs')
    print(f"pages with maths (local MathJax): {install_mathjax(docs)}")
    problems = check_site(docs, root)
    pages = sorted(p.name for p in docs.glob('*.html'))
    if problems or 'index.html' not in pages:
        print("\n".join(problems) or "no index.html", file=sys.stderr)
        sys.exit(f"docs check failed: {len(problems)} problem(s) in _docs/")
    print(f"docs: {len(pages)} pages in _docs/, every link resolves ({', '.join(pages)})")

if __name__ == '__main__':
    _reexec_in_venv()
    build()
