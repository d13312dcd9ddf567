#!/bin/bash
# The scaling view on the 2-core CPU (issue 14's floor) and the default-config cell (issue 13), in the
# order they are being run: the commands below are the whole experiment. Each reuses finished runs and
# resumes unfinished ones, so the script can be stopped (Ctrl-C or SIGTERM: the run in progress saves a
# checkpoint) and started again in a later session; it goes on where it stopped.
#
#   bash results/tying-scaling-cpu-2026-11-24/run.sh            # from the repository root (or a git worktree of it)
#
# Every cell trains with bfloat16 autocast (--train.dtype=bfloat16: bf16 matmuls, float32 weights, optimizer
# and losses), as on a GPU: on a CPU with AVX512-BF16 it halves the step (session 8: 583 -> 311 ms on the
# default config, `python bench.py --config configs/shakespeare.toml --iters 12 --warmup 3 --train.dtype=...`).
# Without native bf16 (check `grep -o avx512_bf16 /proc/cpuinfo`) expect no such gain; that was not measured.
#
# Every cell shares one declared tuning procedure: the grid 1e-3,2e-3,4e-3,8e-3 on seed 2337, then one
# step past an edge an arm's best sits on (--lr-widen 1; from session 9 --lr-widen 2: up to two steps, because in
# the n_embd-64 char cell every arm's best sat on the first widened rate, 1.6e-2 -- a rule for every cell, which
# adds rates only where a best sits on an edge), and each cell runs on one code version. Session 5's
# two n_embd-64 cells (grid 2e-3,4e-3,8e-3 alone, commit 695b07c, whose rounding differs from today's) were
# superseded (their reports: results/scaling-cpu-s5-superseded/), so step 2 trains them again under this procedure.
#
# The run folders live here, in results/tying-scaling-cpu-2026-11-24/<cell>/<run>/ (--train.out_dir=results), and each
# finished run's text files are committed (.gitignore keeps the checkpoints out): a machine is not kept
# from one session to the next, and session 7's 12 tuning runs, kept in runs/, were lost with it. So,
# after any step, commit what finished (docs/experiment.md, "Keeping runs in git"):
#
#   git add results/tying-scaling-cpu-2026-11-24/*/experiment.json $(dirname $(ls results/tying-scaling-cpu-2026-11-24/*/*/summary.json))
#
# The base config is configs/scaling_cpu.toml: the default config as it stood when the experiment
# started (500 steps of 16 x 128 tokens; sessions 5-8 passed configs/shakespeare.toml, then identical).
# The default run has since moved on (session 9: batch 8, more steps), and compare.py refuses to mix
# configs in one folder, so the experiment keeps its own.
#
# To keep a cell on one code version while editing the tree, run this from a git worktree at the
# cell's commit with absolute paths: OUT=/path/to/repo/results CACHE=/path/to/repo/data/cache bash run.sh
set -eu
COMMON=(--config configs/scaling_cpu.toml --arms tied,untied,untied-split --lr-grid 1e-3,2e-3,4e-3,8e-3
        --lr-widen 2 --margin 0.01 --train.sample_tokens=0 --train.dtype=bfloat16 --train.out_dir="${OUT:-results}"
        --data.cache_dir="${CACHE:-data/cache}")

# 1. The default config's cell (GPT-2 tokens, n_embd 128): issue 13's tuned rerun, 5 seeds.
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

# 5. Session 11, after the floor above was complete (its report: results/tying-scaling-cpu-2026-11-24/floor-3-seeds/): every cell
#    to 5 paired seeds, the default cell's count, at each arm's tuned rate (no new tuning run). Decided after the
#    floor's results were read and applied to every cell alike, whatever its verdict.
python compare.py "${COMMON[@]}" --seeds 5 --name tying-scaling-cpu-2026-11-24 \
    --grid model.n_embd=64,128,256 --grid data.tokenizer=char,bpe:4096,gpt2

# The grid's report (no training): every cell as far as it got, gap_vs_size.png, the regression.
python compare.py "${OUT:-results}/scaling-cpu"
