"""The tokenizer files of an exported Hugging Face folder (data/hf_tokenizer.py): gpt2, bpe:N and char.

Run: ``python -m pytest -q tests/test_hf_tokenizer_files.py``  (CPU, offline, a few seconds; the gpt2
test needs the cached GPT-2 BPE file).  Weights and configs are tests/test_hf.py's.
"""

import json

import torch
from helpers import VERSE
from transformers import AutoTokenizer

import hf as hf_cli
import sample
from data.hf_tokenizer import write_tokenizer_files
from data.tokenizers import CharTokenizer, build_tokenizer
from model import hf
from model.config import GPTConfig
from model.gpt import GPT


def test_gpt2_tokenizer_files_load_in_transformers_and_encode_as_tiktoken(tmp_path):
    """vocab.json / merges.txt rebuilt from gpt2.tiktoken: 50,000 merges, and AutoTokenizer gives tiktoken's ids."""
    ours = build_tokenizer("gpt2")
    write_tokenizer_files(ours, tmp_path, max_length=1024)
    assert len((tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines()) == 1 + 50000
    theirs = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(theirs) == 50257 and theirs.eos_token_id == 50256 and theirs.model_max_length == 1024
    texts = [VERSE * 20, "héllo wörld, 日本語 🎉🎉  \n\n\t  x 's 'll  123456789 ...!?", " leading space", "ÿ\x00\x7f"]
    for text in texts:
        assert theirs(text)["input_ids"] == ours.encode(text), text[:40]
        assert theirs.decode(ours.encode(text)) == text
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "gpt2.tiktoken", "tinygpt_tokenizer.json"):
        assert (tmp_path / name).is_file(), name


def test_bpe_tokenizer_files_load_in_transformers_and_encode_alike(tmp_path):
    """A bpe:N tokenizer exports as Hugging Face's own tokenizer.json: AutoTokenizer gives our ids and text back."""
    from data.bpe import BPETokenizer

    ours = BPETokenizer.train(["The quick brown fox jumps over the lazy dog. " * 40, "To be or not to be. " * 40], 300)
    write_tokenizer_files(ours, tmp_path, max_length=64)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "The lazy fox: to be, or ünseen 🤖!"
    assert theirs(text)["input_ids"] == ours.encode(text) and theirs.decode(ours.encode(text)) == text
    assert theirs.model_max_length == 64
    # The class name transformers 4.x also has (5.x writes TokenizersBackend, which 4.x cannot load).
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_a_char_model_exports_with_its_own_tokenizer_file_and_imports_back(tmp_path, capsys):
    """The char tokenizer has no Hugging Face form: tinygpt_tokenizer.json carries it, and import reads it back."""
    chars = sorted(set(VERSE))
    torch.manual_seed(2)
    ours = GPT(GPTConfig(vocab_size=len(chars), block_size=32, n_layer=2, n_head=2, n_embd=32)).eval()
    hf.export(ours, tmp_path / "hf", lambda folder: write_tokenizer_files(CharTokenizer(chars), folder))
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tinygpt_tokenizer.json",
    ]
    assert hf_cli.main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert (
        sample.main(["--run", str(tmp_path / "run"), "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "20"]) == 0
    )
    tok = CharTokenizer(chars)
    want = tok.decode(ours.generate(torch.tensor([tok.encode("ROMEO:")]), 20, greedy=True)[0].tolist())
    assert capsys.readouterr().out == want + "\n"  # the imported model continues exactly as the exported one
