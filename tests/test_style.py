"""One way to write each number in every report: experiment/style.py.

Run: ``python -m pytest -q tests/test_style.py``  (CPU, milliseconds).
"""

import math

import pytest

from experiment import style


def test_a_p_value_just_under_alpha_never_prints_as_alpha():
    """3 significant digits: 0.0496 stays 0.0496 beside a verdict of better (3 decimals would say 0.050)."""
    assert style.p_value(0.0496) == "0.0496" and style.p_value(0.000123) == "0.000123"
    assert style.p_value(1.2e-7) == "1.2e-07"


def test_differences_and_intervals_carry_their_sign_and_a_true_minus():
    """Both ends of an interval are signed, with U+2212 for minus, so a column of them lines up."""
    assert style.signed(-0.0123) == "−0.0123" and style.signed(0.0045) == "+0.0045"
    assert style.interval((-0.0123, 0.0045)) == "[−0.0123, +0.0045]"
    assert style.interval((-0.1984, -0.089), 3) == "[−0.198, −0.089]"


@pytest.mark.parametrize("bad", [None, math.nan, math.inf])
def test_a_number_that_could_not_be_computed_prints_n_a(bad):
    """None, NaN and inf print n/a in every formatter, never 'nan' or a crash."""
    assert {style.num(bad), style.signed(bad), style.p_value(bad), style.interval((bad, 1.0))} == {"n/a"}


def test_durations_and_sizes_pick_their_unit():
    """Plan lines: hours from an hour, minutes from a minute; decimal GB / MB / kB."""
    assert [style.duration(s) for s in (50, 2460, 4000)] == ["50 s", "41 min", "1.1 h"]
    assert [style.size(b) for b in (1.1e9, 8.8e8, 12e3)] == ["1.1 GB", "880.0 MB", "12 kB"]
