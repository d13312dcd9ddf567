"""The report's wording (report_markdown.py): the unigram-baseline warning, timings, escaping.

Run: ``python -m pytest -q tests/test_report_markdown.py``  (CPU, offline, seconds).  The run
folders are written by hand (``fake_runs.py``) with known losses, baselines and timings.
"""

import re

import pytest
from fake_runs import UNIGRAM, fake_experiment

from experiment import report, report_markdown, runner


@pytest.mark.parametrize("finals, behind", [
    ([(10.0, 10.1), (10.05, 10.2)], ["tied", "untied"]),  # the debug config: neither arm learned
    ([(6.0, 7.0), (6.1, 6.5)], ["untied"]),               # one arm is still behind the baseline
])
def test_report_warns_first_when_a_run_has_not_beaten_the_unigram_baseline(tmp_path, finals, behind):
    """Before the verdict, a warning: not meaningful, which arm is behind, what to do; write_report flags it."""
    paths = fake_experiment(tmp_path, finals, [(UNIGRAM, UNIGRAM)] * len(finals))
    out, meaningful = runner.write_report(paths, tmp_path, prompts=[], title="t")
    md = out.read_text()
    warning = md.index("**Warning: this comparison is not meaningful.**")
    assert warning < md.index("**Verdict:**") and "not meaningful, see the warning above" in md
    paragraph = md[warning:md.index("\n", warning)]
    assert "Train longer (raise --train.max_iters) or check the config" in paragraph
    assert re.findall(r"\b(tied|untied) 2 of 2 runs", paragraph) == behind
    assert "unigram 6.4400 nats/token" in paragraph and "| unigram baseline val loss | 6.4400 | 6.4400 |" in md
    assert not meaningful


def test_timings_are_marked_as_measured_under_load_with_median_and_range(tmp_path):
    """tokens/s and wall time: the median and min–max over seeds, never mean ± std, with the load caveat."""
    speeds = [(401.0, 100.0), (800.0, 100.0), (1200.0, 100.0)]
    extras = [({"tokens_per_s_median": t, "elapsed_s": 10.0 * (s + 1)}, {"tokens_per_s_median": u, "elapsed_s": 60.0})
              for s, (t, u) in enumerate(speeds)]
    exp = report.check_experiment(report.load_runs(fake_experiment(tmp_path, [(3.0, 3.1), (3.1, 3.2), (3.2, 3.3)], extras)))
    md = report_markdown.render_markdown(exp, [], {}, "t")
    assert "| tokens/s (each run's median) ‡ | 800 (range 401–1,200) | 100 |" in md
    assert "| wall time (s) ‡ | 20.0 (range 10.0–30.0) | 60.0 |" in md
    assert "‡ Timings were measured under whatever load the machine had" in md and "median and the range" in md


def test_sample_cells_are_escaped():
    """Sample text cannot break the Markdown table or inject HTML."""
    assert report_markdown._cell("a|b <i>x</i>\nc") == "a&#124;b &lt;i&gt;x&lt;/i&gt;<br>c"
