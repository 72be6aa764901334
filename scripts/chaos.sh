#!/usr/bin/env bash
# scripts/chaos.sh --seed S --faults N [--keep] [--records FILE] — the seeded fault soak on the
# project's 2-node namespace cluster (tests/integration/chaos.py says what it does and checks): a
# 2-node job of slurm/cpu.sbatch disturbed N times by a seeded sequence of rank kills, stops, node
# losses, cut links, USR1 requeues, a full disk, a damaged or missing checkpoint shard and a rank
# killed while a checkpoint is written in the background, which must end bitwise
# equal to an undisturbed run with nothing lost. Exit 0 when nothing was lost. Root (namespaces,
# tmpfs); needs build/sft_train (scripts/build.sh) and the reference Python (scripts/setup_pyref.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SFTDP_BUILD_DIR="${SFTDP_BUILD_DIR:-$ROOT/build}" SFTDP_SOURCE_DIR="$ROOT"
[[ -x $SFTDP_BUILD_DIR/sft_train ]] || { echo "error: $SFTDP_BUILD_DIR/sft_train not built (scripts/build.sh)" >&2; exit 2; }
PY="$ROOT/.pyref/bin/python"
[[ -x $PY ]] || { echo "error: $PY missing (scripts/setup_pyref.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$PY" "$ROOT/tests/integration/chaos.py" "$@"
