#!/usr/bin/env bash
# Set up nmtkit on a fresh machine: a virtual environment at .venv with the CPU build of
# torch 2.13.0 installed first (a plain `torch` requirement would pull a multi-GB CUDA
# build), then nmtkit itself with its optional parts and test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[all,dev]'
.venv/bin/nmtkit --version
