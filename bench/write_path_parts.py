#!/usr/bin/env python3
"""Where the tiled write path spends its time at 16,384 tokens: the same launch whole, restricted to its K/V
programs and restricted to its q + logit programs. The suite is `inkling_fp8kv.bench.write_parts_suite` (notebook 15b).

On the GPU box, from the repository root:
    PYTHONPATH=$PWD python bench/write_path_parts.py [--quick] [--out DIR]
-> write_path_parts.json in --out, $OUT or bench/results; --help for --quick and --smoke.
"""
import sys
from inkling_fp8kv.bench import script_main

if __name__ == "__main__": sys.exit(script_main("write_parts"))
