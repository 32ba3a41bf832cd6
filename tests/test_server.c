/* End-to-end tests of coild and libcoil: each group starts a real coild (the
 * binary next to this suite's directory, $B/coild) on a free loopback port
 * with its own temp cache directory, and talks to it with libcurl, the curl
 * binary and libcoil.
 *
 * Tests that need a working compiler (codegen) report "ok ... # SKIP" only
 * when the server answers "codegen not available"; any other failure fails
 * them. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "cache/cache.h"
#include "cache/sign.h"
#include "client/artifact.h"
#include "codegen/codegen.h"
#include "coil/coil.h"
#include "common/graph.h"
#include "common/interp.h"
#include "tests/chains.h"

#define GRAPHS "tests/graphs/server"

static char coild_path[PATH_MAX];

/* ---- a coild process ---- */

typedef struct server {
	pid_t pid;
	int port;
	char dir[PATH_MAX];   /* temp dir: cache in dir/cache, log in dir/log */
	char cache[PATH_MAX + 16];
	char url[64];
} server;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Run argv (NULL-terminated, argv[0] the program) with stderr appended to
 * log.  It dies with this process: a test that fails skips its
 * server_free, and must not leave a coild running after the suite. */
static pid_t spawn(const char *const *argv, const char *log)
{
	pid_t parent = getpid();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Start coild on 127.0.0.1:0 with the cache in s->cache (made here unless
 * s->dir is already set, for a restart) and extra flags (NULL-terminated). */
static void server_start(server *s, const char *const *extra)
{
	if (!s->dir[0]) {
		snprintf(s->dir, sizeof s->dir, "%s/coild-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		assert_non_null(mkdtemp(s->dir));
		snprintf(s->cache, sizeof s->cache, "%s/cache", s->dir);
	}
	char portfile[PATH_MAX + 16], log[PATH_MAX + 16];
	snprintf(portfile, sizeof portfile, "%s/port", s->dir);
	snprintf(log, sizeof log, "%s/log", s->dir);
	unlink(portfile);
	/* the tests run as root, which coild refuses unless told */
	const char *argv[40] = {coild_path, "--listen", "127.0.0.1:0", "--cache-dir", s->cache, "--port-file", portfile,
				"--workers", "2", "--threads", "4", "--allow-root"};
	int n = 12;
	for (int i = 0; extra && extra[i] && n < 38; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid_t pid = spawn(argv, log);
	s->pid = pid;
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(portfile, "r");
		if (f) {
			int ok = fscanf(f, "%d", &s->port) == 1;
			fclose(f);
			if (ok) {
				snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
				return;
			}
		}
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			fail_msg("coild exited at start (status %d); see %s", st, log);
		sleep_ms(10);
	}
	fail_msg("coild did not start within 10 s; see %s", log);
}

/* SIGTERM and wait; returns the exit status. */
static int server_stop(server *s)
{
	if (s->pid <= 0)
		return -1;
	kill(s->pid, SIGTERM);
	int st = 0;
	waitpid(s->pid, &st, 0);
	s->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Stop s and remove its directory.  Returns 0, or -1 when coild had not
 * exited cleanly (a crash, or an ASan report): the end of its log, which goes
 * with the directory, is printed first. */
static int server_free(server *s)
{
	int st = server_stop(s), rc = 0;
	if (st > 0) {
		char log[PATH_MAX + 16], buf[4096];
		snprintf(log, sizeof log, "%s/log", s->dir);
		fprintf(stderr, "# coild exited with status %d; the end of its log:\n", st);
		FILE *f = fopen(log, "r");
		if (f) {
			fseek(f, 0, SEEK_END);
			long size = ftell(f);
			fseek(f, size > (long)sizeof buf ? size - (long)sizeof buf : 0, SEEK_SET);
			while (fgets(buf, sizeof buf, f))
				fprintf(stderr, "# %s", buf);
			fclose(f);
		}
		rc = -1;
	}
	if (s->dir[0])
		nftw(s->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(s);
	return rc;
}

/* ---- HTTP with libcurl ---- */

typedef struct resp {
	long status;
	char *body;
	size_t len;
	char headers[4096];
} resp;

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
	resp *r = ud;
	char *b = realloc(r->body, r->len + sz * n + 1);
	if (!b)
		return 0;
	memcpy(b + r->len, p, sz * n);
	r->len += sz * n;
	b[r->len] = 0;
	r->body = b;
	return sz * n;
}

static size_t on_hdr(char *p, size_t sz, size_t n, void *ud)
{
	resp *r = ud;
	size_t used = strlen(r->headers);
	if (used + sz * n < sizeof r->headers) {
		memcpy(r->headers + used, p, sz * n);
		r->headers[used + sz * n] = 0;
	}
	return sz * n;
}

/* method path [body] with extra headers (NULL-terminated list or NULL). */
static resp req(const server *s, const char *method, const char *path, const char *body, long len,
		const char *const *hdrs)
{
	resp r = {0};
	char url[4096];
	snprintf(url, sizeof url, "%s%s", s->url, path);
	CURL *e = curl_easy_init();
	assert_non_null(e);
	struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
	for (int i = 0; hdrs && hdrs[i]; i++)
		hl = curl_slist_append(hl, hdrs[i]);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_hdr);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, &r);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
	if (!strcmp(method, "HEAD"))
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	else if (strcmp(method, "GET"))
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, len < 0 ? (long)strlen(body) : len);
	}
	CURLcode rc = curl_easy_perform(e);
	if (rc != CURLE_OK)
		fail_msg("%s %s: %s", method, url, curl_easy_strerror(rc));
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
	curl_slist_free_all(hl);
	curl_easy_cleanup(e);
	return r;
}

static resp get(const server *s, const char *path)
{
	return req(s, "GET", path, NULL, 0, NULL);
}

static void resp_free(resp *r)
{
	free(r->body);
	r->body = NULL;
}

/* The value of header name in r (case-insensitive), copied into out. */
static int header(const resp *r, const char *name, char *out, size_t cap)
{
	size_t n = strlen(name);
	for (const char *p = r->headers; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncasecmp(p, name, n) && p[n] == ':') {
			const char *v = p + n + 1;
			while (*v == ' ')
				v++;
			snprintf(out, cap, "%.*s", (int)strcspn(v, "\r\n"), v);
			return 1;
		}
	}
	return 0;
}

/* r must have the status and a JSON {"error": ..., "code": ...} whose error
 * contains want and, when code is set, whose code is code. */
static void expect_fail(resp r, long status, const char *code, const char *want)
{
	if (r.status != status)
		fail_msg("status %ld, expected %ld; body: %s", r.status, status, r.body ? r.body : "");
	char ct[128] = "";
	header(&r, "Content-Type", ct, sizeof ct);
	assert_string_equal(ct, "application/json");
	json_t *o = json_loadb(r.body ? r.body : "", r.len, 0, NULL);
	const char *msg = json_string_value(json_object_get(o, "error"));
	const char *got = json_string_value(json_object_get(o, "code"));
	if (!msg || !got)
		fail_msg("no JSON error and code in: %s", r.body ? r.body : "");
	if (want && !strstr(msg, want))
		fail_msg("error '%s' does not mention '%s'", msg, want);
	if (code && strcmp(got, code))
		fail_msg("code '%s', expected '%s' (error '%s')", got, code, msg);
	json_decref(o);
	resp_free(&r);
}

static void expect_error(resp r, long status, const char *want)
{
	expect_fail(r, status, NULL, want);
}

/* expect_fail, and the body's "node" too (when node is not NULL). */
static void expect_coded(resp r, long status, const char *code, const char *node, const char *want)
{
	if (node) {
		json_t *o = json_loadb(r.body ? r.body : "", r.len, 0, NULL);
		const char *n = json_string_value(json_object_get(o, "node"));
		if (!n || strcmp(n, node))
			fail_msg("node %s, expected %s; body: %s", n ? n : "(none)", node, r.body ? r.body : "");
		json_decref(o);
	}
	expect_fail(r, status, code, want);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *p = malloc((size_t)n + 1);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	p[n] = 0;
	fclose(f);
	if (len)
		*len = (size_t)n;
	return p;
}

/* The value of an unlabelled metric (or a full "name{labels}") in /metrics. */
static double metric(const server *s, const char *name)
{
	resp r = get(s, "/metrics");
	assert_int_equal(r.status, 200);
	double v = -1;
	size_t n = strlen(name);
	for (char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, name, n) && p[n] == ' ')
			v = strtod(p + n + 1, NULL);
	resp_free(&r);
	return v;
}

/* The value of a metric, read with the given headers (a token). */
static double metric_as(const server *s, const char *name, const char *const *hdrs)
{
	resp r = req(s, "GET", "/metrics", NULL, 0, hdrs);
	assert_int_equal(r.status, 200);
	double v = 0;
	size_t n = strlen(name);
	for (char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, name, n) && p[n] == ' ')
			v = strtod(p + n + 1, NULL);
	resp_free(&r);
	return v;
}

/* The metric once it has reached want (coild counts a request after its
 * response has gone out, so a count can lag the answer briefly), or its value
 * after 5 s. */
static double metric_reaching(const server *s, const char *name, const char *const *hdrs, double want)
{
	double v = metric_as(s, name, hdrs);
	for (int i = 0; i < 500 && v < want; i++) {
		sleep_ms(10);
		v = metric_as(s, name, hdrs);
	}
	return v;
}

/* The metric once two readings 50 ms apart agree (earlier requests counted). */
static double metric_settled(const server *s, const char *name, const char *const *hdrs)
{
	double v = metric_as(s, name, hdrs), prev;
	do {
		prev = v;
		sleep_ms(50);
		v = metric_as(s, name, hdrs);
	} while (v != prev);
	return v;
}

/* Put a fake artifact straight into the server's cache directory (shared
 * by design): returns its key in key_out and its sha256. */
static void store_fake(const server *s, const char *seed, char key[65], char sha[65])
{
	coil_err err = {0};
	coil_cache *c;
	if (cache_open(s->cache, 0, &c, &err))
		fail_msg("cache_open: %s", err.msg);
	char bytes[3000];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (char)(seed[i % strlen(seed)] + i);
	assert_int_equal(cache_sha256_bytes(seed, strlen(seed), key, &err), 0);
	assert_int_equal(cache_sha256_bytes(bytes, sizeof bytes, sha, &err), 0);
	const char canon[] = "{\"format\":\"coil-graph\",\"fake\":1}";
	if (cache_store_bytes(c, key, bytes, sizeof bytes, canon, strlen(canon), "{\"target\":\"generic\",\"fake\":true}",
			      &err))
		fail_msg("cache_store_bytes: %s", err.msg);
	cache_close(c);
}

/* ---- raw bytes on a socket ---- */

/* A TCP connection to s from the loopback address src ("127.0.0.2": another
 * client address on the same machine), or -1. */
static int raw_connect(const server *s, const char *src)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = {.sin_family = AF_INET}, to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
	inet_pton(AF_INET, src, &a.sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Read from fd until the peer closes, an error, ms pass, or (unless NULL)
 * until is in what was read; returns the bytes read (NUL-terminated in out)
 * and in *closed whether the peer closed. */
static size_t raw_read_until(int fd, char *out, size_t cap, long ms, const char *until, int *closed)
{
	size_t n = 0;
	*closed = 0;
	for (long waited = 0; n + 1 < cap;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, ms - waited < 50 ? (int)(ms - waited) : 50) <= 0) {
			if ((waited += 50) >= ms)
				break;
			continue;
		}
		ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
		if (k <= 0) {
			*closed = 1;
			break;
		}
		n += (size_t)k;
		out[n] = 0;
		if (until && strstr(out, until))
			break;
	}
	out[n] = 0;
	return n;
}

static size_t raw_read(int fd, char *out, size_t cap, long ms, int *closed)
{
	return raw_read_until(fd, out, cap, ms, NULL, closed);
}

/* Send the request text (len bytes) on a new connection and read the answer
 * until the server closes (or 5 s pass). */
static void raw_exchange(const server *s, const char *text, size_t len, char *out, size_t cap, int *closed)
{
	int fd = raw_connect(s, "127.0.0.1");
	assert_true(fd >= 0);
	assert_true(send(fd, text, len, MSG_NOSIGNAL) == (ssize_t)len);
	raw_read(fd, out, cap, 5000, closed);
	close(fd);
}

/* ---- compiling, with the codegen skip ---- */

/* POST a graph file; when this build has no code generator ("codegen not
 * available"), skip the test. */
static json_t *compile_or_skip(const server *s, const char *graph_path, const char *query)
{
	size_t len;
	char *g = slurp(graph_path, &len);
	char path[256];
	snprintf(path, sizeof path, "/v1/compile%s", query ? query : "");
	resp r = req(s, "POST", path, g, (long)len, NULL);
	free(g);
	if (r.status >= 400 && r.body && strstr(r.body, "codegen not available")) {
		resp_free(&r);
		print_message("# this coild has no code generator (501 codegen not available)\n");
		skip();
	}
	if (r.status != 200)
		fail_msg("compile %s: HTTP %ld: %s", graph_path, r.status, r.body ? r.body : "");
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	assert_non_null(o);
	resp_free(&r);
	return o;
}

