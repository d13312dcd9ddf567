"""The vocabulary use of a grid cell: rows never seen and seen ≥ 5 times in the training split, kept for a clone.

Run: ``python -m pytest -q tests/test_vocab_use.py``  (CPU, offline, seconds).
A tiny text corpus whose last tenth (the val split) alone holds the letter 'z' gives known counts:
the char vocabulary is newline, a, b, z; the training split holds 300 of each of the first three.
"""

import json
import shutil

import numpy as np
import pytest
from fake_runs import arm_run

import compare
from data.prepare import prepare_data
from experiment.runs import folders
from experiment.grid.model import VOCAB_USE_FILE, cell_vocab_use, count_rows


def test_rows_are_counted_by_occurrences_in_the_training_shards():
    """count_rows: a row with no occurrence is never seen; a row counts as seen often from 5 occurrences on,
    over every shard together."""
    shards = [np.array([0, 0, 0, 1, 2, 2]), np.array([0, 0, 2, 2, 2])]  # 0: 5 times, 1: once, 2: 5 times, 3: never
    assert count_rows(shards, vocab_size=5) == {
        "vocab_size": 5,
        "train_tokens": 11,
        "rows_never_seen": 2,
        "rows_seen_5_or_more": 2,
    }


@pytest.fixture
def prepared(tmp_path):
    """(corpus path, prepared folder) of the 'z only in val' corpus, char tokenizer."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("ab\n" * 300 + "zzz\n" * 25)
    return corpus, prepare_data(str(corpus), "char", tmp_path / "cache")


def _grid_with_one_cell(tmp_path, corpus, cache_dir, sha):
    """A grid folder of one char cell, 3 paired seeds, whose runs trained on ``corpus`` prepared in ``cache_dir``."""
    grid = tmp_path / "g"
    cell = grid / "tokenizer-char"
    for s, d in enumerate([-0.05, -0.04, -0.06]):
        for arm, loss in (("tied", 3.0 + s / 100), ("untied", 3.0 + s / 100 + d)):
            arm_run(
                cell,
                arm,
                s,
                loss,
                summary={
                    "final_val_bpb": loss / 2,
                    "data_sha256": sha,
                    "parameters": 2000,
                    "non_embedding_parameters": 1000,
                    "tokens": 100,
                    "train_tokens": 900,
                },
                data__source=str(corpus),
                data__tokenizer="char",
                data__cache_dir=str(cache_dir),
                model__vocab_size=4,
            )
    (grid / "grid.json").write_text(
        json.dumps(
            {
                "axes": {"data.tokenizer": ["char"]},
                "arms": ["tied", "untied"],
                "seeds": 3,
                "lr_grid": [],
                "margin": 0.01,
                "reference": "tied",
                "config": None,
            }
        )
    )
    return grid


def test_a_cell_counts_its_vocabulary_from_the_cache_and_keeps_it_in_its_folder(tmp_path, prepared):
    """With the data cache on the machine, a cell's vocabulary use is counted from its training shards (a quarter
    of the rows never seen, three quarters seen ≥ 5 times) and written to the cell's vocab_use.json."""
    corpus, folder = prepared
    sha = json.loads((folder / "meta.json").read_text())["source_sha256"]
    grid = _grid_with_one_cell(tmp_path, corpus, tmp_path / "cache", sha)
    run = folders.load_run(grid / "tokenizer-char" / "tied-s0")
    use = cell_vocab_use(grid / "tokenizer-char", run)
    assert (use["rows_never_seen"], use["rows_seen_5_or_more"], use["vocab_size"]) == (1, 3, 4)
    assert json.loads((grid / "tokenizer-char" / VOCAB_USE_FILE).read_text()) == use


def test_a_stored_count_of_other_data_is_not_read(tmp_path, prepared):
    """Without the cache, vocab_use.json is read only when it belongs to the run's corpus (data_sha256),
    tokenizer and vocabulary size: a file of other data gives None, not a wrong number."""
    corpus, folder = prepared
    grid = _grid_with_one_cell(tmp_path, corpus, tmp_path / "elsewhere", "0" * 64)  # no cache for this corpus
    (grid / "tokenizer-char" / VOCAB_USE_FILE).write_text(
        json.dumps(
            {
                "tokenizer": "char",
                "data_sha256": "1" * 64,
                "vocab_size": 4,
                "train_tokens": 9,
                "rows_never_seen": 0,
                "rows_seen_5_or_more": 4,
                "min_count": 5,
            }
        )
    )
    run = folders.load_run(grid / "tokenizer-char" / "tied-s0")
    assert cell_vocab_use(grid / "tokenizer-char", run) is None


def test_the_grid_report_re_renders_byte_identical_without_the_cache(tmp_path, prepared):
    """The grid report shows the cell's rows never seen and seen ≥ 5 (25.0%, 75.0%); with the data cache gone
    (a fresh clone of committed files) the same command writes the same report, byte for byte."""
    corpus, folder = prepared
    sha = json.loads((folder / "meta.json").read_text())["source_sha256"]
    grid = _grid_with_one_cell(tmp_path, corpus, tmp_path / "cache", sha)
    assert compare.main([str(grid)]) == 0
    first = (grid / "report.md").read_bytes()
    row = next(line for line in first.decode().splitlines() if line.startswith("| [tokenizer-char]"))
    assert " | 25.0% | 75.0% | " in row
    shutil.rmtree(tmp_path / "cache")
    assert compare.main([str(grid)]) == 0
    assert (grid / "report.md").read_bytes() == first
