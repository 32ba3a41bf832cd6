/* A cache on a small file system, and a cache under a tiny budget.  The
 * file system is a tmpfs of a few hundred KiB mounted in a mount namespace
 * of this process's own (unshare(CLONE_NEWNS) before anything else), so the
 * mount vanishes with the process whatever happens.  Its mounts are made
 * private so that nothing mounted here propagates out; where / is no mount
 * point (a chroot: MS_PRIVATE on / fails with EINVAL) the small file system
 * goes below a mount point that can be made private (/dev/shm, /run, ...)
 * instead.  Where neither works (no CAP_SYS_ADMIN, a chroot without such a
 * mount) the full-disk tests skip, saying why, and
 * tests/test_fault.c's test_disk_full (ENOSPC injected) stands in.
 *
 *   full disk, cache API: stores fail saying the disk is full, the index
 *     stays consistent, what is stored keeps being served, and after a gc
 *     stores work again;
 *   full disk, coild: compiles fail with a clear 500, cached artifacts and
 *     /healthz keep being served, deleting makes room again;
 *   tiny budget, coild: many compiles all succeed, eviction keeps the cache
 *     within its budget, the index verifies. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "cache/cache.h"

static char coild_path[PATH_MAX];
static char root[PATH_MAX];        /* temp dir */
static char small[PATH_MAX + 16];  /* the tmpfs, when mounted */
static int have_mount;
static pid_t live_pid;             /* a coild to stop if a test fails */
static char mount_why[256];

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

/* (Re)mount the small file system with size bytes, empty. */
static void fresh_small_fs(const char *size)
{
	umount2(small, MNT_DETACH);
	char opts[64];
	snprintf(opts, sizeof opts, "size=%s,mode=0700", size);
	if (mount("tmpfs", small, "tmpfs", 0, opts) != 0)
		fail_msg("mount tmpfs on %s: %s", small, strerror(errno));
}

/* Where / is no mount point (a chroot, where MS_PRIVATE on / fails with
 * EINVAL and a user namespace may not be made): a mount point below it of
 * an in-memory file system (a tmpfs, devtmpfs: /dev/shm, /run, /dev) that
 * can be made private; `small` becomes a new directory there.  0, or -1. */
static int small_elsewhere(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096], mp[PATH_MAX], type[64];
	int rc = -1;
	while (rc && f && fgets(line, sizeof line, f)) {
		const char *sep = strstr(line, " - ");
		if (!sep || sscanf(sep + 3, "%63s", type) != 1 || sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 ||
		    (strcmp(type, "tmpfs") && strcmp(type, "devtmpfs")) || !strcmp(mp, "/") ||
		    mount(NULL, mp, NULL, MS_REC | MS_PRIVATE, NULL) != 0)
			continue;
		int n = snprintf(small, sizeof small, "%.*s/coil-diskfull-XXXXXX", (int)(sizeof small - 32), mp);
		rc = n > 0 && (size_t)n < sizeof small && mkdtemp(small) ? 0 : -1;
	}
	if (f)
		fclose(f);
	return rc;
}

/* Our own mount namespace for the small file system, nothing mounted in it
 * propagating out (to the namespace we came from); "" or why not. */
static void own_mounts(char *why, size_t cap)
{
	why[0] = 0;
	if (unshare(CLONE_NEWNS) != 0) {
		snprintf(why, cap, "unshare(CLONE_NEWNS): %s", strerror(errno));
		return;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0)
		return;
	if (errno != EINVAL)
		snprintf(why, cap, "making mounts private: %s", strerror(errno));
	else if (small_elsewhere() != 0)
		snprintf(why, cap, "/ is no mount point, and no in-memory file system below it could be made private");
}

static int full_msg(const char *m)
{
	return strstr(m, "No space left on device") || strstr(m, "database or disk is full") ||
	       strstr(m, "disk is full");
}

/* ---- the cache API on a full disk ---- */

