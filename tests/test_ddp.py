"""Multi-process training through torchrun + DistributedDataParallel, on CPU with gloo.

Run: ``python -m pytest -q tests/test_ddp.py``  (CPU, offline, ~20 s; starts real torchrun jobs).

The equivalence test is the contract: 2 ranks x batch b give the loss curve of 1 process x
batch 2b (the same global batch), within float tolerance, with gradient accumulation on.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import error_lines, loss_curve, tiny_args, write_corpus
from torch.nn.parallel import DistributedDataParallel

from model.checkpoint import load_checkpoint, load_model_state
from model.config import GPTConfig
from model.gpt import GPT
from training import ddp
from training.runs import read_metrics

REPO = Path(__file__).resolve().parent.parent


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=nproc train.py ARGS`` (one CPU thread per rank)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(REPO / "train.py"),
        *args,
    ]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def train_pair(root: Path, *extra: str) -> Path:
    """The same run twice: 2 gloo ranks x batch 2 (8 steps, then --resume to 12), and 1 process x
    batch 4 straight to 12; grad accumulation 2 in both (no dropout: its noise is per rank).
    ``extra`` flags go to both; returns the runs folder (``two-ranks``, ``one``)."""
    corpus = write_corpus(root)
    common = tiny_args(
        root,
        corpus,
        "--train.max_iters=12",
        "--train.grad_accum_steps=2",
        "--train.eval_interval=4",
        "--train.log_interval=2",
        "--train.checkpoint_interval=6",
        "--train.lr_decay_iters=12",
        # float32: the two batchings sum in other orders, which bf16 autocast (train.dtype=auto
        # on a CPU with native bf16) would turn into differences far above the tolerance below
        "--train.dtype=float32",
        *extra,
    )
    two = torchrun(2, *common, "--train.batch_size=2", "--train.max_iters=8", "--run-name", "two-ranks")
    assert two.returncode == 0, two.stderr[-3000:]
    two = torchrun(2, f"--train.out_dir={root / 'runs'}", "--run-name", "two-ranks", "--resume", "--train.max_iters=12")
    assert two.returncode == 0, two.stderr[-3000:]
    one = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *common, "--train.batch_size=4", "--run-name", "one"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert one.returncode == 0, one.stderr[-3000:]
    return root / "runs"


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    """:func:`train_pair` with AdamW."""
    return train_pair(tmp_path_factory.mktemp("ddp"))


def assert_same_losses(runs: Path) -> tuple[dict, dict]:
    """Every train and eval loss of ``runs/two-ranks`` equals ``runs/one``'s within float tolerance; returns both
    runs' final weights (``two-ranks``, ``one``)."""
    two, one = loss_curve(runs / "two-ranks"), loss_curve(runs / "one")
    assert [(kind, step) for kind, step, _ in two] == [(kind, step) for kind, step, _ in one]
    for (_, _, a), (_, _, b) in zip(two, one):
        assert [x is None for x in a] == [x is None for x in b]  # train rows have no val loss
        assert [x for x in a if x is not None] == pytest.approx([x for x in b if x is not None], rel=1e-4, abs=1e-6)
    w2, w1 = (load_checkpoint(runs / r / "ckpt_last.pt")["model"] for r in ("two-ranks", "one"))
    return w2, w1


@pytest.mark.slow
def test_two_ranks_match_one_process_with_the_same_global_batch(pair):
    """Every train and eval loss of 2 ranks x batch 2 (resumed half way) equals 1 process x batch 4
    within float tolerance, and so do the final weights."""
    w2, w1 = assert_same_losses(pair)
    for key in w1:
        torch.testing.assert_close(w2[key], w1[key], rtol=1e-3, atol=1e-5)
    # The final score covers every val window on 2 ranks too (an odd count here: none is cut).
    two, one = (json.loads((pair / r / "summary.json").read_text()) for r in ("two-ranks", "one"))
    assert two["final_val_bpb"] == pytest.approx(one["final_val_bpb"], rel=1e-5)
    assert two["final_val_tokens"] == one["final_val_tokens"]  # and says so: no window counted out


@pytest.mark.slow
def test_two_ranks_match_one_process_under_muon(tmp_path):
    """The same under train.optimizer=muon: Muon orthogonalises the all-reduced gradient, the same on every rank.

    A float32 run orthogonalises in float32, so the weights agree to float rounding (1e-4 of each tensor's norm;
    3e-6 seen over 12 steps).  In bfloat16, as torch.optim.Muon always runs it, the iteration lifts every singular
    value of the update towards 1 and a rounding difference between the two batchings moved weights by 2.6%.
    """
    w2, w1 = assert_same_losses(train_pair(tmp_path, "--train.optimizer=muon"))
    for key in w1:
        assert (w2[key] - w1[key]).norm() <= 1e-4 * w1[key].norm() + 1e-5, key


