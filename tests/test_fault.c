/* Fault injection, after SQLite's own testing: make the Nth allocation, file
 * operation, SQLite step, SQLite I/O, compiler run or dlopen fail, in a loop
 * over N, through storing, looking up, opening, evicting, compiling and
 * loading.  After every failure: the error is one clear line, nothing leaked
 * (allocations, descriptors, SQLite memory), the index and the files agree
 * (checked raw, before any reconcile could tidy up), DIR/tmp is empty, and
 * every entry that was there before is still there.
 *
 * How: this binary is linked with -Wl,--wrap for malloc, calloc, realloc,
 * strdup, free, open, read, write, fsync, rename, mkdir, mkdtemp, fopen,
 * sqlite3_open_v2, sqlite3_prepare_v2, sqlite3_step, fork and dlopen (see
 * the Makefile), so calls from coil's code come here first; jansson
 * allocates through the same switch (json_set_alloc_funcs) and SQLite's
 * file I/O goes through a VFS shim that fails writes, syncs, reads and
 * truncates.  The site "full" is a full disk: every write, file creation
 * and SQLite write says ENOSPC (SQLITE_FULL), reads still work.  Nothing in
 * the production code knows about any of it.
 *
 * The compiler is a stand-in ($B/tests/fake_cc, found as "cc" first in PATH)
 * so that a loop of hundreds of compiles stays fast; one real artifact,
 * built with the real compiler at the start, is what dlopen loads. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "codegen/codegen.h"
#include "coil/coil.h"

/* ---- the switch ---- */

enum { ONCE, STICKY };

static struct {
	const char *site; /* armed site, or NULL */
	long at;          /* fail the at-th call (0: only count) */
	int mode;         /* ONCE: that call only; STICKY: it and every later one */
	long calls, hits;
} F;

static pthread_mutex_t F_mu = PTHREAD_MUTEX_INITIALIZER;

static int fault(const char *site)
{
	if (!F.site)
		return 0;
	pthread_mutex_lock(&F_mu);
	int hit = 0;
	if (F.site && !strcmp(site, F.site)) {
		long n = ++F.calls;
		hit = F.at && (n == F.at || (F.mode == STICKY && n > F.at));
		F.hits += hit;
	}
	pthread_mutex_unlock(&F_mu);
	if (hit && getenv("COIL_FAULT_BT")) { /* where the failure was injected */
		void *bt[16];
		int n = backtrace(bt, 16);
		fprintf(stderr, "# fault injected at %s call %ld:\n", site, F.calls);
		backtrace_symbols_fd(bt, n, 2);
	}
	return hit;
}

/* What the scenario loop sets and go()/stop() switch on and off around the
 * operation under test. */
static const char *want_site;
static long want_at;
static int want_mode;

static void go(void)
{
	pthread_mutex_lock(&F_mu);
	F.calls = F.hits = 0;
	F.at = want_at;
	F.mode = want_mode;
	F.site = want_site;
	pthread_mutex_unlock(&F_mu);
}

static void stop(void)
{
	pthread_mutex_lock(&F_mu);
	F.site = NULL;
	pthread_mutex_unlock(&F_mu);
}

/* ---- allocations: counted live set, for the leak check ---- */

#define LIVE_CAP (1 << 17)
static void *live[LIVE_CAP];
static long nlive;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t slot(const void *p)
{
	return ((uintptr_t)p >> 4) * 2654435761u % LIVE_CAP;
}

static void *track(void *p)
{
	if (!p)
		return p;
	pthread_mutex_lock(&live_mu);
	size_t i = slot(p);
	while (live[i] && live[i] != (void *)1)
		i = (i + 1) % LIVE_CAP;
	live[i] = p;
	nlive++;
	pthread_mutex_unlock(&live_mu);
	return p;
}

static void untrack(const void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&live_mu);
	for (size_t i = slot(p), k = 0; live[i] && k < LIVE_CAP; i = (i + 1) % LIVE_CAP, k++)
		if (live[i] == p) {
			live[i] = (void *)1; /* tombstone */
			nlive--;
			break;
		}
	pthread_mutex_unlock(&live_mu);
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void __real_free(void *p);

