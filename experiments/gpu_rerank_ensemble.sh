#!/bin/bash
# An ensemble reranked by models of the other direction, trained side by side in one call of
# the device tool (issue 17's en->de goal). The two directions' runs share the GPU for the
# same minutes; then the forward ensemble's candidates are read back by the reverse models
# (`nmtkit translate --rerank`: log P(y|x) + w * log P(x|y) per token, with the reverse
# models' probabilities averaged), every choice made on the validation split:
#
# 1. seeds FWD of CONFIG in SRC->TGT, seeds REV in TGT->SRC and seeds R2L in SRC->TGT written
#    right to left (data.reverse_target), all at once (train.threads THREADS each), each for
#    MINUTES minutes of its budget schedule; nvidia-smi every 15 s;
# 2. `nmtkit tune` on VALID of the ensemble of the forward runs' best.pt: beam 5, the length
#    penalties PENALTIES, without reranking and with RERANK candidates reranked by the
#    reverse runs' best.pt (and the R2L runs', --r2l-model) at the default weights (one
#    search for all the weights);
# 3. TEST with the recipe's own decoding (the ensemble, beam 5, its length penalty) and with
#    tune's choice: scored once, choosing nothing;
# 4. each run's best.pt alone on VALID and TEST, and the ensemble on VALID (what the ensemble
#    and the reranking add); experiments/rerank_ensemble_report.py makes the ablation JSON.
#
# A call can be one of several: a run that an earlier call trained to its end in the same
# WORK (it left WORK/NAME.done) is kept, not trained again, and STAGE=train stops after step
# 1. So a host that trains two runs at a time in one working session trains the members of a
# plan fixed in advance over several calls (each STAGE=train), then one call decodes them all.
# A run that an earlier call left without NAME.done but with its WORK/NAME/last.pt (the call
# was cut short) goes on from there (`nmtkit train --resume`: its budget plan, data position
# and random state as they were); one without last.pt is trained from the start.
#
# Under OUT (seven files: the device tool returns eight at most): env.txt, log.txt (every
# command, then its stderr), smi.txt, tune.json, eval_ensemble_test.json and
# eval_chosen_test.json (`nmtkit evaluate`'s JSON), work.tgz (the runs' logs, metrics and the
# JSON of step 4, no checkpoint; made after training and after step 4). Steps are
# in the order of their worth, so a call cut short by its limit still returns the most.
#
#   NMTKIT_DATA=... bash experiments/gpu_rerank_ensemble.sh OUT WORK CONFIG [--set KEY=VALUE ...]
#
# The --set options go to every run (both directions). Environment (defaults): SRC (en),
# TGT (de), FWD ("1 2 3 4"), REV ("1 2"; "" for none), R2L ("": none), MINUTES (7), THREADS
# (2), PENALTIES ("0.6 1.0"), RERANK (20), METRIC (bleu_lc_tok), VALID (val), TEST
# (test_2016_flickr), DEVICE (cuda: where decoding runs; cpu for a dry run, or for a run on a
# CPU with THREADS 1), BATCH (512 sentences per decoding batch), STAGE (all; train: train
# only), JOBS (step 4's decodes at a time: 32; on a CPU its cores / THREADS, each with
# THREADS threads), PY (python3).
set -u
OUT=${1:?usage: gpu_rerank_ensemble.sh OUT WORK CONFIG [--set KEY=VALUE ...]}
WORK=${2:?usage: gpu_rerank_ensemble.sh OUT WORK CONFIG [--set KEY=VALUE ...]}
CONFIG=${3:?usage: gpu_rerank_ensemble.sh OUT WORK CONFIG [--set KEY=VALUE ...]}
shift 3
SRC=${SRC:-en} TGT=${TGT:-de} FWD=${FWD:-1 2 3 4} REV=${REV-1 2} R2L=${R2L:-} MINUTES=${MINUTES:-7}
THREADS=${THREADS:-2} PENALTIES=${PENALTIES:-0.6 1.0} RERANK=${RERANK:-20}
METRIC=${METRIC:-bleu_lc_tok} VALID=${VALID:-val} TEST=${TEST:-test_2016_flickr}
DEVICE=${DEVICE:-cuda} BATCH=${BATCH:-512} STAGE=${STAGE:-all}
if [ "$DEVICE" = cpu ]; then JOBS=${JOBS:-$(( $(nproc) / THREADS ))}; else JOBS=${JOBS:-32}; fi
[ "$JOBS" -ge 1 ] || JOBS=1
case $STAGE in all | train) ;; *) echo "STAGE must be all or train, not '$STAGE'" >&2; exit 2 ;; esac
mkdir -p "$OUT" "$WORK"
source "$(dirname "$0")/gpu_env.sh"  # wheels, PYTHONPATH, OUT/env.txt
LOG=$OUT/log.txt