@pytest.mark.slow
def test_only_rank_0_writes_and_counts_global_tokens(pair):
    """One metrics row per step (rank 0 alone logs); tokens count the global batch; summary says 2 ranks."""
    rows = [r for r in read_metrics(pair / "two-ranks" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == list(range(2, 13, 2))
    assert rows[-1]["tokens"] == 12 * 2 * 2 * 2 * 32  # steps x accum x ranks x batch x block
    summary = json.loads((pair / "two-ranks" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["tokens"] == rows[-1]["tokens"]


@pytest.mark.slow
def test_ddp_checkpoint_is_the_unwrapped_model(pair):
    """The checkpoint has plain GPT keys (no 'module.' / '_orig_mod.') and loads into a tied GPT, still tied."""
    ckpt = load_checkpoint(pair / "two-ranks" / "ckpt_last.pt")
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in ckpt["model"])
    model = GPT(GPTConfig(**{k: v for k, v in ckpt["config"]["model"].items()}))
    load_model_state(model, ckpt)
    assert model.lm_head.weight is model.wte.weight
    assert len(ckpt["rng"]["torch_ranks"]) == 2  # each rank's dropout RNG, for an exact resume


@pytest.mark.slow
def test_resume_on_another_number_of_ranks_is_refused(pair):
    """A 2-rank run resumed by one process would change the global batch: exit 2, naming both counts."""
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            f"--train.out_dir={pair}",
            "--run-name",
            "two-ranks",
            "--resume",
            "--train.max_iters=14",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert "written by 2 rank(s), this resume has 1" in line and "torchrun" in line
    assert load_checkpoint(pair / "two-ranks" / "ckpt_last.pt")["step"] == 12


def test_a_refusal_every_rank_meets_is_printed_once(pair):
    """A one-process run resumed under torchrun on 2 ranks: each rank reads the checkpoint and refuses
    alike (exit 2), and the one-line error appears once, from rank 0, not once per rank."""
    proc = torchrun(2, f"--train.out_dir={pair}", "--run-name", "one", "--resume", "--train.max_iters=14")
    assert proc.returncode != 0
    lines = [line for line in error_lines(proc.stderr) if line.startswith("error: ")]
    assert len(lines) == 1 and "written by 1 rank(s), this resume has 2" in lines[0], proc.stderr[-3000:]
    assert load_checkpoint(pair / "one" / "ckpt_last.pt")["step"] == 12


@pytest.mark.slow
def test_errors_under_torchrun_are_printed_once(tmp_path):
    """A bad option, and a failure on rank 0 only (its data cache path is a file): every rank exits
    non-zero, the one-line error appears once, and no rank hangs."""
    corpus = write_corpus(tmp_path)
    proc = torchrun(2, *tiny_args(tmp_path, corpus, "--model.n_head=3", "--run-name", "bad"))
    assert proc.returncode != 0
    lines = [line for line in error_lines(proc.stderr) if line.startswith("error: ")]
    assert len(lines) == 1 and "n_head" in lines[0]
    # torchrun's own failure summary names the same line as the root cause (ddp.tell_launcher),
    # not a link to its docs; torchrun itself exits 1 whatever the worker's status (2 here).
    assert f"traceback : {lines[0]}" in proc.stderr and "exitcode  : 2" in proc.stderr
    (tmp_path / "afile").write_text("not a folder")
    proc = torchrun(
        2, *tiny_args(tmp_path, corpus, f"--data.cache_dir={tmp_path / 'afile' / 'cache'}", "--run-name", "b2")
    )
    assert proc.returncode != 0
    lines = [line for line in error_lines(proc.stderr) if line.startswith("error: ")]
    assert len(lines) == 1 and "afile" in lines[0], proc.stderr[-3000:]
    proc = torchrun(2, *tiny_args(tmp_path, corpus, "--model.block_size=100000", "--run-name", "b3"))
    assert proc.returncode != 0  # met by every rank after the process group started
    lines = [line for line in error_lines(proc.stderr) if line.startswith("error: ")]
    assert len(lines) == 1 and "block_size 100000 is too large" in lines[0], proc.stderr[-3000:]


def test_tied_weights_stay_one_parameter_under_ddp(tmp_path, monkeypatch):
    """Wrapped in DistributedDataParallel, the tied head is still the embedding: one Parameter, one gradient."""
    # Loopback, and a timeout: an in-process gloo group once hung here on a loaded machine.
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    wrapped = None
    try:
        model = GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=1, n_head=2, n_embd=8, tie_embeddings=True))
        wrapped = DistributedDataParallel(model)
        assert wrapped.module.lm_head.weight is wrapped.module.wte.weight
        assert sum(p is model.wte.weight for p in wrapped.parameters()) == 1
        idx = torch.randint(0, 17, (2, 8))
        _, loss = wrapped(idx, idx)
        loss.backward()
        assert model.lm_head.weight.grad is model.wte.weight.grad and model.wte.weight.grad.abs().sum() > 0
    finally:
        # The DDP reducer holds the gloo group: free it while the group is alive. Freed after
        # destroy_process_group, the group's destructor once waited forever on its threads.
        del wrapped
        gc.collect()
        dist.destroy_process_group()


def test_dist_from_env_reads_torchrun_variables(monkeypatch):
    """RANK / LOCAL_RANK / WORLD_SIZE become a Dist; nonsense is a one-line error."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ddp.from_env() == ddp.Dist(rank=3, local_rank=1, world_size=4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="not in"):
        ddp.from_env()
