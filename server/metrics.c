/* Counters and the Prometheus text format (version 0.0.4) of GET /metrics.
 * Counters are atomics bumped by whichever thread sees the event; the cache's
 * own counters (evictions, entries, bytes) are read from its index when
 * scraped, so they include every process sharing the directory. */
#include "server/server.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const route_names[] = {
#define X(e, n) n,
	ROUTES(X)
#undef X
};

const char *route_name(enum route r)
{
	return r < ROUTE_COUNT ? route_names[r] : "unknown";
}

static const double bucket_le[METRICS_NBUCKETS] = {METRICS_COMPILE_BUCKETS};

void metrics_request(coild_metrics *m, enum route r, unsigned status)
{
	if (r >= ROUTE_COUNT)
		r = ROUTE_UNKNOWN;
	if (status >= 600)
		status = 0;
	atomic_fetch_add(&m->requests[r][status], 1);
}

void metrics_compile_time(coild_metrics *m, double seconds)
{
	int b = 0;
	while (b < METRICS_NBUCKETS && seconds > bucket_le[b])
		b++;
	atomic_fetch_add(&m->compile_buckets[b], 1);
	atomic_fetch_add(&m->compile_count, 1);
	atomic_fetch_add(&m->compile_us_sum, (uint64_t)(seconds * 1e6));
}

/* A growing text buffer; on allocation failure it stops growing and the
 * render returns NULL. */
typedef struct {
	char *p;
	size_t len, cap;
	int oom;
} buf;

static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...)
{
	for (int tries = 0; tries < 2 && !b->oom; tries++) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap + (size_t)n + 1) * 2;
		char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
}

static void counter(buf *b, const char *name, const char *help, uint64_t v)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(buf *b, const char *name, const char *help, double v)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.15g\n", name, help, name, name, v);
}

char *metrics_render(coild *s)
{
	coild_metrics *m = &s->metrics;
	buf b = {.cap = 16384};
	if (!(b.p = malloc(b.cap)))
		return NULL;
	b.p[0] = 0;

	bprintf(&b, "# HELP coild_requests_total HTTP requests answered, by route and status code.\n"
		    "# TYPE coild_requests_total counter\n");
	for (int r = 0; r < ROUTE_COUNT; r++)
		for (int code = 0; code < 600; code++) {
			uint64_t v = atomic_load(&m->requests[r][code]);
			if (v)
				bprintf(&b, "coild_requests_total{route=\"%s\",code=\"%d\"} %llu\n", route_names[r], code,
					(unsigned long long)v);
		}

	bprintf(&b, "# HELP coild_compile_seconds Wall-clock time of builds that ran (cache misses).\n"
		    "# TYPE coild_compile_seconds histogram\n");
	uint64_t cum = 0;
	for (int i = 0; i <= METRICS_NBUCKETS; i++) {
		cum += atomic_load(&m->compile_buckets[i]);
		if (i < METRICS_NBUCKETS)
			bprintf(&b, "coild_compile_seconds_bucket{le=\"%g\"} %llu\n", bucket_le[i],
				(unsigned long long)cum);
		else
			bprintf(&b, "coild_compile_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	}
	bprintf(&b, "coild_compile_seconds_sum %.6f\ncoild_compile_seconds_count %llu\n",
		(double)atomic_load(&m->compile_us_sum) / 1e6, (unsigned long long)atomic_load(&m->compile_count));

	counter(&b, "coild_cache_hits_total", "Compile requests answered from the cache.", atomic_load(&m->hits));
	counter(&b, "coild_cache_misses_total", "Compile requests that needed a compile job.",
		atomic_load(&m->misses));
	counter(&b, "coild_compiles_total", "Builds that ran and stored an artifact.", atomic_load(&m->compiles));
	counter(&b, "coild_compile_failures_total", "Compile jobs that ended in an error.",
		atomic_load(&m->compile_failures));
	counter(&b, "coild_singleflight_joins_total", "Compile requests that joined an identical job in flight.",
		atomic_load(&m->joins));
	counter(&b, "coild_queue_rejections_total",
		"Compile requests refused because the queue (503) or the tenant's share of it (429) was full.",
		atomic_load(&m->rejected));
	counter(&b, "coild_bytes_served_total", "Artifact bytes sent in 200 responses.",
		atomic_load(&m->bytes_served));
	bprintf(&b, "# HELP coild_upstream_total Misses asked of the --upstream tiers, by outcome: filled (a"
		    " verified copy stored), miss (no tier had it), error (unreachable, refused, a bad copy).\n"
		    "# TYPE coild_upstream_total counter\n"
		    "coild_upstream_total{outcome=\"filled\"} %llu\n"
		    "coild_upstream_total{outcome=\"miss\"} %llu\n"
		    "coild_upstream_total{outcome=\"error\"} %llu\n",
		(unsigned long long)atomic_load(&m->upstream_fills), (unsigned long long)atomic_load(&m->upstream_misses),
		(unsigned long long)atomic_load(&m->upstream_errors));
	bprintf(&b, "# HELP coild_connections_closed_total Connections closed for want of headers within"
		    " --header-timeout, or of a body at --min-body-rate.\n"
		    "# TYPE coild_connections_closed_total counter\n"
		    "coild_connections_closed_total{reason=\"header_timeout\"} %llu\n"
		    "coild_connections_closed_total{reason=\"slow_body\"} %llu\n",
		(unsigned long long)atomic_load(&s->conns.closed_headers),
		(unsigned long long)atomic_load(&s->conns.closed_body));

	int queued, running;
	jobs_depth(&s->jobs, &queued, &running);
	gauge(&b, "coild_queue_depth", "Compile jobs waiting for a worker.", queued);
	gauge(&b, "coild_jobs_running", "Compile jobs being built.", running);
	gauge(&b, "coild_workers", "Compile worker threads.", s->cfg.workers);

	coil_err err = {0};
	cache_stats_t st;
	coil_cache *c = cache_get(s, &err);
	if (c && cache_stats(c, &st, &err) == 0) {
		counter(&b, "coild_cache_evictions_total", "Entries evicted to meet the cache budget (index-wide).",
			st.evictions);
		gauge(&b, "coild_cache_entries", "Artifacts in the cache.", (double)st.entries);
		gauge(&b, "coild_cache_bytes", "Bytes of artifacts and graph texts in the cache.", (double)st.bytes);
		gauge(&b, "coild_cache_budget_bytes", "The cache budget; 0 = unlimited.", (double)s->cfg.budget);
	} else {
		bprintf(&b, "# cache statistics unavailable: %s\n", err.msg);
	}
	if (c)
		cache_put(s, c);
	gauge(&b, "coild_uptime_seconds", "Seconds since the server started.",
	      (double)(clock_ms64() - s->started_ms) / 1e3);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
