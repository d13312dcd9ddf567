import torch, time, statistics
import sys; sys.path.insert(0, "."); from core import hardware; hardware.keep_freed_memory_on_cpu()
V, C = 50257, 128
W = torch.randn(V, C); WT = W.t().contiguous()
def t(f, n=7):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1000
for r in (256, 512, 2048):
    x = torch.randn(r, C); g = torch.randn(r, V)
    print(r, "x@W.t() %.1f" % t(lambda: x @ W.t()), "x@WT %.1f" % t(lambda: x @ WT), "(W@x.t()) %.1f" % t(lambda: W @ x.t()),
          "WT.contig %.1f" % t(lambda: W.t().contiguous()), "g@WT.t() %.1f" % t(lambda: g @ WT.t()), "gT@x(WT-layout) %.1f" % t(lambda: x.t() @ g))
