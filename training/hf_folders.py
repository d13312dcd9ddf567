"""Run folders in and out of Hugging Face folders: the ``hf.py`` import / export commands (GPT-2, Llama, Qwen3).

:mod:`model.hf` converts the weights; this module moves them between Hugging Face folders and run
folders, with the tokenizer, and writes an export's model card (:mod:`training.card`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from core.errors import UserError
from core.files import write_json
from data.hf_tokenizer import TOKENIZER_FILE, write_tokenizer_files
from data.tokenizers import build_tokenizer, save_tokenizer, tokenizer_from_dict
from model import hf
from model.checkpoint import save_checkpoint
from training.card import CARD_FILE, model_card
from training.config import RunConfig
from training.runs import load_run
from training.run_files import BEST_CKPT, CONFIG, IMPORTED


def import_run(source, out_dir: Path, tie_embeddings: bool | None = None) -> Path:
    """Write a run folder ``sample.py`` and ``export`` read (config, tokenizer, ``ckpt_best.pt``) from GPT-2, Llama
    or Qwen3 weights (:func:`model.hf.from_hf`).

    The tokenizer is gpt2 for a 50257-token model, or the ``tinygpt_tokenizer.json`` of a
    folder tinygpt exported.  The checkpoint records the source (step 0, no val loss).  It
    holds no optimizer state, so ``train.py --resume`` refuses it; GPT-2 weights of GPT-2's
    vocabulary are fine-tuned by ``train.py --init-from`` on their Hugging Face folder (the source,
    or this run's ``hf.py export``).  Raises :class:`UserError` if ``out_dir`` exists or no
    tokenizer fits.
    """
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise UserError(f"{out_dir} already exists: give a new --out folder")
    model = hf.from_hf(source, tie_embeddings)
    folder = Path(str(source)).expanduser()
    if (folder / TOKENIZER_FILE).is_file():
        tokenizer = tokenizer_from_dict(
            json.loads((folder / TOKENIZER_FILE).read_text(encoding="utf-8")), search_dirs=(folder,)
        )
    elif model.config.vocab_size == hf.GPT2_VOCAB_SIZE:
        tokenizer = build_tokenizer("gpt2", search_dirs=(folder,) if folder.is_dir() else ())
    else:
        raise UserError(
            f"{source} has {model.config.vocab_size} tokens and no {TOKENIZER_FILE}: tinygpt cannot tell its tokenizer"
        )
    if tokenizer.vocab_size != model.config.vocab_size:
        raise UserError(
            f"{source}: its tokenizer has {tokenizer.vocab_size} tokens but the model {model.config.vocab_size}"
        )
    cfg = RunConfig.from_dict({"model": vars(model.config), "data": {"tokenizer": tokenizer.name}}, str(source))
    out_dir.mkdir(parents=True)
    save_tokenizer(tokenizer, out_dir)
    write_json(out_dir / CONFIG, cfg.to_dict())
    source_name = str(folder.resolve()) if folder.is_dir() else str(source)
    # Read by list_runs.py: a folder with no metrics and no summary is otherwise a run that failed.
    write_json(out_dir / IMPORTED, {"imported_from": source_name})
    save_checkpoint(
        out_dir / BEST_CKPT,
        {
            "model": model.state_dict(),
            "step": 0,
            "tie_embeddings": model.config.tie_embeddings,
            "tokenizer": tokenizer.to_dict(),
            "config": cfg.to_dict(),
            "val_loss": None,
            "imported_from": source_name,
        },
    )
    return out_dir


def export_run(run_dir: Path, which: str, out_dir: Path, hub_id: str | None = None) -> Path:
    """Write the ``which`` ("best" or "last") checkpoint of ``run_dir`` with its tokenizer as a Hugging Face folder.

    The architecture is the one that expresses the model's choices (:func:`model.hf.architecture`:
    ``GPT2LMHeadModel``, ``LlamaForCausalLM`` or ``Qwen3ForCausalLM``); any other set is a one-line
    :class:`UserError` naming the choice, before anything is written.

    The folder also gets a model card, ``README.md`` (:func:`training.card.model_card`: the
    architecture, tying, and the run's recorded tokens, val loss, command and commit).
    ``hub_id``: the Hub id the folder will be published under, which the card's usage loads.
    Raises :class:`UserError` for a bad run folder, a ``hub_id`` that is no Hub id, or an ``out_dir`` that
    exists and is not empty.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if hub_id is not None and not hf.is_hub_id(hub_id):
        raise UserError(
            f"--hub-id {hub_id!r} is not a Hub id: give OWNER/NAME, e.g. --hub-id alice/tinygpt-shakespeare"
        )
    model, tokenizer, ckpt = load_run(run_dir, which, torch.device("cpu"))
    # load_run falls back to ckpt_last.pt for a run with no best checkpoint: the card names the file read.
    read = which if which == "last" or (run_dir / BEST_CKPT).exists() else "last"

    def write_more(folder: Path) -> None:
        write_tokenizer_files(tokenizer, folder, model.config.block_size)
        has_hf_tokenizer = (folder / "tokenizer.json").is_file()  # gpt2 and bpe:N have one, char has none
        card = model_card(
            run_dir=run_dir,
            out_dir=out_dir,
            model=model,
            tokenizer=tokenizer,
            ckpt=ckpt,
            which=read,
            has_hf_tokenizer=has_hf_tokenizer,
            hub_id=hub_id,
        )
        card.save(folder / CARD_FILE)

    # The run's tokenizer says which id ends a text: a bpe:50257 vocabulary has the size of gpt2's, not its ids.
    return hf.export(model, out_dir, write_more, eot=getattr(tokenizer, "eot_token", None))
