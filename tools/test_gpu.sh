#!/usr/bin/env bash
# Run the notebooks' tests on a CUDA machine, `#| cuda` cells included, one notebook per process, with a pass/fail line
# for each and a closing `N passed, N failed` line; the exit status is 1 when a notebook failed, 2 on a usage error.
#
#   tools/test_gpu.sh                 every notebook, then 07b_fuzz again with TRITON_DEBUG=1 (device-side asserts)
#   tools/test_gpu.sh --gpu-only      only the notebooks the GPU changes (the rule below), then 07b with TRITON_DEBUG=1
#   tools/test_gpu.sh NOTEBOOK...     only these: 07_attention, 07_attention.ipynb, nbs/07_attention.ipynb or a prefix
#                                     such as 07b (matching nbs/07b_*.ipynb)
#   -j N, --jobs N                    N notebooks at a time (default TEST_GPU_JOBS, else 6 with 16+ cores, 1 below)
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
# Side by side: the tests are mostly host work (Triton compiles kernels on the CPU, and most GPU work is small), so
# several notebook processes share the GPU, the longest run first by the seconds bench/results/gpu_tests.json
# recorded. No test asserts a time (the benchmark notebooks' GPU cells check what they measured, not how fast), so
# sharing costs only wall time per notebook.
#
# At the end it writes test_gpu.json: the GPU, versions, command, each run's result and seconds, the summary line and
# the wall time (what bench/results/gpu_tests.json records). With $OUT set it is $OUT/test_gpu.json, at the top, so a
# device that returns only the first few files of $OUT still returns it; otherwise it sits beside the logs.
#
# TRITON_INTERPRET is unset: with it the kernels would run in the interpreter on the CPU. Environment: TEST_GPU_LOGS
# (per-notebook logs; default $OUT/test_gpu_logs when $OUT is set, else a new temporary folder), TEST_GPU_TIMEOUT
# (seconds per notebook, default none), TEST_GPU_ALLOW_CPU=1 (run without a visible GPU: for testing this script).
set -uo pipefail
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t0=$(date +%s)

gpu_only=0; list=0; names=(); args=("$@")
cores=$(nproc 2>/dev/null || echo 1)
jobs=${TEST_GPU_JOBS:-$([ "$cores" -ge 16 ] && echo 6 || echo 1)}
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu-only) gpu_only=1 ;;
    --list) list=1 ;;
    -j|--jobs) [ $# -ge 2 ] || { echo "test_gpu.sh: $1 needs a number" >&2; exit 2; }; jobs=$2; shift ;;
    -j*) jobs=${1#-j} ;;
    --jobs=*) jobs=${1#--jobs=} ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "test_gpu.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) names+=("$1") ;;
  esac
  shift
done
case "$jobs" in ''|*[!0-9]*|0) echo "test_gpu.sh: --jobs takes a whole number >= 1, not '$jobs'" >&2; exit 2 ;; esac
# CPU threads per notebook process: a share of the cores. Six processes with a thread per core each oversubscribe the
# CPU, and torch's CPU work then crawls (on the H200's 16 cores 09c, 10, 12, 13 and 16 ran past 520 s each; they take
# 4 to 94 s on CI's 2 cores). OMP_NUM_THREADS or MKL_NUM_THREADS set by the caller win.
threads=$(( cores / jobs )); [ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads} MKL_NUM_THREADS=${MKL_NUM_THREADS:-$threads}
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

