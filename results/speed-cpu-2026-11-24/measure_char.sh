#!/bin/bash
# Issue 15, target 1 on session 8's machine: nanoGPT's CPU char recipe, whole runs side by side,
# interleaved: nanoGPT (3adf61e, float32), tinygpt float32, tinygpt bf16 autocast. Background work paused.
set -u
P=$(pgrep -f "/work/exp/train.py"); [ -n "$P" ] && kill -STOP $P
export TINYSHAKESPEARE_PATH=/work/shared/data/tinyshakespeare.txt
for i in 1 2; do
  (cd /tmp/nanogpt && /usr/bin/time -f "nanoGPT wall %e s maxrss %M KB" python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 > /tmp/s8/nano_$i.log 2>&1; tail -1 /tmp/s8/nano_$i.log; grep "step 2000" /tmp/s8/nano_$i.log)
  for dt in float32 bfloat16; do
    (cd /work/main && /usr/bin/time -f "tinygpt-$dt wall %e s maxrss %M KB" python train.py --config configs/shakespeare_char_cpu.toml --train.dtype=$dt --run-name char-cpu-s8-$dt-$i > /tmp/s8/tiny_${dt}_$i.log 2>&1; tail -1 /tmp/s8/tiny_${dt}_$i.log; grep -E "^done|step 2000" /tmp/s8/tiny_${dt}_$i.log | head -3)
  done
done
[ -n "$P" ] && kill -CONT $P
