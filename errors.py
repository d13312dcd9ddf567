"""The one exception type for bad user input.

Every command-line entry point (``train.py``, ``sample.py``, ``bench.py``,
``python -m data.prepare``) catches :class:`UserError`, prints its message as a
single ``error: ...`` line on stderr and exits with status 2.  Anything else
that escapes is a bug in tinygpt and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input from the user (config, file, flag): the message names the problem and the fix.

    Subclasses ``ValueError`` so library callers can catch it the usual way.
    """
