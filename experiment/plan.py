"""What an experiment will cost before it starts, and one progress bar over all its runs.

``compare.py`` prints one plan line before the first run trains (:func:`plan_line`): how many
runs the experiment has, how many are finished (or adopted), to resume and to train, a rough
time for them and the disk their checkpoints take.  The time is an estimate: the median wall
time of the runs already finished in the folder, else a few training steps timed here, scaled
to a run's steps and evaluations, plus a rough start-up cost (:func:`time_per_run`).  The disk is computed, not measured:
each run writes ``ckpt_best.pt`` (the fp32 weights) and ``ckpt_last.pt`` (the weights and
AdamW's two moments), :data:`CHECKPOINT_BYTES_PER_PARAM` bytes per parameter in all.
:class:`RunsBar` is the tqdm bar over the experiment (runs done / planned), drawn as a new line
each time a run ends, so it never shares a line with what ``train.py`` prints.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from core.files import read_json
from experiment import stats
from training.config import RunConfig
from training.runs import Unreadable, read_metrics

# fp32 weights in ckpt_best.pt, + weights, exp_avg and exp_avg_sq (AdamW) in ckpt_last.pt: 4 copies of 4 bytes.
CHECKPOINT_BYTES_PER_PARAM = 4 * 4
TIMED_STEPS = 3  # training steps timed (after one untimed) when no finished run gives a run's time
# A rough fixed cost of each train.py process besides its steps (seconds): starting Python and torch,
# reading the data, writing the run's files.  It dominates only tiny runs.
START_S = 10.0


@dataclass(frozen=True)
class PlannedRun:
    """One run of the experiment as planned: its arm and its folder name (a glob, ``*`` for a rate not tuned yet)."""

    arm: str
    name: str
    adopt: bool = False  # it is to be adopted (``--adopt``), once its tuned learning rate is known


def run_state(out_dir: Path, run: PlannedRun) -> str:
    """``"adopted"``, ``"finished"``, ``"resume"`` or ``"train"``: what the experiment does with ``run``.

    A pending adoption counts as adopted; of several folders a glob matches, the furthest along decides.
    """
    folders = sorted(out_dir.glob(run.name)) if "*" in run.name else [out_dir / run.name]
    if run.adopt:
        return "adopted"
    if any((f / "summary.json").is_file() for f in folders):
        adopted = any((f / "adopted.json").is_file() and (f / "summary.json").is_file() for f in folders)
        return "adopted" if adopted else "finished"
    return "resume" if any((f / "ckpt_last.pt").is_file() for f in folders) else "train"


def fraction_left(run_dir: Path, max_iters: int) -> float:
    """The share of ``max_iters`` an unfinished run still has to train, read from its last metrics row (1 if none)."""
    try:
        rows = read_metrics(run_dir / "metrics.jsonl")
    except Unreadable:
        return 1.0
    done = max((r["step"] for r in rows), default=0)
    return min(1.0, max(0.0, 1 - done / max(1, max_iters)))


def finished_seconds(out_dir: Path) -> list[float]:
    """The wall time (``elapsed_s``, seconds) of every finished run in ``out_dir``."""
    out = []
    for path in sorted(out_dir.glob("*/summary.json")):
        value = read_json(path, "run summary").get("elapsed_s")
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            out.append(float(value))
    return out


def measure_step_seconds(cfg: RunConfig) -> float:
    """Seconds a training step of ``cfg`` takes here: the median of :data:`TIMED_STEPS` after one untimed.

    Built as ``train.py`` builds it (``training.setup.build``), uncompiled (compiling would take longer
    than the timing); the model is dropped afterwards.
    """
    from training.schedule import get_lr
    from training.setup import build
    from training.step import train_step

    s = build(cfg.with_values(train={"compile": False}))
    cfg = s.cfg
    times = []
    for i in range(1 + TIMED_STEPS):
        t0 = time.perf_counter()
        train_step(s.step_model, s.optimizer, s.data, s.data_gen, cfg, s.device, s.amp_dtype, get_lr(i, cfg.train))
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def steps_per_run(cfg: RunConfig, val_tokens: int) -> float:
    """A run's work in training steps: ``max_iters``, plus its evaluations at a third of a step per batch
    (a forward pass, no backward): ``eval_iters`` batches of each split at every ``eval_interval`` and at
    step 0, and the final score's windows (``final_eval_tokens``, at most the val split)."""
    tc, block = cfg.train, cfg.model.block_size
    evals = tc.max_iters // tc.eval_interval + 2
    final_batches = min(tc.final_eval_tokens, val_tokens) / (block * tc.batch_size)
    return tc.max_iters + (evals * 2 * tc.eval_iters + final_batches) / 3


