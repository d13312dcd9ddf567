"""GPT-2 import/export (model/hf.py, training/gpt2.py, training/hf_folders.py, hf.py) and ``train.py --init-from``, on small random GPT-2s: no download.

Run: ``python -m pytest -q tests/test_hf.py``  (CPU, offline; about half a minute, most of it
the two short fine-tuning runs; the tokenizer test needs the cached GPT-2 BPE file).
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import VERSE, error_line, tiny_args, train_rows, write_corpus
from huggingface_hub import ModelCard
from safetensors import safe_open
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

import hf as hf_cli
import sample
from training.catalog import describe_run
import train
from core import optional
from core.errors import UserError
from data.hf_tokenizer import write_tokenizer_files
from data.tokenizers import CharTokenizer, build_tokenizer
from model import hf
from model.checkpoint import load_checkpoint
from model.config import GPTConfig
from model.gpt import GPT
from training.card import model_card, public
from training.config import RunConfig

SMALL = dict(n_positions=32, n_embd=32, n_layer=2, n_head=2)


def small_gpt2(tie: bool = True, vocab_size: int = 97, **kw) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 in eval mode, no dropout (nothing downloaded).

    Every parameter gets noise on top of GPT-2's init, which leaves biases at 0 and LayerNorm
    gains at 1: a bias or gain copied to the wrong place would go unseen otherwise.
    """
    torch.manual_seed(0)
    eot = vocab_size - 1 if vocab_size == hf.GPT2_VOCAB_SIZE else None
    config = GPT2Config(
        **{**SMALL, **kw},
        vocab_size=vocab_size,
        tie_word_embeddings=tie,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eot,
        eos_token_id=eot,
    )
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def ids(vocab_size: int = 97, shape=(3, 32), seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab_size, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("tie", [True, False])
def test_imported_gpt2_gives_the_same_logits(tie):
    """GPT2LMHeadModel -> ours: logits within 1e-5 on every position; the tie comes across."""
    theirs = small_gpt2(tie)
    ours = hf.from_hf(theirs)
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], theirs(x).logits, atol=1e-5, rtol=0)
    assert (ours.lm_head.weight is ours.wte.weight) == tie
    assert ours.config.block_size == 32 and ours.config.n_layer == 2


def test_imported_gpt2_continues_greedily_exactly_as_transformers():
    """Our greedy generation (cached and not) = transformers' generate(do_sample=False), token for token."""
    theirs = small_gpt2()
    ours = hf.from_hf(theirs)
    prompt = ids(shape=(2, 5), seed=1)
    want = theirs.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False, pad_token_id=0
    )
    assert torch.equal(ours.generate(prompt, 20, greedy=True), want)
    assert torch.equal(ours.generate(prompt, 20, greedy=True, use_cache=False), want)


def test_tied_gpt2_into_an_untied_model_copies_the_matrix_into_both():
    """Untied import of a tied checkpoint: two separate Parameters with equal values, same logits."""
    theirs = small_gpt2(tie=True)
    ours = hf.from_hf(theirs, tie_embeddings=False)
    assert ours.lm_head.weight is not ours.wte.weight
    assert ours.lm_head.weight.data_ptr() != ours.wte.weight.data_ptr()
    assert torch.equal(ours.lm_head.weight, ours.wte.weight)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids())[0], theirs(ids()).logits, atol=1e-5, rtol=0)
    with pytest.raises(UserError, match="untied"):
        hf.from_hf(small_gpt2(tie=False), tie_embeddings=True)  # would lose the separate head


