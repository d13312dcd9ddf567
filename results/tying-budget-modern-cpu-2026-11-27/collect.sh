#!/bin/bash
# Copy every finished trunk of this record, with all its branches, from the worktree the runs train in
# (run.sh's header) into this repository's results/, text files only: the AdamW record's collect.sh,
# which this record's design (arms, budgets) matches, pointed at this folder.
#
#   bash results/tying-budget-modern-cpu-2026-11-27/collect.sh ../tinygpt-modern    # from the repository root
set -eu
exec bash results/tying-budget-cpu-2026-11-25/collect.sh "${1:?give the worktree the runs train in, e.g. ../tinygpt-modern}" \
    tying-budget-modern-cpu-2026-11-27
