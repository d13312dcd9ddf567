"""The grid design (``compare.py grid``): one tuned A/B experiment per cell of a product of config values.

``run`` trains the cells (each through :mod:`experiment.ab.run`) and reads their rows back, ``model``
fits Δ across cells (a random-effects model, one moderator at a time), ``markdown`` writes the
scaling view's ``report.md`` and figures.
"""
