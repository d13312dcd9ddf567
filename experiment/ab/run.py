"""Running an A/B experiment: the runs' commands, training each run through ``train.py``, the report.

``compare.py`` is the command; this module trains every arm and seed as a ``train.py``
subprocess (:mod:`experiment.runs.launch`: reusing finished runs, resuming unfinished ones, forwarding
stop signals) and writes the report (:mod:`experiment.runs.folders`, :mod:`experiment.ab.readout`,
:mod:`experiment.ab.markdown`).  The experiment folder's record of what it declared,
``experiment.json``, is written and checked on every rerun by :mod:`experiment.runs.record`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from core.errors import FlagError, UserError
from core.files import write_text_atomic
from data.loader import TokenData
from experiment import stats
from experiment.runs import adopt
from experiment.ab import figures
from experiment.runs import launch, ledger, picked, tries
from experiment.ab import readout
from experiment.runs import folders
from experiment.ab import markdown
from experiment.arms import PRESETS, ArmSet
from experiment.runs.commands import Commands, check_planned, commands_for, prepare
from experiment.runs.plan import (
    Plan,
    TUNING_SEED_OFFSET,
    PlannedRun,
    RunsBar,
    arm_params,
    best_lr,
    next_rates,
    plan_line,
    power_line,
    run_state,
    score,
    steps_per_run,
    time_per_run,
)
from experiment.runs.record import ExperimentRecord, looks_record, planned_record, remember_settings
from experiment.runs.seeds import seeds_apart
from training.run_files import RunFolder, runs_in


VERDICT_FILE = "verdict.json"


def run_experiment(plan: Plan) -> tuple[list[Path], list[Path], Path]:
    """Train the grid (if any) and every arm for every seed; returns (reported runs, tuning runs, experiment folder).

    With a grid, each arm trains at every grid learning rate on the tuning seed; its best by
    final val loss is then used for the reported seeds (min_lr scaled alike, keeping the
    schedule's shape).  Finished runs are reused, unfinished ones resumed and ``plan.adopt``'s
    folders adopted (:mod:`experiment.runs.adopt`); several processes may run the same experiment at
    once and split its runs (:func:`experiment.runs.launch.run_shared`).  Before the first run trains, one plan line
    says what is left and its rough cost (:mod:`experiment.runs.plan`); a progress bar follows the runs.
    """
    cfg, data, name = prepare(plan)
    cmds = commands_for(plan, cfg, name)
    out_dir = cmds.out_dir
    check_planned(plan, cmds)
    _refuse_fewer_seeds(plan, out_dir)
    if plan.fail_on:
        _refuse_an_ungated_gate(plan, planned_record(out_dir, cfg, plan))
    settings = remember_settings(out_dir, cfg, plan)
    sha = data.meta.get("source_sha256")
    adopting = adopt.identify(plan.adopt, cfg.train.seed, plan.arms, plan.seeds, plan.arm_set)
    _adopt(plan, cmds, adopting, sha)
    bar = _announce(plan, cmds, data, adopting)
    try:
        tuning, best = _tune(plan, out_dir, cmds.grid_point, cfg.train.seed + TUNING_SEED_OFFSET, bar)
        if plan.one_seed and ExperimentRecord.read(out_dir).declared != settings.declared:
            raise UserError(
                f"another compare.py changed {settings.path} (a wider grid or --lr-widen) while "
                "this one tuned, so their best rates may differ: run the same command as that one"
            )
        if plan.one_seed:
            _adopt(plan, cmds, adopting, sha, best)
        # For a timed outcome the arms of a seed train one after another, in alternating order (no arm always first).
        timed = plan.outcome == "tokens-per-s" or plan.outcome.startswith("time-to:")
        order = [plan.arms[::-1] if timed and i % 2 else plan.arms for i in range(plan.seeds)]
        rates = {arm: [best[arm]] if plan.one_seed else plan.lr_grid or [None] for arm in plan.arms}
        jobs = [
            (cmds.reported(arm, i, lr)[0], cmds.job(arm, *cmds.reported(arm, i, lr)))
            for i in range(plan.seeds)
            for arm in order[i]
            for lr in rates[arm]
        ]
        seeds = f"{plan.seeds} seed{'s' if plan.seeds != 1 else ''}"
        print(
            _progress(out_dir, [n for n, _ in jobs], f"the runs the verdicts read ({len(plan.arms)} arms x {seeds})"),
            flush=True,
        )
        paths = launch.run_shared(out_dir, jobs, bar)
    finally:
        bar.close()
    return paths, tuning, out_dir


def _refuse_fewer_seeds(plan: Plan, out_dir: Path) -> None:
    """Refuse ``--seeds N`` on a folder holding runs of its arms at more seeds: its report would be of a
    subset, overwrite the whole folder's and count as another look (``compare.py report ... --report-dir``
    reads a subset elsewhere).  A sequential experiment (``--seeds auto``) reads its looks in order."""
    if plan.max_seeds or not out_dir.is_dir():
        return
    pattern = re.compile(rf"({'|'.join(map(re.escape, plan.arms))})(-lr[^/]+)?-s(\d+)")
    held = [int(m[3]) + 1 for run in runs_in(out_dir) if (m := pattern.fullmatch(run.path.name))]
    if held and max(held) > plan.seeds:
        raise UserError(
            f"{out_dir} holds runs of these arms at {max(held)} seeds: give --seeds {max(held)} (or more) to "
            f"read them all; to read some of them, give their folders to compare.py report with --report-dir"
        )


def _refuse_an_ungated_gate(plan: Plan, record: ExperimentRecord) -> None:
    """Refuse ``--fail-on`` before anything trains when the verdicts will not be calibrated, which a gate
    then refuses: the comparison was read before in a folder beside this one (:mod:`experiment.runs.tries`)."""
    why = tries.reads_before(record)
    if why:
        raise UserError(
            f"--fail-on {plan.fail_on} gates only on calibrated verdicts, and this experiment's will not be: {why[0]}; "
            "drop --fail-on to train and read it anyway"
        )


def _adopt(
    plan: Plan, cmds: Commands, adopting: list[adopt.Candidate], sha: str | None, best: dict[str, float] | None = None
) -> None:
    """Check the runs to adopt and copy them in (:mod:`experiment.runs.adopt`), or raise :class:`UserError`.

    With a learning-rate grid the first call (``best`` None) checks all but the tuned rate, before
    anything trains; the call after tuning, with each arm's ``best`` rate, checks it and copies.
    """
    early = plan.one_seed and best is None
    for c in adopting:
        lr = best[c.arm] if best else None
        target = None if early else cmds.reported(c.arm, c.index, lr)[0]
        if adopt.settled(c, cmds.out_dir, target):  # adopted by an earlier run of the same command
            ledger.note_adopted(cmds.out_dir, target)  # (if a kill came between the copy and its note)
            continue
        adopt.check(c, cmds.expected(c.arm, c.index, lr), sha, frozenset(folders.TUNED_KEYS) if early else frozenset())
        if not early:
            adopt.copy_in(c, cmds.out_dir, target)


def _announce(plan: Plan, cmds: Commands, data: TokenData, adopting: list[adopt.Candidate]) -> RunsBar:
    """Print the plan line (:func:`experiment.runs.plan.plan_line`) and start the experiment's progress bar."""
    pending = {(c.arm, c.index) for c in adopting} if plan.one_seed else set()
    runs = [PlannedRun(arm, f"tune-{arm}-lr{lr:g}") for arm in plan.arms for lr in plan.lr_grid if plan.one_seed]
    runs += [
        PlannedRun(arm, f"{arm}-lr*-s{i}" if plan.one_seed else cmds.reported(arm, i, lr)[0], (arm, i) in pending)
        for i in range(plan.seeds)
        for arm in plan.arms
        for lr in ([None] if plan.one_seed else plan.lr_grid or [None])
    ]
    states = [run_state(cmds.out_dir, r) for r in runs]
    to_do = any(s in ("resume", "train") for s in states)
    # Timed on the reference arm's own config; every other arm's runs scaled by their share of its steps.
    ref_cfg, val_tokens = cmds.expected(plan.reference, 0), data.num_tokens("val")
    timing = time_per_run(cmds.out_dir, ref_cfg, val_tokens) if to_do else None
    scale = {
        arm: steps_per_run(cmds.expected(arm, 0), val_tokens) / steps_per_run(ref_cfg, val_tokens) for arm in plan.arms
    }
    what = f"{len(plan.arms)} arms x {plan.seeds} seed{'s' if plan.seeds != 1 else ''}"
    if plan.one_seed:
        what = f"{len(plan.arms)} arms x {len(plan.lr_grid)} learning rates to tune, then {what} at the tuned rates"
        what += f"; up to {2 * plan.lr_widen * len(plan.arms)} more past the grid's edges" if plan.lr_widen else ""
    elif plan.lr_grid:
        what += f" x {len(plan.lr_grid)} learning rates, every rate on every seed (read best against best)"
    params = {arm: arm_params(cmds.cfg, arm, plan.equal_params, plan.arm_set) for arm in plan.arms}
    print(plan_line(cmds.out_dir, runs, states, params, cmds.cfg.train.max_iters, timing, what, scale), flush=True)
    if plan.one_seed:  # said before anything trains, as the report and verdict.json will say it
        print(
            "[compare] exploratory: each arm's rate is picked on one tuning seed, so the verdicts will be labelled "
            "not calibrated and --fail-on will not gate on them; without --lr-tuning one-seed every rate trains "
            "on every seed and the report reads best against best",
            flush=True,
        )
    for why in tries.earlier_reads(cmds.out_dir):  # said before anything trains, as the report will say it
        print(f"[compare] the verdicts will be labelled not calibrated: {why}", flush=True)
    others = ", ".join(a for a in plan.arms if a != plan.reference)
    print(
        f"[compare] reference: {plan.reference}; each verdict reads {others} against it (better: {_better(plan)} "
        f"than {plan.reference}), and --fail-on gates on those verdicts",
        flush=True,
    )
    if plan.outcome == "loss":  # the spread it reads is of the final val loss
        print(power_line(cmds.out_dir, plan.arms, plan.reference, plan.seeds, plan.margin), flush=True)
    return RunsBar(len(runs), sum(s in ("finished", "adopted") for s in states))


