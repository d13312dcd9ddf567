#!/bin/bash
# Two 1-thread runs at once against one 2-thread run: the training tokens/s each way (compare.py's
# --jobs default), on three configs, in interleaved rounds (the order flipped every other round).
#
#   bash results/jobs-cpu-2026-11-29/run.sh > results/jobs-cpu-2026-11-29/bench.log 2>&1
#
# CACHE, if set, is the prepared-data folder (default data/cache). Nothing else may run meanwhile.
set -eu
ROUNDS=${ROUNDS:-2}
CACHE=${CACHE:-data/cache}
bench() {  # bench THREADS CONFIG ARGS...: one bench.py run, its tokens/s line
    local threads=$1 config=$2; shift 2
    OMP_NUM_THREADS=$threads python bench.py --config "$config" --iters 20 --warmup 5 \
        --data.cache_dir="$CACHE" "$@" 2>&1 | grep '^tokens/s:' | tr -d ', ' | cut -d: -f2
}
one() { echo "one 2-thread run: $(bench 2 "$@") tokens/s"; }
two() {
    local a b
    a=$(mktemp) b=$(mktemp)
    bench 1 "$@" > "$a" & bench 1 "$@" > "$b" & wait
    echo "two 1-thread runs: $(cat "$a") + $(cat "$b") = $(( $(cat "$a") + $(cat "$b") )) tokens/s"
    rm -f "$a" "$b"
}
for spec in "configs/shakespeare.toml" "configs/scaling_cpu.toml" \
        "configs/scaling_cpu.toml --data.tokenizer=bpe:4096"; do
    echo "== $spec"
    for r in $(seq 1 "$ROUNDS"); do
        # shellcheck disable=SC2086  # spec holds a config and its options
        if (( r % 2 )); then one $spec; two $spec; else two $spec; one $spec; fi
    done
done
