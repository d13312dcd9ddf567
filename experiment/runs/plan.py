"""What an experiment will train and what it will cost before it starts: what was asked (:class:`Plan`), its
models' sizes, its learning-rate grid, the plan line, and one progress bar over all its runs.

``compare.py`` prints one plan line before the first run trains (:func:`plan_line`): how many
runs the experiment has, how many are finished (or adopted), to resume and to train, a rough
time for them and the disk their checkpoints take.  The time is an estimate: the median wall
time of the runs already finished in the folder, else a few training steps timed here, scaled
to a run's steps and evaluations, plus a rough start-up cost (:func:`time_per_run`).  The disk is computed, not measured:
each run writes ``ckpt_best.pt`` (the fp32 weights) and ``ckpt_last.pt`` (the weights and
AdamW's two moments), :data:`CHECKPOINT_BYTES_PER_PARAM` bytes per parameter in all.
:class:`RunsBar` is the tqdm bar over the experiment (runs done / planned), drawn as a new line
each time a run ends, so it never shares a line with what ``train.py`` prints.

Model sizes of an experiment's arms: parameter counts without building weights, and --equal-params.
``count_params`` builds a model on the meta device (exact, no memory); ``equal_params_config``
grows a tied model to the untied parameter count (``compare.py --equal-params``); ``arm_params``
is the count an arm's checkpoints hold, for the disk estimate of the plan line.

The learning-rate grid of a tuned experiment: scores, the best rate, widening past an edge, growth
rules.  Each arm trains at every grid rate on the tuning seed (``train.seed + TUNING_SEED_OFFSET``,
never a reported seed); its best by final val loss is then used for the reported seeds.  With
``--lr-widen N`` an arm whose best sits on the grid's smallest or largest rate also trains one
grid step past that edge, up to N times a side, so a best on the edge is found rather than
only flagged (the practice of extending a sweep until the optimum is bracketed).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from core.errors import UserError
from experiment import stats
from experiment.arms import PRESETS, ArmSet
from experiment.runs.record import DEFAULT_MARGIN, EVERY_SEED, ONE_SEED, flatten
from experiment.style import duration, size
from model.config import GPTConfig
from model.gpt import GPT
from training.config import RunConfig, TrainConfig, parse_config
from training.runs import Unreadable, read_metrics
from training.run_files import RunFolder, runs_in

# fp32 weights in ckpt_best.pt, + weights, exp_avg and exp_avg_sq (AdamW) in ckpt_last.pt: 4 copies of 4 bytes.
CHECKPOINT_BYTES_PER_PARAM = 4 * 4
TIMED_STEPS = 3  # training steps timed (after one untimed) when no finished run gives a run's time
# A rough fixed cost of each train.py process besides its steps (seconds): starting Python and torch,
# reading the data, writing the run's files.  It dominates only tiny runs.
START_S = 10.0


@dataclass(kw_only=True)
class Plan:
    """What ``compare.py`` was asked to run: the config, the arms, the seeds and the learning-rate grid."""

    config: str | None  # TOML file, or None for the defaults
    overrides: dict  # --section.key overrides, passed on to every train.py run
    arms: list[str]
    seeds: int
    lr_grid: list[float] = field(default_factory=list)  # empty: every arm at the config's learning rate
    equal_params: str | None = None  # "width" / "depth": grow the arms that share one matrix to the untied count
    name: str | None = None
    reference: str = "tied"
    margin: float = DEFAULT_MARGIN  # nats/token, declared before the runs
    lr_widen: int = 0  # with a grid: rates tried past an edge an arm's best sits on, at most, a side
    adopt: list[Path] = field(default_factory=list)  # finished run folders to adopt as reported runs (--adopt)
    budgets: list[int] = field(default_factory=list)  # token budgets (--budgets): a WSD trunk and a branch per budget
    jobs: int = 1  # train.py processes at once (--jobs)
    arm_set: ArmSet = PRESETS  # what each of ``arms`` sets (presets, or arms defined with --arm)
    outcome: str = "loss"  # what the verdict reads (experiment.ab.readout.OUTCOMES), declared before the runs
    max_seeds: int = 0  # with --seeds auto: the most seeds a sequential experiment may reach (0: seeds fixed)
    fail_on: str | None = None  # --fail-on: the report gates on its verdicts (refused up front if they cannot be)
    lr_tuning: str = EVERY_SEED  # with a grid: every rate on every seed (best against best), or ONE_SEED's pick

    def __post_init__(self) -> None:
        # --name is a folder under train.out_dir: plain names, '/' between them (a grid's cells), never out of it.
        parts = self.name.split("/") if self.name is not None else []
        if self.name is not None and (not all(parts) or {".", ".."} & set(parts) or "\\" in self.name):
            raise UserError(
                f"--name {self.name!r} must be a folder name under train.out_dir: plain names, joined by '/' "
                "for a nested one, never '.', '..' or a path from '/'"
            )

    @property
    def one_seed(self) -> bool:
        """Whether the grid is read by a pick on one tuning seed (exploratory) rather than best against best."""
        return bool(self.lr_grid) and self.lr_tuning == ONE_SEED


@dataclass(frozen=True)
class PlannedRun:
    """One run of the experiment as planned: its arm and its folder name (a glob, ``*`` for a rate not tuned yet)."""

    arm: str
    name: str
    adopt: bool = False  # it is to be adopted (``--adopt``), once its tuned learning rate is known


def with_shared_config(plan: Plan) -> Plan:
    """``plan`` with each arm's settings complete: the config and the command line set what every arm
    shares, and an arm's own settings win over them.

    Where both set a key, one line says which arms take the shared value and which their own, and the
    arms that take it get it among their settings, so that their runs, ``experiment.json`` and the
    report name each arm by what it trained with.
    """
    defaults = flatten(RunConfig().to_dict())
    cfg = flatten(parse_config(plan.config, plan.overrides).to_dict())
    keys = {k for arm in plan.arms for k in plan.arm_set.settings[arm]}
    shared = {k: v for k, v in cfg.items() if k in keys and v != defaults[k]}
    for key, value in shared.items():
        _say_shared(plan, key, value)
    return dataclasses.replace(plan, arm_set=plan.arm_set.with_shared(shared)) if shared else plan


def _say_shared(plan: Plan, key: str, value) -> None:
    """One line for a key both the shared config and some arms set: who trains with which value."""
    own = [arm for arm in plan.arms if key in plan.arm_set.settings[arm]]
    shared = [arm for arm in plan.arms if arm not in own]
    section, name = key.split(".", 1)
    where = "the command line" if name in plan.overrides.get(section, {}) else plan.config
    takers = f"{', '.join(shared)} {'trains' if len(shared) == 1 else 'train'} with it" if shared else "no arm uses it"
    print(
        f"[compare] {where} sets {key}={value}: {takers}; {', '.join(own)} with {'its' if len(own) == 1 else 'their'} own",
        flush=True,
    )


def run_state(out_dir: Path, run: PlannedRun) -> str:
    """``"adopted"``, ``"finished"``, ``"resume"`` or ``"train"``: what the experiment does with ``run``.

    A pending adoption counts as adopted; of several folders a glob matches, the furthest along decides.
    """
    found = [RunFolder(f) for f in (sorted(out_dir.glob(run.name)) if "*" in run.name else [out_dir / run.name])]
    if run.adopt:
        return "adopted"
    if any(f.finished for f in found):
        adopted = any((f.path / "adopted.json").is_file() and f.finished for f in found)
        return "adopted" if adopted else "finished"
    return "resume" if any(f.last_ckpt.is_file() for f in found) else "train"


def fraction_left(run_dir: Path, max_iters: int) -> float:
    """The share of its steps an unfinished run still has to train, read from its last metrics row (1 if none).

    Its steps are its own ``config.json``'s ``train.max_iters`` (arms may differ in length), else ``max_iters``.
    """
    folder = RunFolder(run_dir)
    try:
        rows = read_metrics(folder.metrics_path)
    except Unreadable:
        return 1.0
    try:
        max_iters = int(folder.config["train"]["max_iters"])
    except (UserError, KeyError, TypeError, ValueError):
        pass  # an older or damaged folder: the experiment's length is the best guess
    done = max((r["step"] for r in rows), default=0)
    return min(1.0, max(0.0, 1 - done / max(1, max_iters)))


def finished_seconds(out_dir: Path) -> list[float]:
    """The wall time (``elapsed_s``, seconds) of every finished run in ``out_dir``."""
    out = []
    for run in runs_in(out_dir, finished_only=True):
        value = run.summary.get("elapsed_s")
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
        train_step(s, lr=get_lr(i, cfg.train))
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


def plan_line(
    out_dir: Path,
    runs: list[PlannedRun],
    states: list[str],
    params: dict[str, int],
    max_iters: int,
    timing: tuple[float | None, str] | None,
    what: str,
    scale: dict[str, float] | None = None,
) -> str:
    """The one line compare.py prints before training: counts, estimated time and checkpoint disk.

    ``states``: each run's :func:`run_state`; ``params``: parameters per arm
    (:func:`arm_params`); ``timing``: from :func:`time_per_run`, or None when
    nothing is left to train or resume; ``what``: how the runs come about; ``scale``: each arm's run
    time over the timed one's (its share of the steps, :func:`steps_per_run`), 1 where not given.
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
    scale = scale or {}
    left = sum(scale.get(r.arm, 1.0) for r, s in zip(runs, states) if s == "train") + sum(
        scale.get(r.arm, 1.0) * (1.0 if "*" in r.name else fraction_left(out_dir / r.name, max_iters))
        for r, s in zip(runs, states)
        if s == "resume"
    )
    seconds, how = timing
    when = (
        f"no time estimate ({how})"
        if seconds is None
        else f"roughly {duration(left * seconds)} (an estimate, from {how}: {duration(seconds)} a run"
        + (", each arm's scaled by its steps)" if any(v != 1.0 for v in scale.values()) else ")")
    )
    return (
        line
        + f"; {when}"
        + (
            f" and {size(disk)} of checkpoints for the {len(new)} new runs ({CHECKPOINT_BYTES_PER_PARAM} bytes a "
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
    line = (
        f"[compare] power: {arm} − {reference} spreads by {sd:.4f} nats a seed ({n} paired seeds finished here); "
        f"{seeds} seeds detect a difference of about {found:.4f} nats (80% power, {100 * alpha:.3g}% two-sided)"
        if found is not None
        else f"[compare] power: {arm} − {reference} spreads by {sd:.4f} nats a seed ({n} paired seeds finished here)"
    )
    figure = stats.seeds_figure(sd, n, margin, alpha)  # the rule an inconclusive verdict's figure follows too
    if figure is not None and (figure.seeds is None or figure.seeds > seeds or figure.too_small):
        line += f"; the declared margin: {figure.words(f'±{margin:g} nats')}"
    return line


def _finished_scores(out_dir: Path, arm: str) -> dict[int, float]:
    """``{seed index: final val loss}`` of ``arm``'s finished reported runs in ``out_dir``."""
    pattern = re.compile(rf"{re.escape(arm)}(?:-lr[0-9.e+-]+)?-s(\d+)")
    out = {}
    for run in runs_in(out_dir, finished_only=True):
        match = pattern.fullmatch(run.path.name)
        if match:
            record = run.summary
            value = record.get("final_val_loss") if isinstance(record, dict) else None
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.setdefault(int(match[1]), float(value))
    return out


# ----------------------------------------------------------------------------- model sizes


def count_params(cfg: GPTConfig) -> int:
    """Parameter count of a model with config ``cfg``, built on the meta device (no memory, exact)."""
    with torch.device("meta"):
        return GPT(cfg).num_params()


def equal_params_config(cfg: GPTConfig, how: str = "width") -> tuple[GPTConfig, int, int]:
    """A tied config grown until its parameter count is closest to the untied ``cfg``'s.

    ``how='width'`` searches ``n_embd`` over multiples of ``n_head`` (head size grows);
    ``how='depth'`` searches ``n_layer``.  Returns ``(tied config, tied count, untied count)``.
    Raises :class:`UserError` if the closest match is more than 2% off.
    """
    target = count_params(dataclasses.replace(cfg, tie_embeddings=False))
    if how not in ("width", "depth"):
        raise UserError(f"--equal-params must be 'width' or 'depth', got {how!r}")
    key, start, step_, limit = (
        ("n_embd", cfg.n_embd, cfg.n_head, 8 * cfg.n_embd)
        if how == "width"
        else ("n_layer", cfg.n_layer, 1, 64 * cfg.n_layer)
    )
    # The count grows monotonically with width and depth: bisect for the first value that reaches the
    # target, then take whichever of it and the value before is closer.
    values = list(range(start, limit + 1, step_))

    @functools.cache
    def count(i: int) -> int:
        return count_params(dataclasses.replace(cfg, tie_embeddings=True, **{key: values[i]}))

    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if count(mid) < target else (lo, mid)
    best_i = min({max(lo - 1, 0), lo}, key=lambda i: (abs(count(i) - target), i))
    best = dataclasses.replace(cfg, tie_embeddings=True, **{key: values[best_i]})
    best_count = count(best_i)
    if abs(best_count - target) > 0.02 * target:
        other = "depth" if how == "width" else "width"
        raise UserError(
            f"no tied model within 2% of the untied {target:,} parameters by {how} (closest {best_count:,}): "
            f"try --equal-params {other}"
        )
    return best, best_count, target


def arm_params(cfg: RunConfig, arm: str, equal_params: str | None = None, arm_set: ArmSet = PRESETS) -> int:
    """Parameters of ``arm``'s model under ``cfg`` (``model.vocab_size`` set from the data) at the end of its run.

    The arm's model settings apply, and with ``equal_params`` the grown width or depth of the arms
    that share one matrix.  Tie-then-untie ends untied: its last checkpoints hold two matrices.
    """
    settings = arm_set.settings[arm]
    model = dataclasses.replace(
        cfg.model, **{k.split(".")[1]: v for k, v in settings.items() if k.startswith("model.")}
    )
    if equal_params and arm in ("tied", "tied-bias"):
        grown, _, _ = equal_params_config(dataclasses.replace(cfg.model, tie_embeddings=False), equal_params)
        model = dataclasses.replace(model, n_embd=grown.n_embd, n_layer=grown.n_layer)
    if settings.get("train.untie_at") or settings.get("train.untie_at_cooldown"):
        model = dataclasses.replace(model, tie_embeddings=False)
    return count_params(model)


# ----------------------------------------------------------------------------- the learning-rate grid

TUNING_SEED_OFFSET = 1000  # the grid trains on train.seed + this: never one of the reported seeds (seed + i)


def lr_flags(tc: TrainConfig, lr: float) -> list[str]:
    """``train.py`` flags for peak rate ``lr``: ``learning_rate`` set to it, ``min_lr`` scaled alike so the schedule
    keeps its shape, and under ``optimizer='muon'`` Muon's rate too, so every optimizer group moves by one
    factor and the ratio between them stays as the config sets it."""
    scale = lr / tc.learning_rate
    flags = [f"--train.learning_rate={lr:g}", f"--train.min_lr={tc.min_lr * scale:g}"]
    if tc.optimizer == "muon":
        flags.append(f"--train.muon_learning_rate={tc.muon_learning_rate * scale:g}")
    return flags


def score(run_dir: Path | None) -> float:
    """A finished run's final val loss (summary.json), the score the grid ranks by; inf for no result."""
    if run_dir is None:
        return math.inf
    summary = RunFolder(run_dir).summary
    value = summary.get("final_val_loss", summary.get("val_loss"))
    return value if isinstance(value, (int, float)) and math.isfinite(value) else math.inf


def best_lr(arm: str, scores: dict[float, float]) -> float:
    """The rate with the lowest score (ties: the smaller rate) among ``scores`` (rate -> final val loss).

    Raises :class:`UserError` when none has a finite score (every point diverged or failed).
    """
    finite = {lr: s for lr, s in scores.items() if math.isfinite(s)}
    if not finite:
        raise UserError(f"every grid learning rate failed for the {arm} arm: widen --lr-grid towards smaller values")
    return min(finite, key=lambda lr: (finite[lr], lr))


def next_rates(grid: list[float], scores: dict[float, float], widen: int) -> list[float]:
    """The rates one arm trains at next: one step past each edge of ``scores`` that its best sits on.

    ``grid``: the declared rates; ``scores``: rate -> final val loss (inf: no result) of every
    rate tried so far, the grid's and earlier steps past it; ``widen``: at most this many rates
    below the grid and as many above.  A step keeps the grid's spacing at that end (the ratio
    of its two end rates; 2 for a one-point grid).  A failed rate past an edge ends the
    widening that way, since the best is then no longer on the edge.
    """
    finite = {lr: s for lr, s in scores.items() if math.isfinite(s)}
    if not finite or widen < 1:
        return []
    rates = sorted(grid)
    up = rates[-1] / rates[-2] if len(rates) > 1 else 2.0
    down = rates[1] / rates[0] if len(rates) > 1 else 2.0
    best, lo, hi = best_lr("", finite), min(scores), max(scores)
    out = []
    if best == lo and sum(lr < rates[0] for lr in scores) < widen:
        out.append(float(f"{lo / down:.6g}"))
    if best == hi and sum(lr > rates[-1] for lr in scores) < widen:
        out.append(float(f"{hi * up:.6g}"))
    # A step too small to change the rate's 6 digits (two grid ends that close) would repeat a rate forever.
    tried = {f"{lr:g}" for lr in scores}
    return [lr for lr in out if f"{lr:g}" not in tried]
