"""Multi-process training plumbing for ``train.py``, on PyTorch's own stack (torchrun + DDP).

``torchrun`` starts one process per GPU (or CPU worker) and sets ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE``; :func:`from_env` reads them and :func:`init` joins the process group (NCCL on
CUDA, gloo on CPU).  Run without torchrun, everything here is a no-op for a single process::

    torchrun --standalone --nproc_per_node=8 train.py --config configs/fineweb_edu_gpt2.toml
    torchrun --standalone --nproc_per_node=2 train.py --train.device=cpu ...   # gloo, for tests

Division of labour (nanoGPT / nanochat conventions):

- every rank builds the same model from the same seed (DDP also broadcasts rank 0's weights);
- the data order is one global stream: each micro-step draws ``world_size * batch_size`` window
  starts and rank r reads rows ``[r*B, (r+1)*B)`` (``TokenData.get_batch(rank=, world_size=)``),
  so N ranks x batch B see exactly the sequences of 1 process x batch N*B, and the data
  position (one generator state) is the same on every rank; dropout noise is seeded per rank;
- rank 0 alone prepares the data cache, owns the run folder (lock, metrics, checkpoints, wandb)
  and prints; the others follow its outcome through :func:`on_main`, so an error on rank 0 stops
  every rank at once, and is printed once.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from core.errors import UserError


class FollowerError(UserError):
    """The error rank 0 reported, re-raised on the other ranks so that all stop together.

    Only rank 0 prints it: the other ranks exit with the same status, silently.
    """


@dataclass(frozen=True)
class Dist:
    """This process's place in the job: ``rank`` of ``world_size``, ``local_rank`` on its node."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        """True when more than one process trains (torchrun with nproc > 1)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that writes files and prints."""
        return self.rank == 0


SINGLE = Dist()


def from_env() -> Dist:
    """The :class:`Dist` that torchrun's ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` describe.

    Raises :class:`UserError` when they are malformed (a hand-set environment).
    """
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise UserError("RANK, LOCAL_RANK and WORLD_SIZE must be integers: launch with torchrun") from None
    if not (world >= 1 and 0 <= rank < world and local >= 0):
        raise UserError(f"RANK={rank} is not in [0, WORLD_SIZE={world}): launch with torchrun")
    return Dist(rank, local, world)


def init(d: Dist, device_name: str) -> torch.device | None:
    """Join the process group when ``d.enabled``; returns this rank's device (None if not distributed).

    CUDA (``train.device`` auto/cuda with GPUs present): device ``cuda:LOCAL_RANK``, NCCL.
    Otherwise the CPU with gloo.  Raises :class:`UserError` for a device torchrun cannot split
    (``cuda:N``, ``mps``) or more local ranks than GPUs.
    """
    if not d.enabled:
        return None
    if device_name.startswith("cuda:") or device_name == "mps":
        raise UserError(
            f"train.device={device_name} cannot be shared by {d.world_size} ranks: "
            "use auto, cuda (each rank takes cuda:LOCAL_RANK) or cpu"
        )
    use_cuda = device_name in ("auto", "cuda") and torch.cuda.is_available()
    if device_name == "cuda" and not use_cuda:
        raise UserError("train.device=cuda but no CUDA GPU is visible: use --train.device=cpu")
    if use_cuda:
        if d.local_rank >= torch.cuda.device_count():
            raise UserError(
                f"LOCAL_RANK {d.local_rank} has no GPU ({torch.cuda.device_count()} visible): lower --nproc_per_node"
            )
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=datetime.timedelta(minutes=30))
    return device


def joined() -> bool:
    """True once this process is in a process group (torchrun with more than one rank)."""
    return dist.is_available() and dist.is_initialized()


