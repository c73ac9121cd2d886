#!/bin/bash
# The GPU measurements of issue 18 in one call of under 10 minutes on an H100. SUITE=main
# (default, about 4 minutes): the CUDA tests of train.cuda_graphs, then
# benchmarks/gpu_speed.py eager and with CUDA graphs at Multi30k and WMT-like lengths, decoding
# (with MODEL.pt) and a step profile. SUITE=compiled (about 8 minutes): train.compile inside
# the graphs (one compilation for symbolic shapes, then the fused kernels replayed per shape)
# beside the graphs alone, at both lengths. One JSON line per run is appended to
# OUT/results.jsonl, the log to OUT/log.txt. Without network: NMTKIT_DATA points at a
# Multi30k mirror, and wheels of missing packages may lie in .whl/ (installed into /tmp/site).
#
#   NMTKIT_DATA=... [SUITE=compiled] bash experiments/gpu_suite.sh OUT_DIR [MODEL.pt]
set -u
OUT=${1:?usage: gpu_suite.sh OUT_DIR [MODEL.pt]}
MODEL=${2:-}
mkdir -p "$OUT"
source "$(dirname "$0")/gpu_env.sh"  # wheels, PYTHONPATH, OUT/env.txt
if [ "${SUITE:-main}" = compiled ]; then pick=compiled; else pick="not compiled"; fi
# -o addopts=: one process (the device image may lack pytest-xdist; one GPU is one worker)
timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_cuda_graphs.py -k "$pick" -rA --tb=short \
  > "$OUT/test.txt" 2>&1
tail -3 "$OUT/test.txt"
run() {  # run NAME TIMEOUT_S ARGS...: one gpu_speed.py process, its JSON line into results.jsonl
  local name=$1 lim=$2; shift 2
  local json="$OUT/$name.json" t0=$SECONDS
  timeout "$lim" python3 benchmarks/gpu_speed.py "$@" --out "$json" >> "$OUT/log.txt" 2>&1
  local rc=$?
  python3 - "$name" "$rc" "$json" "$((SECONDS - t0))" >> "$OUT/results.jsonl" <<'PY'
import json, sys
name, rc, path, wall = sys.argv[1:]
try:
    d = json.load(open(path))
except OSError:
    d = {}
d.update(name=name, rc=int(rc), wall_s=int(wall))
print(json.dumps(d))
PY
  rm -f "$json"
  tail -1 "$OUT/results.jsonl" | cut -c1-300
}
if [ "${SUITE:-main}" = compiled ]; then
  run wmt_graphs_32k 60 --lengths wmt --cuda-graphs --set train.max_tokens=32768
  run wmt_graphs_compiled_32k 200 --lengths wmt --cuda-graphs --compile --set train.max_tokens=32768
  run m30k_graphs_8k 60 --cuda-graphs
  run m30k_graphs_compiled_8k 150 --cuda-graphs --compile
  echo done
  exit 0
fi
run m30k_graphs_8k 90 --cuda-graphs
run m30k_eager_8k 90
run m30k_graphs_32k 60 --cuda-graphs --set train.max_tokens=32768
run wmt_graphs_32k 60 --lengths wmt --cuda-graphs --set train.max_tokens=32768
run wmt_eager_32k 60 --lengths wmt --set train.max_tokens=32768
if [ -n "$MODEL" ]; then
  run decode 90 --skip-train --model "$MODEL" --beam 5 --batch-size 128
fi
timeout 120 python3 experiments/gpu_step_profile.py --lengths wmt --max-tokens 32768 \
  --out "$OUT/step_profile.txt" >> "$OUT/log.txt" 2>&1
echo done
