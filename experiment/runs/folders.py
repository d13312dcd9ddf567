"""An A/B report's runs: read run folders and check that they form a fair experiment.

Everything here works from the run folders alone (``config.json``, ``metrics.jsonl``,
``summary.json``, ``ckpt_best.pt``): no network, no wandb account.  ``compare.py`` is the
command line; this module is the library it calls::

    from experiment.runs.folders import load_runs, check_experiment
    exp = check_experiment(load_runs(paths), reference="tied", margin=0.01)  # UserError if unfair

A run's arm is read from its config (:func:`experiment.arms.arm_of`); its score is the final
val loss on the same val windows for every run (``summary.json``'s ``final_val_loss``; the
last periodic eval for runs older than that).  :mod:`experiment.ab.readout` does the statistics,
``experiment.ab.figures`` draws them and ``experiment.ab.markdown`` words them; the text
samples a report shows come from here (:func:`samples`), read from the runs' checkpoints.
"""

from __future__ import annotations

import math
import shlex
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from core.errors import FlagError, UserError
from core.files import read_json
from experiment.runs import schedules
from experiment.arms import (
    CODE,
    PRESETS,
    REFUSED,
    ArmSet,
    arms_from_differences,
    diff_stat,
    needs_own_code,
    sample_with_code,
    with_recorded,
)
from experiment.runs.record import BOOKKEEPING, EXPERIMENT_FILE, ExperimentRecord, flatten
from training.runs import load_run_config, read_metrics
from experiment.runs.launch import unfinished
from training.run_files import RunFolder

# What arms may differ in: their own settings, a tuned learning rate (min_lr and Muon's rate follow it,
# experiment.runs.plan.lr_flags), and with --equal-params the size of the arms that share one matrix.
TUNED_KEYS = {"train.learning_rate", "train.min_lr", "train.muon_learning_rate"}
SIZE_KEYS = {"model.n_embd", "model.n_layer"}


TARGETS = ("tokens-to", "time-to")  # the outcomes that read when a run reaches a val loss


def target_of(outcome: str) -> float | None:
    """The val loss a ``tokens-to:`` or ``time-to:`` outcome reads the runs' way to; None for the others."""
    head, _, target = outcome.partition(":")
    return float(target) if head in TARGETS else None


@dataclass
class Run:
    """One finished run folder, as the report needs it."""

    path: Path
    config: dict
    summary: dict
    evals: list[dict]  # eval rows of metrics.jsonl, in step order
    tied: bool
    seed: int
    arm: str
    schedule: dict = field(default_factory=dict)  # (step, kind) -> logged lr / peak (experiment.runs.schedules)
    resumes: list[dict] = field(default_factory=list)  # the resume rows that moved the lr schedule's horizon
    clock: list[tuple[float, float]] = field(default_factory=list)  # (tokens, training seconds): train_clock

    def train_seconds(self, tokens: float) -> float:
        """Seconds of training (evaluation and checkpoints left out) to reach ``tokens``, linear between log rows."""
        if not self.clock or tokens > self.clock[-1][0]:
            raise UserError(f"{self.path} logged no tokens/s up to {tokens:,.0f} tokens: its training time is unknown")
        points = np.array(self.clock)
        return float(np.interp(tokens, points[:, 0], points[:, 1]))

    def _summary_number(self, key: str) -> float | None:
        """``summary.json[key]`` if it is a finite number, else None (absent in runs from older versions)."""
        value = self.summary.get(key)
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    @property
    def score(self) -> float:
        """The run's final val loss (nats/token) on the windows every run shares, else its last eval's."""
        value = self._summary_number("final_val_loss")
        return self.final["val_loss"] if value is None else value

    @property
    def bpb(self) -> float | None:
        """The final score in bits per UTF-8 byte (``final_val_bpb``), or None for runs from before it."""
        return self._summary_number("final_val_bpb")

    @property
    def learning_rate(self) -> float:
        """The peak learning rate it trained with."""
        return self.config["train"]["learning_rate"]

    @property
    def final(self) -> dict:
        """The last eval row (at max_iters)."""
        return self.evals[-1]

    @property
    def best_val_loss(self) -> float:
        """The lowest val loss of any eval (nats/token)."""
        return min(r["val_loss"] for r in self.evals)

    @property
    def unigram_val_loss(self) -> float | None:
        """The val loss of the unigram baseline (token frequencies alone; summary.json), or None if not recorded."""
        return self._summary_number("unigram_val_loss")

    @property
    def learned(self) -> bool:
        """False when the final score has not beaten the unigram baseline (True if there is none to beat)."""
        return self.unigram_val_loss is None or self.score < self.unigram_val_loss


