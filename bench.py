"""Benchmark training speed (tokens/s, ms/iter, peak memory, MFU) or generation speed, for a config on a device.

    python bench.py                                   # the default config on the best device
    python bench.py --config configs/shakespeare.toml --model.tie_embeddings=false --iters 20
    python bench.py --train.device=cuda --train.compile=true --model.n_layer=12 --model.n_head=12 \\
        --model.n_embd=768 --model.block_size=1024 --train.batch_size=16
    python bench.py --generate                        # generation with vs without the KV cache, 512 new tokens
    python bench.py --stream                          # streaming text as sample.py does, 100 and 10,000 new tokens
    python bench.py --config results/speedrun-cpu-2026-11-27/recipe.toml \
        --arms-file results/speedrun-cpu-2026-11-27/02-pieces/arms.toml --rounds 3   # arms, interleaved

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
with the length.  The generation timing itself lives in ``training/benchmark.py``.

``--arms-file`` times the training step of every arm of a ``compare.py`` arms file, in
``--rounds`` interleaved rounds (the order reversed every other round, so a drift in the
machine's speed falls on every arm alike), and ends with a table: each arm's median ms/iter over
the rounds and its step time over the first arm's, the median of the rounds' ratios.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

from core import hardware
from core.flops import checked_peak, mfu, peak_flops
from core.cli import ArgumentParser, run_command
from core.errors import UserError
from experiment.arms import load_arms_file
from experiment.grid.run import cell_overrides, cells_of, parse_axes
from model.sdpa import uses_math_kernel
from training.benchmark import bench_generation, bench_streaming
from training.config import parse_cli, parse_config
from training.schedule import get_lr
from training.setup import build
from training.step import train_step

# Config keys bench.py never reads (evaluation, checkpoints, the end-of-run sample, logging,
# wandb): offering them would suggest they change the figures.
NOT_BENCHED = (
    "wandb",
    "train.eval_interval",
    "train.eval_iters",
    "train.log_interval",
    "train.checkpoint_interval",
    "train.max_skipped_steps",
    "train.out_dir",
    "train.sample_prompt",
    "train.sample_tokens",
)


# The options one way of timing reads, by that way: given to another, each would be ignored in silence.
ONLY_FOR = {
    "--iters": "training",
    "--warmup": "training",
    "--profile": "training",
    "--measure-peak": "training",
    "--new-tokens": "--generate",
    "--stream-tokens": "--stream",
    "--rounds": "--arms-file",
}


def check_options_apply(argv: list[str]) -> None:
    """Raise :class:`UserError` (one line) for an option the chosen timing does not read: ``--iters`` with
    ``--generate``, ``--new-tokens`` without it, ``--repeats`` with neither ``--generate`` nor ``--stream``."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    modes = ({"--generate", "--stream"} & given) or {"training"}
    if "--arms-file" in given:
        modes = modes | {"--arms-file"}
    for option, mode in ONLY_FOR.items():
        if option in given and mode not in modes:
            where = "training steps, which --generate and --stream do not time" if mode == "training" else mode
            raise UserError(
                f"{option} applies to {where}: drop it" + ("" if mode == "training" else f", or add {mode}")
            )
    if "--repeats" in given and modes.isdisjoint({"--generate", "--stream"}):
        raise UserError("--repeats applies to --generate and --stream: drop it, or add one of them")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the figures and returns 0 (2 on bad input)."""
    parser = ArgumentParser(prog="bench.py", description=__doc__)
    parser.add_argument("--config", help="TOML file of config overrides (default: none, the built-in defaults).")
    parser.add_argument("--iters", type=int, default=10, help="Timed training steps.")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed steps first (allocation, compilation).")
    parser.add_argument(
        "--generate",
        action="store_true",
        help="Time generation with and without the KV cache instead of training (default: time training).",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="Time streaming text as sample.py does instead of training (default: time training).",
    )
    parser.add_argument("--new-tokens", type=int, default=512, help="--generate: tokens generated per run.")
    parser.add_argument(
        "--stream-tokens",
        type=int,
        nargs="+",
        default=[100, 10_000],
        metavar="N",
        help="--stream: new tokens per streaming run, one figure per value (default: 100 10000).",
    )
    parser.add_argument(
        "--measure-peak",
        action="store_true",
        help="On a CPU, measure the matmul peak that MFU is a fraction of again (it is measured once and "
        "cached; a busy machine measures it low), after the timed steps (default: the cached figure).",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="Run the timed training steps under torch.profiler and print where the step's time goes "
        "(the share in matmuls, the ops with the most self time) (default: no profile).",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="Time training once per value (repeat the option for a product of several keys), then "
        "print a table: e.g. --grid model.tie_embeddings=true,false --grid train.pad_vocab_multiple=1,64 "
        "(default: the one config).",
    )
    parser.add_argument(
        "--arms-file",
        type=Path,
        metavar="ARMS.toml",
        help="Time the training step of every arm of a compare.py arms file (one table per arm), then print "
        "a table with each arm's step time over the first arm's (default: the one config).",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="--arms-file: interleaved rounds, every arm once a round, the order reversed every other round "
        "(default 1).",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="--generate, --stream: timed runs per mode and length (the median is reported).",
    )

    def body() -> int:
        check_options_apply(sys.argv[1:] if argv is None else argv)
        return bench(*parse_cli(parser, argv, exclude=NOT_BENCHED))

    return run_command(body)


def attention_kernel(device: torch.device, amp_dtype: torch.dtype | None, block_size: int, compiled: bool) -> str:
    """Which SDPA kernel a training step at ``block_size`` tokens runs, in words (:mod:`model.sdpa` decides)."""
    if compiled:
        return "Inductor's choice (torch.compile)"
    q = torch.empty(1, 1, block_size, 1, dtype=amp_dtype or torch.float32, device=device, requires_grad=True)
    return (
        "math kernel (model/sdpa.py: faster here)" if uses_math_kernel(q) else "PyTorch's choice (flash where it can)"
    )


def bench(args, overrides: dict) -> int:
    """Build the config's training set-up exactly as train.py does, then time what ``args`` asks for.

    With ``--grid`` options, times training once per combination of their values (each a fresh
    set-up, compiled anew if ``train.compile``) and ends with a table of all of them.
    """
    if args.iters < 1 or args.warmup < 0 or args.new_tokens < 1 or args.repeats < 1 or min(args.stream_tokens) < 1:
        raise UserError("--iters, --new-tokens, --stream-tokens and --repeats must be >= 1 and --warmup >= 0")
    axes = parse_axes(args.grid, not_allowed=(), option="--grid")
    if axes and (args.generate or args.stream):
        raise UserError("--grid times training variants: drop --generate / --stream, or the --grid options")
    if args.arms_file is not None:
        return bench_arms(args, overrides)
    variants = (
        [cell.values for cell in cells_of(axes, Path())] if axes else [{}]
    )  # the grid's product, first axis outermost
    rows = []
    for i, values in enumerate(variants):
        if axes:
            print(
                f"\n[bench] variant {i + 1}/{len(variants)}: " + " ".join(f"{k}={v}" for k, v in values.items()),
                flush=True,
            )
        cfg = parse_config(args.config, cell_overrides(overrides, values))
        if args.generate or args.stream:
            return bench_inference(args, cfg)
        rows.append({**values, **bench_training(args, cfg)})
        release_device_memory()
    if axes:
        print_variant_table(rows, [a.key for a in axes])
    return 0


def bench_arms(args, overrides: dict) -> int:
    """``--arms-file``: every arm's training step in ``--rounds`` interleaved rounds, then the table.

    Raises :class:`UserError`, before any timing, for a missing or bad file, ``--rounds`` < 1, or
    ``--grid`` / ``--generate`` / ``--stream`` beside it.
    """
    if args.grid or args.generate or args.stream:
        raise UserError("--arms-file times the arms' training steps: drop --grid / --generate / --stream")
    if args.rounds < 1:
        raise UserError(f"--rounds must be >= 1, got {args.rounds}")
    if not args.arms_file.is_file():
        raise UserError(f"--arms-file {args.arms_file}: no such file; give a compare.py arms file's path")
    arms = load_arms_file(args.arms_file)
    configs = {name: parse_config(args.config, cell_overrides(overrides, values)) for name, values in arms.items()}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(args.rounds):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            print(f"\n[bench] round {r + 1}/{args.rounds}, arm {name}", flush=True)
            times[name].append(bench_training(args, configs[name])["ms_per_iter"])
            release_device_memory()
    print_arms_table(times)
    return 0


def print_arms_table(times: dict[str, list[float]]) -> None:
    """One Markdown row per arm: ms/iter in each round, their median, and the median over rounds of the
    arm's ms/iter over the first arm's in the same round (> 1: a slower step)."""
    first = next(iter(times.values()))
    print("\n| arm | ms/iter, each round | median | step time ÷ first arm's (median of rounds) |")
    print("|---|---|---|---|")
    for name, ms in times.items():
        ratio = statistics.median(m / f for m, f in zip(ms, first, strict=True))
        each = " / ".join(f"{m:.1f}" for m in ms)
        print(f"| {name} | {each} | {statistics.median(ms):.1f} | {ratio:.3f} |")


def release_device_memory() -> None:
    """Free the last variant's compiled graphs and cached CUDA memory, so each variant starts alike."""
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def bench_inference(args, cfg) -> int:
    """``--generate`` / ``--stream``: time generation on the config's seeded, untrained model."""
    s = build(cfg)
    cfg, device = s.cfg, s.device
    name = device_name(device)
    print(f"device:          {device} ({name})")
    print(model_line(cfg))
    if args.generate:
        bench_generation(s.model, device, args.new_tokens, args.repeats)
    if args.stream:
        bench_streaming(s.model, s.tokenizer, device, args.stream_tokens, args.repeats)
    return 0