void *__wrap_malloc(size_t n)
{
	if (fault("alloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_malloc(n));
}

void *__wrap_calloc(size_t n, size_t m)
{
	if (fault("alloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_calloc(n, m));
}

void *__wrap_realloc(void *p, size_t n)
{
	if (fault("alloc")) {
		errno = ENOMEM;
		return NULL;
	}
	void *q = __real_realloc(p, n);
	if (q) {
		untrack(p);
		track(q);
	}
	return q;
}

char *__wrap_strdup(const char *s)
{
	if (fault("alloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_strdup(s));
}

void __wrap_free(void *p)
{
	untrack(p);
	__real_free(p);
}

/* ---- files ---- */

int __real_open(const char *path, int flags, ...);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __real_write(int fd, const void *buf, size_t n);
int __real_fsync(int fd);
int __real_rename(const char *a, const char *b);
int __real_mkdir(const char *path, mode_t mode);
char *__real_mkdtemp(char *tmpl);
FILE *__real_fopen(const char *path, const char *mode);

int __wrap_open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (flags & O_CREAT) {
		va_list ap;
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	if (fault("file") || ((flags & O_CREAT) && fault("full"))) {
		errno = flags & O_CREAT ? ENOSPC : EMFILE;
		return -1;
	}
	return __real_open(path, flags, mode);
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
	if (fault("file")) {
		errno = EIO;
		return -1;
	}
	return __real_read(fd, buf, n);
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	if (fault("file")) {
		errno = EIO;
		return -1;
	}
	if (fault("full")) {
		errno = ENOSPC;
		return -1;
	}
	return __real_write(fd, buf, n);
}

int __wrap_fsync(int fd)
{
	if (fault("file")) {
		errno = EIO;
		return -1;
	}
	return __real_fsync(fd);
}

int __wrap_rename(const char *a, const char *b)
{
	if (fault("file")) {
		errno = EIO;
		return -1;
	}
	return __real_rename(a, b);
}

int __wrap_mkdir(const char *path, mode_t mode)
{
	if (fault("file") || fault("full")) {
		errno = ENOSPC;
		return -1;
	}
	return __real_mkdir(path, mode);
}

char *__wrap_mkdtemp(char *tmpl)
{
	if (fault("file") || fault("full")) {
		errno = ENOSPC;
		return NULL;
	}
	return __real_mkdtemp(tmpl);
}

FILE *__wrap_fopen(const char *path, const char *mode)
{
	if (fault("file") || (mode[0] != 'r' && fault("full"))) {
		errno = ENOSPC;
		return NULL;
	}
	return __real_fopen(path, mode);
}

/* ---- SQLite: calls, and a VFS shim for its own I/O ---- */

int __real_sqlite3_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs);
int __real_sqlite3_prepare_v2(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail);
int __real_sqlite3_step(sqlite3_stmt *st);

static void injected(sqlite3_context *ctx, int n, sqlite3_value **v)
{
	(void)n, (void)v;
	sqlite3_result_error(ctx, "injected fault", -1);
}

/* Leave SQLite's own error message saying what happened. */
static void say_injected(sqlite3 *db)
{
	sqlite3_exec(db, "SELECT coil_injected_fault()", NULL, NULL, NULL);
}

int __wrap_sqlite3_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs)
{
	if (fault("sqlite")) {
		*db = NULL;
		return SQLITE_CANTOPEN;
	}
	int rc = __real_sqlite3_open_v2(path, db, flags, vfs);
	if (*db)
		sqlite3_create_function(*db, "coil_injected_fault", 0, SQLITE_UTF8, NULL, injected, NULL, NULL);
	return rc;
}

int __wrap_sqlite3_prepare_v2(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail)
{
	if (fault("sqlite")) {
		say_injected(db);
		*st = NULL;
		return SQLITE_ERROR;
	}
	return __real_sqlite3_prepare_v2(db, sql, n, st, tail);
}

int __wrap_sqlite3_step(sqlite3_stmt *st)
{
	if (fault("sqlite")) {
		say_injected(sqlite3_db_handle(st));
		return SQLITE_ERROR;
	}
	return __real_sqlite3_step(st);
}

typedef struct shim_file {
	sqlite3_file base;
	sqlite3_file *real; /* follows this struct */
} shim_file;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs shim_vfs;
static sqlite3_io_methods shim_io;

#define REAL(f) (((shim_file *)(f))->real)
static int s_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }
static int s_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
	if (fault("sqlite-io"))
		return SQLITE_IOERR_READ;
	return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int s_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
	if (fault("sqlite-io"))
		return SQLITE_IOERR_WRITE;
	if (fault("full"))
		return SQLITE_FULL;
	return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int s_truncate(sqlite3_file *f, sqlite3_int64 n)
{
	if (fault("sqlite-io"))
		return SQLITE_IOERR_TRUNCATE;
	return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int s_sync(sqlite3_file *f, int fl)
{
	if (fault("sqlite-io"))
		return SQLITE_IOERR_FSYNC;
	return REAL(f)->pMethods->xSync(REAL(f), fl);
}
static int s_size(sqlite3_file *f, sqlite3_int64 *n) { return REAL(f)->pMethods->xFileSize(REAL(f), n); }
static int s_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int s_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int s_check(sqlite3_file *f, int *o) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), o); }
static int s_fcntl(sqlite3_file *f, int op, void *a) { return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int s_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int s_devchar(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int s_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **p)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, p);
}
static int s_shmlock(sqlite3_file *f, int o, int n, int fl) { return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl); }
static void s_shmbarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int s_shmunmap(sqlite3_file *f, int d) { return REAL(f)->pMethods->xShmUnmap(REAL(f), d); }
static int s_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p)
{
	return REAL(f)->pMethods->xFetch(REAL(f), o, n, p);
}
static int s_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

