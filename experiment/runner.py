"""Running a tied-vs-untied experiment: sizing the arms, training each run through ``train.py``, the report.

``compare.py`` is the command; this module trains every arm and seed as a ``train.py``
subprocess (reusing finished runs, resuming unfinished ones, forwarding stop signals) and
writes the report (:mod:`experiment.report`, :mod:`experiment.report_markdown`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import filelock
import torch

from core.errors import Interrupted, UserError
from core.files import REPO_ROOT, acquire_or_wait, file_lock, read_json, write_json, write_text_atomic
from core.settings import overrides_to_argv
from data.loader import TokenData
from data.prepare import prepare_from_config
from experiment import figures, report, report_markdown
from experiment.arms import ARM_KEYS, arm_argv
from experiment.tuning import TUNING_SEED_OFFSET, best_lr, lr_flags, lr_grid_refusals, next_rates, score
from model.config import GPTConfig
from model.gpt import GPT
from training import faults
from training.config import RESUME_OVERRIDABLE, RunConfig, parse_config


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
    key, start, step_, limit = (("n_embd", cfg.n_embd, cfg.n_head, 8 * cfg.n_embd) if how == "width"
                                else ("n_layer", cfg.n_layer, 1, 64 * cfg.n_layer))
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


def run_forwarding_signals(cmd: list[str]) -> tuple[int, int | None]:
    """Run ``cmd`` to completion, passing each SIGINT / SIGTERM / SIGHUP we receive on to it.

    Returns ``(exit status, the last signal passed on or None)``.  The child runs in its own
    POSIX session (``start_new_session``), so a terminal's Ctrl-C (sent to the whole process
    group) reaches it once, through us, and ``train.py`` gets to stop at a step boundary with a checkpoint
    (``subprocess.run`` would SIGKILL the child on our KeyboardInterrupt).  The handlers are
    in place before the child starts; a signal the parent ignores stays ignored.
    """
    state: dict = {"proc": None, "signum": None}

    def forward(signum, frame) -> None:
        state["signum"] = signum
        if state["proc"] is not None:
            state["proc"].send_signal(signum)

    previous = {}
    for sig in faults.StopSignals.SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, forward)
    try:
        if state["signum"] is not None:
            return 128 + state["signum"], state["signum"]
        with subprocess.Popen(cmd, start_new_session=True) as proc:
            state["proc"] = proc
            if state["signum"] is not None:  # it came while the child was starting
                proc.send_signal(state["signum"])
            status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    return status, state["signum"]


def run_arm(base_argv: list[str], out_dir: Path, name: str, extra: list[str], resume_argv: list[str]) -> Path:
    """Train (or resume, or reuse) one run ``out_dir/name`` through ``train.py``; returns its folder.

    A finished run (``summary.json``) is reused, an interrupted one (``ckpt_last.pt``) resumed
    with ``resume_argv`` (bookkeeping overrides only), a missing one trained from scratch.
    """
    run_dir = out_dir / name
    train_py = str(REPO_ROOT / "train.py")
    if (run_dir / ".lock").is_file():  # a train.py still at work here (its compare.py was killed): let it end
        busy = file_lock(run_dir / ".lock")
        acquire_or_wait(busy, f"[compare] {run_dir}: waiting for the train.py that still holds it ...")
        busy.release()
    if (run_dir / "summary.json").is_file():
        print(f"[compare] {run_dir}: finished earlier, reused", flush=True)
        return run_dir
    if (run_dir / "ckpt_last.pt").is_file():
        cmd = [sys.executable, train_py, "--resume", "--run-name", name, f"--train.out_dir={out_dir}", *resume_argv]
        print(f"[compare] {run_dir}: resuming", flush=True)
    elif run_dir.exists():
        raise UserError(f"{run_dir} exists but holds no checkpoint (its first start failed before training): "
                        "delete that folder and run the same compare.py command again")
    else:
        cmd = [sys.executable, train_py, *base_argv, *extra, "--run-name", name, f"--train.out_dir={out_dir}"]
        print(f"[compare] {run_dir}: training", flush=True)
    returncode, signum = run_forwarding_signals(cmd)
    if signum is not None:  # the user asked to stop: never go on to the next arm, however the child ended
        raise Interrupted(signum, f"stopped while training {run_dir} (exit {returncode}; its checkpoint is "
                                  "saved): run the same compare.py command again to continue")
    if returncode != 0:
        raise UserError(f"training {run_dir} failed (exit {returncode}; see its output above): "
                        "fix the cause and run the same compare.py command again to continue")
    return run_dir


T = TypeVar("T")


@dataclass
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
    margin: float = 0.01  # nats/token, declared before the runs
    lr_widen: int = 0  # with a grid: rates tried past an edge an arm's best sits on, at most, a side


def run_experiment(plan: Plan) -> tuple[list[Path], list[Path], Path]:
    """Train the grid (if any) and every arm for every seed; returns (reported runs, tuning runs, experiment folder).

    With a grid, each arm trains at every grid learning rate on the tuning seed; its best by
    final val loss is then used for the reported seeds (min_lr scaled alike, keeping the
    schedule's shape).  Finished runs are reused and unfinished ones resumed; several processes
    may run the same experiment at once and split its runs (:func:`run_shared`).
    """
    cfg = parse_config(plan.config, plan.overrides)
    # The vocabulary comes from the data: prepare it once so sizing and every run agree on it.
    data = TokenData(prepare_from_config(cfg.data))
    data.check_block_size(cfg.model.block_size)
    cfg.model.vocab_size = data.vocab_size
    defaults = report.flatten(RunConfig().to_dict())
    set_here = {k: v for k, v in report.flatten(cfg.to_dict()).items() if k in ARM_KEYS and v != defaults[k]}
    if set_here:  # each arm sets these itself; a config that sets one would give it to every arm
        raise UserError(f"{plan.config or 'the command line'} sets {', '.join(sorted(set_here))}, which the arms set "
                        "themselves: drop it and choose arms with --arms")
    stem = Path(plan.config).stem if plan.config else "default"
    suffix = f"{'-equal-params-' + plan.equal_params if plan.equal_params else ''}{'-tuned' if plan.lr_grid else ''}"
    name = plan.name or f"{stem}-tied-vs-untied{suffix}"
    out_dir = Path(cfg.train.out_dir) / name
    passed_on = {s: {k: v for k, v in values.items() if f"{s}.{k}" != "train.out_dir"} for s, values in plan.overrides.items()}
    base_argv = [*(["--config", plan.config] if plan.config else []), *overrides_to_argv(passed_on)]
    arm_flags = {arm: arm_argv(arm) + _size_flags(cfg, plan.equal_params, arm) for arm in plan.arms}
    settings = _remember_settings(out_dir, cfg, plan)
    # train.out_dir is the experiment's parent here; run_arm names the experiment folder itself.
    resume_argv = overrides_to_argv({sec: {k: v for k, v in values.items()
                                           if f"{sec}.{k}" in RESUME_OVERRIDABLE and f"{sec}.{k}" != "train.out_dir"}
                                     for sec, values in plan.overrides.items()})
    group = [f"--wandb.group={cfg.wandb.group or name}"]

    def grid_point(arm: str, lr: float) -> Callable[[], Path | None]:
        def train() -> Path | None:
            extra = [*arm_flags[arm], *lr_flags(cfg.train.learning_rate, cfg.train.min_lr, lr),
                     f"--train.seed={cfg.train.seed + TUNING_SEED_OFFSET}", *group]
            try:
                return run_arm(base_argv, out_dir, f"tune-{arm}-lr{lr:g}", extra, resume_argv)
            except UserError as e:  # e.g. a learning rate that diverges: a grid point with no result, not the end
                print(f"[compare] {arm} at learning rate {lr:g} failed, counted as no result: {e}", flush=True)
                return None
        return train

    tuning, best = _tune(plan, out_dir, grid_point, cfg.train.seed + TUNING_SEED_OFFSET)
    if plan.lr_grid and read_json(out_dir / "experiment.json", "experiment settings") != settings:
        raise UserError(f"another compare.py changed {out_dir / 'experiment.json'} (a wider grid or --lr-widen) while "
                        "this one tuned, so their best rates may differ: run the same command as that one")

    def reported(arm: str, i: int) -> tuple[str, Callable[[], Path]]:
        lr_part = f"-lr{best[arm]:g}" if arm in best else ""
        extra = [*arm_flags[arm], *(lr_flags(cfg.train.learning_rate, cfg.train.min_lr, best[arm]) if arm in best else []),
                 f"--train.seed={cfg.train.seed + i}", *group]
        run_name = f"{arm}{lr_part}-s{i}"
        return run_name, lambda: run_arm(base_argv, out_dir, run_name, extra, resume_argv)

    jobs = [reported(arm, i) for i in range(plan.seeds) for arm in plan.arms]
    seeds = f"{plan.seeds} seed{'s' if plan.seeds != 1 else ''}"
    print(_progress(out_dir, [name for name, _ in jobs], f"reported runs ({len(plan.arms)} arms x {seeds})"), flush=True)
    paths = run_shared(out_dir, jobs)
    return paths, tuning, out_dir


def _tune(plan: Plan, out_dir: Path, grid_point: Callable[[str, float], Callable[[], Path | None]],
          seed: int) -> tuple[list[Path], dict[str, float]]:
    """Train every arm at every grid rate, then past an edge its best sits on (``plan.lr_widen`` steps a side).

    Returns (the finished tuning runs, each arm's best rate); both empty without a grid.
    Raises :class:`UserError` when every rate of an arm failed.
    """
    if not plan.lr_grid:
        return [], {}
    tried: dict[str, dict[float, Path | None]] = {arm: {} for arm in plan.arms}
    todo = [(arm, lr) for arm in plan.arms for lr in plan.lr_grid]
    what = f"learning-rate grid ({len(plan.arms)} arms x {len(plan.lr_grid)} rates, seed {seed})"
    while todo:
        names = [f"tune-{arm}-lr{lr:g}" for arm, lr in todo]
        print(_progress(out_dir, names, what), flush=True)
        for (arm, lr), path in zip(todo, run_shared(out_dir, [(n, grid_point(*job)) for n, job in zip(names, todo)])):
            tried[arm][lr] = path
        scores = {arm: {lr: score(path) for lr, path in runs.items()} for arm, runs in tried.items()}
        todo = [(arm, lr) for arm in plan.arms for lr in next_rates(plan.lr_grid, scores[arm], plan.lr_widen)]
        what = "learning rates past the grid's edge, for the arms whose best sits on it (--lr-widen)"
    best = {arm: best_lr(arm, scores[arm]) for arm in plan.arms}
    for arm in plan.arms:
        print(f"[compare] {arm}: best learning rate {best[arm]:g} of "
              f"{', '.join(f'{lr:g}' for lr in sorted(tried[arm]))}", flush=True)
    return [path for runs in tried.values() for path in runs.values() if path is not None], best


def _progress(out_dir: Path, names: list[str], what: str) -> str:
    """One line: how many of the runs ``names`` in ``out_dir`` are finished, to resume, or to train.

    With a finished run among them and some left, it adds a rough time left: the runs left times
    the finished runs' median ``elapsed_s`` (wall seconds, pauses included), labelled as an estimate.
    """
    done = [out_dir / n / "summary.json" for n in names if (out_dir / n / "summary.json").is_file()]
    resume = sum(not (out_dir / n / "summary.json").is_file() and (out_dir / n / "ckpt_last.pt").is_file() for n in names)
    line = (f"[compare] {what}: {len(names)} runs, {len(done)} finished, {resume} to resume, "
            f"{len(names) - len(done) - resume} to train")
    seconds = [t for t in (read_json(f, "run summary").get("elapsed_s") for f in done) if isinstance(t, (int, float))]
    if seconds and len(done) < len(names):
        per_run = statistics.median(seconds)
        line += (f"; roughly {(len(names) - len(done)) * per_run / 60:.0f} min left at the finished runs' "
                 f"median of {per_run / 60:.1f} min a run (an estimate)")
    return line


def run_shared(out_dir: Path, jobs: list[tuple[str, Callable[[], T]]]) -> list[T]:
    """Run each ``(run name, job)`` under a claim on the name, so several ``compare.py`` share one folder.

    A run whose claim another process holds (another ``compare.py`` on this experiment,
    perhaps on another machine sharing ``runs/``) is put off: the free ones run first, then
    each put-off one waits for its claim and runs (by then it is usually finished, so
    ``run_arm`` reuses it).  Claims are ``flock`` files in ``out_dir/.claims/``; the kernel
    drops them when their process dies.  Returns the jobs' results in the order given.
    """
    claims = out_dir / ".claims"
    claims.mkdir(parents=True, exist_ok=True)
    results: dict[str, T] = {}
    later = []
    for name, job in jobs:
        claim = file_lock(claims / f"{name}.lock", timeout=0)
        try:
            claim.acquire()
        except filelock.Timeout:
            print(f"[compare] {out_dir / name}: another compare.py holds it; going on with the others", flush=True)
            later.append((name, job, claim))
            continue
        results[name] = _release_after(claim, job)
    for name, job, claim in later:
        acquire_or_wait(claim, f"[compare] waiting for the other compare.py that holds {out_dir / name} ...")
        results[name] = _release_after(claim, job)
    return [results[name] for name, _ in jobs]


def _release_after(claim: filelock.FileLock, job: Callable[[], T]) -> T:
    """``job()``, then release ``claim`` however the job ended."""
    try:
        return job()
    finally:
        claim.release()


def _size_flags(cfg: RunConfig, equal_params: str | None, arm: str) -> list[str]:
    """With --equal-params, the grown width or depth for the arms that share one matrix (tied, tied-bias)."""
    if not equal_params or arm not in ("tied", "tied-bias"):
        return []
    tied_cfg, n_tied, n_untied = equal_params_config(dataclasses.replace(cfg.model, tie_embeddings=False), equal_params)
    key = "n_embd" if equal_params == "width" else "n_layer"
    print(f"[compare] equal params by {equal_params}: {arm} {key}={getattr(tied_cfg, key)} ({n_tied:,} parameters) "
          f"vs untied {key}={getattr(cfg.model, key)} ({n_untied:,})", flush=True)
    return [f"--model.{key}={getattr(tied_cfg, key)}"]


def _remember_settings(out_dir: Path, cfg: RunConfig, plan: Plan) -> dict:
    """Write experiment.json and return what it holds, or refuse a folder made with other settings.

    Arms, seeds, the lr grid and ``lr_widen`` may grow.  The check and the write happen under a
    lock, so two ``compare.py`` starting at once cannot both pass it with different settings.
    """
    (out_dir / ".claims").mkdir(parents=True, exist_ok=True)
    with file_lock(out_dir / ".claims" / "experiment.json.lock"):
        return _check_and_write_settings(out_dir, cfg, plan)


def _check_and_write_settings(out_dir: Path, cfg: RunConfig, plan: Plan) -> dict:
    """:func:`_remember_settings`'s body, run under its lock."""
    # The folder remembers the resolved config it was made with (bookkeeping aside), so a re-run
    # continues it -- with more seeds or arms, another device or wandb mode -- but never mixes settings.
    settings = {"config": report.compared_config(cfg),
                "equal_params": plan.equal_params, "lr_grid": plan.lr_grid, "lr_widen": plan.lr_widen,
                "margin": plan.margin}
    saved = out_dir / "experiment.json"
    if saved.is_file():
        before = read_json(saved, "experiment settings")
        now = json.loads(json.dumps(settings))
        changed = report.config_changes(before.get("config", {}), settings["config"])
        # Older folders recorded no grid (none was run) and no margin (any may be declared now).
        was = {"equal_params": before.get("equal_params"), "margin": before.get("margin", now["margin"])}
        changed += [k for k, v in was.items() if v != now[k]]
        changed += lr_grid_refusals(before.get("lr_grid", []), plan.lr_grid, before.get("lr_widen", 0), plan.lr_widen)
        if changed:
            raise UserError(f"experiment folder {out_dir} was made with other settings ({', '.join(changed)}): "
                            "pick another --name")
    write_json(saved, settings)
    return json.loads(json.dumps(settings))  # as read back from the file (lists, not tuples), for comparing later


def write_report(paths: list[Path], tuning: list[Path], out_dir: Path, prompts: list[str], title: str,
                 reference: str = "tied", margin: float = 0.01, command: str | None = None) -> tuple[Path, bool]:
    """Check the runs form a fair experiment, then write ``out_dir/report.md`` (+ figures).

    Returns ``(report path, meaningful)``: ``meaningful`` is False when the report opens with
    :func:`report_markdown.baseline_warning` (a run did not beat the unigram baseline).
    """
    exp = report.check_experiment(report.load_runs(paths), reference, margin, report.load_runs(tuning))
    out_dir.mkdir(parents=True, exist_ok=True)
    names = figures.plot_all(exp, out_dir)
    texts = report.samples(exp, prompts) if prompts else {}
    md = report_markdown.render_markdown(exp, names, texts, title, command, out_dir)
    path = out_dir / "report.md"
    write_text_atomic(path, md)
    return path, report_markdown.baseline_warning(exp) is None
