"""The report's wording (report_markdown.py): verdicts, statistics, learning rates, timings, escaping.

Run: ``python -m pytest -q tests/test_report_markdown.py``  (CPU, offline, seconds).  The run
folders are written by hand (``fake_runs.py``) with known losses, baselines and timings, and
turned into an experiment by ``report.load_runs`` + ``report.check_experiment``.
"""

import json
import re

import pytest
from fake_runs import UNIGRAM, fake_experiment, fake_run, fake_tuning

from experiment import style
from experiment.ab import readout
from experiment.runs import folders
from experiment.ab import markdown
from experiment.ab import sections
from experiment.arms import DESCRIPTIONS

CLEAR = [(3.0, 2.85), (3.1, 2.97), (3.2, 3.04)]  # untied lower on every seed by 0.13-0.16 nats
NOISY = [(3.0, 2.95), (3.1, 3.14), (3.2, 3.19)]  # untied - tied: -0.05, +0.04, -0.01
CLOSE = [(3.0, 3.001), (3.1, 3.099), (3.2, 3.2005)]  # |differences| <= 0.001, within the 0.01 margin
THREE = [(3.0, 2.85, 3.005), (3.1, 2.97, 3.1), (3.2, 3.04, 3.19)]  # tied, untied, tied-bias per seed
ARMS3 = ("tied", "untied", "tied-bias")


def _exp(root, finals, summaries=None, arms=("tied", "untied"), tuning=(), **kwargs):
    """A checked experiment from fake runs of ``arms`` (reference tied, margin 0.01)."""
    paths = fake_experiment(root, finals, summaries, arms=arms, **kwargs)
    return folders.check_experiment(
        folders.load_runs(paths), reference="tied", margin=0.01, tuning=folders.load_runs(list(tuning))
    )


def _md(exp, **kwargs):
    """The report with no figures or samples unless given."""
    return markdown.render_markdown(exp, kwargs.pop("figures", []), kwargs.pop("samples", {}), "t", **kwargs)


def _section(md, heading):
    """The text of the ``## heading...`` section, up to the next ``## ``."""
    start = md.index(f"\n## {heading}")
    end = md.find("\n## ", start + 1)
    return md[start : end if end != -1 else len(md)]


def test_clearly_better_arm_gets_a_bold_better_with_its_numbers(tmp_path):
    """An arm lower on every seed: '**better**', the size of the gain, its 95% CI with true minus signs,
    the perplexity ratio, the seed count and the Holm-adjusted p."""
    md = _md(_exp(tmp_path, CLEAR))
    assert (
        "- untied vs tied (reference): **better** — final val loss lower by 0.147 nats (95% CI [−0.185, −0.109]; "
        "perplexity ×0.864; 3 seeds; Holm-adjusted p = 0.0036)"
    ) in _section(md, "Verdict")


def test_a_gain_whose_interval_reaches_inside_the_margin_says_so(tmp_path):
    """Better on every seed, the 95% interval from beyond −margin to inside it: the verdict says a difference
    smaller than the margin is not ruled out."""
    verdict = _section(_md(_exp(tmp_path, [(3.0, 2.996), (3.1, 3.088), (3.2, 3.194), (3.05, 3.04)])), "Verdict")
    assert "- untied vs tied (reference): **better**, possibly by less than the ±0.01 margin — " in verdict


def test_a_gain_whose_whole_interval_lies_inside_the_margin_is_called_smaller_than_it(tmp_path):
    """Better on every seed by about 0.003 nats, tightly: the whole 95% interval lies inside ±0.01, so the
    verdict says the gain is real and smaller than the margin."""
    pairs = [(3.0, 2.997), (3.1, 3.0969), (3.2, 3.1971), (3.05, 3.047)]
    verdict = _section(_md(_exp(tmp_path, pairs)), "Verdict")
    assert "- untied vs tied (reference): **better**, by less than the ±0.01 margin — " in verdict


