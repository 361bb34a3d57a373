#!/usr/bin/env python3
"""The SM90 fp8 prefill fast path (notebook 07c) against the portable fp8 kernel, our bf16 path, SDPA without the bias,
FlexAttention and FlashAttention-4 with and without the score-mod, in one run, plus the attention grid of our kernels
with the committed launch configurations. The suite is `inkling_fp8kv.bench.sm90_suite` (notebook 15_bench).

On the GPU box, from the repository root, after carrying .fa4a/.fa4b (made by ../shared/tools/fa4-carry.sh; without
them FA4 is recorded as not importable and the other peers are still measured):
    source bench/fa4-unpack.sh && PYTHONPATH=$PWD:$PYTHONPATH python bench/attention_sm90.py [--quick] [--out DIR]
Writes DIR/attention_sm90.json (DIR: $OUT, else bench/results) and prints its tables.
`--smoke` runs tiny shapes (on a CPU: with TRITON_INTERPRET=1) to check the plumbing, into a temporary folder
(never bench/results).
"""
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # this checkout's package
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("sm90"))
