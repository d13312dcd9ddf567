"""nanoGPT's char recipes, whole runs side by side: tinygpt against nanoGPT, interleaved, on a CPU or a GPU.

    python data/shakespeare_char/prepare.py                        # once, inside the nanoGPT checkout
    python benchmarks/nanogpt_char.py --nanogpt ../nanoGPT          # from this repository's root
    python benchmarks/nanogpt_char.py --nanogpt ../nanoGPT --rounds 3 --tinygpt-arg=--train.loss_plot=false
    python benchmarks/nanogpt_char.py --nanogpt ../nanoGPT --recipe gpu --rounds 1    # one CUDA GPU

Each round trains nanoGPT's README command for a CPU (``config/train_shakespeare_char.py`` with
``--device=cpu --compile=False``, 4 layers, n_embd 128, block 64, batch 12, 2000 steps), then
``python train.py --config configs/shakespeare_char_cpu.toml`` (the same recipe), each as a whole
process: imports, data, training, evaluations and checkpoints.  ``--recipe gpu`` races nanoGPT's
README command for a GPU instead (``config/train_shakespeare_char.py`` as it is: 6 layers, n_embd 384,
block 256, batch 64, dropout 0.2, 5000 steps, compiled, bf16 autocast where the GPU has it) against
``configs/shakespeare_char.toml`` with ``--train.compile=true`` (the same recipe, compiled as nanoGPT
compiles).  Rounds alternate the programs, every other round in reverse order, so that a shared
machine's slow minutes and a place in the order fall on all.  For
each program it prints, as a Markdown table, the wall time of every round, the median, nanoGPT's
median over this one, the seconds until a periodic val loss first reached the recipe's target (1.88
on the CPU, the speedrun's target; 1.4697 on the GPU, nanoGPT's published result), the val loss
both print at the last step, and the peak resident memory (the child's ``ru_maxrss``, what
``/usr/bin/time -v`` reports).  Logs and tinygpt's run folders go to ``--out``.  Linux and macOS
(``os.wait4``).

With ``--record CONFIG`` another program joins each round: ``train.py --config CONFIG``, a speedrun
record's recipe (``results/speedrun-cpu-2026-11-27/``); repeat it to race several records at once.  Each program's output is read as it is
written (unbuffered), and every evaluation line is stamped with the seconds since its process
started: ``race.json`` in ``--out`` keeps every round's (seconds, step, val loss), rewritten after
each program so that a race cut short keeps what finished, and ``val_loss_vs_seconds.png`` draws
them, one colour a program.  A program that fails is reported (its log says why) and the race goes
on without that round of it; the exit status is then 1.

Nothing else should run on the machine meanwhile: quote the medians and their ratio, and say on
which CPU or GPU (``results/speed-cpu-2026-11-24/README.md`` is such a record).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NANOGPT_CPU_ARGS = (
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--max_iters=2000",
    "--lr_decay_iters=2000",
    "--dropout=0.0",
)


@dataclass(frozen=True)
class Recipe:
    """One of nanoGPT's shakespeare_char recipes as each program runs it, and the val loss the race times."""

    nanogpt_args: tuple[str, ...]  # after nanoGPT's train.py
    tinygpt_config: str  # tinygpt's config file for the same recipe
    tinygpt_args: tuple[str, ...]  # train.py arguments every tinygpt program (records too) gets
    target: float  # val loss: the table's seconds-to column and the figure's dotted line


RECIPES = {
    # nanoGPT's README command for a CPU; 1.88 is the speedrun's target (nanoGPT ends at 1.8857).
    "cpu": Recipe(NANOGPT_CPU_ARGS, "configs/shakespeare_char_cpu.toml", (), 1.88),
    # nanoGPT's README command for a GPU, unchanged (compile=True is nanoGPT's default, so tinygpt compiles
    # too); 1.4697 is the best val loss nanoGPT's README reports for it.
    "gpu": Recipe(
        ("config/train_shakespeare_char.py",), "configs/shakespeare_char.toml", ("--train.compile=true",), 1.4697
    ),
}
# Both programs print the periodic evaluation in this form: "step 2000: train loss 1.7648, val loss 1.8857".
EVAL_LINE = re.compile(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)")


@dataclass
class Program:
    """One side of the comparison: its command, its working folder, and what each round measured."""

    name: str
    argv: list[str]
    cwd: Path
    key: str = ""  # the stem of its log and run folder names; the name's first word when empty
    wall_s: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)
    val_loss: float | None = None
    curves: list[list[tuple[float, int, float]]] = field(default_factory=list)  # per round: (s, step, val loss)
    failed: list[int] = field(default_factory=list)  # the rounds in which it exited with an error

    def __post_init__(self) -> None:
        self.key = self.key or self.name.split()[0]


