"""What every command shares: its argument parser and its error-exit policy.

Each entry point (``sample.py``, ``compare.py``, ``bench.py``, ``list_runs.py``,
``hf.py``, ``python -m data.prepare``) builds its parser with :class:`ArgumentParser` and
runs its body through :func:`run_command`, so bad input always ends the same way: one
``error: ...`` line on stderr naming the problem and the fix, and exit status 2
(docs/reliability.md).  A file or folder the command cannot create, read or write (an
``OSError`` such as ``NotADirectoryError`` or ``PermissionError``) is bad input too: one line
naming the path and the fix (:func:`os_error_message`).  A reader that closes stdout
(``| head``) ends the command quietly with status 0.  ``train.py`` keeps the same statuses and
adds what torchrun needs (each error printed once across ranks, and handed to torchrun's error
file).
"""

from __future__ import annotations

import argparse
import difflib
import errno
import re
import os
import select
import sys
from collections.abc import Callable

from core.errors import Interrupted, RunFailed, UserError


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` keeps the description's line breaks and shows every option's default.

    An option whose default is None or a flag's False shows none (there is nothing to show);
    its help text says what leaving it out means.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or "(default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def plain_text(doc: str) -> str:
    """A docstring with its reST markup dropped for a terminal: ``x`` and :role:`x` read x."""
    return re.sub(r"``([^`]+)``", r"\1", re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc))


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` that reports bad flags as a one-line :class:`UserError` instead of exiting.

    Abbreviated options are off: ``--model.n_lay`` must not silently mean ``--model.n_layer``.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if kwargs.get("description"):  # a module docstring as --help's text: its reST markup is not for users
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str):
        unknown = re.match(r"unrecognized arguments: (--[^\s=]+)", message)
        close = closest_option(self, unknown[1]) if unknown else None
        raise UserError(f"{message}{f': did you mean {close}?' if close else ''} (see --help)")


def closest_option(parser: argparse.ArgumentParser, bad: str) -> str | None:
    """The ``--option`` of ``parser`` one typo from ``bad`` (``difflib``, ratio at least 0.75), or None."""
    options = [o for o in parser._option_string_actions if o.startswith("--")]
    close = difflib.get_close_matches(bad, options, n=1, cutoff=0.75)
    return close[0] if close else None


# What to do about a path, by the errno the system gave for it.
_PATH_FIXES = {
    errno.ENOTDIR: "a part of that path is a file, not a folder: give a path whose parents are folders",
    errno.EEXIST: "it is in the way: give a path that does not exist yet, or move what is there",
    errno.EISDIR: "it is a folder: give the path of a file",
    errno.ENOENT: "check the path",
    errno.EACCES: "you may not write or read there: give a path you own, or fix its permissions",
    errno.EPERM: "you may not write or read there: give a path you own, or fix its permissions",
    errno.EROFS: "it is on a read-only filesystem: give a path on a writable disk",
    errno.ENOSPC: "free disk space",
    errno.EDQUOT: "free disk space (your quota is used up)",
    errno.ENAMETOOLONG: "give a shorter path",
}


def os_error_message(e: OSError) -> str:
    """One line for an ``OSError`` a command met: what went wrong, on which path, and the fix.

    E.g. ``cannot use data/afile/cache (Not a directory): a part of that path is a file, not
    a folder: ...``.  The command can be run again once the path is fixed: what it had
    written before is kept (files are written whole or not at all, ``core.files``).
    """
    what = e.strerror or str(e) or type(e).__name__
    if e.filename is None:
        return f"{what} ({type(e).__name__}): fix the cause (a path, disk space, the network), then run the same command again"
    where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 is not None else "")
    fix = _PATH_FIXES.get(e.errno, "fix the path or free disk space")
    return f"cannot use {where} ({what}): {fix}, then run the same command again"


def _stdout_is_closed() -> bool:
    """Whether stdout's reader has gone, so that a ``BrokenPipeError`` came from stdout, not another pipe.

    ``poll`` reports an error on the writing end of a pipe whose reader closed it.
    """
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # closed, or no descriptor: nobody reads it either
        return True
    if not hasattr(select, "poll"):  # no way to tell: stdout is what commands write to
        return True
    poller = select.poll()
    poller.register(fd, 0)  # errors and hang-ups are always reported
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def quiet_stdout() -> None:
    """Point stdout at the null device, so the interpreter's final flush cannot raise BrokenPipeError again.

    The Python docs' way to end a program whose reader closed the pipe (``signal`` module,
    "Note on SIGPIPE").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured by a test): nothing to flush
        pass


def run_command(body: Callable[[], int | None], on_interrupt: str | None = None) -> int:
    """Run a command's ``body`` and turn how it ended into an exit status.

    ``body()``'s return value (None meaning 0) on success; 1 after :class:`RunFailed`; 2 after a :class:`UserError` or an
    ``OSError`` on a path (printed as one ``error:`` line, :func:`os_error_message`); 0, quietly,
    when the reader of stdout went away (``| head``); the signal's 128 + n after
    :class:`Interrupted` (printed likewise); 130 after a Ctrl-C that reached here, printing
    ``on_interrupt`` if given (a command that has already said where its progress is kept
    passes None).  Anything else is a bug and keeps its traceback.
    """
    try:
        status = body() or 0
        sys.stdout.flush()  # inside the try: a closed pipe shows up here when the output was short
        return status
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1 if isinstance(e, RunFailed) else 2
    except BrokenPipeError as e:
        if _stdout_is_closed():  # the reader has all it wanted, as with `cat file | head`
            quiet_stdout()
            return 0
        print(f"error: {os_error_message(e)}", file=sys.stderr, flush=True)
        return 2
    except OSError as e:
        print(f"error: {os_error_message(e)}", file=sys.stderr, flush=True)
        return 2
    except Interrupted as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_status
    except KeyboardInterrupt:
        if on_interrupt:
            print(on_interrupt, file=sys.stderr, flush=True)
        return 130