static void skip_if_no_codegen(const char *err)
{
	if (err && strstr(err, "codegen not available")) {
		print_message("# this coild has no code generator (501 codegen not available)\n");
		skip();
	}
}

/* POST a graph file as an asynchronous compile (path: "/v1/compile" and a
 * query) with headers hdrs: 202, and the job's path (its Location, also its
 * "url") into loc. */
static void submit_async(const server *s, const char *graph_path, const char *path, const char *const *hdrs,
			 char *loc, size_t cap)
{
	size_t len;
	char *g = slurp(graph_path, &len);
	char *env;
	assert_true(asprintf(&env, "{\"graph\": %s, \"async\": true}", g) > 0);
	free(g);
	resp r = req(s, "POST", path, env, -1, hdrs);
	free(env);
	if (r.status >= 400 && r.body && strstr(r.body, "codegen not available"))
		skip();
	if (r.status != 202)
		fail_msg("async compile of %s: HTTP %ld: %s", graph_path, r.status, r.body ? r.body : "");
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	assert_true(header(&r, "Location", loc, cap));
	assert_string_equal(json_string_value(json_object_get(o, "url")), loc);
	json_decref(o);
	resp_free(&r);
}

/* GET the job at loc (headers hdrs) every 20 ms until its status is in
 * want (e.g. "done failed") or ms have passed; returns its last JSON. */
static json_t *job_poll(const server *s, const char *loc, const char *const *hdrs, const char *want, long ms)
{
	json_t *j = NULL;
	for (long waited = 0;; waited += 20) {
		resp r = req(s, "GET", loc, NULL, 0, hdrs);
		if (r.status != 200)
			fail_msg("GET %s: HTTP %ld: %s", loc, r.status, r.body ? r.body : "");
		json_decref(j);
		j = json_loadb(r.body, r.len, 0, NULL);
		resp_free(&r);
		const char *st = json_string_value(json_object_get(j, "status"));
		assert_non_null(st);
		if (strstr(want, st) || waited >= ms)
			return j;
		sleep_ms(20);
	}
}

/* ---- group: a plain server ---- */

static int plain_setup(void **state)
{
	server *s = calloc(1, sizeof *s);
	static const char *const extra[] = {"--max-body", "65536", "--max-nodes", "3", NULL};
	server_start(s, extra);
	*state = s;
	return 0;
}

static int group_teardown(void **state)
{
	return server_free(*state);
}

static void test_healthz(void **state)
{
	server *s = *state;
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	json_t *o = json_loads(r.body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(o, "status")), "ok");
	assert_int_equal(json_integer_value(json_object_get(o, "workers")), 2);
	json_decref(o);
	resp_free(&r);
	r = req(s, "HEAD", "/healthz", NULL, 0, NULL);
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

static void test_targets(void **state)
{
	server *s = *state;
	resp r = get(s, "/v1/targets");
	assert_int_equal(r.status, 200);
	json_t *o = json_loads(r.body, 0, NULL);
	const char *native = json_string_value(json_object_get(o, "native"));
	assert_non_null(native);
	json_t *list = json_object_get(o, "targets");
	assert_true(json_array_size(list) >= 1);
	int found = 0;
	size_t i;
	json_t *t;
	json_array_foreach(list, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		assert_non_null(name);
		assert_int_equal(coil_target_supported(name), json_is_true(json_object_get(t, "runs_here")));
		if (!strcmp(name, native)) {
			found = 1;
			assert_true(json_is_true(json_object_get(t, "runs_here")));
		}
	}
	assert_true(found);
	assert_int_equal(coil_target_supported("native"), -1);
	assert_int_equal(coil_target_supported("x86-64-v9"), -1);
	json_decref(o);
	resp_free(&r);
}

/* Prometheus text format: HELP/TYPE comments, then "name{labels} value". */
static void test_metrics_format(void **state)
{
	server *s = *state;
	resp x = get(s, "/nope");
	resp_free(&x);
	assert_true(metric_reaching(s, "coild_requests_total{route=\"unknown\",code=\"404\"}", NULL, 1) >= 1);
	resp r = get(s, "/metrics");
	assert_int_equal(r.status, 200);
	char ct[128];
	assert_true(header(&r, "Content-Type", ct, sizeof ct));
	assert_non_null(strstr(ct, "text/plain; version=0.0.4"));
	static const char *const want[] = {
		"# TYPE coild_requests_total counter", "coild_requests_total{route=\"unknown\",code=\"404\"} ",
		"# TYPE coild_compile_seconds histogram", "coild_compile_seconds_bucket{le=\"+Inf\"} ",
		"coild_compile_seconds_sum ", "coild_compile_seconds_count ", "coild_cache_hits_total ",
		"coild_cache_misses_total ", "coild_compiles_total ", "coild_bytes_served_total ",
		"coild_cache_evictions_total ", "coild_queue_depth ",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		if (!strstr(r.body, want[i]))
			fail_msg("/metrics lacks '%s'", want[i]);
	/* every sample line: a metric name, optional labels, one number */
	for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
		if (line[0] == '#') {
			if (strncmp(line, "# HELP ", 7) && strncmp(line, "# TYPE ", 7))
				fail_msg("unexpected /metrics comment: %s", line);
			continue;
		}
		char *sp = strrchr(line, ' ');
		assert_non_null(sp);
		char *end;
		strtod(sp + 1, &end);
		if (*end)
			fail_msg("metric line '%s' has no numeric value", line);
		assert_true(!strncmp(line, "coild_", 6));
		char *brace = strchr(line, '{');
		if (brace && brace < sp)
			assert_true(sp[-1] == '}');
	}
	resp_free(&r);
}

static void test_bad_requests(void **state)
{
	server *s = *state;
	size_t len;
	char *g;

	expect_error(req(s, "POST", "/v1/compile", "{\"format\": ", -1, NULL), 400, "request body: invalid JSON");
	expect_error(req(s, "POST", "/v1/compile", "", 0, NULL), 400, "empty body");
	expect_error(req(s, "POST", "/v1/compile", "[1,2]", -1, NULL), 400, "JSON object");
	g = slurp(GRAPHS "/invalid.json", &len);
	expect_coded(req(s, "POST", "/v1/compile", g, (long)len, NULL), 400, "bad_input", "bad",
		     "node 'bad' (aten.add.Tensor): args[1] 'other': unknown value 'nosuchvalue'");
	free(g);
	/* one rule for duplicate keys, whichever way the graph comes in */
	static const char dup_raw[] = "{\"format\": \"coil-graph\", \"version\": 1, \"version\": 1, \"inputs\": [], "
				      "\"nodes\": [], \"outputs\": []}";
	static const char dup_env[] = "{\"graph\": {\"format\": \"coil-graph\", \"version\": 1, \"version\": 1, "
				      "\"inputs\": [], \"nodes\": [], \"outputs\": []}}";
	static const char dup_top[] = "{\"graph\": {}, \"target\": \"generic\", \"target\": \"x86-64-v3\"}";
	expect_coded(req(s, "POST", "/v1/compile", dup_raw, -1, NULL), 400, "bad_input", NULL, "duplicate object key");
	expect_coded(req(s, "POST", "/v1/compile", dup_env, -1, NULL), 400, "bad_input", NULL, "duplicate object key");
	expect_coded(req(s, "POST", "/v1/compile", dup_top, -1, NULL), 400, "bad_input", NULL, "duplicate object key");
	/* an op this coil does not know: 4xx naming the node and the op */
	static const char unknown_op[] =
		"{\"graph\": {\"format\": \"coil-graph\", \"version\": 1, \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", "
		"\"shape\": [4]}], \"nodes\": [{\"id\": \"frob\", \"op\": \"aten.frobnicate.default\", \"args\": [\"x\"], "
		"\"outputs\": [\"y\"]}], \"outputs\": [\"y\"]}}";
	expect_coded(req(s, "POST", "/v1/compile", unknown_op, -1, NULL), 422, "unsupported", "frob",
		     "node 'frob': unknown op 'aten.frobnicate.default'");
	expect_error(req(s, "POST", "/v1/compile", "{\"graph\": {}, \"colour\": 1}", -1, NULL), 400,
		     "unknown field \"colour\"");
	expect_error(req(s, "POST", "/v1/compile", "{\"graph\": 3}", -1, NULL), 400, "\"graph\" must be");
	expect_error(req(s, "POST", "/v1/compile", "{\"graph\": {}, \"options\": {\"opt_level\": 9}}", -1, NULL), 400,
		     "opt_level");
	g = slurp(GRAPHS "/tanh.json", &len);
	expect_error(req(s, "POST", "/v1/compile?target=pentium", g, (long)len, NULL), 400, "unknown target 'pentium'");
	expect_error(req(s, "POST", "/v1/compile?opt_level=x", g, (long)len, NULL), 400, "opt_level");
	static const char *const xml[] = {"Content-Type: application/xml", NULL};
	expect_error(req(s, "POST", "/v1/compile", g, (long)len, xml), 415, "Content-Type");
	free(g);
	/* more nodes than --max-nodes 3 */
	g = slurp(GRAPHS "/pointwise.json", &len);
	expect_coded(req(s, "POST", "/v1/compile", g, (long)len, NULL), 413, "limit", NULL, "at most 3");
	free(g);

	expect_error(get(s, "/v2/compile"), 404, "no route");
	expect_error(get(s, "/"), 404, "no route");
	expect_error(get(s, "/v1/artifacts/"), 404, "no route");
	expect_error(get(s, "/v1/artifacts/abc"), 400, "64 lowercase hex");
	expect_error(get(s, "/v1/artifacts/ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"), 400,
		     "64 lowercase hex");
	expect_error(get(s, "/v1/artifacts/abc/meta"), 400, "64 lowercase hex");
	expect_error(get(s, "/v1/artifacts/../../etc/passwd"), 404, NULL);
	expect_error(get(s, "/v1/artifacts/..%2F..%2Fetc%2Fpasswd"), 404, NULL);
	expect_error(get(s, "/v1/artifacts/%2e%2e"), 400, "64 lowercase hex");
	expect_error(get(s, "/v1/artifacts/0000000000000000000000000000000000000000000000000000000000000000/../../../etc/passwd"),
		     404, NULL);
	expect_error(get(s, "/v1/artifacts/0000000000000000000000000000000000000000000000000000000000000000"), 404,
		     "no artifact");
	expect_error(get(s, "/v1/artifacts/0000000000000000000000000000000000000000000000000000000000000000/meta"), 404,
		     "no artifact");
	expect_error(get(s, "/v1/jobs/xyz"), 400, "job id");
	expect_error(get(s, "/v1/jobs/0123456789abcdef0123456789abcdef"), 404, "no job");

	resp r = get(s, "/v1/compile");
	char allow[64] = "";
	assert_true(header(&r, "Allow", allow, sizeof allow));
	assert_string_equal(allow, "POST");
	expect_error(r, 405, "not allowed");
	expect_error(req(s, "PUT", "/v1/artifacts/0000000000000000000000000000000000000000000000000000000000000000", "x",
			 1, NULL),
		     405, "not allowed");
	expect_error(req(s, "POST", "/healthz", "{}", -1, NULL), 405, "not allowed");
}

/* Every error carries the code its status comes from (docs/api.md, issue
 * #15): an op coil does not know is the graph's fault but not a malformed
 * request (422, naming the node and the op); the HTTP layer's own refusals
 * have codes too. */
static void test_error_codes(void **state)
{
	server *s = *state;
	size_t len;
	char *g = slurp(GRAPHS "/tanh.json", &len);
	char *op = strstr(g, "\"aten.tanh\"");
	assert_non_null(op);
	char *bad;
	assert_true(asprintf(&bad, "%.*s\"aten.nonexistent.default\"%s", (int)(op - g), g, op + strlen("\"aten.tanh\"")) >
		    0);
	resp r = req(s, "POST", "/v1/compile", bad, -1, NULL);
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(o, "node")), "t");
	json_decref(o);
	expect_fail(r, 422, "unsupported", "node 't': unknown op 'aten.nonexistent.default'");
	free(bad);

	expect_fail(req(s, "POST", "/v1/compile", "{\"format\": ", -1, NULL), 400, "bad_input", "request body: invalid JSON");
	expect_fail(req(s, "POST", "/v1/compile?target=pentium", g, (long)len, NULL), 400, "bad_input",
		    "unknown target 'pentium'");
	static const char *const xml[] = {"Content-Type: application/xml", NULL};
	expect_fail(req(s, "POST", "/v1/compile", g, (long)len, xml), 415, "unsupported_media_type", NULL);
	free(g);
	g = slurp(GRAPHS "/pointwise.json", &len); /* more nodes than --max-nodes 3 */
	expect_fail(req(s, "POST", "/v1/compile", g, (long)len, NULL), 413, "limit", "at most 3");
	free(g);
	expect_fail(get(s, "/nope"), 404, "not_found", "no route");
	expect_fail(get(s, "/v1/compile"), 405, "method_not_allowed", NULL);
	expect_fail(get(s, "/v1/artifacts/abc"), 400, "bad_input", NULL);
	expect_fail(get(s, "/v1/jobs/0123456789abcdef0123456789abcdef"), 404, "not_found", NULL);
}