static void test_cache_full_disk(void **state)
{
	(void)state;
	if (!have_mount) {
		print_message("# no tmpfs (%s)\n", mount_why);
		skip();
	}
	fresh_small_fs("768k");
	char dir[PATH_MAX + 32];
	snprintf(dir, sizeof dir, "%s/cache", small);
	coil_err err = {0};
	coil_cache *c;
	if (cache_open(dir, 0, &c, &err))
		fail_msg("%s", err.msg);
	static unsigned char bytes[48 * 1024];
	enum { N = 64 };
	char keys[N][65];
	int stored = 0, refused = 0;
	for (int i = 0; i < N; i++) {
		char seed[16];
		snprintf(seed, sizeof seed, "k%d", i);
		cache_sha256_bytes(seed, strlen(seed), keys[i], &err);
		memset(bytes, i, sizeof bytes);
		char canon[64];
		snprintf(canon, sizeof canon, "{\"graph\":%d}", i);
		if (cache_store_bytes(c, keys[i], bytes, sizeof bytes, canon, strlen(canon), NULL, &err) == 0) {
			stored++;
		} else {
			if (!full_msg(err.msg))
				fail_msg("a store on a full disk should say so: %s", err.msg);
			refused++;
		}
	}
	/* 64 * 48 KiB is four times the disk: it kept going by evicting. */
	cache_stats_t st;
	assert_int_equal(cache_stats(c, &st, &err), 0);
	assert_true(stored >= N - 4);
	assert_true(st.evictions > 0 && st.entries < (uint64_t)N);
	char tmp[PATH_MAX + 64];
	snprintf(tmp, sizeof tmp, "%s/tmp", dir);
	DIR *d = opendir(tmp);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			fail_msg("left in tmp/ on a full disk: %s", e->d_name);
	closedir(d);
	int bad = -1;
	if (cache_verify(c, NULL, NULL, &bad, &err) || bad)
		fail_msg("verify on a full disk: %d bad: %s", bad, err.msg);
	char canon[64], path[CACHE_PATH_MAX];
	snprintf(canon, sizeof canon, "{\"graph\":%d}", N - 1);
	if (cache_lookup(c, keys[N - 1], canon, strlen(canon), path, sizeof path, &err) != 1)
		fail_msg("the newest entry is not served: %s", err.msg);
	/* Removing and gc work on the full disk too. */
	assert_int_equal(cache_remove(c, keys[N - 1], &err), 0);
	assert_int_equal(cache_gc(c, 0, &err), 0);
	cache_close(c);
	print_message("# full disk (768 KiB): %d stores of 48 KiB done by evicting (%llu evictions), %d refused"
		      " with a clear error; index verified\n",
		      stored, (unsigned long long)st.evictions, refused);
}

/* ---- coild ---- */

typedef struct srv {
	pid_t pid;
	char url[64];
	char log[PATH_MAX + 16];
} srv;

static void start(srv *s, const char *cache, const char *budget)
{
	char portfile[PATH_MAX + 16];
	snprintf(portfile, sizeof portfile, "%s/port", root);
	snprintf(s->log, sizeof s->log, "%s/coild.log", root);
	unlink(portfile);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execl(coild_path, coild_path, "--listen", "127.0.0.1:0", "--port-file", portfile, "--cache-dir", cache,
		      "--workers", "2", "--threads", "4", "--budget", budget, "--allow-root", (char *)NULL);
		_exit(127);
	}
	s->pid = pid;
	live_pid = pid;
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(portfile, "r");
		int port;
		if (f) {
			int ok = fscanf(f, "%d", &port) == 1;
			fclose(f);
			if (ok) {
				snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", port);
				return;
			}
		}
		sleep_ms(10);
	}
	fail_msg("coild did not start; see %s", s->log);
}

static int stop(srv *s)
{
	kill(s->pid, SIGTERM);
	int st = 0;
	waitpid(s->pid, &st, 0);
	live_pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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

static long http(const srv *s, const char *method, const char *path, const char *body, buf *out)
{
	char url[512];
	snprintf(url, sizeof url, "%s%s", s->url, path);
	out->n = 0;
	CURL *e = curl_easy_init();
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	if (strcmp(method, "GET") && strcmp(method, "POST"))
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	long status = -1;
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(e);
	return status;
}

/* Variant v of a small graph (its constant, and so its key, differ). */
static char *graph_json(int v)
{
	char *s = NULL;
	if (asprintf(&s,
		     "{\"format\": \"coil-graph\", \"version\": 1,"
		     " \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"n\", 8]}],"
		     " \"constants\": [{\"name\": \"c\", \"dtype\": \"f32\", \"shape\": [1], \"data\": [%d.5]}],"
		     " \"nodes\": [{\"id\": \"a\", \"op\": \"aten.mul.Tensor\", \"args\": [\"x\", \"c\"], \"outputs\": [\"y\"]}],"
		     " \"outputs\": [\"y\"]}",
		     v) < 0)
		return NULL;
	return s;
}

/* Compile variant v: the status; *key (65 bytes) on 200, the error text
 * otherwise. */
static long compile(const srv *s, int v, char *key, char *msg, size_t cap)
{
	buf b = {0};
	char *g = graph_json(v);
	long st = http(s, "POST", "/v1/compile?target=generic&opt_level=0", g, &b);
	free(g);
	json_t *o = b.p ? json_loadb(b.p, b.n, 0, NULL) : NULL;
	const char *k = json_string_value(json_object_get(o, "key"));
	const char *m = json_string_value(json_object_get(o, "error"));
	if (key)
		snprintf(key, 65, "%s", k ? k : "");
	snprintf(msg, cap, "%s", m ? m : (b.p ? b.p : "(no answer)"));
	json_decref(o);
	free(b.p);
	return st;
}

static double metric(const srv *s, const char *name)
{
	buf b = {0};
	assert_int_equal(http(s, "GET", "/metrics", NULL, &b), 200);
	double v = -1;
	size_t n = strlen(name);
	for (char *p = b.p; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, name, n) && p[n] == ' ')
			v = strtod(p + n + 1, NULL);
	free(b.p);
	return v;
}

