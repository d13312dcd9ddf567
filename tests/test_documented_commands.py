"""Every ``python compare.py`` command the README, docs/ and the results index show is one compare.py takes.

A command a page shows is read as a user would copy it (a line ending in a backslash goes on to the next,
a ``#`` comment is dropped), given to ``compare.py``'s mode picker and that mode's parser: each option must
be one of its mode's, each value one it accepts.  Nothing trains and no folder is read.  Commands with a
placeholder (``<grid folder>``, ``...``) are skipped.  The runs these commands train, at debug size, are
in ``test_cli.py``, ``test_compare_command.py``, ``test_grid.py`` and ``test_budgets.py``.

Run: ``python -m pytest -q tests/test_documented_commands.py``  (CPU, offline, seconds).
"""

import contextlib
import re
import shlex
from pathlib import Path

import pytest

import compare
from experiment.ab import cli as ab_cli
from experiment.budget import cli as budget_cli
from experiment.grid import cli as grid_cli
from experiment.runs import cli

REPO = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")), "results/README.md"]
PARSERS = {"ab": ab_cli.parser, "grid": grid_cli.parser, "budgets": budget_cli.parser}


def documented_commands() -> list[tuple[str, str]]:
    """``(page, command)`` for every ``python compare.py`` command shown on the pages, placeholders left out."""
    found = []
    for page in PAGES:
        text = (REPO / page).read_text(encoding="utf-8").replace("\\\n", " ")
        for match in re.finditer(r"python compare\.py[^`#|\n]*", text):
            command = match.group(0).strip()
            if not re.search(r"<|\.\.\.|…", command):
                found.append((page, command))
    return found


COMMANDS = documented_commands()


def test_the_pages_show_every_mode():
    """The pages show commands of each mode, so the parametrized test below reads all four parsers."""
    modes = {compare.mode_of(shlex.split(c)[2:])[0] for _, c in COMMANDS if "--help" not in c}
    assert modes == {"ab", "grid", "budgets", "report"}, modes


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}:{c[18:60]}" for p, c in COMMANDS])
def test_a_documented_command_parses_in_its_mode(page, command, capsys):
    """The command's mode takes each of its options and their values (argparse's and --section.key's)."""
    argv = shlex.split(command)[2:]
    if argv[-1:] == ["--help"]:
        with pytest.raises(SystemExit) if argv[:1] != ["--help"] else contextlib.nullcontext():
            compare.main(argv)
        assert capsys.readouterr().out
        return
    mode, rest = compare.mode_of(argv)
    if mode == "report":
        compare.report_parser().parse_args(rest)
    else:
        cli.parse(PARSERS[mode](), rest)