static void test_oversize_body(void **state)
{
	server *s = *state;
	size_t n = 200000;
	char *big = malloc(n);
	assert_non_null(big);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	/* with Content-Length: refused before the body is read */
	expect_error(req(s, "POST", "/v1/compile", big, (long)n, NULL), 413, "limit of 65536 bytes");
	/* chunked, no length: refused once the body passes the limit */
	static const char *const chunked[] = {"Transfer-Encoding: chunked", NULL};
	expect_error(req(s, "POST", "/v1/compile", big, (long)n, chunked), 413, "limit of 65536 bytes");
	free(big);
	/* libcoil with a body far over the limit (the server answers before reading it, and
	 * a reset may cut the upload): the server's 413 and message, and the body sent once,
	 * not again on each retry */
	n = 8u << 20;
	big = malloc(n);
	assert_non_null(big);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	const char *m413 = "coild_requests_total{route=\"compile\",code=\"413\"}";
	double before = metric_settled(s, m413, NULL);
	char cache[PATH_MAX + 16];
	snprintf(cache, sizeof cache, "%s/big-cache", s->dir);
	coil_client_opts o = {.cache_dir = cache, .backoff_ms = 1};
	coil_client *c;
	assert_int_equal(coil_client_create(s->url, NULL, &o, &c), 0);
	coil_compile_info info;
	assert_int_not_equal(coil_compile(c, big, n, NULL, &info), 0);
	print_message("# libcoil, 8 MiB body: %s\n", coil_last_error());
	assert_non_null(strstr(coil_last_error(), "HTTP 413"));
	assert_non_null(strstr(coil_last_error(), "limit of 65536 bytes"));
	coil_client_destroy(c);
	free(big);
	before = before < 0 ? 0 : before;
	metric_reaching(s, m413, NULL, before + 1);
	assert_true(metric_settled(s, m413, NULL) == before + 1);
	/* the server is fine afterwards */
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

/* Requests whose framing could be read two ways (request smuggling behind a
 * proxy that reads them the other way) are refused with 400, and their
 * connection is closed: the request hidden behind them is never answered. */
static void test_ambiguous_framing(void **state)
{
	server *s = *state;
	static const struct {
		const char *text, *want;
	} bad[] = {
		{"POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}"
		 "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		 "2 Content-Length headers"},
		{"POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		 "2 Content-Length headers"},
		{"POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		 "both Content-Length and Transfer-Encoding"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"
		 "0\r\n\r\n",
		 "2 Transfer-Encoding headers"},
		{"POST /v1/compile HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		 "only chunked"},
		{"POST /v1/compile HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "needs HTTP/1.1"},
		{"GET /healthz HTTP/1.1\r\n\r\n", "needs a Host header"},
		{"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "2 Host headers"},
		{"GET /healthz%00/x HTTP/1.1\r\nHost: x\r\n\r\n", "control character"},
		{"GET /v1/artifacts/%0a HTTP/1.1\r\nHost: x\r\n\r\n", "control character"},
		{"GET /v1/targets?x=%7f HTTP/1.1\r\nHost: x\r\n\r\n", "control character"},
		{"GET /healthz?x=\x01 HTTP/1.1\r\nHost: x\r\n\r\n", "control character"},
	};
	char out[8192];
	int closed;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		raw_exchange(s, bad[i].text, strlen(bad[i].text), out, sizeof out, &closed);
		if (strncmp(out, "HTTP/1.1 400 ", 13) || !strstr(out, "\"code\":\"bad_input\"") || !strstr(out, bad[i].want))
			fail_msg("case %zu: want 400 '%s', got: %s", i, bad[i].want, out);
		if (!closed || strstr(out, "HTTP/1.1 200"))
			fail_msg("case %zu: the connection stayed open or the hidden request was answered: %s", i, out);
	}
	/* HTTP/1.0 needs no Host */
	const char *old = "GET /healthz HTTP/1.0\r\n\r\n";
	raw_exchange(s, old, strlen(old), out, sizeof out, &closed);
	if (strncmp(out, "HTTP/1.1 200 ", 13) && strncmp(out, "HTTP/1.0 200 ", 13))
		fail_msg("HTTP/1.0 without Host: %s", out);
}

/* A client that half-closes its connection after a request and then closes
 * it leaves libmicrohttpd (0.9.75) with the connection in CLOSE_WAIT until
 * its idle timeout (60 s), counted against the address's limit (64): three
 * rounds of 60 such clients (each reads its answer, then closes) used to
 * lock the address out.  The sweep
 * reclaims them within a second or two. */
static void test_hangups(void **state)
{
	server *s = *state;
	const char *text = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
	for (int round = 0; round < 3; round++) {
		int fds[60];
		for (int i = 0; i < 60; i++) {
			char out[4096];
			int closed;
			fds[i] = raw_connect(s, "127.0.0.1");
			if (fds[i] >= 0 && send(fds[i], text, strlen(text), MSG_NOSIGNAL) > 0) {
				shutdown(fds[i], SHUT_WR);
				raw_read_until(fds[i], out, sizeof out, 2000, "}\n", &closed);
			}
		}
		for (int i = 0; i < 60; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	}
	sleep_ms(2500);
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

/* A chunked body has no length to refuse before it is read: past --max-body
 * the server answers 413 in mid-body and closes the connection, instead of
 * reading on without end. */
static void test_chunked_over_limit(void **state)
{
	server *s = *state;
	int fd = raw_connect(s, "127.0.0.1");
	assert_true(fd >= 0);
	const char *head = "POST /v1/compile HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
	assert_true(send(fd, head, strlen(head), MSG_NOSIGNAL) > 0);
	static char chunk[8200];
	int hn = snprintf(chunk, sizeof chunk, "%x\r\n", 8192);
	memset(chunk + hn, ' ', 8192);
	memcpy(chunk + hn + 8192, "\r\n", 2);
	size_t clen = (size_t)hn + 8194, sent = 0, cap = (size_t)256 << 20;
	/* send until the server hangs up (a bounded amount beyond the limit sits
	 * in the socket buffers meanwhile) */
	while (sent < cap) {
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		if (poll(&pf, 1, 5000) <= 0)
			fail_msg("the server stopped reading after %zu bytes but did not close", sent);
		ssize_t k = send(fd, chunk, clen, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && errno != EAGAIN)
			break;
		if (k > 0)
			sent += (size_t)k;
	}
	if (sent >= cap)
		fail_msg("the server read %zu bytes of a body over its 64 KiB limit", sent);
	char out[4096];
	int closed;
	raw_read(fd, out, sizeof out, 5000, &closed);
	close(fd);
	if (strncmp(out, "HTTP/1.1 413 ", 13) || !strstr(out, "\"code\":\"limit\"") || !strstr(out, "limit of 65536 bytes"))
		fail_msg("after %zu bytes: %s", sent, out);
	print_message("# chunked body cut after %zu bytes sent (limit 65536)\n", sent);
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

/* Artifact routes on entries put in the cache directory directly: they need
 * no compiler. */
static void test_artifact_routes(void **state)
{
	server *s = *state;
	char key[65], sha[65], path[256], etag[100], cl[32], quoted[80];
	store_fake(s, "artifact-routes", key, sha);
	double served0 = metric(s, "coild_bytes_served_total");

	snprintf(path, sizeof path, "/v1/artifacts/%s", key);
	resp r = get(s, path);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.len, 3000);
	char got[65];
	coil_err err;
	assert_int_equal(cache_sha256_bytes(r.body, r.len, got, &err), 0);
	assert_string_equal(got, sha);
	snprintf(quoted, sizeof quoted, "\"%s\"", sha);
	assert_true(header(&r, "ETag", etag, sizeof etag));
	assert_string_equal(etag, quoted);
	assert_true(header(&r, "Content-Length", cl, sizeof cl));
	assert_string_equal(cl, "3000");
	resp_free(&r);
	assert_true(metric(s, "coild_bytes_served_total") >= served0 + 3000);

	r = req(s, "HEAD", path, NULL, 0, NULL);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.len, 0);
	assert_true(header(&r, "Content-Length", cl, sizeof cl));
	assert_string_equal(cl, "3000");
	resp_free(&r);

	char inm[120];
	snprintf(inm, sizeof inm, "If-None-Match: %s", quoted);
	const char *const h304[] = {inm, NULL};
	r = req(s, "GET", path, NULL, 0, h304);
	assert_int_equal(r.status, 304);
	assert_int_equal(r.len, 0);
	assert_true(header(&r, "ETag", etag, sizeof etag));
	resp_free(&r);
	const char *const hstale[] = {"If-None-Match: \"0000\"", NULL};
	r = req(s, "GET", path, NULL, 0, hstale);
	assert_int_equal(r.status, 200);
	resp_free(&r);

	snprintf(path, sizeof path, "/v1/artifacts/%s/meta", key);
	r = get(s, path);
	assert_int_equal(r.status, 200);
	json_t *m = json_loadb(r.body, r.len, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(m, "sha256")), sha);
	assert_string_equal(json_string_value(json_object_get(m, "key")), key);
	assert_int_equal(json_integer_value(json_object_get(m, "size")), 3000);
	assert_string_equal(json_string_value(json_object_get(m, "target")), "generic");
	json_decref(m);
	resp_free(&r);

	snprintf(path, sizeof path, "/v1/artifacts/%s/graph", key);
	r = get(s, path);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "{\"format\":\"coil-graph\",\"fake\":1}");
	resp_free(&r);

	snprintf(path, sizeof path, "/v1/artifacts/%s", key);
	r = req(s, "DELETE", path, NULL, 0, NULL);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	expect_error(get(s, path), 404, "no artifact");
	expect_error(req(s, "DELETE", path, NULL, 0, NULL), 404, "no artifact");
}

/* Dynamic decisions: stored, merged with what other clients stored (the
 * first name of a dim wins), served; bad ones refused naming the field,
 * leaving the stored one as it was. */
static void test_decisions(void **state)
{
	server *s = *state;
	const char *key = "d0d1d2d3d4d5d6d7d8d9dadbdcdddedfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf";
	char path[128];
	snprintf(path, sizeof path, "/v1/decisions/%s", key);
	expect_error(get(s, path), 404, "no decision");
	const char *const ct[] = {"Content-Type: application/json", NULL};
	resp r = req(s, "POST", path, "{\"version\": 1, \"module\": \"Enc\", \"symbolic\": [[0, 1, \"seq\"], [0, 0, \"batch\"]]}",
		     -1, ct);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	r = req(s, "POST", path, "{\"version\": 1, \"symbolic\": [[1, 0, \"batch\"], [0, 1, \"s0\"]]}", -1, ct);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	r = get(s, path);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "{\"version\":1,\"symbolic\":[[0,0,\"batch\"],[0,1,\"seq\"],[1,0,\"batch\"]]}\n");
	resp_free(&r);
	static const struct { const char *body, *want; } bad[] = {
		{"{\"version\": 2, \"symbolic\": []}", "\"version\" must be 1"},
		{"{\"version\": 1, \"symbolic\": [[0, 0]]}", "\"symbolic[0]\" must be [input, dim, name]"},
		{"{\"version\": 1, \"symbolic\": [[0, 99, \"a\"]]}", "\"symbolic[0]\" must be [input, dim, name]"},
		{"{\"version\": 1, \"symbolic\": [[0, 0, \"a\"], [0, 1, \"b c\"]]}", "\"symbolic[1][2]\" must be an identifier"},
		{"{\"version\": 1, \"symbolic\": [], \"extra\": 1}", "unknown field \"extra\""},
		{"{\"version\": 1, \"version\": 1, \"symbolic\": []}", "not JSON"},
		{"[1]", "must be a JSON object"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		expect_error(req(s, "POST", path, bad[i].body, -1, ct), 400, bad[i].want);
	r = get(s, path);
	assert_string_equal(r.body, "{\"version\":1,\"symbolic\":[[0,0,\"batch\"],[0,1,\"seq\"],[1,0,\"batch\"]]}\n");
	resp_free(&r);
	expect_error(get(s, "/v1/decisions/abc"), 400, "decision key 'abc' is not 64 lowercase hex digits");
	expect_error(req(s, "DELETE", path, NULL, 0, NULL), 405, "not allowed");
}

/* The client refuses bytes that do not hash to what the server announced,
 * and a local copy that was tampered with is replaced. */
static void test_tampered_artifact(void **state)
{
	server *s = *state;
	char key[65], sha[65], so[CACHE_PATH_MAX], local[PATH_MAX + 16], path[CACHE_PATH_MAX];
	store_fake(s, "tampered", key, sha);
	snprintf(local, sizeof local, "%s/local", s->dir);
	coil_client_opts o = {.cache_dir = local, .retries = -1};
	coil_client *c;
	assert_int_equal(coil_client_create(s->url, NULL, &o, &c), 0);

	/* a wrong expected sha256 is refused before any download */
	char wrong[65];
	memset(wrong, 'a', 64);
	wrong[64] = 0;
	assert_int_equal(coil_fetch(c, key, wrong, path, sizeof path), -1);
	assert_non_null(strstr(coil_last_error(), "refusing"));

	/* flip bytes in the served file (same size, so the index still agrees) */
	coil_err err = {0};
	coil_cache *sc;
	assert_int_equal(cache_open(s->cache, 0, &sc, &err), 0);
	assert_int_equal(cache_entry_paths(sc, key, so, NULL, sizeof so, &err), 0);
	cache_close(sc);
	int fd = open(so, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "XYZ", 3, 100), 3);
	close(fd);
	assert_int_equal(coil_fetch(c, key, NULL, path, sizeof path), -1);
	assert_non_null(strstr(coil_last_error(), "does not match"));
	assert_non_null(strstr(coil_last_error(), "refusing"));
	/* nothing was stored locally */
	coil_cache *lc;
	assert_int_equal(cache_open(local, 0, &lc, &err), 0);
	assert_int_equal(cache_get_meta(lc, key, NULL, NULL, NULL, &err), 0);
	cache_close(lc);

	/* a good artifact, fetched; then the local copy is tampered with */
	char key2[65], sha2[65];
	store_fake(s, "good-one", key2, sha2);
	assert_int_equal(coil_fetch(c, key2, sha2, path, sizeof path), 0);
	char got[65];
	assert_int_equal(cache_sha256_file(path, got, &err), 0);
	assert_string_equal(got, sha2);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "XYZ", 3, 10), 3);
	close(fd);
	/* loading by hash refuses the tampered file */
	coil_module *m = NULL;
	assert_int_equal(coil_module_open(path, sha2, NULL, &m), -1);
	assert_non_null(strstr(coil_last_error(), "refusing"));
	/* fetch notices, drops it and downloads a good copy */
	assert_int_equal(coil_fetch(c, key2, sha2, path, sizeof path), 0);
	assert_int_equal(cache_sha256_file(path, got, &err), 0);
	assert_string_equal(got, sha2);
	/* the fake is not a shared object: refused with a clear error before
	 * dlopen (no description in its bytes), no crash */
	assert_int_equal(coil_module_open(path, sha2, "generic", &m), -1);
	assert_non_null(strstr(coil_last_error(), "not a coil artifact"));
	/* an unknown target is refused before dlopen */
	assert_int_equal(coil_module_open(path, sha2, "x86-64-v9", &m), -1);
	assert_non_null(strstr(coil_last_error(), "unknown target 'x86-64-v9'"));
	coil_client_destroy(c);
}

/* curl --data-binary @graph.json 'URL/v1/compile?target=native', and the
 * envelope form. */
static void test_compile_with_curl(void **state)
{
	server *s = *state;
	json_t *first = compile_or_skip(s, GRAPHS "/tanh.json", "?target=native");
	json_decref(first);
	char cmd[3 * PATH_MAX];
	snprintf(cmd, sizeof cmd, "curl -sS --data-binary @%s/tanh.json '%s/v1/compile?target=native'", GRAPHS, s->url);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	json_error_t je;
	json_t *o = json_loadf(p, 0, &je);
	assert_int_equal(pclose(p), 0);
	if (!o)
		fail_msg("curl output is not JSON: %s", je.text);
	assert_true(cache_key_valid(json_string_value(json_object_get(o, "key"))));
	assert_true(cache_key_valid(json_string_value(json_object_get(o, "sha256"))));
	assert_true(json_is_true(json_object_get(o, "hit")));
	assert_true(json_is_number(json_object_get(o, "compile_ms")));
	char url[160];
	snprintf(url, sizeof url, "/v1/artifacts/%s", json_string_value(json_object_get(o, "key")));
	assert_string_equal(json_string_value(json_object_get(o, "url")), url);

	/* the envelope, with the same target and opt_level, gives the same key */
	size_t len;
	char *g = slurp(GRAPHS "/tanh.json", &len);
	char *env;
	assert_true(asprintf(&env, "{\"graph\": %s, \"target\": \"native\", \"options\": {\"opt_level\": 2}}", g) > 0);
	free(g);
	snprintf(cmd, sizeof cmd, "curl -sS -H 'Content-Type: application/json' --data-binary @- '%s/v1/compile'", s->url);
	char tmp[PATH_MAX + 16];
	snprintf(tmp, sizeof tmp, "%s/env.json", s->dir);
	FILE *f = fopen(tmp, "w");
	fputs(env, f);
	fclose(f);
	free(env);
	snprintf(cmd, sizeof cmd, "curl -sS -H 'Content-Type: application/json' --data-binary @%s '%s/v1/compile'", tmp,
		 s->url);
	p = popen(cmd, "r");
	json_t *o2 = json_loadf(p, 0, &je);
	assert_int_equal(pclose(p), 0);
	assert_non_null(o2);
	assert_string_equal(json_string_value(json_object_get(o2, "key")), json_string_value(json_object_get(o, "key")));
	/* another opt_level is another key */
	json_t *o3 = compile_or_skip(s, GRAPHS "/tanh.json", "?opt_level=1");
	assert_string_not_equal(json_string_value(json_object_get(o3, "key")),
				json_string_value(json_object_get(o, "key")));
	json_decref(o);
	json_decref(o2);
	json_decref(o3);
}

static void test_async_job(void **state)
{
	server *s = *state;
	char loc[128];
	submit_async(s, GRAPHS "/neg.json", "/v1/compile", NULL, loc, sizeof loc);
	json_t *j = job_poll(s, loc, NULL, "done failed", 60000);
	const char *status = json_string_value(json_object_get(j, "status"));
	if (!strcmp(status, "failed"))
		skip_if_no_codegen(json_string_value(json_object_get(j, "error")));
	assert_string_equal(status, "done");
	json_t *res = json_object_get(j, "result");
	assert_true(cache_key_valid(json_string_value(json_object_get(res, "key"))));
	assert_string_equal(json_string_value(json_object_get(j, "key")), json_string_value(json_object_get(res, "key")));
	json_decref(j);
}

/* 32 identical requests at once compile once. */
typedef struct {
	const char *url, *graph;
	coil_compile_info info;
	int rc;
	char err[512];
} compile_arg;

static void *compile_thread(void *p)
{
	compile_arg *a = p;
	coil_client *c;
	coil_client_opts o = {.retries = 8};
	a->rc = coil_client_create(a->url, NULL, &o, &c);
	if (a->rc == 0)
		a->rc = coil_compile_file(c, a->graph, NULL, &a->info);
	if (a->rc)
		snprintf(a->err, sizeof a->err, "%s", coil_last_error());
	coil_client_destroy(c);
	return NULL;
}

static void test_single_flight(void **state)
{
	server *s = *state;
	enum { N = 32 };
	compile_arg args[N];
	pthread_t th[N];
	double before = metric(s, "coild_compiles_total");
	for (int i = 0; i < N; i++) {
		args[i] = (compile_arg){.url = s->url, .graph = GRAPHS "/sigmoid.json"};
		assert_int_equal(pthread_create(&th[i], NULL, compile_thread, &args[i]), 0);
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < N; i++) {
		if (args[i].rc) {
			skip_if_no_codegen(args[i].err);
			fail_msg("request %d: %s", i, args[i].err);
		}
		assert_string_equal(args[i].info.key, args[0].info.key);
		assert_string_equal(args[i].info.sha256, args[0].info.sha256);
	}
	assert_true(metric(s, "coild_compiles_total") == before + 1);
	assert_true(metric(s, "coild_singleflight_joins_total") + metric(s, "coild_cache_hits_total") >= N - 1);
}

/* Fetch, verify, load and run through libcoil; compare with the reference
 * interpreter. */
static void test_fetch_load_run(void **state)
{
	server *s = *state;
	char local[PATH_MAX + 16];
	snprintf(local, sizeof local, "%s/run-cache", s->dir);
	coil_client_opts o = {.cache_dir = local};
	coil_client *c;
	assert_int_equal(coil_client_create(s->url, NULL, &o, &c), 0);
	coil_compile_info info;
	if (coil_compile_file(c, GRAPHS "/pointwise.json", NULL, &info) != 0) {
		skip_if_no_codegen(coil_last_error());
		/* this server has --max-nodes 3: the error names the limit */
		assert_non_null(strstr(coil_last_error(), "HTTP 413"));
	}
	coil_client_destroy(c);
	/* pointwise has 4 nodes; use a server without the limit */
	server *s2 = calloc(1, sizeof *s2);
	server_start(s2, NULL);
	assert_int_equal(coil_client_create(s2->url, NULL, &o, &c), 0);
	if (coil_compile_file(c, GRAPHS "/pointwise.json", NULL, &info) != 0) {
		char e[512];
		snprintf(e, sizeof e, "%s", coil_last_error());
		coil_client_destroy(c);
		server_free(s2);
		skip_if_no_codegen(e);
		fail_msg("compile: %s", e);
	}
	char path[CACHE_PATH_MAX];
	assert_int_equal(coil_fetch(c, info.key, info.sha256, path, sizeof path), 0);
	coil_module *m;
	if (coil_client_load(c, info.key, &m) != 0)
		fail_msg("load: %s", coil_last_error());
	assert_string_equal(coil_module_target(m), info.target);
	assert_non_null(strstr(coil_module_describe(m), "\"abi_version\""));

	enum { B = 3, F = 16 };
	float x[B * F], y[F], out[B * F];
	for (int i = 0; i < B * F; i++)
		x[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
	for (int i = 0; i < F; i++)
		y[i] = (float)i / 10.0f - 0.5f;
	coil_instance *in;
	if (coil_instance_create(m, NULL, 0, 1, &in) != 0)
		fail_msg("instance: %s", coil_last_error());
	int64_t xs[2] = {B, F}, ys[1] = {F}, os[8];
	const int64_t *shapes[2] = {xs, ys};
	assert_int_equal(coil_instance_output_shape(in, shapes, 0, os), 2);
	assert_int_equal(os[0], B);
	assert_int_equal(os[1], F);
	const void *ins[2] = {x, y};
	void *outs[1] = {out};
	if (coil_instance_run(in, ins, shapes, outs) != 0)
		fail_msg("run: %s", coil_last_error());

	coil_err err = {0};
	coil_graph *g = graph_load_file(GRAPHS "/pointwise.json", &err);
	assert_non_null(g);
	coil_tensor ti[2] = {{.dtype = g->vals[g->inputs[0]].dtype, .rank = 2, .shape = {B, F}, .data = x},
			     {.dtype = g->vals[g->inputs[1]].dtype, .rank = 1, .shape = {F}, .data = y}};
	coil_tensor to[1];
	memset(to, 0, sizeof to);
	if (interp_run(g, ti, NULL, to, &err) != 0)
		fail_msg("interp: %s", err.msg);
	const float *want = to[0].data;
	for (int i = 0; i < B * F; i++)
		if (fabsf(out[i] - want[i]) > 1e-5f * (1 + fabsf(want[i])))
			fail_msg("out[%d] = %g, the interpreter says %g", i, out[i], want[i]);
	tensor_free(&to[0]);
	graph_free(g);
	coil_instance_destroy(in);
	coil_module_close(m);
	coil_client_destroy(c);
	server_free(s2);
}

/* ---- group: tokens ---- */

/* s, a server with the tokens of AS_* below and the flags extra (at most 8),
 * in s->dir (made here unless set). */
static server *tokens_server(server *s, const char *const *extra)
{
	if (!s->dir[0]) {
		snprintf(s->dir, sizeof s->dir, "%s/coild-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		assert_non_null(mkdtemp(s->dir));
	}
	snprintf(s->cache, sizeof s->cache, "%s/cache", s->dir);
	char tokens[PATH_MAX + 16];
	snprintf(tokens, sizeof tokens, "%s/tokens", s->dir);
	FILE *f = fopen(tokens, "w");
	fputs("# test tokens\ncompile-token-1 compile,read\nread-token-12 read\nadmin-token-1 admin,read\n"
	      "compile-token-2 compile\n",
	      f);
	fclose(f);
	chmod(tokens, 0600);
	const char *args[12] = {"--tokens", tokens};
	for (int i = 0; extra && extra[i] && i < 8; i++)
		args[2 + i] = extra[i];
	server_start(s, args);
	return s;
}

static int auth_setup(void **state)
{
	*state = tokens_server(calloc(1, sizeof(server)), NULL);
	return 0;
}

/* The headers of the tokens of auth_setup. */
static const char *const AS_READ[] = {"Authorization: Bearer read-token-12", NULL};
static const char *const AS_COMPILE[] = {"Authorization: Bearer compile-token-1", NULL};
static const char *const AS_COMPILE2[] = {"Authorization: Bearer compile-token-2", NULL};
static const char *const AS_ADMIN[] = {"Authorization: Bearer admin-token-1", NULL};

static void test_tokens(void **state)
{
	server *s = *state;
	const char *const *rd = AS_READ, *const *cp = AS_COMPILE, *const *ad = AS_ADMIN;
	static const char *const bad[] = {"Authorization: Bearer not-a-token", NULL};
	static const char *const basic[] = {"Authorization: Basic dXNlcjpwYXNz", NULL};

	resp r = get(s, "/healthz"); /* open */
	assert_int_equal(r.status, 200);
	resp_free(&r);
	r = get(s, "/v1/targets");
	char wa[128];
	assert_true(header(&r, "WWW-Authenticate", wa, sizeof wa));
	assert_non_null(strstr(wa, "Bearer"));
	expect_error(r, 401, "Authorization: Bearer");
	expect_error(req(s, "GET", "/v1/targets", NULL, 0, bad), 401, "not valid");
	expect_error(req(s, "GET", "/v1/targets", NULL, 0, basic), 401, NULL);
	r = req(s, "GET", "/v1/targets", NULL, 0, rd);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	r = req(s, "GET", "/metrics", NULL, 0, rd);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	expect_error(req(s, "POST", "/v1/compile", "{}", -1, NULL), 401, NULL);
	expect_error(req(s, "POST", "/v1/compile", "{}", -1, rd), 403, "'compile' role");
	/* a compile token gets through to the graph validator */
	expect_error(req(s, "POST", "/v1/compile", "{}", -1, cp), 400, NULL);
	const char *k = "/v1/artifacts/0000000000000000000000000000000000000000000000000000000000000000";
	expect_error(req(s, "DELETE", k, NULL, 0, rd), 403, "'admin' role");
	expect_error(req(s, "DELETE", k, NULL, 0, cp), 403, "'admin' role");
	expect_error(req(s, "DELETE", k, NULL, 0, ad), 404, "no artifact");
	expect_error(req(s, "GET", k, NULL, 0, NULL), 401, NULL);
	expect_error(req(s, "GET", k, NULL, 0, rd), 404, "no artifact");

	/* libcoil sends its token */
	coil_client *c;
	coil_client_opts o = {.retries = -1};
	assert_int_equal(coil_client_create(s->url, "read-token-12", &o, &c), 0);
	coil_compile_info info;
	int crc = coil_compile_file(c, GRAPHS "/tanh.json", NULL, &info);
	char e403[512];
	snprintf(e403, sizeof e403, "%s", coil_last_error());
	coil_client_destroy(c);
	if (crc != -1 || !strstr(e403, "HTTP 403"))
		fail_msg("a read token must get 403 from compile: rc %d, '%s'", crc, e403);
	assert_int_equal(coil_client_create(s->url, "compile-token-1", &o, &c), 0);
	if (coil_compile_file(c, GRAPHS "/tanh.json", NULL, &info) != 0) {
		char e[512];
		snprintf(e, sizeof e, "%s", coil_last_error());
		coil_client_destroy(c);
		skip_if_no_codegen(e);
		fail_msg("compile with token: %s", e);
	}
	coil_client_destroy(c);
}

/* A job is read by the token that submitted it, or an admin token; another
 * compile token is told it does not exist. */
static void test_job_owners(void **state)
{
	server *s = *state;
	const char *const *a = AS_COMPILE, *const *b = AS_COMPILE2, *const *ad = AS_ADMIN, *const *rd = AS_READ;
	char loc[128];
	submit_async(s, GRAPHS "/neg.json", "/v1/compile", a, loc, sizeof loc);
	json_t *j = job_poll(s, loc, a, "queued running done failed", 0);
	json_decref(j);
	j = job_poll(s, loc, ad, "queued running done failed", 0);
	json_decref(j);
	expect_fail(req(s, "GET", loc, NULL, 0, b), 404, "not_found", "no job");
	expect_fail(req(s, "GET", loc, NULL, 0, rd), 403, "forbidden", "'compile' or 'admin'");
	expect_fail(req(s, "GET", loc, NULL, 0, NULL), 401, "unauthorized", NULL);
}

/* One request on a kept-alive handle: the next request on it goes over the
 * same connection, so the same libmicrohttpd thread (and stack) serves it. */
static long on_conn(CURL *e, const char *url, const char *body, size_t len, const char *token, char **out)
{
	resp r = {0};
	struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
	if (token)
		hl = curl_slist_append(hl, token);
	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	CURLcode rc = curl_easy_perform(e);
	curl_slist_free_all(hl);
	if (rc != CURLE_OK)
		fail_msg("%s %s: %s", body ? "POST" : "GET", url, curl_easy_strerror(rc));
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
	if (out)
		*out = r.body;
	else
		free(r.body);
	return r.status;
}

/* Issue #8: for routes without a path parameter (/v1/compile, /healthz, ...)
 * the router copied its scratch buffer without having written it.  A request
 * with a long segment where a key goes fills that buffer; its log line then
 * overwrites the buffer's end (and its NUL) on the handler thread's stack,
 * and the next request on the connection read past the buffer: under ASan
 * coild aborted and the client saw "server returned nothing". */
static void test_refusals_after_long_urls(void **state)
{
	server *s = *state;
	static const char *const rd[] = {"Authorization: Bearer read-token-12", NULL};
	char url[512], path[300];
	snprintf(path, sizeof path, "/v1/artifacts/%0200d/nope", 7);
	CURL *e = curl_easy_init();
	assert_non_null(e);
	const char *routes[] = {"/healthz", "/v1/compile", "/v1/targets", "/metrics"};
	for (int i = 0; i < 40; i++) {
		const char *to = routes[i % 4];
		snprintf(url, sizeof url, "%s%s", s->url, path);
		assert_int_equal(on_conn(e, url, NULL, 0, rd[0], NULL), 404);
		snprintf(url, sizeof url, "%s%s", s->url, to);
		int post = !strcmp(to, "/v1/compile");
		char *body = NULL;
		long st = on_conn(e, url, post ? "{}" : NULL, 2, rd[0], &body);
		if (st != (post ? 403 : 200))
			fail_msg("%s after a 404: HTTP %ld: %s", to, st, body ? body : "");
		free(body);
	}
	curl_easy_cleanup(e);
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

/* A refusal that comes before a large body is read (403 here) reaches the
 * client every time, and libcoil, retries or not, sends a refused request
 * once: only 503 and lost connections are worth another try. */
static void test_refused_large_bodies(void **state)
{
	server *s = *state;
	static const char *const rd[] = {"Authorization: Bearer read-token-12", NULL};
	const char *m403 = "coild_requests_total{route=\"compile\",code=\"403\"}";
	const char *m400 = "coild_requests_total{route=\"compile\",code=\"400\"}";
	size_t n = 4 << 20;
	char *big = malloc(n);
	assert_non_null(big);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	double before = metric_settled(s, m403, rd);
	coil_client *c;
	coil_client_opts o = {.retries = 3, .backoff_ms = 10};
	assert_int_equal(coil_client_create(s->url, "read-token-12", &o, &c), 0);
	int rounds = 20;
	for (int i = 0; i < rounds; i++) {
		size_t len = i % 2 ? n : 300 + (size_t)i * 4096; /* from 300 B to 80 kB, or far beyond the socket buffers */
		coil_compile_info info;
		int rc = coil_compile(c, big, len, NULL, &info);
		if (rc != -1 || !strstr(coil_last_error(), "HTTP 403"))
			fail_msg("refused compile %d (%zu bytes): rc %d, '%s'", i, len, rc, coil_last_error());
	}
	coil_client_destroy(c);
	/* the raw curl path too, with the body far from read */
	for (int i = 0; i < 5; i++)
		expect_error(req(s, "POST", "/v1/compile", big, (long)n, rd), 403, "'compile' role");
	double after = metric_reaching(s, m403, rd, before + rounds + 5);
	if (after != before + rounds + 5)
		fail_msg("%g refusals counted for %d refused requests", after - before, rounds + 5);

	/* a 400 (the body was read and is not a graph) is not retried either */
	static const char *const cp[] = {"Authorization: Bearer compile-token-1", NULL};
	before = metric_settled(s, m400, rd);
	assert_int_equal(coil_client_create(s->url, "compile-token-1", &o, &c), 0);
	coil_compile_info info;
	assert_int_equal(coil_compile(c, "{}", 2, NULL, &info), -1);
	assert_non_null(strstr(coil_last_error(), "HTTP 400"));
	coil_client_destroy(c);
	after = metric_reaching(s, m400, cp, before + 1);
	if (after != before + 1)
		fail_msg("%g answers of 400 counted for one bad compile", after - before);
	free(big);
}

/* ---- servers started per test ---- */

/* A full queue answers 503 with Retry-After; libcoil retries it. */
static void test_queue_full(void **state)
{
	(void)state;
	server *s = calloc(1, sizeof *s);
	static const char *const extra[] = {"--workers", "1", "--queue", "0", NULL};
	server_start(s, extra);
	size_t len;
	char *g = slurp(GRAPHS "/tanh.json", &len);
	char *env;
	assert_true(asprintf(&env, "{\"graph\": %s, \"async\": true}", g) > 0);
	free(g);
	resp r = req(s, "POST", "/v1/compile", env, -1, NULL);
	free(env);
	if (r.status == 501) {
		resp_free(&r);
		server_free(s);
		print_message("# this coild has no code generator (HTTP 501)\n");
		skip();
	}
	assert_int_equal(r.status, 202);
	resp_free(&r);
	/* the one worker is busy and no job may wait: another graph is refused */
	g = slurp(GRAPHS "/sigmoid.json", &len);
	r = req(s, "POST", "/v1/compile", g, (long)len, NULL);
	char ra[16] = "";
	if (r.status == 200) { /* the first compile was already done: too fast to observe */
		resp_free(&r);
		free(g);
		server_free(s);
		print_message("# the first compile finished before the second request: a full queue not observed\n");
		skip();
	}
	assert_true(header(&r, "Retry-After", ra, sizeof ra));
	assert_true(atoi(ra) >= 1);
	expect_error(r, 503, "queue is full");
	assert_true(metric(s, "coild_queue_rejections_total") >= 1);
	/* libcoil waits and retries until the worker is free */
	coil_client *c;
	coil_client_opts o = {.retries = 30, .backoff_ms = 50};
	assert_int_equal(coil_client_create(s->url, NULL, &o, &c), 0);
	coil_compile_info info;
	if (coil_compile(c, g, len, NULL, &info) != 0)
		fail_msg("compile with retries: %s", coil_last_error());
	coil_client_destroy(c);
	free(g);
	server_free(s);
}

/* coild's peak resident memory (VmHWM) in KiB. */
static long peak_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = atol(line + 6);
	if (f)
		fclose(f);
	return kib;
}

/* Graphs made to break a compiler: chains of 20,000 nodes of each kind are
 * compiled or refused with a 4xx naming a limit, never a crash; a chain of
 * 1,000 softmaxes (whose C grew with the square of the chain) answers within
 * the compile deadline, with coild's peak memory under 1 GiB. */
#define HOSTILE_RSS_KIB (1024L * 1024)
static void test_hostile_graphs(void **state)
{
	(void)state;
	server *s = calloc(1, sizeof *s);
	static const char *const flags[] = {"--max-body", "16M", "--compile-timeout", "120", NULL};
	server_start(s, flags);
	static const char *const kinds[] = {"relu", "transpose", "view", "add", "softmax"};
	for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
		int n = strcmp(kinds[k], "softmax") ? 20000 : 1000;
		size_t len;
		char *g = chain_graph(kinds[k], n, &len);
		resp r = req(s, "POST", "/v1/compile", g, (long)len, NULL);
		free(g);
		int st;
		if (waitpid(s->pid, &st, WNOHANG) == s->pid)
			fail_msg("coild died on a chain of %d %s nodes (status %d)", n, kinds[k], st);
		if (r.status != 200 && !(r.status >= 400 && r.status < 500))
			fail_msg("a chain of %d %s nodes: status %ld: %s", n, kinds[k], r.status, r.body ? r.body : "");
		if (r.status != 200) {
			json_t *o = json_loadb(r.body ? r.body : "", r.len, 0, NULL);
			const char *code = json_string_value(json_object_get(o, "code"));
			if (!code || strcmp(code, "limit"))
				fail_msg("a chain of %d %s nodes refused without naming a limit: %s", n, kinds[k], r.body);
			json_decref(o);
		}
		print_message("# chain of %d %s: %ld\n", n, kinds[k], r.status);
		resp_free(&r);
		resp h = get(s, "/healthz");
		assert_int_equal(h.status, 200);
		resp_free(&h);
	}
	long kib = peak_rss_kib(s->pid);
	print_message("# coild peak RSS after the chains: %ld KiB (bound %ld)\n", kib, HOSTILE_RSS_KIB);
	assert_true(kib > 0 && kib < HOSTILE_RSS_KIB);
	assert_int_equal(server_free(s), 0);
}

/* An allocation that fails during a compile is the server's trouble, not
 * the request's: 503 with code resource_exhausted, for a waiting request and
 * in the failed job.  (COILD_TEST_FAIL_COMPILE_OOM=1 is a test-only switch
 * that makes every compile fail as out of memory.) */
static void test_compile_oom(void **state)
{
	(void)state;
	server *s = calloc(1, sizeof *s);
	setenv("COILD_TEST_FAIL_COMPILE_OOM", "1", 1);
	server_start(s, NULL);
	unsetenv("COILD_TEST_FAIL_COMPILE_OOM");
	size_t len;
	char *g = slurp(GRAPHS "/tanh.json", &len);
	expect_fail(req(s, "POST", "/v1/compile", g, (long)len, NULL), 503, "resource_exhausted", "out of memory");
	free(g);
	char loc[128];
	submit_async(s, GRAPHS "/neg.json", "/v1/compile", NULL, loc, sizeof loc);
	json_t *j = job_poll(s, loc, NULL, "done failed", 10000);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "failed");
	assert_string_equal(json_string_value(json_object_get(j, "code")), "resource_exhausted");
	assert_int_equal(json_integer_value(json_object_get(j, "http_status")), 503);
	json_decref(j);
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_int_equal(server_free(s), 0);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Has the server closed fd (EOF or reset) within ms? */
static int closed_within(int fd, long ms)
{
	char buf[4096];
	int closed;
	raw_read(fd, buf, sizeof buf, ms, &closed);
	return closed;
}

/* Send start from 127.0.0.3, then more every 200 ms until the server closes
 * the connection: the seconds that took, or -1 if it did not within 10 s. */
static double trickle(const server *s, const char *start, const char *more)
{
	int fd = raw_connect(s, "127.0.0.3");
	assert_true(fd >= 0);
	send(fd, start, strlen(start), MSG_NOSIGNAL);
	double t0 = now_s();
	int cut = 0;
	while (!cut && now_s() - t0 < 10) {
		send(fd, more, strlen(more), MSG_NOSIGNAL);
		cut = closed_within(fd, 200);
	}
	close(fd);
	return cut ? now_s() - t0 : -1;
}

/* Issue #16: a few hundred connections from one address that send half a
 * header each took every connection slot, and trickled bytes kept them.
 * Now one address holds at most --max-conns-per-ip (64) connections, the
 * headers must be in within --header-timeout however slowly they trickle,
 * and a body must keep up --min-body-rate: meanwhile /healthz and another
 * client's compile are answered. */
static void test_half_header_flood(void **state)
{
	(void)state;
	server *s = calloc(1, sizeof *s);
	static const char *const extra[] = {"--header-timeout", "2", NULL};
	server_start(s, extra);
	enum { FLOOD = 300 };
	int fds[FLOOD], open_ = 0;
	const char *half = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = raw_connect(s, "127.0.0.2");
		assert_true(fds[i] >= 0);
		send(fds[i], half, strlen(half), MSG_NOSIGNAL);
	}
	/* past the per-address limit, connections are closed at once */
	sleep_ms(300);
	for (int i = 0; i < FLOOD; i++)
		if (!closed_within(fds[i], 0))
			open_++;
		else
			fds[i] = (close(fds[i]), -1);
	if (open_ > 64)
		fail_msg("%d connections from one address held open (limit 64)", open_);
	print_message("# %d of %d half-header connections from 127.0.0.2 held, the rest refused\n", open_, FLOOD);

	/* while they are held: another address is answered */
	double t0 = now_s();
	resp r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
	json_t *o = compile_or_skip(s, GRAPHS "/tanh.json", NULL);
	json_decref(o);
	print_message("# /healthz and a compile answered in %.2f s during the flood\n", now_s() - t0);

	/* a header trickled a byte every 200 ms is cut at the deadline; so is
	 * a body at 50 bytes/s (under the 4 KiB/s floor) */
	double secs = trickle(s, half, "x");
	if (secs < 0)
		fail_msg("a trickled header was still open after 10 s (--header-timeout 2)");
	print_message("# trickled header cut after %.1f s\n", secs);
	if (trickle(s, "POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{", "          ") < 0)
		fail_msg("a body at 50 bytes/s was still open after 10 s");

	/* and the flood's connections are gone by their deadline */
	for (int i = 0; i < FLOOD; i++)
		if (fds[i] >= 0) {
			if (!closed_within(fds[i], 5000))
				fail_msg("a half-header connection was still open 5 s past --header-timeout");
			close(fds[i]);
		}
	assert_true(metric(s, "coild_connections_closed_total{reason=\"header_timeout\"}") >= open_);
	assert_true(metric(s, "coild_connections_closed_total{reason=\"slow_body\"}") >= 1);
	assert_int_equal(server_free(s), 0);
}

/* Run coild with args (NULL-terminated) and its cache in a temp directory:
 * it must exit within 10 s with a non-zero status and say want on stderr. */
static void expect_refusal_at_start(const char *const *args, const char *want)
{
	char dir[PATH_MAX], log[PATH_MAX + 16], cache[PATH_MAX + 16];
	snprintf(dir, sizeof dir, "%s/coild-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(log, sizeof log, "%s/log", dir);
	snprintf(cache, sizeof cache, "%s/cache", dir);
	const char *argv[24] = {coild_path, "--listen", "127.0.0.1:0", "--cache-dir", cache};
	int n = 5;
	for (int i = 0; args[i] && n < 23; i++)
		argv[n++] = args[i];
	pid_t pid = spawn(argv, log);
	int st = 0, done = 0;
	for (int i = 0; i < 1000 && !done; i++) {
		done = waitpid(pid, &st, WNOHANG) == pid;
		if (!done)
			sleep_ms(10);
	}
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fail_msg("coild started (%s expected)", want);
	}
	char *text = slurp(log, NULL);
	if (!WIFEXITED(st) || WEXITSTATUS(st) == 0 || !strstr(text, want))
		fail_msg("coild exited with status %d: %s (expected a refusal naming '%s')", st, text, want);
	free(text);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A tokens file that others may read is refused at start; so is root
 * without --allow-root. */
static void test_start_refusals(void **state)
{
	(void)state;
	char dir[PATH_MAX], tokens[PATH_MAX + 16];
	snprintf(dir, sizeof dir, "%s/coild-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	FILE *f = fopen(tokens, "w");
	fputs("compile-token-1 compile\n", f);
	fclose(f);
	const char *const loose[] = {"--tokens", tokens, "--allow-root", NULL};
	chmod(tokens, 0644);
	expect_refusal_at_start(loose, "readable or writable by others than its owner (mode 0644)");
	chmod(tokens, 0620);
	expect_refusal_at_start(loose, "chmod 600");
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (geteuid() == 0) {
		const char *const none[] = {NULL};
		expect_refusal_at_start(none, "refusing to run as root");
		setenv("COILD_ALLOW_ROOT", "0", 1);
		expect_refusal_at_start(none, "refusing to run as root");
		unsetenv("COILD_ALLOW_ROOT");
	}
}

/* A server with tokens whose C compiler hangs at -O3 (a tenant with long
 * compiles: opt_level=3) and is the real one otherwise: "cc" in a directory
 * put first in its PATH.  NULL (and the test skips) without /usr/bin/cc. */
static server *slow_cc_server(const char *const *extra)
{
	if (access("/usr/bin/cc", X_OK) != 0)
		return NULL;
	server *s = calloc(1, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "%s/coild-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(s->dir));
	chmod(s->dir, 0755); /* the compile sandbox runs the stand-in as another user */
	char bin[PATH_MAX + 8], cc[PATH_MAX + 16], *path = NULL;
	snprintf(bin, sizeof bin, "%s/bin", s->dir);
	assert_int_equal(mkdir(bin, 0755), 0);
	snprintf(cc, sizeof cc, "%s/cc", bin);
	FILE *f = fopen(cc, "w");
	assert_non_null(f);
	fputs("#!/bin/sh\n# test_server: a compile at -O3 hangs, others run the real cc\n"
	      "for a in \"$@\"; do [ \"$a\" = -O3 ] && exec sleep 600; done\nexec /usr/bin/cc \"$@\"\n",
	      f);
	fclose(f);
	chmod(cc, 0755);
	const char *old = getenv("PATH");
	assert_true(asprintf(&path, "%s:%s", bin, old ? old : "/usr/bin:/bin") > 0);
	char *saved = old ? strdup(old) : NULL;
	setenv("PATH", path, 1);
	tokens_server(s, extra);
	if (saved)
		setenv("PATH", saved, 1);
	free(saved);
	free(path);
	return s;
}

/* A request on its own thread (the main one waits meanwhile). */
typedef struct {
	const server *s;
	const char *path, *body;
	const char *const *hdrs;
	long status;
	char body_out[1024];
} post_arg;

static void *post_thread(void *p)
{
	post_arg *a = p;
	char url[256];
	snprintf(url, sizeof url, "%s%s", a->s->url, a->path);
	CURL *e = curl_easy_init();
	struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
	for (int i = 0; a->hdrs && a->hdrs[i]; i++)
		hl = curl_slist_append(hl, a->hdrs[i]);
	resp r = {0};
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, a->body);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
	a->status = curl_easy_perform(e) == CURLE_OK ? 0 : -1;
	if (a->status == 0)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &a->status);
	snprintf(a->body_out, sizeof a->body_out, "%s", r.body ? r.body : "");
	free(r.body);
	curl_slist_free_all(hl);
	curl_easy_cleanup(e);
	return NULL;
}

/* A slow_cc_server with --grace grace where tenant A (AS_COMPILE) has a
 * compile running that hangs (its job's path in loc); skips the test when
 * that cannot be arranged. */
static server *hung_compile_server(const char *grace, char *loc, size_t cap)
{
	const char *const extra[] = {"--compile-timeout", "120", "--grace", grace, NULL};
	server *s = slow_cc_server(extra);
	if (!s)
		skip();
	submit_async(s, GRAPHS "/sigmoid.json", "/v1/compile?opt_level=3", AS_COMPILE, loc, cap);
	json_t *j = job_poll(s, loc, AS_COMPILE, "running done failed", 10000);
	int hangs = !strcmp(json_string_value(json_object_get(j, "status")), "running");
	json_decref(j);
	if (!hangs) { /* the compiler in PATH was not the one that hangs */
		server_free(s);
		skip();
	}
	return s;
}

/* Issue #16: two large compiles of one tenant held both workers for the
 * whole compile timeout.  Now a tenant runs at most workers - 1 compiles:
 * with tenant A's first compile hanging and its second queued behind it,
 * tenant B's compile gets the other worker and is answered. */
static void test_worker_hogging(void **state)
{
	(void)state;
	char loc1[128], loc2[128];
	server *s = hung_compile_server("2", loc1, sizeof loc1);
	submit_async(s, GRAPHS "/neg.json", "/v1/compile?opt_level=3", AS_COMPILE, loc2, sizeof loc2);
	sleep_ms(300);
	json_t *j = job_poll(s, loc2, AS_COMPILE, "", 0);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "queued");
	json_decref(j);

	size_t len;
	char *g = slurp(GRAPHS "/tanh.json", &len);
	double t0 = now_s();
	resp r = req(s, "POST", "/v1/compile?opt_level=1", g, (long)len, AS_COMPILE2);
	free(g);
	double secs = now_s() - t0;
	if (r.status != 200)
		fail_msg("tenant B's compile: HTTP %ld: %s", r.status, r.body ? r.body : "");
	resp_free(&r);
	/* well before A's compile could have ended (--compile-timeout 120) */
	if (secs > 60)
		fail_msg("tenant B's compile took %.1f s", secs);
	print_message("# tenant B compiled in %.2f s while tenant A's compile hung on the other worker\n", secs);
	r = get(s, "/healthz");
	assert_int_equal(r.status, 200);
	resp_free(&r);
	j = job_poll(s, loc1, AS_COMPILE, "", 0);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "running");
	json_decref(j);
	assert_int_equal(server_free(s), 0); /* --grace 2: the hung compile is abandoned */
}

/* SIGTERM with a compile running past the grace and another queued: /healthz
 * answers 503 at once, the queued compile's waiter gets 503, new compiles
 * get 503, and coild exits 0 within --grace. */
static void test_sigterm_drain(void **state)
{
	(void)state;
	char loc1[128];
	server *s = hung_compile_server("3", loc1, sizeof loc1);
	/* a synchronous compile waits, queued behind A's share */
	char *g = slurp(GRAPHS "/neg.json", NULL);
	post_arg w = {.s = s, .path = "/v1/compile?opt_level=3", .body = g, .hdrs = AS_COMPILE};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, post_thread, &w), 0);
	for (int i = 0; i < 500 && metric_as(s, "coild_queue_depth", AS_ADMIN) < 1; i++)
		sleep_ms(10);
	assert_true(metric_as(s, "coild_queue_depth", AS_ADMIN) == 1);

	double t0 = now_s();
	kill(s->pid, SIGTERM);
	/* draining: /healthz says so at once (once the signal is taken), a
	 * compile is refused */
	resp r = {0};
	do {
		resp_free(&r);
		r = req(s, "GET", "/healthz", NULL, 0, NULL);
	} while (r.status == 200 && now_s() - t0 < 2);
	if (r.status != 503)
		fail_msg("/healthz 2 s after SIGTERM: HTTP %ld: %s", r.status, r.body ? r.body : "");
	expect_fail(r, 503, "unavailable", "shutting down");
	expect_fail(req(s, "POST", "/v1/compile", g, -1, AS_COMPILE2), 503, "unavailable", "shutting down");
	pthread_join(th, NULL);
	if (w.status != 503 || !strstr(w.body_out, "\"code\":\"unavailable\"") || !strstr(w.body_out, "cancelled"))
		fail_msg("the queued compile's waiter: HTTP %ld: %s", w.status, w.body_out);
	free(g);
	int st = 0;
	pid_t pid = s->pid;
	while (waitpid(pid, &st, WNOHANG) == 0 && now_s() - t0 < 30)
		sleep_ms(20);
	double secs = now_s() - t0;
	s->pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("coild exited with status %d", st);
	if (secs > 3 + 1.5)
		fail_msg("coild took %.1f s to stop with --grace 3", secs);
	print_message("# stopped in %.1f s (--grace 3) with a compile abandoned\n", secs);
	char log[PATH_MAX + 16];
	snprintf(log, sizeof log, "%s/log", s->dir);
	char *text = slurp(log, NULL);
	assert_non_null(strstr(text, "1 compiles still running at the end of the grace were abandoned"));
	free(text);
	assert_int_equal(server_free(s), 0);
}