def model_line(cfg) -> str:
    """The model's shape in one line."""
    mc = cfg.model
    return (
        f"model:           n_layer={mc.n_layer} n_head={mc.n_head} n_embd={mc.n_embd} block_size={mc.block_size} "
        f"vocab_size={mc.vocab_size} tie_embeddings={mc.tie_embeddings}"
    )


def bench_training(args, cfg) -> dict:
    """Time ``--iters`` training steps after ``--warmup``; print the figures; return them as a dict.

    MFU counts the real model's FLOPs (:meth:`GPT.flops_per_token`: the real vocabulary, one head
    tied or not) against :func:`core.flops.peak_flops` (a datasheet peak on a GPU, a measured
    matmul peak on a CPU), so a padded head or another head loss shows as a faster step, never as
    more FLOPs.
    """
    s = build(cfg)  # exactly train.py's set-up: data, seeded model, AdamW, optional compile
    cfg = s.cfg  # resolved: the head loss and padding that ran
    tc, mc, device, model = cfg.train, cfg.model, s.device, s.model
    # Memory an earlier variant of this process freed must not count as this one's peak (--grid, --arms-file).
    hardware.reset_peak_memory(device)
    tokens_per_step = tc.grad_accum_steps * tc.batch_size * mc.block_size
    # Other processes on the cores slow every step: said beside the numbers, as train.py says it (checked before
    # and after the timed steps, since a competitor may start or end between).
    contention = hardware.thread_contention(torch.get_num_threads()) if device.type == "cpu" else None
    times = []
    profiler = contextlib.nullcontext()
    for i in range(args.warmup + args.iters):
        if i == args.warmup:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            profiler = start_profiler(device) if args.profile else profiler
        sync(device)
        t0 = time.perf_counter()
        train_step(s, lr=get_lr(i, tc))
        sync(device)  # train_step's loss.item() already syncs; this makes the timing explicit
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    if args.profile:
        print_profile(profiler, device, args.iters)
    ms = statistics.median(times) * 1000
    tokens_per_s = tokens_per_step / (ms / 1000)
    kind = "CUDA allocated" if device.type == "cuda" else "process max RSS"
    peak_mem = hardware.peak_memory_mib(device)
    flops = model.flops_per_token(mc.block_size)
    peak = (
        peak_flops(device, s.amp_dtype, remeasure=True)
        if args.measure_peak
        else checked_peak(flops * tokens_per_s, device, s.amp_dtype)
    )
    name = device_name(device)
    print(
        f"device:          {device} ({name}), autocast {s.amp_dtype}, compile {tc.compile}, head loss {tc.head_loss}, "
        f"head rows padded to a multiple of {tc.pad_vocab_multiple}"
    )
    print(f"attention:       {attention_kernel(device, s.amp_dtype, mc.block_size, tc.compile)}")
    print(model_line(cfg))
    print(f"parameters:      {model.num_params():,} ({model.num_params(non_embedding=True):,} non-embedding)")
    print(
        f"tokens/step:     {tokens_per_step:,} (batch {tc.batch_size} x grad_accum {tc.grad_accum_steps} x block {mc.block_size})"
    )
    print(
        f"ms/iter:         {ms:.1f} median of {len(times)} (min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f})"
    )
    print(f"tokens/s:        {tokens_per_s:,.0f}")
    print(f"peak memory:     {peak_mem:,.0f} MiB ({kind})")
    print(f"MFU:             {mfu(flops, tokens_per_s, peak)}; {flops / 1e6:.1f} MFLOP/token, 6N + 12LHQT", flush=True)
    contention = contention or (hardware.thread_contention(torch.get_num_threads()) if device.type == "cpu" else None)
    if contention:
        print(f"{contention}: these timings are low", flush=True)
    share = None if peak is None or flops * tokens_per_s > peak.flops else 100 * flops * tokens_per_s / peak.flops
    return {"ms_per_iter": ms, "tokens_per_s": tokens_per_s, "mfu_percent": share, "peak_memory_mib": peak_mem}


