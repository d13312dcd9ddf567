"""Scratch (session 10, run at commit 525dd68, before model/sdpa.py existed): ms/step, SDPA flash vs math on CPU, for a config and overrides: sdpa2.py CONFIG dtype [block_size batch]."""
import sys, time, statistics
sys.path.insert(0, "/work/main")
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
from training.config import parse_config
from training.setup import build
from training.step import train_step
ov = {"train": {"dtype": sys.argv[2]}}
if len(sys.argv) > 3:
    ov["model"] = {"block_size": int(sys.argv[3])}; ov["train"]["batch_size"] = int(sys.argv[4])
cfg = parse_config(sys.argv[1], ov)
s = build(cfg)
args = (s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype)
res = {}
n = int(sys.argv[5]) if len(sys.argv) > 5 else 15
for rnd in range(2):
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)):
        with sdpa_kernel(be):
            for i in range(3): train_step(*args, 1e-4)
            ts = []
            for i in range(n):
                t = time.perf_counter(); train_step(*args, 1e-4); ts.append(time.perf_counter() - t)
        res.setdefault(name, []).append(statistics.median(ts) * 1000)
print(sys.argv[1:], {k: [round(v, 1) for v in vs] for k, vs in res.items()})
