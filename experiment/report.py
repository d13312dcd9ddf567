"""The tied-vs-untied report: read run folders, check they form a fair experiment, do the statistics.

Everything here works from the run folders alone (``config.json``, ``metrics.jsonl``,
``summary.json``, ``ckpt_best.pt``): no network, no wandb account.  ``compare.py`` is the
command line; this module is the library it calls::

    from experiment.report import load_runs, check_experiment, paired_difference, plot_curves
    runs = load_runs([Path("runs/exp/tied-s0"), Path("runs/exp/untied-s0"), ...])
    exp = check_experiment(runs)           # raises UserError if the runs are not a fair pair set
    plot_curves(exp, Path("runs/exp"))     # PNG figures

``report_markdown.render_markdown(exp, ...)`` words the result as Markdown.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.errors import UserError
from core.files import read_json
from training import config
from training.runs import load_run_config, read_metrics

ARMS = ("tied", "untied")
# Keys that may differ between runs of one experiment without making it unfair: bookkeeping,
# and the seed (which pairs runs across arms).  Anything else must match or be reported.
BOOKKEEPING = config.BOOKKEEPING | {"train.seed"}
# With --equal-params the tied arm is resized along one of these; the report states it.
SIZE_KEYS = {"model.n_embd", "model.n_layer"}


@dataclass
class Run:
    """One finished run folder, as the report needs it."""

    path: Path
    config: dict
    summary: dict
    evals: list[dict]  # eval rows of metrics.jsonl, in step order
    tied: bool
    seed: int

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
        value = self.summary.get("unigram_val_loss")
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    @property
    def learned(self) -> bool:
        """False when the final val loss has not beaten the unigram baseline (True if there is none to beat)."""
        return self.unigram_val_loss is None or self.final["val_loss"] < self.unigram_val_loss


@dataclass
class Experiment:
    """Runs grouped by arm and paired by seed, plus every config difference between the arms."""

    runs: dict[str, list[Run]]  # arm -> runs sorted by seed
    seeds: list[int]
    differences: dict[str, tuple] = field(default_factory=dict)  # key -> (tied value, untied value)
    bookkeeping: dict[str, tuple] = field(default_factory=dict)  # differences with no effect on the maths


def flatten(config: dict) -> dict:
    """``{"model": {"n_layer": 4}}`` -> ``{"model.n_layer": 4}``."""
    return {f"{s}.{k}": v for s, values in config.items() for k, v in values.items()}


def load_run(path: Path) -> Run:
    """Read one finished run folder.

    Raises :class:`UserError` if it is missing or unfinished, or if its config, metrics or
    summary is malformed or holds a non-finite loss (naming the file and the fix).
    """
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"run folder {path} does not exist: give folders written by train.py or compare.py")
    config = load_run_config(path).to_dict()  # validated: every key present and typed
    metrics_path = path / "metrics.jsonl"
    if not metrics_path.is_file() or not metrics_path.read_text(errors="replace").strip():
        raise UserError(f"{metrics_path} is missing or empty: the run never logged; re-run it")
    try:
        rows = read_metrics(metrics_path)
        evals = sorted((r for r in rows if r.get("kind") == "eval"), key=lambda r: r["step"])
        for r in evals:
            if not all(isinstance(r[k], (int, float)) and math.isfinite(r[k]) for k in ("step", "tokens", "train_loss", "val_loss")):
                raise UserError(f"{metrics_path} has a non-finite or missing loss at step {r.get('step')}: "
                                "the run diverged; it cannot be compared")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(f"{metrics_path} is malformed ({type(e).__name__}: {e}): it was not written by train.py") from None
    if not evals:
        raise UserError(f"{metrics_path} has no eval rows: re-run it with eval_interval <= max_iters")
    max_iters = config["train"]["max_iters"]
    if not (path / "summary.json").is_file() or evals[-1]["step"] != max_iters:
        raise UserError(
            f"run {path} is unfinished (last eval at step {evals[-1]['step']} of {max_iters}): "
            f"finish it with python train.py --resume --run-name {path.name} --train.out_dir={path.parent}"
        )
    summary = read_json(path / "summary.json", "run summary")
    needed = ("parameters", "non_embedding_parameters", "tokens_per_s_median")
    if not isinstance(summary, dict) or any(not isinstance(summary.get(k), (int, float)) for k in needed):
        raise UserError(f"{path / 'summary.json'} lacks {', '.join(needed)}: re-run the run's last step with train.py")
    return Run(path, config, summary, evals, config["model"]["tie_embeddings"], config["train"]["seed"])


def load_runs(paths: list[Path]) -> list[Run]:
    """:func:`load_run` for each path."""
    return [load_run(p) for p in paths]


def check_experiment(runs: list[Run]) -> Experiment:
    """Group runs into a fair tied-vs-untied experiment, or raise :class:`UserError` saying why not.

    Fair means: both arms present; every seed in both arms exactly once; within an arm all
    configs equal apart from the seed; across arms equal apart from ``tie_embeddings`` and, for
    an equal-parameter experiment, the tied arm's ``n_embd`` or ``n_layer`` (parameter counts
    then within 2%).  Bookkeeping keys (device, log interval, wandb names) may differ.
    """
    arms = {arm: sorted((r for r in runs if r.tied == (arm == "tied")), key=lambda r: r.seed) for arm in ARMS}
    for arm, members in arms.items():
        if not members:
            raise UserError(f"no {arm} runs given: a comparison needs both arms (tied and untied)")
        seeds = [r.seed for r in members]
        if len(set(seeds)) != len(seeds):
            raise UserError(f"the {arm} arm has two runs with the same seed ({seeds}): give each seed once")
    tied_seeds, untied_seeds = [r.seed for r in arms["tied"]], [r.seed for r in arms["untied"]]
    if tied_seeds != untied_seeds:
        raise UserError(
            f"seeds are not paired: tied has {tied_seeds}, untied has {untied_seeds}; "
            "each seed needs one run in each arm"
        )
    for arm, members in arms.items():
        ref = flatten(members[0].config)
        for r in members[1:]:
            flat = flatten(r.config)
            diff = sorted(k for k in set(ref) | set(flat) if ref.get(k) != flat.get(k) and k not in BOOKKEEPING)
            if diff:
                raise UserError(f"{r.path} differs from {members[0].path} in {', '.join(diff)}: one arm's runs must share a config")
    hashes = {r.summary["data_sha256"] for r in runs if r.summary.get("data_sha256")}
    if len(hashes) > 1:
        raise UserError("the runs trained on different corpus contents (data_sha256 differs): re-run them on the same data")
    tied_cfg, untied_cfg = flatten(arms["tied"][0].config), flatten(arms["untied"][0].config)
    every = {
        k: (tied_cfg.get(k), untied_cfg.get(k))
        for k in sorted(set(tied_cfg) | set(untied_cfg))
        if tied_cfg.get(k) != untied_cfg.get(k) and k != "train.seed"
    }
    differences = {k: v for k, v in every.items() if k not in BOOKKEEPING}
    bookkeeping = {k: v for k, v in every.items() if k in BOOKKEEPING}
    unfair = sorted(set(differences) - {"model.tie_embeddings"} - SIZE_KEYS)
    if unfair:
        detail = ", ".join(f"{k} ({differences[k][0]!r} vs {differences[k][1]!r})" for k in unfair)
        raise UserError(f"the arms differ in more than tie_embeddings: {detail}; re-run them with the same config")
    if set(differences) & SIZE_KEYS:
        n_tied, n_untied = arms["tied"][0].summary["parameters"], arms["untied"][0].summary["parameters"]
        if abs(n_tied - n_untied) > 0.02 * n_untied:
            raise UserError(
                f"the arms differ in model size ({', '.join(sorted(set(differences) & SIZE_KEYS))}) but their "
                f"parameter counts {n_tied:,} vs {n_untied:,} are not within 2%: not an equal-parameter experiment"
            )
    return Experiment(arms, tied_seeds, differences, bookkeeping)


@dataclass
class PairedDifference:
    """Untied minus tied, paired by seed: mean, 95% confidence interval and verdict."""

    diffs: list[float]
    mean: float
    low: float | None  # None with a single seed: no interval can be computed
    high: float | None
    verdict: str


def paired_difference(tied: list[float], untied: list[float], what: str = "val loss") -> PairedDifference:
    """95% CI of the mean of ``untied - tied`` (paired t interval, ``scipy.stats.ttest_rel``).

    Seeds pair the runs (same data order, eval batches and body init), so the paired test
    removes the seed-to-seed variance both arms share.  The verdict says "no significant
    difference" whenever the interval contains zero.  Needs >= 2 pairs for an interval.
    """
    from scipy import stats  # imported here: scipy is only needed for reports

    if len(tied) != len(untied) or not tied:
        raise ValueError("need equally many tied and untied values, at least one")
    if not all(math.isfinite(x) for x in [*tied, *untied]):
        raise UserError(f"a {what} is not finite (a run diverged): no comparison can be made")
    diffs = [u - t for t, u in zip(tied, untied)]
    mean = statistics.fmean(diffs)
    n = len(diffs)
    if n < 2:
        return PairedDifference(diffs, mean, None, None,
                                f"one seed only: no confidence interval for the {what} difference; run more seeds")
    if all(d == diffs[0] for d in diffs):  # zero variance: the t interval is undefined
        which = "no difference" if mean == 0 else f"untied - tied = {mean:+.4f}"
        return PairedDifference(diffs, mean, None, None,
                                f"{which} in {what} in every one of {n} seeds, exactly: zero variance, so no interval")
    ci = stats.ttest_rel(untied, tied).confidence_interval(confidence_level=0.95)
    low, high = float(ci.low), float(ci.high)
    if low <= 0.0 <= high:
        verdict = (f"no significant difference in {what} between tied and untied "
                   f"(95% CI of untied - tied: [{low:+.4f}, {high:+.4f}], {n} seeds)")
    elif high < 0:
        verdict = (f"untied is better: its {what} is lower by {-mean:.4f} on average "
                   f"(95% CI of untied - tied: [{low:+.4f}, {high:+.4f}], {n} seeds)")
    else:
        verdict = (f"tied is better: its {what} is lower by {mean:.4f} on average "
                   f"(95% CI of untied - tied: [{low:+.4f}, {high:+.4f}], {n} seeds)")
    return PairedDifference(diffs, mean, low, high, verdict)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def median_range(values: list[float]) -> tuple[float, float, float] | None:
    """``(median, min, max)`` of the finite ``values``, or None if there are none.

    For timings (tokens/s, seconds), measured under whatever load the machine had: one busy
    moment makes a mean and standard deviation say little, the median and the range do not.
    """
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return (statistics.median(finite), min(finite), max(finite)) if finite else None


def arm_table(exp: Experiment) -> list[dict]:
    """One row per arm with the report's per-arm figures: losses as (mean, std) over seeds,
    timings (tokens/s, wall seconds) as :func:`median_range`, the unigram baseline's mean or None.
    """
    rows = []
    for arm in ARMS:
        members = exp.runs[arm]
        final = [r.final["val_loss"] for r in members]
        best = [r.best_val_loss for r in members]
        gap = [r.final["val_loss"] - r.final["train_loss"] for r in members]
        s0 = members[0].summary
        ckpt = members[0].path / "ckpt_best.pt"
        baselines = [r.unigram_val_loss for r in members if r.unigram_val_loss is not None]
        rows.append({
            "arm": arm,
            "parameters": s0["parameters"],
            "non_embedding_parameters": s0["non_embedding_parameters"],
            "final_val_loss": mean_std(final),
            "best_val_loss": mean_std(best),
            "best_val_ppl": math.exp(mean_std(best)[0]),
            "train_val_gap": mean_std(gap),
            "unigram_val_loss": statistics.fmean(baselines) if baselines else None,
            "tokens_per_s": median_range([r.summary["tokens_per_s_median"] for r in members]),
            "wall_time_s": median_range([r.summary.get("elapsed_s") for r in members]),
            "peak_memory_mib": mean_std([r.summary.get("peak_memory_mib", float("nan")) for r in members]),
            "checkpoint_mib": ckpt.stat().st_size / 2**20 if ckpt.is_file() else float("nan"),
            # Skipped (non-finite) steps are updates an arm did not get: a fairness caveat when non-zero.
            "skipped_steps": sum(r.summary.get("skipped_steps", 0) for r in members),
            "seeds": len(members),
        })
    return rows


def plot_curves(exp: Experiment, out_dir: Path) -> list[str]:
    """Val loss vs step and vs tokens, one line per arm (mean over seeds) with a min-max band.

    Writes two PNGs into ``out_dir`` and returns their file names.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names = []
    for x_key, label, fname in (("step", "optimizer step", "val_loss_vs_step.png"),
                                ("tokens", "training tokens", "val_loss_vs_tokens.png")):
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        for arm, color in zip(ARMS, ("tab:blue", "tab:orange")):
            members = exp.runs[arm]
            # Align by step (not by position): only steps every run of the arm evaluated at.
            by_step = [{r["step"]: r for r in m.evals} for m in members]
            steps = sorted(set.intersection(*(set(b) for b in by_step)))
            xs = [by_step[0][st][x_key] for st in steps]
            curves = [[b[st]["val_loss"] for st in steps] for b in by_step]
            mean = [statistics.fmean(v) for v in zip(*curves)]
            ax.plot(xs, mean, color=color, label=f"{arm} (mean of {len(members)} seeds)")
            ax.fill_between(xs, [min(v) for v in zip(*curves)], [max(v) for v in zip(*curves)],
                            color=color, alpha=0.25, linewidth=0)
        ax.set_xlabel(label)
        ax.set_ylabel("val loss (nats/token)")
        ax.set_title(f"Val loss vs {label}: tied vs untied")
        # The first eval (at init, ~ln vocab) dwarfs the rest; zoom on the learning part.
        later = [r["val_loss"] for arm in ARMS for m in exp.runs[arm] for r in m.evals[1:]]
        if later:
            ax.set_ylim(min(later) - 0.05, max(later) + 0.05)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / fname)
        plt.close(fig)
        names.append(fname)
    return names


def samples(exp: Experiment, prompts: list[str], max_new_tokens: int = 80, seed: int = 1337) -> dict:
    """``{prompt: {arm: text}}`` from each arm's first-seed ``ckpt_best.pt``, same prompt and seed.

    Prompts the tokenizer cannot encode are skipped.  Top-k 50, temperature 0.8.
    """
    from model.generation import generate_text
    from training.runs import load_run

    out: dict = {}
    for arm in ARMS:
        model, tokenizer, _ = load_run(exp.runs[arm][0].path, "best", torch.device("cpu"))
        for prompt in prompts:
            try:
                tokenizer.encode(prompt)
            except UserError:
                continue
            gen = torch.Generator().manual_seed(seed)
            text = "".join(generate_text(model, tokenizer, prompt, max_new_tokens, torch.device("cpu"),
                                         temperature=0.8, top_k=50, generator=gen))
            out.setdefault(prompt, {})[arm] = text
    return out
