/* Tests for the artifact cache (cache/cache.h).  Each test gets a fresh
 * mkdtemp directory, removed afterwards. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "client/artifact.h"

typedef struct {
	char dir[PATH_MAX]; /* the temp directory; the cache lives in dir/c */
	char cdir[PATH_MAX];
	coil_cache *c;
} fixture;

/* snprintf into a PATH_MAX buffer, failing the test if it does not fit. */
static void pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, PATH_MAX, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && n < PATH_MAX);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof *f);
	assert_non_null(f);
	pathf(f->dir, "%s/coil-cache-test-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(f->dir));
	pathf(f->cdir, "%s/c", f->dir);
	coil_err err = {0};
	if (cache_open(f->cdir, 0, &f->c, &err) != 0)
		fail_msg("cache_open: %s", err.msg);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	cache_close(f->c);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* Reopen f's cache with another budget. */
static void reopen(fixture *f, uint64_t budget)
{
	coil_err err = {0};
	cache_close(f->c);
	f->c = NULL;
	if (cache_open(f->cdir, budget, &f->c, &err) != 0)
		fail_msg("cache_open: %s", err.msg);
}

/* A valid key derived from a name. */
static void key_for(const char *name, char key[65])
{
	coil_err err = {0};
	assert_int_equal(cache_sha256_bytes(name, strlen(name), key, &err), 0);
	assert_true(cache_key_valid(key));
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* Read a whole file (malloc'd, NUL-terminated); *len its size. */
static char *read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	char *buf = malloc(1 << 20);
	assert_non_null(buf);
	*len = fread(buf, 1, (1 << 20) - 1, fp);
	buf[*len] = '\0';
	fclose(fp);
	return buf;
}

/* Regular files under path, recursively. */
static int count_files(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[PATH_MAX];
		struct stat st;
		pathf(p, "%s/%s", path, e->d_name);
		if (lstat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			n += count_files(p);
		else
			n++;
	}
	closedir(d);
	return n;
}

static void sub(const fixture *f, const char *rel, char *out)
{
	pathf(out, "%s/%s", f->cdir, rel);
}

static void obj_path(const fixture *f, const char *key, const char *ext, char *out)
{
	pathf(out, "%s/objects/%.2s/%s%s", f->cdir, key, key, ext);
}

/* Store `size` bytes filled with `fill` under key with canon text. */
static void store_n(fixture *f, const char *key, size_t size, int fill, const char *canon)
{
	char *data = malloc(size ? size : 1);
	assert_non_null(data);
	memset(data, fill, size);
	coil_err err = {0};
	if (cache_store_bytes(f->c, key, data, size, canon, strlen(canon), NULL, &err) != 0)
		fail_msg("cache_store_bytes: %s", err.msg);
	free(data);
}

static int lookup(fixture *f, const char *key, const char *canon, char *path)
{
	coil_err err = {0};
	char buf[CACHE_PATH_MAX];
	int rc = cache_lookup(f->c, key, canon, strlen(canon), path ? path : buf, CACHE_PATH_MAX, &err);
	if (rc < 0)
		fail_msg("cache_lookup: %s", err.msg);
	return rc;
}

static cache_stats_t stats(fixture *f)
{
	cache_stats_t s;
	coil_err err = {0};
	if (cache_stats(f->c, &s, &err) != 0)
		fail_msg("cache_stats: %s", err.msg);
	return s;
}

static int present(fixture *f, const char *key)
{
	coil_err err = {0};
	int rc = cache_get_meta(f->c, key, NULL, NULL, NULL, &err);
	assert_true(rc >= 0);
	return rc;
}

/* ---- tests ---- */

static void test_sha256_known_vector(void **state)
{
	(void)state;
	char hex[65];
	coil_err err = {0};
	assert_int_equal(cache_sha256_bytes("abc", 3, hex, &err), 0);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(cache_sha256_bytes(NULL, 0, hex, &err), 0);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_int_equal(cache_sha256_file("/nonexistent/coil", hex, &err), -1);
	assert_non_null(strstr(err.msg, "/nonexistent/coil"));
}

static void test_store_then_lookup_hits(void **state)
{
	fixture *f = *state;
	char key[65], src[PATH_MAX], path[CACHE_PATH_MAX];
	key_for("graph-1", key);
	const char canon[] = "{\"nodes\":[\"relu\"]}";
	unsigned char bytes[5000];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (unsigned char)(i * 7 + 3);
	pathf(src, "%s/kernel.so", f->dir);
	write_file(src, bytes, sizeof bytes);

	coil_err err = {0};
	if (cache_store(f->c, key, src, canon, strlen(canon), "{\"target\":\"avx2\"}", &err) != 0)
		fail_msg("cache_store: %s", err.msg);
	assert_int_equal(lookup(f, key, canon, path), 1);

	char want[PATH_MAX];
	obj_path(f, key, ".so", want);
	assert_string_equal(path, want);
	size_t len;
	char *got = read_file(path, &len);
	assert_int_equal(len, sizeof bytes);
	assert_memory_equal(got, bytes, sizeof bytes);
	free(got);
	/* The canonical graph is stored beside it. */
	obj_path(f, key, ".graph", want);
	got = read_file(want, &len);
	assert_string_equal(got, canon);
	free(got);

	cache_stats_t s = stats(f);
	assert_int_equal(s.entries, 1);
	assert_int_equal(s.bytes, sizeof bytes + strlen(canon));
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.misses, 0);
	char tmp[PATH_MAX];
	sub(f, "tmp", tmp);
	assert_int_equal(count_files(tmp), 0);
}

static void test_lookup_other_key_misses(void **state)
{
	fixture *f = *state;
	char a[65], b[65];
	key_for("a", a);
	key_for("b", b);
	store_n(f, a, 100, 'a', "graph a");
	assert_int_equal(lookup(f, b, "graph a", NULL), 0);
	assert_int_equal(lookup(f, b, "graph b", NULL), 0);
	cache_stats_t s = stats(f);
	assert_int_equal(s.hits, 0);
	assert_int_equal(s.misses, 2);
	assert_int_equal(s.collisions, 0);
}

static void test_canon_mismatch_is_collision_miss(void **state)
{
	fixture *f = *state;
	char key[65];
	key_for("k", key);
	store_n(f, key, 64, 'x', "graph one");
	/* Same length, different bytes; then a different length. */
	assert_int_equal(lookup(f, key, "graph two", NULL), 0);
	assert_int_equal(lookup(f, key, "graph one!", NULL), 0);
	assert_int_equal(lookup(f, key, "", NULL), 0);
	cache_stats_t s = stats(f);
	assert_int_equal(s.collisions, 3);
	assert_int_equal(s.misses, 3);
	assert_int_equal(s.hits, 0);
	/* The entry itself is untouched and still hits with its own graph. */
	assert_int_equal(lookup(f, key, "graph one", NULL), 1);
}

static void test_invalid_keys_rejected_everywhere(void **state)
{
	fixture *f = *state;
	char good[65];
	key_for("good", good);
	char upper[65], shorter[64], longer[66], nonhex[65], nul_inside[65];
	strcpy(upper, good);
	upper[0] = 'A';
	upper[1] = 'B';
	memcpy(shorter, good, 63);
	shorter[63] = '\0';
	memcpy(longer, good, 64);
	longer[64] = 'a';
	longer[65] = '\0';
	strcpy(nonhex, good);
	nonhex[10] = 'g';
	strcpy(nul_inside, good);
	nul_inside[32] = '\0';
	char dotdot[65];
	memset(dotdot, 'a', 64);
	memcpy(dotdot, "../x", 4);
	dotdot[64] = '\0';
	const char *bad[] = {upper, shorter, longer, nonhex, nul_inside, "../x", dotdot, "",
			     "../../../../etc/passwd", NULL};
	const size_t nbad = sizeof bad / sizeof bad[0];
	char src[PATH_MAX], path[CACHE_PATH_MAX];
	pathf(src, "%s/src.so", f->dir);
	write_file(src, "abc", 3);
	int files_before = count_files(f->dir);

	for (size_t i = 0; i < nbad; i++) {
		const char *k = bad[i];
		coil_err err = {0};
		char *meta = NULL;
		char sha[65];
		uint64_t size;
		int fd = 123;
		assert_false(cache_key_valid(k));
#define REJECTS(call)                                                                      \
	do {                                                                               \
		memset(&err, 0, sizeof err);                                               \
		assert_int_equal((call), -1);                                              \
		if (!strstr(err.msg, "invalid cache key"))                                 \
			fail_msg("bad key %zu: %s: message \"%s\"", i, #call, err.msg);    \
	} while (0)
		REJECTS(cache_lookup(f->c, k, "g", 1, path, sizeof path, &err));
		REJECTS(cache_store(f->c, k, src, "g", 1, NULL, &err));
		REJECTS(cache_store_bytes(f->c, k, "abc", 3, "g", 1, NULL, &err));
		REJECTS(cache_get_meta(f->c, k, &meta, sha, &size, &err));
		REJECTS(cache_remove(f->c, k, &err));
		REJECTS(cache_lock_key(f->c, k, &fd, &err));
		assert_int_equal(fd, -1);
		REJECTS(cache_trylock_key(f->c, k, &fd, &err));
		assert_null(meta);
#undef REJECTS
	}
	/* Nothing was created anywhere, in the cache or beside it. */
	char objects[PATH_MAX], locks[PATH_MAX], tmp[PATH_MAX];
	sub(f, "objects", objects);
	sub(f, "locks", locks);
	sub(f, "tmp", tmp);
	assert_int_equal(count_files(objects) + count_files(locks) + count_files(tmp), 0);
	assert_int_equal(count_files(f->dir), files_before);
	assert_int_equal(stats(f).entries, 0);
	assert_true(cache_key_valid(good));
}

static void test_budget_eviction_is_lru(void **state)
{
	fixture *f = *state;
	/* Each entry: 100 artifact bytes + 10 graph bytes = 110; room for 3. */
	reopen(f, 350);
	char k[5][65];
	char canon[5][24];
	for (int i = 0; i < 5; i++) {
		char name[16];
		snprintf(name, sizeof name, "e%d", i);
		key_for(name, k[i]);
		snprintf(canon[i], sizeof canon[i], "graph-%04d", i);
	}
	store_n(f, k[0], 100, 0, canon[0]);
	store_n(f, k[1], 100, 1, canon[1]);
	store_n(f, k[2], 100, 2, canon[2]);
	assert_int_equal(stats(f).bytes, 330);
	/* Use 0 then 1: 2 is now the least recently used. */
	assert_int_equal(lookup(f, k[0], canon[0], NULL), 1);
	assert_int_equal(lookup(f, k[1], canon[1], NULL), 1);
	store_n(f, k[3], 100, 3, canon[3]);
	assert_false(present(f, k[2]));
	assert_true(present(f, k[0]) && present(f, k[1]) && present(f, k[3]));
	char p[PATH_MAX];
	obj_path(f, k[2], ".so", p);
	assert_int_not_equal(access(p, F_OK), 0);
	obj_path(f, k[2], ".graph", p);
	assert_int_not_equal(access(p, F_OK), 0);

	/* A bigger entry pushes out the two least recently used (0, then 1). */
	assert_int_equal(lookup(f, k[3], canon[3], NULL), 1);
	store_n(f, k[4], 200, 4, canon[4]);
	assert_false(present(f, k[0]));
	assert_false(present(f, k[1]));
	assert_true(present(f, k[3]) && present(f, k[4]));
	cache_stats_t s = stats(f);
	assert_true(s.bytes <= 350);
	assert_int_equal(s.bytes, 110 + 210);
	assert_int_equal(s.evictions, 3);
	assert_int_equal(s.budget, 350);
	char objects[PATH_MAX];
	sub(f, "objects", objects);
	assert_int_equal(count_files(objects), 4);
}

static void test_entry_over_budget_fails_cleanly(void **state)
{
	fixture *f = *state;
	reopen(f, 300);
	char a[65], big[65];
	key_for("a", a);
	key_for("big", big);
	store_n(f, a, 100, 'a', "g");
	char *data = calloc(1, 400);
	coil_err err = {0};
	assert_int_equal(cache_store_bytes(f->c, big, data, 400, "g", 1, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "budget"));
	/* 300 bytes of artifact + 1 byte of graph is over too. */
	assert_int_equal(cache_store_bytes(f->c, big, data, 300, "g", 1, NULL, &err), -1);
	free(data);
	assert_false(present(f, big));
	assert_true(present(f, a)); /* nothing was evicted for it */
	cache_stats_t s = stats(f);
	assert_int_equal(s.entries, 1);
	assert_int_equal(s.evictions, 0);
	char objects[PATH_MAX], tmp[PATH_MAX];
	sub(f, "objects", objects);
	sub(f, "tmp", tmp);
	assert_int_equal(count_files(objects), 2);
	assert_int_equal(count_files(tmp), 0);
}

static void test_gc_evicts_lru_down_to_budget(void **state)
{
	fixture *f = *state;
	char k[4][65];
	for (int i = 0; i < 4; i++) {
		char name[16];
		snprintf(name, sizeof name, "g%d", i);
		key_for(name, k[i]);
		store_n(f, k[i], 90, i, "0123456789");
	}
	assert_int_equal(lookup(f, k[0], "0123456789", NULL), 1);
	coil_err err = {0};
	/* 400 bytes in all; keep 250: the LRU ones (1, then 2) go. */
	assert_int_equal(cache_gc(f->c, 250, &err), 0);
	assert_false(present(f, k[1]));
	assert_false(present(f, k[2]));
	assert_true(present(f, k[0]) && present(f, k[3]));
	assert_int_equal(stats(f).evictions, 2);
	assert_int_equal(stats(f).budget, 0); /* the handle's own budget is unchanged */
	assert_int_equal(cache_gc(f->c, 0, &err), 0);
	assert_int_equal(stats(f).entries, 0);
	assert_int_equal(stats(f).bytes, 0);
	char objects[PATH_MAX];
	sub(f, "objects", objects);
	assert_int_equal(count_files(objects), 0);
}

static void test_reopen_keeps_entries_and_stats(void **state)
{
	fixture *f = *state;
	char a[65], b[65];
	key_for("a", a);
	key_for("b", b);
	store_n(f, a, 10, 1, "ga");
	store_n(f, b, 20, 2, "gb");
	assert_int_equal(lookup(f, a, "ga", NULL), 1);
	assert_int_equal(lookup(f, a, "gx", NULL), 0);
	assert_int_equal(lookup(f, "0000000000000000000000000000000000000000000000000000000000000000",
				"ga", NULL),
			 0);
	reopen(f, 1000);
	cache_stats_t s = stats(f);
	assert_int_equal(s.entries, 2);
	assert_int_equal(s.bytes, 34);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.misses, 2);
	assert_int_equal(s.collisions, 1);
	assert_int_equal(s.budget, 1000);
	assert_int_equal(lookup(f, b, "gb", NULL), 1);
	assert_int_equal(stats(f).hits, 2);
}

static void test_reconcile_drops_rows_without_files(void **state)
{
	fixture *f = *state;
	char a[65], b[65], c[65], d[65];
	key_for("a", a);
	key_for("b", b);
	key_for("c", c);
	key_for("d", d);
	store_n(f, a, 10, 1, "ga");
	store_n(f, b, 10, 2, "gb");
	store_n(f, c, 10, 3, "gc");
	store_n(f, d, 10, 4, "gd");
	char p[PATH_MAX];
	obj_path(f, a, ".so", p);
	assert_int_equal(unlink(p), 0); /* artifact gone */
	obj_path(f, b, ".so", p);
	write_file(p, "short", 5); /* artifact of the wrong size */
	obj_path(f, c, ".graph", p);
	assert_int_equal(unlink(p), 0); /* graph text gone */
	reopen(f, 0);
	assert_false(present(f, a));
	assert_false(present(f, b));
	assert_false(present(f, c));
	assert_true(present(f, d));
	/* The dropped entries' remaining files went with their rows. */
	char objects[PATH_MAX];
	sub(f, "objects", objects);
	assert_int_equal(count_files(objects), 2);
	assert_int_equal(stats(f).entries, 1);
}

static void test_reconcile_removes_strays_and_stale_tmp(void **state)
{
	fixture *f = *state;
	char a[65], stray[65];
	key_for("a", a);
	key_for("stray", stray);
	store_n(f, a, 10, 1, "ga");
	char fan[PATH_MAX], p[PATH_MAX];
	pathf(fan, "%s/objects/%.2s", f->cdir, stray);
	mkdir(fan, 0755);
	obj_path(f, stray, ".so", p);
	write_file(p, "orphan", 6);
	obj_path(f, stray, ".graph", p);
	write_file(p, "orphan graph", 12);
	/* A file not named like ours is left alone. */
	char foreign[PATH_MAX];
	pathf(foreign, "%s/README", fan);
	write_file(foreign, "x", 1);

	char stale[PATH_MAX], fresh[PATH_MAX];
	sub(f, "tmp/123-0.so.tmp", stale);
	sub(f, "tmp/456-0.so.tmp", fresh);
	write_file(stale, "partial", 7);
	write_file(fresh, "in progress", 11);
	/* A store in progress holds its temp files' flock; a dead one does not,
	 * however young its file. */
	int held = open(fresh, O_RDONLY);
	assert_true(held >= 0);
	assert_int_equal(flock(held, LOCK_EX), 0);
	char dead_dir[PATH_MAX], live_dir[PATH_MAX], inside[PATH_MAX + 16];
	sub(f, "tmp/build-dead", dead_dir);
	assert_int_equal(mkdir(dead_dir, 0700), 0);
	pathf(inside, "%s/model.so", dead_dir);
	write_file(inside, "half", 4);
	int dir_fd;
	coil_err err = {0};
	assert_int_equal(cache_tmpdir_create(f->c, live_dir, sizeof live_dir, &dir_fd, &err), 0);

	reopen(f, 0);
	assert_int_not_equal(access(dead_dir, F_OK), 0);
	assert_int_equal(access(live_dir, F_OK), 0);
	cache_tmpdir_remove(live_dir, dir_fd);
	assert_int_not_equal(access(live_dir, F_OK), 0);
	obj_path(f, stray, ".so", p);
	assert_int_not_equal(access(p, F_OK), 0);
	obj_path(f, stray, ".graph", p);
	assert_int_not_equal(access(p, F_OK), 0);
	assert_int_equal(access(foreign, F_OK), 0);
	assert_int_not_equal(access(stale, F_OK), 0);
	assert_int_equal(access(fresh, F_OK), 0); /* belongs to a live store */
	close(held);
	assert_true(present(f, a));
	assert_int_equal(lookup(f, a, "ga", NULL), 1);
}

struct problems {
	int n;
	char keys[4][65];
	char text[4][512];
};

static int on_problem(void *ud, const char *key, const char *problem)
{
	struct problems *p = ud;
	if (p->n < 4) {
		snprintf(p->keys[p->n], 65, "%s", key);
		snprintf(p->text[p->n], 512, "%s", problem);
	}
	p->n++;
	return 0;
}

static const char *problem_for(const struct problems *p, const char *key)
{
	for (int i = 0; i < p->n && i < 4; i++)
		if (!strcmp(p->keys[i], key))
			return p->text[i];
	return NULL;
}

static void test_verify_detects_corruption_and_truncation(void **state)
{
	fixture *f = *state;
	char good[65], flipped[65], truncated[65];
	key_for("good", good);
	key_for("flipped", flipped);
	key_for("truncated", truncated);
	store_n(f, good, 1000, 'g', "g1");
	store_n(f, flipped, 1000, 'f', "g2");
	store_n(f, truncated, 1000, 't', "g3");

	coil_err err = {0};
	int bad = -1;
	struct problems probs = {0};
	assert_int_equal(cache_verify(f->c, on_problem, &probs, &bad, &err), 0);
	assert_int_equal(bad, 0);
	assert_int_equal(probs.n, 0);

	char p[PATH_MAX];
	obj_path(f, flipped, ".so", p);
	int fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "F", 1, 500), 1); /* 'f' -> 'F': same size */
	close(fd);
	obj_path(f, truncated, ".so", p);
	assert_int_equal(truncate(p, 999), 0);

	assert_int_equal(cache_verify(f->c, on_problem, &probs, &bad, &err), 0);
	assert_int_equal(bad, 2);
	assert_int_equal(probs.n, 2);
	const char *t = problem_for(&probs, flipped);
	assert_non_null(t);
	assert_non_null(strstr(t, "sha256"));
	t = problem_for(&probs, truncated);
	assert_non_null(t);
	assert_non_null(strstr(t, "999 bytes"));
	assert_null(problem_for(&probs, good));
	/* verify only reports. */
	assert_int_equal(stats(f).entries, 3);

	memset(&probs, 0, sizeof probs);
	assert_int_equal(cache_repair(f->c, on_problem, &probs, &bad, &err), 0);
	assert_int_equal(bad, 2);
	assert_int_equal(stats(f).entries, 1);
	assert_true(present(f, good));
	assert_int_equal(cache_verify(f->c, NULL, NULL, &bad, &err), 0);
	assert_int_equal(bad, 0);
	char objects[PATH_MAX];
	sub(f, "objects", objects);
	assert_int_equal(count_files(objects), 2);
}

