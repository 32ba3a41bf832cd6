/* Soak driver for coild: CONNS keep-alive connections (one thread each) for
 * SECONDS, mixing cached fetches (GET /v1/artifacts/KEY), cached compiles
 * (POST /v1/compile of a graph already compiled) and new compiles (a graph
 * never seen, one every NEW_MS milliseconds across all connections).
 * Reports requests per second, errors (any transport error or status other
 * than 200), latency percentiles per kind, and coild's resident memory
 * (VmRSS of --pid) after warm-up, every 10 s, and at the end.
 *
 *   soak --url http://127.0.0.1:PORT --pid PID [--seconds 60] [--conns 256]
 *        [--new-ms 500] [--warm 16]
 *
 * Loopback only by intent: the URL is the caller's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

enum { FETCH, CACHED, NEW, NKINDS };
static const char *const kind_name[NKINDS] = {"cached fetch", "cached compile", "new compile"};

static const char *url = "http://127.0.0.1:8470";
static int seconds = 60, conns = 256, new_ms = 500, warm = 16, pid = 0;

static char (*keys)[65];
static atomic_long next_new_ms;  /* when the next new compile may start */
static atomic_int variant_seq;
static double t_end;

typedef struct lat {
	float *v;
	size_t n, cap;
} lat;

typedef struct worker {
	pthread_t th;
	unsigned seed;
	lat l[NKINDS];
	long ok[NKINDS], err[NKINDS];
	long status_err[6]; /* 0: transport, else status/100 */
} worker;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_kb(void)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

static char *graph(int v)
{
	char *s = NULL;
	if (asprintf(&s,
		     "{\"format\": \"coil-graph\", \"version\": 1,"
		     " \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"batch\", 64]}],"
		     " \"constants\": [{\"name\": \"k\", \"dtype\": \"f32\", \"shape\": [1], \"data\": [%d.125]}],"
		     " \"nodes\": [{\"id\": \"m\", \"op\": \"aten.mul.Tensor\", \"args\": [\"x\", \"k\"], \"outputs\": [\"s\"]},"
		     "  {\"id\": \"t\", \"op\": \"aten.tanh\", \"args\": [\"s\"], \"outputs\": [\"y\"]}],"
		     " \"outputs\": [\"y\"]}",
		     v) < 0)
		exit(1);
	return s;
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
	size_t *len = ud;
	(void)p;
	*len += sz * n;
	return sz * n;
}

typedef struct body {
	char *p;
	size_t n;
} body;

static size_t keep(char *p, size_t sz, size_t n, void *ud)
{
	body *b = ud;
	char *q = realloc(b->p, b->n + sz * n + 1);
	if (!q)
		return 0;
	memcpy(q + b->n, p, sz * n);
	b->n += sz * n;
	q[b->n] = 0;
	b->p = q;
	return sz * n;
}

/* POST a compile; its key into key (may be NULL); the status or -1. */
static long compile(CURL *e, int v, char *key)
{
	char u[256];
	snprintf(u, sizeof u, "%s/v1/compile?target=generic&opt_level=1", url);
	char *g = graph(v);
	body b = {0};
	curl_easy_setopt(e, CURLOPT_URL, u);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, g);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(g));
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
	long status = -1;
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200 && key) {
		json_t *o = json_loadb(b.p, b.n, 0, NULL);
		snprintf(key, 65, "%s", json_string_value(json_object_get(o, "key")) ?: "");
		json_decref(o);
	}
	free(b.p);
	free(g);
	return status;
}

static long fetch(CURL *e, const char *key)
{
	char u[256];
	snprintf(u, sizeof u, "%s/v1/artifacts/%s", url, key);
	size_t len = 0;
	curl_easy_setopt(e, CURLOPT_URL, u);
	curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &len);
	long status = -1;
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	return status == 200 && len == 0 ? -2 : status;
}

static void push(lat *l, float ms)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 4096;
		l->v = realloc(l->v, l->cap * sizeof *l->v);
		if (!l->v)
			exit(1);
	}
	l->v[l->n++] = ms;
}

