#!/bin/bash
# Copy every finished trunk of the budget experiment, with all its branches, from the worktree the
# runs train in (run.sh's header) into this repository's results/: text files only (what git keeps:
# no checkpoints, tokenizer copies or loss.png), their train-loss rows thinned by keep.py. A trunk
# is finished when each of its branches, at every budget, holds summary.json; unfinished ones stay
# behind, as their checkpoints cannot travel.
#
#   bash results/tying-budget-cpu-2026-11-25/collect.sh ../tinygpt-budget    # from the repository root
#
# A second argument names another budget record of the same design (arms tied, untied and
# tie-untie-cooldown, the same budgets), e.g. tying-budget-modern-cpu-2026-11-27.
set -eu
name="${2:-tying-budget-cpu-2026-11-25}"
src="${1:?give the worktree the runs train in, e.g. ../tinygpt-budget}/results/$name"
dst="results/$name"
budgets="0.5M 1M 2M 4M 8M 16M"
copy() { mkdir -p "$2" && tar -C "$1" --exclude='*.pt' --exclude=tokenizer.json --exclude=gpt2.tiktoken \
    --exclude=loss.png --exclude=.lock --exclude=lock.json --exclude='.*.tmp' -cf - . | tar -C "$2" -xf -; }
# experiment.json is kept, not copied: the pinned commit predates its "seeds" key (6, run.sh's --seeds 6)
[ -f "$dst/experiment.json" ] || cp "$src/experiment.json" "$dst/experiment.json"
for trunk in "$src"/trunks/*/; do
    run=$(basename "$trunk")                               # tied-lr0.001-s0, untied-lr0.002-s3, ...
    case "$run" in
        tied-*) branches="$run tie-untie-cooldown-${run#tied-}" ;;
        *) branches="$run" ;;
    esac
    finished=yes
    for b in $budgets; do for r in $branches; do
        [ -f "$src/$b/$r/summary.json" ] || finished=no
    done; done
    [ "$finished" = yes ] || continue
    [ -d "$dst/trunks/$run" ] && continue                   # collected before
    copy "$src/trunks/$run" "$dst/trunks/$run"
    for b in $budgets; do for r in $branches; do copy "$src/$b/$r" "$dst/$b/$r"; done; done
    echo "collected trunks/$run and its branches"
done
python keep.py "$dst"    # train-loss rows thinned for git (keep.py)