@dataclass
class Experiment:
    """Runs grouped by arm and paired by seed, and every config difference of each arm from the reference."""

    runs: dict[str, list[Run]]  # arm -> runs sorted by seed, the reference arm first
    seeds: list[int]
    reference: str
    margin: float  # nats/token: within it two arms count as equivalent (declared before the runs)
    margin_declared: bool = True  # False: given with the report, the runs already read (no experiment.json fixed it)
    differences: dict[str, dict[str, tuple]] = field(default_factory=dict)  # arm -> key -> (reference's, arm's)
    bookkeeping: dict[str, tuple] = field(default_factory=dict)  # differences with no effect on the maths
    tuning: dict[str, list[Run]] = field(default_factory=dict)  # arm -> learning-rate grid runs (tuning seed)
    arm_set: ArmSet = PRESETS  # what each arm is (its settings, a description)
    outcome: str = "loss"  # what the verdict reads (experiment.ab.readout.OUTCOMES), declared before the runs
    alpha: float = 0.05  # the level the verdicts test at (lower at each look of a sequential experiment)
    sequential: str = ""  # for a sequential experiment (--seeds auto), which look it stopped at, in words
    looks: dict | None = None  # the same as data (verdict.json's "sequential"): looks, seeds read, alpha, rule
    # Every rate on every seed (--lr-grid's every-seed design): arm -> rate -> runs by seed, on the seeds every
    # arm finished at every rate; ``runs`` then holds each arm's runs at its lowest mean (tables, figures, samples).
    swept: dict[str, dict[float, list[Run]]] = field(default_factory=dict)
    provenance: list[str] = field(default_factory=list)  # runs not as declared or pairs apart, in words (ledger, seeds)

    @property
    def arms(self) -> list[str]:
        """The arms, reference first."""
        return list(self.runs)

    @property
    def every_run(self) -> list[Run]:
        """Every run the verdicts read: reported, tuning, and each rate's of an every-seed grid."""
        swept = [runs for rates in self.swept.values() for runs in rates.values()]
        return [r for members in (*self.runs.values(), *self.tuning.values(), *swept) for r in members]


