"""Sections of the scaling view's ``report.md``: the model across cells, and the readouts asked for.

    lines = model_section(cross_cell_models(rows))                  # "## Across cells (random-effects model)"
    lines = readout_section(readout, rows, cells)                   # "## Readouts asked for" (contrast, slope)
    lines = lr_pick_section(lr_picks(cells))                        # "## Learning-rate picks"

Every number is read off :mod:`experiment.grid_model` or :mod:`experiment.grid_readout`; this module
only words them.
"""

from __future__ import annotations

from experiment.grid_model import ArmModels, Model, excludes_zero
from experiment.grid_readout import Contrast, Readout, Slope, contrasts, selected_cells, slope
from experiment.grid_report import LrPick


def _ci(lo: float, hi: float, digits: int = 4) -> str:
    return f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


MODEL_INTRO = (
    "Per arm, a linear mixed model of the seed-level Δ val bpb with a random intercept per cell "
    "(statsmodels `MixedLM`, REML): Δ_cs = β0 + β·x_c + u_c + e_cs, u_c ~ N(0, τ²), e_cs ~ N(0, σ²), one σ for "
    "all cells. τ is the between-cell sd of Δ that the moderator x leaves unexplained. Each moderator is fitted in "
    "its own model; none of them is a causal estimate, and share, tokenizer family and never-seen fraction move "
    "together across these cells. Estimates are in bpb per unit of the term, with 95% Wald intervals on a t "
    "quantile with cells − fixed terms df; an interval that covers 0 is not supported by these cells. Q_E: "
    "Cochran's Q of the same terms in a fixed-effect fit of the cell means (weights 1/SE²), on cells − fixed "
    "terms df; a small p says the cells differ by more than their seed noise even after the moderator. AIC: of "
    "maximum-likelihood refits (REML likelihoods are not comparable across fixed effects); lower is better, and "
    "a difference under about 2 does not separate two models. Each model is also refitted with one cell left out "
    "in turn: the range of each estimate and in how many of those fits its interval excludes 0."
)


def _model_rows(m: Model) -> list[str]:
    """The table rows of one model: its terms (the intercept only when there is no moderator)."""
    shown = m.terms if len(m.terms) == 1 else m.terms[1:]
    note = "" if m.converged else " (did not converge)"
    lines = []
    for i, t in enumerate(shown):
        sign = "supported" if excludes_zero(*t.ci) else "covers 0"
        name = "intercept (the mean Δ)" if t.name == "intercept" else t.name
        loo = (
            f"{t.loo_range[0]:+.4f} to {t.loo_range[1]:+.4f}, supported in {t.loo_supported} of {m.loo_fits}"
            if t.name != "intercept" and m.loo_fits
            else ""
        )
        fit = f"{m.tau:.4f} | {m.q:.1f} ({m.q_df}), {_p(m.q_p)} | {m.aic:.1f}{note}" if i == 0 else " | | "
        lines.append(
            f"| {m.moderator if i == 0 else ''} | {name} | {t.coef:+.4f} {_ci(*t.ci)} ({sign}) | {loo} | {fit} |"
        )
    return lines


def _aic_words(models: list[Model]) -> str:
    """The models by AIC, lowest first, each with its distance from the lowest."""
    ranked = sorted(models, key=lambda m: m.aic)
    return (
        "By AIC: "
        + ", ".join(
            f"{m.moderator} {m.aic:.1f}" + (f" (+{m.aic - ranked[0].aic:.1f})" if k else "")
            for k, m in enumerate(ranked)
        )
        + "."
    )