static void test_failed_store_leaves_nothing(void **state)
{
	fixture *f = *state;
	char key[65], missing[PATH_MAX], tmp[PATH_MAX], objects[PATH_MAX];
	key_for("k", key);
	sub(f, "tmp", tmp);
	sub(f, "objects", objects);
	coil_err err = {0};

	pathf(missing, "%s/does-not-exist.so", f->dir);
	assert_int_equal(cache_store(f->c, key, missing, "g", 1, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "does-not-exist.so"));
	/* A directory opens but fails on read, after the temp files exist. */
	assert_int_equal(cache_store(f->c, key, f->dir, "g", 1, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "cannot read"));
	/* Bad metadata is refused before anything is written. */
	assert_int_equal(cache_store_bytes(f->c, key, "abc", 3, "g", 1, "{not json", &err), -1);
	assert_non_null(strstr(err.msg, "JSON"));

	assert_int_equal(count_files(tmp), 0);
	assert_int_equal(count_files(objects), 0);
	assert_false(present(f, key));
	assert_int_equal(stats(f).entries, 0);
	assert_int_equal(lookup(f, key, "g", NULL), 0);
}

/* In a child: 1 if key is locked elsewhere, 0 if the child could take it.
 * The child only takes a lock: it touches none of the SQLite state it
 * inherited, and leaves with _exit. */
