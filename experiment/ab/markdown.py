"""The experiment's report worded as Markdown, from an :class:`experiment.runs.folders.Experiment` of any number of arms.

``experiment/runs/folders.py`` reads the run folders and checks they are a fair experiment,
``experiment/ab/readout.py`` does the statistics (:mod:`experiment.stats`); ``experiment/ab/figures.py`` draws it; this module only says
what it means, in order: the command, a warning when runs learned too little for the comparison
to mean anything, the verdict per arm and the budget held fixed, the verdicts in bits per byte
(with a ``margin_bpb``), the paired statistics, the
compute-equivalent estimate, the learning rates, the setup, the per-arm table (timings marked as
measured under whatever load the machine had), the figures, the samples and the run folders.
The descriptive sections, from the setup on, come from :mod:`experiment.ab.sections`. In use::

    exp = report.check_experiment(report.load_runs(paths), reference="tied", margin=0.01)
    md = render_markdown(exp, figures.plot_all(exp, out_dir), {}, "Tied vs untied", command="python compare.py ...")

Differences are arm − reference, in nats/token except in the bits-per-byte section: negative means
the arm's loss is lower (better).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import torch

from experiment import best, stats
from experiment.arms import ARM_KEYS
from experiment.style import interval, num, p_value, signed
from experiment.ab.readout import (
    best_comparisons,
    best_table,
    bpb_comparison,
    comparisons,
    compute_equivalent,
    lr_table,
    never_reached,
    not_calibrated,
    qualifications,
    target_of,
)
from experiment.runs.folders import SIZE_KEYS, Experiment
from experiment.ab.sections import arm_section, figures_section, runs_section, samples_section, setup_section
from model.config import GPTConfig
from model.gpt import GPT
from training.run_files import RunFolder


def baseline_warning(exp: Experiment) -> str | None:
    """One paragraph when any run's final val loss has not beaten its unigram baseline, else None.

    The unigram baseline predicts each token from its frequency alone; a model no better has not
    learned from context yet, so any difference between the arms is noise of initialisation and
    data order, and the verdict means nothing.  Runs with no recorded baseline are not judged.
    """
    behind = {arm: [r for r in members if not r.learned] for arm, members in exp.runs.items()}
    if not any(behind.values()):
        return None
    detail = "; ".join(
        f"{arm} {len(runs)} of {len(exp.runs[arm])} runs (mean final val loss "
        f"{statistics.fmean(r.score for r in runs):.4f}, best periodic eval {statistics.fmean(r.best_val_loss for r in runs):.4f}, "
        f"unigram {statistics.fmean(r.unigram_val_loss for r in runs):.4f} nats/token)"
        for arm, runs in behind.items()
        if runs
    )
    return (
        f"**Warning: this comparison is not meaningful.** Some runs have not beaten the unigram baseline, a model "
        f"that knows only how often each token occurs: {detail}. They have not learned from context yet, so the "
        f"verdicts below say nothing about the arms. Train longer (raise --train.max_iters) or check the config "
        f"(learning rate, warmup, data), then compare again."
    )


def _head(c: stats.Comparison) -> str:
    """A verdict line's opening, naming which arm is the reference: ``- drop vs base (reference): ``."""
    return f"- {c.arm} vs {c.reference} (reference): "


def _speed_line(c: stats.Comparison) -> str:
    """A speed comparison (``--outcome tokens-per-s``) in words: Δ of -ln(tokens/s) read back as a percentage."""

    def pct(x: float) -> str:  # a Δ of -ln(tokens/s) as the arm's speed relative to the reference
        return f"{100 * (math.exp(-x) - 1):+.1f}%".replace("-", "−")

    n = len(c.diffs)
    ci = "n/a" if not all(map(math.isfinite, c.ci)) else f"[{pct(c.ci[1])}, {pct(c.ci[0])}]"
    word = {"better": "faster", "worse": "slower"}.get(c.verdict)
    verdict = (
        f"**{word}**"
        if word
        else (f"**as fast within ±{100 * c.margin:g}%**" if c.verdict == "equivalent" else "**inconclusive**")
    )
    return (
        f"{_head(c)}{verdict} — tokens/s {pct(c.mean)} (95% CI {ci}; Holm-adjusted p = "
        f"{p_value(c.p_holm)}; TOST p at ±{100 * c.margin:g}% = {p_value(c.p_tost)}; {n} interleaved seed pair{'s' if n != 1 else ''})"
    )


