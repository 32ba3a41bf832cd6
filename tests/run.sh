#!/bin/sh
# Runs every test suite and ends with one line: "N passed, N failed, N skipped".
# C suites are cmocka binaries in $B/tests, run with TAP output; Python suites are
# tests/py/test_*.py run with Debian's python3 (PyTorch lives there), also printing TAP.
# A suite that crashes or exits non-zero without reporting a failure counts as one failure.
# A skipped test ("ok ... # SKIP" or cmocka's "not ok N # SKIP name") is neither: each is
# listed with its reason (the text after "# SKIP", or for cmocka the last "# " line the
# test printed before it).
# With SAN_B set, the suites named in SAN_SUITES run again from that (sanitizer) build.
B=${B:-build}
pass=0; fail=0; skip=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
PY=/usr/bin/python3

# The skipped tests in $log, one "    skipped: NAME: REASON" line each.
list_skips() {
	awk '
	/^#/ { diag = substr($0, 3); next }
	/^(not )?ok .*# SKIP/ {
		i = index($0, "# SKIP")
		head = substr($0, 1, i - 1); tail = substr($0, i + 6)
		sub(/^ +/, "", tail)
		name = head; sub(/^(not )?ok [0-9]*( - )?/, "", name); sub(/ +$/, "", name)
		if (name == "") { name = tail; reason = diag } else reason = tail
		printf "    skipped: %s: %s\n", name, reason == "" ? "no reason given" : reason
		diag = ""; next
	}
	/^(not )?ok / { diag = "" }' "$log"
}

run_suite() {
	name=$1; shift
	start=$(date +%s)
	"$@" >"$log" 2>&1
	rc=$?
	s=$(grep -c '^\(not \)\{0,1\}ok .*# SKIP' "$log")
	p=$(grep '^ok ' "$log" | grep -vc '# SKIP')
	f=$(grep '^not ok ' "$log" | grep -vc '# SKIP')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "# $name exited with status $rc" >>"$log"; fi
	[ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ] && { f=1; echo "# $name ran no test" >>"$log"; }
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
	printf '%-32s %4d passed, %d failed, %d skipped  (%ds)\n' "$name" "$p" "$f" "$s" $(( $(date +%s) - start ))
	[ "$s" -ne 0 ] && list_skips
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
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
