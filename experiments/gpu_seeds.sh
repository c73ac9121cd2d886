#!/bin/bash
# experiments/seeds.py on a GPU machine reached through a time-limited call: the seeds trained
# side by side (give --parallel N among the arguments), then chosen, ensembled and scored as
# on a CPU. Wheels of missing packages in .whl/ are installed into /tmp/site first (the GPU
# image has no sacremoses). Writes OUT/env.txt, OUT/seeds.json (seeds.py's JSON, when it
# finished inside LIMIT seconds), OUT/log.txt (its stderr) and OUT/work.tgz (every log, score
# and tuning file of WORK, no checkpoint), also when the limit cut it short.
#
#   NMTKIT_DATA=... LIMIT=540 [PY=python3] bash experiments/gpu_seeds.sh OUT_DIR WORK_DIR SEEDS.PY-ARGS...
set -u
OUT=${1:?usage: gpu_seeds.sh OUT_DIR WORK_DIR SEEDS.PY-ARGS...}
WORK=${2:?usage: gpu_seeds.sh OUT_DIR WORK_DIR SEEDS.PY-ARGS...}
shift 2
mkdir -p "$OUT" "$WORK"
source "$(dirname "$0")/gpu_env.sh"  # wheels, PYTHONPATH, OUT/env.txt
cat "$OUT/env.txt"
timeout "${LIMIT:-540}" "$PY" experiments/seeds.py --work "$WORK" --out "$OUT/seeds.json" "$@" \
  2> "$OUT/log.txt" > /dev/null
echo "seeds.py: exit $? after ${SECONDS}s"
tail -5 "$OUT/log.txt"
(cd "$WORK" && find . \( -name '*.log' -o -name '*.json' -o -name '*.cmd' -o -name '*.csv' \
  -o -name '*.matmul' -o -name 'samples.txt' \) -print0 | tar czf "$OUT/work.tgz" --null -T -)