def load_run(path: Path, arms: ArmSet = PRESETS) -> Run:
    """Read one finished run folder; its arm is the one of ``arms`` its config has.

    Raises :class:`UserError` if it is missing or unfinished, or if its config, metrics or
    summary is malformed or holds a non-finite loss (naming the file and the fix).
    """
    folder = RunFolder(path)
    path = folder.path
    if not path.is_dir():
        raise UserError(f"run folder {path} does not exist: give folders written by train.py or compare.py")
    config = load_run_config(path).to_dict()  # validated: every key present and typed
    metrics_path = folder.metrics_path
    if not metrics_path.is_file() or not metrics_path.read_text(errors="replace").strip():
        raise UserError(f"{metrics_path} is missing or empty: the run never logged; re-run it")
    try:
        rows = read_metrics(metrics_path)
        evals = sorted((r for r in rows if r.get("kind") == "eval"), key=lambda r: r["step"])
        for r in evals:
            if not all(
                isinstance(r[k], (int, float)) and math.isfinite(r[k])
                for k in ("step", "tokens", "train_loss", "val_loss")
            ):
                raise UserError(
                    f"{metrics_path} has a non-finite or missing loss at step {r.get('step')}: "
                    "the run diverged; it cannot be compared"
                )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(
            f"{metrics_path} is malformed ({type(e).__name__}: {e}): it was not written by train.py"
        ) from None
    if not evals:
        raise UserError(f"{metrics_path} has no eval rows: re-run it with eval_interval <= max_iters")
    max_iters = config["train"]["max_iters"]
    if not folder.finished or evals[-1]["step"] != max_iters:
        raise UserError(unfinished(folder, evals[-1]["step"], max_iters))
    summary = folder.summary
    needed = ("parameters", "non_embedding_parameters", "tokens_per_s_median")
    if not isinstance(summary, dict) or any(not isinstance(summary.get(k), (int, float)) for k in needed):
        raise UserError(f"{folder.summary_path} lacks {', '.join(needed)}: re-run the run's last step with train.py")
    arm = arms.of({**flatten(config), CODE: run_commit(path)}, str(path))
    return Run(
        path=path,
        config=config,
        summary=summary,
        evals=evals,
        tied=config["model"]["tie_embeddings"],
        seed=config["train"]["seed"],
        arm=arm,
        schedule=schedules.lr_schedule(rows, config["train"]["learning_rate"]),
        resumes=schedules.schedule_changes(rows),
        clock=train_clock(rows),
    )


def train_clock(rows: list[dict]) -> list[tuple[float, float]]:
    """``(tokens, training seconds)`` at the start and at each train row of ``metrics.jsonl``.

    Each train row closes a window of steps timed alone (``tokens_per_s``: evaluation and checkpoint time stay
    out, training/loop.py); its seconds are the window's tokens over that rate, summed.  Rows a resumed run
    logged again for steps it had logged before are skipped, so no step counts twice.
    """
    out, seconds = [(0.0, 0.0)], 0.0
    for r in rows:
        rate, tokens = r.get("tokens_per_s"), r.get("tokens")
        if r.get("kind") != "train" or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            continue
        if tokens > out[-1][0]:
            seconds += (tokens - out[-1][0]) / rate
            out.append((float(tokens), seconds))
    return out


def load_runs(paths: list[Path], arms: ArmSet = PRESETS) -> list[Run]:
    """:func:`load_run` for each path."""
    return [load_run(p, arms) for p in paths]


def arms_of_runs(paths: list[Path], reference: str | None) -> tuple[ArmSet, str]:
    """The arms of run folders given to report on, and the reference: ``(arms, reference)``.

    The presets and any arms the folders' experiment recorded (``experiment.json`` beside or
    above them) name the runs when the runs differ in nothing else (bar a tuned learning rate,
    an equal-parameter size and bookkeeping); otherwise the keys they differ in are the arms
    (:func:`experiment.arms.arms_from_differences`), e.g. two runs that differ in dropout, and
    runs of the same settings are told apart by the commit they trained from (``code``).  The
    reference defaults to ``tied`` if given, else the first run's arm.  Raises :class:`UserError`
    when the runs differ in a key no comparison may differ in (:data:`experiment.arms.REFUSED`).
    """
    configs = [flatten(load_run_config(Path(p)).to_dict()) for p in paths]
    pool = with_recorded(_recorded_arms(paths))
    derived, names = None, []
    if len(configs) > 1:
        try:
            derived, names = arms_from_differences(configs)
        except UserError:  # the same settings: the runs may differ in the code they trained with
            derived, names = arms_from_differences([{**c, CODE: run_commit(p)} for c, p in zip(configs, paths)])
        differing = {k for settings in derived.settings.values() for k in settings}
        refused = sorted(differing & set(REFUSED))
        if refused:
            raise UserError(
                f"the runs differ in {refused[0]}, which no comparison may ({REFUSED[refused[0]]}): compare others"
            )
        if not differing <= set(pool.keys) | TUNED_KEYS | SIZE_KEYS | {"train.min_lr"}:
            return derived, reference or names[0]
    try:
        named = [pool.of({**c, CODE: run_commit(p)}, str(p)) for c, p in zip(configs, paths)]
    except UserError:  # e.g. untied runs with and without an lm_head bias: compared by the keys they differ in
        if derived is None:
            raise
        return derived, reference or names[0]
    return pool.select([a for a in pool.names if a in named]), reference or ("tied" if "tied" in named else named[0])


