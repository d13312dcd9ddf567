"""What an experiment ran, as report sections: its setup, the per-arm table, the figures, the samples and the run folders.

Each function returns one section's lines from a checked :class:`experiment.runs.folders.Experiment`;
:func:`experiment.ab.markdown.render_markdown` puts them after the verdicts, which it words
itself.  Numbers here are described, not judged: timings are marked as measured under whatever
load the machine had, and a value a run did not record reads "n/a".
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from experiment.ab.figures import CAPTIONS
from experiment.style import finite
from experiment.ab.readout import arm_table
from experiment.runs.folders import SIZE_KEYS, Experiment, code_versions

TIMING_NOTE = (
    "‡ Timings were measured under whatever load the machine had while each run trained (other "
    "processes on shared cores included), so they are given as the median and the range (min–max) "
    "over seeds, not mean ± std, and are not a speed comparison: time that with `python bench.py` "
    "on an otherwise idle machine."
)
INIT_WORDS = {
    "gpt2": "GPT-2's: Linear and Embedding weights ~ N(0, 0.02), residual projections ~ N(0, 0.02/sqrt(2 n_layer)); "
    "an untied lm_head is its own draw, a tied one is the embedding's draw",
    "pytorch": "PyTorch's layer defaults: nn.Linear Kaiming-uniform, nn.Embedding N(0, 1); a tied lm_head is the "
    "embedding's matrix",
}


def _cell(text: str) -> str:
    """Sample text as one Markdown table cell: HTML-escaped, pipes and newlines made inert."""
    return html.escape(text, quote=False).replace("|", "&#124;").replace("\n", "<br>")


def _pm(ms: tuple[float, float], digits: int = 4) -> str:
    """``(mean, std)`` as ``"mean ± std"`` with ``digits`` decimals; ``"n/a"`` when not recorded (NaN)."""
    mean, std = ms
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if finite(mean) and finite(std) else "n/a"


def _spread(spread: tuple[float, float, float] | None, digits: int = 0) -> str:
    """``(median, min, max)`` as ``"800 (range 401–1,200)"`` with ``digits`` decimals; the median alone
    when min and max read the same (one seed), ``"n/a"`` for None (not recorded).
    """
    if spread is None:
        return "n/a"
    median, low, high = (f"{v:,.{digits}f}" for v in spread)
    return median if low == high else f"{median} (range {low}–{high})"


def _decay_words(tc: dict) -> str:
    """The weight-decay policy of a run's train config, in words."""
    emb = "decayed (nanoGPT's policy)" if tc.get("embedding_weight_decay", True) else "not decayed (minGPT's policy)"
    words = (
        f"AdamW weight_decay={tc['weight_decay']} on weights with dim >= 2; the embedding matrices (wte, wpe, "
        f"and lm_head whether tied or not) are {emb}; biases and LayerNorm gains never decay"
    )
    if tc.get("optimizer", "adamw") == "muon":  # runs from before train.optimizer trained with AdamW alone
        words = (
            f"Muon (lr {tc['muon_learning_rate']:g}, momentum {tc['muon_momentum']:g}, decoupled weight_decay="
            f"{tc['weight_decay']}) on the blocks' 2-D matrices, and {words}"
        )
    return words


def setup_section(exp: Experiment) -> list[str]:
    """``## Setup``: corpus, budget, seeds and what they share, policies, arms and every config difference."""
    cfg = exp.runs[exp.reference][0].config
    mc, dc, tc = cfg["model"], cfg["data"], cfg["train"]
    per_step = tc["batch_size"] * tc["grad_accum_steps"] * mc["block_size"]
    resized = any(set(d) & SIZE_KEYS for d in exp.differences.values())
    tuning_seeds = sorted({r.seed for members in exp.tuning.values() for r in members})
    subset = f" (subset `{dc['subset']}`)" if dc.get("subset") else ""
    lines = [
        "## Setup",
        "",
        f"- Corpus `{dc['source']}`{subset}, "
        f"tokenizer `{dc['tokenizer']}` (vocab_size {mc['vocab_size']:,}); {tc['max_iters']:,} steps of "
        f"{per_step:,} tokens ({tc['max_iters'] * per_step:,} tokens per run).",
        f"- Seeds {', '.join(map(str, exp.seeds))}"
        + (
            f"; learning rates tuned on seed {', '.join(map(str, tuning_seeds))}, which no reported run uses"
            if tuning_seeds
            else ""
        )
        + ". Each seed's runs share the data order, the eval batches, "
        + ("" if resized else "the initial transformer body, ")
        + "the token budget, the schedule and the optimizer settings.",
        f"- Init policy (every arm): {INIT_WORDS.get(mc.get('init', 'gpt2'), mc.get('init'))}.",
        f"- Weight-decay policy (every arm): {_decay_words(tc)}.",
        "- Arms:",
    ]
    for arm in exp.arms:
        ref = " (reference)" if arm == exp.reference else ""
        lines.append(f"  - `{arm}`{ref}: {exp.arm_set.describe(arm)}")
    lines.append(f"- Every config difference from {exp.reference}:")
    for arm, diff in exp.differences.items():
        for key, (a, b) in diff.items():
            lines.append(f"  - {arm}: `{key}` {exp.reference} `{a}`, {arm} `{b}`")
    for key, (a, b) in exp.bookkeeping.items():
        lines.append(f"  - `{key}`: {exp.reference} `{a}`, another arm `{b}` (bookkeeping: no effect on the maths)")
    for arm, v in code_versions(exp).items():
        ref, own = _short(v["reference_commit"]), _short(v["commit"])
        change = f"; {v['diff_stat']} (`git diff --stat {ref} {own}`)" if v["diff_stat"] else ""
        lines.append(f"  - {arm}: the code, commit `{own}` against {exp.reference}'s `{ref}`{change}")
    return lines + [""]


