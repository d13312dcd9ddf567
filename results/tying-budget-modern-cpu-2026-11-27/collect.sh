#!/bin/bash
# Copy every finished trunk of this record, with all its branches, from the worktree the runs train in
# (run.sh's header) into this repository's results/, text files only: the AdamW record's collect.sh,
# which this record's design (arms, budgets) matches, pointed at this folder.
#
#   bash results/tying-budget-modern-cpu-2026-11-27/collect.sh ../tinygpt-modern    # from the repository root
set -eu
# The worktree's experiment.json is the record its runs are noted in as they train (from 2026-11-29 on, its
# "trained"; the pinned commit writes none yet): copied every time, not only the first.
cp "${1:?give the worktree the runs train in, e.g. ../tinygpt-modern}/results/tying-budget-modern-cpu-2026-11-27/experiment.json" \
    results/tying-budget-modern-cpu-2026-11-27/experiment.json
exec bash results/tying-budget-cpu-2026-11-25/collect.sh "${1:?give the worktree the runs train in, e.g. ../tinygpt-modern}" \
    tying-budget-modern-cpu-2026-11-27
