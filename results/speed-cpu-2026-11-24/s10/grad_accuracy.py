"""Scratch (session 10, at commit 187ab06): on the trained default model (a ckpt) and real batches, each kernel's bf16-autocast gradient against float64."""
import copy, sys
sys.path.insert(0, "/work/main")
import torch
import model.sdpa as ms
from model.checkpoint import load_checkpoint
from training.config import parse_config
from training.setup import build
T = int(sys.argv[2]) if len(sys.argv) > 2 else 128
cfg = parse_config("configs/shakespeare.toml", {"model": {"block_size": 128}})
s = build(cfg)
ck = load_checkpoint(sys.argv[1])
s.model.load_state_dict(ck["model"])
g = torch.Generator().manual_seed(0)
x, y = s.data.get_batch("train", 16, T, g)
def grads(m, kernel, amp):
    ms.uses_math_kernel = (lambda q: True) if kernel == "math" else (lambda q: False)
    m.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        _, loss = m(x, y)
    loss.backward()
    return {n: p.grad.double().clone() for n, p in m.named_parameters()}, loss.item()
ref, l64 = grads(copy.deepcopy(s.model).double(), "flash", False)
for kernel in ("flash", "math"):
    gr, l = grads(s.model, kernel, True)
    num = sum((gr[n] - ref[n]).norm() ** 2 for n in ref) ** 0.5; den = sum(ref[n].norm() ** 2 for n in ref) ** 0.5
    attn = [n for n in ref if "q_proj" in n or "k_proj" in n]
    na = sum((gr[n] - ref[n]).norm() ** 2 for n in attn) ** 0.5 / sum(ref[n].norm() ** 2 for n in attn) ** 0.5
    print(f"T={T} {kernel}: loss {l:.5f} (f64 {l64:.5f}); grad rel err all {num / den:.4f}, q/k_proj {na:.4f}")
