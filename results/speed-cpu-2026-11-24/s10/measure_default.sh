#!/bin/bash
# Session 10, after model/sdpa.py: bench.py on the char recipe and the default config (2 rounds each), then the
# whole default run, the background experiment paused (SIGSTOP) throughout.
set -u
bash /tmp/pause.sh; trap "bash /tmp/resume.sh" EXIT
export TINYSHAKESPEARE_PATH=/work/shared/data/tinyshakespeare.txt
cd /work/main
for i in 1 2; do
  echo "== bench char round $i"; python bench.py --config configs/shakespeare_char_cpu.toml --iters 60 --warmup 10 | grep -E "ms/iter|tokens/s|peak"
  echo "== bench default round $i"; python bench.py --config configs/shakespeare.toml --iters 12 --warmup 3 | grep -E "ms/iter|tokens/s|peak"
done
echo "== default run"
/usr/bin/time -v python train.py --run-name default-s10 --train.out_dir=/tmp/s10c/runs > /tmp/s10c/default.log 2>&1
grep -E "^done|final val|Elapsed|Maximum resident" /tmp/s10c/default.log