static int child_trylock(fixture *f, const char *key)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int cfd;
		int rc = cache_trylock_key(f->c, key, &cfd, NULL);
		_exit(rc < 0 ? 2 : rc == 1 ? 1 : 0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void test_lock_excludes_other_process(void **state)
{
	fixture *f = *state;
	char key[65], other[65];
	key_for("locked", key);
	key_for("other", other);
	coil_err err = {0};
	int fd = -1;
	assert_int_equal(cache_lock_key(f->c, key, &fd, &err), 0);
	assert_true(fd >= 0);
	assert_int_equal(child_trylock(f, key), 1);
	assert_int_equal(child_trylock(f, other), 0); /* locks are per key */
	cache_unlock_key(fd);
	assert_int_equal(child_trylock(f, key), 0);

	/* In one process, a second locker (its own open file) is excluded too. */
	int fd2 = -1, fd3 = -1;
	assert_int_equal(cache_trylock_key(f->c, key, &fd2, &err), 0);
	assert_int_equal(cache_trylock_key(f->c, key, &fd3, &err), 1);
	assert_int_equal(fd3, -1);
	cache_unlock_key(fd2);
	cache_unlock_key(-1); /* accepted */
}

static void test_reconcile_removes_only_unheld_lock_files(void **state)
{
	fixture *f = *state;
	char held[65], freed[65], hp[PATH_MAX], fp[PATH_MAX];
	key_for("held", held);
	key_for("freed", freed);
	pathf(hp, "%s/locks/%s.lock", f->cdir, held);
	pathf(fp, "%s/locks/%s.lock", f->cdir, freed);
	coil_err err = {0};
	int hfd, ffd;
	assert_int_equal(cache_lock_key(f->c, held, &hfd, &err), 0);
	assert_int_equal(cache_lock_key(f->c, freed, &ffd, &err), 0);
	cache_unlock_key(ffd);
	assert_int_equal(access(fp, F_OK), 0);

	reopen(f, 0);
	assert_int_not_equal(access(fp, F_OK), 0);
	assert_int_equal(access(hp, F_OK), 0);
	assert_int_equal(child_trylock(f, held), 1); /* still excluded */
	assert_int_equal(child_trylock(f, freed), 0);
	cache_unlock_key(hfd);
	assert_int_equal(cache_reconcile(f->c, &err), 0);
	assert_int_not_equal(access(hp, F_OK), 0);
	assert_int_equal(child_trylock(f, held), 0);
}

struct listed {
	int n;
	char keys[8][65];
	uint64_t sizes[8];
	char meta[8][64];
	int stop_after;
};

static int on_entry(void *ud, const char *key, uint64_t size, int64_t last_used, const char *meta)
{
	struct listed *l = ud;
	assert_true(last_used > 0);
	if (l->n < 8) {
		snprintf(l->keys[l->n], 65, "%s", key);
		l->sizes[l->n] = size;
		snprintf(l->meta[l->n], 64, "%s", meta ? meta : "(null)");
	}
	l->n++;
	return l->stop_after && l->n >= l->stop_after;
}

static void test_meta_list_and_remove(void **state)
{
	fixture *f = *state;
	char a[65], b[65], src[PATH_MAX];
	key_for("a", a);
	key_for("b", b);
	pathf(src, "%s/a.so", f->dir);
	write_file(src, "artifact a bytes", 16);
	coil_err err = {0};
	assert_int_equal(cache_store(f->c, a, src, "ga", 2, "{\"ms\": 12.5}", &err), 0);
	store_n(f, b, 7, 'b', "gb");

	char *meta = NULL, sha[65], want[65];
	uint64_t size = 0;
	assert_int_equal(cache_get_meta(f->c, a, &meta, sha, &size, &err), 1);
	assert_string_equal(meta, "{\"ms\": 12.5}");
	free(meta);
	assert_int_equal(size, 16);
	assert_int_equal(cache_sha256_file(src, want, &err), 0);
	assert_string_equal(sha, want);
	assert_int_equal(cache_get_meta(f->c, b, &meta, NULL, NULL, &err), 1);
	assert_null(meta);

	/* Least recently used first: a was stored first, then b; a hit moves a last. */
	struct listed l = {0};
	assert_int_equal(cache_list(f->c, on_entry, &l, &err), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.keys[0], a);
	assert_string_equal(l.keys[1], b);
	assert_int_equal(l.sizes[0], 16);
	assert_string_equal(l.meta[1], "(null)");
	assert_int_equal(lookup(f, a, "ga", NULL), 1);
	memset(&l, 0, sizeof l);
	l.stop_after = 1;
	assert_int_equal(cache_list(f->c, on_entry, &l, &err), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.keys[0], b);

	assert_int_equal(cache_remove(f->c, a, &err), 0);
	assert_int_equal(cache_remove(f->c, a, &err), 0); /* absent: still fine */
	assert_int_equal(cache_get_meta(f->c, a, &meta, sha, &size, &err), 0);
	assert_int_equal(lookup(f, a, "ga", NULL), 0);
	char p[PATH_MAX];
	obj_path(f, a, ".so", p);
	assert_int_not_equal(access(p, F_OK), 0);
	assert_int_equal(stats(f).entries, 1);
}

static void test_store_replaces_and_small_buffer(void **state)
{
	fixture *f = *state;
	char key[65];
	key_for("k", key);
	store_n(f, key, 10, 'x', "g-old");
	store_n(f, key, 20, 'y', "g-new");
	assert_int_equal(stats(f).entries, 1);
	assert_int_equal(stats(f).bytes, 25);
	assert_int_equal(lookup(f, key, "g-old", NULL), 0);
	char path[CACHE_PATH_MAX];
	assert_int_equal(lookup(f, key, "g-new", path), 1);
	size_t len;
	char *got = read_file(path, &len);
	assert_int_equal(len, 20);
	assert_int_equal(got[0], 'y');
	free(got);

	coil_err err = {0};
	char tiny[16];
	assert_int_equal(cache_lookup(f->c, key, "g-new", 5, tiny, sizeof tiny, &err), -1);
	assert_non_null(strstr(err.msg, "too small"));
}

static void test_default_dir_from_environment(void **state)
{
	fixture *f = *state;
	char *saved_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
	char *saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
	char want[PATH_MAX];
	coil_err err = {0};
	coil_cache *c = NULL;

	setenv("XDG_CACHE_HOME", f->dir, 1);
	assert_int_equal(cache_open(NULL, 0, &c, &err), 0);
	pathf(want, "%s/coil", f->dir);
	assert_string_equal(cache_dir(c), want);
	cache_close(c);

	setenv("XDG_CACHE_HOME", "relative/ignored", 1);
	setenv("HOME", f->dir, 1);
	assert_int_equal(cache_open(NULL, 0, &c, &err), 0);
	pathf(want, "%s/.cache/coil", f->dir);
	assert_string_equal(cache_dir(c), want);
	cache_close(c);
	cache_close(NULL);

	if (saved_xdg)
		setenv("XDG_CACHE_HOME", saved_xdg, 1);
	else
		unsetenv("XDG_CACHE_HOME");
	if (saved_home)
		setenv("HOME", saved_home, 1);
	else
		unsetenv("HOME");
	free(saved_xdg);
	free(saved_home);
}

/* Several processes, each with its own handle, store and look up in one
 * directory at once; afterwards every entry is there and intact. */
static void test_processes_share_a_directory(void **state)
{
	fixture *f = *state;
	enum { PROCS = 4, PER = 15 };
	cache_close(f->c); /* no SQLite connection may cross a fork */
	f->c = NULL;
	pid_t pids[PROCS];
	for (int p = 0; p < PROCS; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] != 0)
			continue;
		coil_cache *c;
		coil_err err = {0};
		if (cache_open(f->cdir, 0, &c, &err) != 0)
			_exit(10);
		for (int i = 0; i < PER; i++) {
			char name[32], key[65], canon[48], data[256], path[CACHE_PATH_MAX];
			snprintf(name, sizeof name, "p%d-%d", p, i);
			cache_sha256_bytes(name, strlen(name), key, NULL);
			snprintf(canon, sizeof canon, "graph %s", name);
			memset(data, p * 16 + i, sizeof data);
			int fd;
			if (cache_lock_key(c, key, &fd, &err) != 0)
				_exit(11);
			if (cache_lookup(c, key, canon, strlen(canon), path, sizeof path, &err) != 0)
				_exit(12);
			if (cache_store_bytes(c, key, data, sizeof data, canon, strlen(canon), NULL,
					      &err) != 0)
				_exit(13);
			cache_unlock_key(fd);
			if (cache_lookup(c, key, canon, strlen(canon), path, sizeof path, &err) != 1)
				_exit(14);
		}
		cache_close(c);
		_exit(0);
	}
	for (int p = 0; p < PROCS; p++) {
		int status;
		assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	reopen(f, 0);
	cache_stats_t s = stats(f);
	assert_int_equal(s.entries, PROCS * PER);
	assert_int_equal(s.hits, PROCS * PER);
	assert_int_equal(s.misses, PROCS * PER);
	int bad = -1;
	coil_err err = {0};
	assert_int_equal(cache_verify(f->c, NULL, NULL, &bad, &err), 0);
	assert_int_equal(bad, 0);
}

