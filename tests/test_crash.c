/* Crash safety: coild is killed with SIGKILL at random moments while clients
 * compile new graphs, compile cached ones and fetch artifacts, then started
 * again on the same cache, round after round (COIL_KILL_ROUNDS, default 50;
 * `make bench-crash` runs more).  Afterwards:
 *   - every key a client was told was compiled (200 with its sha256) is
 *     still served, with bytes that hash to that sha256;
 *   - every artifact a client fetched whole during the rounds hashed right;
 *   - `coil cache verify` says ok (every indexed artifact present, sha256
 *     matching), no object file lacks its row, DIR/tmp is empty.
 * Then the same server takes COIL_MALFORMED (default 3000) malformed and
 * mutated HTTP requests on raw sockets, and must stay up, keep answering,
 * write only its own log lines, and stop cleanly.
 * Only loopback addresses; each round and each request is bounded in time. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "cache/cache.h"

#define CLIENTS 4
#define MAX_KEYS 4096

static char coild_path[PATH_MAX], coil_path[PATH_MAX];
static char dir[PATH_MAX], cdir[PATH_MAX + 16];

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- coild ---- */

static pid_t server_pid;
static char server_url[64];

static void start_coild(void)
{
	char portfile[PATH_MAX + 16], log[PATH_MAX + 16];
	snprintf(portfile, sizeof portfile, "%s/port", dir);
	snprintf(log, sizeof log, "%s/coild.log", dir);
	unlink(portfile);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		/* --allow-root: the tests run as root, which coild refuses unless
		 * told; --max-conns-per-ip: the malformed requests come BATCH at a
		 * time from one address, and should all reach the parser */
		execl(coild_path, coild_path, "--listen", "127.0.0.1:0", "--port-file", portfile, "--cache-dir", cdir,
		      "--workers", "2", "--threads", "4", "--compile-timeout", "60", "--allow-root", "--max-conns-per-ip",
		      "1000", (char *)NULL);
		_exit(127);
	}
	server_pid = pid;
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(portfile, "r");
		int port;
		if (f) {
			int ok = fscanf(f, "%d", &port) == 1;
			fclose(f);
			if (ok) {
				snprintf(server_url, sizeof server_url, "http://127.0.0.1:%d", port);
				return;
			}
		}
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			fail_msg("coild exited at start (status %d); see %s", st, log);
		sleep_ms(5);
	}
	fail_msg("coild did not start within 10 s; see %s", log);
}

static void kill_coild(int sig)
{
	kill(server_pid, sig);
	int st;
	waitpid(server_pid, &st, 0);
	server_pid = 0;
}

/* ---- what the clients learn ---- */

typedef struct known {
	char key[65], sha[65];
	int variant;
} known;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static known keys[MAX_KEYS];
static int nkeys;
static int next_variant;
static volatile int running;
static long n_ok, n_failed, n_fetched, n_compiled, n_hits;

/* A client thread cannot fail the test itself (cmocka's longjmp belongs to
 * the main thread): it records the first problem and stops the round. */
static char problem[1024];

