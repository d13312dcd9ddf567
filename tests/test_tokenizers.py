"""Tests for data/tokenizers.py and data/gpt2_files.py: char tokenizer, GPT-2 BPE offline route and hash checks, save/load.

Run from the repo root: ``python -m pytest -q tests/test_tokenizers.py``.
The real-route tests need gpt2.tiktoken in the default cache (~/.cache/tinygpt)
or fetch it once from PyPI (openai-whisper sdist, ~3 s); every other test
points TINYGPT_CACHE_DIR at tmp_path and disables the network fetchers.
"""

import hashlib
import json

import pytest

import data.gpt2_files as T
from core.errors import UserError
from data.tokenizers import (
    GPT2_BPE_SHA256,
    CharTokenizer,
    GPT2Tokenizer,
    build_tokenizer,
    find_gpt2_bpe,
    load_tokenizer,
    save_tokenizer,
    tokenizer_from_dict,
)


@pytest.fixture(scope="session")
def real_bpe():
    """Path of a verified gpt2.tiktoken via the real route (default cache, else tiktoken URL/PyPI)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TINYGPT_GPT2_BPE", raising=False)
        mp.delenv("TINYGPT_CACHE_DIR", raising=False)
        return find_gpt2_bpe()


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """Empty tmp cache, no env override, and both network fetchers failing."""

    def no_network():
        raise OSError("network disabled in test")

    monkeypatch.setenv("TINYGPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TINYGPT_GPT2_BPE", raising=False)
    monkeypatch.setattr(T, "_fetch_via_tiktoken", no_network)
    monkeypatch.setattr(T, "_fetch_via_pypi", no_network)
    return tmp_path / "cache"


# ----------------------------------------------------------------------------- char


def test_char_round_trip():
    """decode(encode(s)) == s, one id per character, vocab = sorted set of the text's characters."""
    text = "To be, or not to be:\nthat is the question."
    tok = CharTokenizer.from_text(text)
    assert tok.chars == sorted(set(text)) and tok.vocab_size == len(set(text))
    ids = tok.encode(text)
    assert len(ids) == len(text) and tok.decode(ids) == text


def test_char_unknown_character_is_user_error():
    """Encoding a character outside the vocabulary raises UserError listing it and the fix."""
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UserError, match=r"'z'.*prompt made of the corpus' characters"):
        tok.encode("abz")


def test_char_dict_round_trip():
    """tokenizer_from_dict(tok.to_dict()) rebuilds the same vocabulary."""
    tok = CharTokenizer.from_text("hello world")
    d = json.loads(json.dumps(tok.to_dict()))
    assert d["kind"] == "char"
    assert tokenizer_from_dict(d).chars == tok.chars


def test_build_tokenizer_unknown_kind_lists_valid_kinds():
    """An unknown tokenizer name raises UserError naming gpt2 and char."""
    with pytest.raises(UserError, match="gpt2, char"):
        build_tokenizer("sentencepiece", text="x")


def test_load_tokenizer_missing_file_names_it(tmp_path):
    """load_tokenizer on a folder without tokenizer.json raises UserError naming the file."""
    with pytest.raises(UserError, match="tokenizer.json"):
        load_tokenizer(tmp_path)


def test_load_tokenizer_corrupt_file_names_it(tmp_path):
    """A tokenizer.json that is not JSON raises UserError naming the file."""
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(UserError, match="tokenizer.json.*corrupt"):
        load_tokenizer(tmp_path)


# ----------------------------------------------------------------------------- gpt2 hash checks


def test_env_bpe_with_wrong_hash_is_refused(tmp_path, offline, monkeypatch):
    """TINYGPT_GPT2_BPE pointing at a file with the wrong sha256 is a UserError naming both hashes."""
    fake = tmp_path / "gpt2.tiktoken"
    fake.write_bytes(b"SGVsbG8= 0\n")
    monkeypatch.setenv("TINYGPT_GPT2_BPE", str(fake))
    actual = hashlib.sha256(fake.read_bytes()).hexdigest()
    with pytest.raises(UserError, match=f"{actual}.*{GPT2_BPE_SHA256}"):
        find_gpt2_bpe()


def test_cached_bpe_with_wrong_hash_is_not_used(offline, capsys):
    """A corrupt file in the cache is reported (stderr) and not returned; with no fetch route it is an error."""
    offline.mkdir(parents=True)
    (offline / "gpt2.tiktoken").write_bytes(b"corrupt")
    with pytest.raises(UserError, match="could not be found or fetched.*TINYGPT_GPT2_BPE.*--data.tokenizer=char"):
        find_gpt2_bpe()
    assert "ignoring" in capsys.readouterr().err