static void verify_dir(const char *dir)
{
	coil_err err = {0};
	coil_cache *c;
	if (cache_open(dir, 0, &c, &err))
		fail_msg("%s", err.msg);
	int bad = -1;
	if (cache_verify(c, NULL, NULL, &bad, &err) || bad)
		fail_msg("verify: %d bad: %s", bad, err.msg);
	cache_close(c);
}

static void test_coild_full_disk(void **state)
{
	(void)state;
	if (!have_mount) {
		print_message("# no tmpfs (%s)\n", mount_why);
		skip();
	}
	fresh_small_fs("512k");
	char dir[PATH_MAX + 32];
	snprintf(dir, sizeof dir, "%s/cache", small);
	srv s;
	start(&s, dir, "0");
	enum { N = 60 };
	char keys[N][65], msg[1024];
	int ok = 0, refused = 0;
	for (int v = 0; v < N; v++) {
		long st = compile(&s, v, keys[ok], msg, sizeof msg);
		if (st == 200) {
			ok++;
		} else {
			if (st != 500 || (!full_msg(msg) && !strstr(msg, "file system is full")))
				fail_msg("a compile on a full disk: HTTP %ld: %s", st, msg);
			refused++;
		}
	}
	double evictions = metric(&s, "coild_cache_evictions_total");
	assert_true(ok >= N / 2 && evictions > 0);
	/* Still serving what it has. */
	buf b = {0};
	assert_int_equal(http(&s, "GET", "/healthz", NULL, &b), 200);
	char path[128];
	snprintf(path, sizeof path, "/v1/artifacts/%.64s", keys[ok - 1]);
	assert_int_equal(http(&s, "GET", path, NULL, &b), 200);
	assert_true(b.n > 0);
	assert_int_equal(http(&s, "DELETE", path, NULL, &b), 200);
	free(b.p);
	assert_int_equal(stop(&s), 0);
	verify_dir(dir);
	print_message("# coild on a 512 KiB disk: %d of %d compiles done by evicting (%.0f evictions), %d refused"
		      " with a clear 500; still serving; index verified\n",
		      ok, N, evictions, refused);
}

/* A tiny budget: every compile succeeds, eviction keeps the total within
 * the budget.  Runs on the small file system when there is one (the budget
 * is below its size), else in the temp dir. */
static void test_coild_tiny_budget(void **state)
{
	(void)state;
	char dir[PATH_MAX + 32];
	if (have_mount) {
		fresh_small_fs("2m");
		snprintf(dir, sizeof dir, "%s/cache", small);
	} else {
		snprintf(dir, sizeof dir, "%s/budget-cache", root);
	}
	srv s;
	start(&s, dir, "200k");
	char msg[1024];
	int n = 40;
	for (int v = 0; v < n; v++) {
		long st = compile(&s, 5000 + v, NULL, msg, sizeof msg);
		if (st != 200)
			fail_msg("compile %d under a tiny budget: HTTP %ld: %s", v, st, msg);
	}
	double bytes = metric(&s, "coild_cache_bytes"), evictions = metric(&s, "coild_cache_evictions_total");
	assert_true(bytes > 0 && bytes <= 200 * 1024);
	assert_true(evictions > 0);
	assert_int_equal(stop(&s), 0);
	verify_dir(dir);
	print_message("# tiny budget: %d compiles, all served; %.0f evictions; %.0f bytes cached of 204800\n", n,
		      evictions, bytes);
}

static int teardown(void **state)
{
	(void)state;
	if (live_pid > 0) {
		kill(live_pid, SIGKILL);
		waitpid(live_pid, NULL, 0);
	}
	if (have_mount) {
		umount2(small, MNT_DETACH);
		rmdir(small); /* when not under root */
	}
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

int main(int argc, char **argv)
{
	(void)argc;
	/* Before any thread exists: our own mount namespace, private, so that
	 * the tmpfs is seen by us and our children only and goes with us. */
	snprintf(root, sizeof root, "%s/coil-diskfull-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(root))
		return 1;
	snprintf(small, sizeof small, "%s/small", root);
	mkdir(small, 0700);
	own_mounts(mount_why, sizeof mount_why);
	if (!mount_why[0] && mount("tmpfs", small, "tmpfs", 0, "size=64k") != 0)
		snprintf(mount_why, sizeof mount_why, "mount tmpfs: %s", strerror(errno));
	have_mount = !mount_why[0];
	char self[PATH_MAX];
	snprintf(self, sizeof self, "%s", argv[0]);
	snprintf(coild_path, sizeof coild_path, "%s/../coild", dirname(self));
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cache_full_disk),
		cmocka_unit_test(test_coild_full_disk),
		cmocka_unit_test(test_coild_tiny_budget),
	};
	return cmocka_run_group_tests_name("disk full and budget", tests, NULL, teardown);
}
