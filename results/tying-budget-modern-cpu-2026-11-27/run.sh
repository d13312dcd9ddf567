#!/bin/bash
# The budget axis of the tying question under the modern recipe (declared in README.md beside this script):
# tied, untied and tie-untie-cooldown at the AdamW record's cell (configs/scaling_cpu.toml, n_embd 128,
# bpe:4096) with RoPE, RMSNorm, QK-norm, ReLU² and Muon, every arm at every learning rate on every seed,
# budgets 0.5M to 16M tokens as cooldown branches of one warmup-stable-decay trunk per arm x rate x seed.
# --lr-grid moves AdamW's rate and Muon's together (Muon at 10 times AdamW's, set below). It reuses
# finished runs and resumes unfinished ones, so it can be stopped (Ctrl-C or SIGTERM) and started again.
#
#   bash results/tying-budget-modern-cpu-2026-11-27/run.sh     # from the repository root
#
# Train from a git worktree pinned at the commit that declared the record, holding the runs committed
# so far, and copy finished trunks and their branches back now and then:
#
#   git worktree add ../tinygpt-modern <commit>
#   cp -r results/tying-budget-modern-cpu-2026-11-27/. ../tinygpt-modern/results/tying-budget-modern-cpu-2026-11-27/
#   (cd ../tinygpt-modern && bash results/tying-budget-modern-cpu-2026-11-27/run.sh)
#
# OUT and CACHE, if set, move the runs and the prepared data (by default results/ and data/cache/).
# Its compare.py commands are those of the commit it names. From 2026-11-28 on, compare.py takes a mode
# first: a grid is `compare.py grid ... --axis KEY=V1,V2` and a budget axis `compare.py budgets ... --budgets`.
set -eu
python compare.py --config configs/scaling_cpu.toml --model.n_embd=128 --data.tokenizer=bpe:4096 \
    --model.position=rope --model.norm=rmsnorm --model.qk_norm=true --model.mlp=relu2 \
    --train.optimizer=muon --train.learning_rate=2e-3 --train.min_lr=2e-4 --train.muon_learning_rate=0.02 \
    --arms tied,untied,tie-untie-cooldown --lr-grid 1e-3,2e-3,4e-3 --seeds 6 \
    --budgets 0.5M,1M,2M,4M,8M,16M --jobs 2 --margin 0.01 \
    --train.eval_interval=100 --train.log_interval=50 --train.sample_tokens=0 --train.dtype=float32 \
    --train.out_dir="${OUT:-results}" --data.cache_dir="${CACHE:-data/cache}" \
    --name tying-budget-modern-cpu-2026-11-27