def _target_line(c: stats.Comparison, outcome: str) -> str:
    """A ``tokens-to`` or ``time-to`` comparison in words: Δ ln(tokens or seconds) read back as a percentage of
    the reference's."""

    def pct(x: float) -> str:  # a Δ of ln(tokens) as the arm's tokens relative to the reference's
        return f"{100 * (math.exp(x) - 1):+.1f}%".replace("-", "−")

    n = len(c.diffs)
    ci = "n/a" if not all(map(math.isfinite, c.ci)) else f"[{pct(c.ci[0])}, {pct(c.ci[1])}]"
    verdict = f"**{c.verdict}**" + (f" within ±{100 * c.margin:g}%" if c.verdict == "equivalent" else "")
    if c.barred:  # missed runs: say which verdicts the numbers could not give
        verdict += f" ({' and '.join(c.barred)} barred by runs that missed)"
    what = "training seconds" if outcome.startswith("time-to:") else "tokens"
    return (
        f"{_head(c)}{verdict} — {what} to reach val loss {target_of(outcome):g} {pct(c.mean)} (95% CI {ci}; "
        f"Holm-adjusted p = {p_value(c.p_holm)}; TOST p at ±{100 * c.margin:g}% = {p_value(c.p_tost)}; {n} seeds)"
    )


def _machine_line(exp: Experiment) -> str:
    """For ``time-to``: seconds compare only within one experiment on one machine; the machine(s) the runs name."""
    machines = sorted({_machine(r.path) for members in exp.runs.values() for r in members})
    where = "; ".join(machines)
    several = " **The runs name more than one machine: their seconds do not compare.**" if len(machines) > 1 else ""
    return (
        f"Training seconds compare only within one experiment on one machine ({where}); they do not carry to "
        "another machine, and load moves them (compare.py trains the arms of a seed one after another, in "
        f"alternating order, so that load falls on both alike).{several}"
    )


def _machine(run: Path) -> str:
    """The CPU or GPU and thread count ``env.json`` records for a run, or "not recorded"."""
    env = RunFolder(run).env_path
    if not env.is_file():
        return "not recorded"
    e = json.loads(env.read_text())
    name = e.get("cpu_model") if e.get("device") == "cpu" else e.get("device_name")
    return f"{name}, {e.get('torch_threads', '?')} threads" if e.get("device") == "cpu" else str(name)


def _never_reached_line(exp: Experiment) -> str | None:
    """With a ``tokens-to`` outcome, the runs that never reached the target, named before any verdict."""
    missing = never_reached(exp)
    if not missing:
        return None
    who = "; ".join(f"{arm} on seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}" for arm, s in missing.items())
    return (
        f"**Never reached val loss {exp.outcome.split(':')[1]}:** {who}. Each comparison below leaves out the "
        "seeds where its arm or the reference missed, and an arm with no seed left has no verdict; a "
        "run that never reached it needed more than its whole run, so the comparison on the other seeds "
        "favours the arm that missed. So an arm that missed where the reference reached it cannot read better, "
        "one that reached it where the reference missed cannot read worse, and a missed seed bars equivalence "
        "(docs/experiment.md). Train longer or choose a higher target."
    )


def _tost_level(alpha: float) -> str:
    """The interval that lies inside ±margin exactly when both one-sided tests at ``alpha`` pass: "90%" at 0.05."""
    return f"{100 * (1 - 2 * alpha):g}%"


def _within(verdict: str, ci: tuple[float, float], margin: float) -> str:
    """ ", by less than the ±0.01 margin" (or "possibly by less than …") after a better or worse verdict, or ""
    (:func:`experiment.stats.size_against_margin`)."""
    size = stats.size_against_margin(verdict, ci, margin)
    return f", {size.replace('the margin', f'the ±{margin:g} margin')}" if size else ""


