#!/bin/bash
# Issue 15 measurements, with the background experiment paused. Before = /tmp/exp-tree4 (a copy of commit c6aecf3),
# after = /work/main, the working tree, which was at commit 0cd06f6 when this ran. nanoGPT = /tmp/nanogpt (3adf61e).
set -u
[ -x /tmp/pause.sh ] && /tmp/pause.sh STOP  # pauses a background experiment, if one runs
export TINYSHAKESPEARE_PATH=/work/shared/data/tinyshakespeare.txt
B="--data.cache_dir=/work/main/data/cache"
echo "== bench default, interleaved before/after x3  $(date -u +%T)"
for i in 1 2 3; do
  (cd /tmp/exp-tree4 && python bench.py --iters 20 $B 2>&1 | grep -E "ms/iter|peak" | sed 's/^/before /')
  (cd /work/main && python bench.py --iters 20 2>&1 | grep -E "ms/iter|peak" | sed 's/^/after  /')
done
echo "== bench char, interleaved before/after/nanoGPT x4  $(date -u +%T)"
"$(dirname "$0")/charab.sh" 4
echo "== whole runs, char recipe: nanoGPT, after, before x2  $(date -u +%T)"
for i in 1 2; do
  (cd /tmp/nanogpt && /usr/bin/time -f "nanoGPT wall %e s maxrss %M KB" python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 > /tmp/s6/nano_$i.log 2>&1; tail -1 /tmp/s6/nano_$i.log; grep "step 2000" /tmp/s6/nano_$i.log)
  (cd /work/main && /usr/bin/time -f "after wall %e s maxrss %M KB" python train.py --config configs/shakespeare_char_cpu.toml --run-name char-cpu-s6-after-$i > /tmp/s6/after_$i.log 2>&1; tail -1 /tmp/s6/after_$i.log; grep "^done" /tmp/s6/after_$i.log)
  (cd /tmp/exp-tree4 && /usr/bin/time -f "before wall %e s maxrss %M KB" python train.py --config configs/shakespeare_char_cpu.toml --run-name char-cpu-s6-before-$i $B --train.out_dir=/work/main/runs > /tmp/s6/before_$i.log 2>&1; tail -1 /tmp/s6/before_$i.log; grep "^done" /tmp/s6/before_$i.log)
done
echo "== whole default run, after  $(date -u +%T)"
(cd /work/main && /usr/bin/time -f "default after wall %e s maxrss %M KB" python train.py --run-name default-s6 > /tmp/s6/default_after.log 2>&1; tail -1 /tmp/s6/default_after.log; grep "^done" /tmp/s6/default_after.log)
echo "== end $(date -u +%T)"
[ -x /tmp/pause.sh ] && /tmp/pause.sh CONT