static void client_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void client_fail(const char *fmt, ...)
{
	pthread_mutex_lock(&mu);
	if (!problem[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(problem, sizeof problem, fmt, ap);
		va_end(ap);
	}
	running = 0;
	pthread_mutex_unlock(&mu);
}

static void remember(const char *key, const char *sha, int variant)
{
	pthread_mutex_lock(&mu);
	int found = 0;
	for (int i = 0; i < nkeys; i++)
		if (!strcmp(keys[i].key, key)) {
			found = 1;
			if (strcmp(keys[i].sha, sha) && !problem[0])
				snprintf(problem, sizeof problem, "key %s was answered with two sha256s: %s and %s", key,
					 keys[i].sha, sha);
		}
	if (!found && nkeys < MAX_KEYS) {
		snprintf(keys[nkeys].key, 65, "%s", key);
		snprintf(keys[nkeys].sha, 65, "%s", sha);
		keys[nkeys++].variant = variant;
	}
	pthread_mutex_unlock(&mu);
}

/* Variant v of a small graph: its constant differs, so its key does. */
static char *graph_json(int v)
{
	char *s = NULL;
	if (asprintf(&s,
		     "{\"format\": \"coil-graph\", \"version\": 1,"
		     " \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"n\", 8]}],"
		     " \"constants\": [{\"name\": \"c\", \"dtype\": \"f32\", \"shape\": [1], \"data\": [%d.25]}],"
		     " \"nodes\": [{\"id\": \"a\", \"op\": \"aten.add.Tensor\", \"args\": [\"x\", \"c\"], \"outputs\": [\"s\"]},"
		     "  {\"id\": \"r\", \"op\": \"aten.relu\", \"args\": [\"s\"], \"outputs\": [\"y\"]}],"
		     " \"outputs\": [\"y\"]}",
		     v) < 0)
		return NULL;
	return s;
}

typedef struct buf {
	char *p;
	size_t n;
} buf;

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
	buf *b = ud;
	char *q = realloc(b->p, b->n + sz * n + 1);
	if (!q)
		return 0;
	memcpy(q + b->n, p, sz * n);
	b->n += sz * n;
	q[b->n] = 0;
	b->p = q;
	return sz * n;
}

/* One request; the status, or -1 on a transport error. */
static long request(CURL *e, const char *url, const char *body, buf *out)
{
	out->n = 0;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	} else {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	}
	if (curl_easy_perform(e) != CURLE_OK)
		return -1;
	long status = 0;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

static void *client(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 7919u + (unsigned)time(NULL);
	CURL *e = curl_easy_init();
	buf b = {0};
	while (running) {
		char url[64];
		snprintf(url, sizeof url, "%s", server_url);
		int action = (int)(rand_r(&seed) % 4);
		pthread_mutex_lock(&mu);
		int have = nkeys;
		known k = have ? keys[rand_r(&seed) % (unsigned)have] : (known){0};
		int variant = action < 2 || !have ? next_variant++ : k.variant;
		pthread_mutex_unlock(&mu);
		long status;
		if (action == 3 && have) { /* fetch a compiled artifact, check its bytes */
			char full[512];
			snprintf(full, sizeof full, "%s/v1/artifacts/%.64s", url, k.key);
			status = request(e, full, NULL, &b);
			if (status == 200) {
				char sha[65];
				coil_err err = {0};
				if (cache_sha256_bytes(b.p ? b.p : "", b.n, sha, &err) || strcmp(sha, k.sha))
					client_fail("fetched %s: %zu bytes hashing to %s, not %s", k.key, b.n, sha, k.sha);
				__atomic_add_fetch(&n_fetched, 1, __ATOMIC_RELAXED);
			}
		} else { /* compile: a new variant (half the time) or a known one */
			char *g = graph_json(variant), full[512];
			snprintf(full, sizeof full, "%s/v1/compile?target=generic&opt_level=1", url);
			status = request(e, full, g, &b);
			free(g);
			if (status == 200) {
				json_t *o = json_loadb(b.p, b.n, 0, NULL);
				const char *key = json_string_value(json_object_get(o, "key"));
				const char *sha = json_string_value(json_object_get(o, "sha256"));
				if (!key || !sha || !cache_key_valid(key))
					client_fail("a compile answered 200 without key and sha256: %.300s", b.p);
				else
					remember(key, sha, variant);
				__atomic_add_fetch(json_is_true(json_object_get(o, "hit")) ? &n_hits : &n_compiled, 1,
						   __ATOMIC_RELAXED);
				json_decref(o);
			} else if (status > 0 && status != 503) {
				client_fail("compile of variant %d: HTTP %ld: %.300s", variant, status, b.p ? b.p : "");
			}
		}
		__atomic_add_fetch(status == 200 ? &n_ok : &n_failed, 1, __ATOMIC_RELAXED);
		if (status < 0)
			sleep_ms(5); /* the server is down: it will be back */
	}
	free(b.p);
	curl_easy_cleanup(e);
	return NULL;
}

