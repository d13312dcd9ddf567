#!/bin/bash
# The budget axis of the tying question (declared in README.md beside this script): tied, untied and
# tie-untie-cooldown at the bpe:4096 / n_embd 128 cell of configs/scaling_cpu.toml, every arm at
# every learning rate on every seed, budgets 0.5M to 16M tokens as cooldown branches of one
# warmup-stable-decay trunk per arm x rate x seed. It reuses finished runs and resumes unfinished ones,
# so it can be stopped (Ctrl-C or SIGTERM: every running train.py saves a checkpoint) and started
# again; it goes on trunk by trunk, seed by seed.
#
#   bash results/tying-budget-cpu-2026-11-25/run.sh     # from the repository root
#
# The runs train from a git worktree pinned at commit cc7de3a, beside the repository, holding the
# runs committed so far; collect.sh copies each finished trunk and its branches back:
#
#   git worktree add ../tinygpt-budget cc7de3a
#   cp -r results/tying-budget-cpu-2026-11-25/. ../tinygpt-budget/results/tying-budget-cpu-2026-11-25/
#   (cd ../tinygpt-budget && bash results/tying-budget-cpu-2026-11-25/run.sh)
#   bash results/tying-budget-cpu-2026-11-25/collect.sh ../tinygpt-budget   # now and then
#
# OUT and CACHE, if set, move the runs and the prepared data (by default results/ and data/cache/,
# which train.py records as given).
# Its compare.py commands are those of the commit it names. From 2026-11-28 on, compare.py takes a mode
# first: a grid is `compare.py grid ... --axis KEY=V1,V2` and a budget axis `compare.py budgets ... --budgets`.
set -eu
python compare.py --config configs/scaling_cpu.toml --model.n_embd=128 --data.tokenizer=bpe:4096 \
    --arms tied,untied,tie-untie-cooldown --lr-grid 1e-3,2e-3,4e-3 --seeds 6 \
    --budgets 0.5M,1M,2M,4M,8M,16M --jobs 2 --margin 0.01 \
    --train.eval_interval=100 --train.log_interval=50 --train.sample_tokens=0 --train.dtype=bfloat16 \
    --train.out_dir="${OUT:-results}" --data.cache_dir="${CACHE:-data/cache}" \
    --name tying-budget-cpu-2026-11-25
