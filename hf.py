"""Hugging Face weights in and out: ``GPT2LMHeadModel``, ``LlamaForCausalLM`` and ``Qwen3ForCausalLM`` folders
to tinygpt run folders and back.

    python hf.py export --run runs/default --out hf/default       # a folder AutoModelForCausalLM.from_pretrained loads
    python hf.py import --hf hf/default --out runs/imported       # a run folder sample.py reads
    python hf.py import --hf openai-community/gpt2 --out runs/gpt2   # a hub id: only where the hub is reachable
    python train.py --init-from hf/gpt2 --data.tokenizer=gpt2 ...    # fine-tune imported weights

GPT-2's block exports as GPT-2, RoPE + RMSNorm + SwiGLU as Llama, with QK-norm as Qwen3; any other
set of model choices is refused by name.  Needs ``pip install transformers safetensors`` (training
does not).  See docs/gpt2.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from core.cli import ArgumentParser, run_command
from training.hf_folders import export_run, import_run


def parse_args(argv: list[str] | None):
    """The ``export`` / ``import`` sub-command and its options."""
    parser = ArgumentParser(prog="hf.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="Run folder -> Hugging Face folder (GPT-2, Llama or Qwen3).")
    ex.add_argument("--run", required=True, type=Path, help="Run folder, e.g. runs/default.")
    ex.add_argument("--checkpoint", choices=("best", "last"), default="best", help="Which checkpoint to export.")
    ex.add_argument(
        "--out", required=True, type=Path, help="New folder to write (config.json, model.safetensors, tokenizer)."
    )
    ex.add_argument(
        "--hub-id",
        metavar="OWNER/NAME",
        help="The Hub id you will publish the folder under: its model card loads that (default: the folder's name).",
    )
    im = sub.add_parser(
        "import", help="Hugging Face GPT-2, Llama or Qwen3 folder (or hub id) -> run folder for sample.py."
    )
    im.add_argument(
        "--hf", required=True, help="Folder written by save_pretrained, or a hub id where the hub is reachable."
    )
    im.add_argument("--out", required=True, type=Path, help="New run folder to write, e.g. runs/gpt2.")
    im.add_argument(
        "--untied", action="store_true", help="Import into an untied model (the matrix is copied into both)."
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python hf.py export|import``; returns the exit status (2 on bad input)."""

    def body() -> None:
        args = parse_args(argv)
        if args.command == "export":
            export_run(args.run, args.checkpoint, args.out, hub_id=args.hub_id)
            print(f"wrote {args.out}: {', '.join(sorted(p.name for p in args.out.iterdir()))}")
            # The card (README.md) loads the folder by its name or --hub-id, as published; from here it is this path.
            print(
                f'load it from here with AutoModelForCausalLM.from_pretrained("{args.out}"), '
                f"or back into tinygpt with python hf.py import --hf {args.out} --out runs/<name>"
            )
        else:
            import_run(args.hf, args.out, tie_embeddings=False if args.untied else None)
            print(f"wrote {args.out}: sample with python sample.py --run {args.out}")

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
