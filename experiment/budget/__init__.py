"""The budget design (``compare.py budgets``): a warmup-stable-decay trunk per arm, rate and seed, a cooldown branch per budget.

``run`` plans and trains the trunks and branches, ``readout`` scores every branch and reads one
verdict per budget (best against best, Holm across budgets), ``markdown`` writes ``report.md``.
"""