nmtkit() {  # nmtkit ARGS...: one command, said in the log, its stderr there too
  echo "+ nmtkit $*" >> "$LOG"
  "$PY" -m nmtkit "$@" 2>> "$LOG"
}
decode() {  # decode ARGS...: nmtkit tune/evaluate on DEVICE, again on the CPU if that fails
  nmtkit "$@" --device "$DEVICE" || { [ "$DEVICE" != cpu ] && nmtkit "$@" --device cpu; }
}

save_logs() {
  (cd "$WORK" && find . \( -name '*.log' -o -name '*.csv' -o -name '*.json' \) -print0 \
    | tar czf "$OUT/work.tgz" --null -T -)
}

# 1. Training, every run at once.
if command -v nvidia-smi > /dev/null; then
  while sleep 15; do
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader
  done > "$OUT/smi.txt" 2>&1 &
  SMI=$!
fi
train() {  # train NAME SRC TGT SEED [--set KEY=VALUE ...]; NAME.done once it has trained
  local name=$1 src=$2 tgt=$3 seed=$4 start=--overwrite
  shift 4
  if [ -e "$WORK/$name.done" ]; then
    echo "kept $name: trained to its end by an earlier call ($(cat "$WORK/$name.done"))" >> "$LOG"
    return 0
  fi
  if [ -e "$WORK/$name/last.pt" ]; then  # cut short by an earlier call: on from its last.pt
    start=--resume
    echo "resuming $name: cut short by an earlier call" >> "$LOG"
  else
    : > "$WORK/$name.log"  # from the start: a new log (a resumed run's goes on after the old)
  fi
  nmtkit train "$CONFIG" --run-dir "$WORK/$name" "$start" --set "data.src_lang=$src" \
    --set "data.tgt_lang=$tgt" --set "train.seed=$seed" --set "train.max_minutes=$MINUTES" \
    --set "train.threads=$THREADS" "$@" >> "$WORK/$name.log" 2>&1 \
    && echo "$(date -u +%FT%TZ), $MINUTES minutes" > "$WORK/$name.done"
}
pids=()
for s in $FWD; do train "fwd$s" "$SRC" "$TGT" "$s" "$@" & pids+=($!); done
for s in $REV; do train "rev$s" "$TGT" "$SRC" "$s" "$@" & pids+=($!); done
for s in $R2L; do
  train "r2l$s" "$SRC" "$TGT" "$s" "$@" --set data.reverse_target=true & pids+=($!)
done
wait "${pids[@]}"
[ -n "${SMI:-}" ] && kill "$SMI" 2> /dev/null
echo "trained after ${SECONDS}s"
save_logs
[ "$STAGE" = train ] && exit 0
fwd=() rev=()
for s in $FWD; do fwd+=(--model "$WORK/fwd$s/best.pt"); done
for s in $REV; do rev+=(--reverse-model "$WORK/rev$s/best.pt"); done
for s in $R2L; do rev+=(--r2l-model "$WORK/r2l$s/best.pt"); done
dec=(--batch-size "$BATCH")

# 2. The choice on the validation split.
# shellcheck disable=SC2086  # PENALTIES: one value per word
decode tune "${fwd[@]}" "${dec[@]}" --split "$VALID" --beam 5 --length-penalty $PENALTIES \
  --rerank 0 "$RERANK" "${rev[@]}" --metric "$METRIC" -o "$OUT/tune.json" > /dev/null
echo "tuned after ${SECONDS}s: $(grep -o '"flags": "[^"]*"' "$OUT/tune.json")"

# 3. The test split: the recipe's decoding, then the choice.
decode evaluate "${fwd[@]}" "${dec[@]}" --split "$TEST" > "$OUT/eval_ensemble_test.json"
flags=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["flags"])' "$OUT/tune.json")
case $flags in *--rerank*) chosen=("${rev[@]}") ;; *) chosen=() ;; esac
# shellcheck disable=SC2086  # flags: tune's options, one per word
decode evaluate "${fwd[@]}" "${dec[@]}" --split "$TEST" $flags "${chosen[@]}" \
  > "$OUT/eval_chosen_test.json"
echo "test after ${SECONDS}s: $(cat "$OUT/eval_chosen_test.json")"

# 4. Each run alone, and the ensemble's own validation score: side by side, JOBS at a time
# (each process spends most of its time starting; the GPU has room for them all, a CPU
# for as many as it has cores for THREADS each).
alone=()
[ "$DEVICE" = cpu ] && alone=(--threads "$THREADS")
at_most_jobs() { while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done; }
decode evaluate "${fwd[@]}" "${dec[@]}" "${alone[@]}" --split "$VALID" \
  > "$WORK/eval_ensemble_$VALID.json" &
for run in $(for s in $FWD; do echo "fwd$s"; done; for s in $REV; do echo "rev$s"; done
             for s in $R2L; do echo "r2l$s"; done); do
  for split in "$VALID" "$TEST"; do
    at_most_jobs
    decode evaluate --model "$WORK/$run/best.pt" "${dec[@]}" "${alone[@]}" --split "$split" \
      > "$WORK/eval_${run}_$split.json" &
  done
done
wait
save_logs
echo "done after ${SECONDS}s"
