#!/usr/bin/env python3
"""The attention grid of inkling_fp8kv.attention on one GPU, with its launch sweep and the peers of the same run.

A sweep around the committed `ATTN_CONFIGS` picks the launch configurations; every decode (B 1/8/32 x KV 8K..128K,
global and local layers) and prefill (2K/8K x 8K/64K global, 8K x 64K local) at Hq 16 and 8, fp8 and bf16, is timed
with the winners; then SDPA without the bias, FlexAttention with the bias as a score-mod and FlashAttention-4 (when
it imports) at the serving shapes. The suite is `inkling_fp8kv.bench.attention_grid_suite` (notebook 15c).

On the GPU box, from the repository root:
    PYTHONPATH=$PWD python bench/attention.py [--quick] [--out DIR]
-> attention.json in --out, $OUT or bench/results; --help for --quick and --smoke.
`--smoke` runs tiny shapes (on a CPU: with TRITON_INTERPRET=1) to check the plumbing, into a temporary folder.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("attention"))
