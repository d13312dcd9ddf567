"""An experiment folder and its runs, shared by every design: what was asked and declared, how runs train, how they read back.

``plan`` (what ``compare.py`` was asked to run, its cost), ``commands`` (each run's ``train.py`` flags,
checked before anything trains), ``launch`` (``train.py`` subprocesses, shared between processes),
``record`` (``experiment.json``), ``folders`` (run folders read and checked for a fair comparison),
``schedules`` (did the runs follow one learning-rate schedule?), ``adopt`` (runs trained elsewhere).
"""
