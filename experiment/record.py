"""The experiment folder's record of its settings, ``experiment.json``: written once, then checked on every rerun.

A rerun of ``compare.py`` into the same folder continues the experiment (more seeds or arms,
another device or wandb mode) but never mixes settings: the resolved config (bookkeeping
aside), ``--equal-params``, the learning-rate grid, ``--lr-widen`` and the declared margin must
match what the folder was made with (the grid and ``--lr-widen`` may grow).  A report on the
folder's runs reads what it declared (:func:`declared_settings`): the margin, the outcome and a
sequential design's level.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import UserError
from core.files import file_lock, read_json, write_json
from experiment import arms, report
from experiment.arms import ARMS
from experiment.plan import lr_grid_refusals
from experiment.stats import look_alpha, sequential_looks
from training.config import RunConfig


def remember_settings(out_dir: Path, cfg: RunConfig, plan) -> dict:
    """Write experiment.json and return what it holds, or refuse a folder made with other settings.

    Arms, seeds, the lr grid and ``lr_widen`` may grow.  The check and the write happen under a
    lock, so two ``compare.py`` starting at once cannot both pass it with different settings.
    """
    (out_dir / ".claims").mkdir(parents=True, exist_ok=True)
    with file_lock(out_dir / ".claims" / "experiment.json.lock"):
        return _check_and_write_settings(out_dir, cfg, plan)


def _check_and_write_settings(out_dir: Path, cfg: RunConfig, plan) -> dict:
    """:func:`remember_settings`'s body, run under its lock."""
    # The folder remembers the resolved config it was made with (bookkeeping aside), so a re-run
    # continues it -- with more seeds or arms, another device or wandb mode -- but never mixes settings.
    settings = {
        "config": report.compared_config(cfg),
        "equal_params": plan.equal_params,
        "lr_grid": plan.lr_grid,
        "lr_widen": plan.lr_widen,
        "margin": plan.margin,
    }
    if plan.max_seeds:  # --seeds auto: the looks, fixed before the runs
        settings["max_seeds"] = plan.max_seeds
    if plan.outcome != "loss":  # what the verdict reads, declared before the runs
        settings["outcome"] = plan.outcome
    if plan.budgets:  # the budget axis (its trunks may grow to a larger last budget; no budget may go)
        settings["budgets"] = plan.budgets
    defined = {n: s for n, s in plan.arm_set.settings.items() if n not in ARMS}
    if defined:  # arms defined by settings (--arm): a report reads the run folders' arms from these
        settings["arms"] = defined
    if any(plan.arm_set.code(n) for n in plan.arms):  # the other arms train with the checkout's code: pin it
        settings["checkout"] = arms.head()
    saved = out_dir / "experiment.json"
    if saved.is_file():
        before = read_json(saved, "experiment settings")
        now = json.loads(json.dumps(settings))
        changed = report.config_changes(before.get("config", {}), settings["config"])
        # Older folders recorded no grid (none was run) and no margin (any may be declared now).
        was = {
            "equal_params": before.get("equal_params"),
            "margin": before.get("margin", now["margin"]),
            "checkout": before.get("checkout", now.get("checkout")),
            "outcome": before.get("outcome"),
            "max_seeds": before.get("max_seeds"),
        }
        changed += [k for k, v in was.items() if v != now.get(k)]
        gone = sorted(set(before.get("budgets", [])) - set(plan.budgets))
        changed += [f"budgets (without {', '.join(map(str, gone))} tokens)"] if gone else []
        had = before.get("arms", {})
        changed += [f"the settings of arm {n}" for n, s in now.get("arms", {}).items() if had.get(n, s) != s]
        if had or defined:  # arms may be added, never redefined
            settings["arms"] = {**had, **now.get("arms", {})}
        changed += lr_grid_refusals(before.get("lr_grid", []), plan.lr_grid, before.get("lr_widen", 0), plan.lr_widen)
        if changed:
            raise UserError(
                f"experiment folder {out_dir} was made with other settings ({', '.join(changed)}): pick another --name"
            )
    write_json(saved, settings)
    return json.loads(json.dumps(settings))  # as read back from the file (lists, not tuples), for comparing later


DEFAULT_MARGIN = 0.01  # nats/token (a fraction for the ratio outcomes), when none was declared or given


def declared_settings(out_dir: Path, margin: float | None, outcome: str | None) -> tuple[float, bool, str, tuple]:
    """What a report on run folders in ``out_dir`` reads with: ``(margin, margin declared before the runs,
    outcome, (alpha, the sequential design in words))``, from the folder's experiment.json where it
    declared them (``--margin`` / ``--outcome`` given then must agree), else from the options given.
    Raises :class:`UserError` when a given option contradicts the declaration."""
    return (*_declared_margin(out_dir, margin), _declared_outcome(out_dir, outcome), _declared_sequential(out_dir))


def _declared_margin(out_dir: Path, given: float | None) -> tuple[float, bool]:
    """``(margin, declared)``: the experiment folder's declared margin (experiment.json), checked against
    ``--margin`` if given, else ``--margin`` or the default, not declared before the runs."""
    saved = out_dir / "experiment.json"
    declared = read_json(saved, "experiment settings").get("margin") if saved.is_file() else None
    if declared is not None and given is not None and given != declared:
        raise UserError(f"{saved} declared --margin {declared:g} before the runs: report with it (drop --margin)")
    if declared is not None:
        return declared, True
    return (given if given is not None else DEFAULT_MARGIN), False


def _declared_outcome(out_dir: Path, given: str | None) -> str:
    """The outcome the experiment folder declared (experiment.json), checked against ``--outcome`` if given."""
    saved = out_dir / "experiment.json"
    declared = read_json(saved, "experiment settings").get("outcome", "loss") if saved.is_file() else None
    if declared is not None and given is not None and given != declared:
        raise UserError(f"{saved} declared --outcome {declared} before the runs: report with it (drop --outcome)")
    return declared or given or "loss"


def _declared_sequential(out_dir: Path) -> tuple[float, str]:
    """``(alpha, words)`` for runs of a sequential experiment folder (its experiment.json's max_seeds), else
    ``(0.05, "")``: a report on its runs tests at the looks' level, as its verdict did."""
    saved = out_dir / "experiment.json"
    max_seeds = read_json(saved, "experiment settings").get("max_seeds") if saved.is_file() else None
    if not max_seeds:
        return 0.05, ""
    looks = sequential_looks(max_seeds)
    alpha = look_alpha(looks)
    return alpha, (
        f"from a sequential experiment of up to {max_seeds} seeds in looks of {', '.join(map(str, looks))}; "
        f"every look tests at α = {alpha:.4g} (0.05 over {len(looks)} looks, Bonferroni)"
    )
