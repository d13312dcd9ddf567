"""Utilities every package may use: errors, crash-safe files, CLI plumbing, typed settings, hardware.

Imports the standard library and third-party libraries only, never another tinygpt package:
every other package may import it.
"""