static int s_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out)
{
	(void)vfs;
	shim_file *f = (shim_file *)file;
	f->real = (sqlite3_file *)(f + 1);
	int rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out);
	f->base.pMethods = rc == SQLITE_OK && f->real->pMethods ? &shim_io : NULL;
	return rc;
}

static void shim_install(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	shim_vfs = *real_vfs;
	shim_vfs.zName = "coil-fault";
	shim_vfs.szOsFile = (int)sizeof(shim_file) + real_vfs->szOsFile;
	shim_vfs.xOpen = s_open;
	shim_io = (sqlite3_io_methods){3, s_close, s_read, s_write, s_truncate, s_sync, s_size, s_lock, s_unlock,
				       s_check, s_fcntl, s_sector, s_devchar, s_shmmap, s_shmlock, s_shmbarrier,
				       s_shmunmap, s_fetch, s_unfetch};
	sqlite3_vfs_register(&shim_vfs, 1);
}

/* ---- the compiler, dlopen ---- */

pid_t __real_fork(void);
void *__real_dlopen(const char *path, int flags);

pid_t __wrap_fork(void)
{
	if (fault("fork")) {
		errno = EAGAIN;
		return -1;
	}
	int fails = fault("compiler");
	pid_t pid = __real_fork();
	if (pid == 0 && fails)
		_exit(1); /* the compiler "ran" and failed */
	return pid;
}

void *__wrap_dlopen(const char *path, int flags)
{
	if (fault("dlopen")) /* a real failure, so that dlerror() has its say */
		return __real_dlopen("/nonexistent/coil-injected-fault.so", RTLD_NOW);
	return __real_dlopen(path, flags);
}

static void *j_malloc(size_t n)
{
	return __wrap_malloc(n);
}

/* ---- fixture ---- */

static char root[PATH_MAX];       /* temp dir of this run */
static char cdir[PATH_MAX + 16];  /* the cache under test */
static char real_so[PATH_MAX + 16], real_sha[65], real_target[256];
static char fake_cc[PATH_MAX];

/* Keys: E (always there), K (the one operations add), V (a victim). */
static char KE[65], KK[65], KV[65];
static const char CANON_E[] = "{\"graph\":\"E\"}", CANON_K[] = "{\"graph\":\"K\"}", CANON_V[] = "{\"graph\":\"V\"}";
static unsigned char BYTES_E[5000], BYTES_K[7000], BYTES_V[3000];

/* Totals over the whole run, printed at the end. */
static long total_runs, total_failures;

static void pathf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *out, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, cap, fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < cap);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static coil_cache *open_cache(uint64_t budget)
{
	coil_err err = {0};
	coil_cache *c = NULL;
	if (cache_open(cdir, budget, &c, &err))
		fail_msg("cache_open (no fault armed): %s", err.msg);
	return c;
}

static void put(coil_cache *c, const char *key, const void *bytes, size_t n, const char *canon)
{
	coil_err err = {0};
	if (cache_store_bytes(c, key, bytes, n, canon, strlen(canon), "{\"target\":\"generic\"}", &err))
		fail_msg("store (no fault armed): %s", err.msg);
}

/* Is key a hit with exactly these bytes? */
static int has(coil_cache *c, const char *key, const void *bytes, size_t n, const char *canon)
{
	char path[CACHE_PATH_MAX];
	coil_err err = {0};
	int hit = cache_lookup(c, key, canon, strlen(canon), path, sizeof path, &err);
	if (hit < 0)
		fail_msg("lookup (no fault armed): %s", err.msg);
	if (hit != 1)
		return 0;
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	unsigned char *buf = malloc(n + 1);
	size_t got = fread(buf, 1, n + 1, f);
	fclose(f);
	int same = got == n && !memcmp(buf, bytes, n);
	free(buf);
	if (!same)
		fail_msg("entry %s is present with the wrong bytes", key);
	return 1;
}

/* The state every scenario starts from: E present, K and V absent. */
static void reset(void)
{
	coil_cache *c = open_cache(0);
	coil_err err = {0};
	assert_int_equal(cache_remove(c, KK, &err), 0);
	assert_int_equal(cache_remove(c, KV, &err), 0);
	if (!has(c, KE, BYTES_E, sizeof BYTES_E, CANON_E))
		put(c, KE, BYTES_E, sizeof BYTES_E, CANON_E);
	cache_close(c);
}

/* The error must be one clear line. */
static void assert_clear(const char *what, const coil_err *err)
{
	const char *m = err->msg;
	size_t n = strlen(m);
	if (n < 12 || strchr(m, '\n') || strstr(m, "(null)") || strstr(m, "not an error") ||
	    strstr(m, ": Success") || m[n - 1] == ':' || !strcmp(m + n - 2, ": ") || strstr(m, "line -1"))
		fail_msg("%s: unclear error: \"%s\"", what, m);
}

