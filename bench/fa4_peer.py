#!/usr/bin/env python3
"""Attention against its peers at the serving shapes, in one run: our fp8 and bf16 kernels, SDPA without the bias,
FlexAttention with the bias as a score-mod, and FlashAttention-4 (flash-attn-4, what vLLM's Inkling runs on Hopper)
with and without the score-mod, each biased peer first checked against an fp32 reference; floors measured in the
same run. The suite is `inkling_fp8kv.bench.peers_suite` (notebook 15c).

On the GPU box, from the repository root, after carrying .fa4a/.fa4b (made by ../shared/tools/fa4-carry.sh; without
them FA4 is recorded as not importable and the other peers are still measured):
    source bench/fa4-unpack.sh && PYTHONPATH=$PWD:$PYTHONPATH python bench/fa4_peer.py [--quick] [--out DIR]
-> fa4_peer.json in --out, $OUT or bench/results; --help for --quick and --smoke.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("peers"))
