#!/usr/bin/env bash
# The Python reference implementations the tests compare against (tests/requirements-ref.txt:
# transformers, tokenizers, safetensors, tensorboard, the GPT-2 BPE files; PEFT from
# tests/requirements-ref-nodeps.txt), installed from PyPI into
# a venv at $ROOT/.pyref (git-ignored) over Debian's python3 (--system-site-packages: torch, numpy,
# h5py, pytest come from Debian). Idempotent: reinstalls only when the requirements change. Used by
# scripts/test.sh before the build, so CMake runs the Python tests with that interpreter. The
# trainer never needs any of it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.pyref"
REQ="$ROOT/tests/requirements-ref.txt"
NODEPS="$ROOT/tests/requirements-ref-nodeps.txt"  # installed with --no-deps (see the file)
if [ -x "$VENV/bin/python" ] && cat "$REQ" "$NODEPS" | cmp -s - "$VENV/.requirements"; then exit 0; fi
echo "setup_pyref: installing $(cat "$REQ" "$NODEPS" | grep -c '^[a-z]') reference packages into $VENV"
rm -rf "$VENV"
/usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$NODEPS"
cat "$REQ" "$NODEPS" > "$VENV/.requirements"