def record_label(path: Path) -> str:
    """A record config's name in the table: its file name, under its folder's name when the file is
    ``record.toml`` (each row's folder may keep the record it set under that one name)."""
    return f"{path.parent.name}/{path.name}" if path.name == "record.toml" else path.stem


def last_val_loss(text: str) -> float | None:
    """The val loss of the last ``step N: train loss x, val loss y`` line in ``text``; None if there is none."""
    found = EVAL_LINE.findall(text)
    return float(found[-1][1]) if found else None


def run_once(argv: list[str], cwd: Path, log: Path) -> tuple[float, float, str, list[tuple[float, int, float]]]:
    """Run ``argv`` in ``cwd`` to the end, output to ``log``: (wall seconds, peak RSS in MiB, the output, and
    each evaluation line's (seconds since the start, step, val loss) as it was printed).

    The child runs with ``PYTHONUNBUFFERED=1`` so that its lines arrive when printed.  Raises RuntimeError if
    the program exits with an error (its log says why).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    curve, lines = [], []
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        for raw in proc.stdout:  # bytes split at \n only: a progress bar's \r redraws stay as they were printed
            line = raw.decode("utf-8", errors="replace")
            out.write(line)
            lines.append(line)
            for step, loss in EVAL_LINE.findall(line):
                curve.append((time.perf_counter() - start, int(step), float(loss)))
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}: see {log}")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return wall, usage.ru_maxrss * scale / 2**20, "".join(lines), curve


def figure(programs: list[Program], path: Path, target: float) -> None:
    """``path``: every round's val loss against the seconds since its process started, one colour a program,
    and ``target`` as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for colour, p in zip(("tab:grey", "tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple"), programs):
        for i, curve in enumerate(p.curves):
            ax.plot(
                [c[0] for c in curve], [c[2] for c in curve], color=colour, alpha=0.8, label=p.name if i == 0 else None
            )
    ax.axhline(target, color="black", linestyle=":", linewidth=1, label=f"val loss {target}")
    ax.set(xlabel="wall seconds since the process started", ylabel="val loss (each program's periodic estimate)")
    ax.set_ylim(top=2.6)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def seconds_to(curve: list[tuple[float, int, float]], target: float) -> float | None:
    """Seconds since the process started at the first periodic val loss at or below ``target``; None if none was.

    Read at the evaluation lines as printed (no interpolation between them), so it includes the
    evaluations and checkpoints before that line, as a whole run's wall time does.
    """
    return next((seconds for seconds, _, loss in curve if loss <= target), None)