def test_a_verdict_without_tuned_rates_leads_with_that_caveat(tmp_path):
    """No tuning runs: the verdict section opens with the rate every arm used and what an untuned rate means."""
    verdict = _section(_md(_exp(tmp_path, CLEAR)), "Verdict")
    first = next(line for line in verdict.splitlines() if line.strip() and not line.startswith("#"))
    assert first.startswith("**Learning rates:** no tuning runs came with these runs (every arm trained at ")
    assert "`--lr-grid`" in first


def test_inconclusive_arm_says_how_many_seeds_would_settle_it(tmp_path):
    """Noisy differences: '**inconclusive**' and the seeds figure from stats, with its range and the power it
    plans for (the same words the power line uses)."""
    exp = _exp(tmp_path, NOISY)
    needed = readout.comparisons(exp)[0].seeds_needed
    verdict = _section(_md(exp), "Verdict")
    assert "- untied vs tied (reference): **inconclusive** — " in verdict
    assert needed.words("±0.01 nats") in verdict and "with 80% power" in verdict


def test_equivalent_arm_names_the_margin_and_the_tost_p(tmp_path):
    """Differences far inside the margin with little spread: '**equivalent within ±0.01 nats**' and the TOST p."""
    verdict = _section(_md(_exp(tmp_path, CLOSE)), "Verdict")
    assert re.search(
        r"- untied vs tied \(reference\): \*\*equivalent within ±0\.01 nats\*\* \(TOST p = [0-9.e−-]+;", verdict
    )


def test_one_seed_is_inconclusive_with_no_interval(tmp_path):
    """With one seed there is no spread: inconclusive, CI and Wilcoxon 'n/a', and advice to run more seeds."""
    md = _md(_exp(tmp_path, [(3.0, 2.9)]))
    assert "**inconclusive**" in md and "95% CI n/a" in md and "run at least 2 seeds per arm" in md
    row = next(line for line in md.splitlines() if line.startswith("| untied | −0.1000 |"))
    assert row.split(" | ")[6] == "n/a"  # the Wilcoxon column


def test_every_non_reference_arm_gets_a_verdict_and_a_statistics_row(tmp_path):
    """Three arms: one verdict bullet and one table row each for the two non-reference arms, none for tied."""
    md = _md(_exp(tmp_path, THREE, arms=ARMS3))
    assert re.findall(r"^- (\S+) vs tied \(reference\): ", _section(md, "Verdict"), re.M) == [
        "untied",
        "tied-bias",
    ]  # the arms' canonical order
    rows = [line.split(" | ")[0] for line in _section(md, "Paired statistics").splitlines() if line.startswith("| ")]
    assert rows == ["| arm", "| untied", "| tied-bias"]


def test_statistics_row_holds_the_per_seed_differences_and_the_stats_values(tmp_path):
    """The paired row: per-seed arm − reference, mean, CI, the p-values, d_z, perplexity ratio, verdict;
    the note under it names the margin and the scipy / statsmodels functions."""
    exp = _exp(tmp_path, CLEAR)
    c = readout.comparisons(exp)[0]
    section = _section(_md(exp), "Paired statistics")
    assert (
        f"| untied | −0.1500, −0.1300, −0.1600 | −0.1467 | [−0.1846, −0.1087] | {c.p_t:.3g} | {c.p_holm:.3g} | "
        f"{c.p_wilcoxon:.3g} | {c.p_sign:.3g} | {c.d_z:.2f} | {c.ppl_ratio:.4f} |".replace("-", "−")
    ) in section
    assert "| better | — |" in section
    for words in (
        "declared before the runs",
        "scipy.stats.ttest_rel",
        "ttost_paired",
        "multipletests",
        "arm − reference in nats/token (negative = the arm is better)",
    ):
        assert words in section


