#!/usr/bin/env python3
"""One attention layer (`layer.InklingAttention`): fp8 vs bf16 KV cache, and the layer against the sum of its own
kernels timed alone in the same run. The suite is `inkling_fp8kv.bench.layer_suite` (notebook 15b).

On the GPU box, from the repository root:
    PYTHONPATH=$PWD python bench/layer.py [--quick] [--out DIR]
-> layer.json in --out, $OUT or bench/results; --help for --quick and --smoke.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("layer"))
