"""Did the runs of an experiment follow one learning-rate schedule?  Read from what each run logged.

A run's final ``config.json`` does not tell its learning-rate history: a run extended with
``train.py --resume --train.max_iters=N --train.lr_decay_iters=N`` ends with the config of a run
trained to N in one go, but its first steps followed the shorter cosine.  So the fairness check
reads what each run did:

- the ``lr`` of its ``train`` rows (every ``train.log_interval`` steps: the rate of the step that
  ended there) and ``eval`` rows (the rate of the next step), divided by the run's own peak
  ``train.learning_rate`` (tuned arms differ in peak by design, not in shape), compared at the
  rows both runs logged;
- its ``resume`` rows (``training.runs.resume_row``): a resume that moved the cosine's horizon
  changes the rate of every later step, including steps no row logged.  A resume that moved
  nothing (after an interruption, or one that only changed bookkeeping) is no difference.

Run folders from before resume rows existed have none and are compared on their logged rates alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

from core.errors import UserError
from training.config import TrainConfig
from training.schedule import get_lr

# The train.py settings that shape the learning-rate schedule (relative to its peak).
SHAPE_KEYS = (
    "train.learning_rate",
    "train.min_lr",
    "train.warmup_iters",
    "train.lr_decay_iters",
    "train.max_iters",
    "train.lr_schedule",
    "train.cooldown_frac",
    "train.cooldown_shape",
)

# lr / peak values closer than this are the same schedule: the tuned arms' min_lr is passed on the
# command line to 6 significant digits (experiment.runs.plan.lr_flags), so their ratios differ in the
# 6th digit; a real difference of schedule (another horizon, warmup or min_lr) is far larger.
REL_TOL = 1e-3
ABS_TOL = 1e-6


class Scheduled(Protocol):
    """What the check needs of a run (:class:`experiment.runs.folders.Run` has it)."""

    path: Path
    schedule: dict[tuple[int, str], float]
    resumes: list[dict]


def lr_schedule(rows: list[dict], peak: float) -> dict[tuple[int, str], float]:
    """``{(step, kind): lr / peak}`` of the ``train`` and ``eval`` rows of ``metrics.jsonl`` that log an lr.

    ``peak``: the run's ``train.learning_rate``.  Rows without a finite ``lr`` are left out.
    """
    out = {}
    for r in rows:
        lr = r.get("lr")
        if r.get("kind") in ("train", "eval") and isinstance(lr, (int, float)) and math.isfinite(lr):
            out[(r["step"], r["kind"])] = lr / peak
    return out


def schedule_changes(rows: list[dict]) -> list[dict]:
    """The ``resume`` rows that moved the cosine's horizon (``lr_horizon`` before != after), in order."""
    return [
        r
        for r in rows
        if r.get("kind") == "resume"
        and isinstance(r.get("lr_horizon"), list)
        and len(r["lr_horizon"]) == 2
        and r["lr_horizon"][0] != r["lr_horizon"][1]
    ]


def describe_change(run: Scheduled) -> str:
    """``"runs/ft was resumed at step 10 with train.lr_decay_iters=20, train.max_iters=20"`` (its first
    schedule-changing resume), or ``""`` when it has none."""
    if not run.resumes:
        return ""
    first = run.resumes[0]
    changed = ", ".join(
        f"{k}={v}"
        for k, v in sorted((first.get("overrides") or {}).items())
        if k in ("train.lr_decay_iters", "train.max_iters")
    )
    return f"{run.path} was resumed at step {first['step']} with {changed or 'a new schedule horizon'}"