def _recorded_arms(paths: list[Path]) -> dict:
    """The arms recorded by the experiment folders (``experiment.json``) beside or above ``paths``."""
    recorded = {}
    for p in paths:
        for folder in (Path(p).parent, Path(p).parent.parent):
            if record := ExperimentRecord.read(folder):
                recorded.update(record.arms)
    return recorded


def run_commit(path: Path) -> str | None:
    """The git commit a run trained from (``env.json``), or None."""
    env = RunFolder(path).env_path
    try:
        record = read_json(env, "run environment") if env.is_file() else {}
    except UserError:  # an unreadable env.json names no commit; the report needs nothing else from it
        return None
    return record.get("git_commit") if isinstance(record, dict) else None


def code_versions(exp: Experiment) -> dict[str, dict]:
    """Where arms trained from other code: ``{arm: {"commit", "reference_commit", "diff_stat"}}`` for each arm
    whose runs recorded another commit (``env.json``) than the reference's; ``{}`` when all share one.

    ``diff_stat`` is ``git diff --shortstat`` from the reference's commit to the arm's, in git's words
    (None where git cannot tell, e.g. a commit this repository does not have).
    """
    commits = {arm: run_commit(members[0].path) for arm, members in exp.runs.items()}
    ref = commits[exp.reference]
    return {
        arm: {"commit": c, "reference_commit": ref, "diff_stat": diff_stat(ref, c) if ref and c else None}
        for arm, c in commits.items()
        if arm != exp.reference and c != ref
    }


def _same_config(members: list[Run], what: str) -> None:
    """Refuse runs of one arm (or one grid point) whose configs differ beyond bookkeeping and the seed."""
    ref = flatten(members[0].config)
    for r in members[1:]:
        flat = flatten(r.config)
        diff = sorted(k for k in set(ref) | set(flat) if ref.get(k) != flat.get(k) and k not in BOOKKEEPING)
        if diff:
            raise UserError(f"{r.path} differs from {members[0].path} in {', '.join(diff)}: {what} must share a config")


def _group(runs: list[Run], reference: str, order: list[str]) -> tuple[dict[str, list[Run]], list[int]]:
    """Runs by arm (reference first), each sorted by seed; refuse a missing reference or unpaired seeds."""
    by_arm: dict[str, list[Run]] = {}
    for r in runs:
        by_arm.setdefault(r.arm, []).append(r)
    if reference not in by_arm:
        raise FlagError(
            f"no {reference} runs given: the reference arm must be among the runs (or pick "
            f"--reference from {', '.join(by_arm)})"
        )
    if len(by_arm) < 2:
        raise UserError(
            f"only {reference} runs given: a comparison needs a second arm; give run folders of two arms, "
            "e.g. compare.py runs/default runs/untied"
        )
    order = [reference, *(a for a in order if a in by_arm and a != reference)]  # the arms' own order
    arms = {arm: sorted(by_arm[arm], key=lambda r: r.seed) for arm in order}
    seeds = [r.seed for r in arms[reference]]
    for arm, members in arms.items():
        have = [r.seed for r in members]
        if len(set(have)) != len(have):
            raise UserError(f"the {arm} arm has two runs with the same seed ({have}): give each seed once")
        if have != seeds:
            raise UserError(
                f"seeds are not paired: {reference} has {seeds}, {arm} has {have}; each seed needs one run in each arm"
            )
        _same_config(members, "one arm's runs")
    return arms, seeds