static void *run(void *arg)
{
	worker *w = arg;
	CURL *e = curl_easy_init();
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	while (now() < t_end) {
		int kind = rand_r(&w->seed) % 10 < 7 ? FETCH : CACHED;
		long t = (long)(now() * 1000), due = atomic_load(&next_new_ms);
		if (t >= due && atomic_compare_exchange_strong(&next_new_ms, &due, t + new_ms))
			kind = NEW;
		double t0 = now();
		long status;
		if (kind == FETCH)
			status = fetch(e, keys[rand_r(&w->seed) % (unsigned)warm]);
		else if (kind == CACHED)
			status = compile(e, (int)(rand_r(&w->seed) % (unsigned)warm), NULL);
		else
			status = compile(e, atomic_fetch_add(&variant_seq, 1), NULL);
		push(&w->l[kind], (float)((now() - t0) * 1e3));
		if (status == 200) {
			w->ok[kind]++;
		} else {
			w->err[kind]++;
			w->status_err[status > 0 ? (status / 100 < 6 ? status / 100 : 5) : 0]++;
		}
	}
	curl_easy_cleanup(e);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

static double pct(const lat *l, double p)
{
	if (!l->n)
		return 0;
	size_t i = (size_t)(p * (double)(l->n - 1) + 0.5);
	return l->v[i];
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--url"))
			url = argv[i + 1];
		else if (!strcmp(argv[i], "--pid"))
			pid = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--conns"))
			conns = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--new-ms"))
			new_ms = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--warm"))
			warm = atoi(argv[i + 1]);
		else
			return fprintf(stderr, "soak: unknown option %s\n", argv[i]), 2;
	}
	if (conns < 1 || seconds < 1 || warm < 1 || new_ms < 1)
		return fprintf(stderr, "soak: bad arguments\n"), 2;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	/* Warm-up: the cached set. */
	keys = calloc((size_t)warm, sizeof *keys);
	CURL *e = curl_easy_init();
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
	for (int v = 0; v < warm; v++)
		if (compile(e, v, keys[v]) != 200 || !keys[v][0])
			return fprintf(stderr, "soak: warm-up compile %d failed\n", v), 1;
	curl_easy_cleanup(e);
	/* New graphs differ from any earlier run's (below 2^23: distinct as f32). */
	atomic_store(&variant_seq, 100000 + (int)(time(NULL) % 4000) * 2000);
	long rss0 = rss_kb();
	printf("soak: %d connections for %d s against %s; new compile every %d ms; %d cached graphs\n", conns,
	       seconds, url, new_ms, warm);
	printf("soak: coild RSS after warm-up: %ld KiB\n", rss0);
	fflush(stdout);

	worker *w = calloc((size_t)conns, sizeof *w);
	double t0 = now();
	t_end = t0 + seconds;
	atomic_store(&next_new_ms, (long)(t0 * 1000));
	for (int i = 0; i < conns; i++) {
		w[i].seed = (unsigned)i * 2654435761u + 1;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setstacksize(&at, 256 * 1024);
		if (pthread_create(&w[i].th, &at, run, &w[i]) != 0)
			return fprintf(stderr, "soak: cannot start thread %d\n", i), 1;
		pthread_attr_destroy(&at);
	}
	long rss_max = rss0;
	while (now() < t_end) {
		sleep(1);
		long r = rss_kb();
		if (r > rss_max)
			rss_max = r;
		int el = (int)(now() - t0 + 0.5);
		if (el % 10 == 0 && el < seconds) {
			printf("soak: t=%3ds coild RSS %ld KiB\n", el, r);
			fflush(stdout);
		}
	}
	for (int i = 0; i < conns; i++)
		pthread_join(w[i].th, NULL);
	double took = now() - t0;
	long rss1 = rss_kb();

	lat all[NKINDS] = {{0}}, total = {0};
	long ok[NKINDS] = {0}, err[NKINDS] = {0}, serr[6] = {0};
	for (int i = 0; i < conns; i++)
		for (int k = 0; k < NKINDS; k++) {
			for (size_t j = 0; j < w[i].l[k].n; j++) {
				push(&all[k], w[i].l[k].v[j]);
				push(&total, w[i].l[k].v[j]);
			}
			ok[k] += w[i].ok[k];
			err[k] += w[i].err[k];
			if (k == 0)
				for (int s = 0; s < 6; s++)
					serr[s] += w[i].status_err[s];
		}
	long nreq = 0, nerr = 0;
	printf("\n%-15s %9s %7s %9s %9s %9s\n", "kind", "requests", "errors", "p50 ms", "p99 ms", "max ms");
	for (int k = 0; k < NKINDS; k++) {
		qsort(all[k].v, all[k].n, sizeof(float), cmp);
		printf("%-15s %9ld %7ld %9.2f %9.2f %9.1f\n", kind_name[k], ok[k] + err[k], err[k], pct(&all[k], 0.5),
		       pct(&all[k], 0.99), pct(&all[k], 1.0));
		nreq += ok[k] + err[k];
		nerr += err[k];
	}
	qsort(total.v, total.n, sizeof(float), cmp);
	printf("%-15s %9ld %7ld %9.2f %9.2f %9.1f\n", "all", nreq, nerr, pct(&total, 0.5), pct(&total, 0.99),
	       pct(&total, 1.0));
	if (nerr)
		printf("errors by kind: transport %ld, 4xx %ld, 5xx %ld\n", serr[0], serr[4], serr[5]);
	printf("\nrequests/s %.0f   errors %ld   p99 %.2f ms   coild RSS start %ld KiB, max %ld KiB, end %ld KiB"
	       " (%+.1f%%)\n",
	       (double)nreq / took, nerr, pct(&total, 0.99), rss0, rss_max, rss1,
	       rss0 > 0 ? 100.0 * (double)(rss1 - rss0) / (double)rss0 : 0.0);
	return nerr ? 1 : 0;
}