def _short(commit: str | None) -> str:
    """A commit as a report names it: its first 12 characters, or "unknown" for a run that recorded none."""
    return commit[:12] if commit else "unknown"


def arm_section(exp: Experiment) -> list[str]:
    """``## Per arm``: one column per arm (reference first), then the timing footnote."""
    rows = arm_table(exp)
    table = [
        ("parameters", [f"{r['parameters']:,}" for r in rows]),
        ("non-embedding parameters", [f"{r['non_embedding_parameters']:,}" for r in rows]),
        ("learning rate", [f"{r['learning_rate']:g}" for r in rows]),
        ("final val loss (on the same val windows for every run)", [_pm(r["final_val_loss"]) for r in rows]),
        (
            "final val bits per byte (same windows)",
            [_pm(r["final_val_bpb"]) if r["final_val_bpb"] else "n/a" for r in rows],
        ),
        ("best periodic val loss", [_pm(r["best_val_loss"]) for r in rows]),
        (
            "final val perplexity (exp(mean loss), the geometric mean over seeds)",
            [f"{r['final_val_ppl']:.2f}" for r in rows],
        ),
        (
            "unigram baseline val loss",
            [f"{r['unigram_val_loss']:.4f}" if r["unigram_val_loss"] is not None else "n/a" for r in rows],
        ),
        ("tokens/s (each run's median) ‡", [_spread(r["tokens_per_s"]) for r in rows]),
        ("wall time (s) ‡", [_spread(r["wall_time_s"], 1) for r in rows]),
        ("peak memory (MiB)", [_pm(r["peak_memory_mib"], 0) for r in rows]),
        (
            "ckpt_best.pt size (MiB, first seed keeping one)",
            [f"{r['checkpoint_mib']:.1f}" if finite(r["checkpoint_mib"]) else "n/a" for r in rows],
        ),
        ("non-finite steps skipped (all seeds)", [f"{r['skipped_steps']}" for r in rows]),
    ]
    header = ["", *(r["arm"] for r in rows)]
    lines = [
        f"## Per arm (mean ± std over {len(exp.seeds)} seeds, nats/token; timings ‡: median and range)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += [f"| {name} | " + " | ".join(values) + " |" for name, values in table]
    return lines + ["", TIMING_NOTE, ""]


def figures_section(figures: list[str]) -> list[str]:
    """``## Figures``: each image with its one-line caption."""
    if not figures:
        return []
    lines = ["## Figures", ""]
    for name in figures:
        lines += [f"![{name}]({name})", "", f"*{CAPTIONS.get(name, name)}*", ""]
    return lines


def samples_section(exp: Experiment, sample_texts: dict) -> list[str]:
    """``## Samples``: one table per prompt, one column per arm; labelled an illustration, not evidence."""
    if not sample_texts:
        return []
    left_out = getattr(sample_texts, "left_out", {})  # experiment.runs.folders.Samples: arms that could not be sampled
    lines = [
        "## Samples: an illustration, not evidence",
        "",
        "Each arm's first seed with a checkpoint (ckpt_best.pt), top-k 50, temperature 0.8, the same "
        "sampling seed, each run sampled by the code it trained with; *no checkpoint* where none of the arm's run "
        "folders kept one.",
        "",
    ]
    for prompt, by_arm in sample_texts.items():
        lines += [
            f"Prompt <code>{html.escape(repr(prompt), quote=False)}</code>:",
            "",
            "| " + " | ".join(exp.arms) + " |",
            "|" + "---|" * len(exp.arms),
            "| " + " | ".join(_sample_cell(by_arm, arm, left_out) for arm in exp.arms) + " |",
            "",
        ]
    return lines + [f"- {arm}: not sampled: {why}" for arm, why in left_out.items()] + ([""] if left_out else [])


def _sample_cell(by_arm: dict[str, str], arm: str, left_out: dict[str, str]) -> str:
    """One arm's sample as a table cell; why there is none where there is none."""
    if arm in by_arm:
        return _cell(by_arm[arm])
    return "*not sampled (below)*" if arm in left_out else "*no checkpoint*"


def runs_section(exp: Experiment, folder: Path | None) -> list[str]:
    """``## Runs``: every reported run folder with its arm and seed (with every rate on every seed, each rate's),
    then the tuning runs.

    Every run is named relative to ``folder`` (the report's own; ``../`` for one outside it), so a
    report committed with its runs names no path of the machine that wrote it.
    """

    def shown(path: Path) -> str:
        return str(path) if folder is None else Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()

    if exp.swept:
        return ["## Runs", ""] + [
            f"- `{shown(r.path)}` ({arm}, seed {r.seed}, learning rate {lr:g})"
            for arm, rates in exp.swept.items()
            for lr, members in rates.items()
            for r in members
        ]
    lines = ["## Runs", ""] + [
        f"- `{shown(r.path)}` ({arm}, seed {r.seed})" for arm, members in exp.runs.items() for r in members
    ]
    tuning = [
        f"- `{shown(r.path)}` ({arm}, seed {r.seed}, learning rate {r.learning_rate:g})"
        for arm, members in exp.tuning.items()
        for r in members
    ]
    return lines + (["", "Tuning runs:", "", *tuning] if tuning else [])
