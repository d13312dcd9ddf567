"""How every report and plan line writes a number: one rule each, so the ordinary, grid and budget
reports print a p-value, an interval or a difference the same way.

    signed(-0.0123)              # "−0.0123": the sign always shown, a true minus (U+2212)
    interval((-0.0123, 0.0045))  # "[−0.0123, +0.0045]"
    p_value(0.0496)              # "0.0496": 3 significant digits, so 0.0496 never prints as 0.05 beside "better"
    duration(4000)               # "1.1 h"

Every formatter writes ``n/a`` for a number that could not be computed (None, NaN or infinite).
"""

from __future__ import annotations

import math

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