def start_profiler(device: torch.device) -> torch.profiler.profile:
    """A started ``torch.profiler`` over the timed steps (CPU activity, and CUDA's on a GPU)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    profiler.__enter__()
    return profiler


def print_profile(profiler: torch.profiler.profile, device: torch.device, steps: int) -> None:
    """Stop ``profiler``; print the ops that took the most self time, and the share spent in matmuls.

    Matmuls are the ops whose name holds ``mm``, ``matmul``, ``linear`` or ``bmm`` (aten's names:
    ``aten::mm``, ``aten::addmm``, ``aten::bmm``): what the step spends outside them is the room
    that faster kernels, fusion or fewer passes over memory could win.
    """
    profiler.__exit__(None, None, None)
    events = profiler.key_averages()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    total = sum(getattr(e, attr) for e in events) or 1.0
    matmul = sum(getattr(e, attr) for e in events if any(k in e.key for k in ("mm", "matmul", "linear")))
    print(
        f"profile:         {steps} steps; {100 * matmul / total:.0f}% of self time in matmuls, "
        f"{100 * (1 - matmul / total):.0f}% outside them; the ops with the most self time:"
    )
    for e in sorted(events, key=lambda e: getattr(e, attr), reverse=True)[:15]:
        print(
            f"  {100 * getattr(e, attr) / total:5.1f}%  {getattr(e, attr) / steps / 1000:8.2f} ms/step  "
            f"{e.count // steps:4d} calls/step  {e.key}"
        )


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU and the threads torch uses on it."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()} threads"


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so a host clock times it in full."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def print_variant_table(rows: list[dict], keys: list[str]) -> None:
    """One Markdown row per variant: its values, ms/iter, tokens/s, MFU, peak memory."""
    print("\n| " + " | ".join(keys) + " | ms/iter | tokens/s | MFU | peak memory (MiB) |")
    print("|" + "---|" * (len(keys) + 4))
    for r in rows:
        mfu_text = "n/a" if r["mfu_percent"] is None else f"{r['mfu_percent']:.1f}%"
        print(
            "| "
            + " | ".join(str(r[k]) for k in keys)
            + f" | {r['ms_per_iter']:.1f} | {r['tokens_per_s']:,.0f} | {mfu_text} | {r['peak_memory_mib']:,.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
