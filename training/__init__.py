"""Training runs: the config of a run, its setup, the step, the loop, checkpoints, faults, DDP and run folders.

Also the generation timing behind ``bench.py --generate`` / ``--stream`` (``training/benchmark.py``).

Imports ``model``, ``data`` and ``core``; the commands (``train.py``, ``sample.py``, ``bench.py``,
``list_runs.py``, ``hf.py``) and ``experiment`` import it.  Never imports a command or ``experiment``.
"""
