"""Scratch (session 10, run at commit 525dd68, before model/sdpa.py existed): torch.profiler over 40 steps of the char recipe (train.py's set-up, bench.py's loop)."""
import sys, time
sys.path.insert(0, "/work/main")
import torch
from training.config import parse_config
from training.setup import build
from training.step import train_step
from training.schedule import get_lr
cfg = parse_config("configs/shakespeare_char_cpu.toml", {})
s = build(cfg)
args = (s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype)
for i in range(20): train_step(*args, get_lr(i, cfg.train))
t=time.perf_counter()
for i in range(40): train_step(*args, get_lr(i, cfg.train))
print("ms/step", (time.perf_counter()-t)/40*1000)
with torch.profiler.profile() as p:
    for i in range(40): train_step(*args, get_lr(i, cfg.train))
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
