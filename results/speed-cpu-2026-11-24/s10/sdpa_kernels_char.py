"""Scratch (session 10, run at commit 525dd68, before model/sdpa.py existed): ms/step of the char recipe with each SDPA backend on CPU (bf16 autocast / float32)."""
import sys, time, statistics
sys.path.insert(0, "/work/main")
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
from training.config import parse_config
from training.setup import build
from training.step import train_step
from training.schedule import get_lr
cfg = parse_config("configs/shakespeare_char_cpu.toml", {"train": {"dtype": sys.argv[1]}})
s = build(cfg)
args = (s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype)
res = {}
for rnd in range(3):
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)):
        with sdpa_kernel(be):
            for i in range(10): train_step(*args, 1e-4)
            ts = []
            for i in range(40):
                t = time.perf_counter(); train_step(*args, 1e-4); ts.append(time.perf_counter() - t)
        res.setdefault(name, []).append(statistics.median(ts) * 1000)
print(sys.argv[1], {k: [round(v, 2) for v in vs] for k, vs in res.items()})