@pytest.mark.parametrize(
    "resized, words",
    [
        (False, "equal tokens and (up to the head's lookup) equal FLOPs: the arms differ in parameters"),
        (True, "equal parameters (within 2%); the resized arms use more FLOPs per token"),
    ],
)
def test_verdict_names_the_budget_held_fixed(tmp_path, resized, words):
    """Without size differences the budget is equal tokens; with a resized arm it is equal parameters."""
    extra = {"model__n_embd": 160} if resized else {}
    paths = [fake_run(tmp_path, "t0", True, 0, 3.0, **extra), fake_run(tmp_path, "u0", False, 0, 3.1)]
    if resized:
        (paths[0] / "summary.json").write_text(
            json.dumps(
                {
                    "parameters": 1490,
                    "non_embedding_parameters": 700,
                    "tokens_per_s_median": 90.0,
                    "final_val_loss": 3.0,
                }
            )
        )
    md = _md(folders.check_experiment(folders.load_runs(paths)))
    assert words in _section(md, "Verdict")
    assert ("initial transformer body" in md) != resized


def test_compute_equivalent_is_given_only_for_a_better_arm(tmp_path):
    """A better arm gets 'reaches tied's final val loss after about X% of the steps', X from report; a
    non-better one gets no such section."""
    exp = _exp(tmp_path / "a", CLEAR, steps=(0, 5, 10, 20))
    frac = readout.compute_equivalent(exp, "untied")
    assert (
        f"- untied reaches tied's final val loss after about {frac:.0%} of the steps (an estimate from the "
        "mean curves, mid-schedule points are not annealed)."
    ) in _section(_md(exp), "Compute-equivalent")
    assert "## Compute-equivalent" not in _md(_exp(tmp_path / "b", NOISY))


def test_learning_rate_table_bolds_the_best_and_warns_at_the_grid_edge(tmp_path):
    """Tuning runs: a table arm x grid LR with the chosen score in bold; a best LR at the end of its grid is
    flagged 'widen the grid', one inside it is not; the tuning seed is named, and the risk of a one-seed pick."""
    grid = fake_tuning(tmp_path, "tied", 99, [(1e-3, 3.3), (2e-3, 3.2), (4e-3, 3.25)]) + fake_tuning(
        tmp_path, "untied", 99, [(1e-3, 3.1), (2e-3, 3.15), (4e-3, 3.3)]
    )
    section = _section(_md(_exp(tmp_path, CLEAR, tuning=grid)), "Learning rates")
    assert "| arm | lr 0.001 | lr 0.002 | lr 0.004 | reported runs used |" in section
    assert "| tied | 3.3000 | **3.2000** | 3.2500 | 0.002 |" in section
    assert "| untied | **3.1000** | 3.1500 | 3.3000 | 0.002 |" in section
    assert "untied's best learning rate 0.001 is at the edge of its grid (0.001–0.004)" in section
    warnings = [line for line in section.splitlines() if "widen the grid" in line]
    assert len(warnings) == 1 and warnings[0].startswith("- **Warning:** untied's")
    assert "tuning seed 99" in section
    assert "- **One tuning seed.** Each arm's learning rate was picked on one seed" in section


def test_without_tuning_runs_the_report_says_no_arm_was_tuned(tmp_path):
    """No tuning runs: every arm used the config's learning rate, tuned for none of them."""
    section = _section(_md(_exp(tmp_path, CLEAR)), "Learning rates")
    assert "every arm used the config's learning rate, 0.002, tuned for none of them" in section


@pytest.mark.parametrize(
    "finals, behind",
    [
        ([(10.0, 10.1), (10.05, 10.2)], ["tied", "untied"]),  # the debug config: neither arm learned
        ([(6.0, 7.0), (6.1, 6.5)], ["untied"]),  # one arm is still behind the baseline
    ],
)
def test_report_warns_first_when_a_run_has_not_beaten_the_unigram_baseline(tmp_path, finals, behind):
    """Before the verdict, a warning: not meaningful, which arm is behind, what to do."""
    exp = _exp(tmp_path, finals, [(UNIGRAM, UNIGRAM)] * len(finals))
    md = _md(exp)
    warning = md.index("**Warning: this comparison is not meaningful.**")
    assert warning < md.index("## Verdict") and "Not meaningful: see the warning above." in _section(md, "Verdict")
    paragraph = md[warning : md.index("\n", warning)]
    assert paragraph == markdown.baseline_warning(exp)
    assert "Train longer (raise --train.max_iters) or check the config" in paragraph
    assert re.findall(r"\b(tied|untied) 2 of 2 runs", paragraph) == behind
    assert "unigram 6.4400 nats/token" in paragraph and "| unigram baseline val loss | 6.4400 | 6.4400 |" in md


