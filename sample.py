"""Generate text from a trained run folder, streaming tokens as they come.

    python sample.py --run runs/untied --prompt "ROMEO:" --top-k 50
    python sample.py --run runs/untied --prompt "ROMEO:" --greedy
    python sample.py --run runs/untied --prompt "ROMEO:" --top-p 0.9 --temperature 0.8 --stop $'\\n\\n'
    python sample.py --run runs/untied --prompt-file prompt.txt --num-samples 3 --max-new-tokens 300 --seed 7

Everything needed (config, tokenizer, checkpoint) is read from the run folder.  Decoding
has no softmax: ``--greedy`` takes the argmax of the logits; otherwise the next token is a
Gumbel-max draw from ``logits / temperature`` over the ``--top-k`` largest and the ``--top-p``
nucleus (``model/sampling.py``).  Generation keeps a key/value cache (``--no-cache`` turns it
off: slower, same text).  A sample ends at ``--max-new-tokens``, at ``<|endoftext|>`` (gpt2,
unless ``--ignore-eot``) or just before a ``--stop`` string.  ``--num-samples N`` draws the N
samples together as one batch.  The same ``--seed`` gives the same text.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from core import hardware
from core.cli import ArgumentParser, run_command
from core.errors import UserError
from model.generation import encode_prompt, stream_samples
from model.sampling import check_sampling
from training import runs
from training.config import check_seed


def _parser() -> ArgumentParser:
    """sample.py's options."""
    p = ArgumentParser(prog="sample.py", description=__doc__)
    p.add_argument("--run", required=True, type=Path, help="Run folder, e.g. runs/untied.")
    p.add_argument(
        "--checkpoint", choices=("best", "last"), default="best", help="Which checkpoint (best = lowest val loss)."
    )
    p.add_argument("--prompt", help="Text to continue (default: a newline).")
    p.add_argument(
        "--prompt-file", type=Path, help="Read the prompt from this UTF-8 file instead of --prompt (default: none)."
    )
    p.add_argument(
        "--num-samples", type=int, default=1, help="How many samples to draw, generated together as one batch."
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=200,
        help="Tokens to generate per sample; a long run says how long it will take, and Ctrl-C stops it.",
    )
    # None, not 1.0: --greedy refuses an explicit --temperature, so "not given" must stay visible.
    p.add_argument("--temperature", type=float, default=None, help="Divide the logits by this, >= 1e-6 (default: 1.0).")
    p.add_argument(
        "--top-k", type=int, default=None, help="Sample only among the k largest logits, k >= 1 (default: all tokens)."
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=None,
        help="Sample only from the nucleus: the fewest most likely tokens whose probability reaches p, "
        "0 < p <= 1 (default: all tokens).",
    )
    p.add_argument("--greedy", action="store_true", help="Take the argmax at every step (default: sample).")
    p.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="End a sample just before this text (not printed); may be given several times (default: none).",
    )
    p.add_argument(
        "--ignore-eot", action="store_true", help="Go on past <|endoftext|> (gpt2 runs; default: a sample ends there)."
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="Generate without the key/value cache: slower, the same text (default: with the cache).",
    )
    p.add_argument("--seed", type=int, default=1337, help="Seed of the sampling noise: same seed, same text.")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps.")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse and check the command line (the prompt read from --prompt-file); bad combinations raise :class:`UserError`."""
    args = _parser().parse_args(argv)
    args.prompt = _prompt(args)
    _check_sampling_flags(args)
    return args


def _prompt(args: argparse.Namespace) -> str:
    """The prompt: --prompt, the text of --prompt-file, or a newline; refused when empty or unreadable."""
    if args.prompt is not None and args.prompt_file is not None:
        raise UserError("give --prompt or --prompt-file, not both")
    prompt = "\n" if args.prompt is None else args.prompt
    if args.prompt_file is not None:
        if not args.prompt_file.is_file():
            raise UserError(f"prompt file {args.prompt_file} does not exist: check the path")
        try:
            prompt = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(
                f"cannot read prompt file {args.prompt_file} ({e}): give a readable UTF-8 text file"
            ) from None
    if prompt == "" and args.prompt_file is not None:
        raise UserError(f"prompt file {args.prompt_file} is empty: put some text in it, or give --prompt 'ROMEO:'")
    if prompt == "":
        raise UserError("the prompt is empty: give --prompt with some text (e.g. --prompt 'ROMEO:')")
    return prompt


def _check_sampling_flags(args: argparse.Namespace) -> None:
    """Refuse sampling flags that are out of range or contradict each other (:class:`UserError`)."""
    if args.greedy and (args.top_k is not None or args.temperature is not None or args.top_p is not None):
        raise UserError(
            "--greedy takes the argmax and ignores sampling: drop --top-k / --top-p / --temperature, or drop --greedy"
        )
    check_sampling(
        1.0 if args.temperature is None else args.temperature, args.top_k, args.top_p, greedy=False, as_flags=True
    )
    if "" in args.stop:
        raise UserError("--stop '' would end every sample at once: give the text to stop at, e.g. --stop $'\\n\\n'")
    if args.num_samples < 1 or args.max_new_tokens < 1:
        raise UserError("--num-samples and --max-new-tokens must be >= 1")
    check_seed(args.seed, "--seed")


# A run expected to outlast LONG_RUN_S at the speed measured over its first MEASURE_AFTER_S
# says so on stderr: --max-new-tokens 1e9 is accepted, but should not look like a hang.
MEASURE_AFTER_S = 1.0
LONG_RUN_S = 60.0