def _tune(
    plan: Plan,
    out_dir: Path,
    grid_point: Callable[[str, float], Callable[[], Path | None]],
    seed: int,
    bar: RunsBar | None = None,
) -> tuple[list[Path], dict[str, float]]:
    """Train every arm at every grid rate, then past an edge its best sits on (``plan.lr_widen`` steps a side).

    Returns (the finished tuning runs, each arm's best rate); both empty without a grid.
    Raises :class:`UserError` when every rate of an arm failed.
    """
    if not plan.one_seed:
        return [], {}
    tried: dict[str, dict[float, Path | None]] = {arm: {} for arm in plan.arms}
    todo = [(arm, lr) for arm in plan.arms for lr in plan.lr_grid]
    what = f"learning-rate grid ({len(plan.arms)} arms x {len(plan.lr_grid)} rates, seed {seed})"
    while todo:
        names = [f"tune-{arm}-lr{lr:g}" for arm, lr in todo]
        print(_progress(out_dir, names, what), flush=True)
        for (arm, lr), path in zip(
            todo, launch.run_shared(out_dir, [(n, grid_point(*job)) for n, job in zip(names, todo)], bar)
        ):
            tried[arm][lr] = path
        scores = {arm: {lr: score(path) for lr, path in runs.items()} for arm, runs in tried.items()}
        todo = [(arm, lr) for arm in plan.arms for lr in next_rates(plan.lr_grid, scores[arm], plan.lr_widen)]
        if bar is not None:
            bar.add(len(todo))
        what = "learning rates past the grid's edge, for the arms whose best sits on it (--lr-widen)"
    best = {arm: best_lr(arm, scores[arm]) for arm in plan.arms}
    for arm in plan.arms:
        print(
            f"[compare] {arm}: best learning rate {best[arm]:g} of {', '.join(f'{lr:g}' for lr in sorted(tried[arm]))}",
            flush=True,
        )
    return [path for runs in tried.values() for path in runs.values() if path is not None], best


