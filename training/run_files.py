"""The files of a run folder, each named once here: every reader and writer of a run folder uses these names."""

CONFIG = "config.json"  # a run's resolved config, written before its first step
SUMMARY = "summary.json"  # a run's final numbers, written last: its presence means the run finished
METRICS = "metrics.jsonl"  # one JSON row per log interval, eval and resume, appended as the run goes
ENV = "env.json"  # the environment a run started in: git commit, library versions, hardware, command line
LAST_CKPT = "ckpt_last.pt"  # everything a resume needs, optimizer included
BEST_CKPT = "ckpt_best.pt"  # the weights at the best periodic val loss
