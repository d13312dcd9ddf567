"""The tied-vs-untied report worded as Markdown, from an :class:`report.Experiment`.

``experiment/report.py`` reads the run folders, checks they are a fair experiment and does the
statistics; this module only says what they mean, in order: a warning when the runs learned
too little for the comparison to mean anything, the verdict, the setup, the per-arm table
(timings marked as measured under whatever load the machine had), the paired differences,
the figures and the samples::

    exp = report.check_experiment(report.load_runs(paths))
    md = render_markdown(exp, report.plot_curves(exp, out_dir), {}, "Tied vs untied: exp")
"""

from __future__ import annotations

import html
import statistics

from experiment.report import ARMS, SIZE_KEYS, Experiment, arm_table, paired_difference

TIMING_NOTE = ("‡ Timings were measured under whatever load the machine had while each run trained (other "
               "processes on shared cores included), so they are given as the median and the range (min–max) "
               "over seeds, not mean ± std, and are not a speed comparison: time that with `python bench.py` "
               "on an otherwise idle machine.")


def _cell(text: str) -> str:
    """Sample text as one Markdown table cell: HTML-escaped, pipes and newlines made inert."""
    return html.escape(text, quote=False).replace("|", "&#124;").replace("\n", "<br>")


def _pm(ms: tuple[float, float], digits: int = 4) -> str:
    """``(mean, std)`` as ``"mean ± std"`` with ``digits`` decimals."""
    mean, std = ms
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _spread(spread: tuple[float, float, float] | None, digits: int = 0) -> str:
    """``(median, min, max)`` as ``"800 (range 401–1,200)"`` with ``digits`` decimals; the median alone
    when min and max read the same (one seed), ``"n/a"`` for None (not recorded).
    """
    if spread is None:
        return "n/a"
    median, low, high = (f"{v:,.{digits}f}" for v in spread)
    return median if low == high else f"{median} (range {low}–{high})"


def policy(config: dict) -> dict:
    """Plain-words weight-decay and init policy of a run config (both arms share it)."""
    tc = config["train"]
    emb = ("decayed (nanoGPT's policy)" if tc.get("embedding_weight_decay", True)
           else "not decayed (minGPT's policy)")
    return {
        "weight_decay": f"AdamW weight_decay={tc['weight_decay']} on weights with dim >= 2; the embedding matrices "
                        f"(wte, wpe, and lm_head whether tied or not) are {emb}; biases and LayerNorm gains never decay",
        "init": "GPT-2's: Linear and Embedding weights ~ N(0, 0.02), residual projections ~ N(0, 0.02/sqrt(2 n_layer)); "
                "untied, embedding and head are independent draws; tied, one draw",
    }


def baseline_warning(exp: Experiment) -> str | None:
    """One paragraph when any run's final val loss has not beaten its unigram baseline, else None.

    The unigram baseline predicts each token from its frequency alone; a model no better has not
    learned from context yet, so any difference between the arms is noise of initialisation and
    data order, and the verdict means nothing.  Runs with no recorded baseline are not judged.
    """
    behind = {arm: [r for r in exp.runs[arm] if not r.learned] for arm in ARMS}
    if not any(behind.values()):
        return None
    detail = "; ".join(
        f"{arm} {len(runs)} of {len(exp.runs[arm])} runs (mean final val loss "
        f"{statistics.fmean(r.final['val_loss'] for r in runs):.4f}, best {statistics.fmean(r.best_val_loss for r in runs):.4f}, "
        f"unigram {statistics.fmean(r.unigram_val_loss for r in runs):.4f} nats/token)"
        for arm, runs in behind.items() if runs)
    return (f"**Warning: this comparison is not meaningful.** Some runs have not beaten the unigram baseline, a model "
            f"that knows only how often each token occurs: {detail}. They have not learned from context yet, so the "
            f"verdict below says nothing about tying. Train longer (raise --train.max_iters) or check the config "
            f"(learning rate, warmup, data), then compare again.")


