#!/bin/bash
# The scaling view on a 2-core CPU: char, bpe:4096 and gpt2 tokens x n_embd 64/128/256 at 4 layers, arms tied,
# untied and untied-split, in the order the cells were run: the commands below are the whole experiment. Each
# reuses finished runs and resumes unfinished ones, so the script can be stopped (Ctrl-C or SIGTERM: the run in
# progress saves a checkpoint) and started again; it goes on where it stopped.
#
#   bash results/tying-scaling-cpu-2026-11-24/run.sh            # from the repository root (or a git worktree of it)
#
# Every cell trains with bfloat16 autocast (--train.dtype=bfloat16: bf16 matmuls, float32 weights, optimizer
# and losses), as on a GPU: on a CPU with AVX512-BF16 it halves the step (583 -> 311 ms on this config,
# results/bf16-cpu-2026-11-24/). Without native bf16 (check `grep -o avx512_bf16 /proc/cpuinfo`) expect no such
# gain; that was not measured.
#
# Every cell shares one tuning procedure: the grid 1e-3,2e-3,4e-3,8e-3 on seed 2337, then up to two steps past
# an edge an arm's best sits on (--lr-widen 2; the first cells ran with 1, and the second step was added for
# every cell after the n_embd-64 char cell's bests all sat on the first widened rate, 1.6e-2), and each cell
# runs on one code version (commit 0bc1042).
#
# The run folders live here, in results/tying-scaling-cpu-2026-11-24/<cell>/<run>/ (--train.out_dir=results), and
# each finished run's text files are committed (.gitignore keeps the checkpoints out), so the experiment
# survives a change of machine (docs/experiment.md, "Keeping runs in git"). After any step:
#
#   git add results/tying-scaling-cpu-2026-11-24/*/experiment.json $(dirname $(ls results/tying-scaling-cpu-2026-11-24/*/*/summary.json))
#
# The base config is configs/scaling_cpu.toml: the default config as it stood when the experiment started
# (500 steps of 16 x 128 tokens); compare.py refuses to mix configs in one folder, so the experiment keeps its own.
#
# To keep a cell on one code version while editing the tree, run this from a git worktree at the cell's
# commit and point OUT and CACHE at the main checkout's results/ and data/cache/.
# Its compare.py commands are those of the commit it names. From 2026-11-28 on, compare.py takes a mode
# first: a grid is `compare.py grid ... --axis KEY=V1,V2` and a budget axis `compare.py budgets ... --budgets`.
set -eu
# --lr-tuning one-seed: the design these cells ran, a rate picked on one seed (now named: --lr-grid alone
# trains every rate on every seed).
COMMON=(--config configs/scaling_cpu.toml --arms tied,untied,untied-split --lr-grid 1e-3,2e-3,4e-3,8e-3
        --lr-tuning one-seed --lr-widen 2 --margin 0.01 --train.sample_tokens=0 --train.dtype=bfloat16 --train.out_dir="${OUT:-results}"
        --data.cache_dir="${CACHE:-data/cache}")

# 1. The cell of the then default config (GPT-2 tokens, n_embd 128), 5 seeds.
python compare.py "${COMMON[@]}" --seeds 5 --name tying-scaling-cpu-2026-11-24/n_embd-128_tokenizer-gpt2 \
    --model.n_embd=128 --data.tokenizer=gpt2

# 2. The cheap cells: char and bpe:4096 at n_embd 64, 128 and 256 (minutes a run), 3 seeds.
python compare.py "${COMMON[@]}" --seeds 3 --name tying-scaling-cpu-2026-11-24 \
    --grid model.n_embd=64,128,256 --grid data.tokenizer=char,bpe:4096

# 3. The GPT-2 vocabulary at the other two sizes (about 10 minutes a run), which completes the floor.
python compare.py "${COMMON[@]}" --seeds 3 --name tying-scaling-cpu-2026-11-24 \
    --grid model.n_embd=64,128,256 --grid data.tokenizer=char,bpe:4096,gpt2

# 4. Step 3 rewrote the default cell's report.md from its first 3 seeds: rerunning step 1 trains
#    nothing and writes it again from all 5. The grid's report reads every finished run of a cell.
python compare.py "${COMMON[@]}" --seeds 5 --name tying-scaling-cpu-2026-11-24/n_embd-128_tokenizer-gpt2 \
    --model.n_embd=128 --data.tokenizer=gpt2

# 5. After the 3-seed floor above was complete (its report: results/tying-scaling-cpu-2026-11-24/floor-3-seeds/): every
#    cell to 5 paired seeds, the default cell's count, at each arm's tuned rate (no new tuning run). Decided after
#    the floor's results were read and applied to every cell alike, whatever its verdict.
python compare.py "${COMMON[@]}" --seeds 5 --name tying-scaling-cpu-2026-11-24 \
    --grid model.n_embd=64,128,256 --grid data.tokenizer=char,bpe:4096,gpt2

# The grid's report (no training): every cell as far as it got, gap_vs_size.png, the regression.
python compare.py "${OUT:-results}/tying-scaling-cpu-2026-11-24"
