"""Interleaved A/B of train_step under two overrides of one config: median ms of each, and the ratio."""
import sys, statistics, time, torch, copy
sys.path.insert(0, ".")
from training.config import parse_config
from training.setup import build
from training.step import train_step
import model.head_loss as hl
conf, n = sys.argv[1], int(sys.argv[2])
modes = sys.argv[3:]  # e.g. head_loss=logits head_loss=chunked
cfg = parse_config(conf, {})
s = build(cfg)
cfgs, rows = [], []
for m in modes:
    hl_rows = None
    c = copy.deepcopy(cfg)
    for kv in m.split(";"):
        k, v = kv.split("=")
        if k == "rows": hl_rows = int(v); continue
        setattr(c.train, k, v)
    cfgs.append(c); rows.append(hl_rows)
times = {m: [] for m in modes}
for i in range(n + 2):
    for m, c, r in zip(modes, cfgs, rows):
        hl.SLICE_ELEMENTS = (r or 333) * cfg.model.vocab_size
        t0 = time.perf_counter(); train_step(s.step_model, s.optimizer, s.data, s.data_gen, c, s.device, s.amp_dtype, 1e-3)
        if i >= 2: times[m].append(time.perf_counter() - t0)
base = statistics.median(times[modes[0]])
for m in modes:
    med = statistics.median(times[m]); print(f"{m:30s} {med*1000:7.1f} ms  x{base/med:.3f} vs first")
