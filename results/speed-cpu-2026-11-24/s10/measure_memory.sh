#!/bin/bash
# Issue 15 target 1 memory, session 10: nanoGPT's char recipe vs tinygpt (plot on / off), whole 2000-step runs,
# interleaved, 2 rounds, the background experiment paused (SIGSTOP) throughout.
set -u
bash /tmp/pause.sh; trap "bash /tmp/resume.sh" EXIT
export TINYSHAKESPEARE_PATH=/work/shared/data/tinyshakespeare.txt
for i in 1 2; do
  (cd /tmp/nanogpt && /usr/bin/time -f "nanoGPT round $i wall %e s maxrss %M KB" python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 > /tmp/s10/nano_$i.log 2>&1; tail -1 /tmp/s10/nano_$i.log; grep "step 2000" /tmp/s10/nano_$i.log)
  for plot in true false; do
    (cd /work/main && /usr/bin/time -f "tinygpt loss_plot=$plot round $i wall %e s maxrss %M KB" python train.py --config configs/shakespeare_char_cpu.toml --train.loss_plot=$plot --train.out_dir=/tmp/s10/runs --run-name char-$plot-$i > /tmp/s10/tiny_${plot}_$i.log 2>&1; tail -1 /tmp/s10/tiny_${plot}_$i.log; grep -E "^done" /tmp/s10/tiny_${plot}_$i.log)
  done
done
