#!/usr/bin/env bash
# The main job: set up, train the small Multi30k de->en Transformer for $MINUTES minutes,
# evaluate it on test_2016_flickr with sacreBLEU (beam 5), and translate two sentences.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${NMTKIT_DATA:-}" ] && [ -d ../shared/data/multi30k ]; then
  export NMTKIT_DATA=$(cd ../shared/data && pwd)   # offline mirror; otherwise downloaded
fi
MINUTES=${MINUTES:-10}
RUN=${RUN:-runs/quickstart}
.venv/bin/nmtkit train configs/multi30k_transformer_small.yaml --run-dir "$RUN" --overwrite \
  --set train.max_minutes="$MINUTES" --set train.valid_every=200
.venv/bin/nmtkit evaluate --model "$RUN/best.pt" --split test_2016_flickr --beam 5 \
  -o "$RUN/test_2016_flickr.hyp.en"
printf 'Ein Mann fährt mit dem Fahrrad die Straße entlang.\nZwei Kinder spielen im Sand.\n' \
  | .venv/bin/nmtkit translate --model "$RUN/best.pt" --beam 5
