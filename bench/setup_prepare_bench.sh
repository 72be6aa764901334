#!/usr/bin/env bash
# Makes the venv for bench/prepare_throughput.py. Idempotent.
#   bash bench/setup_prepare_bench.sh       .pybench: Debian's python3 (torch 1.13, numpy 1.24, h5py) plus
#                                           tests/requirements-ref.txt and datasets (bench/requirements-prepare.txt)
#   bash bench/setup_prepare_bench.sh new   .pybench-new: the newest releases, no torch, no system packages
#                                           (tests/requirements-new.txt and datasets: bench/requirements-prepare-new.txt)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = new ]; then
  VENV="$ROOT/.pybench-new"
  REQ="$ROOT/bench/requirements-prepare-new.txt"
  BASE="$ROOT/tests/requirements-new.txt"
else
  VENV="$ROOT/.pybench"
  REQ="$ROOT/bench/requirements-prepare.txt"
  BASE="$ROOT/tests/requirements-ref.txt"
fi
if [ -x "$VENV/bin/python" ] && cat "$REQ" "$BASE" | cmp -s - "$VENV/.requirements"; then exit 0; fi
rm -rf "$VENV"
if [ "${1:-}" = new ]; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
else
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  # numpy stays Debian's: a wheel of numpy 2 would break Debian's torch and h5py.
  printf 'numpy==%s\n' "$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')" > "$VENV/constraints.txt"
  "$VENV/bin/pip" install -q --disable-pip-version-check -c "$VENV/constraints.txt" -r "$REQ"
fi
cat "$REQ" "$BASE" > "$VENV/.requirements"
