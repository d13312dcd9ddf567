"""A/B variants of the char recipe step by monkeypatching: median ms of interleaved steps."""
import sys, statistics, time, torch, torch.nn.functional as F
sys.path.insert(0, ".")
from training.config import parse_config
from training.setup import build
from training.step import train_step
import model.gpt as gpt
cfg = parse_config(sys.argv[1], {}); n = int(sys.argv[2])
s = build(cfg)
orig_mlp = gpt.MLP.forward; orig_attn = gpt.CausalSelfAttention.forward
def mlp_exact(self, x): return self.dropout(self.down_proj(F.gelu(self.up_proj(x))))
def attn_fused(self, x, cache=None):
    B, T, C = x.shape
    w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
    b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]) if self.q_proj.bias is not None else None
    q, k, v = F.linear(x, w, b).split(C, dim=2)
    q = q.view(B, T, self.n_head, self.head_size).transpose(1, 2)
    k = k.view(B, T, self.n_head, self.head_size).transpose(1, 2)
    v = v.view(B, T, self.n_head, self.head_size).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.resid_dropout(self.out_proj(y.transpose(1, 2).contiguous().view(B, T, C)))
from torch.nn.attention import sdpa_kernel, SDPBackend
_ctx = [None]
def fused_adam(on):
    for g in s.optimizer.param_groups: g["fused"] = on; g["foreach"] = not on
def math_sdpa():
    _ctx[0] = sdpa_kernel(SDPBackend.MATH); _ctx[0].__enter__()
variants = {
  "fused_adam": lambda: fused_adam(True),
  "math_sdpa": math_sdpa,
  "base": lambda: None,
  "exact_gelu": lambda: setattr(gpt.MLP, "forward", mlp_exact),
  "fused_qkv": lambda: setattr(gpt.CausalSelfAttention, "forward", attn_fused),
  "both": lambda: (setattr(gpt.MLP, "forward", mlp_exact), setattr(gpt.CausalSelfAttention, "forward", attn_fused)),
  "threads1": lambda: torch.set_num_threads(1),
}
names = sys.argv[3:]
times = {k: [] for k in names}
for i in range(n + 3):
    for k in names:
        gpt.MLP.forward = orig_mlp; gpt.CausalSelfAttention.forward = orig_attn; torch.set_num_threads(2); fused_adam(False)
        if _ctx[0] is not None: _ctx[0].__exit__(None, None, None); _ctx[0] = None
        variants[k]()
        ts = []
        for j in range(5):
            t0 = time.perf_counter(); train_step(s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype, 1e-4); ts.append(time.perf_counter() - t0)
        if i >= 3: times[k].append(statistics.median(ts))
b = statistics.median(times[names[0]])
for k in names:
    m = statistics.median(times[k]); print(f"{k:12s} {m*1000:6.1f} ms  {b/m:.3f}x")