/* The cache outlives the process; SIGTERM lets a compile in flight finish. */
static void test_restart_and_shutdown(void **state)
{
	(void)state;
	server *s = calloc(1, sizeof *s);
	server_start(s, NULL);
	json_t *o = compile_or_skip(s, GRAPHS "/tanh.json", NULL);
	char key[65];
	snprintf(key, sizeof key, "%s", json_string_value(json_object_get(o, "key")));
	json_decref(o);

	/* a compile in flight when SIGTERM arrives still gets its answer */
	compile_arg a = {.url = s->url, .graph = GRAPHS "/sigmoid.json"};
	pthread_t th;
	double misses = metric(s, "coild_cache_misses_total");
	assert_int_equal(pthread_create(&th, NULL, compile_thread, &a), 0);
	/* (running, not queued: a SIGTERM cancels queued compiles) */
	for (int i = 0; i < 200 && (metric(s, "coild_cache_misses_total") < misses + 1 ||
				    metric(s, "coild_queue_depth") > 0); i++)
		sleep_ms(5);
	assert_int_equal(server_stop(s), 0);
	pthread_join(th, NULL);
	if (a.rc)
		fail_msg("compile across SIGTERM: %s", a.err);

	/* a new process on the same directory has both */
	server_start(s, NULL);
	json_t *again = compile_or_skip(s, GRAPHS "/tanh.json", NULL);
	assert_string_equal(json_string_value(json_object_get(again, "key")), key);
	assert_true(json_is_true(json_object_get(again, "hit")));
	json_decref(again);
	char path[128];
	snprintf(path, sizeof path, "/v1/artifacts/%s", a.info.key);
	resp r = get(s, path);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	server_free(s);
}

