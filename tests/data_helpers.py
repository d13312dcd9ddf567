"""Helpers shared by the data-pipeline tests (``test_data*.py``): token files read back, corpora made on the fly.

Not a test module; the fixtures built on these live in ``conftest.py``.
"""

import json

import numpy as np


def split_tokens(folder, split):
    """All token ids of ``split`` in a prepared folder: its shards (from meta.json) concatenated."""
    meta = json.loads((folder / "meta.json").read_text())
    dtype = {"uint16": "<u2", "uint32": "<u4"}[meta["dtype"]]
    return np.concatenate([np.fromfile(folder / s["file"], dtype=dtype) for s in meta["splits"][split]["shards"]])


def lines_text(prefix, n):
    """n numbered lines ``"<prefix> line i\\n"``."""
    return "".join(f"{prefix} line {i:02d}\n" for i in range(n))


# Short stories, different lengths, so shard boundaries fall at varied places.
STORIES = [
    f"Story {i}: Tom had a {['red', 'big', 'blue'][i % 3]} ball." + " He played." * (i % 5) + "\nThe end."
    for i in range(60)
]


def write_jsonl(path, docs, field="text"):
    """A JSON-lines file with one {field: doc, "id": i} object per document."""
    path.write_text("".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)), encoding="utf-8")
    return path


def write_parquet_dataset(folder, train_docs, val_docs):
    """A folder laid out like ``hf download roneneldan/TinyStories --include 'data/*'``: parquet files named
    by split (train in two files), columns ``text`` and ``id``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "data").mkdir(parents=True)
    half = len(train_docs) // 2
    parts = {
        "train-00000-of-00002": train_docs[:half],
        "train-00001-of-00002": train_docs[half:],
        "validation-00000-of-00001": val_docs,
    }
    for name, docs in parts.items():
        pq.write_table(pa.table({"text": docs, "id": list(range(len(docs)))}), folder / "data" / f"{name}.parquet")
    return folder


def held_out(docs, val_fraction):
    """(train docs, val docs) under the every-M-th-document rule, M = round(1 / val_fraction)."""
    m = round(1 / val_fraction)
    return ([d for i, d in enumerate(docs) if i % m != m - 1], [d for i, d in enumerate(docs) if i % m == m - 1])


def folder_files(folder):
    """{file name: bytes} of a prepared folder, meta.json without its creation time."""
    out = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "meta.json"}
    meta = json.loads((folder / "meta.json").read_text())
    meta.pop("created")
    return out, meta