def test_the_warning_quotes_the_final_val_loss_of_the_table(tmp_path):
    """The warning's "mean final val loss" is the whole-split final val loss the table shows (summary.json),
    not the last periodic eval's (10.0077 here, a few windows only)."""
    whole = {**UNIGRAM, "final_val_loss": 10.0230}
    exp = _exp(tmp_path, [(10.0077, 10.0077)] * 2, [(whole, whole)] * 2)
    paragraph = markdown.baseline_warning(exp)
    assert "mean final val loss 10.0230, best periodic eval 10.0077" in paragraph
    assert "| final val loss (on the same val windows for every run) | 10.0230 ± 0.0000 |" in _md(exp)


def test_no_warning_when_every_run_beat_the_baseline(tmp_path):
    """Every run below its unigram loss (or none recorded): baseline_warning is None and no warning is printed."""
    exp = _exp(tmp_path, CLEAR, [(UNIGRAM, UNIGRAM)] * 3)
    assert markdown.baseline_warning(exp) is None and "**Warning" not in _md(exp)


def test_timings_are_marked_as_measured_under_load_with_median_and_range(tmp_path):
    """tokens/s and wall time: the median and min–max over seeds, never mean ± std, with the load caveat."""
    speeds = [(401.0, 100.0), (800.0, 100.0), (1200.0, 100.0)]
    extras = [
        ({"tokens_per_s_median": t, "elapsed_s": 10.0 * (s + 1)}, {"tokens_per_s_median": u, "elapsed_s": 60.0})
        for s, (t, u) in enumerate(speeds)
    ]
    md = _md(_exp(tmp_path, [(3.0, 3.1), (3.1, 3.2), (3.2, 3.3)], extras))
    assert "| tokens/s (each run's median) ‡ | 800 (range 401–1,200) | 100 |" in md
    assert "| wall time (s) ‡ | 20.0 (range 10.0–30.0) | 60.0 |" in md
    assert sections.TIMING_NOTE in md and "median and the range" in sections.TIMING_NOTE


def test_per_arm_table_has_one_column_per_arm_reference_first_and_labelled_losses(tmp_path):
    """The per-arm table: reference first; final loss 'on the same val windows', perplexity as the geometric mean."""
    md = _md(_exp(tmp_path, THREE, arms=ARMS3))
    section = _section(md, "Per arm")
    assert "|  | tied | untied | tied-bias |" in section
    assert "| final val loss (on the same val windows for every run) | 3.1000 ± 0.1000 |" in section
    assert "final val perplexity (exp(mean loss), the geometric mean over seeds)" in section


def test_setup_describes_every_arm_and_every_config_difference(tmp_path):
    """Setup: each arm's description from arms.DESCRIPTIONS, each config difference from the reference,
    the init and weight-decay policies in words."""
    exp = _exp(tmp_path, THREE, arms=ARMS3)
    section = _section(_md(exp), "Setup")
    for arm in exp.arms:
        assert DESCRIPTIONS[arm] in section
    assert "  - untied: `model.tie_embeddings` tied `True`, untied `False`" in section
    assert "  - tied-bias: `model.lm_head_bias` tied `False`, tied-bias `True`" in section
    assert "GPT-2's: Linear and Embedding weights ~ N(0, 0.02)" in section and "AdamW weight_decay=0.1" in section


