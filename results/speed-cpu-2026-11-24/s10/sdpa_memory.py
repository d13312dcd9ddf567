"""Scratch (session 10, at commit 187ab06): peak RSS (VmHWM) of 60 char-recipe steps with the attention kernel forced: memk.py math|flash."""
import sys
sys.path.insert(0, "/work/main")
import model.sdpa as ms
if sys.argv[1] == "flash":
    ms.uses_math_kernel = lambda q: False
from training.config import parse_config
from training.setup import build
from training.step import train_step
cfg = parse_config("configs/shakespeare_char_cpu.toml", {"train": {"dtype": "bfloat16"}})
s = build(cfg)
args = (s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype)
def hwm(): return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024
print("built", hwm())
for i in range(60): train_step(*args, 1e-4)
print(sys.argv[1], "after 60 steps", hwm())
