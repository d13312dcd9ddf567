"""Llama and Qwen3 export / import (model/hf_llama.py through model/hf.py and hf.py), on tiny random models: no download.

Run: ``python -m pytest -q tests/test_hf_llama.py``  (CPU, offline; a few seconds).
"""

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

import hf as hf_cli
import train
from core.errors import UserError
from data.hf_tokenizer import write_tokenizer_files
from data.bpe import BPETokenizer
from data.tokenizers import CharTokenizer
from model import hf
from model.config import GPTConfig
from model.gpt import GPT
from training.card import model_card
from training.runs import load_run

LLAMA = dict(position="rope", norm="rmsnorm", mlp="swiglu", bias=False)
SETS = {
    "llama": (LLAMA, LlamaForCausalLM),
    "llama-gqa": ({**LLAMA, "n_kv_head": 2, "rope_theta": 500000.0, "mlp_hidden": 48}, LlamaForCausalLM),
    "qwen3": ({**LLAMA, "qk_norm": True}, Qwen3ForCausalLM),
    "qwen3-gqa": ({**LLAMA, "qk_norm": True, "n_kv_head": 1}, Qwen3ForCausalLM),
}


def ours(tie: bool, vocab_size: int = 97, seed: int = 1, **choices) -> GPT:
    """A tiny random tinygpt model with ``choices``, in eval mode.

    Every parameter gets noise on top of the init, which leaves the norms' gains at 1: a gain
    copied to the wrong place (q_norm for k_norm, input for post-attention) would go unseen otherwise.
    """
    torch.manual_seed(seed)
    model = GPT(
        GPTConfig(vocab_size=vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=32, tie_embeddings=tie, **choices)
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def ids(vocab_size: int = 97, shape=(3, 32), seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab_size, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("name", list(SETS))
def test_export_gives_transformers_the_same_logits_and_round_trips_bit_identical(tmp_path, name, tie):
    """Ours -> folder -> {Llama,Qwen3}ForCausalLM: logits within 1e-5 on every position; the folder reads back
    into a model with the same config and bit-identical logits; a tied matrix is saved once and reloaded tied."""
    choices, cls = SETS[name]
    model = ours(tie, **choices)
    folder = hf.export(model, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [cls.__name__] and config["tie_word_embeddings"] == tie
    # transformers 4.x reads the rotary base at the top level only: without it, 10,000 whatever rope_parameters say.
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == model.config.rope_theta
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert ("lm_head.weight" in f.keys()) == (not tie)
    theirs = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(theirs) is cls
    assert (theirs.lm_head.weight is theirs.model.embed_tokens.weight) == tie
    back = hf.from_hf(folder)
    assert back.config == model.config
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(theirs(x).logits, model(x)[0], atol=1e-5, rtol=0)
        assert torch.equal(back(x)[0], model(x)[0])
    assert (back.lm_head.weight is back.wte.weight) == tie


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("name", list(SETS))
def test_exported_model_continues_greedily_exactly_as_transformers(tmp_path, name, tie):
    """transformers' generate(do_sample=False) on the export = our greedy generation (cached and not), token for token."""
    model = ours(tie, **SETS[name][0])
    theirs = AutoModelForCausalLM.from_pretrained(hf.export(model, tmp_path / "hf")).eval()
    prompt = ids(shape=(2, 5), seed=1)
    want = theirs.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False, pad_token_id=0
    )
    assert torch.equal(model.generate(prompt, 20, greedy=True), want)
    assert torch.equal(model.generate(prompt, 20, greedy=True, use_cache=False), want)


def test_biased_llama_exports_with_attention_and_mlp_biases(tmp_path):
    """model.bias=true on Llama's block is attention_bias and mlp_bias: the same logits in transformers."""
    model = ours(False, **{**LLAMA, "bias": True})
    folder = hf.export(model, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["attention_bias"] and config["mlp_bias"]
    theirs = LlamaForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids()).logits, model(ids())[0], atol=1e-5, rtol=0)
        assert torch.equal(hf.from_hf(folder)(ids())[0], model(ids())[0])


@pytest.mark.parametrize(
    "choice, line",
    [
        (dict(LLAMA, mlp="relu2"), "model.mlp=relu2 has no Hugging Face export"),
        (dict(LLAMA, logit_softcap=30.0), "model.logit_softcap=30.0 has no Hugging Face export"),
        (dict(norm="rmsnorm"), "model.norm=rmsnorm without model.position=rope, model.mlp=swiglu has no"),
        (dict(position="rope"), "model.position=rope without model.norm=rmsnorm, model.mlp=swiglu has no"),
        (dict(LLAMA, mlp="gelu"), "model.position=rope without model.mlp=swiglu has no"),
        (dict(n_kv_head=1), "model.n_kv_head=1 without model.position=rope, model.norm=rmsnorm, model.mlp=swiglu"),
        (dict(LLAMA, qk_norm=True, bias=True), "model.bias=true with model.qk_norm has no Qwen3ForCausalLM"),
        (dict(LLAMA, lm_head_bias=True), "model.lm_head_bias=true has no LlamaForCausalLM equivalent"),
    ],
)
def test_export_refuses_a_set_no_architecture_expresses_in_one_line(tmp_path, choice, line):
    """ReLU², a soft-cap, a mix of GPT-2's and Llama's blocks, biases Qwen3 lacks: one line naming the choice,
    before anything is written."""
    model = GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=2, n_embd=8, **choice))
    with pytest.raises(UserError, match=line) as e:
        hf.export(model, tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


def tiny_hf(kind: str, tie: bool, vocab_size: int = 97, **kw):
    """A random transformers Llama or Qwen3 (not written by tinygpt), with noise on every parameter."""
    torch.manual_seed(0)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=tie,
        rms_norm_eps=1e-6,
    )
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=8, **kw))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, **kw))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_import_reads_a_transformers_folder_into_a_run_with_the_same_logits(tmp_path, capsys, kind, tie):
    """hf.py import of a Llama / Qwen3 folder save_pretrained wrote: a run folder whose model gives transformers'
    logits within 1e-5, tied as the checkpoint; exported again, the weights come back bit for bit."""
    theirs = tiny_hf(kind, tie)
    theirs.save_pretrained(tmp_path / "hf")
    write_tokenizer_files(CharTokenizer([chr(32 + i) for i in range(97)]), tmp_path / "hf")  # 97 chars, 97 ids
    assert hf_cli.main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    model, _, _ = load_run(tmp_path / "run", "best", torch.device("cpu"))
    assert model.config.qk_norm == (kind == "qwen3") and model.config.kv_heads == 2 and model.tied == tie
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x)[0], theirs(x).logits, atol=1e-5, rtol=0)
    assert hf_cli.main(["export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "again")]) == 0
    back = type(theirs).from_pretrained(tmp_path / "again").state_dict()
    assert set(back) == set(theirs.state_dict()) and all(
        torch.equal(back[k], v) for k, v in theirs.state_dict().items()
    )


@pytest.mark.parametrize(
    "kind, field, value",
    [
        ("llama", "rms_norm_eps", 1e-5),
        ("llama", "hidden_act", "gelu"),
        ("llama", "rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
        ("llama", "head_dim", 16),
        ("llama", "attention_bias", True),
        ("qwen3", "attention_bias", True),
        ("qwen3", "use_sliding_window", True),
    ],
)
def test_import_refuses_a_config_tinygpt_cannot_express_in_one_line(kind, field, value):
    """Another eps, activation, rope scaling, head width, or biases tinygpt's model.bias cannot match: a UserError
    naming the field."""
    theirs = tiny_hf(kind, True)
    setattr(theirs.config, field, value)
    with pytest.raises(UserError, match=field.split("_parameters")[0]) as e:
        hf.from_hf(theirs)
    assert "\n" not in str(e.value)


def test_init_from_a_llama_folder_is_refused_in_one_line(tmp_path, capsys):
    """train.py --init-from fine-tunes GPT-2 weights only: a Llama folder is one error line pointing to hf.py import."""
    tiny_hf("llama", True).save_pretrained(tmp_path / "llama")
    argv = ["--init-from", str(tmp_path / "llama"), "--run-name", "x", f"--train.out_dir={tmp_path}"]
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert "'llama' model and --init-from reads GPT-2 only" in err and "for sample.py and hf.py export" in err


@pytest.mark.parametrize("name, family, tag", [("llama-gqa", "Llama", "llama"), ("qwen3", "Qwen3", "qwen3")])
def test_model_card_names_the_exported_architecture(tmp_path, name, family, tag):
    """The card's first sentence, Architecture row and tags name the class the folder loads as, not GPT-2."""
    choices, cls = SETS[name]
    (tmp_path / "run").mkdir()
    card = model_card(
        tmp_path / "run", tmp_path / "hf", ours(True, **choices), CharTokenizer(list("ab")), {"step": 0}, "best", False
    )
    assert f"A {family} model (`{cls.__name__}`) exported by" in card.text
    assert f"| Architecture | {family} (`{cls.__name__}`): n_layer=2, n_head=4, n_embd=32, block_size=32" in card.text
    assert tag in card.data.tags and "gpt2" not in card.data.tags and "GPT-2" not in card.text
    assert ("QK-norm" in card.text) == (tag == "qwen3")


@pytest.mark.parametrize("vocab_size, eot", [(50257, 50256), (97, None)])
def test_bos_and_eos_are_endoftext_with_the_gpt2_vocabulary_and_none_otherwise(tmp_path, vocab_size, eot):
    """As the GPT-2 export: LlamaConfig's defaults (1, 2) would make generate stop on an ordinary token."""
    folder = hf.export(GPT(GPTConfig(vocab_size=vocab_size, n_layer=1, n_head=2, n_embd=8, **LLAMA)), tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config.get("bos_token_id") == eot and config.get("eos_token_id") == eot


def test_a_bpe_vocabulary_of_gpt2s_size_has_no_endoftext(tmp_path):
    """A bpe:50257 run has 50,257 tokens and no <|endoftext|>: exported with its tokenizer's end-of-text id (none),
    no bos or eos is written, so generate would not stop at id 50256, an ordinary merge."""
    model = GPT(GPTConfig(vocab_size=50257, n_layer=1, n_head=2, n_embd=8, **LLAMA))
    folder = hf.export(model, tmp_path / "hf", eot=getattr(BPETokenizer, "eot_token", None))
    config = json.loads((folder / "config.json").read_text())
    assert config.get("bos_token_id") is None and config.get("eos_token_id") is None


def test_an_incomplete_llama_folder_is_refused_by_the_weight_it_lacks(tmp_path):
    """from_pretrained would fill a missing weight with random values: the import names it in one line instead."""
    from safetensors.torch import load_file, save_file

    tiny_hf("llama", False).save_pretrained(tmp_path / "llama")
    weights = load_file(tmp_path / "llama" / "model.safetensors")
    del weights["model.layers.1.self_attn.k_proj.weight"]
    save_file(weights, tmp_path / "llama" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"layers\.1\.self_attn\.k_proj\.weight") as e:
        hf.from_hf(tmp_path / "llama")
    assert "\n" not in str(e.value)