@pytest.mark.parametrize(
    "field, value",
    [
        ("activation_function", "relu"),
        ("layer_norm_epsilon", 1e-6),
        ("n_inner", 64),
        ("scale_attn_by_inverse_layer_idx", True),
    ],
)
def test_gpt2_configs_tinygpt_cannot_represent_are_one_line_errors(field, value):
    """Another activation, LayerNorm epsilon, MLP width or attention variant: a UserError naming the field."""
    theirs = small_gpt2()
    setattr(theirs.config, field, value)
    with pytest.raises(UserError, match=field) as e:
        hf.from_hf(theirs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("tie", [True, False])
def test_export_round_trip_gives_identical_logits(tmp_path, tie):
    """Ours -> folder -> GPT2LMHeadModel.from_pretrained -> ours: identical logits; a tied matrix saved once, reloaded tied."""
    torch.manual_seed(1)
    ours = GPT(GPTConfig(vocab_size=97, block_size=32, n_layer=2, n_head=2, n_embd=32, tie_embeddings=tie)).eval()
    folder = hf.export(ours, tmp_path / "hf")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert ("lm_head.weight" in f.keys()) == (not tie)
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] == tie
    theirs = GPT2LMHeadModel.from_pretrained(folder).eval()
    assert (theirs.lm_head.weight is theirs.transformer.wte.weight) == tie
    back = hf.from_hf(folder)
    x = ids()
    with torch.no_grad():
        assert torch.equal(back(x)[0], ours(x)[0])
        torch.testing.assert_close(theirs(x).logits, ours(x)[0], atol=1e-5, rtol=0)
    assert (back.lm_head.weight is back.wte.weight) == tie


def test_exact_gelu_exports_as_gelu_and_imports_back(tmp_path):
    """model.gelu_approximate='none' is Hugging Face's 'gelu': their logits equal ours, and it imports as 'none'."""
    torch.manual_seed(1)
    ours = GPT(GPTConfig(vocab_size=97, block_size=32, n_layer=2, n_head=2, n_embd=32, gelu_approximate="none")).eval()
    folder = hf.export(ours, tmp_path / "hf")
    assert json.loads((folder / "config.json").read_text())["activation_function"] == "gelu"
    theirs = GPT2LMHeadModel.from_pretrained(folder).eval()
    back = hf.from_hf(folder)
    assert back.config.gelu_approximate == "none"
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids()).logits, ours(ids())[0], atol=1e-5, rtol=0)
        assert torch.equal(back(ids())[0], ours(ids())[0])


def test_export_refuses_bias_free_models_and_non_empty_folders(tmp_path):
    """GPT-2 has biases everywhere; an export never writes into a folder that holds files."""
    with pytest.raises(UserError, match="bias"):
        hf.export(
            GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=1, n_embd=8, bias=False)), tmp_path / "a"
        )
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        hf.export(GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=1, n_embd=8)), tmp_path / "b")
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "a").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # no temp folder left


@pytest.mark.parametrize("spelt", [dict(n_kv_head=2), dict(mlp_hidden=64)], ids=["n_kv_head", "mlp_hidden"])
def test_gpt2s_block_with_its_defaults_spelt_out_exports_as_gpt2(tmp_path, spelt):
    """n_kv_head = n_head and mlp_hidden = 4 n_embd are GPT-2's block, set or not: GPT2LMHeadModel, same logits."""
    model = GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=2, n_embd=16, **spelt)).eval()
    theirs = GPT2LMHeadModel.from_pretrained(hf.export(model, tmp_path / "hf")).eval()
    x = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(theirs(x).logits, model(x)[0], atol=1e-5, rtol=0)


def test_an_export_never_replaces_a_folder_filled_while_it_wrote(tmp_path):
    """A second writer filling --out after the emptiness check (two exports to one path) keeps its files:
    the export is refused in one line and leaves no temp folder."""
    out = tmp_path / "out"

    def fill_out(folder: Path) -> None:  # runs inside the export, after its check of out
        out.mkdir()
        (out / "precious.txt").write_text("mine")

    model = GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=1, n_embd=8))
    with pytest.raises(UserError, match="filled by something else during the export") as e:
        hf.export(model, out, write_more=fill_out)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"] and (out / "precious.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (tmp_path / "empty").mkdir()  # an empty folder is still taken
    assert hf.export(model, tmp_path / "empty") and (tmp_path / "empty" / "config.json").is_file()


