"""MFU variants for GPT-2 124M on one GPU: which change pays?  Scratch script kept with its results; run from the repo root:  python results/gpu-h100-2026-11-23/mfu_variants.py"""
import statistics, sys, time, json
import torch, torch.nn.functional as F
sys.path.insert(0, ".")
from model.gpt import GPT, GPTConfig, CausalSelfAttention

orig_attn_forward = CausalSelfAttention.forward

def fused_forward(self, x, cache=None):
    B, T, C = x.shape
    w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
    b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
    q, k, v = F.linear(x, w, b).split(C, dim=2)
    q = q.view(B, T, self.n_head, self.head_size).transpose(1, 2)
    k = k.view(B, T, self.n_head, self.head_size).transpose(1, 2)
    v = v.view(B, T, self.n_head, self.head_size).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return self.resid_dropout(self.out_proj(y))

def run(name, vocab=50257, batch=16, fused=False, tie=True, mode=None, iters=30, warmup=8):
    CausalSelfAttention.forward = fused_forward if fused else orig_attn_forward
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab, block_size=1024, n_layer=12, n_head=12, n_embd=768, tie_embeddings=tie)
    model = GPT(cfg).cuda()
    flops = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)).flops_per_token()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
    cm = torch.compile(model, mode=mode) if mode != "eager" else model
    x = torch.randint(0, 50257, (batch, 1024), device="cuda"); y = torch.randint(0, 50257, (batch, 1024), device="cuda")
    t_c = time.perf_counter()
    times = []
    for i in range(warmup + iters):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        with torch.autocast("cuda", torch.bfloat16):
            _, loss = cm(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        loss.item()
        torch.cuda.synchronize()
        if i == warmup - 1: compile_s = time.perf_counter() - t_c
        if i >= warmup: times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1000
    tps = batch * 1024 / (ms / 1000)
    mfu = 100 * flops * tps / 989e12
    r = dict(name=name, ms=round(ms, 2), tokens_s=round(tps), mfu=round(mfu, 1), compile_s=round(compile_s, 1),
             peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1))
    print(json.dumps(r), flush=True)
    del model, opt, cm; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    return r

if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    variants = {
        "base_b16": dict(),
        "pad_b16": dict(vocab=50304),
        "fused_b16": dict(fused=True),
        "base_b32": dict(batch=32),
        "pad_fused_b32": dict(vocab=50304, fused=True, batch=32),
        "pad_fused_b32_untied": dict(vocab=50304, fused=True, batch=32, tie=False),
        "pad_b32": dict(vocab=50304, batch=32),
        "pad_fused_b32_maxautotune": dict(vocab=50304, fused=True, batch=32, mode="max-autotune-no-cudagraphs"),
    }
    only = sys.argv[1:] or list(variants)
    for n in only:
        try:
            run(n, **variants[n])
        except Exception as e:
            print(n, "FAILED", repr(e)[:300], flush=True)