def check_experiment(
    runs: list[Run],
    reference: str = "tied",
    margin: float = 0.01,
    tuning: list[Run] | None = None,
    arm_set: ArmSet = PRESETS,
    outcome: str = "loss",
) -> Experiment:
    """Group runs into a fair multi-arm experiment, or raise :class:`UserError` saying why not.

    Fair means: the reference arm and at least one other present; every seed in every arm
    exactly once; within an arm all configs equal apart from the seed; across arms equal apart
    from the arms' own settings (``arm_set``'s keys), a tuned learning rate and,
    for an equal-parameter experiment, the size of an arm (parameter counts then within 2% of
    the reference's, or of the largest arm); every run on one learning-rate schedule, as logged
    (:func:`experiment.runs.schedules.check_schedules`).  Bookkeeping keys may differ.  ``tuning``: the
    learning-rate grid runs, on a seed none of the reported runs uses.
    """
    if not tuning and any(len({r.learning_rate for r in runs if r.arm == a}) > 1 for a in {r.arm for r in runs}):
        return _check_swept(runs, reference, margin, arm_set, outcome)
    arms, seeds = _group(runs, reference, arm_set.names)
    scored = {isinstance(r.summary.get("final_val_loss"), (int, float)) for r in [*runs, *(tuning or [])]}
    if len(scored) > 1:
        raise UserError(
            "some runs have a final score on the shared val windows (final_val_loss) and some only their "
            "periodic evals (runs from before tinygpt had it): compare runs of one kind, or re-run the older"
        )
    hashes = {r.summary["data_sha256"] for r in [*runs, *(tuning or [])] if r.summary.get("data_sha256")}
    if len(hashes) > 1:
        raise UserError(
            "the runs trained on different corpus contents (data_sha256 differs): re-run them on the same data"
        )
    ref_cfg = flatten(arms[reference][0].config)
    differences, bookkeeping = {}, {}
    for arm, members in list(arms.items())[1:]:
        cfg = flatten(members[0].config)
        every = {
            k: (ref_cfg.get(k), cfg.get(k))
            for k in sorted(set(ref_cfg) | set(cfg))
            if ref_cfg.get(k) != cfg.get(k) and k != "train.seed"
        }
        differences[arm] = {k: v for k, v in every.items() if k not in BOOKKEEPING}
        bookkeeping.update({k: v for k, v in every.items() if k in BOOKKEEPING})
        unfair = sorted(set(differences[arm]) - set(arm_set.keys) - TUNED_KEYS - SIZE_KEYS)
        if unfair:
            detail = ", ".join(f"{k} ({differences[arm][k][0]!r} vs {differences[arm][k][1]!r})" for k in unfair)
            raise UserError(
                f"{arm} differs from {reference} in more than its arm's settings: {detail}; "
                "re-run them with the same config"
            )
    _check_sizes(arms, {arm: {k: v for k, v in d.items() if k not in arm_set.keys} for arm, d in differences.items()})
    if target_of(outcome) is None:  # the arms compare at one budget: every run follows one schedule
        schedules.check_schedules([r for members in arms.values() for r in members] + (tuning or []))
    else:  # the arms race to a val loss, each on its own recipe: every seed of an arm follows the arm's schedule
        for members in arms.values():
            schedules.check_schedules(members)
        schedules.check_eval_density({a: m[0].config["train"]["eval_interval"] for a, m in arms.items()}, reference)
    grid = _check_tuning(tuning or [], seeds, arms)
    return Experiment(
        runs=arms,
        seeds=seeds,
        reference=reference,
        margin=margin,
        differences=differences,
        bookkeeping=bookkeeping,
        tuning=grid,
        arm_set=arm_set,
        outcome=outcome,
    )


_FREE_ACROSS_RATES = {"train.seed", *TUNED_KEYS, *BOOKKEEPING}