def _duration(seconds: float) -> str:
    """``seconds`` in words a person reads at a glance: '45 s', '12 min', '3.5 h', '1,157 days'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


def announce_long_runs(stream: Iterator[list[str]], max_new_tokens: int, clock=time.monotonic) -> Iterator[list[str]]:
    """Pass ``stream`` (one item per generation step) through, saying on stderr if it will take long.

    The speed is measured from the end of the first step on: the first step also runs the
    prompt through the model and warms up the kernels, and counted in it made a 53 s run
    announce "about 2 min".  Once, at the first step :data:`MEASURE_AFTER_S` seconds after
    that, the time so far plus the steps left at that speed (steps/s, i.e. tokens/s per
    sample) is the expected time; past :data:`LONG_RUN_S` one ``# ...`` line says so and that
    Ctrl-C stops the run.  ``clock`` is a function returning seconds.
    """
    t0, first, told = clock(), None, False
    for step, pieces in enumerate(stream, 1):
        yield pieces
        now = clock()
        if first is None:
            first = now
            continue
        measured = now - first
        if not told and measured >= MEASURE_AFTER_S and measured > 0:
            told = True
            rate = (step - 1) / measured
            expected = now - t0 + (max_new_tokens - step) / rate
            if expected > LONG_RUN_S:
                print(
                    f"# {max_new_tokens:,} new tokens at {rate:,.0f} tokens/s (measured after the first) take about "
                    f"{_duration(expected)}: Ctrl-C stops and prints what was generated so far",
                    file=sys.stderr,
                )


def print_samples(stream: Iterator[list[str]], prompt: str, num_samples: int, why_empty: str = "") -> int:
    """Print the samples ``stream`` yields (see :func:`model.generation.stream_samples`); return the exit status.

    One sample streams as it is generated; a batch is printed sample by sample once it is
    complete.  A sample that ended before any text (its first tokens met a ``--stop`` string,
    say) would print as the prompt alone: a ``#`` line on stderr says it is empty, and
    ``why_empty`` why it may be.  Ctrl-C (``KeyboardInterrupt``) ends the samples where they
    stand: they are printed as far as they got and the status is 130 (128 + SIGINT), as a
    shell reports.
    """
    texts: list[list[str]] = [[] for _ in range(num_samples)]  # pieces, joined once: no quadratic string growth
    interrupted = False
    if num_samples == 1:
        print(prompt, end="", flush=True)
    try:
        for pieces in stream:
            for text, piece in zip(texts, pieces):
                text.append(piece)
            if num_samples == 1:
                print(pieces[0], end="", flush=True)
    except KeyboardInterrupt:
        interrupted = True
    if num_samples == 1:
        print()
    else:
        for i, text in enumerate(texts):
            print(f"--- sample {i + 1} ---\n{prompt}{''.join(text)}")
    if interrupted:
        print("# stopped by Ctrl-C: above is what was generated so far", file=sys.stderr)
        return 130
    empty = [i + 1 for i, text in enumerate(texts) if not any(text)]
    if empty:
        if num_samples == 1:
            subject = "the sample is"
        else:
            subject = f"sample {empty[0]} is" if len(empty) == 1 else f"samples {', '.join(map(str, empty))} are"
        print(f"# {subject} empty: nothing was generated after the prompt{why_empty}", file=sys.stderr)
    return 0


def _why_empty(stops: list[str], eot: int | None) -> str:
    """Why a sample may end before any text: the --stop strings and <|endoftext|> that end one."""
    causes = [f"--stop {', '.join(map(repr, stops))}"] if stops else []
    causes += ["<|endoftext|>"] if eot is not None else []
    fixes = (
        ["change the prompt"]
        + (["drop that --stop"] if stops else [])
        + (["add --ignore-eot"] if eot is not None else [])
    )
    return f" (it ended at once, at {' or '.join(causes)}: {', or '.join(fixes)})" if causes else ""


def _header(run: Path, ckpt: dict) -> str:
    """The ``#`` line naming the checkpoint: its step, val loss (4 decimals) and tie_embeddings."""
    loss = ckpt.get("val_loss")
    if isinstance(loss, (int, float)):
        loss_text = f"val loss {loss:.4f}"
    else:
        loss_text = "no val loss recorded" + (" (imported weights)" if ckpt.get("imported_from") else "")
    return f"# {run} step {ckpt['step']}, {loss_text}, tie_embeddings={ckpt['tie_embeddings']}"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status (2 on bad input, 130 on Ctrl-C).

    A reader that stops reading (``sample.py | head``) ends the run quietly with status 0
    (:func:`core.cli.run_command`).
    """

    def body() -> int:
        args = parse_args(argv)
        device = hardware.pick_device(args.device, option="--device")
        model, tokenizer, ckpt = runs.load_run(args.run, args.checkpoint, device)
        print(_header(args.run, ckpt), file=sys.stderr)
        eot = getattr(tokenizer, "eot_token", None)
        if args.ignore_eot and eot is None:
            raise UserError(f"the {tokenizer.name} tokenizer has no end-of-text token: drop --ignore-eot")
        ids = encode_prompt(tokenizer, args.prompt)
        stream = stream_samples(
            model,
            tokenizer,
            ids,
            args.max_new_tokens,
            device,
            num_samples=args.num_samples,
            stop=args.stop,
            stop_token=None if args.ignore_eot else eot,
            temperature=args.temperature or 1.0,
            top_k=args.top_k,
            top_p=args.top_p,
            greedy=args.greedy,
            generator=torch.Generator().manual_seed(args.seed),
            use_cache=not args.no_cache,
        )
        return print_samples(
            announce_long_runs(stream, args.max_new_tokens),
            args.prompt,
            args.num_samples,
            _why_empty(args.stop, None if args.ignore_eot else eot),
        )

    # Ctrl-C outside generation (loading the model, say): nothing to print but that.
    return run_command(body, on_interrupt="# stopped by Ctrl-C")


if __name__ == "__main__":
    sys.exit(main())