def table(programs: list[Program], target: float) -> str:
    """The comparison as Markdown: rounds, median wall time, the reference's median over each, seconds to
    ``target``, loss, memory.

    The first program is the reference (its ratio is 1.00x); higher ratios mean faster than it.  A
    failed round is listed after the finished ones and left out of the median; a program with no
    finished round has no median.
    """
    finished = programs[0].wall_s
    reference = statistics.median(finished) if finished else None
    lines = [
        f"| program | wall s, each round | median | first's median ÷ this | s to val loss ≤ {target}, each round "
        "| val loss, last step | peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in programs:
        median = statistics.median(p.wall_s) if p.wall_s else None
        ratio = f"{reference / median:.2f}×" if reference and median else "n/a"
        walls = [f"{w:.2f}" for w in p.wall_s] + [f"failed (round {i})" for i in p.failed]
        reached = [seconds_to(c, target) for c in p.curves]
        to = " / ".join("never" if r is None else f"{r:.1f}" for r in reached) or "n/a"
        loss = f"{p.val_loss:.4f}" if p.val_loss is not None else "n/a"
        rss = " / ".join(f"{m:.1f}" for m in p.peak_mib)
        lines.append(
            f"| {p.name} | {' / '.join(walls)} | {f'{median:.1f}' if median else 'n/a'} | {ratio} | {to} | "
            f"{loss} | {rss} MiB |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """The command line: the nanoGPT checkout, rounds, output folder, a record's config, extra train.py arguments."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--nanogpt",
        type=Path,
        required=True,
        help="a nanoGPT checkout whose data/shakespeare_char/ is prepared (its prepare.py)",
    )
    p.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="cpu",
        help="nanoGPT's CPU recipe (4 layers, 2000 steps; default) or its GPU recipe (6 layers, 5000 steps, "
        "compiled; needs a CUDA GPU)",
    )
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of each program (default 2)")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/nanogpt-char"),
        help="folder for the logs and tinygpt's run folders (default runs/nanogpt-char)",
    )
    p.add_argument(
        "--record",
        type=Path,
        action="append",
        default=[],
        help="a speedrun record's config: train.py --config RECORD runs in every round, after the others "
        "(repeatable: one program a record)",
    )
    p.add_argument(
        "--tinygpt-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra train.py argument, e.g. --tinygpt-arg=--train.dtype=float32 (repeatable)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: interleaved rounds, then the table on stdout; returns the exit status."""
    args = _parser().parse_args(argv)
    if not (args.nanogpt / "data" / "shakespeare_char" / "train.bin").is_file():
        print(
            f"error: {args.nanogpt} has no data/shakespeare_char/train.bin: run "
            "python data/shakespeare_char/prepare.py inside that nanoGPT checkout first",
            file=sys.stderr,
        )
        return 2
    for path in args.record:
        if not path.is_file():
            print(f"error: --record {path}: no such config file; give a config's path", file=sys.stderr)
            return 2
    labels = [record_label(path) for path in args.record]
    if len(set(labels)) < len(labels):
        print(f"error: --record: two configs share the label {labels}; give each record once", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"error: --rounds must be >= 1, got {args.rounds}", file=sys.stderr)
        return 2
    # tinygpt trains on the very file nanoGPT's prepare.py downloaded, so the race needs no network of its own.
    prepared = args.nanogpt / "data" / "shakespeare_char" / "input.txt"
    if prepared.is_file():
        os.environ.setdefault("TINYSHAKESPEARE_PATH", str(prepared.resolve()))
    recipe = RECIPES[args.recipe]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    nano = Program("nanoGPT", [sys.executable, "train.py", *recipe.nanogpt_args], args.nanogpt)
    tiny_args = ["--config", recipe.tinygpt_config, f"--train.out_dir={out / 'runs'}", *recipe.tinygpt_args]
    tiny = Program("tinygpt", [sys.executable, "train.py", *tiny_args, *args.tinygpt_arg], REPO)
    programs = [nano, tiny]
    for k, (path, label) in enumerate(zip(args.record, labels), 1):
        record = [*tiny.argv[:2], "--config", str(path), *tiny.argv[4:]]
        programs.append(Program(f"record ({label})", record, REPO, key=f"record{k}" if len(labels) > 1 else "record"))
    setup = race_setup(args.nanogpt, args.tinygpt_arg)
    for i in range(1, args.rounds + 1):
        # Every other round in reverse order, as bench.py --arms-file: a place in the order (the first process's
        # cold caches, the previous one's memory) falls on every program alike.
        for prog in programs if i % 2 else programs[::-1]:
            race_one(
                prog,
                i,
                out,
                extra=["--run-name", f"{prog.key}-round-{i}-{time.strftime('%H%M%S')}"] * (prog is not nano),
            )
            write_race(out / "race.json", args.recipe, programs, setup)
    print(table(programs, recipe.target))
    figure(programs, out / "val_loss_vs_seconds.png", recipe.target)
    return 1 if any(p.failed for p in programs) else 0


def race_setup(nanogpt: Path, tinygpt_args: list[str]) -> dict:
    """What a race's numbers depend on beyond the recipe: threads, nanoGPT's commit, tinygpt's extra arguments.

    nanoGPT trains in float32 on a CPU whatever the CPU has; tinygpt's ``train.dtype=auto`` picks bfloat16
    where the CPU has native bf16 (its run folders' ``env.json`` and ``config.json`` say which ran), unless
    ``--tinygpt-arg=--train.dtype=float32`` is among the arguments recorded here.
    """
    try:
        commit = subprocess.run(
            ["git", "-C", str(nanogpt), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "nanogpt_commit": commit or None,
        "tinygpt_args": list(tinygpt_args),
    }


def write_race(path: Path, recipe: str, programs: list[Program], setup: dict | None = None) -> None:
    """``path``: the recipe's name and target, what the race ran on (:func:`race_setup`), and each program's
    wall times, peak memory, curves and failed rounds."""
    runs = {
        p.name: {"wall_s": p.wall_s, "peak_mib": p.peak_mib, "curves": p.curves, "failed": p.failed} for p in programs
    }
    race = {"recipe": recipe, "target": RECIPES[recipe].target, "setup": setup or {}, "programs": runs}
    path.write_text(json.dumps(race))


def race_one(prog: Program, round_no: int, out: Path, extra: list[str]) -> None:
    """Run one round of ``prog`` (its log ``out/KEY-ROUND.log``) and keep what it measured, or note that it failed."""
    log = out / f"{prog.key}-{round_no}.log"
    try:
        wall, peak, text, curve = run_once([*prog.argv, *extra], prog.cwd, log)
    except RuntimeError as error:
        prog.failed.append(round_no)
        print(f"round {round_no}: {prog.name} failed: {error}", flush=True)
        return
    prog.wall_s.append(wall)
    prog.peak_mib.append(peak)
    prog.curves.append(curve)
    prog.val_loss = last_val_loss(text)
    print(f"round {round_no}: {prog.name} {wall:.2f} s, peak {peak:.1f} MiB, val loss {prog.val_loss}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