def time_per_run(out_dir: Path, cfg: RunConfig, val_tokens: int) -> tuple[float | None, str]:
    """``(seconds a run takes, how that was estimated)``: the median ``elapsed_s`` of the finished runs in
    ``out_dir``, else a few steps timed here (:func:`measure_step_seconds`) times :func:`steps_per_run`,
    plus :data:`START_S`.  Seconds are None when the timed steps failed (the runs will say why)."""
    seconds = finished_seconds(out_dir)
    if seconds:
        return statistics.median(seconds), f"the median of the {len(seconds)} finished run(s) here"
    try:
        per_step = measure_step_seconds(cfg)
    except (RuntimeError, OSError) as e:  # e.g. out of device memory: an estimate is not worth stopping for
        return None, f"a timed training step failed ({type(e).__name__})"
    how = (
        f"{TIMED_STEPS} training steps timed here at {per_step * 1000:.0f} ms, times {cfg.train.max_iters:,} "
        f"steps and the evaluations, plus about {START_S:.0f} s to start a run"
    )
    return per_step * steps_per_run(cfg, val_tokens) + START_S, how


def _size(n_bytes: float) -> str:
    """``1.1 GB``, ``880 MB``, ``12 kB`` (decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes / 1e3:.0f} kB"


def _duration(seconds: float) -> str:
    """``3.2 h``, ``41 min``, ``50 s``."""
    return (
        f"{seconds / 3600:.1f} h"
        if seconds >= 3600
        else (f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s")
    )


def plan_line(
    out_dir: Path,
    runs: list[PlannedRun],
    states: list[str],
    params: dict[str, int],
    max_iters: int,
    timing: tuple[float | None, str] | None,
    what: str,
) -> str:
    """The one line compare.py prints before training: counts, estimated time and checkpoint disk.

    ``states``: each run's :func:`run_state`; ``params``: parameters per arm
    (:func:`experiment.sizing.arm_params`); ``timing``: from :func:`time_per_run`, or None when
    nothing is left to train or resume; ``what``: how the runs come about.
    """
    count = {s: states.count(s) for s in ("finished", "adopted", "resume", "train")}
    line = (
        f"[compare] plan: {len(runs)} runs ({what}): {count['finished']} finished, {count['adopted']} adopted, "
        f"{count['resume']} to resume, {count['train']} to train"
    )
    if not count["resume"] and not count["train"]:
        return line + "; nothing to train"
    new = [r for r, s in zip(runs, states) if s == "train"]
    disk = sum(params[r.arm] for r in new) * CHECKPOINT_BYTES_PER_PARAM
    left = count["train"] + sum(
        1.0 if "*" in r.name else fraction_left(out_dir / r.name, max_iters)
        for r, s in zip(runs, states)
        if s == "resume"
    )
    seconds, how = timing
    when = (
        f"no time estimate ({how})"
        if seconds is None
        else f"roughly {_duration(left * seconds)} (an estimate, from {how}: {_duration(seconds)} a run)"
    )
    return (
        line
        + f"; {when}"
        + (
            f" and {_size(disk)} of checkpoints for the {len(new)} new runs ({CHECKPOINT_BYTES_PER_PARAM} bytes a "
            "parameter: fp32 weights in ckpt_best.pt, weights and AdamW's two moments in ckpt_last.pt)"
            if new
            else ""
        )
    )


class RunsBar:
    """One tqdm bar over the whole experiment: runs done of the runs planned, a new line at each change."""

    def __init__(self, total: int, done: int) -> None:
        self._bar = tqdm(
            total=total,
            initial=done,
            desc="[compare] experiment",
            unit="run",
            file=sys.stdout,
            mininterval=0,
            leave=False,
            dynamic_ncols=True,
        )
        self._end_line()

    def _end_line(self) -> None:
        """End the bar's line, so the next run's own output starts on a line of its own."""
        sys.stdout.write("\n")
        sys.stdout.flush()

    def add(self, n: int) -> None:
        """``n`` more runs planned (learning rates past the grid's edge)."""
        if n:
            self._bar.total += n
            self._bar.refresh()
            self._end_line()

    def run_done(self) -> None:
        """One more run finished (a run planned elsewhere counts as well: the total grows with it)."""
        if self._bar.n >= self._bar.total:
            self._bar.total = self._bar.n + 1
        self._bar.update(1)
        self._end_line()

    def close(self) -> None:
        """Stop the bar (its last line stays printed above)."""
        self._bar.close()


def power_line(out_dir: Path, arms: list[str], reference: str, seeds: int, margin: float) -> str:
    """The line after the plan: the smallest difference ``seeds`` paired seeds can detect, from the
    seed-to-seed spread of the finished runs in ``out_dir`` (:func:`experiment.stats.detectable_difference`;
    80% power, at 5% two-sided divided by the arms compared with the reference: Holm's strictest
    step), against the declared ``margin``; or how to learn the spread.

    Each arm's spread is the sample sd of its per-seed final val loss minus the reference's, over
    the seeds both finished here (named ``<arm>[-lr<rate>]-s<i>``); the largest sd speaks for all.
    """
    finals = {arm: _finished_scores(out_dir, arm) for arm in arms}
    spreads = {}
    for arm in arms:
        paired = sorted(finals[arm].keys() & finals[reference].keys()) if arm != reference else []
        if len(paired) >= 2:
            spreads[arm] = (statistics.stdev(finals[arm][i] - finals[reference][i] for i in paired), len(paired))
    if not spreads:
        return (
            "[compare] power: no two paired seeds have finished here, so the seed-to-seed spread is unknown: a "
            "pilot (--seeds 3) measures it, and this line then gives the smallest difference the seeds can detect"
        )
    arm, (sd, n) = max(spreads.items(), key=lambda kv: kv[1][0])
    alpha = 0.05 / max(1, len(arms) - 1)  # Holm's strictest step over the arms compared with the reference
    found = stats.detectable_difference(sd, seeds, alpha)
    need = stats.seeds_for(margin, sd, alpha)
    line = (
        f"[compare] power: {arm} − {reference} spreads by {sd:.4f} nats a seed ({n} paired seeds finished here); "
        f"{seeds} seeds detect a difference of about {found:.4f} nats (80% power, {100 * alpha:.3g}% two-sided)"
        if found is not None
        else f"[compare] power: {arm} − {reference} spreads by {sd:.4f} nats a seed ({n} paired seeds finished here)"
    )
    if need is not None and need > seeds:
        line += f"; the declared margin ±{margin:g} needs about {need} seeds: raise --seeds"
    return line


def _finished_scores(out_dir: Path, arm: str) -> dict[int, float]:
    """``{seed index: final val loss}`` of ``arm``'s finished reported runs in ``out_dir``."""
    pattern = re.compile(rf"{re.escape(arm)}(?:-lr[0-9.e+-]+)?-s(\d+)")
    out = {}
    for summary in sorted(out_dir.glob("*/summary.json")) if out_dir.is_dir() else []:
        match = pattern.fullmatch(summary.parent.name)
        if match:
            record = read_json(summary, "run summary")
            value = record.get("final_val_loss") if isinstance(record, dict) else None
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.setdefault(int(match[1]), float(value))
    return out