def _verdict_line(c: stats.Comparison) -> str:
    """One comparison in words: the verdict in bold, then the numbers behind it."""
    n = len(c.diffs)
    head = _head(c)
    if c.verdict in ("better", "worse"):
        within = _within(c.verdict, c.ci, c.margin)
        return (
            head + f"**{c.verdict}**{within} — final val loss {'lower' if c.mean < 0 else 'higher'} by "
            f"{num(abs(c.mean))} nats (95% CI {interval(c.ci, 3)}; perplexity ×{c.ppl_ratio:.3f}; {n} seeds; "
            f"Holm-adjusted p = {p_value(c.p_holm)})"
        )
    if c.verdict == "equivalent":
        return (
            head + f"**equivalent within ±{c.margin:g} nats** (TOST p = {p_value(c.p_tost)}; mean difference "
            f"{num(c.mean)} nats, 95% CI {interval(c.ci, 3)}; {n} seed{'s' if n != 1 else ''})"
        )
    if n < 2:
        settle = "one seed has no spread to test against: run at least 2 seeds per arm, 5 or more to settle it"
    elif c.seeds_needed is None:
        settle = "the seeds moved every pair alike, so no spread says how many more would settle it"
    else:
        settle = c.seeds_needed.words(f"±{c.margin:g} nats")
    return (
        head + f"**inconclusive** — mean difference {num(c.mean)} nats (95% CI {interval(c.ci, 3)}; Holm-adjusted "
        f"p = {p_value(c.p_holm)}; TOST p at ±{c.margin:g} = {p_value(c.p_tost)}; {n} seed{'s' if n != 1 else ''}): neither a difference nor "
        f"equivalence is shown; {settle}"
    )


def _budget_sentence(exp: Experiment) -> str:
    """Which budget each comparison holds fixed (equal tokens, or equal parameters for resized arms);
    for arms defined by other settings, each arm's tokens, parameters and FLOPs per token."""
    if not set(exp.arm_set.keys) <= set(ARM_KEYS):
        return _user_budget_sentence(exp)
    resized = {arm: sorted(set(d) & SIZE_KEYS) for arm, d in exp.differences.items() if set(d) & SIZE_KEYS}
    if not resized:
        return (
            "Each comparison holds the budget at equal tokens and (up to the head's lookup) equal FLOPs: "
            "the arms differ in parameters (embedding matrices)."
        )
    detail = "; ".join(f"{arm} differs from {exp.reference} in {', '.join(keys)}" for arm, keys in resized.items())
    return (
        f"Each comparison holds the budget at equal parameters (within 2%); the resized arms use more FLOPs "
        f"per token ({detail}), at equal tokens."
    )


def _user_budget_sentence(exp: Experiment) -> str:
    """Arms from any settings: whether they train the same tokens with the same parameters and FLOPs
    per token (``GPT.flops_per_token``, 6N + 12 L H Q T, on a weightless model), and the numbers."""
    figures = {}
    for arm, members in exp.runs.items():
        c = members[0].config
        tc = c["train"]
        tokens = tc["max_iters"] * tc["batch_size"] * tc["grad_accum_steps"] * c["model"]["block_size"]
        with torch.device("meta"):  # shapes only: no weights are drawn
            flops = GPT(GPTConfig(**c["model"])).flops_per_token()
        figures[arm] = (tokens, members[0].summary["parameters"], flops)
    words = {a: f"{t:,} tokens, {p:,} parameters, {f / 1e6:,.2f} MFLOPs a token" for a, (t, p, f) in figures.items()}
    if len(set(figures.values())) == 1:
        return f"The arms train the same budget: {next(iter(words.values()))} each."
    return "The arms differ in budget or size: " + "; ".join(f"{a}: {w}" for a, w in words.items()) + "."


def _untuned_caveat(exp: Experiment) -> str:
    """The line a verdict without tuned learning rates leads with: the rate may decide it, not the arm."""
    used = {arm: members[0].learning_rate for arm, members in exp.runs.items()}
    rates = (
        f"every arm trained at {next(iter(used.values())):g}"
        if len(set(used.values())) == 1
        else "the arms trained at " + ", ".join(f"{arm} {lr:g}" for arm, lr in used.items())
    )
    return (
        f"**Learning rates:** no tuning runs came with these runs ({rates}): where a rate was tuned for "
        "no arm, a verdict may be the rate's rather than the arm's (`--lr-grid` tunes each arm)."
    )


