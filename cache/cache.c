/* Opening and closing a cache, keys and paths, and reconciling the index with
 * the files on disk.  Storing lives in cache_store.c, looking up in
 * cache_lookup.c, checking in cache_verify.c, per-key locks in cache_lock.c. */
#include "cache/cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cache_key_valid(const char *key)
{
	if (!key)
		return 0;
	for (int i = 0; i < CACHE_KEY_HEX; i++) {
		char ch = key[i];
		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return 0; /* also stops at a short key's NUL */
	}
	return key[CACHE_KEY_HEX] == '\0';
}

int cache_check_key(const char *key, coil_err *err)
{
	if (cache_key_valid(key))
		return 0;
	if (!key)
		return coil_err_input(err, "invalid cache key (null): want 64 lowercase hex digits");
	/* Quote at most 80 characters, with anything unprintable shown as '?'. */
	char shown[81];
	size_t n = 0;
	for (; key[n] && n < 80; n++)
		shown[n] = (key[n] >= 0x20 && key[n] < 0x7f) ? key[n] : '?';
	shown[n] = '\0';
	return coil_err_input(err, "invalid cache key \"%s%s\" (%zu chars): want 64 lowercase hex digits",
			 shown, key[n] ? "..." : "", strlen(key));
}

/* Every path in the cache is made here, under c->dir: fmt's first %s. */
static int dir_path(const coil_cache *c, char *buf, size_t cap, coil_err *err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int dir_path(const coil_cache *c, char *buf, size_t cap, coil_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap)
		return coil_errc(err, COIL_E_IO, "cache path too long under %s", c->dir);
	return 0;
}

int cache_path(const coil_cache *c, const char *sub, char *buf, size_t cap, coil_err *err)
{
	return dir_path(c, buf, cap, err, "%s/%s", c->dir, sub);
}

DIR *cache_opendir(const coil_cache *c, const char *sub, char *buf, size_t cap, coil_err *err)
{
	if (cache_path(c, sub, buf, cap, err) != 0)
		return NULL;
	DIR *d = opendir(buf);
	if (!d)
		coil_errc(err, coil_code_of_errno(errno), "cannot open %s: %s", buf, strerror(errno));
	return d;
}

int cache_fan_path(const coil_cache *c, const char *key, char *buf, size_t cap, coil_err *err)
{
	return dir_path(c, buf, cap, err, "%s/objects/%.2s", c->dir, key);
}

int cache_obj_path(const coil_cache *c, const char *key, const char *ext, char *buf, size_t cap,
		   coil_err *err)
{
	return dir_path(c, buf, cap, err, "%s/objects/%.2s/%s%s", c->dir, key, key, ext);
}

int cache_trash_path(const coil_cache *c, const char *key, const char *ext, char *buf, size_t cap,
		     coil_err *err)
{
	return dir_path(c, buf, cap, err, "%s/tmp/%s%s.trash", c->dir, key, ext);
}

int cache_lock_path(const coil_cache *c, const char *key, char *buf, size_t cap, coil_err *err)
{
	return dir_path(c, buf, cap, err, "%s/locks/%s.lock", c->dir, key);
}

int cache_key_of_name(const char *name, const char *suffix, char key[CACHE_KEY_HEX + 1])
{
	if (strlen(name) != CACHE_KEY_HEX + strlen(suffix) || strcmp(name + CACHE_KEY_HEX, suffix) != 0)
		return 0;
	memcpy(key, name, CACHE_KEY_HEX);
	key[CACHE_KEY_HEX] = '\0';
	return cache_key_valid(key);
}

int cache_entry_paths(const coil_cache *c, const char *key, char *so_out, char *graph_out, size_t cap,
		      coil_err *err)
{
	if (cache_check_key(key, err) != 0)
		return coil_err_prefix(err, "cache_entry_paths");
	if ((so_out && cache_obj_path(c, key, ".so", so_out, cap, err) != 0) ||
	    (graph_out && cache_obj_path(c, key, ".graph", graph_out, cap, err) != 0))
		return coil_err_prefix(err, "cache_entry_paths %s", key);
	return 0;
}

const char *cache_dir(const coil_cache *c)
{
	return c ? c->dir : NULL;
}

/* $XDG_CACHE_HOME/coil if that is set to an absolute path (the XDG spec says
 * to ignore relative ones), else $HOME/.cache/coil.  malloc'd. */
