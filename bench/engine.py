#!/usr/bin/env python3
"""Engine throughput and admission, fp8 vs bf16 KV, on the embedded tiny Inkling served by `model.Engine` (Triton
kernels, paged caches, chunked prefill): output tokens/s, prefill and decode step rates, and the requests admitted at a
fixed cache budget beside `capacity.plan_pool`. The suite is `inkling_fp8kv.bench.engine_suite` (notebook 15b).

On the GPU box, from the repository root:
    PYTHONPATH=$PWD python bench/engine.py [--quick] [--requests N] [--prompt N] [--new N] [--out DIR]
-> engine.json in --out, $OUT or bench/results; --help for --quick and --smoke.
`--smoke` runs tiny shapes (on a CPU: with TRITON_INTERPRET=1) to check the plumbing, into a temporary folder.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("engine"))
