#!/bin/sh
# Runs every test suite and ends with one line: "N passed, N failed".
# C suites are cmocka binaries in $B/tests, run with TAP output; Python suites are
# tests/py/test_*.py run with Debian's python3 (PyTorch lives there), also printing TAP.
# A suite that crashes or exits non-zero without reporting a failure counts as one failure.
# With SAN_B set, the suites named in SAN_SUITES run again from that (sanitizer) build.
B=${B:-build}
pass=0; fail=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
PY=/usr/bin/python3

run_suite() {
	name=$1; shift
	start=$(date +%s)
	"$@" >"$log" 2>&1
	rc=$?
	p=$(grep -c '^ok ' "$log")
	f=$(grep -c '^not ok ' "$log")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "# $name exited with status $rc" >>"$log"; fi
	[ "$p" -eq 0 ] && [ "$f" -eq 0 ] && { f=1; echo "# $name ran no test" >>"$log"; }
	pass=$((pass + p)); fail=$((fail + f))
	printf '%-32s %4d passed, %d failed  (%ds)\n' "$name" "$p" "$f" $(( $(date +%s) - start ))
	if [ "$f" -ne 0 ]; then grep -v '^ok ' "$log" | tail -n 40 | sed 's/^/    /'; fi
}

export CMOCKA_MESSAGE_OUTPUT=TAP
for t in "$B"/tests/test_*; do
	[ -x "$t" ] || continue
	case "$t" in *.o|*.d) continue;; esac
	run_suite "$(basename "$t")" "$t"
done
# The suites in SAN_SUITES again, from the ASan+UBSan build in SAN_B.
for t in ${SAN_B:+$SAN_SUITES}; do
	[ -x "$SAN_B/tests/$t" ] || { fail=$((fail + 1)); echo "$t (asan+ubsan): not built in $SAN_B"; continue; }
	run_suite "$t (asan+ubsan)" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "$SAN_B/tests/$t"
done
for t in tests/py/test_*.py; do
	[ -f "$t" ] || continue
	run_suite "$(basename "$t")" env COIL=$B/coil PYTHONPATH=client/python "$PY" "$t"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