static char *default_dir(coil_err *err)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char buf[PATH_MAX];
	int n;
	if (xdg && xdg[0] == '/')
		n = snprintf(buf, sizeof buf, "%s/coil", xdg);
	else if (home && home[0])
		n = snprintf(buf, sizeof buf, "%s/.cache/coil", home);
	else {
		coil_errc(err, COIL_E_IO, "cache: no directory given and neither XDG_CACHE_HOME nor HOME is set");
		return NULL;
	}
	if (n < 0 || (size_t)n >= sizeof buf) {
		coil_errc(err, COIL_E_IO, "cache: default directory path too long");
		return NULL;
	}
	char *d = strdup(buf);
	if (!d)
		coil_errc(err, COIL_E_RESOURCE, "cache: out of memory");
	return d;
}

int cache_open(const char *dir, uint64_t budget_bytes, coil_cache **out, coil_err *err)
{
	*out = NULL;
	coil_cache *c = calloc(1, sizeof *c);
	if (!c)
		return coil_errc(err, COIL_E_RESOURCE, "cache: out of memory");
	c->budget = budget_bytes;
	if (dir) {
		if (!dir[0]) {
			free(c);
			return coil_errc(err, COIL_E_IO, "cache: empty directory name");
		}
		c->dir = strdup(dir);
		if (!c->dir) {
			free(c);
			return coil_errc(err, COIL_E_RESOURCE, "cache: out of memory");
		}
		/* Trailing slashes would double up in every path we build. */
		for (size_t n = strlen(c->dir); n > 1 && c->dir[n - 1] == '/'; n--)
			c->dir[n - 1] = '\0';
	} else if (!(c->dir = default_dir(err))) {
		free(c);
		return -1;
	}

	char path[PATH_MAX];
	static const char *const subdirs[] = {"objects", "tmp", "locks"};
	if (cache_fs_mkdirs(c->dir, err) != 0)
		goto fail;
	for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++)
		if (cache_path(c, subdirs[i], path, sizeof path, err) != 0 ||
		    cache_fs_mkdir(path, NULL, err) != 0)
			goto fail;
	if (cache_db_open(c, err) != 0 || cache_reconcile(c, err) != 0)
		goto fail;
	*out = c;
	return 0;
fail:
	coil_err_prefix(err, "cache_open %s", c->dir);
	cache_close(c);
	return -1;
}

void cache_close(coil_cache *c)
{
	if (!c)
		return;
	if (c->db)
		sqlite3_close_v2(c->db);
	free(c->trash.keys);
	free(c->dir);
	free(c);
}

/* ---- Reconcile ---- */

int cache_keys_add(cache_keys *l, const char *key, coil_err *err)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		void *p = realloc(l->keys, cap * sizeof *l->keys);
		if (!p)
			return coil_errc(err, COIL_E_RESOURCE, "cache: out of memory");
		l->keys = p;
		l->cap = cap;
	}
	memcpy(l->keys[l->n++], key, CACHE_KEY_HEX + 1);
	return 0;
}

/* Does path exist as a regular file of exactly size bytes? */
static int file_has_size(const char *path, int64_t size)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == size;
}

/* Rows whose artifact or graph file is missing or has the wrong size. */
static int find_broken_rows(coil_cache *c, cache_keys *bad, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT key, size, graph_size FROM entries", err) != 0)
		return -1;
	int rc, ret = 0;
	char so[PATH_MAX], graph[PATH_MAX];
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		if (!cache_key_valid(key))
			continue; /* cannot happen through this API; never a file name */
		if (cache_obj_path(c, key, ".so", so, sizeof so, err) != 0 ||
		    cache_obj_path(c, key, ".graph", graph, sizeof graph, err) != 0) {
			ret = -1;
			break;
		}
		if (!file_has_size(so, sqlite3_column_int64(st, 1)) ||
		    !file_has_size(graph, sqlite3_column_int64(st, 2))) {
			if (cache_keys_add(bad, key, err) != 0) {
				ret = -1;
				break;
			}
		}
	}
	if (ret == 0 && rc != SQLITE_DONE)
		ret = cache_db_fail(c, "scanning entries", err);
	sqlite3_finalize(st);
	return ret;
}

/* If name is "<key>.so" or "<key>.graph" with a valid key, copy the key out. */
static int object_key(const char *name, char key[CACHE_KEY_HEX + 1])
{
	return cache_key_of_name(name, ".so", key) || cache_key_of_name(name, ".graph", key);
}

/* Delete object files that have no row.  Files not named like ours are left
 * alone: whatever put them there did not do it through this module. */
