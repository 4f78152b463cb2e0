#!/usr/bin/env bash
# Profiles a real scikit-learn model's predict() and prints the call tree.
# Installs what it needs on a fresh Debian machine: build tools, a virtualenv
# with this package, scikit-learn and pandas.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
if ! dpkg -s rapidjson-dev zlib1g-dev systemtap-sdt-dev cmake ninja-build g++ python3-venv >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq rapidjson-dev zlib1g-dev systemtap-sdt-dev cmake ninja-build g++ python3-venv python3-dev >/dev/null
fi
PY=${PYTHON:-python3}
VENV=.venv-demo
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q . scikit-learn pandas
"$VENV/bin/python" examples/predict_demo.py
