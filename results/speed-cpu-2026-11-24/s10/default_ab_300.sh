#!/bin/bash
bash /tmp/pause.sh; trap "bash /tmp/resume.sh" EXIT
cd /work/main
for seed in 1 1337; do for k in flash math; do
  KERNEL=$k python /tmp/s10/kernel_run.py --train.max_iters=300 --train.lr_decay_iters=2000 --train.eval_interval=100 --train.seed=$seed --train.sample_tokens=0 --train.final_eval_tokens=0 --train.loss_plot=false --train.out_dir=/tmp/s10ab --run-name $k-s$seed 2>&1 | grep -E "^step (100|200|300)" | tr '\n' ' '; echo " <- $k seed $seed"
done; done
