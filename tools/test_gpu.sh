#!/usr/bin/env bash
# Run the notebooks' tests on a CUDA machine, `#| cuda` cells included, one notebook per process, with a pass/fail line
# for each and a closing `N passed, N failed` line; the exit status is 1 when a notebook failed, 2 on a usage error.
#
#   tools/test_gpu.sh                 every notebook, then 07b_fuzz again with TRITON_DEBUG=1 (device-side asserts)
#   tools/test_gpu.sh --gpu-only      only the notebooks the GPU changes (the rule below), then 07b with TRITON_DEBUG=1
#   tools/test_gpu.sh NOTEBOOK...     only these: 07_attention, 07_attention.ipynb, nbs/07_attention.ipynb or a prefix
#                                     such as 07b (matching nbs/07b_*.ipynb)
#   --list                            print the runs it would make and exit
#
# Made for a GPU box with its own torch and Triton and no network: nothing is installed over that environment. The
# package is this checkout (its root goes first on PYTHONPATH). nbdev comes from an installed nbdev, else from the
# wheels in .whl/ (fetched on a machine with network by tools/fetch_gpu_wheels.sh, carried with the checkout), which
# are installed once with `pip --no-index --no-deps --target` into a folder of their own (TEST_GPU_SITE, default
# ~/.cache/inkling-fp8kv/nbdev-site) put on PYTHONPATH and PATH for this script only.
#
# The --gpu-only rule: a notebook runs when one of its code cells carries `#| cuda` (tests that exist only on a GPU),
# defines a Triton kernel (`@triton.jit`: its own tests then run natively, the hardware fp8 cast and the real launch
# configurations, instead of in the interpreter) or reads TRITON_DEBUG (device-side asserts, which exist only on a GPU).
# The other notebooks run the same code on a CPU in CI; their GPU differences are indirect (library defaults that pick
# the Triton kernels on CUDA), so run the full set before a release.
#
# TRITON_INTERPRET is unset: with it the kernels would run in the interpreter on the CPU. Environment: TEST_GPU_LOGS
# (per-notebook logs; default $OUT/test_gpu_logs when $OUT is set, else a new temporary folder), TEST_GPU_TIMEOUT
# (seconds per notebook, default none), TEST_GPU_ALLOW_CPU=1 (run without a visible GPU: for testing this script).
set -uo pipefail
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t0=$(date +%s)

gpu_only=0; list=0; names=()
for a in "$@"; do
  case "$a" in
    --gpu-only) gpu_only=1 ;;
    --list) list=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "test_gpu.sh: unknown option $a" >&2; usage >&2; exit 2 ;;
    *) names+=("$a") ;;
  esac
