import sys; sys.path.insert(0, "."); from core import hardware; hardware.keep_freed_memory_on_cpu()
import torch, time, statistics
V, C, N = 50257, 128, 2048
W = torch.randn(V, C) * 0.02; x = torch.randn(N, C); tg = torch.randint(V, (N,))
def t(f, n=5):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1000
def rowmajor(r):
    gw = torch.zeros(V, C); gx = torch.empty(N, C); tot = 0
    for s in range(0, N, r):
        xs, ts = x[s:s+r], tg[s:s+r]
        lp = torch.log_softmax(xs @ W.t(), 1); tot -= lp.gather(1, ts[:, None]).sum()
        g = lp.exp_(); g.scatter_add_(1, ts[:, None], g.new_full((ts.numel(), 1), -1.0))
        gx[s:s+r] = g @ W; gw.addmm_(g.t(), xs)
    return tot, gx, gw
def colmajor(r):
    gw = torch.zeros(V, C); gx = torch.empty(N, C); tot = 0
    for s in range(0, N, r):
        xs, ts = x[s:s+r], tg[s:s+r]
        lp = torch.log_softmax(W @ xs.t(), 0)  # (V, r)
        tot -= lp.gather(0, ts[None, :]).sum()
        g = lp.exp_(); g.scatter_add_(0, ts[None, :], g.new_full((1, ts.numel()), -1.0))
        gx[s:s+r] = g.t() @ W; gw.addmm_(g, xs)
    return tot, gx, gw
def colT(r):
    gw = torch.zeros(V, C); gx = torch.empty(N, C); tot = 0
    for s in range(0, N, r):
        xs, ts = x[s:s+r], tg[s:s+r]
        lp = torch.log_softmax((W @ xs.t()).t().contiguous(), 1)  # (r, V)
        tot -= lp.gather(1, ts[:, None]).sum()
        g = lp.exp_(); g.scatter_add_(1, ts[:, None], g.new_full((ts.numel(), 1), -1.0))
        gx[s:s+r] = g @ W; gw.addmm_(g.t(), xs)
    return tot, gx, gw
a = rowmajor(256); b = colmajor(256); c = colT(256)
print("agree", float(a[0]-b[0]), float((a[1]-b[1]).abs().max()), float((a[2]-b[2]).abs().max()), float(a[0]-c[0]))
for r in (128, 256, 512):
    print(r, "row %.0f" % t(lambda: rowmajor(r)), "col %.0f" % t(lambda: colmajor(r)), "colT %.0f" % t(lambda: colT(r)))
def full():
    xx = x.clone().requires_grad_(); ww = W.clone().requires_grad_()
    l = torch.nn.functional.cross_entropy(xx @ ww.t(), tg); l.backward()
print("full (autograd) %.0f" % t(full))
