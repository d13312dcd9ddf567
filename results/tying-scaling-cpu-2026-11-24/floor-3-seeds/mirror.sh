#!/bin/bash
# Re-render the floor's grid report (3 paired seeds a cell, 5 in the default cell) from the committed runs:
# mirror results/tying-scaling-cpu-2026-11-24 with symlinks to every finished run except the 5-seed extension's (seed indices 3 and 4
# outside n_embd-128_tokenizer-gpt2), then let compare.py read the mirror (it trains nothing).
#
#   bash results/tying-scaling-cpu-2026-11-24/floor-3-seeds/mirror.sh /tmp/floorgrid && python compare.py /tmp/floorgrid
set -eu
out=${1:?usage: mirror.sh EMPTY_OR_NEW_FOLDER}
grid=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cp "$(dirname "$0")/grid.json" "$out/"
for cell in "$grid"/n_embd-*/; do
  cell=${cell%/}; name=${cell##*/}; mkdir -p "$out/$name"
  for run in "$cell"/*/; do
    run=${run%/}; r=${run##*/}
    if [[ $name != n_embd-128_tokenizer-gpt2 && $r =~ -s[34]$ ]]; then continue; fi
    [ -f "$run/summary.json" ] && ln -sfn "$run" "$out/$name/$r"
  done
done
