"""The experiment folder's record of its settings, ``experiment.json``: written once, then checked on every rerun.

A rerun of ``compare.py`` into the same folder continues the experiment (more seeds or arms,
another device or wandb mode) but never mixes settings: the resolved config (bookkeeping
aside), ``--equal-params``, the learning-rate grid, ``--lr-widen`` and the declared margin must
match what the folder was made with (the grid and ``--lr-widen`` may grow).
"""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import UserError
from core.files import file_lock, read_json, write_json
from experiment import code_arms, report
from experiment.arms import ARMS
from experiment.tuning import lr_grid_refusals
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
        settings["checkout"] = code_arms.head()
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