def _verdict_section(exp: Experiment, comps: list[stats.Comparison], warned: bool) -> list[str]:
    """``## Verdict``: one line per non-reference arm, then the budget held fixed."""
    lines = ["## Verdict", ""]
    if warned:
        lines += ["Not meaningful: see the warning above.", ""]
    if not exp.tuning:
        lines += [_untuned_caveat(exp), ""]
    if exp.sequential:
        lines += [f"**Sequential:** {exp.sequential}.", ""]
    for why in not_calibrated(exp):  # said before the verdicts it qualifies
        lines += [f"**Not calibrated:** {why}.", ""]
    missing = _never_reached_line(exp)
    lines += [missing, ""] if missing else []
    if target_of(exp.outcome) is not None:
        lines += [_target_line(c, exp.outcome) for c in comps]
        lines += ["", _machine_line(exp)] if exp.outcome.startswith("time-to:") else []
        lines += ["", _qualify_line(qualifications(exp))]
    else:
        lines += [_speed_line(c) if exp.outcome == "tokens-per-s" else _verdict_line(c) for c in comps]
    return lines + ["", _budget_sentence(exp), ""]


def _qualify_line(found: list[stats.Qualification]) -> str:
    """Which arms reach the target as a speedrun record must (modded-nanogpt's rule), in one paragraph."""
    words = [
        f"{q.arm} {num(q.mean, 4)} over {q.seeds} seeds, p = {p_value(q.p)}: "
        + ("**qualifies**" if q.qualifies else "does not qualify")
        for q in found
    ]
    return (
        f"**Reaches the target** (a speedrun record's rule, as modded-nanogpt's: mean final val loss below "
        f"{found[0].target:g} at p < {stats.QUALIFY_ALPHA:g}, one-sided one-sample t on seeds − 1 df): "
        + "; ".join(words)
        + "."
    )


def _best_line(b: best.BestVsBest, reference: str, margin: float, unit: str) -> str:
    """One best-against-best comparison in words: the verdict in bold, then the numbers behind it."""
    rates = f"best rates {b.best_lr[b.arm]:.3g} ({b.arm}) and {b.best_lr[reference]:.3g} ({reference})"
    numbers = (
        f"Δ of the fitted bests {signed(b.delta)} {unit}, 95% CI {interval(b.ci)} "
        f"(leave-one-seed-out); Holm-adjusted p = {p_value(b.p_holm)}; TOST p at ±{margin:g} = {p_value(b.p_tost)}; "
        f"{rates}; {b.seeds} seeds"
    )
    within = _within(b.verdict, b.ci, margin)
    if b.verdict == best.EDGE:
        return (
            f"- {b.arm} vs {reference} (reference): **not read** — a lowest mean sits at the grid's edge, so a best "
            f"may lie past it: add the next rate out to --lr-grid and run again ({numbers})"
        )
    return f"- {b.arm} vs {reference} (reference): **{b.verdict}**{within} — {numbers}"


