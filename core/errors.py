"""The one exception type for bad user input.

Every command-line entry point (``train.py``, ``sample.py``, ``bench.py``,
``python -m data.prepare``) catches :class:`UserError`, prints its message as a
single ``error: ...`` line on stderr and exits with status 2.  Anything else
that escapes is a bug in tinygpt and keeps its traceback.  :class:`Interrupted` is
not bad input: a run stopped by a signal exits with the shell's status for that
signal (128 + its number: 130 for SIGINT, 143 for SIGTERM).
"""


class UserError(ValueError):
    """Bad input from the user (config, file, flag): the message names the problem and the fix.

    Subclasses ``ValueError`` so library callers can catch it the usual way.
    """


class RunFailed(UserError):
    """A training run that a command started failed after its input was checked: printed as one
    ``error:`` line like :class:`UserError`, but exit status 1 (2 is bad input, refused before any work)."""


class FlagError(UserError):
    """A command-line value that is wrong whatever the runs hold (a margin <= 0, a reference arm not given):
    a report refused for one leaves the folder's earlier report standing."""


class Interrupted(Exception):
    """A run stopped on request (SIGINT / SIGTERM) after saving its checkpoint.

    ``signum`` is the signal's number; :attr:`exit_status` is the conventional 128 + signum.
    """

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        """128 + the signal number, as a shell reports a process killed by that signal."""
        return 128 + self.signum


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of ``error``'s message, at most ``limit`` characters; its type name if it has none.

    Library errors can be many lines long (tracebacks, file dumps); a one-line ``error:``
    message quotes only this.
    """
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__
