#!/bin/bash
# Does a cooldown branch equal the single run of its budget at this experiment's configuration?
# Trains the 0.5M budget of tied, tie-untie-cooldown and untied at lr 2e-3, seed 1337, as single
# uninterrupted warmup-stable-decay runs (one thread, as the experiment's runs) and compares each
# final val bpb and loss with the committed branch (0.5M/<arm>-lr0.002-s0), to the last digit.
#
#   bash results/tying-budget-cpu-2026-11-25/check_branch.sh ../tinygpt-budget   # the worktree of run.sh
#
# The runs use the worktree's code (commit cc7de3a) and prepared data; they go to a temporary folder.
set -eu
record="$PWD/results/tying-budget-cpu-2026-11-25"
tree="${1:?give the worktree the runs train in, e.g. ../tinygpt-budget}"
out=$(mktemp -d)
cd "$tree"
for arm in tied tie-untie-cooldown untied; do
    case "$arm" in
        tied) flags="--model.tie_embeddings=true" ;;
        tie-untie-cooldown) flags="--model.tie_embeddings=true --train.untie_at_cooldown=true" ;;
        untied) flags="--model.tie_embeddings=false" ;;
    esac
    OMP_NUM_THREADS=1 python train.py --config configs/scaling_cpu.toml --model.n_embd=128 \
        --data.tokenizer=bpe:4096 --data.cache_dir=data/cache --train.eval_interval=100 \
        --train.log_interval=50 --train.sample_tokens=0 --train.dtype=bfloat16 --train.lr_schedule=wsd \
        --train.learning_rate=0.002 --train.min_lr=0.0002 --train.seed=1337 --train.max_iters=244 \
        --train.lr_decay_iters=244 --train.final_eval_tokens=2000000 --train.out_dir="$out" \
        $flags --run-name "$arm" > "$out/$arm.log" 2>&1
done
python - "$out" "$record" <<'PY'
import json, sys
out, record = sys.argv[1:]
for arm in ("tied", "tie-untie-cooldown", "untied"):
    single = json.load(open(f"{out}/{arm}/summary.json"))
    branch = json.load(open(f"{record}/0.5M/{arm}-lr0.002-s0/summary.json"))
    same = all(single[k] == branch[k] for k in ("final_val_bpb", "final_val_loss"))
    print(f"{arm}: single run {single['final_val_bpb']!r}, branch {branch['final_val_bpb']!r} bpb: "
          f"{'identical' if same else 'DIFFERENT'}")
PY
