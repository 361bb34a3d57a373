#!/usr/bin/env python3
"""Every attention implementation at every case, in one run: our fp8 prefill's SM90 fast path (notebook 07c), our
portable fp8 kernels, our bf16 path, SDPA without the bias on its cuDNN and on its flash kernel, FlexAttention and
FlashAttention-4 with the bias as a score-mod; prefill 8K x 64K, 2K x 8K, 1K x 4K and 4 x 512 x 2K (the last three as
CUDA-graph replays), decode B=32 at 64K, B=8 at 128K and B=1 at 64K (replays), a copy of the same bytes beside each
decode, then the attention grid of our kernels (`--no-grid` skips it). A peer that cannot run leaves a row saying why.
The suite is `inkling_fp8kv.bench.sm90_suite` (notebook 15c).

On the GPU box, from the repository root, after carrying .fa4a/.fa4b (made by ../shared/tools/fa4-carry.sh; without
them FA4 is recorded as not importable and the other peers are still measured):
    source bench/fa4-unpack.sh && PYTHONPATH=$PWD:$PYTHONPATH python bench/attention_sm90.py [--quick] [--out DIR]
-> attention_sm90.json in --out, $OUT or bench/results; --help for --quick and --smoke.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("sm90"))
