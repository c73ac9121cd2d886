#!/usr/bin/env bash
# The main job: set up, train a small Multi30k de->en Transformer for $MINUTES minutes,
# evaluate it on test_2016_flickr with sacreBLEU (beam 5), and translate two sentences.
# Under 30 minutes it trains configs/multi30k_transformer_quick.yaml (its schedule planned
# from the budget, small batches, light dropout); from 30 minutes on the small recipe with its
# schedule planned from the budget (configs/multi30k_transformer_hour.yaml, the one of the
# 1-hour results). RECIPE=... picks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${NMTKIT_DATA:-}" ] && [ -d ../shared/data/multi30k ]; then
  export NMTKIT_DATA=$(cd ../shared/data && pwd)   # offline mirror; otherwise downloaded
fi
MINUTES=${MINUTES:-10}
RUN=${RUN:-runs/quickstart}
if [ -z "${RECIPE:-}" ]; then
  if awk -v m="$MINUTES" 'BEGIN { exit !(m < 30) }'; then
    RECIPE=configs/multi30k_transformer_quick.yaml
  else
    RECIPE=configs/multi30k_transformer_hour.yaml
  fi
fi
echo "quickstart: $RECIPE for $MINUTES minutes into $RUN"
HOST=$(.venv/bin/python -c 'from nmtkit.fast.onednn import describe_host; print(describe_host())')
case "$RECIPE:$MINUTES:${HOST##*, }" in  # what the README's table measured on this kind of host
  configs/multi30k_transformer_quick.yaml:10:AVX2)
    EXPECT="about 35 test sacreBLEU (a 2-core AVX2 host's first runs: 35.0, and 33.74 beside another job)" ;;
  *) EXPECT="see the README's table of host kinds" ;;
esac
echo "quickstart: host $HOST: expect $EXPECT"
.venv/bin/nmtkit train "$RECIPE" --run-dir "$RUN" --overwrite --set train.max_minutes="$MINUTES"
.venv/bin/nmtkit evaluate --model "$RUN/best.pt" --split test_2016_flickr --beam 5 \
  -o "$RUN/test_2016_flickr.hyp.en"
printf 'Ein Mann fährt mit dem Fahrrad die Straße entlang.\nZwei Kinder spielen im Sand.\n' \
  | .venv/bin/nmtkit translate --model "$RUN/best.pt" --beam 5
