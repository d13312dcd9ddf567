#!/bin/bash
# Issue 15 target 1, session 10: nanoGPT's char recipe vs tinygpt (plot on / off), whole 2000-step runs,
# interleaved, 2 rounds, the background experiment paused (SIGSTOP) throughout. Logs go to the folder $1.
# Run twice: with /tmp/s10 at 525dd68 plus the import and plot changes (measure_memory.log), and with
# /tmp/s10b at 187ab06, after model/sdpa.py (measure_after_sdpa.log).
set -u
out=${1:?usage: measure_char_pair.sh LOG_FOLDER}
mkdir -p "$out"
bash /tmp/pause.sh; trap "bash /tmp/resume.sh" EXIT
export TINYSHAKESPEARE_PATH=/work/shared/data/tinyshakespeare.txt
for i in 1 2; do
  (cd /tmp/nanogpt && /usr/bin/time -f "nanoGPT round $i wall %e s maxrss %M KB" python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 > $out/nano_$i.log 2>&1; tail -1 $out/nano_$i.log; grep "step 2000" $out/nano_$i.log)
  for plot in true false; do
    (cd /work/main && /usr/bin/time -f "tinygpt loss_plot=$plot round $i wall %e s maxrss %M KB" python train.py --config configs/shakespeare_char_cpu.toml --train.loss_plot=$plot --train.out_dir=$out/runs --run-name char-$plot-$i > $out/tiny_${plot}_$i.log 2>&1; tail -1 $out/tiny_${plot}_$i.log; grep -E "^done" $out/tiny_${plot}_$i.log)
  done
done
