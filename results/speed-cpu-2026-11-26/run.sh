#!/bin/bash
# The default config's CPU training step, eager against torch.compile (Inductor's C++ backend), two
# interleaved rounds, then a profile of the eager step; from the repository root, on a quiet machine.
#
#   bash results/speed-cpu-2026-11-26/run.sh
set -eu
out=results/speed-cpu-2026-11-26/logs
mkdir -p "$out"
for r in 1 2; do
    python bench.py --iters 30 --warmup 5 > "$out/eager_$r.txt" 2>&1
    python bench.py --iters 10 --warmup 3 --train.compile=true > "$out/compile_$r.txt" 2>&1
done
python bench.py --iters 20 --warmup 5 --profile > "$out/profile.txt" 2>&1
