"""How every report and plan line writes a number, and how every report writes a figure: one rule each,
so the A/B, grid and budget reports print a p-value, an interval or a difference the same way.

    signed(-0.0123)              # "−0.0123": the sign always shown, a true minus (U+2212)
    interval((-0.0123, 0.0045))  # "[−0.0123, +0.0045]"
    p_value(0.0496)              # "0.0496": 3 significant digits, so 0.0496 never prints as 0.05 beside "better"
    duration(4000)               # "1.1 h"

Every formatter writes ``n/a`` for a number that could not be computed (None, NaN or infinite).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

from core.files import atomic_write_bytes

if TYPE_CHECKING:  # matplotlib loads only where a figure is drawn
    from matplotlib.figure import Figure

NA = "n/a"


def finite(x) -> bool:
    """Whether ``x`` is a real, finite number (not None, NaN or infinite)."""
    return isinstance(x, (int, float)) and math.isfinite(x)


def num(x: float | None, digits: int = 3) -> str:
    """A number for prose, with a true minus sign: ``num(-0.1428)`` is ``−0.143``."""
    return f"{x:.{digits}f}".replace("-", "−") if finite(x) else NA


def signed(x: float | None, digits: int = 4) -> str:
    """A difference, its sign always shown, with a true minus sign: ``+0.0050``, ``−0.1500``."""
    return f"{x:+.{digits}f}".replace("-", "−") if finite(x) else NA


def interval(ci: tuple[float, float] | None, digits: int = 4) -> str:
    """An interval of differences, both ends signed: ``[−0.0123, +0.0045]``; ``n/a`` when it has no ends
    (one seed)."""
    if ci is None or not (finite(ci[0]) and finite(ci[1])):
        return NA
    return f"[{signed(ci[0], digits)}, {signed(ci[1], digits)}]"


def p_value(p: float | None) -> str:
    """A p-value in 3 significant digits (``0.0496``, ``0.000123``, ``1.2e-07``): 2 digits, or 3 decimals, would
    print 0.0496 as 0.05 or 0.050 beside a verdict of better."""
    return f"{p:.3g}" if finite(p) else NA


def count(n: int, noun: str) -> str:
    """``"1 run"``, ``"3 runs"``: a count and its noun, plural by an s."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """A time estimate: ``3.2 h``, ``41 min``, ``50 s``."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def size(n_bytes: float) -> str:
    """A disk size in decimal units: ``1.1 GB``, ``880.0 MB``, ``12 kB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes / 1e3:.0f} kB"


def save_figure(fig: Figure | None, out_dir: Path, name: str) -> str | None:
    """Write ``fig`` to ``out_dir/name`` as PNG; the name, or None when there is no figure."""
    if fig is None:
        return None
    buf = io.BytesIO()
    # 96 dpi: sharp enough on a screen, and a committed experiment's figures stay small (about half the bytes of 120).
    fig.savefig(buf, format="png", dpi=96)
    atomic_write_bytes(Path(out_dir) / name, buf.getvalue())  # a reader never sees half a figure
    return name


def log_x(ax) -> None:
    """A log-scale x axis with plain tick labels (``6``, ``20``, ``2e-03``) on the major and, over a
    narrow range, the minor ticks."""
    from matplotlib.ticker import LogFormatter  # here: a plan line must not load matplotlib

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))
