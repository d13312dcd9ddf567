"""Timing generation for ``bench.py --generate`` / ``--stream``: tokens/s with and without the KV cache, streaming.

Each step's ids are copied to the CPU inside the timer (that waits for the GPU), so a step is
timed in full; the streaming figures also split off what ``model.generation.stream_samples``
spends outside the model (decoding text).  Prints the figures; writes nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import torch

from model.generation import stream_samples
from model.gpt import GPT


def time_generation(
    model: GPT, prompt: torch.Tensor, new_tokens: int, use_cache: bool
) -> tuple[list[float], torch.Tensor]:
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
    print(
        f"generation:      {new_tokens} new tokens after a 1-token prompt, batch 1, greedy; "
        f"block_size {block_size}, so {max(0, new_tokens - block_size)} steps slide the window"
    )
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
        detail = ", ".join(
            f"{label} {statistics.median(ts) * 1000:.1f} ms"
            for label, ts in (("within the window", inside), ("sliding", past))
            if ts
        )
        label = "with cache:     " if use_cache else "without cache:  "
        print(
            f"{label} {medians[use_cache]:,.1f} tokens/s, median of {repeats} runs "
            f"({', '.join(f'{x:,.1f}' for x in per_run)}); median step: {detail}"
        )
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
    print(
        f"streaming:       sample.py's stream_samples (KV cache, text decoded as it streams), batch 1, greedy, "
        f"{tokenizer.name} tokenizer"
    )
    time_streaming(model, tokenizer, device, 8)  # warm-up
    for n in lengths:
        runs_ = [time_streaming(model, tokenizer, device, n) for _ in range(repeats)]
        speeds = [n / total for total, _ in runs_]
        decoding = statistics.median((total - in_model) / n * 1e6 for total, in_model in runs_)
        label = f"  {n:,} tokens:".ljust(17)
        print(
            f"{label}{statistics.median(speeds):,.1f} tokens/s, median of {repeats} runs "
            f"({', '.join(f'{x:,.1f}' for x in speeds)}); decoding {decoding:,.1f} us/token"
        )
