"""What every command shares: its argument parser and its error-exit policy.

Each entry point (``sample.py``, ``compare.py``, ``bench.py``, ``list_runs.py``,
``hf.py``, ``python -m data.prepare``) builds its parser with :class:`ArgumentParser` and
runs its body through :func:`run_command`, so bad input always ends the same way: one
``error: ...`` line on stderr naming the problem and the fix, and exit status 2
(docs/reliability.md).  ``train.py`` keeps the same statuses and adds what torchrun needs
(each error printed once across ranks, and handed to torchrun's error file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from core.errors import Interrupted, UserError


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` keeps the description's line breaks and shows every option's default.

    An option whose default is None or a flag's False shows none (there is nothing to show);
    its help text says what leaving it out means.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or "(default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` that reports bad flags as a one-line :class:`UserError` instead of exiting.

    Abbreviated options are off: ``--model.n_lay`` must not silently mean ``--model.n_layer``.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str):
        raise UserError(f"{message} (see --help)")


def run_command(body: Callable[[], int | None], on_interrupt: str | None = None) -> int:
    """Run a command's ``body`` and turn how it ended into an exit status.

    ``body()``'s return value (None meaning 0) on success; 2 after a :class:`UserError`
    (printed as one ``error:`` line); the signal's 128 + n after :class:`Interrupted`
    (printed likewise); 130 after a Ctrl-C that reached here, printing ``on_interrupt`` if
    given (a command that has already said where its progress is kept passes None).
    Anything else is a bug and keeps its traceback.
    """
    try:
        return body() or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    except Interrupted as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_status
    except KeyboardInterrupt:
        if on_interrupt:
            print(on_interrupt, file=sys.stderr, flush=True)
        return 130