def _best_verdict_section(exp: Experiment, margin_bpb: float | None, warned: bool) -> list[str]:
    """``## Verdict`` and ``## Learning rates`` for every rate on every seed: each arm's fitted best against the
    reference's (:func:`readout.best_comparisons`), then every rate's mean final val loss per arm."""
    lines = ["## Verdict", ""]
    lines += ["Not meaningful: see the warning above.", ""] if warned else []
    lines += [f"**Sequential:** {exp.sequential}.", ""] if exp.sequential else []
    for why in not_calibrated(exp):
        lines += [f"**Not calibrated:** {why}.", ""]
    lines += [_best_line(b, exp.reference, exp.margin, "nats") for b in best_comparisons(exp)]
    if margin_bpb is not None:
        found = best_comparisons(exp, margin_bpb)
        lines += ["", f"In bits per byte, at ±{margin_bpb:g} bpb (`--margin-bpb {margin_bpb:g}`):", ""]
        lines += [_best_line(b, exp.reference, margin_bpb, "bpb") for b in found] or ["- n/a: a run has no bpb"]
    lines += ["", _budget_sentence(exp), ""]
    table = best_table(exp)
    rates = sorted(table[exp.reference])
    lines += [
        "## Learning rates",
        "",
        f"Every arm trained every rate on every seed ({len(exp.seeds)}: {', '.join(map(str, exp.seeds))}). Mean final "
        "val loss (nats/token) over them; each arm's lowest in bold, whose runs the tables, figures and samples "
        "below show.",
        "",
        "| arm | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |",
        "|" + "---|" * (len(rates) + 1),
    ]
    for arm in exp.arms:
        means = best.means(table, arm, exp.seeds)
        low = min(means, key=means.get)
        lines.append(
            f"| {arm} | " + " | ".join(f"**{m:.4f}**" if lr == low else f"{m:.4f}" for lr, m in means.items()) + " |"
        )
    return lines + [
        "",
        "Each verdict reads the arm's best against the reference's, each the minimum of a quadratic of the mean "
        "against log10 rate through the lowest mean and its neighbours (clamped to the grid); its interval refits "
        "without each seed in turn (jackknife, t on seeds − 1 df); better or worse when the Holm-adjusted p over the "
        f"arms is below {exp.alpha:g} and the 95% interval excludes 0, equivalent when the "
        f"{_tost_level(exp.alpha)} interval lies inside the margin. Every rate on every seed, no pick on one "
        'seed (docs/experiment.md, "What α means here").',
        "",
    ]


def _stats_section(exp: Experiment, comps: list[stats.Comparison]) -> list[str]:
    """``## Paired statistics``: one row per non-reference arm, and how each number was computed."""
    speed = exp.outcome == "tokens-per-s"
    target = exp.outcome.split(":")[1] if target_of(exp.outcome) is not None else None
    kind = "seconds" if exp.outcome.startswith("time-to:") else "tokens"
    what = "−ln tokens/s" if speed else (f"ln {kind} to val loss {target}" if target else "final val loss")
    lines = [
        f"## Paired statistics ({what}, arm − reference, paired by seed)",
        "",
        "| arm | per seed | mean | 95% CI | paired t p | Holm p | Wilcoxon p | sign-test p | d_z | "
        f"{'time-per-token ratio' if speed else (f'{kind} ratio' if target else 'perplexity ratio')} | "
        f"TOST p (±{exp.margin:g}) | verdict | seeds to detect the margin (95% range) |",
        "|" + "---|" * 13,
    ]
    for c in comps:
        needed = "—" if c.verdict != "inconclusive" else (c.seeds_needed.short() if c.seeds_needed else "n/a")
        lines.append(
            f"| {c.arm} | {', '.join(signed(d) for d in c.diffs)} | {signed(c.mean)} | {interval(c.ci)} | {p_value(c.p_t)} | "
            f"{p_value(c.p_holm)} | {p_value(c.p_wilcoxon)} | {p_value(c.p_sign)} | {num(c.d_z, 2)} | {c.ppl_ratio:.4f} | "
            f"{p_value(c.p_tost)} | {c.verdict} | {needed} |"
        )
    unit = (
        "−ln tokens/s (negative = the arm is faster; −0.02 is about 2% faster), the runs of a seed trained one "
        "after another so machine noise hits both alike"
        if speed
        else (
            f"ln of the training {kind} to reach val loss {target}, interpolated between periodic evals "
            f"(negative = the arm needs fewer{'; evaluation and checkpoint time left out' if kind == 'seconds' else ''})"
            if target
            else "nats/token (negative = the arm is better)"
        )
    )
    return lines + [
        "",
        (
            f"Differences are arm − reference in {unit}. The equivalence margin "
            f"±{exp.margin:g} {'(a fraction)' if speed or target else 'nats'} "
            f"{'was declared before the runs' if exp.margin_declared else 'was given with this report, not declared before the runs'}. "
            "The CI is the paired t interval "
            "(`scipy.stats.ttest_rel`, n − 1 degrees of freedom); TOST is statsmodels' `ttost_paired` at ±margin; "
            "the Holm (1979) step-down adjustment over the arms gives statsmodels' `multipletests` numbers; the Wilcoxon "
            "signed-rank and exact sign tests are scipy's; d_z is mean / sd of the differences; the "
            f"{'time-per-token ratio' if speed else (f'{kind} ratio' if target else 'perplexity ratio')} is exp(mean). "
            "Seeds to detect the margin: the seeds a paired t test needs to detect a difference the size of the "
            "margin with 80% power at the observed spread, and the range the spread's own 95% interval allows."
        ),
        "",
    ]


