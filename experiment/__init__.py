"""The tied-vs-untied experiment: running the arms and seeds, checking they are comparable, statistics, figures, report.

Imports ``training``, ``model``, ``data`` and ``core``; only ``compare.py`` imports it.
"""