/* The one thing a failure may leave in tmp/: files of an entry whose
 * rollback could not move them back (the file system failing every rename
 * from then on), which the next open restores.  The name of the file the
 * row's file is, in tmp/ or in place, into buf. */
static int trashed(const char *key, const char *ext, char *buf, size_t cap)
{
	pathf(buf, cap, "%s/tmp/%s%s.trash", cdir, key, ext);
	return access(buf, F_OK) == 0;
}

/* Raw consistency, read straight from SQLite and the directory (no
 * cache_open, whose reconcile would tidy up): every row's files exist with
 * the recorded sizes and SHA-256, no object file lacks its row, tmp/ is
 * empty but for trash of rows that are there.  Returns the number of rows. */
static int raw_check(const char *what)
{
	char path[PATH_MAX + 32];
	pathf(path, sizeof path, "%s/tmp", cdir);
	int ntmp = count_dir(path), ntrash = 0;
	DIR *td = opendir(path);
	struct dirent *te;
	while (td && (te = readdir(td)))
		ntrash += strstr(te->d_name, ".trash") != NULL;
	if (td)
		closedir(td);
	if (ntmp != ntrash) {
		DIR *d = opendir(path);
		struct dirent *e;
		while (d && (e = readdir(d)))
			if (e->d_name[0] != '.')
				print_error("# left in tmp/: %s\n", e->d_name);
		if (d)
			closedir(d);
		fail_msg("%s: %d entries left in %s", what, ntmp, path);
	}
	pathf(path, sizeof path, "%s/index.sqlite", cdir);
	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT key, size, graph_size, sha256 FROM entries", -1, &st, NULL),
			 SQLITE_OK);
	int rows = 0, files_in_place = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		char so[PATH_MAX + 128], graph[PATH_MAX + 128], sha[65];
		pathf(so, sizeof so, "%s/objects/%.2s/%s.so", cdir, key, key);
		pathf(graph, sizeof graph, "%s/objects/%.2s/%s.graph", cdir, key, key);
		int in_place = 2;
		if (access(so, F_OK) != 0 && trashed(key, ".so", so, sizeof so))
			in_place--, ntrash--;
		if (access(graph, F_OK) != 0 && trashed(key, ".graph", graph, sizeof graph))
			in_place--, ntrash--;
		files_in_place += in_place;
		struct stat a, b;
		if (stat(so, &a) || stat(graph, &b) || a.st_size != sqlite3_column_int64(st, 1) ||
		    b.st_size != sqlite3_column_int64(st, 2))
			fail_msg("%s: row %s does not match its files", what, key);
		coil_err err = {0};
		assert_int_equal(cache_sha256_file(so, sha, &err), 0);
		if (strcmp(sha, (const char *)sqlite3_column_text(st, 3)))
			fail_msg("%s: %s has the wrong sha256", what, key);
		rows++;
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	int files = 0;
	pathf(path, sizeof path, "%s/objects", cdir);
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char fan[PATH_MAX + 64];
		pathf(fan, sizeof fan, "%s/%s", path, e->d_name);
		files += count_dir(fan);
	}
	if (d)
		closedir(d);
	if (files != files_in_place)
		fail_msg("%s: %d object files for %d rows", what, files, rows);
	if (ntrash != 0)
		fail_msg("%s: %d trashed files in tmp/ belong to no row", what, ntrash);
	return rows;
}

/* Then through the API: open (reconcile), verify, and E is there. */
static void api_check(const char *what)
{
	coil_cache *c = open_cache(0);
	coil_err err = {0};
	int bad = -1;
	if (cache_verify(c, NULL, NULL, &bad, &err) || bad)
		fail_msg("%s: cache_verify: %d bad, %s", what, bad, err.msg);
	if (!has(c, KE, BYTES_E, sizeof BYTES_E, CANON_E))
		fail_msg("%s: entry E was lost", what);
	cache_close(c);
}

/* ---- the loop ---- */

typedef int (*op_fn)(coil_err *err);     /* the operation, with go()/stop() inside */
typedef void (*prep_fn)(void);             /* the state before it */
typedef void (*after_fn)(int rc, const char *what); /* its own checks */

/* Run op under every site, with the Nth call failing for each N (all of
 * them up to max_n; spread over the range beyond), once and sticky. */
