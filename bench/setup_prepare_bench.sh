#!/usr/bin/env bash
# Makes .pybench: Debian's python3 (torch 1.13, numpy 1.24, h5py) plus tests/requirements-ref.txt and
# datasets (bench/requirements-prepare.txt), for bench/prepare_throughput.py. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.pybench"
REQ="$ROOT/bench/requirements-prepare.txt"
if [ -x "$VENV/bin/python" ] && cat "$REQ" "$ROOT/tests/requirements-ref.txt" | cmp -s - "$VENV/.requirements"; then exit 0; fi
/usr/bin/python3 -m venv --system-site-packages "$VENV"
# numpy stays Debian's: a wheel of numpy 2 would break Debian's torch and h5py.
printf 'numpy==%s\n' "$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')" > "$VENV/constraints.txt"
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$VENV/constraints.txt" -r "$REQ"
cat "$REQ" "$ROOT/tests/requirements-ref.txt" > "$VENV/.requirements"
