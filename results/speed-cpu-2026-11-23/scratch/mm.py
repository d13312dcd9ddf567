"""Session 8: median ms of the lm_head matmuls (forward, input grad, weight grad in both layouts)
and log_softmax for a 50,257 x 128 head at 256 / 512 / 2048 rows, float32 on the CPU."""
import torch, time, statistics
import sys; sys.path.insert(0, "."); from core import hardware; hardware.keep_freed_memory_on_cpu()
V, C = 50257, 128
W = torch.randn(V, C)
def t(f, n=7):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1000
for r in (256, 512, 2048):
    x = torch.randn(r, C); g = torch.randn(r, V); gw = torch.zeros(V, C); gwT = torch.zeros(C, V)
    print(r, "fwd x@W.T %.1f" % t(lambda: x @ W.t()),
          "g@W %.1f" % t(lambda: g @ W),
          "gw.addmm_(g.t(),x) %.1f" % t(lambda: gw.addmm_(g.t(), x)),
          "gwT.addmm_(x.t(),g) %.1f" % t(lambda: gwT.addmm_(x.t(), g)),
          "g.t()@x %.1f" % t(lambda: g.t() @ x),
          "logsm %.1f" % t(lambda: torch.log_softmax(g, 1)), "x per 2048 rows:", 2048 // r)