static void loop(const char *name, prep_fn prep, op_fn op, after_fn after, const char *const *sites, long max_n)
{
	for (const char *const *site = sites; *site; site++) {
		/* Count the calls (and check the fault-free run). */
		prep();
		want_site = *site;
		want_at = 0;
		coil_err err = {0};
		int rc = op(&err);
		long calls = F.calls;
		if (rc)
			fail_msg("%s without a fault: %s", name, err.msg);
		after(0, name);
		long step = calls > max_n ? calls / max_n + 1 : 1;
		long runs = 0, failures = 0;
		for (int mode = ONCE; mode <= STICKY; mode++)
			for (long n = 1; n <= calls; n += step) {
				char what[160];
				snprintf(what, sizeof what, "%s: %s call %ld of %ld failing%s", name, *site, n, calls,
					 mode == STICKY ? " and every later one" : "");
				prep();
				long allocs = nlive;
				int fds = count_fds();
				sqlite3_int64 mem = sqlite3_memory_used();
				memset(&err, 0, sizeof err);
				want_at = n;
				want_mode = mode;
				rc = op(&err); /* go() and stop() around the call under test */
				runs++;
				if (rc) {
					failures++;
					assert_clear(what, &err);
					if (getenv("COIL_FAULT_VERBOSE"))
						print_message("# %s: %s\n", what, err.msg);
				} else if (F.hits && mode == STICKY && getenv("COIL_FAULT_VERBOSE")) {
					print_message("# %s: survived\n", what);
				}
				if (nlive != allocs)
					fail_msg("%s: %ld allocations leaked (error: %s)", what, nlive - allocs, err.msg);
				if (count_fds() != fds)
					fail_msg("%s: %d descriptors leaked", what, count_fds() - fds);
				if (sqlite3_memory_used() != mem)
					fail_msg("%s: SQLite memory %lld bytes more", what,
						 (long long)(sqlite3_memory_used() - mem));
				after(rc, what);
			}
		print_message("# %-22s %-9s %4ld calls, %4ld runs, %4ld failed cleanly\n", name, *site, calls, runs,
			      failures);
		total_runs += runs;
		total_failures += failures;
	}
}

static const char *const CACHE_SITES[] = {"alloc", "file", "sqlite", "sqlite-io", NULL};

/* ---- scenarios ---- */

static void prep_plain(void)
{
	reset();
}

/* Store K. */
static int op_store(coil_err *err)
{
	coil_cache *c = open_cache(0);
	go();
	int rc = cache_store_bytes(c, KK, BYTES_K, sizeof BYTES_K, CANON_K, strlen(CANON_K), "{\"target\":\"generic\"}",
				   err);
	stop();
	cache_close(c);
	return rc;
}

static void after_store(int rc, const char *what)
{
	raw_check(what);
	api_check(what);
	coil_cache *c = open_cache(0);
	int k = has(c, KK, BYTES_K, sizeof BYTES_K, CANON_K);
	cache_close(c);
	if (rc == 0 && !k)
		fail_msg("%s: the store succeeded but K is not there", what);
}

static void test_store(void **state)
{
	(void)state;
	loop("store", prep_plain, op_store, after_store, CACHE_SITES, 400);
}

/* Store K under a budget that evicts V (least recently used), never E. */
static void prep_evict(void)
{
	reset();
	coil_cache *c = open_cache(0);
	put(c, KV, BYTES_V, sizeof BYTES_V, CANON_V);
	assert_true(has(c, KE, BYTES_E, sizeof BYTES_E, CANON_E)); /* E is now newer than V */
	cache_close(c);
}

static uint64_t evict_budget(void)
{
	return sizeof BYTES_E + strlen(CANON_E) + sizeof BYTES_K + strlen(CANON_K) + 100;
}

static int op_store_evict(coil_err *err)
{
	coil_cache *c = open_cache(evict_budget());
	go();
	int rc = cache_store_bytes(c, KK, BYTES_K, sizeof BYTES_K, CANON_K, strlen(CANON_K), "{\"target\":\"generic\"}",
				   err);
	stop();
	cache_close(c);
	return rc;
}

static void after_store_evict(int rc, const char *what)
{
	raw_check(what);
	api_check(what);
	coil_cache *c = open_cache(0);
	int k = has(c, KK, BYTES_K, sizeof BYTES_K, CANON_K), v = has(c, KV, BYTES_V, sizeof BYTES_V, CANON_V);
	cache_close(c);
	if (rc == 0 && (!k || v))
		fail_msg("%s: the store succeeded: K should be there (%d) and V evicted (%d)", what, k, v);
	if (rc != 0 && (k || !v))
		fail_msg("%s: the store failed: K should be absent (%d) and V kept (%d)", what, k, v);
}

static void test_store_with_eviction(void **state)
{
	(void)state;
	loop("store+evict", prep_evict, op_store_evict, after_store_evict, CACHE_SITES, 400);
}

/* Replace an entry: K stored again over itself with other metadata. */
static void prep_replace(void)
{
	reset();
	coil_cache *c = open_cache(0);
	put(c, KK, BYTES_K, sizeof BYTES_K, CANON_K);
	cache_close(c);
}

static int op_replace(coil_err *err)
{
	coil_cache *c = open_cache(0);
	go();
	int rc = cache_store_bytes(c, KK, BYTES_K, sizeof BYTES_K, CANON_K, strlen(CANON_K), "{\"target\":\"v2\"}", err);
	stop();
	cache_close(c);
	return rc;
}

