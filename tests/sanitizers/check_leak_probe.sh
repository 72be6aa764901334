#!/usr/bin/env bash
# tests/sanitizers/check_leak_probe.sh PROBE — the sanitized suite's leak setting, checked both ways
# (scripts/test_sanitizers.sh: the fast unwinder, dlclose kept from unloading Open MPI's plugins,
# tests/sanitizers/lsan.supp): PROBE (leak_probe.cpp) leaks 4242 bytes of its own after
# MPI_Init/MPI_Finalize; LeakSanitizer must fail it with exactly one report, that one, naming the
# function that allocated it, and none of Open MPI's (their suppressions still match).
set -uo pipefail
out="$("$1" 2>&1)"
status=$?
fail() { echo "FAIL: $1"; echo "--- the probe's output (status $status) ---"; echo "$out"; exit 1; }
((status != 0)) || fail "the planted leak was not reported (exit 0)"
leaks="$(grep -cE '^(Direct|Indirect) leak of' <<<"$out")"
((leaks == 1)) || fail "expected one leak report, the planted one; got $leaks"
grep -q '^Direct leak of 4242 byte(s) in 1 object(s)' <<<"$out" || fail "the report is not the planted 4242 bytes"
grep -q 'in planted_leak_in_our_code' <<<"$out" || fail "the report does not name the function that leaked"
echo "ok: the planted leak reported, named, and nothing else"