def _bpb_section(exp: Experiment, margin_bpb: float) -> list[str]:
    """``## In bits per byte``: each arm's paired Δ final val bpb, its intervals and its verdict at ``margin_bpb``.

    Holm-adjusted over the arms as the nats verdicts are (within one experiment Δ bpb is Δ nats times one
    constant, so the two sections differ only in the margin); an arm with a run lacking bpb gets "n/a".
    """
    others = [a for a in exp.arms if a != exp.reference]
    found = {
        c.arm: c
        for c in stats.holm(
            [c for c in (bpb_comparison(exp, a, margin_bpb) for a in others) if c], exp.alpha, family=len(others)
        )
    }
    lines = [
        f"## In bits per byte, at ±{margin_bpb:g} bpb (`--margin-bpb {margin_bpb:g}`)",
        "",
        f"| arm | per seed | mean | 95% CI | 90% CI | Holm p | TOST p (±{margin_bpb:g}) | verdict |",
        "|" + "---|" * 8,
    ]
    for arm in others:
        c = found.get(arm)
        if c is None:
            lines.append(f"| {arm} | a run has no bits per byte (trained before they were recorded) | | | | | | n/a |")
            continue
        lines.append(
            f"| {arm} | {', '.join(signed(d) for d in c.diffs)} | {signed(c.mean)} | {interval(c.ci)} | "
            f"{interval(c.ci90)} | {p_value(c.p_holm)} | {p_value(c.p_tost)} | **{c.verdict}** |"
        )
    return lines + [
        "",
        "Δ = arm − reference in final val bits per byte (the loss over the same val windows, per byte of text), "
        f"paired by seed. Better or worse when the Holm-adjusted paired t p is below {exp.alpha:g} and the 95% "
        f"interval excludes 0, as for the verdicts in nats; equivalent when the {_tost_level(exp.alpha)} interval "
        f"lies inside ±{margin_bpb:g} bpb (two one-sided tests, statsmodels' `ttost_paired`); otherwise "
        "inconclusive. A margin in bits per byte "
        "means the same across tokenizers; unlike the nats margin it is not recorded in the experiment folder.",
        "",
    ]


def _compute_section(exp: Experiment, comps: list[stats.Comparison]) -> list[str]:
    """``## Compute-equivalent``: for arms better than the reference, the fraction of steps to match it."""
    lines = []
    for c in comps:
        frac = compute_equivalent(exp, c.arm) if c.verdict == "better" else None
        if frac is not None:
            lines.append(
                f"- {c.arm} reaches {exp.reference}'s final val loss after about {frac:.0%} of the steps "
                "(an estimate from the mean curves, mid-schedule points are not annealed)."
            )
    return ["## Compute-equivalent", "", *lines, ""] if lines else []


# The risk of picking each arm's rate on one seed, said under every tuning table.
ONE_SEED_RISK = (
    "- **One tuning seed.** Each arm's learning rate was picked on one seed, and a pick off by one grid "
    "step can decide the verdict. `compare.py` without `--lr-tuning one-seed` trains every rate on every seed and compares "
    "fitted bests instead."
)