def _check_swept(runs: list[Run], reference: str, margin: float, arm_set: ArmSet, outcome: str) -> Experiment:
    """:func:`check_experiment` for every arm at every rate on every seed: each rate's runs must form a fair
    experiment of every arm; read on the seeds every arm finished at every rate."""
    rates = sorted({r.learning_rate for r in runs})
    if outcome != "loss":
        raise UserError(
            f"runs at several learning rates are read best against best on the final val loss, not {outcome}"
        )
    have = {(r.arm, r.learning_rate) for r in runs}
    missing = [f"{a} at lr {lr:g}" for a in sorted({r.arm for r in runs}) for lr in rates if (a, lr) not in have]
    if missing:
        raise UserError(
            f"every arm trains every rate of the grid, but there is no run of {', '.join(missing)}: "
            "run the experiment's command again to train it"
        )
    at = {
        lr: check_experiment([r for r in runs if r.learning_rate == lr], reference, margin, None, arm_set)
        for lr in rates
    }
    first = flatten(at[rates[0]].runs[reference][0].config)
    for lr in rates[1:]:
        cfg = flatten(at[lr].runs[reference][0].config)
        other = sorted(k for k in set(first) | set(cfg) if first.get(k) != cfg.get(k) and k not in _FREE_ACROSS_RATES)
        if other:
            raise UserError(
                f"the runs at lr {lr:g} differ from those at lr {rates[0]:g} in more than the rate: {', '.join(other)}; "
                "re-run them with the same config"
            )
    seeds = sorted(set.intersection(*(set(e.seeds) for e in at.values())))
    if not seeds:
        raise UserError("no seed has finished every arm at every learning rate yet: run the experiment's command again")
    swept = {a: {lr: [r for r in at[lr].runs[a] if r.seed in seeds] for lr in rates} for a in at[rates[0]].runs}
    low = {a: min(rates, key=lambda lr: statistics.fmean(r.score for r in swept[a][lr])) for a in swept}
    exp = at[low[reference]]
    shown = {a: swept[a][low[a]] for a in exp.runs}
    return replace(exp, runs=shown, seeds=seeds, outcome=outcome, swept=swept)


def _check_sizes(arms: dict[str, list[Run]], differences: dict[str, dict]) -> None:
    """With an arm resized (--equal-params), every arm's parameter count must be within 2% of the largest."""
    if not any(set(diff) & SIZE_KEYS for diff in differences.values()):
        return
    counts = {arm: members[0].summary["parameters"] for arm, members in arms.items()}
    largest = max(counts.values())
    off = {arm: n for arm, n in counts.items() if abs(n - largest) > 0.02 * largest}
    if off:
        detail = ", ".join(f"{arm} {n:,}" for arm, n in off.items())
        raise UserError(
            f"arms differ in model size ({', '.join(sorted(SIZE_KEYS))}) but their parameter counts are "
            f"not within 2% of the largest ({largest:,}): {detail}; not an equal-parameter experiment"
        )


def _check_tuning(tuning: list[Run], seeds: list[int], arms: dict[str, list[Run]]) -> dict[str, list[Run]]:
    """The grid runs by arm, sorted by learning rate; refuse one on a reported seed or an arm not compared."""
    grid: dict[str, list[Run]] = {}
    for r in tuning:
        if r.seed in seeds:
            raise UserError(f"tuning run {r.path} uses seed {r.seed}, which is also reported: tune on another seed")
        if r.arm not in arms:
            raise UserError(f"tuning run {r.path} is a {r.arm} run, an arm not compared here")
        grid.setdefault(r.arm, []).append(r)
    return {arm: sorted(members, key=lambda r: r.learning_rate) for arm, members in grid.items()}


class Samples(dict):
    """``{prompt: {arm: text}}``, and ``left_out``: ``{arm: why it has no sample}`` for an arm whose checkpoint
    is there but could not be sampled (the code it trained with could not be run)."""

    def __init__(self, texts: dict | None = None, left_out: dict[str, str] | None = None) -> None:
        super().__init__(texts or {})
        self.left_out = left_out or {}