@pytest.mark.parametrize(
    "choice, line",
    [
        (dict(position="rope"), "model.position=rope without model.norm=rmsnorm, model.mlp=swiglu has no"),
        (dict(norm="rmsnorm"), "model.norm=rmsnorm without model.position=rope, model.mlp=swiglu has no"),
        (dict(qk_norm=True), "model.qk_norm=True without model.position=rope, model.norm=rmsnorm, model.mlp=swiglu"),
        (dict(mlp="swiglu"), "model.mlp=swiglu without model.position=rope, model.norm=rmsnorm has no"),
        (dict(n_kv_head=1), "model.n_kv_head=1 without model.position=rope, model.norm=rmsnorm, model.mlp=swiglu"),
        (dict(logit_softcap=30.0), "model.logit_softcap=30.0 has no Hugging Face export"),
    ],
)
def test_export_refuses_every_non_gpt2_choice_in_one_line(tmp_path, choice, line):
    """A model choice GPT-2 lacks, alone (so not Llama's block either), is refused by name before anything is
    written: nothing exports wrongly.  The Llama and Qwen3 exports are tests/test_hf_llama.py's."""
    model = GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=2, n_embd=8, **choice))
    with pytest.raises(UserError, match=line) as e:
        hf.export(model, tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


def test_incomplete_or_missing_checkpoints_are_refused(tmp_path):
    """A checkpoint missing a weight (from_pretrained would fill it with random values) or a missing folder."""
    from safetensors.torch import load_file, save_file

    small_gpt2().save_pretrained(tmp_path / "gpt2")
    weights = load_file(tmp_path / "gpt2" / "model.safetensors")
    del weights["transformer.h.1.mlp.c_fc.weight"]
    save_file(weights, tmp_path / "gpt2" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="h.1.mlp.c_fc.weight"):
        hf.from_hf(tmp_path / "gpt2")
    with pytest.raises(UserError, match="does not exist"):
        hf.from_hf(tmp_path / "nope")


def test_weights_that_do_not_fit_their_config_are_refused(tmp_path):
    """A config.json listing fewer layers than the file holds (from_pretrained would drop the rest), a
    misshapen tensor and a truncated file are one-line UserErrors, not a shorter model or a traceback."""
    small_gpt2().save_pretrained(tmp_path / "fewer")
    config = json.loads((tmp_path / "fewer" / "config.json").read_text())
    (tmp_path / "fewer" / "config.json").write_text(json.dumps({**config, "n_layer": 1}))
    with pytest.raises(UserError, match=r"transformer\.h\.1\..* has no place in its config\.json"):
        hf.from_hf(tmp_path / "fewer")
    small_gpt2().save_pretrained(tmp_path / "wide")
    (tmp_path / "wide" / "config.json").write_text(json.dumps({**config, "n_positions": 64}))
    with pytest.raises(UserError, match="cannot load GPT-2 from"):
        hf.from_hf(tmp_path / "wide")
    small_gpt2().save_pretrained(tmp_path / "cut")
    weights = tmp_path / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(UserError, match="cannot load GPT-2 from"):
        hf.from_hf(tmp_path / "cut")


def test_mistyped_local_paths_fail_at_once_and_home_paths_load(tmp_path, monkeypatch):
    """'hf/nope' beside an existing hf/ folder is a missing folder, not a hub id to retry for a minute;
    a '~/...' folder loads."""
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    small_gpt2().save_pretrained(tmp_path / "hf" / "g")
    started = time.monotonic()
    with pytest.raises(UserError, match="does not exist"):
        hf.from_hf("hf/nope")
    assert time.monotonic() - started < 5
    assert hf.from_hf("~/hf/g").config.n_layer == 2


def test_exported_folder_is_readable_by_others(tmp_path):
    """An export is for other users and containers to load: folder 0755, files 0644 (not mkdtemp's 0700)."""
    out = hf.export(hf.from_hf(small_gpt2()), tmp_path / "out")
    assert out.stat().st_mode & 0o777 == 0o755
    assert {f.stat().st_mode & 0o777 for f in out.iterdir()} == {0o644}


def test_missing_transformers_or_safetensors_is_a_one_line_install_hint(monkeypatch):
    """The extras are optional: without them, one line saying what to install."""
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(UserError, match="pip install transformers safetensors"):
        hf.export(GPT(GPTConfig(vocab_size=97, block_size=8, n_layer=1, n_head=1, n_embd=8)), Path("never"))
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match="pip install transformers safetensors"):
        hf.from_hf("some/folder")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(UserError, match="pip install transformers safetensors"):
        optional.huggingface_hub()  # the model card's


def test_a_transformers_too_old_for_our_config_layout_is_one_line(monkeypatch):
    """transformers 4.x would read a Llama or Qwen3 folder's rotary base as 10,000 without a word: refused in one
    line naming the version and the install command."""
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    with pytest.raises(
        UserError, match=r"needs transformers 5 or newer, this is 4.57.1: pip install 'transformers>=5'"
    ):
        optional.transformers()


