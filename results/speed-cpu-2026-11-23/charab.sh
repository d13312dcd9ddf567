#!/bin/bash
# Interleaved: before (HEAD c6aecf3 tree), after (working tree), nanoGPT; char recipe; ms/iter medians.
N=${1:-3}
for i in $(seq $N); do
  (cd /tmp/exp-tree4 && TINYSHAKESPEARE_PATH=/work/shared/data/tinyshakespeare.txt python bench.py --config configs/shakespeare_char_cpu.toml --iters 100 --data.cache_dir=/work/main/data/cache 2>&1 | grep ms/iter | sed 's/^/before /')
  (cd /work/main && python bench.py --config configs/shakespeare_char_cpu.toml --iters 100 2>&1 | grep ms/iter | sed 's/^/after  /')
  (cd /tmp/nanogpt && python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=110 --lr_decay_iters=2000 --dropout=0.0 --eval_interval=1000 --always_save_checkpoint=False 2>&1 | grep -E "^iter" | awk '{for(i=1;i<=NF;i++) if($i=="time") print $(i+1)}' | tr -d 'ms,' | tail -100 | sort -n | awk '{a[NR]=$1} END {print "nanoGPT median ms/iter", a[int(NR/2)]}')
done