def _progress(out_dir: Path, names: list[str], what: str) -> str:
    """One line: how many of the runs ``names`` in ``out_dir`` are finished, to resume, or to train.

    With a finished run among them and some left, it adds a rough time left: the runs left times
    the finished runs' median ``elapsed_s`` (wall seconds, pauses included), labelled as an estimate.
    """
    runs = [RunFolder(out_dir / n) for n in names]
    done = [run for run in runs if run.finished]
    resume = sum(run.resumable for run in runs)
    line = (
        f"[compare] {what}: {len(names)} runs, {len(done)} finished, {resume} to resume, "
        f"{len(names) - len(done) - resume} to train"
    )
    seconds = [t for t in (run.summary.get("elapsed_s") for run in done) if isinstance(t, (int, float))]
    if seconds and len(done) < len(names):
        per_run = statistics.median(seconds)
        line += (
            f"; roughly {(len(names) - len(done)) * per_run / 60:.0f} min left at the finished runs' "
            f"median of {per_run / 60:.1f} min a run (an estimate)"
        )
    return line


def write_report(
    paths: list[Path],
    tuning: list[Path],
    out_dir: Path,
    prompts: list[str],
    title: str,
    reference: str = "tied",
    margin: float = 0.01,
    command: str | None = None,
    margin_bpb: float | None = None,
    arm_set: ArmSet = PRESETS,
    margin_declared: bool = True,
    outcome: str = "loss",
    sequential: tuple[float, str, dict | None] = (0.05, "", None),
    keep_earlier: bool = False,
) -> tuple[Path, bool]:
    """Check the runs form a fair experiment, then write ``out_dir/report.md`` (+ figures) and
    ``out_dir/verdict.json`` (:func:`readout.verdict_record`; ``margin_declared`` goes into it).

    A report that fails removes the folder's earlier report and verdict.json (they would read as this one's),
    unless ``keep_earlier``: the folder's report was of other runs given by hand.

    ``margin``: the equivalence margin in nats/token; ``margin_bpb``, if given, adds the verdicts in
    bits per byte at that margin (:func:`markdown.render_markdown`).

    Returns ``(report path, meaningful)``: ``meaningful`` is False when the report opens with
    :func:`markdown.baseline_warning` (a run did not beat the unigram baseline).
    """
    path, verdict = out_dir / "report.md", out_dir / VERDICT_FILE
    stats.check_margin(margin)  # a bad flag is refused before any figure of the folder is drawn again
    try:
        exp = folders.check_experiment(
            folders.load_runs(paths, arm_set), reference, margin, folders.load_runs(tuning, arm_set), arm_set, outcome
        )
        alpha, words, looks = sequential
        looks = None if looks is None else {**looks, "seeds_read": len(exp.seeds)}
        provenance = run_provenance([*paths, *tuning], read_whole=not exp.tuning) + seeds_apart(exp)
        provenance += picked.left_beside(exp)
        exp = dataclasses.replace(
            exp, alpha=alpha, sequential=words, looks=looks, provenance=provenance, margin_declared=margin_declared
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        names = figures.plot_all(exp, out_dir)
        texts = folders.samples(exp, prompts) if prompts else {}
        md = markdown.render_markdown(exp, names, texts, title, command, out_dir, margin_bpb)
        record = readout.verdict_record(exp, margin_declared, margin_bpb)
        record = json.dumps(readout.strict_json(record), indent=2, allow_nan=False) + "\n"
    except FlagError:  # a wrong flag says nothing of the runs: the folder's earlier report stands
        raise
    except BaseException as e:  # a report that failed leaves no earlier verdict of its folder standing for a script
        # (a plain folder's report is of whichever runs were given: one of other runs is left alone; a Ctrl-C
        # while the same runs' report is drawn again leaves it standing: it is this report, whole)
        same = _read_these(verdict, [*paths, *tuning])
        if (not keep_earlier or same) and not (same and isinstance(e, KeyboardInterrupt)):
            path.unlink(missing_ok=True)
            verdict.unlink(missing_ok=True)
        raise
    # report.md goes last, each file whole (renamed into place): a report.md always has its own verdict.json.
    path.unlink(missing_ok=True)
    write_text_atomic(verdict, record)
    write_text_atomic(path, md)
    return path, markdown.baseline_warning(exp) is None


def _read_these(verdict: Path, runs: list[Path]) -> bool:
    """Whether the verdict.json at ``verdict`` is of ``runs`` (the same run folder names: this report again; one
    that does not say, or cannot be read, counts as theirs)."""
    try:
        named = json.loads(verdict.read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        return verdict.exists()
    return not isinstance(named, list) or set(named) == {Path(r).name for r in runs}


def run_sequential(plan: Plan) -> tuple[list[Path], list[Path], Path, tuple[float, str, dict]]:
    """``--seeds auto``: train the experiment a look at a time (:func:`stats.sequential_looks` up to
    ``plan.max_seeds``) and stop at the first look where every arm's verdict is decided.

    Every look tests at :func:`stats.look_alpha` (Bonferroni over the looks), so adding seeds until
    a verdict appears cannot raise the chance of a false one above 5%.  Returns what
    :func:`run_experiment` returns at the last look, and ``(alpha, what happened in words)`` for the report.
    """
    looks = stats.sequential_looks(plan.max_seeds)
    alpha = stats.look_alpha(looks)
    for k, n in enumerate(looks, 1):
        reported, tuning, out_dir = run_experiment(dataclasses.replace(plan, seeds=n))
        exp = folders.check_experiment(
            folders.load_runs(reported, plan.arm_set),
            plan.reference,
            plan.margin,
            folders.load_runs(tuning, plan.arm_set),
            plan.arm_set,
            plan.outcome,
        )
        verdicts = [c.verdict for c in readout.comparisons(dataclasses.replace(exp, alpha=alpha))]
        decided = len(verdicts) == len(exp.arms) - 1 and "inconclusive" not in verdicts
        print(f"[compare] look {k} of {len(looks)} ({n} seeds, alpha {alpha:.4g}): {', '.join(verdicts)}", flush=True)
        if decided or k == len(looks):
            how = "every verdict decided" if decided else f"the most seeds, --max-seeds {plan.max_seeds}, reached"
            words = (
                f"seeds added in looks of {', '.join(map(str, looks))} seeds, stopped at look {k} of {len(looks)} "
                f"({n} seeds: {how}); every look tests at α = {alpha:.4g} (0.05 over {len(looks)} looks, "
                "Bonferroni), so over all the looks each arm's chance of a false verdict stays at most 5% "
                "(better or worse: for all the arms together, Holm within each look)"
            )
            return reported, tuning, out_dir, (alpha, words, looks_record(looks, n, alpha))
    raise AssertionError("unreachable: the last look returns")


def run_provenance(runs: list[Path], read_whole: bool) -> list[str]:
    """:func:`ledger.problems` of ``runs`` when they all lie in one folder, and the comparisons a folder beside it
    read before this one was declared (:func:`tries.earlier_reads`); runs gathered from several folders are named
    as such (which of each folder's runs were left out, nothing records).

    ``read_whole``: the design reads every finished run of the folder (every seed, and with a learning-rate
    grid every rate); rates picked on one tuning seed leave the other rates' runs out by design."""
    parents = sorted({Path(os.path.abspath(r)).parent for r in runs})  # (links not followed: named where linked)
    if len(parents) > 1:
        return [
            f"runs gathered from {len(parents)} folders ({', '.join(p.name for p in parents[:4])}): runs picked "
            "from several folders can be picked after seeing them; report the runs of one experiment folder"
        ]
    (folder,) = parents
    return ledger.reported(folder, runs, read_whole=read_whole) + tries.earlier_reads(folder)


def experiment_runs(out_dir: Path) -> list[Path]:
    """The run folders of an experiment folder (each holding a config.json; tune-* are its rate grid), sorted.

    Raises :class:`UserError` when it holds none (its runs were never started, or were moved)."""
    runs = [run.path for run in runs_in(out_dir)]
    if not runs:
        raise UserError(f"experiment folder {out_dir} holds no run folders yet: run the command that made it")
    return runs


def _better(plan: Plan) -> str:
    """What "better" means under the plan's outcome, in words for the plan lines."""
    kind, _, target = plan.outcome.partition(":")
    return {
        "loss": "a lower final val loss",
        "tokens-per-s": "more tokens/s",
        "tokens-to": f"fewer training tokens to val loss {target}",
        "time-to": f"fewer training seconds to val loss {target}",
    }[kind]
