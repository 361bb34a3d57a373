"""Build the docs site into _docs/ without quarto (nbdev 2.4.14 + smalldocs).

Notebooks are not executed here: the rendered pages show their saved outputs.
Usage: python tools/build_docs.py   (from the repo root)
"""
import os, shutil, subprocess, sys
from pathlib import Path

def _src(c): return ''.join(c['source']) if isinstance(c['source'], list) else c['source']

def write_readme(root: Path) -> bool:
    "README.md from nbs/index.ipynb (markdown cells, visible code and saved outputs); True if it changed."
    import json, re
    nb = json.loads((root / 'nbs/index.ipynb').read_text())
    parts = []
    for c in nb['cells']:
        src = _src(c)
        if c['cell_type'] == 'markdown': parts.append(src); continue
        if re.search(r'^#\|\s*hide', src, re.M): continue
        code = '\n'.join(l for l in src.split('\n') if not l.startswith('#|')).strip()
        if code and not re.search(r'^#\|\s*echo:\s*false', src, re.M): parts.append(f"```python\n{code}\n```")
        for o in c.get('outputs', []):
            d = o.get('data', {})
            if 'text/markdown' in d: parts.append(_src(dict(source=d['text/markdown'])))
            elif o.get('output_type') == 'stream': parts.append("```\n" + _src(dict(source=o['text'])).rstrip() + "\n```")
            elif 'text/plain' in d: parts.append("```\n" + _src(dict(source=d['text/plain'])).rstrip() + "\n```")
    text = "\n\n".join(p.strip('\n') for p in parts if p.strip()) + "\n"
    text = text.replace('](0', '](https://inkling-fp8kv.github.io/inkling_fp8kv/0').replace('](1', '](https://inkling-fp8kv.github.io/inkling_fp8kv/1')
    old = (root / 'README.md').read_text() if (root / 'README.md').exists() else ''
    (root / 'README.md').write_text(text)
    return old != text

def main():
    root = Path(__file__).resolve().parents[1]
    os.chdir(root)
    if write_readme(root): print("README.md regenerated from nbs/index.ipynb")
    from nbdev.quarto import refresh_quarto_yml, nbdev_sidebar
    from nbdev.doclinks import _build_modidx
    from nbdev.serve import proc_nbs
    refresh_quarto_yml()
    _build_modidx()
    nbdev_sidebar.__wrapped__(force=True)
    shutil.rmtree('_proc', ignore_errors=True)
    proc_nbs(n_workers=0)   # worker processes die with BrokenProcessPool when fed on stdin
    subprocess.run([sys.executable, '-m', 'smalldocs', 'render'], cwd='_proc', check=True) if shutil.which('smalldocs') is None \
        else subprocess.run(['smalldocs', 'render'], cwd='_proc', check=True)
    shutil.rmtree('_docs', ignore_errors=True)
    shutil.move('_proc/_docs', '_docs')
    pages = sorted(p.name for p in Path('_docs').glob('*.html'))
    nbs = sorted(p.stem for p in Path('nbs').glob('*.ipynb') if not p.name.startswith('_'))
    missing = [n for n in nbs if not any(pg.startswith(n.split('_', 1)[-1]) or pg.startswith(n) for pg in pages)]
    if 'index.html' not in pages or missing:
        sys.exit(f"docs incomplete: pages {pages}; notebooks without a page: {missing}")
    print(f"docs: {len(pages)} pages in _docs/ ({', '.join(pages)})")

if __name__ == '__main__': main()