/* Two servers sharing one cache directory compile a key once between them. */
static void test_two_servers_one_cache(void **state)
{
	(void)state;
	server *s1 = calloc(1, sizeof *s1), *s2 = calloc(1, sizeof *s2);
	server_start(s1, NULL);
	/* s2: s1's cache, its own directory (inside s1's) for the port file and log */
	snprintf(s2->cache, sizeof s2->cache, "%s", s1->cache);
	if (snprintf(s2->dir, sizeof s2->dir, "%s/two", s1->dir) >= (int)sizeof s2->dir)
		fail_msg("path too long");
	mkdir(s2->dir, 0755);
	server_start(s2, NULL);
	enum { N = 8 };
	compile_arg args[N];
	pthread_t th[N];
	for (int i = 0; i < N; i++) {
		args[i] = (compile_arg){.url = i % 2 ? s1->url : s2->url, .graph = GRAPHS "/neg.json"};
		assert_int_equal(pthread_create(&th[i], NULL, compile_thread, &args[i]), 0);
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < N; i++) {
		if (args[i].rc) {
			server_free(s2);
			server_free(s1);
			skip_if_no_codegen(args[i].err);
			fail_msg("request %d: %s", i, args[i].err);
		}
		assert_string_equal(args[i].info.key, args[0].info.key);
	}
	double total = metric(s1, "coild_compiles_total") + metric(s2, "coild_compiles_total");
	assert_true(total == 1);
	server_free(s2);
	server_free(s1);
}

