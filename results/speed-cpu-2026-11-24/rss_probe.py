"""Scratch probe (session 9): the char recipe's peak RSS with parts of the end of a run switched off.

Runs train.py in-process with, by environment variable, the loss.png drawing removed (NO_PLOT=1),
glibc's keep-freed-memory setting left off (NO_MALLOPT=1), or the periodic redraw off and
``malloc_trim(0)`` before the final drawing (TRIM=1, printing VmRSS around it).  From the repo root:

    /usr/bin/time -v env NO_PLOT=1 python results/speed-cpu-2026-11-24/rss_probe.py \
        --config configs/shakespeare_char_cpu.toml --run-name p --train.out_dir=/tmp/rssruns \
        --train.max_iters=300 --train.lr_decay_iters=300 --train.eval_interval=100
"""

import ctypes
import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import core.hardware as hardware  # noqa: E402
import training.loop as loop  # noqa: E402
import training.runs as runs  # noqa: E402


def vm_rss_mib() -> int:
    """This process's resident set now, MiB (``/proc/self/status``)."""
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024


if os.environ.get("NO_MALLOPT"):
    hardware.keep_freed_memory_on_cpu = lambda: False
if os.environ.get("NO_PLOT"):
    runs.write_loss_plot = lambda *a, **k: None
if os.environ.get("TRIM"):
    loop.PLOT_EVERY_S = 1e9
    draw = runs.write_loss_plot

    def trimmed(*a, **k):
        print("VmRSS before the final plot", vm_rss_mib(), file=sys.stderr)
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        print("VmRSS after malloc_trim", vm_rss_mib(), file=sys.stderr)
        out = draw(*a, **k)
        print("VmRSS after the plot", vm_rss_mib(), file=sys.stderr)
        return out

    runs.write_loss_plot = trimmed

import train  # noqa: E402

if __name__ == "__main__":
    sys.exit(train.main(sys.argv[1:]))