/* ---- checks ---- */

static int count_entries(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int count_objects(void)
{
	char objects[PATH_MAX + 32];
	snprintf(objects, sizeof objects, "%s/objects", cdir);
	DIR *d = opendir(objects);
	assert_non_null(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char fan[PATH_MAX + 320];
		snprintf(fan, sizeof fan, "%s/%s", objects, e->d_name);
		n += count_entries(fan);
	}
	closedir(d);
	return n;
}

static void test_kill_loop(void **state)
{
	(void)state;
	const char *env = getenv("COIL_KILL_ROUNDS");
	int rounds = env ? atoi(env) : 50;
	unsigned seed = (unsigned)time(NULL);
	print_message("# %d rounds, seed %u\n", rounds, seed);
	double t0 = now();
	int kills_mid_compile = 0;
	for (int round = 0; round < rounds; round++) {
		start_coild();
		running = 1;
		pthread_t th[CLIENTS];
		for (int i = 0; i < CLIENTS; i++)
			assert_int_equal(pthread_create(&th[i], NULL, client, (void *)(uintptr_t)(round * CLIENTS + i)), 0);
		/* the first round long enough for the fresh cache's runtime object and
		 * its precompiled header (each ~0.9 s on 2 CPUs, more on a loaded
		 * machine: killed within 1 s every time, no compile ever finished) */
		sleep_ms(round == 0 ? 4000 : 100 + (long)(rand_r(&seed) % 900));
		/* Was a compile running?  (the build directory exists meanwhile) */
		char tmp[PATH_MAX + 32];
		snprintf(tmp, sizeof tmp, "%s/tmp", cdir);
		kills_mid_compile += count_entries(tmp) > 0;
		kill_coild(SIGKILL);
		running = 0;
		for (int i = 0; i < CLIENTS; i++)
			pthread_join(th[i], NULL);
		if (problem[0])
			fail_msg("round %d: %s", round, problem);
	}
	double secs = now() - t0;

	/* Once more, for good: everything a client was told is there. */
	start_coild();
	CURL *e = curl_easy_init();
	buf b = {0};
	for (int i = 0; i < nkeys; i++) {
		char url[512], sha[65];
		snprintf(url, sizeof url, "%s/v1/artifacts/%.64s", server_url, keys[i].key);
		long status = request(e, url, NULL, &b);
		if (status != 200)
			fail_msg("key %s, reported compiled, is lost after the kills: HTTP %ld", keys[i].key, status);
		coil_err err = {0};
		assert_int_equal(cache_sha256_bytes(b.p, b.n, sha, &err), 0);
		if (strcmp(sha, keys[i].sha))
			fail_msg("key %s: served bytes hash to %s, not %s", keys[i].key, sha, keys[i].sha);
	}
	free(b.p);
	curl_easy_cleanup(e);
	kill_coild(SIGTERM);

	/* No partial file anywhere; every object file has its row. */
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof tmp, "%s/tmp", cdir);
	if (count_entries(tmp) != 0)
		fail_msg("%d entries left in %s after a restart and a clean stop", count_entries(tmp), tmp);
	int objects = count_objects();

	/* `coil cache verify`: every indexed artifact present, sha256 matching. */
	char cmd[3 * PATH_MAX];
	snprintf(cmd, sizeof cmd, "%s cache verify --cache-dir %s 2>&1", coil_path, cdir);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	char out[4096] = "";
	size_t n = fread(out, 1, sizeof out - 1, p);
	out[n] = 0;
	int rc = pclose(p);
	if (rc != 0 || strcmp(out, "ok\n"))
		fail_msg("coil cache verify: status %d: %s", rc, out);
	coil_err err = {0};
	coil_cache *c;
	assert_int_equal(cache_open(cdir, 0, &c, &err), 0);
	cache_stats_t st;
	assert_int_equal(cache_stats(c, &st, &err), 0);
	cache_close(c);
	if ((uint64_t)objects != 2 * st.entries)
		fail_msg("%d object files for %llu entries", objects, (unsigned long long)st.entries);
	assert_true(st.entries >= (uint64_t)nkeys);
	print_message("# %d kill rounds survived in %.0f s (%d killed with a build in progress);"
		      " %ld requests answered, %ld cut off; %ld compiled, %ld cache hits, %ld fetches verified;"
		      " %d keys reported compiled, all present; %llu entries verified\n",
		      rounds, secs, kills_mid_compile, n_ok, n_failed, n_compiled, n_hits, n_fetched, nkeys,
		      (unsigned long long)st.entries);
	if (rounds >= 20)
		assert_true(nkeys > 0);
}

