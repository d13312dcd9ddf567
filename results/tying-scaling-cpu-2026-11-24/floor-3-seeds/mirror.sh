#!/bin/bash
# Re-render the floor's grid report (3 paired seeds a cell, 5 in the default cell) from the committed runs:
# mirror the floor's 9 cells of results/tying-scaling-cpu-2026-11-24 with symlinks to their tuning runs and to
# the reported runs of seed indices 0-2 (0-4 in n_embd-128_tokenizer-gpt2), leaving out every later seed,
# then let compare.py read the mirror (it trains nothing). From the repository root:
#
#   bash results/tying-scaling-cpu-2026-11-24/floor-3-seeds/mirror.sh runs/floor-3-seeds && python compare.py runs/floor-3-seeds
set -eu
out=${1:?usage: mirror.sh EMPTY_OR_NEW_FOLDER}
grid=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cp "$(dirname "$0")/grid.json" "$out/"
for n_embd in 64 128 256; do
  for tokenizer in char bpe4096 gpt2; do
    name=n_embd-${n_embd}_tokenizer-$tokenizer; mkdir -p "$out/$name"
    seeds='-s[0-2]$'; [ "$name" = n_embd-128_tokenizer-gpt2 ] && seeds='-s[0-4]$'
    for run in "$grid/$name"/*/; do
      run=${run%/}; r=${run##*/}
      if [[ $r == tune-* || $r =~ $seeds ]] && [ -f "$run/summary.json" ]; then ln -sfn "$run" "$out/$name/$r"; fi
    done
  done
done
