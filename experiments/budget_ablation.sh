#!/usr/bin/env bash
# One arm of the quick recipe's ablations at a fixed number of updates (issue 71): the
# recipe's budget schedule planned for STEPS updates (train.max_minutes far away, so the plan
# is max_steps: warmup 10% of it, linear decay to 0 at the last; train.budget_tiers emptied, so
# those far-away minutes do not choose the hour recipe), validated once, at the end;
# then val BLEU with beam 5. Val BLEU at a fixed update count does not depend on the host's
# speed, so arms run side by side (THREADS each) on a busy machine compare; the update count
# that 10 minutes buy on a host comes from timing the arms' shapes there.
#   NMTKIT_DATA=MIRROR [RECIPE=multi30k_transformer_hour] bash experiments/budget_ablation.sh \
#     NAME THREADS STEPS [--set k=v ...]        (RECIPE: a file in configs/, the quick one by default)
# Appends {"name", "summary", "val_beam5"} to runs/budget_ablation/results.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 threads=$2 steps=$3 recipe=${RECIPE:-multi30k_transformer_quick}
shift 3
work=runs/budget_ablation
mkdir -p "$work"
OMP_NUM_THREADS=$threads .venv/bin/nmtkit train "configs/$recipe.yaml" \
  --run-dir "$work/$name" --overwrite --set train.max_minutes=600 --set train.budget_tiers=[] \
  --set train.max_steps="$steps" \
  --set train.valid_every="$steps" --set train.threads="$threads" --set train.keep_last=0 "$@" \
  > "$work/$name.log" 2>&1
summary=$(grep '^{' "$work/$name.log" | tail -1)
val=$(OMP_NUM_THREADS=$threads .venv/bin/nmtkit evaluate --model "$work/$name/best.pt" --split val \
  --beam 5 2>/dev/null | tail -1)
echo "{\"name\": \"$name\", \"summary\": $summary, \"val_beam5\": $val}" >> "$work/results.jsonl"
