"""Running a tied-vs-untied experiment: sizing the arms, training each run through ``train.py``, the report.

``compare.py`` is the command; this module trains every arm and seed as a ``train.py``
subprocess (reusing finished runs, resuming unfinished ones, forwarding stop signals) and
writes the report (:mod:`experiment.report`, :mod:`experiment.report_markdown`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import torch

from core.errors import Interrupted, UserError
from core.files import REPO_ROOT, read_json, write_json
from core.settings import overrides_to_argv
from data.loader import TokenData
from data.prepare import prepare_from_config
from experiment import report, report_markdown
from model.gpt import GPT, GPTConfig
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
    best, best_count = None, None
    # The count grows monotonically with width and depth: walk up until it passes the target.
    for value in range(start, limit + 1, step_):
        candidate = dataclasses.replace(cfg, tie_embeddings=True, **{key: value})
        n = count_params(candidate)
        if best is None or abs(n - target) < abs(best_count - target):
            best, best_count = candidate, n
        if n >= target:
            break
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
    session, so a terminal's Ctrl-C (sent to the whole process group) reaches it once,
    through us, and ``train.py`` gets to stop at a step boundary with a checkpoint
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


def run_experiment(args: argparse.Namespace, overrides: dict) -> tuple[list[Path], Path]:
    """Train both arms for every seed; returns (run folders, experiment folder)."""
    cfg = parse_config(args.config, overrides)
    # The vocabulary comes from the data: prepare it once so sizing and every run agree on it.
    data = TokenData(prepare_from_config(cfg.data))
    data.check_block_size(cfg.model.block_size)
    cfg.model.vocab_size = data.vocab_size
    stem = Path(args.config).stem if args.config else "default"
    name = args.name or f"{stem}-tied-vs-untied{'-equal-params-' + args.equal_params if args.equal_params else ''}"
    out_dir = Path(cfg.train.out_dir) / name
    passed_on = {s: {k: v for k, v in values.items() if f"{s}.{k}" != "train.out_dir"} for s, values in overrides.items()}
    base_argv = [*(["--config", args.config] if args.config else []), *overrides_to_argv(passed_on)]
    tied_extra = ["--model.tie_embeddings=true"]
    if args.equal_params:
        tied_cfg, n_tied, n_untied = equal_params_config(dataclasses.replace(cfg.model, tie_embeddings=False), args.equal_params)
        key = "n_embd" if args.equal_params == "width" else "n_layer"
        tied_extra.append(f"--model.{key}={getattr(tied_cfg, key)}")
        print(f"[compare] equal params by {args.equal_params}: tied {key}={getattr(tied_cfg, key)} "
              f"({n_tied:,} parameters) vs untied {key}={getattr(cfg.model, key)} ({n_untied:,})", flush=True)
    # The folder remembers the resolved config it was made with (bookkeeping aside), so a re-run
    # continues it -- with more seeds, another device or wandb mode -- but never mixes settings.
    flat = report.flatten(cfg.to_dict())
    settings = {"config": {k: v for k, v in flat.items() if k not in report.BOOKKEEPING},
                "equal_params": args.equal_params}
    saved = out_dir / "experiment.json"
    if saved.is_file():
        before = read_json(saved, "experiment settings")
        # A setting added to tinygpt after the folder was made ran at its default there.
        defaults = report.flatten(RunConfig().to_dict())
        before_cfg = {k: v for k, v in {**defaults, **before.get("config", {})}.items()
                      if k in settings["config"] or (k in before.get("config", {}) and k not in report.BOOKKEEPING)}
        now = json.loads(json.dumps(settings))
        if before_cfg != now["config"] or before.get("equal_params") != now["equal_params"]:
            changed = sorted(k for k in set(before_cfg) | set(now["config"]) if before_cfg.get(k) != now["config"].get(k))
            raise UserError(f"experiment folder {out_dir} was made with other settings "
                            f"({', '.join(changed) or 'equal_params'}): pick another --name")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(saved, settings)
    # train.out_dir is the experiment's parent here; run_arm names the experiment folder itself.
    resume_argv = overrides_to_argv({sec: {k: v for k, v in values.items()
                                           if f"{sec}.{k}" in RESUME_OVERRIDABLE and f"{sec}.{k}" != "train.out_dir"}
                                     for sec, values in overrides.items()})
    paths = []
    for i in range(args.seeds):
        seed = cfg.train.seed + i
        common = [f"--train.seed={seed}", f"--wandb.group={cfg.wandb.group or name}"]
        for arm, extra in (("tied", tied_extra), ("untied", ["--model.tie_embeddings=false"])):
            # train.py adds the arm's wandb tag itself.
            paths.append(run_arm(base_argv, out_dir, f"{arm}-s{i}", [*common, *extra], resume_argv))
    return paths, out_dir


def write_report(paths: list[Path], out_dir: Path, prompts: list[str], title: str) -> tuple[Path, bool]:
    """Check the runs form a fair experiment, then write ``out_dir/report.md`` (+ figures).

    Returns ``(report path, meaningful)``: ``meaningful`` is False when the report opens with
    :func:`report_markdown.baseline_warning` (a run did not beat the unigram baseline).
    """
    exp = report.check_experiment(report.load_runs(paths))
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = report.plot_curves(exp, out_dir)
    texts = report.samples(exp, prompts) if prompts else {}
    md = report_markdown.render_markdown(exp, figures, texts, title)
    path = out_dir / "report.md"
    path.write_text(md)
    return path, report_markdown.baseline_warning(exp) is None
