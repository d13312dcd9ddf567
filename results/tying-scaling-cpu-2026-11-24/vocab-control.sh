#!/bin/bash
# The vocabulary control and the default-budget verdict (declared in vocab-control.md), in the order
# they run. Each command reuses finished runs and resumes unfinished ones, so the script can be
# stopped (Ctrl-C or SIGTERM: the run in progress saves a checkpoint) and started again; it goes on
# where it stopped.
#
#   bash results/tying-scaling-cpu-2026-11-24/vocab-control.sh     # from the repository root
#
# OUT and CACHE set where the runs and the prepared data go (by default results/ and data/cache/), so
# that the script can run from a git worktree pinned at one commit while the tree moves on. Every run
# of this control trains from commit e5687d0 (one code version for all its cells; later commits change
# the head loss's rounding), from the repository root:
#
#   git worktree add ../tinygpt-e5687d0 e5687d0
#   (cd ../tinygpt-e5687d0 && OUT="$OLDPWD/results" CACHE="$OLDPWD/data/cache" \
#       bash results/tying-scaling-cpu-2026-11-24/vocab-control.sh)
#
# e5687d0's train.py records these paths as given (absolute here): rewrite them repository-relative
# before committing the finished runs (sed -E 's#/[^"]*/(results|data/cache|train.py)#\1#').
# Its compare.py commands are those of the commit it names. From 2026-11-28 on, compare.py takes a mode
# first: a grid is `compare.py grid ... --axis KEY=V1,V2` and a budget axis `compare.py budgets ... --budgets`.
set -eu
OUT="${OUT:-results}"
# --lr-tuning one-seed: the design these cells ran, a rate picked on one seed (now named: --lr-grid alone
# trains every rate on every seed).
COMMON=(--config configs/scaling_cpu.toml --arms tied,untied --lr-grid 1e-3,2e-3,4e-3,8e-3
        --lr-tuning one-seed --lr-widen 2 --margin 0.01 --train.sample_tokens=0 --train.dtype=bfloat16 --train.out_dir="$OUT"
        --data.cache_dir="${CACHE:-data/cache}")
GRID=tying-scaling-cpu-2026-11-24

# 1. bpe:32768 at n_embd 128, the GPT-2 cell's near-twin in share: 8 paired seeds.
python compare.py "${COMMON[@]}" --seeds 8 --name "$GRID" --grid model.n_embd=128 --grid data.tokenizer=bpe:32768

# 2. The GPT-2 cell at n_embd 128, from 5 to 8 paired seeds (no new tuning run).
python compare.py "${COMMON[@]}" --seeds 8 --name "$GRID" --grid model.n_embd=128 --grid data.tokenizer=gpt2

# 2b. untied-split in the same cell from 5 to 8 seeds too: every arm of a cell must share its seeds for the cell to
#     be read (not part of the declared readout, which is untied − tied). Run after step 2, before step 3.
python compare.py "${COMMON[@]}" --arms tied,untied,untied-split --seeds 8 --name "$GRID" --grid model.n_embd=128 \
    --grid data.tokenizer=gpt2

# 3. The rest of the share sweep inside BPE: bpe:1024 and bpe:16384, 8 paired seeds.
python compare.py "${COMMON[@]}" --seeds 8 --name "$GRID" --grid model.n_embd=128 --grid data.tokenizer=bpe:1024,bpe:16384

# 4. The default budget: the quick start's configuration, tied against untied, 5 paired seeds.
python compare.py --config configs/shakespeare.toml --arms tied,untied --lr-grid 1e-3,2e-3,4e-3,8e-3 --lr-widen 2 \
    --margin 0.01 --seeds 5 --train.sample_tokens=0 --train.out_dir="$OUT" --data.cache_dir="${CACHE:-data/cache}" \
    --name tying-default-cpu-2026-11-24
