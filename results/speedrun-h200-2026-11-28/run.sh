#!/bin/bash
# nanoGPT's GPU Shakespeare recipe on one H200, whole runs one after another in one round: nanoGPT's
# README command, tinygpt's same recipe (configs/shakespeare_char.toml, compiled as nanoGPT compiles),
# and the CPU speedrun's choices on that shape (record-choices.toml beside this script).
# From the repository root, with a nanoGPT checkout whose data/shakespeare_char/ is prepared:
#   NANOGPT=../nanoGPT OUT=output bash results/speedrun-h200-2026-11-28/run.sh
set -u
OUT=$(mkdir -p "${OUT:-h200-out}" && cd "${OUT:-h200-out}" && pwd); WORK=$(mktemp -d)
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
{ date -u; git log -1 --format='%h %s' 2>/dev/null; nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv 2>/dev/null
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"; nproc; } > "$OUT/env.txt" 2>&1
timeout "${LIMIT:-560}" python3 benchmarks/nanogpt_char.py --nanogpt "${NANOGPT:-../nanoGPT}" --recipe gpu --rounds 1 \
    --out "$WORK" --record results/speedrun-h200-2026-11-28/record-choices.toml 2>&1 | tee "$OUT/race.txt"
pkill -f -- "$WORK/runs"; pkill -f "train.py config/train_shakespeare_char.py"  # a child the limit left training
# The logs, curves and figure, and each tinygpt run's text files (no checkpoints), as they are.
cp "$WORK"/*.log "$WORK"/race.json "$WORK"/*.png "$OUT"/ 2>/dev/null
(cd "$WORK" && tar -czf "$OUT/tinygpt-runs.tar.gz" --exclude='*.pt' runs 2>/dev/null)
ls -la "$OUT"
