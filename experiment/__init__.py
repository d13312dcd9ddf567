"""A/B experiments over paired seeds: train the arms, check they are comparable, read verdicts, write the report.

Three designs, each a wing of ``run -> readout -> markdown`` over shared parts:

- ``ab/`` (``compare.py ab``, the default: two or more arms over paired seeds);
- ``grid/`` (``compare.py grid``: one A/B experiment per cell of a product of config values);
- ``budget/`` (``compare.py budgets``: warmup-stable-decay trunks with a cooldown branch per budget).

Each wing's ``cli.py`` is its mode's options (only those it can use) and its entry point.

Shared by all three: ``runs/`` (the experiment folder: what was asked and declared, each run's
``train.py`` command, run folders read back and checked), ``arms``, ``stats``, ``best`` (best
against best) and ``style`` (numbers and figure files).

A new design is a new wing of its own three modules over the shared ones; a shared module never
imports a wing, and a wing imports another only as the grid does the A/B design (each cell is
one).  Imports ``training``, ``model``, ``data`` and ``core``; only ``compare.py`` imports this package.
"""
