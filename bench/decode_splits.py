#!/usr/bin/env python3
"""The split-count rule of split-KV decode at batch sizes between the grid's (Hq 16, KV 64K), on one GPU.

For each batch size, times the decode with the split count `decode_num_splits` picks (rounding the programs per
launch down to at most `split_waves` per SM) and with the count rounded up instead (the rule before 2026-12-03), as
CUDA-graph replays. The suite is `inkling_fp8kv.bench.decode_splits_suite` (notebook 15c).

On the GPU box, from the repository root:
    PYTHONPATH=$PWD python bench/decode_splits.py [--quick] [--out DIR]
-> decode_splits.json in --out, $OUT or bench/results; --help for --quick and --smoke.
`--smoke` runs tiny shapes (on a CPU: with TRITON_INTERPRET=1) to check the plumbing, into a temporary folder.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("decode_splits"))