def test_fetched_bytes_with_wrong_hash_are_not_cached(offline, monkeypatch):
    """A fetch route returning bytes with the wrong sha256 is rejected and nothing is written to the cache."""
    monkeypatch.setattr(T, "_fetch_via_pypi", lambda: b"tampered")
    with pytest.raises(UserError, match="could not be found"):
        find_gpt2_bpe()
    assert not (offline / "gpt2.tiktoken").exists()


def test_fetched_bytes_with_right_hash_are_cached(offline, monkeypatch, real_bpe):
    """A successful fetch is written to <cache>/gpt2.tiktoken and that path is returned."""
    monkeypatch.setattr(T, "_fetch_via_pypi", lambda: real_bpe.read_bytes())
    path = find_gpt2_bpe()
    assert path == offline / "gpt2.tiktoken"
    assert T.sha256_file(path) == GPT2_BPE_SHA256


def test_search_dir_copy_with_wrong_hash_is_skipped(tmp_path, offline, monkeypatch, real_bpe):
    """A wrong-hash gpt2.tiktoken in a search dir is skipped in favour of the next route."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "gpt2.tiktoken").write_bytes(b"corrupt")
    monkeypatch.setenv("TINYGPT_GPT2_BPE", str(real_bpe))
    assert find_gpt2_bpe([run]) == real_bpe


def test_a_hugging_face_folders_vocab_json_gives_the_ranks_offline(tmp_path, offline, real_bpe):
    """A Hugging Face GPT-2 folder (vocab.json, no gpt2.tiktoken) is enough offline: its vocab.json is rebuilt into
    the rank file, checked against the pinned sha256 and cached; a vocab.json of other tokens is not used."""
    from data.hf_tokenizer import gpt2_vocab_and_merges

    vocab, _ = gpt2_vocab_and_merges(real_bpe)  # GPT-2's own vocab.json, token text -> id
    hf_folder, other = tmp_path / "gpt2", tmp_path / "other"
    hf_folder.mkdir()
    other.mkdir()
    (hf_folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (other / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}), encoding="utf-8")
    with pytest.raises(UserError, match="could not be found or fetched"):
        find_gpt2_bpe([other])
    path = find_gpt2_bpe([other, hf_folder])
    assert path == offline / "gpt2.tiktoken" and path.read_bytes() == real_bpe.read_bytes()


def test_gpt2_tokenizer_refuses_wrong_hash_file(tmp_path):
    """GPT2Tokenizer on a file whose sha256 is not GPT-2's raises UserError naming the expected hash."""
    fake = tmp_path / "gpt2.tiktoken"
    fake.write_bytes(b"SGVsbG8= 0\n")
    with pytest.raises(UserError, match=GPT2_BPE_SHA256):
        GPT2Tokenizer(fake)


# ----------------------------------------------------------------------------- gpt2 real route


def test_real_route_finds_verified_bpe(real_bpe):
    """find_gpt2_bpe() (cache or PyPI) returns a file with GPT-2's published sha256."""
    assert T.sha256_file(real_bpe) == GPT2_BPE_SHA256


def test_gpt2_encodes_like_openai_gpt2(real_bpe):
    """'Hello world' -> [15496, 995] (GPT-2's ids) and decode inverts encode."""
    tok = GPT2Tokenizer(real_bpe)
    assert tok.encode("Hello world") == [15496, 995]
    text = "O Romeo, Romeo! wherefore art thou Romeo?\n"
    assert tok.decode(tok.encode(text)) == text


def test_gpt2_never_emits_special_token_from_text(real_bpe):
    """User text '<|endoftext|>' is encoded as ordinary text, never as id 50256."""
    tok = GPT2Tokenizer(real_bpe)
    assert tok.eot_token not in tok.encode("a<|endoftext|>b")


def test_saved_gpt2_folder_is_self_contained(tmp_path, offline, real_bpe):
    """save_tokenizer copies gpt2.tiktoken; load_tokenizer then works with no cache, env or network."""
    folder = tmp_path / "run"
    folder.mkdir()
    save_tokenizer(GPT2Tokenizer(real_bpe), folder)
    tok = load_tokenizer(folder)
    assert tok.bpe_path == folder / "gpt2.tiktoken"
    assert tok.encode("Hello world") == [15496, 995]
