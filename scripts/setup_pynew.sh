#!/usr/bin/env bash
# The newest-libraries venv for the Python data tools (issue 35): tests/requirements-new.txt
# (transformers, tokenizers, jinja2, pyarrow, numpy, h5py, pytest; lower bounds only) installed from
# PyPI into $ROOT/.pynew (git-ignored) over Debian's python3 WITHOUT its site packages, so that torch
# is absent there: scripts/sft_prepare_hf.py, scripts/generate.py's tokenizer side and
# scripts/chat_presets.py must run without it. tests/CMakeLists.txt runs their tests a second time
# with this interpreter (integration_*_newest). Idempotent like scripts/setup_pyref.sh: reinstalls
# only when the requirements file changes (delete .pynew to move to newer releases).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.pynew"
REQ="$ROOT/tests/requirements-new.txt"
if [ -x "$VENV/bin/python" ] && cmp -s "$REQ" "$VENV/.requirements"; then exit 0; fi
echo "setup_pynew: installing $(grep -c '^[a-z]' "$REQ") packages (newest releases) into $VENV"
rm -rf "$VENV"
/usr/bin/python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
if "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  echo "setup_pynew: torch is importable in $VENV; it must not be" >&2
  exit 1
fi
cp "$REQ" "$VENV/.requirements"
"$VENV/bin/python" -c 'import transformers, tokenizers, jinja2
print(f"setup_pynew: transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, jinja2 {jinja2.__version__}")'