/* ---- group: signed artifacts (a coild with --sign-key) ---- */

/* Two key pairs: "fleet-1" (the server's, about to be rotated out) and
 * "fleet-2" (the next one); their public keys and secret files. */
static struct {
	char dir[PATH_MAX];
	char sec1[PATH_MAX + 16], sec2[PATH_MAX + 16];
	char pub1[SIGN_STR_MAX], pub2[SIGN_STR_MAX];
	char both[2 * SIGN_STR_MAX + 2];
} keys;

static int signed_setup(void **state)
{
	unsetenv("COIL_TRUSTED_KEYS");
	unsetenv("COIL_TRUSTED_KEYS_FILE");
	unsetenv("COIL_CPU_MASK");
	snprintf(keys.dir, sizeof keys.dir, "%s/coil-keys-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(keys.dir));
	char pub[PATH_MAX + 16];
	coil_err err = {0};
	snprintf(keys.sec1, sizeof keys.sec1, "%s/fleet-1.sec", keys.dir);
	snprintf(pub, sizeof pub, "%s/fleet-1.pub", keys.dir);
	if (sign_keygen("fleet-1", keys.sec1, pub, keys.pub1, &err))
		fail_msg("keygen: %s", err.msg);
	snprintf(keys.sec2, sizeof keys.sec2, "%s/fleet-2.sec", keys.dir);
	snprintf(pub, sizeof pub, "%s/fleet-2.pub", keys.dir);
	if (sign_keygen("fleet-2", keys.sec2, pub, keys.pub2, &err))
		fail_msg("keygen: %s", err.msg);
	snprintf(keys.both, sizeof keys.both, "%s %s", keys.pub1, keys.pub2);
	server *s = calloc(1, sizeof *s);
	const char *extra[] = {"--sign-key", keys.sec1, NULL};
	server_start(s, extra);
	*state = s;
	return 0;
}

static int signed_teardown(void **state)
{
	nftw(keys.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return server_free(*state);
}

/* The base64 part of a secret key file (what must never be shown). */
static void secret_b64(const char *path, char *out, size_t cap)
{
	char *text = slurp(path, NULL);
	const char *colon = strchr(text, ':');
	assert_non_null(colon);
	snprintf(out, cap, "%.*s", (int)strcspn(colon + 1, "\n"), colon + 1);
	free(text);
}

/* keygen, load, sign and verify; a secret others may read is refused, and no
 * message quotes a secret. */
static void test_keygen_roundtrip(void **state)
{
	(void)state;
	struct stat st;
	assert_int_equal(stat(keys.sec1, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_non_null(strstr(keys.pub1, "fleet-1:"));
	coil_err err = {0};
	coil_signer *sk;
	if (sign_key_load(keys.sec1, &sk, &err))
		fail_msg("load: %s", err.msg);
	assert_string_equal(sign_key_public(sk), keys.pub1);
	char key[65], sha[65], sig[SIGN_STR_MAX];
	memset(key, 'a', 64), key[64] = 0;
	memset(sha, 'b', 64), sha[64] = 0;
	assert_int_equal(sign_artifact(sk, key, sha, "x86-64-v4", sig, &err), 0);
	sign_key_free(sk);
	coil_trust *t = trust_new();
	assert_int_equal(trust_add_list(t, keys.both, "test", &err), 0);
	assert_int_equal(trust_count(t), 2);
	assert_int_equal(trust_verify(t, key, sha, "x86-64-v4", sig, &err), 0);
	/* each field is covered */
	sha[0] = 'c';
	assert_int_equal(trust_verify(t, key, sha, "x86-64-v4", sig, &err), -1);
	assert_non_null(strstr(err.msg, "bad signature by key 'fleet-1'"));
	sha[0] = 'b';
	assert_int_equal(trust_verify(t, key, sha, "x86-64-v3", sig, &err), -1);
	key[0] = 'c';
	assert_int_equal(trust_verify(t, key, sha, "x86-64-v4", sig, &err), -1);
	trust_free(t);
	/* a second keygen onto the same file is refused, the file kept */
	char pub[SIGN_STR_MAX], other[PATH_MAX + 16], b64[128];
	snprintf(other, sizeof other, "%s/other.pub", keys.dir);
	assert_int_equal(sign_keygen("again", keys.sec1, other, pub, &err), -1);
	assert_non_null(strstr(err.msg, "already exists"));
	/* mode 0644: refused, and the message does not quote it */
	secret_b64(keys.sec1, b64, sizeof b64);
	chmod(keys.sec1, 0644);
	assert_int_equal(sign_key_load(keys.sec1, &sk, &err), -1);
	chmod(keys.sec1, 0600);
	assert_non_null(strstr(err.msg, "chmod 600"));
	assert_null(strstr(err.msg, b64));
	/* a damaged secret: refused without quoting it */
	char bad[PATH_MAX + 16];
	snprintf(bad, sizeof bad, "%s/bad.sec", keys.dir);
	FILE *f = fopen(bad, "w");
	fprintf(f, "fleet-1:%.40s\n", b64);
	fclose(f);
	chmod(bad, 0600);
	assert_int_equal(sign_key_load(bad, &sk, &err), -1);
	char part[48];
	snprintf(part, sizeof part, "%.40s", b64);
	assert_null(strstr(err.msg, part));
	/* coild refuses to start with it */
	server *s = calloc(1, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "%s", keys.dir);
	char log[PATH_MAX + 16];
	snprintf(log, sizeof log, "%s/bad.log", keys.dir);
	const char *argv[] = {coild_path, "--listen", "127.0.0.1:0", "--cache-dir", keys.dir, "--allow-root", "--sign-key",
			      bad, NULL};
	pid_t pid = spawn(argv, log);
	int st2;
	waitpid(pid, &st2, 0);
	assert_true(WIFEXITED(st2) && WEXITSTATUS(st2) != 0);
	char *text = slurp(log, NULL);
	assert_non_null(strstr(text, "signing key"));
	assert_null(strstr(text, b64));
	free(text);
	free(s);
}

/* A client trusting keys of its own: the answer of a compile and its fetch. */
static coil_client *trusting(const server *s, const char *local_dir, const char *trusted)
{
	coil_client_opts o = {.cache_dir = local_dir, .retries = -1, .trusted_keys = trusted};
	coil_client *c;
	if (coil_client_create(s->url, NULL, &o, &c))
		fail_msg("client: %s", coil_last_error());
	return c;
}

/* coild signs what it builds: the compile's answer, the artifact's header,
 * its metadata carry one signature a trusting client accepts; the secret is
 * nowhere in its log. */
static void test_signed_fetch(void **state)
{
	server *s = *state;
	char local[PATH_MAX + 16], path[CACHE_PATH_MAX];
	snprintf(local, sizeof local, "%s/signed-ok", s->dir);
	coil_client *c = trusting(s, local, keys.pub1);
	coil_compile_info info;
	if (coil_compile_file(c, GRAPHS "/pointwise.json", NULL, &info) != 0) {
		skip_if_no_codegen(coil_last_error());
		fail_msg("compile: %s", coil_last_error());
	}
	assert_non_null(strstr(info.signature, "fleet-1:"));
	char url[160], h[SIGN_STR_MAX] = "";
	snprintf(url, sizeof url, "/v1/artifacts/%s", info.key);
	resp r = get(s, url);
	assert_int_equal(r.status, 200);
	assert_true(header(&r, "X-Coil-Signature", h, sizeof h));
	assert_string_equal(h, info.signature);
	resp_free(&r);
	snprintf(url, sizeof url, "/v1/artifacts/%s/meta", info.key);
	r = get(s, url);
	json_t *m = json_loads(r.body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(m, "signature")), info.signature);
	json_decref(m);
	resp_free(&r);
	r = get(s, "/v1/targets");
	m = json_loads(r.body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(m, "signing_key")), keys.pub1);
	json_decref(m);
	resp_free(&r);
	assert_int_equal(coil_fetch(c, info.key, info.sha256, path, sizeof path), 0);
	coil_module *mod;
	if (coil_client_load(c, info.key, &mod) != 0)
		fail_msg("load: %s", coil_last_error());
	coil_module_close(mod);
	coil_client_destroy(c);
	/* the secret appears in no log line (nor its argv: only its path) */
	char b64[128], log[PATH_MAX + 16], cmd[64];
	secret_b64(keys.sec1, b64, sizeof b64);
	snprintf(log, sizeof log, "%s/log", s->dir);
	char *text = slurp(log, NULL);
	assert_non_null(strstr(text, "signing with key fleet-1"));
	assert_null(strstr(text, b64));
	free(text);
	snprintf(cmd, sizeof cmd, "/proc/%d/cmdline", (int)s->pid);
	size_t n;
	text = slurp(cmd, &n);
	for (size_t i = 0; i < n; i++)
		text[i] = text[i] ? text[i] : ' ';
	assert_null(strstr(text, b64));
	free(text);
}

/* Key's entry in the server's cache replaced by bytes (len) and metadata
 * meta: what a writer of the cache (or a mirror) could serve. */
static void forge(const server *s, const char *key, const void *bytes, size_t len, const char *meta)
{
	coil_err err = {0};
	coil_cache *c;
	char graph[CACHE_PATH_MAX];
	assert_int_equal(cache_open(s->cache, 0, &c, &err), 0);
	assert_int_equal(cache_entry_paths(c, key, NULL, graph, sizeof graph, &err), 0);
	size_t glen;
	char *canon = slurp(graph, &glen);
	if (cache_store_bytes(c, key, bytes, len, canon, glen, meta, &err))
		fail_msg("store: %s", err.msg);
	free(canon);
	cache_close(c);
}

/* The stored metadata of key in the server's cache (malloc'd). */
static char *server_meta(const server *s, const char *key)
{
	coil_err err = {0};
	coil_cache *c;
	char *meta = NULL;
	assert_int_equal(cache_open(s->cache, 0, &c, &err), 0);
	assert_int_equal(cache_get_meta(c, key, &meta, NULL, NULL, &err), 1);
	cache_close(c);
	return meta;
}

/* fetch of key refused with a message containing want, and nothing stored. */
static void fetch_refused(coil_client *c, const char *local, const char *key, const char *want)
{
	char path[CACHE_PATH_MAX];
	if (coil_fetch(c, key, NULL, path, sizeof path) != -1)
		fail_msg("fetch of %s accepted; expected a refusal naming '%s'", key, want);
	if (!strstr(coil_last_error(), want) || !strstr(coil_last_error(), "refusing"))
		fail_msg("refusal '%s' does not name '%s'", coil_last_error(), want);
	coil_err err = {0};
	coil_cache *lc;
	assert_int_equal(cache_open(local, 0, &lc, &err), 0);
	assert_int_equal(cache_get_meta(lc, key, NULL, NULL, NULL, &err), 0);
	cache_close(lc);
}

/* An untrusted key, key rotation, an artifact swapped in the server's cache
 * (bytes and index agreeing, the signature not), unsigned and malformed
 * signatures: each refused before a byte is stored or loaded. */
static void test_signature_refusals(void **state)
{
	server *s = *state;
	char local[PATH_MAX + 16], other[PATH_MAX + 16], path[CACHE_PATH_MAX];
	snprintf(local, sizeof local, "%s/signed-refused", s->dir);
	snprintf(other, sizeof other, "%s/signed-rotation", s->dir);
	coil_compile_info a, b;
	coil_client *c = trusting(s, local, keys.pub1);
	if (coil_compile_file(c, GRAPHS "/tanh.json", NULL, &a) != 0) {
		skip_if_no_codegen(coil_last_error());
		fail_msg("compile: %s", coil_last_error());
	}
	assert_int_equal(coil_compile_file(c, GRAPHS "/sigmoid.json", NULL, &b), 0);
	coil_client_destroy(c);

	/* a client trusting only the next key */
	c = trusting(s, local, keys.pub2);
	fetch_refused(c, local, a.key, "signed by key 'fleet-1', which is not trusted (trusted: 'fleet-2')");
	coil_client_destroy(c);

	/* rotation: both trusted, the old key's artifact is accepted; once the
	 * old key is dropped, the same local copy is refused (and dropped) */
	c = trusting(s, other, keys.both);
	coil_module *m;
	if (coil_client_load(c, a.key, &m) != 0)
		fail_msg("load with both keys trusted: %s", coil_last_error());
	coil_module_close(m);
	coil_client_destroy(c);
	c = trusting(s, other, keys.pub2);
	assert_int_equal(coil_client_load(c, a.key, &m), -1);
	assert_non_null(strstr(coil_last_error(), "not trusted"));
	fetch_refused(c, other, a.key, "not trusted");
	coil_client_destroy(c);

	/* a's entry swapped for b's bytes, size and sha256 (what a writer of the
	 * cache could do), a's signed metadata kept */
	char *meta_a = server_meta(s, a.key), so_b[CACHE_PATH_MAX];
	coil_err err = {0};
	coil_cache *sc;
	assert_int_equal(cache_open(s->cache, 0, &sc, &err), 0);
	assert_int_equal(cache_entry_paths(sc, b.key, so_b, NULL, sizeof so_b, &err), 0);
	cache_close(sc);
	size_t nb;
	char *bytes_b = slurp(so_b, &nb);
	forge(s, a.key, bytes_b, nb, meta_a);
	c = trusting(s, local, keys.pub1);
	fetch_refused(c, local, a.key, "bad signature by key 'fleet-1'");
	/* b's signature on a's key: still a bad signature */
	json_t *mj = json_loads(meta_a, 0, NULL);
	json_object_set_new(mj, "signature", json_string(b.signature));
	char *meta_x = json_dumps(mj, JSON_COMPACT);
	forge(s, a.key, bytes_b, nb, meta_x);
	fetch_refused(c, local, a.key, "bad signature");
	free(meta_x);
	/* unsigned, then a malformed signature */
	json_object_del(mj, "signature");
	meta_x = json_dumps(mj, JSON_COMPACT);
	forge(s, a.key, bytes_b, nb, meta_x);
	fetch_refused(c, local, a.key, "is unsigned");
	free(meta_x);
	json_object_set_new(mj, "signature", json_string("fleet-1:not-base64!"));
	meta_x = json_dumps(mj, JSON_COMPACT);
	forge(s, a.key, bytes_b, nb, meta_x);
	fetch_refused(c, local, a.key, "malformed signature");
	free(meta_x);
	json_decref(mj);
	coil_client_destroy(c);
	/* without trusted keys, as before: the (consistent) entry is fetched */
	c = trusting(s, local, NULL);
	assert_int_equal(coil_fetch(c, a.key, NULL, path, sizeof path), 0);
	coil_client_destroy(c);
	free(bytes_b);
	free(meta_a);
}

/* An artifact copied by hand with its signature file (PATH.sig): loaded
 * with trusted keys from the environment only when the signature covers its
 * very bytes. */
static void test_signed_copy(void **state)
{
	server *s = *state;
	char local[PATH_MAX + 16], path[CACHE_PATH_MAX], copy[PATH_MAX + 16], sig[PATH_MAX + 24];
	snprintf(local, sizeof local, "%s/signed-copy", s->dir);
	coil_client *c = trusting(s, local, keys.pub1);
	coil_compile_info a;
	if (coil_compile_file(c, GRAPHS "/neg.json", NULL, &a) != 0) {
		skip_if_no_codegen(coil_last_error());
		fail_msg("compile: %s", coil_last_error());
	}
	assert_int_equal(coil_fetch(c, a.key, a.sha256, path, sizeof path), 0);
	coil_client_destroy(c);
	size_t n;
	char *bytes = slurp(path, &n);
	snprintf(copy, sizeof copy, "%s/copied.so", s->dir);
	snprintf(sig, sizeof sig, "%s.sig", copy);
	FILE *f = fopen(copy, "wb");
	assert_int_equal(fwrite(bytes, 1, n, f), n);
	fclose(f);
	coil_err err = {0};
	assert_int_equal(artifact_sig_write(copy, a.key, a.sha256, a.target, a.signature, &err), 0);
	coil_module *m;
	setenv("COIL_TRUSTED_KEYS", keys.both, 1);
	if (coil_module_open(copy, NULL, NULL, &m) != 0)
		fail_msg("open: %s", coil_last_error());
	coil_module_close(m);
	/* the old key no longer trusted */
	setenv("COIL_TRUSTED_KEYS", keys.pub2, 1);
	assert_int_equal(coil_module_open(copy, NULL, NULL, &m), -1);
	assert_non_null(strstr(coil_last_error(), "not trusted"));
	setenv("COIL_TRUSTED_KEYS", keys.pub1, 1);
	/* bytes changed: their sha256 is not the signed one */
	int fd = open(copy, O_RDWR);
	assert_int_equal(pwrite(fd, "\x01", 1, (off_t)n / 2), 1);
	close(fd);
	assert_int_equal(coil_module_open(copy, NULL, NULL, &m), -1);
	assert_non_null(strstr(coil_last_error(), "sha256 mismatch"));
	/* the signature file rewritten for the changed bytes: the signature fails */
	char sha[65];
	assert_int_equal(cache_sha256_file(copy, sha, &err), 0);
	assert_int_equal(artifact_sig_write(copy, a.key, sha, a.target, a.signature, &err), 0);
	assert_int_equal(coil_module_open(copy, NULL, NULL, &m), -1);
	assert_non_null(strstr(coil_last_error(), "bad signature"));
	unlink(sig);
	assert_int_equal(coil_module_open(copy, NULL, NULL, &m), -1);
	assert_non_null(strstr(coil_last_error(), "no readable signature file"));
	unsetenv("COIL_TRUSTED_KEYS");
	free(bytes);
}

/* native is resolved by the client: with AVX-512 masked here, the server
 * (whose own native has it, or not) builds x86-64-v3 code; a target the
 * server's answer does not match is never accepted. */
static void test_client_native(void **state)
{
	server *s = *state;
	char local[PATH_MAX + 16];
	snprintf(local, sizeof local, "%s/native", s->dir);
	if (!target_runs_here("x86-64-v3"))
		skip();
	setenv("COIL_CPU_MASK", "avx512,avx_vnni", 1);
	coil_client *c = trusting(s, local, NULL);
	coil_compile_info a;
	int rc = coil_compile_file(c, GRAPHS "/neg.json", NULL, &a);
	unsetenv("COIL_CPU_MASK");
	if (rc != 0) {
		skip_if_no_codegen(coil_last_error());
		fail_msg("compile: %s", coil_last_error());
	}
	assert_string_equal(a.target, "x86-64-v3");
	coil_client_destroy(c);
}

int main(int argc, char **argv)
{
	(void)argc;
	const char *env = getenv("COILD");
	if (env)
		snprintf(coild_path, sizeof coild_path, "%s", env);
	else {
		char self[PATH_MAX];
		snprintf(self, sizeof self, "%s", argv[0]);
		snprintf(coild_path, sizeof coild_path, "%s/../coild", dirname(self));
	}
	if (access(coild_path, X_OK) != 0) {
		fprintf(stderr, "test_server: no coild at %s (set COILD)\n", coild_path);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest plain[] = {
		cmocka_unit_test(test_healthz),
		cmocka_unit_test(test_targets),
		cmocka_unit_test(test_metrics_format),
		cmocka_unit_test(test_bad_requests),
		cmocka_unit_test(test_error_codes),
		cmocka_unit_test(test_oversize_body),
		cmocka_unit_test(test_ambiguous_framing),
		cmocka_unit_test(test_chunked_over_limit),
		cmocka_unit_test(test_hangups),
		cmocka_unit_test(test_artifact_routes),
		cmocka_unit_test(test_decisions),
		cmocka_unit_test(test_tampered_artifact),
		cmocka_unit_test(test_compile_with_curl),
		cmocka_unit_test(test_async_job),
		cmocka_unit_test(test_single_flight),
		cmocka_unit_test(test_fetch_load_run),
	};
	const struct CMUnitTest tokens[] = {
		cmocka_unit_test(test_tokens),
		cmocka_unit_test(test_job_owners),
		cmocka_unit_test(test_refusals_after_long_urls),
		cmocka_unit_test(test_refused_large_bodies),
	};
	const struct CMUnitTest own[] = {
		cmocka_unit_test(test_queue_full),
		cmocka_unit_test(test_compile_oom),
		cmocka_unit_test(test_half_header_flood),
		cmocka_unit_test(test_start_refusals),
		cmocka_unit_test(test_worker_hogging),
		cmocka_unit_test(test_sigterm_drain),
		cmocka_unit_test(test_restart_and_shutdown),
		cmocka_unit_test(test_hostile_graphs),
		cmocka_unit_test(test_two_servers_one_cache),
	};
	const struct CMUnitTest signd[] = {
		cmocka_unit_test(test_keygen_roundtrip),
		cmocka_unit_test(test_signed_fetch),
		cmocka_unit_test(test_signature_refusals),
		cmocka_unit_test(test_signed_copy),
		cmocka_unit_test(test_client_native),
	};
	int fails = cmocka_run_group_tests_name("server", plain, plain_setup, group_teardown);
	fails += cmocka_run_group_tests_name("signed", signd, signed_setup, signed_teardown);
	fails += cmocka_run_group_tests_name("tokens", tokens, auth_setup, group_teardown);
	fails += cmocka_run_group_tests_name("lifecycle", own, NULL, NULL);
	curl_global_cleanup();
	return fails ? 1 : 0;
}