static void after_replace(int rc, const char *what)
{
	(void)rc;
	raw_check(what);
	api_check(what);
	coil_cache *c = open_cache(0);
	if (!has(c, KK, BYTES_K, sizeof BYTES_K, CANON_K))
		fail_msg("%s: replacing K lost it", what);
	cache_close(c);
}

static void test_replace(void **state)
{
	(void)state;
	loop("replace", prep_replace, op_replace, after_replace, CACHE_SITES, 400);
}

/* Look E up (a hit writes its last use and the counters). */
static int op_lookup_hit(coil_err *err)
{
	coil_cache *c = open_cache(0);
	char path[CACHE_PATH_MAX];
	go();
	int hit = cache_lookup(c, KE, CANON_E, strlen(CANON_E), path, sizeof path, err);
	stop();
	cache_close(c);
	if (hit == 0)
		return coil_errf(err, "lookup of a present entry missed");
	return hit < 0 ? -1 : 0;
}

static void after_plain(int rc, const char *what)
{
	(void)rc;
	raw_check(what);
	api_check(what);
}

static void test_lookup(void **state)
{
	(void)state;
	loop("lookup", prep_plain, op_lookup_hit, after_plain, CACHE_SITES, 400);
}

/* Open a cache a crash left untidy: a dead store's temp file, a dead
 * build's directory, an orphan object, a row whose file is gone, an
 * eviction that died before its commit (files in tmp/ as trash). */
static void prep_untidy(void)
{
	reset();
	coil_cache *c = open_cache(0);
	put(c, KV, BYTES_V, sizeof BYTES_V, CANON_V);
	put(c, KK, BYTES_K, sizeof BYTES_K, CANON_K);
	cache_close(c);
	char p[PATH_MAX + 200], q[PATH_MAX + 200];
	pathf(p, sizeof p, "%s/tmp/999999-1.so.tmp", cdir);
	FILE *f = fopen(p, "w");
	fputs("partial", f);
	fclose(f);
	pathf(p, sizeof p, "%s/tmp/build-dead01", cdir);
	mkdir(p, 0700);
	pathf(p, sizeof p, "%s/tmp/build-dead01/model.so", cdir);
	f = fopen(p, "w");
	fputs("half", f);
	fclose(f);
	/* V: its eviction died between moving the files and its commit. */
	pathf(p, sizeof p, "%s/objects/%.2s/%s.so", cdir, KV, KV);
	pathf(q, sizeof q, "%s/tmp/%s.so.trash", cdir, KV);
	assert_int_equal(rename(p, q), 0);
	pathf(p, sizeof p, "%s/objects/%.2s/%s.graph", cdir, KV, KV);
	pathf(q, sizeof q, "%s/tmp/%s.graph.trash", cdir, KV);
	assert_int_equal(rename(p, q), 0);
	/* K: its artifact was deleted by hand. */
	pathf(p, sizeof p, "%s/objects/%.2s/%s.so", cdir, KK, KK);
	assert_int_equal(unlink(p), 0);
	/* An orphan object. */
	char orphan[65];
	coil_err err = {0};
	cache_sha256_bytes("orphan", 6, orphan, &err);
	pathf(p, sizeof p, "%s/objects/%.2s", cdir, orphan);
	mkdir(p, 0755);
	pathf(p, sizeof p, "%s/objects/%.2s/%s.so", cdir, orphan, orphan);
	f = fopen(p, "w");
	fputs("orphan", f);
	fclose(f);
}

static int op_open(coil_err *err)
{
	coil_cache *c = NULL;
	go();
	int rc = cache_open(cdir, 0, &c, err);
	stop();
	cache_close(c);
	return rc;
}

/* A failed open (or a cleanup step that failed within a successful one) may
 * leave the untidiness for the next open, nothing worse. */
static void after_open(int rc, const char *what)
{
	(void)rc;
	api_check(what);
	raw_check(what);
	coil_cache *c = open_cache(0);
	if (!has(c, KV, BYTES_V, sizeof BYTES_V, CANON_V))
		fail_msg("%s: V, whose eviction never committed, was lost", what);
	if (has(c, KK, BYTES_K, sizeof BYTES_K, CANON_K))
		fail_msg("%s: K, whose artifact is gone, is still a hit", what);
	cache_close(c);
}

static void test_open_reconcile(void **state)
{
	(void)state;
	loop("open+reconcile", prep_untidy, op_open, after_open, CACHE_SITES, 400);
}

/* gc down to nothing but the newest entry, and remove. */
static void prep_gc(void)
{
	prep_evict();
	coil_cache *c = open_cache(0);
	put(c, KK, BYTES_K, sizeof BYTES_K, CANON_K);
	cache_close(c);
}

