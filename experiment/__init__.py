"""The A/B experiment (any two or more arms; tied vs untied the preset): running the arms and seeds, checking
they are comparable, statistics, figures, report.

Imports ``training``, ``model``, ``data`` and ``core``; only ``compare.py`` imports it.
"""