# The plan: one line per run, "label<TAB>notebook<TAB>environment", longest first by the last record's seconds (a run
# the record does not name goes first: it may be long).
runs_in() {   # the TRITON_DEBUG run first, for a record that lacks it: 07b with device-side asserts runs longest
  [ -n "$debug_nb" ] && printf '%s\t%s\tTRITON_DEBUG=1\n' "$(basename "$debug_nb") TRITON_DEBUG=1" "$debug_nb"
  for nb in "${notebooks[@]}"; do printf '%s\t%s\t\n' "$(basename "$nb")" "$nb"; done
}
mapfile -t plan < <(runs_in | python3 -c '
import json, sys
try:   # the record and the runs it keeps beside it ("also": a full set split over several calls)
    r = json.load(open("bench/results/gpu_tests.json"))
    rec = {n["notebook"]: n["seconds"] for x in (r, *r.get("also", ())) for n in x["notebooks"]}
except Exception: rec = {}
runs = [l.rstrip("\n").split("\t") for l in sys.stdin if l.strip()]
for r in sorted(runs, key=lambda r: -rec.get(r[0], float("inf"))): print("\t".join(r))
')
if [ "$list" = 1 ]; then
  echo "$jobs at a time:"
  for line in "${plan[@]}"; do IFS=$'\t' read -r label nb envs <<<"$line"; echo "  $nb${envs:+ $envs}"; done
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
record=${OUT:+$OUT/test_gpu.json}; record=${record:-$logs/test_gpu.json}
results=$(mktemp -d -t test_gpu_results.XXXXXX); trap 'rm -rf "$results"' EXIT
echo "${#plan[@]} runs of $nbdev_bin --flags cuda --n_workers 1, one process each, $jobs at a time," \
     "$OMP_NUM_THREADS CPU threads each; logs in $logs"
safe() { local x=${1//[^A-Za-z0-9_.=-]/_}; echo "$x"; }
run_one() {   # label, notebook, environment assignment (or nothing): a PASS/FAIL line, "rc seconds" in $results
  local label=$1 nb=$2 t log rc secs; shift 2
  log="$logs/$(safe "$label").log"
  t=$(date +%s)
  if [ "${TEST_GPU_TIMEOUT:-0}" -gt 0 ] 2>/dev/null; then
    env "$@" timeout "$TEST_GPU_TIMEOUT" nbdev_test --path "$nb" --flags cuda --n_workers 1 >"$log" 2>&1; rc=$?
  else
    env "$@" nbdev_test --path "$nb" --flags cuda --n_workers 1 >"$log" 2>&1; rc=$?
  fi
  [ $rc -eq 0 ] && ! grep -q '^Success\.$' "$log" && rc=1
  secs=$(( $(date +%s) - t ))
  echo "$rc $secs" > "$results/$(safe "$label")"
  if [ $rc -eq 0 ]; then printf 'PASS  %-44s %5d s\n' "$label" "$secs"
  else printf 'FAIL  %-44s %5d s  (exit %d; log %s)\n' "$label" "$secs" "$rc" "$log"; fi
}
active=0
for line in "${plan[@]}"; do
  IFS=$'\t' read -r label nb envs <<<"$line"
  run_one "$label" "$nb" $envs &
  active=$((active + 1))
  if [ $active -ge "$jobs" ]; then wait -n; active=$((active - 1)); fi
done
wait

passed=0; failed=0; failures=(); rows=""     # rows: "label<TAB>rc<TAB>seconds" per run, for the record
for line in "${plan[@]}"; do
  IFS=$'\t' read -r label nb envs <<<"$line"
  read -r rc secs < "$results/$(safe "$label")" 2>/dev/null || { rc=1; secs=0; }
  rows+="$label"$'\t'"$rc"$'\t'"$secs"$'\n'
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$label"); fi
done
for f in "${failures[@]}"; do
  echo "--- $f: the end of $logs/$(safe "$f").log"
  tail -n 40 "$logs/$(safe "$f").log" | sed 's/^/    | /'
done
wall=$(( $(date +%s) - t0 ))
[ $failed -gt 0 ] && echo "failed: ${failures[*]}"
# the record (what bench/results/gpu_tests.json keeps of a run), then the closing lines
printf '%s' "$rows" | python3 -c '
import datetime, json, sys, torch, triton
path, command, jobs, threads, summary, wall = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in sys.stdin if l.strip()]
rec = dict(gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU", torch=torch.__version__,
           triton=triton.__version__, python=sys.version.split()[0], date=datetime.date.today().isoformat(),
           command=command.strip(), jobs=int(jobs), cpu_threads=int(threads),
           notebooks=[dict(notebook=n, result="PASS" if rc == "0" else "FAIL", seconds=int(s)) for n, rc, s in rows],
           summary=summary, wall_seconds=int(wall))
with open(path, "w") as f: json.dump(rec, f, indent=1); f.write("\n")
' "$record" "tools/test_gpu.sh ${args[*]}" "$jobs" "$OMP_NUM_THREADS" "$passed passed, $failed failed" "$wall" \
  || echo "test_gpu.sh: could not write $record" >&2
echo "wall time: $wall s; record: $record"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