static int op_gc(coil_err *err)
{
	coil_cache *c = open_cache(0);
	go();
	int rc = cache_gc(c, sizeof BYTES_K + strlen(CANON_K), err);
	if (rc == 0)
		rc = cache_remove(c, KK, err);
	stop();
	cache_close(c);
	return rc;
}

static void after_gc(int rc, const char *what)
{
	raw_check(what);
	coil_cache *c = open_cache(0);
	coil_err err = {0};
	int bad = -1;
	if (cache_verify(c, NULL, NULL, &bad, &err) || bad)
		fail_msg("%s: cache_verify: %d bad, %s", what, bad, err.msg);
	cache_stats_t st;
	assert_int_equal(cache_stats(c, &st, &err), 0);
	if (rc == 0 && st.entries != 0)
		fail_msg("%s: gc and remove succeeded but %llu entries remain", what, (unsigned long long)st.entries);
	cache_close(c);
	(void)rc;
}

static void test_gc_remove(void **state)
{
	(void)state;
	loop("gc+remove", prep_gc, op_gc, after_gc, CACHE_SITES, 400);
}

/* Compile a graph through the cache: lookup, lock, build directory, the
 * (stand-in) compiler, store, lookup. */
static const char GRAPH[] = "{\"format\": \"coil-graph\", \"version\": 1,"
			    " \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"n\", 8]}],"
			    " \"nodes\": [{\"id\": \"a\", \"op\": \"aten.relu\", \"args\": [\"x\"], \"outputs\": [\"r\"]},"
			    "  {\"id\": \"b\", \"op\": \"aten.neg\", \"args\": [\"r\"], \"outputs\": [\"y\"]}],"
			    " \"outputs\": [\"y\"]}";
static char compiled_key[65];

static void prep_compile(void)
{
	reset();
	if (compiled_key[0]) {
		coil_cache *c = open_cache(0);
		coil_err err = {0};
		assert_int_equal(cache_remove(c, compiled_key, &err), 0);
		cache_close(c);
	}
}

static int op_compile(coil_err *err)
{
	coil_cache *c = open_cache(0);
	compile_plan *p = NULL;
	compile_opts o = {.target = "generic", .timeout_s = 30};
	if (compile_plan_make(GRAPH, strlen(GRAPH), &o, &p, err))
		fail_msg("plan: %s", err->msg);
	memcpy(compiled_key, p->key, sizeof compiled_key);
	compile_result res;
	go();
	int rc = compile_plan_run(c, p, &res, err);
	stop();
	compile_plan_free(p);
	cache_close(c);
	return rc;
}

static void after_compile(int rc, const char *what)
{
	raw_check(what);
	api_check(what);
	coil_cache *c = open_cache(0);
	coil_err err = {0};
	int present = cache_get_meta(c, compiled_key, NULL, NULL, NULL, &err);
	cache_close(c);
	if (rc == 0 && present != 1)
		fail_msg("%s: the compile succeeded but its artifact is not in the cache", what);
	(void)present; /* a failure after the store (reading back the metadata) leaves it stored, and whole */
}

/* Compiles run in the sandbox (codegen/sandbox.c): the faults here hit
 * the caller's side of it (its work directory, cgroup files, the fork of
 * the sandbox, reading its report, moving the output), and those inherited
 * by the sandbox's processes hit code generation and the compiler runs in
 * there; the caller must report each failure as one clear line. */
static void test_compile(void **state)
{
	(void)state;
	static const char *const sites[] = {"alloc", "file", "sqlite", "sqlite-io", "fork", "compiler", NULL};
	loop("compile", prep_compile, op_compile, after_compile, sites, 60);
}

/* The same with the sandbox off (COIL_SANDBOX=0): code generation and the
 * compiler runs in this process, each of their calls failing in turn. */
static void test_compile_in_process(void **state)
{
	(void)state;
	static const char *const sites[] = {"alloc", "file", "fork", "compiler", NULL};
	setenv("COIL_SANDBOX", "0", 1);
	loop("compile, no sandbox", prep_compile, op_compile, after_compile, sites, 60);
	unsetenv("COIL_SANDBOX");
}

/* Load an artifact: verify its bytes, check its target, dlopen, read its
 * description. */
static int op_load(coil_err *err)
{
	coil_module *m = NULL;
	go();
	int rc = coil_module_open(real_so, real_sha, real_target, &m);
	stop();
	if (rc)
		snprintf(err->msg, sizeof err->msg, "%s", coil_last_error());
	else if (!m || !coil_module_describe(m))
		rc = coil_errf(err, "module open succeeded without a module");
	coil_module_close(m);
	return rc;
}

static void after_load(int rc, const char *what)
{
	(void)rc, (void)what;
}

static void test_load(void **state)
{
	(void)state;
	static const char *const sites[] = {"alloc", "file", "dlopen", NULL};
	loop("load", prep_plain, op_load, after_load, sites, 300);
}

