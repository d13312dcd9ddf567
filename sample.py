"""Generate text from a trained run folder, streaming tokens as they come.

    python sample.py --run runs/untied --prompt "ROMEO:" --top-k 50
    python sample.py --run runs/untied --prompt "ROMEO:" --greedy
    python sample.py --run runs/untied --prompt-file prompt.txt --num-samples 3 --max-new-tokens 300 --seed 7

Everything needed (config, tokenizer, checkpoint) is read from the run folder.  Decoding
has no softmax: ``--greedy`` takes the argmax of the logits; otherwise the next token is a
Gumbel-max draw from ``logits / temperature`` over the ``--top-k`` largest.  The same
``--seed`` gives the same text.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterator

import torch

import runs
from config import ArgumentParser
from data.tokenizers import load_tokenizer
from errors import UserError
from model.checkpoint import load_checkpoint, load_model_state
from model.gpt import GPT


def generate_text(
    model: GPT, tokenizer, prompt: str, max_new_tokens: int, device: torch.device,
    temperature: float = 1.0, top_k: int | None = None, greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Iterator[str]:
    """Yield the prompt, then the generated text piece by piece as tokens arrive.

    BPE tokens can split a multi-byte character, so text is yielded only once it decodes
    cleanly (no trailing U+FFFD); the pieces always join to ``decode(all tokens)``.
    Raises :class:`UserError` for an empty prompt or one the tokenizer cannot encode.
    """
    if not prompt:
        raise UserError("the prompt is empty: give --prompt with some text (e.g. --prompt 'ROMEO:')")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise UserError(f"the prompt {prompt!r} encodes to no tokens: give a longer prompt")
    model.eval()
    idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
    yield prompt
    shown = tokenizer.decode(ids)
    out = list(ids)
    for next_id in model.generate_stream(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                                         greedy=greedy, generator=generator):
        out.append(int(next_id[0]))
        text = tokenizer.decode(out)
        if text.endswith("\ufffd"):
            continue  # half of a multi-byte character: wait for the rest
        yield text[len(shown):]
        shown = text
    text = tokenizer.decode(out)
    if len(text) > len(shown):
        yield text[len(shown):]


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
    p.add_argument("--num-samples", type=int, default=1, help="How many samples to draw, one after another.")
    p.add_argument("--max-new-tokens", type=int, default=200, help="Tokens to generate per sample.")
    p.add_argument("--temperature", type=float, default=None, help="Divide the logits by this (> 0; default 1.0).")
    p.add_argument("--top-k", type=int, default=None, help="Sample only among the k largest logits (k >= 1; default: all).")
    p.add_argument("--greedy", action="store_true", help="Take the argmax at every step (deterministic; no sampling).")
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
    if args.greedy and (args.top_k is not None or args.temperature is not None):
        raise UserError("--greedy takes the argmax and ignores sampling: drop --top-k / --temperature, or drop --greedy")
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
        generator = torch.Generator().manual_seed(args.seed)
        for i in range(args.num_samples):
            if args.num_samples > 1:
                print(f"--- sample {i + 1} ---")
            for piece in generate_text(model, tokenizer, args.prompt, args.max_new_tokens, device,
                                       temperature=args.temperature or 1.0, top_k=args.top_k,
                                       greedy=args.greedy, generator=generator):
                print(piece, end="", flush=True)
            print()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