def _results_table(rows: list[dict]) -> list[str]:
    """The per-arm table (one column per arm) and its timing footnote, as Markdown lines."""
    header = ["", *(r["arm"] for r in rows)]
    table = [
        ("parameters", [f"{r['parameters']:,}" for r in rows]),
        ("non-embedding parameters", [f"{r['non_embedding_parameters']:,}" for r in rows]),
        ("final val loss", [_pm(r["final_val_loss"]) for r in rows]),
        ("best val loss", [_pm(r["best_val_loss"]) for r in rows]),
        ("unigram baseline val loss", [f"{r['unigram_val_loss']:.4f}" if r["unigram_val_loss"] is not None else "n/a"
                                       for r in rows]),
        ("best val perplexity", [f"{r['best_val_ppl']:.1f}" for r in rows]),
        ("train–val gap (final val − train loss)", [_pm(r["train_val_gap"]) for r in rows]),
        ("tokens/s (each run's median) ‡", [_spread(r["tokens_per_s"]) for r in rows]),
        ("wall time (s) ‡", [_spread(r["wall_time_s"], 1) for r in rows]),
        ("peak memory (MiB)", [_pm(r["peak_memory_mib"], 0) for r in rows]),
        ("ckpt_best.pt size (MiB)", [f"{r['checkpoint_mib']:.1f}" for r in rows]),
        ("non-finite steps skipped (all seeds)", [f"{r['skipped_steps']}" for r in rows]),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [f"| {name} | " + " | ".join(values) + " |" for name, values in table]
    return lines + ["", TIMING_NOTE]


def render_markdown(exp: Experiment, figures: list[str], sample_texts: dict, title: str) -> str:
    """The report as Markdown: baseline warning, verdict, setup and differences, per-arm table,
    paired test, figures, samples.
    """
    tied, untied = exp.runs["tied"], exp.runs["untied"]
    final = paired_difference([r.final["val_loss"] for r in tied], [r.final["val_loss"] for r in untied], "final val loss")
    best = paired_difference([r.best_val_loss for r in tied], [r.best_val_loss for r in untied], "best val loss")
    cfg = tied[0].config
    pol = policy(cfg)
    warning = baseline_warning(exp)
    lines = [f"# {title}", ""] + ([warning, ""] if warning else [])
    lines += [f"**Verdict:** {final.verdict}{' — not meaningful, see the warning above' if warning else ''}.", ""]
    lines += ["## Setup", ""]
    lines += [
        f"- Corpus `{cfg['data']['source']}`, tokenizer `{cfg['data']['tokenizer']}` "
        f"(vocab_size {cfg['model']['vocab_size']:,}); {cfg['train']['max_iters']} steps of "
        f"{cfg['train']['batch_size'] * cfg['train']['grad_accum_steps'] * cfg['model']['block_size']:,} tokens.",
        f"- Seeds {exp.seeds}: each seed's two runs share the data order, the eval batches, "
        + ("" if set(exp.differences) & SIZE_KEYS else "the initial transformer body, ")
        + "the token budget, the schedule and the optimizer settings.",
        f"- Weight-decay policy (both arms): {pol['weight_decay']}.",
        f"- Init policy (both arms): {pol['init']}.",
        "- Every config difference between the arms:",
    ]
    for key, (a, b) in exp.differences.items():
        lines.append(f"  - `{key}`: tied `{a}`, untied `{b}`")
    for key, (a, b) in exp.bookkeeping.items():
        lines.append(f"  - `{key}`: tied `{a}`, untied `{b}` (bookkeeping: no effect on the maths)")
    lines += ["", "## Results (mean ± std over seeds; timings ‡: median and range)", ""]
    lines += _results_table(arm_table(exp))
    lines += ["", "## Untied − tied, paired by seed", ""]
    lines += ["| metric | per seed | mean | 95% CI |", "|---|---|---|---|"]
    for name, d in (("final val loss", final), ("best val loss", best)):
        ci = f"[{d.low:+.4f}, {d.high:+.4f}]" if d.low is not None else "n/a (one seed, or zero variance)"
        lines.append(f"| {name} | {', '.join(f'{x:+.4f}' for x in d.diffs)} | {d.mean:+.4f} | {ci} |")
    lines += ["", f"Best val loss: {best.verdict}.", "",
              "The interval is the paired t interval (`scipy.stats.ttest_rel`, n − 1 degrees of freedom).", ""]
    lines += ["## Curves", ""] + [f"![{f}]({f})" for f in figures] + [""]
    if sample_texts:
        lines += ["## Samples (first seed, ckpt_best.pt, top-k 50, temperature 0.8, same seed)", ""]
        for prompt, by_arm in sample_texts.items():
            lines += [f"Prompt <code>{html.escape(repr(prompt), quote=False)}</code>:", "", "| tied | untied |", "|---|---|"]
            cells = [_cell(by_arm.get(arm, "")) for arm in ARMS]
            lines += [f"| {cells[0]} | {cells[1]} |", ""]
    lines += ["## Runs", ""] + [f"- `{r.path}` (seed {r.seed}, {'tied' if r.tied else 'untied'})"
                                for arm in ARMS for r in exp.runs[arm]]
    return "\n".join(lines) + "\n"
