#!/usr/bin/env bash
# Profiles a real scikit-learn model's predict() and prints the call tree.
# Installs what it needs on a fresh Debian machine: build tools, a virtualenv
# with this package, scikit-learn and pandas. Says what it installs before it
# does, and waits (up to 10 minutes) for an apt that another program holds.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
debs=(rapidjson-dev zlib1g-dev systemtap-sdt-dev cmake ninja-build g++ python3-venv python3-dev)
missing=()
for d in "${debs[@]}"; do dpkg -s "$d" >/dev/null 2>&1 || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "demo.sh: installing Debian packages (apt-get; waits for another apt's lock): ${missing[*]}"
  apt=(apt-get -o DPkg::Lock::Timeout=600)
  [ -z "$SUDO" ] || apt=("$SUDO" "${apt[@]}")
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${missing[@]}" >/dev/null
fi
PY=${PYTHON:-python3}
VENV=.venv-demo
[ -x "$VENV/bin/python" ] || { echo "demo.sh: creating the virtualenv $VENV ($PY)"; "$PY" -m venv "$VENV"; }
echo "demo.sh: installing into $VENV (pip): pip (upgrade), this package (builds its C++ part: 2-3 minutes), scikit-learn, pandas"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q . scikit-learn pandas
"$VENV/bin/python" examples/predict_demo.py
