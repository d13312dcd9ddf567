"""Session 8: train N (env, default 8) steps of the default config with ``train.KEY=VALUE``
overrides (``fused=0`` turns off fused AdamW) and print the loss every 10th step."""
import sys, torch
sys.path.insert(0, ".")
from training.config import parse_config
from training.setup import build
from training.step import train_step
from training.schedule import get_lr
ov = {"data": {"cache_dir": "/work/main/data/cache"}, "train": {}}
for kv in sys.argv[1:]:
    k, v = kv.split("=")
    if k == "fused": continue
    ov["train"][k] = v
cfg = parse_config(None, ov)
s = build(cfg)
if "fused=0" in sys.argv:
    for g in s.optimizer.param_groups: g["fused"] = False; g["foreach"] = True
out = []
for i in range(int(__import__("os").environ.get("N", 8))):
    r = train_step(s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype, get_lr(i, cfg.train))
    out.append(round(r.loss, 4)) if i % 10 == 9 else None
print(sys.argv[1:], out)