def _lr_section(exp: Experiment) -> list[str]:
    """``## Learning rates``: the tuning grid (chosen LR in bold, edge warnings), or that none was tuned."""
    used = {arm: members[0].learning_rate for arm, members in exp.runs.items()}
    lines = ["## Learning rates", ""]
    if not exp.tuning:
        if len(set(used.values())) == 1:
            return lines + [
                f"No tuning runs were given: every arm used the config's learning rate, "
                f"{next(iter(used.values())):g}, tuned for none of them.",
                "",
            ]
        return lines + [
            "No tuning runs were given: the arms used these learning rates, tuned for none of them: "
            + ", ".join(f"{arm} {lr:g}" for arm, lr in used.items())
            + ".",
            "",
        ]
    table = lr_table(exp)
    grid = sorted({lr for t in table.values() for lr, _ in t["points"]})
    seeds = sorted({r.seed for members in exp.tuning.values() for r in members})
    lines += [
        f"Final val loss (nats/token) of each grid point on the tuning seed {', '.join(map(str, seeds))} "
        "(not a reported seed); the chosen (lowest) learning rate in bold.",
        "",
        "| arm | " + " | ".join(f"lr {lr:g}" for lr in grid) + " | reported runs used |",
        "|" + "---|" * (len(grid) + 2),
    ]
    for arm in [a for a in exp.arms if a in table]:
        scores = dict(table[arm]["points"])
        cells = [
            ("—" if lr not in scores else f"**{scores[lr]:.4f}**" if lr == table[arm]["best"] else f"{scores[lr]:.4f}")
            for lr in grid
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {used[arm]:g} |")
    lines += ["", ONE_SEED_RISK]
    for arm, t in table.items():
        if t["edge"]:
            lo, hi = t["points"][0][0], t["points"][-1][0]
            lines.append(
                f"- **Warning:** {arm}'s best learning rate {t['best']:g} is at the edge of its grid "
                f"({lo:g}–{hi:g}): the optimum may lie outside it; widen the grid (more --lr-grid rates, "
                "or a larger --lr-widen), unless the rate past that edge was tried and failed."
            )
        if used[arm] != t["best"]:
            lines.append(f"- {arm}'s reported runs used {used[arm]:g}, not its grid's best {t['best']:g}.")
    untuned = [arm for arm in exp.arms if arm not in table]
    if untuned:
        lines.append("- Not tuned: " + ", ".join(f"{arm} (used {used[arm]:g})" for arm in untuned) + ".")
    return lines + [""]


def _command_block(command: str) -> list[str]:
    """The command in a fenced block, the fence longer than any run of backticks inside it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", command)), default=0))
    return ["Produced by:", "", fence, command, fence, ""]


# ----------------------------------------------------------------------------- the report


def render_markdown(
    exp: Experiment,
    figures: list[str],
    sample_texts: dict,
    title: str,
    command: str | None = None,
    folder: Path | None = None,
    margin_bpb: float | None = None,
) -> str:
    """The report as Markdown: title, command, baseline warning, verdict, verdict in bits per byte
    (with ``margin_bpb``), paired statistics, compute-equivalent, learning rates, setup, per-arm table, figures, samples, runs.

    ``figures``: PNG names in the report's folder (:func:`experiment.ab.figures.plot_all`);
    ``sample_texts``: ``{prompt: {arm: text}}`` (:func:`folders.samples`), may be empty;
    ``command``: the exact command line that produced the report, shown after the title;
    ``folder``: the report's folder, against which the run folders inside it are named;
    ``margin_bpb``: an equivalence margin in bits per byte (``--margin-bpb``): adds the verdicts in bpb.
    """
    warning = baseline_warning(exp)
    lines = [f"# {title} (reference: {exp.reference})", ""]
    lines += _command_block(command) if command else []
    lines += [warning, ""] if warning else []
    if exp.swept:
        lines += _best_verdict_section(exp, margin_bpb, warning is not None)
    else:
        comps = comparisons(exp)
        lines += _verdict_section(exp, comps, warning is not None)
        lines += _bpb_section(exp, margin_bpb) if margin_bpb is not None else []
        lines += _stats_section(exp, comps)
        lines += _compute_section(exp, comps) if exp.outcome == "loss" else []
        lines += _lr_section(exp)
    lines += setup_section(exp)
    lines += arm_section(exp)
    lines += figures_section(figures)
    lines += samples_section(exp, sample_texts)
    lines += runs_section(exp, folder)
    return "\n".join(lines).rstrip("\n") + "\n"