static int remove_orphans(coil_cache *c, coil_err *err)
{
	char objects[PATH_MAX];
	DIR *top = cache_opendir(c, "objects", objects, sizeof objects, err);
	if (!top)
		return -1;
	sqlite3_stmt *has;
	if (cache_db_prepare(c, &has, "SELECT 1 FROM entries WHERE key = ?1", err) != 0) {
		closedir(top);
		return -1;
	}
	int ret = 0;
	struct dirent *fan;
	while (ret == 0 && (fan = readdir(top))) {
		const char *fn = fan->d_name;
		if (strlen(fn) != 2 || !strchr("0123456789abcdef", fn[0]) ||
		    !strchr("0123456789abcdef", fn[1]))
			continue;
		char fanpath[PATH_MAX];
		int n = snprintf(fanpath, sizeof fanpath, "%s/%s", objects, fn);
		if (n < 0 || (size_t)n >= sizeof fanpath)
			continue;
		DIR *d = opendir(fanpath);
		if (!d)
			continue; /* not a directory, or gone */
		struct dirent *e;
		while (ret == 0 && (e = readdir(d))) {
			char key[CACHE_KEY_HEX + 1];
			if (!object_key(e->d_name, key) || memcmp(key, fn, 2) != 0)
				continue;
			sqlite3_reset(has);
			sqlite3_bind_text(has, 1, key, -1, SQLITE_STATIC);
			int rc = sqlite3_step(has);
			if (rc == SQLITE_DONE) {
				char path[PATH_MAX];
				int n = snprintf(path, sizeof path, "%s/%s", fanpath, e->d_name);
				if (n > 0 && (size_t)n < sizeof path)
					cache_fs_unlink(path);
			} else if (rc != SQLITE_ROW) {
				ret = cache_db_fail(c, "looking up an object file's row", err);
			}
		}
		closedir(d);
	}
	sqlite3_finalize(has);
	closedir(top);
	return ret;
}

/* Files a dead process trashed (cache_db_drop) go back where its rolled
 * back transaction left their row; the rest the sweep deletes. */
static int restore_trash(coil_cache *c, coil_err *err)
{
	char tmp[PATH_MAX];
	DIR *d = cache_opendir(c, "tmp", tmp, sizeof tmp, err);
	if (!d)
		return -1;
	sqlite3_stmt *has;
	if (cache_db_prepare(c, &has, "SELECT 1 FROM entries WHERE key = ?1", err) != 0) {
		closedir(d);
		return -1;
	}
	int ret = 0;
	struct dirent *e;
	while (ret == 0 && (e = readdir(d))) {
		char key[CACHE_KEY_HEX + 1], ext[8], t[PATH_MAX], o[PATH_MAX];
		size_t n = strlen(e->d_name);
		if (n <= CACHE_KEY_HEX + 6 || strcmp(e->d_name + n - 6, ".trash") != 0)
			continue;
		snprintf(ext, sizeof ext, "%.*s", (int)(n - 6 - CACHE_KEY_HEX), e->d_name + CACHE_KEY_HEX);
		memcpy(key, e->d_name, CACHE_KEY_HEX);
		key[CACHE_KEY_HEX] = '\0';
		if (!cache_key_valid(key) || (strcmp(ext, ".so") && strcmp(ext, ".graph")))
			continue;
		sqlite3_reset(has);
		sqlite3_bind_text(has, 1, key, -1, SQLITE_STATIC);
		int rc = sqlite3_step(has);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
			ret = cache_db_fail(c, "looking up a trashed file's row", err);
			break;
		}
		if (cache_trash_path(c, key, ext, t, sizeof t, err) != 0 ||
		    cache_obj_path(c, key, ext, o, sizeof o, err) != 0) {
			ret = -1;
			break;
		}
		if (rc == SQLITE_ROW && access(o, F_OK) != 0) {
			if (rename(t, o) != 0) {
				ret = coil_errc(err, coil_code_of_errno(errno), "cannot restore %s: %s", o, strerror(errno));
				break;
			}
		} else {
			cache_fs_unlink(t);
		}
	}
	sqlite3_finalize(has);
	closedir(d);
	return ret;
}

int cache_reconcile(coil_cache *c, coil_err *err)
{
	cache_keys bad = {0};
	if (cache_db_begin(c, err) != 0)
		return -1;
	/* All of it under the write lock: no other process is between a drop
	 * and its commit meanwhile, so whatever is trashed or unheld in tmp/ is
	 * a dead process's. */
	int ret = restore_trash(c, err);
	if (ret == 0)
		ret = find_broken_rows(c, &bad, err);
	for (size_t i = 0; ret == 0 && i < bad.n; i++)
		ret = cache_db_drop(c, bad.keys[i], err);
	if (ret == 0)
		ret = remove_orphans(c, err);
	if (ret == 0)
		ret = cache_fs_sweep_tmp(c, err);
	if (ret == 0)
		ret = cache_db_commit(c, err);
	if (ret != 0)
		cache_db_rollback(c);
	free(bad.keys);
	if (ret == 0)
		ret = cache_locks_cleanup(c, err);
	return ret;
}
