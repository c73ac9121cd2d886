# Sourced by the GPU scripts (gpu_suite.sh, gpu_seeds.sh) after OUT is made: the GPU image's
# Python gets the wheels of missing packages in .whl/ (installed into /tmp/site) and this
# checkout's src/ on its path, and OUT/env.txt records the GPU, Python, torch and CUDA.
# PY: the interpreter (default python3, the image's).
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
} > "$OUT/env.txt" 2>&1