/* An artifact whose bytes changed after it was cached (same size, so the
 * index's size check passes) is not loaded: its bytes are copied into
 * sealed memory, hashed there and loaded from there, with no window in
 * between.  The bad entry is removed, so the next compile builds it anew. */
static void test_tampered_artifact_refused(void **state)
{
	fixture *f = *state;
	static const char G[] = "{\"format\": \"coil-graph\", \"version\": 1,"
				" \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"n\", 4]}],"
				" \"nodes\": [{\"id\": \"a\", \"op\": \"aten.relu\", \"args\": [\"x\"], \"outputs\": [\"y\"]}],"
				" \"outputs\": [\"y\"]}";
	compile_opts o = {.target = "generic", .opt_level = 1};
	compile_result r, r2;
	coil_err err = {0};
	if (cache_compile(f->c, G, strlen(G), &o, &r, &err))
		fail_msg("%s", err.msg);
	coil_artifact *a = NULL;
	if (artifact_open_cached(f->c, r.key, r.path, r.sha256, &a, &err))
		fail_msg("%s", err.msg);
	assert_true(a->memfd >= 0); /* loaded from the sealed copy */
	artifact_close(a);

	size_t len;
	char *bytes = read_file(r.path, &len);
	assert_int_equal(len, r.size);
	bytes[len / 2] ^= 0x5a;
	int fd = open(r.path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, len, 0), (ssize_t)len);
	close(fd);
	free(bytes);
	a = NULL;
	assert_int_equal(artifact_open_cached(f->c, r.key, r.path, r.sha256, &a, &err), -2);
	assert_null(a);
	assert_int_equal(err.code, COIL_E_IO);
	if (!strstr(err.msg, "sha256 mismatch") || !strstr(err.msg, "refusing to load"))
		fail_msg("%s", err.msg);
	assert_false(present(f, r.key));

	if (cache_compile(f->c, G, strlen(G), &o, &r2, &err))
		fail_msg("%s", err.msg);
	assert_false(r2.hit);
	assert_string_equal(r2.sha256, r.sha256);
	if (artifact_open_cached(f->c, r2.key, r2.path, r2.sha256, &a, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(a->ninputs, 1);
	artifact_close(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_known_vector),
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_store_then_lookup_hits),
		T(test_lookup_other_key_misses),
		T(test_canon_mismatch_is_collision_miss),
		T(test_invalid_keys_rejected_everywhere),
		T(test_budget_eviction_is_lru),
		T(test_entry_over_budget_fails_cleanly),
		T(test_gc_evicts_lru_down_to_budget),
		T(test_reopen_keeps_entries_and_stats),
		T(test_reconcile_drops_rows_without_files),
		T(test_reconcile_removes_strays_and_stale_tmp),
		T(test_verify_detects_corruption_and_truncation),
		T(test_failed_store_leaves_nothing),
		T(test_lock_excludes_other_process),
		T(test_reconcile_removes_only_unheld_lock_files),
		T(test_meta_list_and_remove),
		T(test_store_replaces_and_small_buffer),
		T(test_default_dir_from_environment),
		T(test_processes_share_a_directory),
		T(test_tampered_artifact_refused),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
