"""The A/B design: two or more arms over paired seeds, a verdict per arm against the reference.

``run`` trains it (every arm, rate and seed; ``--seeds auto`` a look at a time), ``readout`` reads it
(the outcome, the comparisons, ``verdict.json``, the ``--fail-on`` gate), ``markdown``, ``sections``
and ``figures`` write ``report.md`` and its PNGs.
"""
