"""A run's set-up, one optimizer step and one evaluation: the arithmetic a run repeats, shared with ``bench.py``.

    result = train_step(setup, lr)          # setup: training.setup.build(cfg)
    scores = evaluate(setup, offsets)       # {"train": Score, "val": Score}
    scores["val"].loss, scores["val"].bpb

Bits per byte (bpb) is the summed loss over the scored tokens in bits divided by the UTF-8
bytes of their text: ``loss / ln 2 * tokens / bytes``.  Unlike the loss per token it compares
models with different tokenizers (the measure of nanochat and of the GPT-2/3 papers' LAMBADA-style
byte-level comparisons).  Special tokens (GPT-2's ``<|endoftext|>``) are no text: their loss counts,
their bytes are 0.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from core import hardware
from core.errors import UserError
from data.loader import TokenData
from model.gpt import GPT
from model.head_loss import slice_rows
from training import ddp
from training.config import RunConfig
from training.optim import MuonAdamW


class Score(NamedTuple):
    """The loss on a set of scored tokens, two ways."""

    loss: float  # mean cross-entropy (nats/token)
    bpb: float  # bits per UTF-8 byte of the same tokens' text (see the module docstring)


def _bpb(nll_sum: float, byte_sum: float) -> float:
    """Bits per byte from a summed loss (nats) and the bytes of its text; NaN with no bytes."""
    return nll_sum / math.log(2) / byte_sum if byte_sum > 0 else float("nan")


class StepResult(NamedTuple):
    """What one optimizer step did."""

    loss: float  # mean train loss over the micro-batches (nats/token)
    grad_norm: float  # global L2 norm of the gradient, before clipping
    applied: bool  # False when the loss or gradient was non-finite and the update was skipped


def chunked_loss(cfg: RunConfig, device: torch.device) -> bool:
    """Whether ``train.head_loss`` computes the loss without all logits on ``device``.

    'auto': chunked on a CPU when a micro-batch's logits (``batch_size * block_size * vocab_size``)
    would fill more than one slice (:func:`model.head_loss.slice_rows`) -- with one slice,
    chunking saves no memory, and its own backward cost a 65-character speedrun record's step
    0.3-5.7% in three interleaved measurements (``results/speedrun-cpu-2026-11-27/step-times``).  See
    :func:`model.head_loss.linear_cross_entropy` ('chunked') and
    :func:`model.head_loss.fused_linear_cross_entropy` ('fused'); 'logits' builds all logits first.
    """
    tc = cfg.train
    if tc.head_loss == "auto":  # the rows of a micro-batch against the rows one slice holds
        return device.type == "cpu" and tc.batch_size * cfg.model.block_size > slice_rows(cfg.model.vocab_size)
    return tc.head_loss in ("chunked", "fused")


def resolve_head_loss(cfg: RunConfig, device: torch.device) -> RunConfig:
    """``cfg`` with ``train.head_loss='auto'`` and ``train.pad_vocab_multiple=0`` resolved for ``device`` (a new config).

    So config.json says which ran.  'auto' head loss: :func:`chunked_loss` (chunked on a CPU when
    the logits are more than one slice, logits otherwise); ``cfg.model.vocab_size`` must be the
    data's.  Auto padding: 64 on CUDA (aligned matmul sizes pay there), 1 (none) elsewhere.  Raises
    :class:`UserError` for 'fused' off CUDA.
    """
    tc = cfg.train
    head_loss = ("chunked" if chunked_loss(cfg, device) else "logits") if tc.head_loss == "auto" else tc.head_loss
    if head_loss == "fused" and device.type != "cuda":
        raise UserError(f"train.head_loss='fused' runs on CUDA only, not {device.type}: choose chunked or logits")
    pad = tc.pad_vocab_multiple or (64 if device.type == "cuda" else 1)
    return cfg.with_values(train={"head_loss": head_loss, "pad_vocab_multiple": pad})


@dataclass
class Setup:
    """Everything a training step needs, built from a config by :func:`build`."""

    device: torch.device
    amp_dtype: torch.dtype | None
    data: TokenData
    tokenizer: object
    model: GPT  # the plain module: its state_dict is what checkpoints hold
    eval_model: torch.nn.Module  # `model`, or its torch.compile wrapper
    step_model: torch.nn.Module  # `eval_model`, wrapped in DistributedDataParallel under torchrun
    optimizer: torch.optim.Optimizer | MuonAdamW  # train.optimizer: AdamW, or Muon with AdamW (training.optim)
    data_gen: torch.Generator  # the data order (the same on every rank); its state is the data position
    dist: ddp.Dist
    cfg: RunConfig  # the config as resolved for this device and data: what config.json records

    def untie(self, cfg: RunConfig) -> None:
        """Tie-then-untie: ``lm_head`` gets its own copy of the matrix and of its AdamW moments.

        The copy joins the optimizer (AdamW's part under Muon: a head is an embedding) as its own
        group (at ``train.head_lr_scale``), so from here the head and the embedding train apart; the model is wrapped anew for
        ``torch.compile`` / DDP, whose wrappers know the old parameters.
        """
        tied = self.model.wte.weight
        group = next(g for g in self.optimizer.param_groups if any(p is tied for p in g["params"]))
        head = self.model.untie()
        self.optimizer.add_param_group(
            {"params": [head], "weight_decay": group["weight_decay"], "lr_scale": cfg.train.head_lr_scale}
        )
        if tied in self.optimizer.state:
            self.optimizer.state[head] = {k: v.clone() for k, v in self.optimizer.state[tied].items()}
        self.eval_model, self.step_model = wrap(self.model, cfg, self.device, self.dist)


def wrap(model: GPT, cfg: RunConfig, device: torch.device, dist: ddp.Dist) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(eval_model, step_model)``: ``model`` compiled if ``train.compile``, and that wrapped in DDP under torchrun.

    Checkpoints always save the uncompiled ``model``'s state dict; the tied head stays one
    Parameter inside DDP.
    """
    eval_model = torch.compile(model) if cfg.train.compile else model
    if not dist.enabled:
        return eval_model, eval_model
    return eval_model, DistributedDataParallel(eval_model, device_ids=[device.index] if device.type == "cuda" else None)


def train_step(setup: Setup, lr: float) -> StepResult:
    """One optimizer step over ``grad_accum_steps`` micro-batches.

    Sets the learning rate, accumulates gradients (each micro-batch's loss scaled by
    1/grad_accum_steps so the sum is the mean), clips the global norm, steps the optimizer
    (AdamW, or Muon and AdamW: :mod:`training.optim`) and frees the gradients.  A non-finite
    loss or gradient norm is never applied: the gradients are dropped, the weights and the
    optimizer's moments stay as they were, and the result
    says ``applied=False`` (the caller stops or counts the skip).  The data position moves
    on either way.  Shared with ``bench.py`` so the benchmark times exactly this.

    Under DDP (``model`` wrapped, ``dist.enabled``) each rank reads its slice of the global
    batch, gradients are all-reduced once per step (``no_sync`` on all but the last
    micro-batch), and the returned loss is the mean over ranks, so every rank takes the same
    skip decision.
    """
    model, optimizer, cfg, device, dist = setup.step_model, setup.optimizer, setup.cfg, setup.device, setup.dist
    tc = cfg.train
    for group in optimizer.param_groups:
        # Embedding / head groups may run at their own multiple, Muon's at muon_learning_rate / learning_rate.
        group["lr"] = lr * group.get("lr_scale", 1.0)
    loss_sum, return_logits = 0.0, not chunked_loss(cfg, device)
    for micro in range(tc.grad_accum_steps):
        x, y = setup.data.get_batch(
            "train",
            tc.batch_size,
            cfg.model.block_size,
            setup.data_gen,
            device,
            rank=dist.rank,
            world_size=dist.world_size,
        )  # (B, T): this rank's rows of the global batch
        # All-reducing every micro-batch's gradients would be wasted bandwidth: only the sum counts.
        last = micro == tc.grad_accum_steps - 1
        with model.no_sync() if dist.enabled and not last else contextlib.nullcontext():
            with hardware.autocast(device, setup.amp_dtype):
                _, loss = model(x, y, return_logits=return_logits)
            (loss / tc.grad_accum_steps).backward()
        loss_sum += loss.item()
    # With clipping off, an infinite max_norm still returns the norm (and scales by exactly 1).
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip or math.inf).item()
    loss = ddp.mean(loss_sum / tc.grad_accum_steps, dist, device)
    applied = math.isfinite(loss) and math.isfinite(grad_norm)
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss, grad_norm, applied)