/* ---- malformed requests on the wire ---- */

#define BATCH 100

/* A request to mutate: method line, headers, body. */
static const char *const TEMPLATES[] = {
	"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /v1/artifacts/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef HTTP/1.1\r\n"
	"Host: x\r\nIf-None-Match: \"*\"\r\n\r\n",
	"POST /v1/compile?target=generic&opt_level=1&async=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	"Content-Length: 180\r\n\r\n{\"format\": \"coil-graph\", \"version\": 1, \"inputs\": [{\"name\": \"x\", \"dtype\":"
	" \"f32\", \"shape\": [4]}], \"nodes\": [{\"id\": \"n\", \"op\": \"aten.neg\", \"args\": [\"x\"], \"outputs\": [\"y\"]}]}",
	"POST /v1/compile HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"gra\r\n0\r\n\r\n",
	"GET /v1/jobs/0123456789abcdef0123456789abcdef HTTP/1.1\r\nAuthorization: Bearer abcdefgh\r\n\r\n",
	"DELETE /v1/artifacts/..%2f..%2fetc%2fpasswd HTTP/1.1\r\n\r\n",
	"GET /v1/artifacts/%0acoild:%20forged%20line HTTP/1.1\r\n\r\n",
	"GET /metrics HTTP/1.0\r\n\r\n",
};

static const char *const TOKENS[] = {"\r\n", "\n", ":", " ", "\0", "%", "%00", "%0a", "{", "}", "\"", "\\",
				     "99999999999999999999", "-1", "chunked", "HTTP/9.9", "/../", "\xff\xfe", "\r\n\r\n"};

/* Mutate t into out: a few random byte flips, token insertions, cuts. */
static size_t mutate(const char *t, char *out, size_t cap, unsigned *seed)
{
	size_t n = strlen(t);
	memcpy(out, t, n);
	int edits = 1 + (int)(rand_r(seed) % 6);
	for (int k = 0; k < edits; k++) {
		size_t at = n ? rand_r(seed) % n : 0;
		switch (rand_r(seed) % 4) {
		case 0: /* flip a byte */
			if (n)
				out[at] = (char)rand_r(seed);
			break;
		case 1: { /* insert a token */
			const char *tok = TOKENS[rand_r(seed) % (sizeof TOKENS / sizeof *TOKENS)];
			size_t tl = strlen(tok) ? strlen(tok) : 1;
			if (n + tl < cap) {
				memmove(out + at + tl, out + at, n - at);
				memcpy(out + at, tok, tl);
				n += tl;
			}
			break;
		}
		case 2: /* cut the request short */
			n = at;
			break;
		default: { /* repeat a stretch (long headers, long lines) */
			size_t len = 1 + rand_r(seed) % 64, times = 1 + rand_r(seed) % 200;
			for (size_t r = 0; r < times && at + len <= n && n + len < cap; r++) {
				memmove(out + at + len, out + at, n - at);
				n += len;
			}
		}
		}
	}
	return n;
}

static void test_malformed_requests(void **state)
{
	(void)state;
	const char *env = getenv("COIL_MALFORMED");
	int total = env ? atoi(env) : 3000;
	start_coild();
	int port = atoi(strrchr(server_url, ':') + 1);
	unsigned seed = (unsigned)time(NULL) ^ 0x5eed;
	double t_begin = now();
	static char req[1 << 16];
	int sent = 0, answered = 0;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int b = 0; b < total; b += BATCH) {
		int fds[BATCH], nfd = 0;
		for (int i = 0; i < BATCH && b + i < total; i++) {
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			assert_true(fd >= 0);
			if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
				close(fd);
				continue;
			}
			const char *t = TEMPLATES[rand_r(&seed) % (sizeof TEMPLATES / sizeof *TEMPLATES)];
			size_t n = (b + i) % 10 == 0 ? strlen(t) : mutate(t, req, sizeof req, &seed);
			if (send(fd, (b + i) % 10 == 0 ? t : req, n, MSG_NOSIGNAL) >= 0)
				sent++;
			shutdown(fd, SHUT_WR);
			fds[nfd++] = fd;
		}
		/* Read what comes back for up to 150 ms, then hang up. */
		double until = now() + 0.15;
		int open_ = nfd;
		while (open_ > 0 && now() < until) {
			struct pollfd pf[BATCH];
			for (int i = 0; i < nfd; i++)
				pf[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
			if (poll(pf, (nfds_t)nfd, 50) <= 0)
				continue;
			for (int i = 0; i < nfd; i++) {
				if (fds[i] < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
					continue;
				char buf[4096];
				ssize_t r = recv(fds[i], buf, sizeof buf, 0);
				if (r > 0 && !strncmp(buf, "HTTP/1.", 7))
					answered++;
				if (r <= 0 || r > 0) {
					close(fds[i]);
					fds[i] = -1;
					open_--;
				}
			}
		}
		for (int i = 0; i < nfd; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	}
	double t_send = now() - t_begin;
	/* Alive, still answering, its log not forged, and it stops cleanly. */
	CURL *e = curl_easy_init();
	buf bb = {0};
	char url[128];
	snprintf(url, sizeof url, "%s/healthz", server_url);
	assert_int_equal(request(e, url, NULL, &bb), 200);
	free(bb.p);
	curl_easy_cleanup(e);
	int st;
	double t_stop = now();
	kill(server_pid, SIGTERM);
	waitpid(server_pid, &st, 0);
	server_pid = 0;
	t_stop = now() - t_stop;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (t_stop > 10)
		fail_msg("stopping took %.1f s after the malformed requests", t_stop);
	char log[PATH_MAX + 16], line[2048];
	snprintf(log, sizeof log, "%s/coild.log", dir);
	FILE *f = fopen(log, "r");
	assert_non_null(f);
	int lines = 0;
	while (fgets(line, sizeof line, f)) {
		lines++;
		/* coild's own lines, and libcoil's sandbox saying once what this
		 * machine does not allow (a chroot: no private mounts) */
		if (strncmp(line, "coild: ", 7) && strncmp(line, "coil: sandbox: ", 15))
			fail_msg("a request forged a log line: %s", line);
	}
	fclose(f);
	print_message("# %d malformed or mutated requests sent in %.1f s (%d answered with HTTP, the rest"
		      " dropped); coild alive, %d log lines all its own, clean stop in %.1f s\n",
		      sent, t_send, answered, lines, t_stop);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/coil-crash-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(cdir, sizeof cdir, "%s/cache", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (server_pid > 0)
		kill_coild(SIGKILL);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

int main(int argc, char **argv)
{
	(void)argc;
	char self[PATH_MAX];
	snprintf(self, sizeof self, "%s", argv[0]);
	char *d = dirname(self);
	snprintf(coild_path, sizeof coild_path, "%s/../coild", d);
	snprintf(coil_path, sizeof coil_path, "%s/../coil", d);
	if (access(coild_path, X_OK) != 0 || access(coil_path, X_OK) != 0) {
		fprintf(stderr, "test_crash: no coild or coil next to %s\n", d);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_loop),
		cmocka_unit_test(test_malformed_requests),
	};
	int fails = cmocka_run_group_tests_name("crash", tests, setup, teardown);
	curl_global_cleanup();
	return fails;
}
