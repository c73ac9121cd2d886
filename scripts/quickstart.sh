#!/usr/bin/env bash
# The main job: set up, train a small Multi30k de->en Transformer for $MINUTES minutes,
# evaluate it on test_2016_flickr with sacreBLEU (beam 5), and translate two sentences.
# It trains configs/multi30k_transformer_quick.yaml (a narrow model, its schedule planned from
# the budget); a budget that buys much more (MINUTES x this host's measured matmul rate: from
# ~90 minutes of a 2-core AVX2 host) trains configs/multi30k_transformer_hour.yaml instead, the
# recipe's train.budget_tiers choosing (the run's log says which). RECIPE=... picks another.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${NMTKIT_DATA:-}" ] && [ -d ../shared/data/multi30k ]; then
  export NMTKIT_DATA=$(cd ../shared/data && pwd)   # offline mirror; otherwise downloaded
fi
MINUTES=${MINUTES:-10}
RUN=${RUN:-runs/quickstart}
RECIPE=${RECIPE:-configs/multi30k_transformer_quick.yaml}
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