def test_cli_import_sample_export(tmp_path, capsys):
    """hf.py import -> sample.py -> hf.py export -> from_pretrained: the same weights."""
    theirs = small_gpt2(vocab_size=hf.GPT2_VOCAB_SIZE)
    theirs.save_pretrained(tmp_path / "gpt2")
    assert hf_cli.main(["import", "--hf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'run'}")
    assert (
        sample.main(["--run", str(tmp_path / "run"), "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "40"]) == 0
    )
    assert capsys.readouterr().out.startswith("ROMEO:")
    assert hf_cli.main(["export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    assert f'from_pretrained("{tmp_path / "hf"}")' in capsys.readouterr().out  # the path that loads from here
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    x = ids(hf.GPT2_VOCAB_SIZE, (2, 32))
    with torch.no_grad():
        assert torch.equal(back(x).logits, theirs(x).logits)  # pure copies both ways: bit-identical
    text = "ROMEO: But soft, what light"
    assert AutoTokenizer.from_pretrained(str(tmp_path / "hf"))(text)["input_ids"] == build_tokenizer("gpt2").encode(
        text
    )
    assert (
        hf_cli.main(["export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 2
    )  # exists: refused
    assert "not empty" in error_line(capsys)


def test_an_imported_run_lists_as_imported_and_names_its_one_checkpoint(tmp_path, capsys):
    """A folder hf.py import made is listed as imported (no data, steps or scores of its own), not as a run
    that failed, and asking it for its last checkpoint names the one it has."""
    small_gpt2(vocab_size=hf.GPT2_VOCAB_SIZE).save_pretrained(tmp_path / "gpt2")
    assert hf_cli.main(["import", "--hf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "runs" / "gpt2")]) == 0
    row = describe_run(tmp_path / "runs" / "gpt2", "gpt2")
    assert (row["status"], row["data"], row["steps"], row["embeddings"]) == ("imported", None, None, "tied")
    capsys.readouterr()
    assert sample.main(["--run", str(tmp_path / "runs" / "gpt2"), "--checkpoint", "last"]) == 2
    assert error_line(capsys).endswith("use --checkpoint best")


def test_a_hugging_face_folder_given_as_a_run_names_hf_py_import(tmp_path, capsys):
    """sample.py --run or hf.py export --run on a transformers folder (not a run folder) is one error line
    naming hf.py import, not a complaint about config.json's sections."""
    small_gpt2(vocab_size=hf.GPT2_VOCAB_SIZE).save_pretrained(tmp_path / "gpt2")
    assert sample.main(["--run", str(tmp_path / "gpt2")]) == 2
    assert "is a Hugging Face folder, not a run folder" in (line := error_line(capsys)) and "hf.py import" in line
    assert hf_cli.main(["export", "--run", str(tmp_path / "gpt2"), "--out", str(tmp_path / "hf")]) == 2
    assert "python hf.py import --hf" in error_line(capsys) and not (tmp_path / "hf").exists()


# --------------------------------------------------------------------------- train.py --init-from


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> Path:
    """A small random GPT-2 with the real 50257-token vocabulary, saved like a downloaded checkpoint."""
    folder = tmp_path_factory.mktemp("gpt2") / "gpt2-small-random"
    small_gpt2(vocab_size=hf.GPT2_VOCAB_SIZE, n_positions=64).save_pretrained(folder)
    return folder


def init_args(tmp_path: Path, folder: Path, *extra: str) -> list[str]:
    """tiny_args with the gpt2 tokenizer and --init-from, minus the model shape (it comes from the checkpoint)."""
    base = [
        a
        for a in tiny_args(tmp_path, write_corpus(tmp_path), "--data.tokenizer=gpt2")
        if not a.startswith(("--model.n_layer", "--model.n_head", "--model.n_embd", "--data.tokenizer=char"))
    ]
    return [*base, "--init-from", str(folder), *extra]


@pytest.fixture(scope="module")
def fine_tuned_run(tmp_path_factory, gpt2_folder) -> Path:
    """An 8-step ``train.py --init-from`` run of ``gpt2_folder`` (tied, gpt2 tokenizer), with every record train.py writes."""
    root = tmp_path_factory.mktemp("ft")
    assert train.main(init_args(root, gpt2_folder, "--train.max_iters=8", "--run-name", "ft")) == 0
    return root / "runs" / "ft"


def test_init_from_fine_tunes_the_imported_weights(fine_tuned_run, gpt2_folder):
    """The run takes the GPT-2 shape (block_size cropped to 32 of 64), records its source, and its loss goes down."""
    run = fine_tuned_run
    model_cfg = json.loads((run / "config.json").read_text())["model"]
    assert (model_cfg["n_layer"], model_cfg["n_head"], model_cfg["n_embd"], model_cfg["block_size"]) == (2, 2, 32, 32)
    record = json.loads((run / "init_from.json").read_text())
    assert record["source"] == str(gpt2_folder.resolve()) and record["hf_config"]["n_positions"] == 64
    assert len(record["sha256"]["model.safetensors"]) == 64
    rows = train_rows(run)
    assert rows[-1]["train_loss"] < rows[0]["train_loss"] - 0.2


def test_init_from_starts_from_exactly_the_checkpoint_weights(tmp_path, gpt2_folder):
    """With a learning rate too small to move a float32 weight, the saved model is the checkpoint, bit for bit."""
    argv = init_args(
        tmp_path,
        gpt2_folder,
        "--train.max_iters=1",
        "--train.learning_rate=1e-30",
        "--train.min_lr=0",
        "--model.tie_embeddings=false",
        "--run-name",
        "still",
    )
    assert train.main(argv) == 0
    ckpt = load_checkpoint(tmp_path / "runs" / "still" / "ckpt_last.pt")
    ours = GPT(GPTConfig(vocab_size=50257, block_size=32, n_layer=2, n_head=2, n_embd=32, tie_embeddings=False))
    ours.load_state_dict(ckpt["model"])
    theirs = GPT2LMHeadModel.from_pretrained(gpt2_folder)
    want = {k: v[:32] if k == "transformer.wpe.weight" else v for k, v in theirs.state_dict().items()}
    got = hf.state_to_hf(ours)
    assert set(got) == set(want)  # untied: lm_head.weight is there, a copy of the tied matrix
    assert all(torch.equal(got[k], want[k]) for k in got)


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--model.n_layer=3"], "model.n_layer=3 (from the command line) conflicts"),
        (["--model.block_size=128"], "block_size=128"),
        (["--data.tokenizer=char"], "was trained with the gpt2 tokenizer, not 'char': use --data.tokenizer=gpt2"),
        (["--model.gelu_approximate=none"], "gelu_approximate=none (from the command line) conflicts"),
        (["--model.position=rope"], "which have GPT-2's block, not model.position=rope: drop it"),
    ],
)
def test_init_from_refuses_conflicting_settings(tmp_path, gpt2_folder, capsys, extra, match):
    """A shape the weights do not have, or another tokenizer: one line, exit 2, no run folder."""
    assert train.main(init_args(tmp_path, gpt2_folder, *extra, "--run-name", "bad")) == 2
    assert match in error_line(capsys)
    assert not (tmp_path / "runs" / "bad").exists()


@pytest.mark.parametrize("choice", [{"bias": False}, {"position": "rope"}, {"mlp": "swiglu"}])
def test_gpt2_weights_into_a_model_of_another_block_are_refused(gpt2_folder, choice):
    """load_into a model of GPT-2's shape but another block (no biases, rotary positions, SwiGLU): one
    UserError naming a weight one side lacks, never a weight dropped without a word or a KeyError."""
    shape = dict(vocab_size=hf.GPT2_VOCAB_SIZE, block_size=32, n_layer=2, n_head=2, n_embd=32)
    with pytest.raises(UserError, match="the model to fill is not GPT-2's block: "):
        hf.load_into(GPT(GPTConfig(**shape, **choice)), str(gpt2_folder))


def test_init_from_weights_of_another_vocabulary_names_their_size_not_gpt2(tmp_path, capsys):
    """A GPT-2 folder of 97 tokens (a char or bpe:N run's export) with --data.tokenizer=char is refused for its
    vocabulary, one line: it never claims the weights were trained with the gpt2 tokenizer."""
    small_gpt2(vocab_size=97).save_pretrained(tmp_path / "char-export")
    argv = [*init_args(tmp_path, tmp_path / "char-export"), "--data.tokenizer=char", "--run-name", "bad"]
    assert train.main(argv) == 2
    err = error_line(capsys)
    assert "has 97 tokens, not the gpt2 tokenizer's 50257" in err and "trained with the gpt2" not in err


def test_resuming_an_imported_run_says_it_has_no_training_and_how_to_fine_tune(tmp_path, capsys):
    """hf.py import writes a run folder for sample.py and export: --resume on it names the import and
    --init-from on a Hugging Face folder, not a missing ckpt_last.pt."""
    small_gpt2(vocab_size=hf.GPT2_VOCAB_SIZE).save_pretrained(tmp_path / "gpt2")
    assert hf_cli.main(["import", "--hf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "runs" / "imp")]) == 0
    capsys.readouterr()
    assert train.main(["--resume", "--run-name", "imp", f"--train.out_dir={tmp_path / 'runs'}"]) == 2
    err = error_line(capsys)
    assert "holds weights from hf.py import" in err and "--init-from" in err and "hf.py export --run" in err


def test_init_from_with_resume_or_a_missing_folder_is_refused(tmp_path, capsys):
    """--resume keeps the run's own weights; a missing --init-from folder is named."""
    assert train.main(["--resume", "--run-name", "x", "--init-from", str(tmp_path)]) == 2
    assert "drop --config / --init-from" in error_line(capsys)
    assert train.main(["--init-from", str(tmp_path / "nope"), "--run-name", "x", f"--train.out_dir={tmp_path}"]) == 2
    assert "does not exist" in error_line(capsys)


# --------------------------------------------------------------------------- the model card (README.md)


@pytest.fixture(scope="module")
def exported_run(tmp_path_factory, fine_tuned_run) -> Path:
    """``hf.py export`` of the fine-tuned run: a Hugging Face folder with its model card."""
    out = tmp_path_factory.mktemp("export") / "ft"
    assert hf_cli.main(["export", "--run", str(fine_tuned_run), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def imported_export(tmp_path_factory) -> Path:
    """A char model exported, imported untied (``hf.py import --untied``) and exported again: a run folder with no
    training records behind the second export."""
    root = tmp_path_factory.mktemp("imported")
    torch.manual_seed(3)
    model = GPT(GPTConfig(vocab_size=len(set(VERSE)), block_size=16, n_layer=1, n_head=1, n_embd=16)).eval()
    hf.export(model, root / "first", lambda folder: write_tokenizer_files(CharTokenizer(sorted(set(VERSE))), folder))
    assert hf_cli.main(["import", "--hf", str(root / "first"), "--out", str(root / "run"), "--untied"]) == 0
    assert hf_cli.main(["export", "--run", str(root / "run"), "--out", str(root / "again")]) == 0
    return root / "again"


def test_export_writes_a_model_card_with_hugging_face_metadata(exported_run):
    """README.md parses back with ModelCard.load: library, MIT licence, text-generation, the tying word in the tags."""
    card = ModelCard.load(exported_run / "README.md")
    assert card.data.library_name == "transformers" and card.data.license == "mit"
    assert card.data.pipeline_tag == "text-generation"
    assert {"gpt2", "tinygpt", "tied-embeddings"} <= set(card.data.tags) and "untied-embeddings" not in card.data.tags
    assert card.data.datasets is None  # a local corpus is no hub dataset


def test_model_card_states_the_runs_recorded_numbers(exported_run, fine_tuned_run):
    """The card's val loss, bits per byte, tokens, parameters, commit and command are the run's records, as written."""
    text = (exported_run / "README.md").read_text(encoding="utf-8")
    summary = json.loads((fine_tuned_run / "summary.json").read_text())
    env = json.loads((fine_tuned_run / "env.json").read_text())
    assert f"| Final val loss | {summary['final_val_loss']:.4f} nats/token" in text
    assert f"| Final val bits per byte | {summary['final_val_bpb']:.4f} |" in text
    assert f"| Training tokens | {summary['tokens']:,} ({summary['step']} steps) |" in text
    parameters = GPT2LMHeadModel.from_pretrained(exported_run).num_parameters()
    assert parameters == summary["parameters"] and f"| Parameters | {parameters:,} " in text
    assert "n_layer=2, n_head=2, n_embd=32, block_size=32" in text
    assert "tied (`tie_embeddings=true`): the output head and the token embedding share one matrix" in text
    assert env["git_commit"] in text and shlex.join(public(a) for a in env["argv"][1:]) in text
    assert "not recorded" not in text


def test_model_card_names_no_absolute_path_of_the_exporting_machine(exported_run, fine_tuned_run):
    """The card is meant for publishing: the run folder, the corpus and the command's paths appear by their names,
    and no folder of the machine (the temporary root both sit in) is written anywhere in it."""
    text = (exported_run / "README.md").read_text(encoding="utf-8")
    root = os.path.commonpath([exported_run, fine_tuned_run])
    assert root not in text and str(fine_tuned_run) not in text and str(exported_run) not in text
    assert f"from the run folder\n`{fine_tuned_run.name}`" in text or f"`{fine_tuned_run.name}` on" in text


def test_the_cards_usage_loads_the_hub_id_given_at_export(fine_tuned_run, tmp_path):
    """hf.py export --hub-id alice/tiny: the card's usage and its way back into tinygpt load alice/tiny; an id
    that is no OWNER/NAME is one error line before anything is written."""
    out = tmp_path / "hf"
    assert hf_cli.main(["export", "--run", str(fine_tuned_run), "--out", str(out), "--hub-id", "alice/tiny"]) == 0
    text = (out / "README.md").read_text(encoding="utf-8")
    assert 'AutoModelForCausalLM.from_pretrained("alice/tiny")' in text and "hf.py import --hf alice/tiny" in text
    assert hf_cli.main(["export", "--run", str(fine_tuned_run), "--out", str(tmp_path / "x"), "--hub-id", "a b"]) == 2
    assert not (tmp_path / "x").exists()


def test_the_cards_usage_example_loads_the_folder_in_transformers(exported_run):
    """The card's Python example runs as written beside the folder: model and tokenizer load from it by its name."""
    text = (exported_run / "README.md").read_text(encoding="utf-8")
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example.splitlines()) == 3
    # Run as a user would, in a Python of its own; it prints what the test checks.
    report = "\nimport json\nprint(json.dumps([type(model).__name__, model.config.tie_word_embeddings, tokenizer('ROMEO:')['input_ids']]))"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(  # from the folder's parent: the example loads the folder by its name
        [sys.executable, "-c", example + report],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=exported_run.parent,
    )
    name, tied, ids = json.loads(done.stdout.strip().splitlines()[-1])
    assert name == "GPT2LMHeadModel" and tied
    assert ids == build_tokenizer("gpt2").encode("ROMEO:")


def test_model_card_of_a_run_without_records_says_not_recorded(imported_export):
    """An imported run has no summary, metrics or env record: the export still writes a card, and says so."""
    text = (imported_export / "README.md").read_text(encoding="utf-8")
    for row in ("Data", "Training tokens", "Final val loss", "Final val bits per byte", "Commit", "Trained"):
        assert f"| {row} | not recorded |" in text, row
    assert "The command that trained it: not recorded." in text
    assert "imported by `hf.py import`" in text


def test_model_card_names_the_checkpoint_file_it_exported(imported_export, tmp_path):
    """A run with only ckpt_last.pt: export's default --checkpoint best falls back to it, and the card names that file."""
    run = tmp_path / "run"
    shutil.copytree(imported_export.parent / "run", run)
    (run / "ckpt_best.pt").rename(run / "ckpt_last.pt")
    assert hf_cli.main(["export", "--run", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert "| Exported weights | `ckpt_last.pt`: step " in (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")


def test_model_card_of_an_untied_model_says_untied(imported_export):
    """The tying in the card is the exported weights': an untied model gets the untied words and tag."""
    card = ModelCard.load(imported_export / "README.md")
    assert "untied-embeddings" in card.data.tags and "tied-embeddings" not in card.data.tags
    assert "untied (`tie_embeddings=false`): the output head has its own matrix" in card.text


def test_model_card_names_a_hub_corpus_as_its_dataset(tmp_path):
    """data.source=hf:<hub id> becomes the card's datasets entry, and its licence note names the corpus."""
    cfg = RunConfig().to_dict()
    cfg["data"]["source"] = "hf:roneneldan/TinyStories"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(cfg))
    model = GPT(GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=1, n_embd=8))
    card = model_card(
        tmp_path / "run", tmp_path / "hf", model, CharTokenizer(list("abcdefgh")), {"step": 0}, "best", False
    )
    assert card.data.datasets == ["roneneldan/TinyStories"]
    assert "corpus (`hf:roneneldan/TinyStories`)" in card.text
