"""Training behaviour: schedule, config parsing and its errors, run folders, resume, bad input.

Run: ``python -m pytest -q tests/test_train.py``  (CPU, offline, well under a minute).
Most tests call ``train.main(argv)`` in-process with a tiny model on a small text file.
"""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import VERSE, error_line, tiny_args, train_rows

import train
from core.errors import UserError
from model.checkpoint import load_checkpoint
from training import schedule, setup, step
from training.config import RunConfig, TrainConfig, parse_config
from training.runs import read_metrics

# ---------------------------------------------------------------- schedule


def test_lr_warms_up_linearly_then_decays_to_min_lr():
    """get_lr rises linearly during warmup, peaks at learning_rate, and ends at min_lr."""
    cfg = TrainConfig(max_iters=100, warmup_iters=10, learning_rate=1e-3, min_lr=1e-4)
    lrs = [schedule.get_lr(s, cfg) for s in range(120)]
    assert lrs[0] < lrs[5] < lrs[9] < 1e-3
    assert max(lrs) == pytest.approx(1e-3)
    assert lrs[10] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:100], lrs[11:100]))  # monotone decay
    assert lrs[100] == lrs[119] == 1e-4


# ---------------------------------------------------------------- config


def test_shakespeare_toml_is_the_defaults_written_out():
    """configs/shakespeare.toml resolves to exactly the config of ``python train.py`` with no flags,
    as the README and the file itself promise (change both together)."""
    written = Path(train.__file__).resolve().parent / "configs" / "shakespeare.toml"
    assert parse_config(written, {}) == parse_config(None, {})


@pytest.mark.parametrize(
    "path", sorted((Path(train.__file__).resolve().parent / "configs").glob("*.toml")), ids=lambda p: p.name
)
def test_every_shipped_config_resolves_to_a_valid_config(path):
    """Each file in configs/ parses into a checked RunConfig: a misspelt key or a value out of range in a
    shipped config fails here, not at a user's first run of it."""
    cfg = parse_config(path, {})
    assert isinstance(cfg, RunConfig) and cfg.train.max_iters > 0


def test_toml_and_cli_override_defaults(tmp_path):
    """Defaults < TOML file < command line, each typed."""
    toml = tmp_path / "c.toml"
    toml.write_text("[model]\nn_layer = 3\nn_embd = 64\n[train]\nlearning_rate = 1\n")
    cfg = parse_config(toml, {"model": {"n_embd": 96}})
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head) == (3, 96, 4)
    assert cfg.train.learning_rate == 1.0 and isinstance(cfg.train.learning_rate, float)


@pytest.mark.parametrize(
    "text, match",
    [
        ("[model]\nn_layers = 3\n", "unknown key 'model.n_layers'.*n_layer"),
        ("[modle]\nn_layer = 3\n", "unknown section 'modle'"),
        ("[model]\nn_layer = 'three'\n", "model.n_layer .* must be of type int"),
        ("[model]\ntie_embeddings = 1\n", "must be of type bool"),
        ("[model]\nvocab_size = 100\n", "set by the tokenizer"),
        ("[model]\nn_layer = \n", "not valid TOML"),
    ],
)
def test_bad_toml_is_a_clear_error(tmp_path, text, match):
    """An unknown key, a wrong type, a derived key or broken TOML raises a UserError naming it."""
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    with pytest.raises(UserError, match=match):
        parse_config(toml, {})


@pytest.mark.parametrize(
    "argv, match",
    [
        (
            ["--model.n_layers=3"],
            "unknown option --model.n_layers: did you mean --model.n_layer\\? valid \\[model\\] keys are .*n_layer",
        ),
        (["--model.n_layer=three"], "not a valid int"),
        (["--model.tie_embeddings=maybe"], "not a valid bool"),
        (["--bogus"], "unknown option --bogus"),
        (["--train.dtype=float16"], "train.dtype"),
        (["--config=does/not/exist.toml"], "does not exist"),
    ],
)
def test_bad_cli_options_exit_2_with_one_line(capsys, argv, match):
    """Bad flags exit with status 2 and a single 'error: ...' line on stderr."""
    assert train.main(argv) == 2
    assert re.search(match, error_line(capsys))