/* A full disk: every write fails with ENOSPC (SQLite's with SQLITE_FULL).
 * Stores fail saying so, lookups of what is there keep answering, nothing
 * is corrupted, and once there is room again stores work. */
static void test_disk_full(void **state)
{
	(void)state;
	reset();
	coil_cache *c = open_cache(0);
	for (int s = 0; s < 2; s++) {
		want_site = "full";
		want_at = s ? 1 : 3; /* SQLite's first, or the files' first */
		want_mode = STICKY;
		coil_err err = {0};
		go();
		int rc = cache_store_bytes(c, KK, BYTES_K, sizeof BYTES_K, CANON_K, strlen(CANON_K), NULL, &err);
		char path[CACHE_PATH_MAX];
		int hit = cache_lookup(c, KE, CANON_E, strlen(CANON_E), path, sizeof path, &err);
		stop();
		assert_int_equal(rc, -1);
		if (!strstr(err.msg, "No space left on device") && !strstr(err.msg, "database or disk is full"))
			fail_msg("a full disk should say so: %s", err.msg);
		assert_int_equal(hit, 1);
		raw_check("disk full");
	}
	put(c, KK, BYTES_K, sizeof BYTES_K, CANON_K);
	assert_true(has(c, KK, BYTES_K, sizeof BYTES_K, CANON_K));
	cache_close(c);
	api_check("disk full, then room again");
}

static int setup(void **state)
{
	(void)state;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	print_message("# fault injection: %ld runs, %ld failures injected and handled\n", total_runs,
		      total_failures);
	return 0;
}

/* One real artifact, built with the real compiler, for the load scenario. */
static void build_real_artifact(void)
{
	coil_err err = {0};
	coil_cache *c = NULL;
	char dir[PATH_MAX + 16];
	pathf(dir, sizeof dir, "%s/real", root);
	if (cache_open(dir, 0, &c, &err))
		fail_msg("%s", err.msg);
	compile_result res;
	compile_opts o = {.target = "generic", .opt_level = 1};
	if (cache_compile(c, GRAPH, strlen(GRAPH), &o, &res, &err)) {
		fprintf(stderr, "test_fault: cannot build a real artifact: %s\n", err.msg);
		exit(1);
	}
	snprintf(real_so, sizeof real_so, "%s", res.path);
	snprintf(real_sha, sizeof real_sha, "%s", res.sha256);
	snprintf(real_target, sizeof real_target, "%s", res.target);
	cache_close(c);
}

int main(int argc, char **argv)
{
	(void)argc;
	shim_install();
	json_set_alloc_funcs(j_malloc, __wrap_free);
	char self[PATH_MAX];
	snprintf(self, sizeof self, "%s", argv[0]);
	char *d = realpath(dirname(self), NULL);
	snprintf(fake_cc, sizeof fake_cc, "%s/fake_cc", d ? d : ".");
	free(d);
	if (access(fake_cc, X_OK) != 0) {
		fprintf(stderr, "test_fault: no fake compiler at %s\n", fake_cc);
		return 1;
	}
	snprintf(root, sizeof root, "%s/coil-fault-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(root) || chmod(root, 0755) != 0) /* the sandbox's nobody runs bin/cc */
		return 1;
	snprintf(cdir, sizeof cdir, "%s/cache", root);
	build_real_artifact();
	/* From here on "cc" is the stand-in (it writes a report as the .so). */
	char bin[PATH_MAX + 16], link[PATH_MAX + 32], path[8192];
	snprintf(bin, sizeof bin, "%s/bin", root);
	mkdir(bin, 0755);
	snprintf(link, sizeof link, "%s/cc", bin);
	if (symlink(fake_cc, link) != 0)
		return 1;
	snprintf(path, sizeof path, "%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	setenv("PATH", path, 1);

	coil_err err = {0};
	cache_sha256_bytes("E", 1, KE, &err);
	cache_sha256_bytes("K", 1, KK, &err);
	cache_sha256_bytes("V", 1, KV, &err);
	for (size_t i = 0; i < sizeof BYTES_E; i++)
		BYTES_E[i] = (unsigned char)(i * 7);
	for (size_t i = 0; i < sizeof BYTES_K; i++)
		BYTES_K[i] = (unsigned char)(i * 13 + 1);
	for (size_t i = 0; i < sizeof BYTES_V; i++)
		BYTES_V[i] = (unsigned char)(i * 3 + 2);
	/* Warm up what is allocated once per process (SQLite, the compiler's
	 * identity, libgomp) so that the leak check sees only per-call memory. */
	reset();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store),
		cmocka_unit_test(test_store_with_eviction),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_lookup),
		cmocka_unit_test(test_open_reconcile),
		cmocka_unit_test(test_gc_remove),
		cmocka_unit_test(test_compile),
		cmocka_unit_test(test_compile_in_process),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_disk_full),
	};
	int fails = cmocka_run_group_tests_name("fault", tests, setup, teardown);
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return fails;
}