def first_parting(a: dict[tuple[int, str], float], b: dict[tuple[int, str], float]) -> tuple[int, float, float] | None:
    """``(step, a's lr / peak, b's)`` at the first row both logged where the two differ, or None."""
    for key in sorted(set(a) & set(b)):
        if not math.isclose(a[key], b[key], rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return key[0], a[key], b[key]
    return None


def _horizon_history(run: Scheduled) -> list[tuple]:
    """The steps at which ``run``'s resumes moved the horizon, and where to."""
    return [(r["step"], r["lr_horizon"][1]) for r in run.resumes]


def check_schedules(runs: list[Scheduled]) -> None:
    """Refuse runs whose learning-rate schedules differ, relative to each run's peak.

    Every run is compared with the first (the reference arm's first seed): at the rows both
    logged, lr / peak must agree (within :data:`REL_TOL`), and their resumes must have moved
    the cosine's horizon at the same steps to the same step.  Raises :class:`UserError` naming
    the run (the one that was resumed onto a new schedule, where one of the pair was) and the
    first step where the schedules part.
    """
    if not runs:
        return
    ref = runs[0]
    for run in runs[1:]:
        parting = first_parting(ref.schedule, run.schedule)
        moved = _horizon_history(ref) != _horizon_history(run)
        if parting is None and not moved:
            continue
        # Name the run that changed its schedule on a resume, when just one of the pair did.
        culprit, other = (ref, run) if ref.resumes and not run.resumes else (run, ref)
        why = describe_change(culprit) or describe_change(other)
        if parting is not None:
            step, x, y = parting if culprit is ref else (parting[0], parting[2], parting[1])
            raise UserError(
                f"{culprit.path} followed another learning-rate schedule than {other.path}: they part at step {step} "
                f"(lr / peak learning rate {x:.4g} vs {y:.4g}){'; ' + why if why else ''}: compare runs trained on "
                "one schedule (re-train the one that differs in one go, with the others' settings)"
            )
        steps = sorted({r["step"] for r in [*culprit.resumes, *other.resumes]})
        raise UserError(
            f"{culprit.path} and {other.path} moved their learning-rate schedules differently on resume, from step "
            f"{steps[0]} ({why}): compare runs trained on one schedule (re-train the one that differs in one go)"
        )


def check_planned(planned: dict[str, TrainConfig], reference: str, own: dict[str, dict]) -> None:
    """Before anything trains: refuse arms whose planned schedules differ, relative to each one's peak, as
    :func:`check_schedules` would refuse their runs after training.

    ``planned``: each arm's resolved train config (the reference's first); ``own``: each arm's own settings
    (flat keys), which the message names with the fix.  lr / peak is compared at every step of the
    reference's run (:func:`training.schedule.get_lr`), within :data:`REL_TOL`.  Raises :class:`UserError`.
    """
    ref = planned[reference]
    for arm, tc in planned.items():
        steps = range(max(ref.max_iters, tc.max_iters))
        parting = next(
            (
                (step, get_lr(step, tc) / tc.learning_rate, get_lr(step, ref) / ref.learning_rate)
                for step in steps
                if not math.isclose(
                    get_lr(step, tc) / tc.learning_rate,
                    get_lr(step, ref) / ref.learning_rate,
                    rel_tol=REL_TOL,
                    abs_tol=ABS_TOL,
                )
            ),
            None,
        )
        if parting is None and tc.max_iters == ref.max_iters:
            continue
        step, x, y = parting or (min(tc.max_iters, ref.max_iters), 1.0, 1.0)
        keys = [k for k in own.get(arm, {}) if k in SHAPE_KEYS] or [
            k for k in own.get(reference, {}) if k in SHAPE_KEYS
        ]
        raise UserError(
            f"arm {arm} would follow another learning-rate schedule than {reference}, parting at step {step} "
            f"(lr / peak {x:.4g} vs {y:.4g}){' because of its ' + ', '.join(keys) if keys else ''}: an arm may change "
            "the peak rate (its train.min_lr then follows it), not the schedule's shape or length; drop "
            f"{', '.join(keys) or 'the setting'} from the arm, or compare the schedules with compare.py budgets or a compare.py grid axis"
        )


def check_eval_density(eval_interval: dict[str, int], reference: str) -> None:
    """Refuse a race to a val loss (``tokens-to``, ``time-to``) whose arms evaluate at other intervals.

    The crossing is read between evaluations: on a falling, convex curve a chord over sparse evals lies
    above the curve and reads late, and denser evals give a noisy loss more chances to dip under the
    target first, so an arm that evaluates more often would win by that alone.
    """
    other = sorted(a for a, every in eval_interval.items() if every != eval_interval[reference])
    if other:
        a = other[0]
        raise UserError(
            f"arm {a} evaluates every {eval_interval[a]} steps and {reference} every {eval_interval[reference]}: a race "
            "to a val loss reads each crossing between evaluations, so the denser arm would read sooner by that "
            "alone; give every arm one train.eval_interval"
        )