def test_cli_bools_parse():
    """--model.tie_embeddings accepts false/true."""
    args, overrides = train.parse_args(["--model.tie_embeddings=false", "--train.compile", "true"])
    assert overrides == {"model": {"tie_embeddings": False}, "train": {"compile": True}}


# ---------------------------------------------------------------- runs


def test_auto_head_loss_is_resolved_for_the_datas_vocabulary(tmp_path, corpus):
    """'auto' is resolved with the data's vocabulary, not the config's default: at batch 12 x block 32 a
    character head's logits fit one slice (a 50,257-token head's would not), so config.json says 'logits'."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=1", "--train.batch_size=12", "--run-name", "r")
    assert train.main(args) == 0
    cfg = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert cfg["model"]["vocab_size"] < 100 and cfg["train"]["head_loss"] == "logits"


def test_run_folder_contents(tmp_path, corpus):
    """A run writes config.json, env.json, metrics.jsonl, both checkpoints and the tokenizer."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r")) == 0
    run = tmp_path / "runs" / "r"
    for name in ("config.json", "env.json", "metrics.jsonl", "ckpt_last.pt", "ckpt_best.pt", "tokenizer.json"):
        assert (run / name).is_file(), name
    cfg = RunConfig.from_dict(json.loads((run / "config.json").read_text()))
    assert cfg.train.lr_decay_iters == 4  # resolved, not 0
    env = json.loads((run / "env.json").read_text())
    assert env["versions"]["torch"] == torch.__version__ and "git_commit" in env
    # The hardware that sets the rounding: the CPU and the kernels torch chose for it.
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and "cpu_model" in env
    rows = read_metrics(run / "metrics.jsonl")
    assert rows[0]["kind"] == "eval" and rows[0]["step"] == 0
    assert abs(rows[0]["val_loss"] - math.log(cfg.model.vocab_size)) < 0.3
    for r in rows[:-1]:
        assert {"step", "tokens", "train_loss", "lr", "elapsed_s"} <= set(r)
    assert all("tokens_per_s" in r for r in rows if r["kind"] == "train")
    assert all("val_loss" in r and "val_ppl" in r for r in rows if r["kind"] == "eval")
    assert rows[-2]["tokens"] == 4 * 4 * 32
    final = rows[-1]  # the last row: the final score on the same val windows for every run
    assert final["kind"] == "final_eval" and final["step"] == 4 and final["tokens_scored"] > 0
    assert json.loads((run / "summary.json").read_text())["final_val_loss"] == final["val_loss"]
    ckpt = load_checkpoint(run / "ckpt_last.pt")
    assert ckpt["step"] == 4 and ckpt["tie_embeddings"] is True


def test_loss_plot_false_draws_no_png(tmp_path, corpus, monkeypatch):
    """--train.loss_plot=false: the run folder has no loss.png and the drawing code is never entered
    (that is what keeps matplotlib's ~30 MiB out of the process); the default run draws one."""
    import training.runs

    drawn, draw = [], training.runs.write_loss_plot
    monkeypatch.setattr(training.runs, "write_loss_plot", lambda *a, **k: drawn.append(a) or draw(*a, **k))
    assert (
        train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "off", "--train.loss_plot=false"))
        == 0
    )
    assert drawn == [] and not (tmp_path / "runs" / "off" / "loss.png").exists()
    assert (tmp_path / "runs" / "off" / "summary.json").is_file()
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "on")) == 0
    assert drawn and (tmp_path / "runs" / "on" / "loss.png").is_file()