def samples(exp: Experiment, prompts: list[str], max_new_tokens: int = 80, seed: int = 1337) -> Samples:
    """``{prompt: {arm: text}}`` from each arm's first seed with a ``ckpt_best.pt``, same prompt and seed (an illustration).

    Each run is sampled with the code it trained with: the checkout's, loaded here, unless its commit
    (``env.json``) changed the model, data or training code since, when that commit's ``sample.py`` samples
    it in a worktree (:func:`experiment.arms.sample_with_code`); never the checkout's model on another
    commit's weights.  An arm that cannot be sampled is left out with the reason (``left_out``).  Prompts
    the tokenizer cannot encode are skipped.  Top-k 50, temperature 0.8, stopping at the tokenizer's
    end-of-text token as ``sample.py`` does.  An arm none of whose run folders holds a checkpoint (run
    folders committed under ``results/`` keep only their text files) gets no sample; the report says so.
    """
    firsts = {
        arm: next((r for r in members if RunFolder(r.path).best_ckpt.is_file()), None)
        for arm, members in exp.runs.items()
    }
    out = Samples({prompt: {} for prompt in prompts})
    for arm, run in firsts.items():
        if run is None:
            continue
        commit = run_commit(run.path)
        try:
            texts = (
                _sample_with_code(commit, run.path, prompts, max_new_tokens, seed)
                if needs_own_code(commit)
                else _sample_here(run.path, prompts, max_new_tokens, seed)
            )
        except UserError as e:
            out.left_out[arm] = str(e)
            continue
        for prompt, text in texts.items():
            out[prompt][arm] = text
    return out


def _sample_here(run: Path, prompts: list[str], max_new_tokens: int, seed: int) -> dict[str, str]:
    """``{prompt: text}`` from ``run``'s ``ckpt_best.pt`` loaded with the checkout's code (prompts the tokenizer
    cannot encode left out).  Raises :class:`UserError` when the checkpoint does not fit the model."""
    from model.generation import generate_text
    from training.runs import load_run

    model, tokenizer, _ = load_run(run, "best", torch.device("cpu"))
    out = {}
    for prompt in prompts:
        try:
            tokenizer.encode(prompt)
        except UserError:
            continue
        gen = torch.Generator().manual_seed(seed)
        pieces = generate_text(
            model,
            tokenizer,
            prompt,
            max_new_tokens,
            torch.device("cpu"),
            temperature=0.8,
            top_k=50,
            generator=gen,
            stop_token=getattr(tokenizer, "eot_token", None),
        )
        out[prompt] = "".join(pieces)
    return out


def _sample_with_code(commit: str, run: Path, prompts: list[str], max_new_tokens: int, seed: int) -> dict[str, str]:
    """``{prompt: text}`` from ``run`` by commit ``commit``'s own sample.py; a prompt it fails on is left out.
    Raises :class:`UserError` (the last failure) when every prompt failed."""
    out, failure = {}, None
    for prompt in prompts:
        try:
            out[prompt] = sample_with_code(commit, run, prompt, max_new_tokens, seed)
        except UserError as e:
            failure = e
    if not out and failure is not None:
        raise failure
    return out


def check_run_folders(paths: list[Path]) -> None:
    """Refuse, naming what was expected, a path given to report on that is not a run folder (``config.json``).

    An experiment folder (``experiment.json``) is the most likely mix-up: its run folders are
    what a report is made from.
    """
    for path in paths:
        if (path / EXPERIMENT_FILE).is_file():
            raise UserError(
                f"{path} is an experiment folder (it holds experiment.json), not a run folder: give it alone to "
                f"write its report again (python compare.py {shlex.quote(str(path))})"
            )
        if not RunFolder(path).config_path.is_file():
            what = (
                "does not exist"
                if not path.exists()
                else ("is a file" if not path.is_dir() else "holds no config.json")
            )
            raise UserError(
                f"{path} {what}: compare.py reports on run folders written by train.py (each holds "
                "config.json), or on one grid folder (holding grid.json)"
            )
