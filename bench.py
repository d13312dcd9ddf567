"""Benchmark training speed (tokens/s, ms/iter, peak memory, MFU) or generation speed, for a config on a device.

    python bench.py                                   # the default config on the best device
    python bench.py --config configs/shakespeare.toml --model.tie_embeddings=false --iters 20
    python bench.py --train.device=cuda --train.compile=true --model.n_layer=12 --model.n_head=12 \\
        --model.n_embd=768 --model.block_size=1024 --train.batch_size=16
    python bench.py --generate                        # generation with vs without the KV cache, 512 new tokens
    python bench.py --stream                          # streaming text as sample.py does, 100 and 10,000 new tokens

It times exactly what ``train.py`` runs per step (``train.train_step``: forward, backward,
clipping and the AdamW update, on batches of the prepared corpus) after ``--warmup``
untimed steps, and prints the same lines every time so runs can be compared.  Quote the
median: these machines are shared and noisy.  Nothing is written to disk except the data
cache.

``--generate`` times ``GPT.generate_stream`` instead (greedy, batch 1, a 1-token prompt, the
seeded untrained model: speed does not depend on the weights), with and without the KV cache,
``--repeats`` times each, and checks that both produce the same tokens.  ``--stream`` streams
text as ``sample.py`` does (``model.generation.stream_samples``: the cached model, then decoding the
tokens and holding back partial characters) for each ``--stream-tokens`` length, ``--repeats``
times each, and reports tokens/s and the decoding's own cost per token, which does not grow
with the length.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterator

import torch

from core import hardware
from core.cli import ArgumentParser, run_command
from core.errors import UserError
from model.generation import stream_samples
from model.gpt import GPT
from model.sdpa import uses_math_kernel
from training.config import parse_cli, parse_config
from training.schedule import get_lr
from training.setup import build
from training.step import train_step

# Dense bf16 peak FLOP/s by device name substring (vendor datasheets, no sparsity).
PEAK_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,  # SXM; the PCIe card is lower (756e12)
    "A100": 312e12,
    "L4": 121e12,
    "A10G": 125e12,
    "RTX 4090": 165e12,
}

# Config keys bench.py never reads (evaluation, checkpoints, the end-of-run sample, logging,
# wandb): offering them would suggest they change the figures.
NOT_BENCHED = ("wandb", "train.eval_interval", "train.eval_iters", "train.log_interval", "train.checkpoint_interval",
               "train.max_skipped_steps", "train.out_dir", "train.sample_prompt", "train.sample_tokens")


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak of ``device`` from :data:`PEAK_FLOPS`, or None if unknown (CPU, other GPUs)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if "H100" in name and "PCIe" in name:
        return 756e12
    for key, flops in PEAK_FLOPS.items():
        if key in name:
            return flops
    return None


def time_generation(model: GPT, prompt: torch.Tensor, new_tokens: int, use_cache: bool) -> tuple[list[float], torch.Tensor]:
    """Greedy-generate ``new_tokens`` after ``prompt`` ``(1, T)``: (seconds per step, tokens ``(new_tokens,)``)."""
    times, tokens = [], []
    t0 = time.perf_counter()
    for next_id in model.generate_stream(prompt, new_tokens, greedy=True, use_cache=use_cache):
        tokens.append(next_id.cpu())  # the copy to the CPU waits for the GPU: each step is timed in full
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    return times, torch.cat(tokens)


def bench_generation(model: GPT, device: torch.device, new_tokens: int, repeats: int) -> None:
    """Print generation tokens/s with and without the KV cache (median of ``repeats`` runs each) and the ratio.

    Also the median ms per step within the context window (past the prompt's prefill) and
    past it, where the window slides and the cached path re-prefills it (see
    ``GPT.generate_stream``), and whether both paths produced the same tokens.
    """
    model.eval()
    block_size = model.config.block_size
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)  # (1, 1): token 0; the content does not matter
    print(f"generation:      {new_tokens} new tokens after a 1-token prompt, batch 1, greedy; "
          f"block_size {block_size}, so {max(0, new_tokens - block_size)} steps slide the window")
    medians, outputs = {}, {}
    for use_cache in (True, False):
        time_generation(model, prompt, min(new_tokens, 8), use_cache)  # warm-up: allocations, kernels
        per_run, steps = [], []
        for _ in range(repeats):
            times, outputs[use_cache] = time_generation(model, prompt, new_tokens, use_cache)
            per_run.append(new_tokens / sum(times))
            steps.append(times)
        medians[use_cache] = statistics.median(per_run)
        # Step i sees 1 + i tokens: steps 1 .. block_size-1 fit the window, steps >= block_size slide it.
        inside = [t for times in steps for t in times[1:block_size]]
        past = [t for times in steps for t in times[block_size:]]
        detail = ", ".join(f"{label} {statistics.median(ts) * 1000:.1f} ms" for label, ts in
                           (("within the window", inside), ("sliding", past)) if ts)
        label = "with cache:     " if use_cache else "without cache:  "
        print(f"{label} {medians[use_cache]:,.1f} tokens/s, median of {repeats} runs "
              f"({', '.join(f'{x:,.1f}' for x in per_run)}); median step: {detail}")
    print(f"speed-up:        {medians[True] / medians[False]:.1f}x with the cache")
    same = torch.equal(outputs[True], outputs[False])
    differ = "" if same else f" (first difference at token {int((outputs[True] != outputs[False]).nonzero()[0])})"
    print(f"same tokens:     {'yes' if same else 'no'}{differ}")


class _TimedModel:
    """``model`` as :func:`model.generation.stream_samples` drives it, adding up the seconds spent in its steps.

    Each step's ids are copied to the CPU inside the timer (that waits for the GPU), so what
    ``stream_samples`` spends outside the model -- decoding text -- is measured apart.
    """

    def __init__(self, model: GPT) -> None:
        self.model, self.seconds = model, 0.0

    def eval(self) -> _TimedModel:
        """Put the model in eval mode, as :meth:`torch.nn.Module.eval`."""
        self.model.eval()
        return self

    def generate_stream(self, *args, **kwargs) -> Iterator[torch.Tensor]:
        """:meth:`GPT.generate_stream`'s ids ``(B,)``, on the CPU, timed."""
        steps = self.model.generate_stream(*args, **kwargs)
        while True:
            t0 = time.perf_counter()
            next_ids = next(steps, None)
            if next_ids is None:
                return
            next_ids = next_ids.cpu()
            self.seconds += time.perf_counter() - t0
            yield next_ids


def time_streaming(model: GPT, tokenizer, device: torch.device, new_tokens: int) -> tuple[float, float]:
    """Stream ``new_tokens`` greedy tokens as text after a 1-token prompt: (seconds in all, seconds in the model)."""
    timed = _TimedModel(model)
    t0 = time.perf_counter()
    for _ in stream_samples(timed, tokenizer, [0], new_tokens, device, greedy=True):
        pass
    return time.perf_counter() - t0, timed.seconds


def bench_streaming(model: GPT, tokenizer, device: torch.device, lengths: list[int], repeats: int) -> None:
    """Print tokens/s of streaming text as ``sample.py`` does, for each of ``lengths`` new tokens.

    Also the median microseconds per token spent outside the model (decoding, holding back
    text), which does not grow with the length.  Median of ``repeats`` runs each.
    """
    print(f"streaming:       sample.py's stream_samples (KV cache, text decoded as it streams), batch 1, greedy, "
          f"{tokenizer.name} tokenizer")
    time_streaming(model, tokenizer, device, 8)  # warm-up
    for n in lengths:
        runs_ = [time_streaming(model, tokenizer, device, n) for _ in range(repeats)]
        speeds = [n / total for total, _ in runs_]
        decoding = statistics.median((total - in_model) / n * 1e6 for total, in_model in runs_)
        label = f"  {n:,} tokens:".ljust(17)
        print(f"{label}{statistics.median(speeds):,.1f} tokens/s, median of {repeats} runs "
              f"({', '.join(f'{x:,.1f}' for x in speeds)}); decoding {decoding:,.1f} us/token")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the figures and returns 0 (2 on bad input)."""
    parser = ArgumentParser(prog="bench.py", description=__doc__)
    parser.add_argument("--config", help="TOML file of config overrides (default: none, the built-in defaults).")
    parser.add_argument("--iters", type=int, default=10, help="Timed training steps.")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed steps first (allocation, compilation).")
    parser.add_argument("--generate", action="store_true",
                        help="Time generation with and without the KV cache instead of training (default: time training).")
    parser.add_argument("--stream", action="store_true",
                        help="Time streaming text as sample.py does instead of training (default: time training).")
    parser.add_argument("--new-tokens", type=int, default=512, help="--generate: tokens generated per run.")
    parser.add_argument("--stream-tokens", type=int, nargs="+", default=[100, 10_000], metavar="N",
                        help="--stream: new tokens per streaming run, one figure per value (default: 100 10000).")
    parser.add_argument("--repeats", type=int, default=3,
                        help="--generate, --stream: timed runs per mode and length (the median is reported).")
    return run_command(lambda: bench(*parse_cli(parser, argv, exclude=NOT_BENCHED)))


def attention_kernel(device: torch.device, amp_dtype: torch.dtype | None, block_size: int, compiled: bool) -> str:
    """Which SDPA kernel a training step at ``block_size`` tokens runs, in words (:mod:`model.sdpa` decides)."""
    if compiled:
        return "Inductor's choice (torch.compile)"
    q = torch.empty(1, 1, block_size, 1, dtype=amp_dtype or torch.float32, device=device, requires_grad=True)
    return "math kernel (model/sdpa.py: faster here)" if uses_math_kernel(q) else "PyTorch's choice (flash where it can)"


def bench(args, overrides: dict) -> int:
    """Build the config's training set-up exactly as train.py does, then time what ``args`` asks for."""
    if args.iters < 1 or args.warmup < 0 or args.new_tokens < 1 or args.repeats < 1 or min(args.stream_tokens) < 1:
        raise UserError("--iters, --new-tokens, --stream-tokens and --repeats must be >= 1 and --warmup >= 0")
    cfg = parse_config(args.config, overrides)
    s = build(cfg)  # exactly train.py's set-up: data, seeded model, AdamW, optional compile
    tc, mc, device, model = cfg.train, cfg.model, s.device, s.model
    tokens_per_step = tc.grad_accum_steps * tc.batch_size * mc.block_size
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()} threads"
    model_line = (f"model:           n_layer={mc.n_layer} n_head={mc.n_head} n_embd={mc.n_embd} block_size={mc.block_size} "
                  f"vocab_size={mc.vocab_size} tie_embeddings={mc.tie_embeddings}")
    if args.generate or args.stream:
        print(f"device:          {device} ({name})")
        print(model_line)
        if args.generate:
            bench_generation(model, device, args.new_tokens, args.repeats)
        if args.stream:
            bench_streaming(model, s.tokenizer, device, args.stream_tokens, args.repeats)
        return 0

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times = []
    for i in range(args.warmup + args.iters):
        if i == args.warmup and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        t0 = time.perf_counter()
        train_step(s.step_model, s.optimizer, s.data, s.data_gen, cfg, device, s.amp_dtype, get_lr(i, tc))
        sync()  # train_step's loss.item() already syncs; this makes the timing explicit
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)

    ms = statistics.median(times) * 1000
    tokens_per_s = tokens_per_step / (ms / 1000)
    kind = "CUDA allocated" if device.type == "cuda" else "process max RSS"
    peak_mem = f"{hardware.peak_memory_mib(device):,.0f} MiB ({kind})"
    flops = model.flops_per_token(mc.block_size)
    peak = peak_flops(device)
    mfu = f"{100 * flops * tokens_per_s / peak:.1f}% of {peak / 1e12:.0f} TFLOP/s bf16 peak" if peak else "n/a (no peak figure for this device)"
    print(f"device:          {device} ({name}), autocast {s.amp_dtype}, compile {tc.compile}, head loss {tc.head_loss}")
    print(f"attention:       {attention_kernel(device, s.amp_dtype, mc.block_size, tc.compile)}")
    print(model_line)
    print(f"parameters:      {model.num_params():,} ({model.num_params(non_embedding=True):,} non-embedding)")
    print(f"tokens/step:     {tokens_per_step:,} (batch {tc.batch_size} x grad_accum {tc.grad_accum_steps} x block {mc.block_size})")
    print(f"ms/iter:         {ms:.1f} median of {len(times)} (min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f})")
    print(f"tokens/s:        {tokens_per_s:,.0f}")
    print(f"peak memory:     {peak_mem}")
    print(f"MFU:             {mfu} ({flops / 1e6:.1f} MFLOP/token, 6N + 12LHQT)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