def _score(model, data: TokenData, split: str, batches, cfg: RunConfig, device, amp_dtype, dist: ddp.Dist) -> Score:
    """Loss and bits per byte over this rank's ``batches`` (offset tensors for :meth:`TokenData.batch_at`).

    Summed losses, tokens and bytes are averaged over ranks, so the ratios are those of every
    rank's batches together.
    """
    token_bytes = data.token_bytes(device)
    nll, tokens, nbytes, return_logits = 0.0, 0, 0, not chunked_loss(cfg, device)
    for offsets in batches:
        x, y = data.batch_at(split, offsets, cfg.model.block_size, device)  # (rows, T) each
        with hardware.autocast(device, amp_dtype):
            _, loss = model(x, y, return_logits=return_logits)
        nll += loss.item() * y.numel()
        tokens += y.numel()
        nbytes += int(token_bytes[y].sum())
    nll, tokens, nbytes = (ddp.mean(float(v), dist, device) for v in (nll, tokens, nbytes))
    return Score(nll / tokens, _bpb(nll, nbytes))


@torch.no_grad()
def evaluate(setup: Setup, offsets: dict) -> dict[str, Score]:
    """Mean loss and bits per byte per split over the fixed batches ``offsets[split]`` ``(eval_iters, world_size * B)``.

    Each rank evaluates its ``B`` columns of every batch.
    """
    model, dist, B = setup.eval_model, setup.dist, setup.cfg.train.batch_size
    model.eval()
    out = {
        split: _score(
            model=model,
            data=setup.data,
            split=split,
            batches=split_offsets[:, dist.rank * B : (dist.rank + 1) * B],
            cfg=setup.cfg,
            device=setup.device,
            amp_dtype=setup.amp_dtype,
            dist=dist,
        )
        for split, split_offsets in offsets.items()
    }
    model.train()
    return out


