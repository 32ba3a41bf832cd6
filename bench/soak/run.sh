#!/bin/sh
# Soak: coild on a fresh cache (with a budget) on 127.0.0.1, then the soak
# driver ($B/bench/soak) for SOAK_SECONDS with SOAK_CONNS connections mixing
# cached fetches, cached compiles and new compiles.  Prints errors,
# requests/s, latency percentiles and coild's RSS at start and end; exits
# non-zero if any request failed or coild did not stop cleanly.
set -u
B=${B:-build}
SECONDS_=${SOAK_SECONDS:-60}
CONNS=${SOAK_CONNS:-256}
NEW_MS=${SOAK_NEW_MS:-500}
BUDGET=${SOAK_BUDGET:-64M}
dir=$(mktemp -d "${TMPDIR:-/tmp}/coil-soak-XXXXXX")
trap 'kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
# every connection comes from 127.0.0.1: no per-address limit; as root, --allow-root
root=""; [ "$(id -u)" -eq 0 ] && root=--allow-root
"$B/coild" --listen 127.0.0.1:0 --port-file "$dir/port" --cache-dir "$dir/cache" --budget "$BUDGET" \
	--max-conns-per-ip 0 $root \
	--workers 2 --threads 8 --queue 256 2>"$dir/coild.log" &
pid=$!
i=0
while [ ! -s "$dir/port" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
[ -s "$dir/port" ] || { echo "soak: coild did not start"; cat "$dir/coild.log"; exit 1; }
port=$(cat "$dir/port")
echo "soak: coild pid $pid on 127.0.0.1:$port, cache budget $BUDGET, 2 workers, 8 HTTP threads"
"$B/bench/soak" --url "http://127.0.0.1:$port" --pid "$pid" --seconds "$SECONDS_" --conns "$CONNS" --new-ms "$NEW_MS"
rc=$?
cached=$(curl -s "http://127.0.0.1:$port/metrics" | grep -E '^coild_cache_(bytes|budget_bytes|entries|evictions_total) ')
echo "$cached" | sed 's/^/soak: /'
kill -TERM "$pid"
wait "$pid"
stop=$?
echo "soak: coild stopped with status $stop; $(grep -c ' 5[0-9][0-9] ' "$dir/coild.log") 5xx in its log"
[ "$rc" -eq 0 ] && [ "$stop" -eq 0 ]
