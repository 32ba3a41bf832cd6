#!/bin/sh
# Load test of coild (bench/load/README.md): wrk against
#   1. GET  /v1/artifacts/{key}   a cached artifact
#   2. POST /v1/compile           a graph already in the cache (a hit)
#   3. the same artifact file served by nginx on the same machine, same run
# and prints requests/s, p50 and p99 latency, and coild's GET rate as a
# fraction of nginx's.  Everything listens on 127.0.0.1 only.
#   B=build DURATION=10s CONNECTIONS=64 THREADS=2 sh bench/load/run.sh
set -eu
B=${B:-build}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
GRAPH=${GRAPH:-tests/graphs/server/pointwise.json}
for tool in wrk nginx curl; do
	command -v $tool >/dev/null 2>&1 || [ -x /usr/sbin/$tool ] || { echo "bench-load: $tool is missing (make deps)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d /tmp/coil-bench-XXXXXX)
chmod 755 "$work" # nginx's workers may run as another user
cleanup() {
	[ -f "$work/coild.pid" ] && kill "$(cat "$work/coild.pid")" 2>/dev/null || true
	[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
	sleep 0.2
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# coild
root=""; [ "$(id -u)" -eq 0 ] && root=--allow-root
"$B/coild" --listen 127.0.0.1:0 --cache-dir "$work/cache" --port-file "$work/port" --max-conns-per-ip 0 $root \
	2>"$work/coild.log" &
echo $! >"$work/coild.pid"
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
PORT=$(cat "$work/port")
URL="http://127.0.0.1:$PORT"
key=$(curl -sS --data-binary @"$GRAPH" "$URL/v1/compile" | sed -n 's/.*"key":"\([0-9a-f]*\)".*/\1/p')
[ -n "$key" ] || { echo "bench-load: the compile failed; see $work/coild.log" >&2; cat "$work/coild.log" >&2; exit 1; }
curl -sS -o "$work/artifact.so" "$URL/v1/artifacts/$key"
size=$(wc -c <"$work/artifact.so")

# nginx serving the same bytes
mkdir -p "$work/www/v1/artifacts" "$work/nginx"
cp "$work/artifact.so" "$work/www/v1/artifacts/$key"
NPORT=$(( (PORT % 20000) + 30000 ))
cat >"$work/nginx.conf" <<CONF
daemon on;
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 1000000;
	client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx;
	uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
	types { application/octet-stream so; }
	default_type application/octet-stream;
	server { listen 127.0.0.1:$NPORT; root $work/www; etag on; }
}
CONF
"$NGINX" -c "$work/nginx.conf" -p "$work/nginx" 2>/dev/null
sleep 0.3

# One wrk run: prints "requests/s p50 p99" (latencies in ms).
run() {
	wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$@" 2>&1 | awk '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
		/Requests\/sec/ { rps = $2 }
		$1 == "50%" { p50 = ms($2) }
		$1 == "99%" { p99 = ms($2) }
		/Non-2xx/ { bad = $NF }
		END { printf "%.0f %.3f %.3f %s\n", rps, p50, p99, bad ? "non-2xx:" bad : "-" }'
}

echo "coild load test: $(nproc) CPUs, artifact $size bytes, $CONNECTIONS connections, $THREADS wrk threads, $DURATION each"
get=$(run "$URL/v1/artifacts/$key")
ngx=$(run "http://127.0.0.1:$NPORT/v1/artifacts/$key")
post=$(COIL_GRAPH="$GRAPH" run -s bench/load/post_compile.lua "$URL/v1/compile")
printf '%-34s %12s %10s %10s\n' "" "requests/s" "p50 ms" "p99 ms"
echo "$get"  | awk '{ printf "%-34s %12s %10s %10s %s\n", "coild GET /v1/artifacts/{key}", $1, $2, $3, $4 }'
echo "$ngx"  | awk '{ printf "%-34s %12s %10s %10s %s\n", "nginx GET (same file)", $1, $2, $3, $4 }'
echo "$post" | awk '{ printf "%-34s %12s %10s %10s %s\n", "coild POST /v1/compile (hit)", $1, $2, $3, $4 }'
echo "$get $ngx" | awk '{ printf "coild/nginx GET throughput ratio: %.2f\n", $1 / $5 }'
case "$get $ngx $post" in *non-2xx*) echo "bench-load: some responses were not 2xx" >&2; exit 1;; esac