def model_section(arms: list[ArmModels]) -> list[str]:
    """``## Across cells (random-effects model)``: per arm, every moderator's model in one table."""
    lines = ["## Across cells (random-effects model)", ""]
    if not any(a.models for a in arms):
        return lines + [
            "Too few finished cells for a model across cells (it needs more cells than terms, each "
            "with ≥ 2 paired seeds).",
            "",
        ]
    lines += [MODEL_INTRO, ""]
    for a in arms:
        if not a.models:
            continue
        sigma = a.models[0].sigma
        lines += [
            f"**{a.arm} − {a.reference}**: {len(a.cells)} cells, {a.seeds} seed-level Δs; within-cell sd of a "
            f"seed's Δ σ = {sigma:.4f} bpb.",
            "",
            "| moderator | term | estimate [95% CI] | one cell left out | τ (bpb) | Q_E (df), p | AIC (ML) |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in a.models:
            lines += _model_rows(m)
        lines += ["", _aic_words(a.models)]
        if a.left_out:
            lines.append("Left out: " + "; ".join(f"`{c}` ({why})" for c, why in a.left_out.items()) + ".")
        if a.not_fitted:
            lines.append("Not fitted: " + "; ".join(f"{k} ({why})" for k, why in a.not_fitted.items()) + ".")
        lines.append("")
    return lines


def _contrast_line(c: Contrast, reference: str) -> str:
    head = f"- **{c.arm} − {reference}**: "
    if c.missing:
        return head + f"not available ({c.missing})."
    sign = "excludes 0" if excludes_zero(*c.ci) else "covers 0"
    return (
        head + f"C = {c.c:+.4f} {_ci(*c.ci)} (Welch, df {c.df:.1f}; {sign}); Δ(`{c.a}`) = {c.delta_a:+.4f} "
        f"({c.n_a} seeds), Δ(`{c.b}`) = {c.delta_b:+.4f} ({c.n_b} seeds)."
    )


def _slope_line(s: Slope, reference: str) -> str:
    head = f"- **{s.arm} − {reference}**: "
    cells = ", ".join(f"`{c}` (share {sh:.1%}, Δ {d:+.4f})" for c, sh, d, _ in s.cells)
    if s.missing:
        return head + f"not available ({s.missing})" + (f"; cells: {cells}." if cells else ".")
    sign = "supported" if excludes_zero(*s.ci) else "covers 0"
    return head + f"{s.slope:+.4f} bpb per 10 percentage points {_ci(*s.ci)} (t on {s.df} df; {sign}), over {cells}."


def readout_section(readout: Readout, rows: list[dict], cells: list) -> list[str]:
    """``## Readouts asked for``: each ``--contrast`` and the ``--slope-within`` slope, per arm; [] if none asked."""
    if not (readout.contrasts or readout.slope_within):
        return []
    reference = rows[0]["reference"] if rows else "the reference"
    lines = ["## Readouts asked for", ""]
    for a, b in readout.contrasts:
        lines += [
            f"### Contrast C = Δ(`{a}`) − Δ(`{b}`)",
            "",
            "Δ = arm − reference, final val bpb, paired by seed within each cell; the two cells' seeds are not "
            "paired with each other, so the 95% interval is Welch's (scipy `ttest_ind`, unequal variances).",
            "",
        ]
        lines += [_contrast_line(c, reference) for c in contrasts(rows, a, b)] + [""]
    if readout.slope_within:
        chosen = selected_cells(cells, readout.slope_within)
        where = ", ".join(f"`{k}` ∈ {{{', '.join(vs)}}}" for k, vs in readout.slope_within.items())
        lines += [
            f"### Slope of Δ on embedding share within {where}",
            "",
            "Weighted least squares of each cell's Δ bpb on its embedding share (statsmodels `WLS`, weights "
            "1/SE², scale estimated from the residuals), per 10 percentage points of share, with its 95% t "
            "interval on cells − 2 df.",
            "",
        ]
        lines += [_slope_line(s, reference) for s in slope(rows, [gc.cell.name for gc in chosen])]
        unfinished = [gc.cell for gc in chosen if gc.exp is None]
        if unfinished:
            lines.append(
                "- Chosen but not finished: "
                + ", ".join(f"`{c.name}` ({c.error or 'not run yet'})" for c in unfinished)
                + "."
            )
        lines.append("")
    return lines


def lr_pick_section(picks: list[LrPick]) -> list[str]:
    """ "## Learning-rate picks": the arms whose tuned rate led the runner-up by less than one seed's spread."""
    if not picks:
        return []
    close = [p for p in picks if p.within_noise]
    lines = [
        "## Learning-rate picks",
        "",
        f"Each arm's rate is the best of its grid on one tuning seed. In {len(close)} of {len(picks)} picks the "
        "chosen rate's final val loss beat the runner-up's by less than the sample sd of that arm's final val loss "
        "over its reported seeds, so a different tuning seed could have picked the runner-up; the arm's Δ is then "
        "read at a rate that is best within seed noise, not clearly best.",
        "",
    ]
    if close:
        lines += [
            "| cell | arm | chosen rate | runner-up | lead (nats) | seed sd (nats) |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p.cell} | {p.arm} | {p.rate:g} | {p.runner_up:g} | {p.lead:.4f} | {p.seed_sd:.4f} |" for p in close
        ]
        lines.append("")
    return lines
