"""Session 8: compare one batch's loss and per-parameter gradients of the default model with and
without materialised logits (``return_logits``); prints the worst relative gradient difference."""
import sys, torch
sys.path.insert(0, ".")
from training.config import parse_config
from training.setup import build
cfg = parse_config(None, {})
s = build(cfg)
m = s.model
x, y = s.data.get_batch("train", 16, 128, s.data_gen, s.device)
res = []
for rl in (True, False):
    m.zero_grad()
    _, loss = m(x, y, return_logits=rl); loss.backward()
    res.append((loss.item(), {n: p.grad.clone() for n, p in m.named_parameters()}))
print("loss", res[0][0], res[1][0])
worst = max(((res[0][1][n] - res[1][1][n]).norm() / res[0][1][n].norm()).item() for n in res[0][1])
print("worst relative grad diff", worst)
for n in res[0][1]:
    a, b = res[0][1][n], res[1][1][n]
    print(n, f"{((a - b).norm() / a.norm()).item():.2e}")