def tell_launcher(message: str) -> None:
    """Hand ``message`` (the one ``error:`` line) to torchrun, so that its failure summary shows it.

    torchrun gives every worker an error file (``$TORCHELASTIC_ERROR_FILE``) and prints the file's
    ``message`` as the failed rank's "traceback" line; with none it prints a link to the
    elastic docs instead.  The string form of the message is the one torchrun prints as it is
    (``torch.distributed.elastic.multiprocessing.errors.ProcessFailure``).  torchrun still
    prints its own ``ChildFailedError`` summary and exits 1 whenever a worker exits non-zero:
    that cannot be changed from inside a worker.  Without torchrun this does nothing.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"message": message, "timestamp": int(time.time())}, f)
    except OSError:
        pass  # the summary then shows torchrun's link instead: nothing is lost


def shutdown() -> None:
    """Leave the process group (if joined); safe to call more than once."""
    if joined():
        dist.destroy_process_group()
    _PATIENT.clear()


def mean(value: float, d: Dist, device: torch.device) -> float:
    """The mean of ``value`` over all ranks (``value`` itself on one process)."""
    if not d.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)  # SUM: gloo has no AVG
    return t.item() / d.world_size


def any_rank(flag: bool, d: Dist, device: torch.device) -> bool:
    """True if ``flag`` is true on any rank: a stop request seen by one rank stops them all at once."""
    if not d.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def gather(obj, d: Dist) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (``[obj]`` on one process)."""
    if not d.enabled:
        return [obj]
    out = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


def on_main(fn, d: Dist):
    """Run ``fn()`` on rank 0 only; every rank returns its result, or raises if it raised.

    For the steps with one writer (the data cache, the run folder and its lock, checkpoints,
    metrics rows).  Rank 0 broadcasts its outcome -- the result, or the error's message -- and
    every other rank returns the same result or raises :class:`FollowerError`, so no rank is
    left waiting in a collective for a peer that quit.  Rank 0 re-raises its own exception,
    whatever its kind (a full disk's ``OSError``, a hub error, Ctrl-C).  The wait uses a gloo
    group without a practical deadline: preparing a large corpus may take rank 0 hours.
    """
    if not d.enabled:
        return fn()
    outcome, raised = [None, None], None
    if d.is_main:
        try:
            outcome[1] = fn()
        except BaseException as e:  # noqa: BLE001 -- told to the peers, then re-raised below
            raised = e
            outcome[0] = str(e) or type(e).__name__
    dist.broadcast_object_list(outcome, src=0, group=_patient_group())
    if raised is not None:
        raise raised
    if outcome[0] is not None:
        raise FollowerError(outcome[0])
    return outcome[1]


def on_every_rank(fn, d: Dist):
    """Run ``fn()`` on every rank, then agree on the outcome; returns this rank's result.

    For checks every rank makes alike on its own copy (``block_size`` against the data, a
    checkpoint's fitness for resuming): ``fn`` must not enter a collective.  If any rank
    raised, all stop together and rank 0 alone tells it: its own exception if it raised,
    else a :class:`UserError` naming the first rank that did (``[rank k] ...``); every
    other rank raises :class:`FollowerError`, silently -- a failure every rank met is
    printed once, not once per rank.
    """
    if not d.enabled:
        return fn()
    result, raised = None, None
    try:
        result = fn()
    except BaseException as e:  # noqa: BLE001 -- told to the peers, then raised below
        raised = e
    messages: list = [None] * d.world_size
    dist.all_gather_object(
        messages, None if raised is None else str(raised) or type(raised).__name__, group=_patient_group()
    )
    failed = [(rank, m) for rank, m in enumerate(messages) if m is not None]
    if not failed:
        return result
    rank, message = failed[0]
    if d.is_main:
        if raised is not None:
            raise raised
        raise UserError(f"[rank {rank}] {message}")
    raise FollowerError(message)


_PATIENT: list = []  # the process's patient group, created on first use


def _patient_group():
    """A gloo group over all ranks with a one-week timeout, for waits on rank 0's one-writer steps."""
    if not _PATIENT:
        _PATIENT.append(dist.new_group(backend="gloo", timeout=datetime.timedelta(days=7)))
    return _PATIENT[0]