def test_importing_train_loads_no_tokenizer_library():
    """tiktoken and Hugging Face tokenizers load only when a gpt2 or bpe:N tokenizer is built, so a
    char run's process never holds them (4.5 MiB: 3.2 for tokenizers, 1.3 for tiktoken, measured
    after importing torch)."""
    code = "import sys, train; print(sorted({m.split('.')[0] for m in sys.modules} & {'tiktoken', 'tokenizers'}))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(train.__file__).parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_existing_run_folder_is_never_overwritten(tmp_path, corpus, capsys):
    """Starting a run into an existing folder without --resume is refused and changes nothing."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")
    assert train.main(args) == 0
    run = tmp_path / "runs" / "r"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert train.main(args) == 2
    assert "already exists" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(
    "extra",
    [(), ("--train.optimizer=muon", "--train.untie_at=0.25", "--model.position=rope", "--model.norm=rmsnorm")],
    ids=["adamw", "muon-untied-at-2"],
)
def test_resume_equals_uninterrupted(tmp_path, corpus, extra):
    """Stop at step 4, resume to 8: the losses equal an uninterrupted 8-step run's, bit for bit; also under Muon
    (both optimizers' states restored) with the head untied at step 2, before the checkpoint the resume reads."""
    common = tiny_args(tmp_path, corpus, "--model.dropout=0.1", "--train.lr_decay_iters=8", *extra)
    assert train.main([*common, "--train.max_iters=8", "--run-name", "straight"]) == 0
    assert train.main([*common, "--train.max_iters=4", "--run-name", "split"]) == 0
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "split", "--train.max_iters=8"])
        == 0
    )
    straight = train_rows(tmp_path / "runs" / "straight")
    split = train_rows(tmp_path / "runs" / "split")
    assert [r["step"] for r in split] == list(range(1, 9))
    assert [r["train_loss"] for r in split] == [r["train_loss"] for r in straight]
    a = load_checkpoint(tmp_path / "runs" / "straight" / "ckpt_last.pt")["model"]
    ckpt = load_checkpoint(tmp_path / "runs" / "split" / "ckpt_last.pt")
    b = ckpt["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    if extra:  # the resumed run did untie, and saved both optimizers' states
        assert ckpt["tie_embeddings"] is False and set(ckpt["optimizer"]) == {"adamw", "muon"}


def test_evaluating_less_often_trains_the_same_weights(tmp_path, corpus):
    """Evaluations read fixed windows and draw no random numbers, so how often a run evaluates (and whether
    it prints a sample) leaves every training loss and the final weights bit for bit the same, dropout on:
    a speedrun config may evaluate only at its last step and keep its predecessor's outcomes."""
    common = tiny_args(tmp_path, corpus, "--model.dropout=0.1", "--train.max_iters=8")
    assert train.main([*common, "--run-name", "often", "--train.eval_interval=2"]) == 0
    assert train.main([*common, "--run-name", "once", "--train.eval_interval=8", "--train.sample_tokens=20"]) == 0
    often, once = tmp_path / "runs" / "often", tmp_path / "runs" / "once"
    assert [r["train_loss"] for r in train_rows(once)] == [r["train_loss"] for r in train_rows(often)]
    a = load_checkpoint(often / "ckpt_last.pt")["model"]
    b = load_checkpoint(once / "ckpt_last.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    summaries = [json.loads((run / "summary.json").read_text()) for run in (often, once)]
    assert summaries[0]["final_val_loss"] == summaries[1]["final_val_loss"]


def test_resume_refuses_changing_the_maths(tmp_path, corpus, capsys):
    """--resume with a new learning rate is refused: it would silently change the run."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    code = train.main(
        [f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.learning_rate=1.0"]
    )
    assert code == 2 and "cannot change on --resume" in capsys.readouterr().err


def test_schedule_note_says_what_the_learning_rate_does_past_or_short_of_its_horizon():
    """Extending past lr_decay_iters leaves the lr at min_lr; stopping short leaves it undecayed: both say the fix."""
    longer = TrainConfig(max_iters=800, lr_decay_iters=400, learning_rate=1e-3, min_lr=1e-4, warmup_iters=10)
    assert "steps 400..800 train at min_lr=0.0001" in schedule.schedule_note(longer)
    assert schedule.schedule_note(longer).endswith("--train.lr_decay_iters=800")
    shorter = TrainConfig(max_iters=40, lr_decay_iters=400, learning_rate=1e-3, min_lr=1e-4, warmup_iters=10)
    note = schedule.schedule_note(shorter)
    assert f"last learning rate is {schedule.get_lr(39, shorter):.3g}" in note and "--train.lr_decay_iters=40" in note
    assert schedule.schedule_note(TrainConfig(max_iters=400, lr_decay_iters=400)) is None


def test_resume_that_extends_a_run_prints_the_schedule_note_and_may_move_the_horizon(tmp_path, corpus, capsys):
    """--resume --train.max_iters=4 on a 2-step run: one note line; --train.lr_decay_iters=4 is accepted."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    capsys.readouterr()
    base = [f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r"]
    assert train.main([*base, "--train.max_iters=4"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "--train.lr_decay_iters=4" in notes[0]
    assert train.main([*base, "--train.max_iters=6", "--train.lr_decay_iters=6"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert json.loads((tmp_path / "runs" / "r" / "config.json").read_text())["train"]["lr_decay_iters"] == 6


def test_resume_without_checkpoint_is_an_error(tmp_path, capsys):
    """--resume of a run that does not exist says there is nothing to resume."""
    assert train.main([f"--train.out_dir={tmp_path}", "--resume", "--run-name", "ghost"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_tied_and_untied_runs_side_by_side(tmp_path, corpus):
    """The same config tied and untied: checkpoints differ by exactly vocab_size * n_embd parameters."""
    for arm in ("true", "false"):
        args = tiny_args(tmp_path, corpus, "--train.max_iters=2", f"--model.tie_embeddings={arm}", "--run-name", arm)
        assert train.main(args) == 0
    counts = {}
    for arm in ("true", "false"):
        state = load_checkpoint(tmp_path / "runs" / arm / "ckpt_last.pt")["model"]
        unique = {t.data_ptr(): t.numel() for t in state.values()}
        counts[arm] = sum(unique.values())
    vocab = json.loads((tmp_path / "runs" / "true" / "config.json").read_text())["model"]["vocab_size"]
    assert counts["false"] - counts["true"] == vocab * 32


@pytest.mark.parametrize(
    "source_text, extra, match",
    [
        (None, [], "does not exist"),
        ("", [], "empty"),
        ("tiny corpus with few characters\n" * 40, ["--model.block_size=256"], "block_size 256 is too large"),
    ],
)
def test_bad_corpus_exits_2_and_writes_no_run(tmp_path, capsys, source_text, extra, match):
    """Missing or empty corpus, or block_size beyond the val split: one-line error, no run folder."""
    path = tmp_path / "c.txt"
    if source_text is not None:
        path.write_text(source_text)
    args = tiny_args(tmp_path, path, "--train.max_iters=2", "--run-name", "r", *extra)
    assert train.main(args) == 2
    assert re.search(match, error_line(capsys))
    assert not (tmp_path / "runs" / "r").exists()


def test_resume_of_a_finished_run_says_how_to_extend(tmp_path, corpus, capsys):
    """--resume at max_iters is refused with the fix (raise max_iters); nothing is rewritten."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    run = tmp_path / "runs" / "r"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r"]) == 2
    assert "--train.max_iters=N with N > 2" in error_line(capsys)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_resume_refuses_a_changed_corpus(tmp_path, corpus, capsys):
    """If the corpus changed since the checkpoint, resuming would train on other data: refused."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    corpus.write_text(VERSE.upper() * 150)
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.max_iters=4"]) == 2
    )
    assert re.search("tokenizer differs|corpus .* changed", error_line(capsys))


def test_resume_with_checkpoint_interval_zero(tmp_path, corpus):
    """checkpoint_interval=0 (= eval_interval) is accepted on resume too."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    assert (
        train.main(
            [
                f"--train.out_dir={tmp_path / 'runs'}",
                "--resume",
                "--run-name",
                "r",
                "--train.max_iters=4",
                "--train.checkpoint_interval=0",
            ]
        )
        == 0
    )
    assert load_checkpoint(tmp_path / "runs" / "r" / "ckpt_last.pt")["step"] == 4


def test_gradient_accumulation_matches_one_big_batch(tmp_path, corpus):
    """2 micro-batches of 2 sequences give the gradient and loss of 1 batch of the same 4 sequences."""
    results = []
    for accum, batch in ((2, 2), (1, 4)):
        # float32: the two batchings sum in other orders, and under bf16 autocast (train.dtype=auto on a
        # CPU with native bf16) that alone moves the gradient far past the tolerance below.
        args = tiny_args(
            tmp_path,
            corpus,
            f"--train.grad_accum_steps={accum}",
            f"--train.batch_size={batch}",
            "--train.grad_clip=0",
            "--train.dtype=float32",
        )
        s = setup.build(parse_config(None, train.parse_args(args)[1]))
        grads = {}
        real_step = s.optimizer.step

        def capture(*a, grads=grads, s=s, real_step=real_step, **k):  # this iteration's, bound now
            grads.update({n: p.grad.clone() for n, p in s.model.named_parameters()})
            return real_step(*a, **k)

        s.optimizer.step = capture  # see the gradient AdamW receives (Adam itself is scale-invariant)
        result = step.train_step(s, lr=1e-2)
        results.append((result.loss, grads))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], rtol=1e-4, atol=1e-7)


def test_config_file_completed_by_the_command_line(tmp_path):
    """A file's value may only be valid together with a CLI override (n_head=6 needs n_embd=384)."""
    toml = tmp_path / "c.toml"
    toml.write_text("[model]\nn_head = 6\n")
    cfg = parse_config(toml, {"model": {"n_embd": 384}})
    assert (cfg.model.n_head, cfg.model.n_embd) == (6, 384)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--train.learning_rate=nan"], "must be a finite number"),
        (["--data.source="], "data.source is empty"),
        (["--train.max_iters"], "expected one argument"),
        (["--train.warmup_iters=50", "--train.lr_decay_iters=10"], "before the end of warmup"),
        (["--train.device=gpu"], "device"),
        (["--train.seed=99999999999999999999999"], r"train.seed must fit in 64 bits"),  # not torch's overflow
    ],
)
def test_more_bad_options_exit_2_with_one_line(capsys, argv, match):
    """Non-finite numbers, empty paths, argparse's own errors and bad devices are one-line errors too."""
    assert train.main(argv) == 2
    assert re.search(match, error_line(capsys))


def test_a_run_shorter_than_its_warmup_records_a_config_that_loads_again():
    """max_iters below warmup_iters: lr_decay_iters resolves to max_iters, and config.json validates again on --resume."""
    cfg = setup.resolve_new(None, {"train": {"max_iters": 20, "warmup_iters": 30}})
    assert cfg.train.lr_decay_iters == 20
    assert RunConfig.from_dict(cfg.to_dict(), "config.json") == cfg


def test_a_config_is_resolved_into_a_validated_copy():
    """with_values leaves the config it was called on unchanged, shares nothing with it, and checks the copy's values
    like a new config."""
    cfg = parse_config(None, {})
    copy = cfg.with_values(train={"out_dir": "elsewhere"})
    assert (cfg.train.out_dir, copy.train.out_dir) == (TrainConfig.out_dir, "elsewhere")
    assert copy.train.save_at is not cfg.train.save_at and copy.wandb is not cfg.wandb  # nothing shared
    with pytest.raises(UserError, match="before the end of warmup"):
        cfg.with_values(train={"warmup_iters": 50, "lr_decay_iters": 10})


def test_resume_refuses_a_hand_edited_config(tmp_path, corpus, capsys):
    """config.json edited after the fact cannot change the maths of a resumed run."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    path = tmp_path / "runs" / "r" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["train"]["learning_rate"] = 0.5
    path.write_text(json.dumps(cfg))
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.max_iters=4"]) == 2
    )
    assert "train.learning_rate=0.5" in error_line(capsys)


def test_the_final_evaluation_shows_a_progress_bar(tmp_path, corpus, capsys):
    """The whole-split final evaluation (about 40 s on the default run) draws a 'final eval' tqdm bar on stderr,
    counting its batches, before the final val loss line."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=2", "--train.final_eval_tokens=4096", "--run-name", "r")
    assert train.main(args) == 0
    out, err = capsys.readouterr()
    scored = int(re.search(r"final val loss .* on ([\d,]+) val tokens", out).group(1).replace(",", ""))
    batches = math.ceil(scored / 32 / 4)  # block_size windows, in batches of train.batch_size
    assert re.search(rf"final eval: +\d+%\|.*\| \d+/{batches} \[", err), err[-2000:]


def test_wandb_mode_follows_the_flag_then_wandbs_own_environment_variable():
    """--wandb.mode wins; left empty, WANDB_MODE decides (dryrun and run are wandb's aliases of offline and
    online); neither set is disabled; a WANDB_MODE wandb does not know is one error naming the fix."""
    from training.config import WandbConfig

    assert WandbConfig(mode="disabled").resolved_mode({"WANDB_MODE": "offline"}) == "disabled"
    assert WandbConfig().resolved_mode({"WANDB_MODE": "offline"}) == "offline"
    assert WandbConfig().resolved_mode({"WANDB_MODE": "dryrun"}) == "offline"
    assert WandbConfig().resolved_mode({"WANDB_MODE": "run"}) == "online"
    assert WandbConfig().resolved_mode({}) == "disabled"
    with pytest.raises(UserError, match="WANDB_MODE='sometimes' is not a wandb mode"):
        WandbConfig().resolved_mode({"WANDB_MODE": "sometimes"})


def test_wandb_mode_offline_in_the_environment_starts_wandb_logging(tmp_path, monkeypatch):
    """WANDB_MODE=offline with no --wandb.mode: the run logs to wandb (offline), as wandb users expect."""
    from training import runs
    from training.config import RunConfig

    started = []
    monkeypatch.setattr(runs, "WandbLogger", lambda cfg, *a: started.append(cfg.wandb.resolved_mode()) or "wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert runs.make_logger(RunConfig(), tmp_path, "r", False) == "wandb" and started == ["offline"]
    monkeypatch.delenv("WANDB_MODE")
    assert isinstance(runs.make_logger(RunConfig(), tmp_path, "r", False), runs.NullLogger)


def test_a_resume_that_wandb_refuses_leaves_the_finished_run_as_it_was(tmp_path, corpus, capsys, monkeypatch):
    """Extending a finished run with wandb that cannot start (no API key): one error line, and the run's
    summary.json, config.json and metrics.jsonl are untouched, so it still reads as finished."""
    from training import runs

    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r")) == 0
    run = tmp_path / "runs" / "r"
    before = {name: (run / name).read_bytes() for name in ("summary.json", "config.json", "metrics.jsonl")}

    def no_key(*args):
        raise RuntimeError("No API key configured")

    monkeypatch.setattr(runs, "WandbLogger", no_key)
    argv = [f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.max_iters=8"]
    assert train.main([*argv, "--wandb.mode=online"]) == 2
    assert "wandb could not start in online mode" in error_line(capsys)
    assert {name: (run / name).read_bytes() for name in before} == before


def test_eval_time_stays_out_of_tokens_per_s_when_intervals_do_not_align(tmp_path, corpus, monkeypatch):
    """Evaluations at steps that are not log steps (eval_interval 3, log_interval 4) add no time to the
    logged window's tokens/s: here each evaluation takes a (simulated) 1000 s, which would divide it by
    about a thousand."""
    import time as time_module

    from training import loop

    offset, real_clock, real_evaluate = [0.0], time_module.perf_counter, loop.Trainer.evaluate

    def slow_evaluate(self):
        real_evaluate(self)
        offset[0] += 1000.0

    monkeypatch.setattr(loop.time, "perf_counter", lambda: real_clock() + offset[0])
    monkeypatch.setattr(loop.Trainer, "evaluate", slow_evaluate)
    argv = tiny_args(
        tmp_path, corpus, "--train.max_iters=8", "--train.eval_interval=3", "--train.log_interval=4", "--run-name", "r"
    )
    assert train.main(argv) == 0
    rows = [r for r in read_metrics(tmp_path / "runs" / "r" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [4, 8] and all(r["tokens_per_s"] > 10 for r in rows)