def test_sections_come_in_report_order_and_the_command_right_after_the_title(tmp_path):
    """Title, the fenced command, verdict, statistics, learning rates, setup, per-arm table, figures,
    samples, runs; each figure with its caption."""
    md = _md(
        _exp(tmp_path, CLEAR),
        command="python compare.py --seeds 3",
        figures=["val_loss_vs_step.png"],
        samples={"a": {"tied": "x", "untied": "y"}},
    )
    assert md.startswith("# t (reference: tied)\n\nProduced by:\n\n```\npython compare.py --seeds 3\n```\n\n## Verdict")
    order = [
        "Verdict",
        "Paired statistics",
        "Compute-equivalent",
        "Learning rates",
        "Setup",
        "Per arm",
        "Figures",
        "Samples",
        "Runs",
    ]
    positions = [md.index(f"\n## {h}") for h in order]
    assert positions == sorted(positions)
    assert f"![val_loss_vs_step.png](val_loss_vs_step.png)\n\n*{sections.CAPTIONS['val_loss_vs_step.png']}*" in md


def test_runs_section_lists_every_folder_with_arm_and_seed_then_the_tuning_runs(tmp_path):
    """Runs: each reported folder with its arm and seed; tuning folders after, with their learning rate."""
    grid = fake_tuning(tmp_path, "untied", 9, [(1e-3, 3.1), (2e-3, 3.2)])
    exp = _exp(tmp_path, CLEAR, tuning=grid)
    section = _section(_md(exp), "Runs")
    for arm, members in exp.runs.items():
        for r in members:
            assert f"- `{r.path}` ({arm}, seed {r.seed})" in section
    assert section.index("Tuning runs:") < section.index(f"- `{grid[0]}` (untied, seed 9, learning rate 0.001)")


def test_runs_are_named_relative_to_the_reports_folder(tmp_path):
    """With the report's folder given, every run is named from there, ``../`` for one outside it: a committed
    report names no path of the machine that wrote it."""
    exp = _exp(tmp_path, CLEAR)
    inside = exp.runs["tied"][0].path
    section = _section(_md(exp, folder=inside.parent.resolve()), "Runs")
    assert f"- `{inside.name}` (tied, seed {exp.runs['tied'][0].seed})" in section and str(tmp_path) not in section
    elsewhere = _section(_md(exp, folder=(tmp_path / "another").resolve()), "Runs")
    assert f"- `../{inside.name}` (tied," in elsewhere and str(tmp_path) not in elsewhere


def test_an_arm_without_a_sample_says_it_kept_no_checkpoint(tmp_path):
    """Samples: an arm absent from the sample texts (none of its folders kept a checkpoint) reads
    '*no checkpoint*' in its column; the others keep their text."""
    section = _section(_md(_exp(tmp_path, CLEAR), samples={"Hi": {"tied": "abc"}}), "Samples")
    assert "| tied | untied |\n|---|---|\n| abc | *no checkpoint* |" in section


def test_with_no_checkpoint_in_any_arm_the_samples_say_so(tmp_path):
    """No ckpt_best.pt in any run folder (a fresh clone of committed runs): every prompt is still listed,
    each arm's column reading '*no checkpoint*', instead of the section vanishing without a word."""
    exp = _exp(tmp_path, CLEAR)
    texts = folders.samples(exp, ["RO"])
    assert texts == {"RO": {}}
    assert "| tied | untied |\n|---|---|\n| *no checkpoint* | *no checkpoint* |" in _section(
        _md(exp, samples=texts), "Samples"
    )


def test_samples_are_labelled_an_illustration_with_one_column_per_arm(tmp_path):
    """Samples: 'an illustration, not evidence'; one column per arm, text escaped into its cell."""
    md = _md(_exp(tmp_path, CLEAR), samples={"Hi": {"tied": "a|b", "untied": "<b>"}})
    section = _section(md, "Samples")
    assert "an illustration, not evidence" in section
    assert "| tied | untied |\n|---|---|\n| a&#124;b | &lt;b&gt; |" in section


def test_sample_cells_are_escaped():
    """Sample text cannot break the Markdown table or inject HTML."""
    assert sections._cell("a|b <i>x</i>\nc") == "a&#124;b &lt;i&gt;x&lt;/i&gt;<br>c"


