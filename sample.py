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
import os
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import torch

import runs
from config import ArgumentParser
from data.tokenizers import load_tokenizer
from errors import UserError
from model.checkpoint import load_checkpoint, load_model_state
from model.gpt import GPT


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """The prompt's token ids; raises :class:`UserError` for an empty prompt or one the tokenizer cannot encode."""
    if not prompt:
        raise UserError("the prompt is empty: give --prompt with some text (e.g. --prompt 'ROMEO:')")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise UserError(f"the prompt {prompt!r} encodes to no tokens: give a longer prompt")
    return ids


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` may not be shown yet.

    A trailing U+FFFD is half of a multi-byte character (BPE tokens can split one), and a
    suffix that begins a stop string may turn into that stop string with the next token.
    Only the last ``max(len(stop)) - 1`` characters and the trailing U+FFFD run are read.
    """
    body = text.rstrip("\ufffd")
    pending = len(text) - len(body)  # half a character: whatever it becomes may continue a stop
    held = pending
    for stop in stops:
        # The stop's start is looked for before the pending half character, which may be its next character.
        k = next((k for k in range(min(len(stop) - 1, len(body)), 0, -1) if body.endswith(stop[:k])), 0)
        held = max(held, pending + k if k else held)
    return held


class _SampleText:
    """One sample's text as its tokens arrive, decoded with the same work per token at any length.

    The text is never re-decoded from its start.  Only the token ids since the last point
    where the text decoded cleanly (``tail``; a BPE token can end in half a UTF-8 character,
    which decodes to a trailing U+FFFD) are decoded again, which relies on
    ``decode(a + b) == decode(a) + decode(b)`` whenever ``decode(a)`` does not end in U+FFFD
    (true of UTF-8 with replacement, and of one character per token).  Of the settled text
    only the last ``max(len(stop)) - 1`` characters are kept: a stop string not found before
    must end in the new text, so it starts at most that far back.  ``window`` is the end of
    the sample's text, from character ``start`` on; ``shown`` counts the characters yielded.
    (Tokens that go on decoding to a trailing U+FFFD -- invalid bytes, one after another --
    stay in ``tail`` and are decoded again until one decodes cleanly.)
    """

    def __init__(self, tokenizer, stops: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.keep = max((len(s) for s in stops), default=1) - 1
        self.tail: list[int] = []
        self.window, self.settled = "", 0  # window[:settled] is settled text, window[settled:] decodes tail
        self.start = self.shown = 0
        self.done = False

    def add(self, token: int) -> str:
        """Append one token id; return the text it lets us show ('' if none).  ``done`` once a stop is met."""
        self.tail.append(token)
        fresh = self.tokenizer.decode(self.tail)
        text = self.window[:self.settled] + fresh  # the sample's text from character self.start on
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.done = True
            return text[self.shown - self.start:cut]
        end = len(text) - _held_back(text, self.stops)
        piece = text[self.shown - self.start:end]
        self.shown = max(self.shown, self.start + end)
        self.window = text
        if not fresh.endswith("\ufffd"):  # a clean point: settle the text, keep only what a stop may need
            keep = min(len(text), self.keep)
            self.start += len(text) - keep
            self.window, self.settled, self.tail = text[len(text) - keep:], keep, []
        return piece

    def finish(self) -> str:
        """End the sample; return the text not shown yet ('' if it had already ended)."""
        piece = "" if self.done else self.window[self.shown - self.start:]
        self.done = True
        return piece


def stream_samples(
    model: GPT, tokenizer, prompt_ids: list[int], max_new_tokens: int, device: torch.device, num_samples: int = 1,
    stop: Sequence[str] = (), stop_token: int | None = None, **sampling,
) -> Iterator[list[str]]:
    """Continue ``prompt_ids`` ``num_samples`` times as one batch; yield each step's new text per sample.

    Each yield is a list of ``num_samples`` strings ('' where a sample has nothing new to
    show); joined, a sample's pieces are its continuation of the prompt.  A sample ends at
    ``stop_token`` (not shown), just before the first of the ``stop`` strings, or after
    ``max_new_tokens``; the batch ends when every sample has.  Text is shown only once it
    decodes cleanly and cannot be the start of a stop string (see :func:`_held_back`).  Each
    token costs the same whatever the length so far (see :class:`_SampleText`).  A
    ``KeyboardInterrupt`` while the model computes a step is re-raised after one last yield of
    the text held back, so the pieces then join to what ``max_new_tokens`` = the steps done
    would give.  ``sampling`` goes to :meth:`GPT.generate_stream` (temperature, top_k, top_p,
    greedy, generator, use_cache).
    """
    model.eval()
    idx = torch.tensor([prompt_ids] * num_samples, dtype=torch.long, device=device)  # (N, T)
    texts = [_SampleText(tokenizer, stop) for _ in range(num_samples)]
    steps = model.generate_stream(idx, max_new_tokens, stop_token=stop_token, **sampling)
    while True:
        try:
            next_ids = next(steps)  # (N,)
        except StopIteration:
            break
        except KeyboardInterrupt:  # Ctrl-C: end every sample where it stands, as max_new_tokens would
            yield [text.finish() for text in texts]
            raise
        pieces = [""] * num_samples
        for r, token in enumerate(next_ids.tolist()):
            if not texts[r].done:
                pieces[r] = texts[r].finish() if token == stop_token else texts[r].add(token)
        yield pieces
        if all(text.done for text in texts):
            return
    yield [text.finish() for text in texts]


def generate_text(
    model: GPT, tokenizer, prompt: str, max_new_tokens: int, device: torch.device,
    temperature: float = 1.0, top_k: int | None = None, greedy: bool = False,
    generator: torch.Generator | None = None, **options,
) -> Iterator[str]:
    """Yield the prompt, then one sample's generated text piece by piece as tokens arrive.

    The pieces always join to the prompt plus the decoded continuation (cut at a stop).
    ``options`` are those of :func:`stream_samples` (``top_p``, ``stop``, ``stop_token``,
    ``use_cache``).  Raises :class:`UserError` for an empty prompt or one the tokenizer cannot
    encode, before anything is yielded.
    """
    ids = encode_prompt(tokenizer, prompt)
    yield prompt
    for pieces in stream_samples(model, tokenizer, ids, max_new_tokens, device, temperature=temperature,
                                 top_k=top_k, greedy=greedy, generator=generator, **options):
        if pieces[0]:
            yield pieces[0]


def load_run(run_dir: Path, which: str, device: torch.device) -> tuple[GPT, object, dict]:
    """Load ``(model, tokenizer, checkpoint)`` from a run folder (``which`` is 'best' or 'last').

    Raises :class:`UserError` if the folder, its config, tokenizer or checkpoint is missing,
    corrupt, or disagrees with the others.
    """
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist: give --run runs/<run-name>")
    cfg = runs.load_run_config(run_dir)
    tokenizer = load_tokenizer(run_dir)
    path = run_dir / f"ckpt_{which}.pt"
    if which == "best" and not path.exists() and (run_dir / "ckpt_last.pt").exists():
        path = run_dir / "ckpt_last.pt"
    ckpt = load_checkpoint(path, map_location=device)
    if ckpt.get("tokenizer") != tokenizer.to_dict():
        raise UserError(f"{path} was trained with another tokenizer than {run_dir / 'tokenizer.json'}: restore the run's tokenizer.json")
    model = GPT(cfg.model)
    load_model_state(model, ckpt, source=str(path))
    return model.to(device).eval(), tokenizer, ckpt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse and check the command line; bad combinations raise :class:`UserError`."""
    p = ArgumentParser(prog="sample.py", description=__doc__)
    p.add_argument("--run", required=True, type=Path, help="Run folder, e.g. runs/untied.")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best", help="Which checkpoint (best = lowest val loss).")
    p.add_argument("--prompt", help="Text to continue (default: a newline).")
    p.add_argument("--prompt-file", type=Path, help="Read the prompt from this UTF-8 file instead of --prompt (default: none).")
    p.add_argument("--num-samples", type=int, default=1, help="How many samples to draw, generated together as one batch.")
    p.add_argument("--max-new-tokens", type=int, default=200,
                   help="Tokens to generate per sample; a long run says how long it will take, and Ctrl-C stops it.")
    # None, not 1.0: --greedy refuses an explicit --temperature, so "not given" must stay visible.
    p.add_argument("--temperature", type=float, default=None, help="Divide the logits by this, > 0 (default: 1.0).")
    p.add_argument("--top-k", type=int, default=None, help="Sample only among the k largest logits, k >= 1 (default: all tokens).")
    p.add_argument("--top-p", type=float, default=None,
                   help="Sample only from the nucleus: the fewest most likely tokens whose probability reaches p, "
                        "0 < p <= 1 (default: all tokens).")
    p.add_argument("--greedy", action="store_true", help="Take the argmax at every step (default: sample).")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="End a sample just before this text (not printed); may be given several times (default: none).")
    p.add_argument("--ignore-eot", action="store_true",
                   help="Go on past <|endoftext|> (gpt2 runs; default: a sample ends there).")
    p.add_argument("--no-cache", action="store_true",
                   help="Generate without the key/value cache: slower, the same text (default: with the cache).")
    p.add_argument("--seed", type=int, default=1337, help="Seed of the sampling noise: same seed, same text.")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps.")
    args = p.parse_args(argv)
    if args.prompt is not None and args.prompt_file is not None:
        raise UserError("give --prompt or --prompt-file, not both")
    if args.prompt_file is not None:
        if not args.prompt_file.is_file():
            raise UserError(f"prompt file {args.prompt_file} does not exist: check the path")
        try:
            args.prompt = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read prompt file {args.prompt_file} ({e}): give a readable UTF-8 text file") from None
    elif args.prompt is None:
        args.prompt = "\n"
    if args.prompt == "":
        raise UserError("the prompt is empty: give --prompt with some text (e.g. --prompt 'ROMEO:')")
    if args.top_k is not None and args.top_k < 1:
        raise UserError(f"--top-k must be >= 1, got {args.top_k}: omit it to sample from the whole vocabulary")
    if args.temperature is not None and not args.temperature > 0:
        raise UserError(f"--temperature must be > 0, got {args.temperature}: use --greedy for deterministic argmax decoding")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1], got {args.top_p}: 1 keeps the whole distribution, 0.9 a typical nucleus")
    if args.greedy and (args.top_k is not None or args.temperature is not None or args.top_p is not None):
        raise UserError("--greedy takes the argmax and ignores sampling: drop --top-k / --top-p / --temperature, or drop --greedy")
    if "" in args.stop:
        raise UserError("--stop '' would end every sample at once: give the text to stop at, e.g. --stop $'\\n\\n'")
    if args.num_samples < 1 or args.max_new_tokens < 1:
        raise UserError("--num-samples and --max-new-tokens must be >= 1")
    return args


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

    Once, at the first step after :data:`MEASURE_AFTER_S` seconds, the speed so far (steps/s,
    i.e. tokens/s per sample) gives the time ``max_new_tokens`` steps would take; past
    :data:`LONG_RUN_S` one ``# ...`` line says so and that Ctrl-C stops the run.  ``clock`` is
    a function returning seconds.
    """
    t0, told = clock(), False
    for step, pieces in enumerate(stream, 1):
        yield pieces
        elapsed = clock() - t0
        if not told and elapsed >= MEASURE_AFTER_S and elapsed > 0:
            told = True
            expected = max_new_tokens * elapsed / step
            if expected > LONG_RUN_S:
                print(f"# {max_new_tokens:,} new tokens at {step / elapsed:,.0f} tokens/s (the speed so far) take about "
                      f"{_duration(expected)}: Ctrl-C stops and prints what was generated so far", file=sys.stderr)


def print_samples(stream: Iterator[list[str]], prompt: str, num_samples: int) -> int:
    """Print the samples ``stream`` yields (see :func:`stream_samples`); return the exit status.

    One sample streams as it is generated; a batch is printed sample by sample once it is
    complete.  Ctrl-C (``KeyboardInterrupt``) ends the samples where they stand: they are
    printed as far as they got and the status is 130 (128 + SIGINT), as a shell reports.
    """
    texts: list[list[str]] = [[] for _ in range(num_samples)]  # pieces, joined once: no quadratic string growth
    interrupted = False
    if num_samples == 1:
        print(prompt, end="", flush=True)
    try:
        for pieces in stream:
            if num_samples == 1:
                print(pieces[0], end="", flush=True)
            else:
                for text, piece in zip(texts, pieces):
                    text.append(piece)
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
    return 0


def _quiet_stdout() -> None:
    """Point stdout at the null device, so the interpreter's final flush cannot raise BrokenPipeError again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured by a test): nothing to flush
        pass


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status (2 on bad input, 130 on Ctrl-C).

    A reader that stops reading (``sample.py | head``) ends the run quietly with status 0, as
    ``cat`` and ``grep`` do.
    """
    try:
        args = parse_args(argv)
        device = runs.pick_device(args.device)
        model, tokenizer, ckpt = load_run(args.run, args.checkpoint, device)
        print(f"# {args.run} step {ckpt['step']}, val loss {ckpt.get('val_loss')}, tie_embeddings={ckpt['tie_embeddings']}",
              file=sys.stderr)
        eot = getattr(tokenizer, "eot_token", None)
        if args.ignore_eot and eot is None:
            raise UserError(f"the {tokenizer.name} tokenizer has no end-of-text token: drop --ignore-eot")
        ids = encode_prompt(tokenizer, args.prompt)
        stream = stream_samples(
            model, tokenizer, ids, args.max_new_tokens, device, num_samples=args.num_samples, stop=args.stop,
            stop_token=None if args.ignore_eot else eot, temperature=args.temperature or 1.0, top_k=args.top_k,
            top_p=args.top_p, greedy=args.greedy, generator=torch.Generator().manual_seed(args.seed),
            use_cache=not args.no_cache,
        )
        return print_samples(announce_long_runs(stream, args.max_new_tokens), args.prompt, args.num_samples)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader closed the pipe: nobody is left to read the rest
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:  # Ctrl-C outside generation (loading the model, say): nothing to print
        print("# stopped by Ctrl-C", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
