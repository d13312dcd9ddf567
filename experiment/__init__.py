"""A/B experiments over paired seeds: train the arms, check they are comparable, read verdicts, write the report.

Three designs, each ``run -> readout -> markdown`` over shared parts:

- **A/B** (``compare.py``'s default, any two or more arms): ``runner`` trains arms x rates x seeds,
  ``report`` reads and checks the run folders, ``readout`` gives the verdicts, ``report_markdown``
  and ``report_sections`` word them, ``figures`` draws them; ``adopt`` takes in runs trained by hand.
- **Budgets** (``--budgets``): ``budgets`` plans trunks and cooldown branches, ``budget_readout``
  reads each budget, ``budget_report`` words it.
- **Grid** (``--grid``): ``grid`` runs one A/B experiment per cell, ``grid_model`` reads across cells,
  ``grid_markdown`` words it.
- **Shared**: ``record`` (the folder's ``experiment.json``), ``arms``, ``plan`` (sizes, rates, cost),
  ``launch`` (``train.py`` processes), ``schedules``, ``stats``, ``best`` (best against best),
  ``style`` (numbers and figure files).

A new design gets its own three modules, named for it, and uses the shared ones; a shared module
never imports a design's.  Imports ``training``, ``model``, ``data`` and ``core``; only
``compare.py`` imports this package.
"""
