#!/usr/bin/env python3
"""Write-path benchmark: `store.qkvr_prep` with an fp8 (quant-on-store) vs a bf16 KV cache, 12 cases, on-hardware
checks and a launch-parameter sweep. The suite is `inkling_fp8kv.bench.write_suite` (notebook 15b).

On the GPU box, from the repository root (plain Python, no nbdev needed):
    PYTHONPATH=$PWD python bench/write_path.py [--quick] [--no-sweep] [--budget-s S] [--out DIR]
-> write_path.json in --out, $OUT or bench/results; --help for --quick and --smoke.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("write"))