@torch.no_grad()
def evaluate_windows(
    model,
    data: TokenData,
    positions: torch.Tensor,
    cfg: RunConfig,
    device,
    amp_dtype,
    dist: ddp.Dist = ddp.SINGLE,
    progress: bool = False,
) -> Score:
    """Mean val loss (nats/token) and bits per byte over the val windows at ``positions`` ``(N,)``: a run's final score.

    The windows are dealt out round-robin, every one of them (a rank may score one more than
    another: :func:`_score` sums before it divides, so the ratios are those of all windows, as
    on one process).  With fewer windows than ranks, every rank scores all of them.
    ``progress`` shows a tqdm bar on stderr (the whole val split takes about 40 s on the
    default run), redrawn as rarely as the training bar when stderr is not a terminal.
    """
    model.eval()
    if len(positions) >= dist.world_size:
        kept = positions[dist.rank :: dist.world_size]
    else:  # fewer windows than ranks: every rank scores them all (the mean over ranks is then the same)
        kept = positions
    batches = kept.split(cfg.train.batch_size)
    with tqdm(
        batches,
        desc="final eval",
        unit="batch",
        leave=False,
        disable=not progress,
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 30.0,
    ) as bar:
        score = _score(
            model=model, data=data, split="val", batches=bar, cfg=cfg, device=device, amp_dtype=amp_dtype, dist=dist
        )
    model.train()
    return score