def test_spread_gives_median_and_range_or_the_median_alone():
    """_spread: 'median (range min–max)'; the median alone when min equals max; 'n/a' when not recorded."""
    assert sections._spread((800.0, 401.0, 1200.0)) == "800 (range 401–1,200)"
    assert sections._spread((100.0, 100.0, 100.0)) == "100"
    assert sections._spread(None) == "n/a"


def test_a_margin_in_bits_per_byte_adds_its_verdicts_beside_the_nats(tmp_path):
    """With margin_bpb, a section gives Δ val bpb per seed, its 95% and 90% intervals and the verdict at that
    margin: NOISY is inconclusive at ±0.01 nats, but at 0.1 bpb per nat its 90% interval lies inside ±0.02 bpb."""
    finals = [(t, u) for t, u in NOISY]
    summaries = [({"final_val_bpb": t * 0.1}, {"final_val_bpb": u * 0.1}) for t, u in finals]
    exp = _exp(tmp_path, finals, summaries)
    md = _md(exp, margin_bpb=0.02)
    assert "**inconclusive**" in _section(md, "Verdict")
    section = _section(md, "In bits per byte, at ±0.02 bpb (`--margin-bpb 0.02`)")
    row = "| untied | −0.0050, +0.0040, −0.0010 | −0.0007 | [−0.0119, +0.0105] | [−0.0083, +0.0069] | 0.822 | 0.00883 |"
    assert row + " **equivalent** |" in section
    assert "90% interval lies inside ±0.02 bpb" in section
    assert "In bits per byte" not in _md(exp)


def test_runs_without_bits_per_byte_get_no_bpb_verdict(tmp_path):
    """A run whose summary has no final_val_bpb (older runs): the bpb section says so instead of a verdict."""
    section = _section(_md(_exp(tmp_path, CLEAR), margin_bpb=0.02), "In bits per byte")
    assert "a run has no bits per byte" in section and "| n/a |" in section


def test_the_bpb_verdicts_of_several_arms_are_holm_adjusted_like_the_nats_ones(tmp_path):
    """Three arms, bpb = 0.1 × nats and a bpb margin of 0.1 × the nats one: one row per non-reference arm, and
    each arm's bpb verdict and Holm p equal its nats ones (within one experiment the units differ by a constant)."""
    summaries = [tuple({"final_val_bpb": v * 0.1} for v in row) for row in THREE]
    exp = _exp(tmp_path, THREE, summaries, arms=ARMS3)
    section = _section(_md(exp, margin_bpb=0.001), "In bits per byte")
    assert "| tied |" not in section
    for c in readout.comparisons(exp):
        row = next(line for line in section.splitlines() if line.startswith(f"| {c.arm} |"))
        assert row.endswith(f"| **{c.verdict}** |") and f"| {style.p_value(c.p_holm)} |" in row


def test_a_verdict_read_at_rates_picked_on_one_seed_is_labelled_not_calibrated(tmp_path):
    """Tuning runs on one seed picked the arms' rates: the verdict section says, before the verdicts, that the
    verdicts are not calibrated and names the design that is (every rate on every seed); verdict.json says so too."""
    grid = fake_tuning(tmp_path, "untied", 9, [(1e-3, 3.1), (2e-3, 3.2)])
    grid += fake_tuning(tmp_path, "tied", 9, [(1e-3, 3.15), (2e-3, 3.25)])
    exp = _exp(tmp_path, CLEAR, tuning=grid)
    verdict = _section(_md(exp), "Verdict")
    assert verdict.index("**Not calibrated:** rates picked on one seed") < verdict.index("- untied vs tied")
    assert "(--lr-grid without --lr-tuning one-seed)" in verdict
    record = readout.verdict_record(exp, margin_declared=True)
    assert record["calibrated"] is False and record["not_calibrated"][0].startswith("rates picked on one seed")
    assert readout.verdict_record(_exp(tmp_path / "plain", CLEAR), True)["calibrated"] is True
