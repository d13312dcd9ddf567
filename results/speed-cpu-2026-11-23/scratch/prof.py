"""Profile N steps of train_step for a config: top ops by self CPU time."""
import sys, torch
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, ".")
from training.config import parse_config
from training.setup import build
from training.step import train_step
cfg = parse_config(sys.argv[1], {})
s = build(cfg)
for i in range(3):
    train_step(s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype, 1e-3)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for i in range(int(sys.argv[2])):
        train_step(s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype, 1e-3)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
