#!/bin/sh
# Runs each libFuzzer target (built by `make fuzz` into $FUZZ_B) for $FUZZ_TIME
# seconds on one core each, starting from tests/fuzz/corpus/NAME.  New inputs
# go to $FUZZ_B/corpus/NAME (merge the interesting ones into the repository
# with: $FUZZ_B/fuzz_NAME -merge=1 tests/fuzz/corpus/NAME $FUZZ_B/corpus/NAME).
# A crash is written to tests/fuzz/regress/NAME/ (replayed by `make test`
# from then on) and fails the run.  Ends with one summary line per target:
# executions, corpus size, crashes.
FUZZ_B=${FUZZ_B:-build-fuzz}
FUZZ_TIME=${FUZZ_TIME:-60}
status=0
summary=""
for t in "$@"; do
	bin="$FUZZ_B/fuzz_$t"
	mkdir -p "$FUZZ_B/corpus/$t" "tests/fuzz/regress/$t"
	dict=""
	[ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
	log="$FUZZ_B/fuzz_$t.log"
	echo "fuzz: $t for ${FUZZ_TIME}s (log: $log)"
	# shellcheck disable=SC2086
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
		"$bin" -max_total_time="$FUZZ_TIME" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix="tests/fuzz/regress/$t/" $dict \
		"$FUZZ_B/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	crashes=$(ls "tests/fuzz/regress/$t" | grep -c -E '^(crash|leak|timeout|oom)-' || true)
	corpus=$(ls "$FUZZ_B/corpus/$t" "tests/fuzz/corpus/$t" | wc -l)
	if [ "$rc" -ne 0 ]; then
		status=1
		grep -E 'ERROR|invariant|SUMMARY|Test unit written' "$log" | head -n 20 | sed 's/^/    /'
	fi
	summary="$summary$(printf '%-12s %10s executions  %6s corpus files  %3s crash files in regress/  exit %s' \
		"$t" "${execs:-?}" "$corpus" "$crashes" "$rc")
"
done
printf '%s' "$summary"
exit $status