done
if [ "$gpu_only" = 1 ] && [ ${#names[@]} -gt 0 ]; then
  echo "test_gpu.sh: give notebook names or --gpu-only, not both" >&2; exit 2
fi

resolve() {   # a notebook name -> its path, or nothing
  local n=$1 m
  for p in "$n" "nbs/$n" "nbs/$n.ipynb"; do [ -f "$p" ] && [[ "$p" == *.ipynb ]] && { echo "$p"; return; }; done
  m=(nbs/"$n"_*.ipynb)
  [ ${#m[@]} -eq 1 ] && [ -f "${m[0]}" ] && echo "${m[0]}"
}
notebooks=()
if [ ${#names[@]} -gt 0 ]; then
  for n in "${names[@]}"; do
    p=$(resolve "$n")
    if [ -z "$p" ]; then echo "test_gpu.sh: no notebook $n (nbs/$n.ipynb or a single nbs/${n}_*.ipynb)" >&2; exit 2; fi
    notebooks+=("$p")
  done
else
  all=(); for p in nbs/*.ipynb; do case "$(basename "$p")" in _*|.*) ;; *) all+=("$p") ;; esac; done
  if [ "$gpu_only" = 1 ]; then
    mapfile -t notebooks < <(python3 - "${all[@]}" <<'EOF'
import json, re, sys
rule = re.compile(r"^#\|\s*cuda\b|@triton\.jit|TRITON_DEBUG", re.M)
for p in sys.argv[1:]:
    cells = json.load(open(p))["cells"]
    if any(c["cell_type"] == "code" and rule.search("".join(c["source"])) for c in cells): print(p)
EOF
)
  else notebooks=("${all[@]}"); fi
fi
debug_nb=""
if [ ${#names[@]} -eq 0 ]; then
  for p in "${notebooks[@]}"; do case "$p" in nbs/07b_*.ipynb) debug_nb=$p ;; esac; done
fi

if [ "$list" = 1 ]; then
  printf '%s\n' "${notebooks[@]}"; [ -n "$debug_nb" ] && echo "$debug_nb TRITON_DEBUG=1"
  exit 0
fi

# The environment: this checkout's package, never the interpreter, headless plots, no hub downloads.
unset TRITON_INTERPRET
export MPLBACKEND=Agg HF_HUB_OFFLINE=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
wheels=(.whl/*.whl)
if [ -f "${wheels[0]}" ]; then
  site=${TEST_GPU_SITE:-$HOME/.cache/inkling-fp8kv/nbdev-site}
  stamp=$(cd .whl && ls -- *.whl | sort | sha1sum | cut -c1-16)
  if [ "$(cat "$site/.wheels" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$site" && mkdir -p "$site" &&
      PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-index --no-deps \
        --target "$site" "${wheels[@]}" &&
      echo "$stamp" > "$site/.wheels" || { echo "test_gpu.sh: installing .whl/ into $site failed" >&2; exit 2; }
  fi
  export PYTHONPATH="$PYTHONPATH:$site" PATH="$site/bin:$PATH"    # PYTHONPATH precedes site-packages: these versions win
elif ! python3 -c "import nbdev" 2>/dev/null; then
  echo "test_gpu.sh: nbdev is not installed and .whl/ holds no wheels: run tools/fetch_gpu_wheels.sh on a machine" \
       "with network and carry .whl/ with the checkout" >&2; exit 2
fi
nbdev_bin=$(command -v nbdev_test) || { echo "test_gpu.sh: nbdev_test is not on PATH" >&2; exit 2; }

python3 - <<'EOF' || [ "${TEST_GPU_ALLOW_CPU:-0}" = 1 ] || { echo "test_gpu.sh: torch sees no CUDA GPU (on a CPU, tools/test.sh runs the tests)" >&2; exit 2; }
import sys, torch, triton, inkling_fp8kv
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
print(f"{gpu}; torch {torch.__version__}, Triton {triton.__version__}, Python {sys.version.split()[0]}; "
      f"package {inkling_fp8kv.__version__} from {inkling_fp8kv.__path__[0]}")
sys.exit(0 if torch.cuda.is_available() else 1)
EOF

logs=${TEST_GPU_LOGS:-${OUT:+$OUT/test_gpu_logs}}
logs=${logs:-$(mktemp -d -t test_gpu_logs.XXXXXX)}
mkdir -p "$logs"
runs=${#notebooks[@]}; [ -n "$debug_nb" ] && runs=$((runs + 1))
echo "$runs runs of $nbdev_bin --flags cuda --n_workers 1, one process each; logs in $logs"
passed=0; failed=0; failures=()
run_one() {   # label, notebook, environment assignments...
  local label=$1 nb=$2 t log rc; shift 2
  log="$logs/${label//[^A-Za-z0-9_.=-]/_}.log"
  t=$(date +%s)
  if [ "${TEST_GPU_TIMEOUT:-0}" -gt 0 ] 2>/dev/null; then
    env "$@" timeout "$TEST_GPU_TIMEOUT" nbdev_test --path "$nb" --flags cuda --n_workers 1 >"$log" 2>&1; rc=$?
  else
    env "$@" nbdev_test --path "$nb" --flags cuda --n_workers 1 >"$log" 2>&1; rc=$?
  fi
  if [ $rc -eq 0 ] && grep -q '^Success\.$' "$log"; then
    passed=$((passed + 1)); printf 'PASS  %-44s %5d s\n' "$label" $(( $(date +%s) - t ))
  else
    failed=$((failed + 1)); failures+=("$label")
    printf 'FAIL  %-44s %5d s  (exit %d; log %s)\n' "$label" $(( $(date +%s) - t )) "$rc" "$log"
    tail -n 40 "$log" | sed 's/^/    | /'
  fi
}
for nb in "${notebooks[@]}"; do run_one "$(basename "$nb")" "$nb"; done
[ -n "$debug_nb" ] && run_one "$(basename "$debug_nb") TRITON_DEBUG=1" "$debug_nb" TRITON_DEBUG=1

[ $failed -gt 0 ] && echo "failed: ${failures[*]}"
echo "wall time: $(( $(date +%s) - t0 )) s"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
