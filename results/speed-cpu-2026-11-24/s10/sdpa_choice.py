"""Scratch (session 10, at commit 187ab06): ms/step of the char recipe: model.sdpa's choice vs PyTorch's (flash) vs an outer MATH context."""
import sys, time, statistics, contextlib
sys.path.insert(0, "/work/main")
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import model.sdpa as ms
from training.config import parse_config
from training.setup import build
from training.step import train_step
ov = {"train": {"dtype": "bfloat16"}}
if len(sys.argv) > 2:
    ov["model"] = {"block_size": int(sys.argv[2])}; ov["train"]["batch_size"] = int(sys.argv[3])
cfg = parse_config(sys.argv[1], ov)
s = build(cfg)
args = (s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype)
orig = ms.uses_math_kernel
variants = {"sdpa.py": (orig, contextlib.nullcontext), "torch-choice": (lambda q: False, contextlib.nullcontext),
            "outer-math": (lambda q: False, lambda: sdpa_kernel(SDPBackend.MATH))}
res = {}
for rnd in range(3):
    for name, (pick, ctx) in variants.items():
        ms.uses_math_kernel = pick
        with ctx():
            for i in range(5): train_step(*args, 1e-4)
            ts = []
            for i in range(30):
                t = time.perf_counter(); train_step(*args, 1e-4); ts.append(time.perf_counter() - t)
        res.setdefault(name, []).append(statistics.median(ts) * 1000)
print(sys.argv[1:], {k: [round(v, 2) for v in vs] for k, vs in res.items()})
