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
    """
    held = len(text) - len(text.rstrip("\ufffd"))
    for stop in stops:
        held = max(held, next((k for k in range(min(len(stop) - 1, len(text)), 0, -1) if text.endswith(stop[:k])), 0))
    return held


def stream_samples(
    model: GPT, tokenizer, prompt_ids: list[int], max_new_tokens: int, device: torch.device, num_samples: int = 1,
    stop: Sequence[str] = (), stop_token: int | None = None, **sampling,
) -> Iterator[list[str]]:
    """Continue ``prompt_ids`` ``num_samples`` times as one batch; yield each step's new text per sample.

    Each yield is a list of ``num_samples`` strings ('' where a sample has nothing new to
    show); joined, a sample's pieces are its continuation of the prompt.  A sample ends at
    ``stop_token`` (not shown), just before the first of the ``stop`` strings, or after
    ``max_new_tokens``; the batch ends when every sample has.  Text is shown only once it
    decodes cleanly and cannot be the start of a stop string (see :func:`_held_back`).
    ``sampling`` goes to :meth:`GPT.generate_stream` (temperature, top_k, top_p, greedy,
    generator, use_cache).
    """
    model.eval()
    idx = torch.tensor([prompt_ids] * num_samples, dtype=torch.long, device=device)  # (N, T)
    new: list[list[int]] = [[] for _ in range(num_samples)]
    shown = [0] * num_samples  # characters of each sample's text already yielded
    done = [False] * num_samples
    for next_ids in model.generate_stream(idx, max_new_tokens, stop_token=stop_token, **sampling):
        pieces = [""] * num_samples
        for r, token in enumerate(next_ids.tolist()):
            if done[r]:
                continue
            if token == stop_token:
                done[r] = True
                pieces[r] = tokenizer.decode(new[r])[shown[r]:]
                continue
            new[r].append(token)
            text = tokenizer.decode(new[r])
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                done[r] = True
                pieces[r] = text[shown[r]:cut]
            else:
                end = len(text) - _held_back(text, stop)
                pieces[r], shown[r] = text[shown[r]:end], max(shown[r], end)
        yield pieces
        if all(done):
            return
    yield ["" if done[r] else tokenizer.decode(new[r])[shown[r]:] for r in range(num_samples)]


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
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, type=Path, help="Run folder, e.g. runs/untied.")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best", help="Which checkpoint (best = lowest val loss).")
    p.add_argument("--prompt", help="Text to continue (default: a newline).")
    p.add_argument("--prompt-file", type=Path, help="Read the prompt from this file instead.")
    p.add_argument("--num-samples", type=int, default=1, help="How many samples to draw, generated together as one batch.")
    p.add_argument("--max-new-tokens", type=int, default=200, help="Tokens to generate per sample.")
    p.add_argument("--temperature", type=float, default=None, help="Divide the logits by this (> 0; default 1.0).")
    p.add_argument("--top-k", type=int, default=None, help="Sample only among the k largest logits (k >= 1; default: all).")
    p.add_argument("--top-p", type=float, default=None,
                   help="Sample only from the nucleus: the fewest most likely tokens whose probability reaches p (0 < p <= 1; default: all).")
    p.add_argument("--greedy", action="store_true", help="Take the argmax at every step (deterministic; no sampling).")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="End a sample just before this text (not printed); may be given several times.")
    p.add_argument("--ignore-eot", action="store_true",
                   help="Go on past <|endoftext|> (gpt2 runs; by default a sample ends there).")
    p.add_argument("--no-cache", action="store_true", help="Generate without the key/value cache (slower; the same text).")
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


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status (2 on bad input)."""
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
        if args.num_samples == 1:  # one sample streams as it is generated
            print(args.prompt, end="", flush=True)
            for pieces in stream:
                print(pieces[0], end="", flush=True)
            print()
        else:  # a batch is printed sample by sample once it is complete
            texts = [""] * args.num_samples
            for pieces in stream:
                texts = [text + piece for text, piece in zip(texts, pieces)]
            for i, text in enumerate(texts):
                print(f"--- sample {i + 1} ---\n{args.prompt}{text}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
