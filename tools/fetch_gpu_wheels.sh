#!/usr/bin/env bash
# Fetch the wheels a GPU box without network needs to run the notebooks: nbdev 2.4.14 and the packages it imports
# that a plain torch environment lacks, built for CPython 3.12 on x86-64 Linux (about 7 MB, pure Python but watchdog).
# Run it where pip reaches the package index; it writes DEST (default: .whl/ in the repository root, git-ignored).
# Carry that folder to the GPU box with the checkout; tools/test_gpu.sh installs it there (pip --no-index --no-deps).
#
# Usage: bash tools/fetch_gpu_wheels.sh [DEST]
#
# The versions are nbdev's test set of settings.ini and the ones observed working beside torch 2.11 + Triton 3.6 on
# Python 3.12. The rest of what nbdev imports (packaging, PyYAML, six, pygments, psutil, ...) comes with a torch
# environment and is not fetched; neither is fastprogress (fastcore imports it only to draw progress bars).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.whl}
mkdir -p "$dest"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" \
  nbdev==2.4.14 fastcore==1.14.5 execnb==0.1.18 ghapi==1.1.1 fastgit==0.1.4 \
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 traitlets==5.16.1 jedi==0.20.1 parso==0.8.7 \
  pexpect==4.9.0 ptyprocess==0.7.0 prompt_toolkit==3.0.53 wcwidth==0.9.4 stack_data==0.6.3 \
  asttokens==3.0.2 executing==2.3.0 pure_eval==0.2.4 matplotlib-inline==0.2.2 astunparse==1.6.3 \
  watchdog==7.1.0
echo "$(ls "$dest"/*.whl | wc -l) wheels in $dest ($(du -sh "$dest" | cut -f1)); carry it with the checkout, then:"
echo "  tools/test_gpu.sh [--gpu-only] [NOTEBOOK...]"
