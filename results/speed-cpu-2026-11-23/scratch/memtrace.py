"""Session 8: trace a train.py run's resident memory after every step, evaluation and checkpoint.

Wraps ``training.loop.Trainer``'s ``step``, ``evaluate``, ``save``, ``final_evaluation`` and
``write_summary`` so each call appends a line to ``/tmp/memtrace.txt``: the method, the step, and
``VmRSS`` / ``VmHWM`` (MiB) from ``/proc/self/status``.  Linux only; arguments are train.py's.

    OMP_NUM_THREADS=1 python results/speed-cpu-2026-11-23/scratch/memtrace.py --config configs/shakespeare.toml \\
        --train.out_dir=/tmp/memtest --train.sample_tokens=0 --train.eval_interval=10 --train.eval_iters=10 \\
        --train.lr_decay_iters=60 --train.warmup_iters=2 --run-name t --train.max_iters=60
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import train  # noqa: E402
import training.loop as loop  # noqa: E402


def vm() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in MiB."""
    status = Path("/proc/self/status").read_text()
    return tuple(int(re.search(key + r":\s+(\d+)", status).group(1)) // 1024 for key in ("VmRSS", "VmHWM"))


def traced(name: str, log) -> None:
    """Replace ``Trainer.<name>`` with a wrapper that logs the memory after each call."""
    method = getattr(loop.Trainer, name)

    def wrapper(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        rss, hwm = vm()
        log.write(f"{name} step={getattr(getattr(self, 'p', None), 'step', '?')} rss={rss} hwm={hwm}\n")
        log.flush()
        return result

    setattr(loop.Trainer, name, wrapper)


if __name__ == "__main__":
    out = open("/tmp/memtrace.txt", "w")
    for n in ("step", "evaluate", "save", "final_evaluation", "write_summary"):
        traced(n, out)
    sys.argv = ["train.py"] + sys.argv[1:]
    train.main()
