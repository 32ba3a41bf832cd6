/* Storing artifacts, and the ways entries leave: remove, gc (eviction itself
 * is cache_db_evict()).
 *
 * A store stages two temp files in DIR/tmp (the artifact and its graph text),
 * fsyncs them, then inside one write transaction renames both into place,
 * fsyncs the fan-out directory, writes the row and evicts.  Holding the write
 * lock while renaming keeps other processes' reconciles and evictions from
 * seeing files whose row is not yet there. */
#include "cache/cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <jansson.h>

typedef struct {
	char so_tmp[PATH_MAX], graph_tmp[PATH_MAX]; /* "" once renamed or removed */
	int so_fd, graph_fd;
	cache_sha256 *hash; /* of the artifact bytes written so far */
	uint64_t size;
} staged;

/* Leave nothing behind: unlink the temp files (still holding their locks),
 * close them, free the hash. */
static void stage_abort(staged *s)
{
	if (s->so_tmp[0])
		cache_fs_unlink(s->so_tmp);
	if (s->graph_tmp[0])
		cache_fs_unlink(s->graph_tmp);
	s->so_tmp[0] = s->graph_tmp[0] = '\0';
	if (s->so_fd >= 0)
		close(s->so_fd);
	if (s->graph_fd >= 0)
		close(s->graph_fd);
	s->so_fd = s->graph_fd = -1;
	cache_sha256_free(s->hash);
	s->hash = NULL;
}

static int stage_open(coil_cache *c, staged *s, coil_err *err)
{
	memset(s, 0, sizeof *s);
	s->so_fd = s->graph_fd = -1;
	if (!(s->hash = cache_sha256_new(err)) ||
	    cache_fs_tmp_create(c, ".so", s->so_tmp, sizeof s->so_tmp, &s->so_fd, err) != 0 ||
	    cache_fs_tmp_create(c, ".graph", s->graph_tmp, sizeof s->graph_tmp, &s->graph_fd, err) != 0) {
		stage_abort(s);
		return -1;
	}
	return 0;
}

/* Append artifact bytes. */
static int stage_write(staged *s, const void *p, size_t n, coil_err *err)
{
	if (cache_fs_write_all(s->so_fd, p, n, s->so_tmp, err) != 0 ||
	    cache_sha256_update(s->hash, p, n, err) != 0)
		return -1;
	s->size += n;
	return 0;
}

/* fsync one temp file.  It stays open (and so flocked, see
 * cache_fs_tmp_create) until stage_abort, after the rename: a reconcile in
 * another process must not take it for a dead store's leftover. */
static int seal(int fd, const char *path, coil_err *err)
{
	if (fsync(fd) != 0)
		return coil_errc(err, coil_code_of_errno(errno), "cannot sync %s: %s", path, strerror(errno));
	return 0;
}

/* Insert or replace key's row. */
static int put_row(coil_cache *c, const char *key, uint64_t size, uint64_t graph_size,
		   const char *sha, const char *meta, coil_err *err)
{
	int64_t tick, now = cache_now();
	if (cache_db_tick(c, &tick, err) != 0)
		return -1;
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st,
			     "INSERT OR REPLACE INTO entries"
			     " (key, size, graph_size, sha256, meta, created, last_used, tick)"
			     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
			     err) != 0)
		return -1;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (int64_t)size);
	sqlite3_bind_int64(st, 3, (int64_t)graph_size);
	sqlite3_bind_text(st, 4, sha, -1, SQLITE_STATIC);
	if (meta)
		sqlite3_bind_text(st, 5, meta, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 5);
	sqlite3_bind_int64(st, 6, now);
	sqlite3_bind_int64(st, 7, tick);
	int ret = 0;
	if (sqlite3_step(st) != SQLITE_DONE)
		ret = cache_db_fail(c, "inserting an entry", err);
	sqlite3_finalize(st);
	return ret;
}

/* Write the graph text, seal both files, and publish them under key. */
static int stage_commit(coil_cache *c, staged *s, const char *key, const char *canon,
			size_t canon_len, const char *meta, coil_err *err)
{
	char sha[65], fan[PATH_MAX], so[PATH_MAX], graph[PATH_MAX], objects[PATH_MAX];
	int fan_created = 0;
	if (cache_fs_write_all(s->graph_fd, canon, canon_len, s->graph_tmp, err) != 0 ||
	    seal(s->so_fd, s->so_tmp, err) != 0 || seal(s->graph_fd, s->graph_tmp, err) != 0 ||
	    cache_sha256_final(s->hash, sha, err) != 0)
		return -1;
	if (c->budget && (s->size > c->budget || canon_len > c->budget - s->size))
		return coil_errc(err, COIL_E_LIMIT,
				 "artifact (%llu bytes) plus graph text (%zu bytes) exceed the cache"
				 " budget of %llu bytes",
				 (unsigned long long)s->size, canon_len, (unsigned long long)c->budget);
	if (cache_fan_path(c, key, fan, sizeof fan, err) != 0 ||
	    cache_obj_path(c, key, ".so", so, sizeof so, err) != 0 ||
	    cache_obj_path(c, key, ".graph", graph, sizeof graph, err) != 0 ||
	    cache_path(c, "objects", objects, sizeof objects, err) != 0 ||
	    cache_fs_mkdir(fan, &fan_created, err) != 0)
		return -1;
	if (fan_created && cache_fs_fsync_dir(objects, err) != 0)
		return -1;

	if (cache_db_begin(c, err) != 0)
		return -1;
	/* An entry being replaced: its files step aside to DIR/tmp, back in
	 * place if this fails (cache_db_rollback), deleted once it commits. */
	int have_graph = 0, have_so = 0;
	if ((access(so, F_OK) == 0 || access(graph, F_OK) == 0) && cache_db_trash_files(c, key, err) != 0)
		goto fail;
	/* The graph goes first: a .so is never in place without its graph. */
	if (rename(s->graph_tmp, graph) != 0) {
		coil_errc(err, coil_code_of_errno(errno), "cannot rename %s to %s: %s", s->graph_tmp, graph, strerror(errno));
		goto fail;
	}
	s->graph_tmp[0] = '\0';
	have_graph = 1;
	if (rename(s->so_tmp, so) != 0) {
		coil_errc(err, coil_code_of_errno(errno), "cannot rename %s to %s: %s", s->so_tmp, so, strerror(errno));
		goto fail;
	}
	s->so_tmp[0] = '\0';
	have_so = 1;
	if (cache_fs_fsync_dir(fan, err) != 0 ||
	    put_row(c, key, s->size, canon_len, sha, meta, err) != 0 ||
	    (c->budget && cache_db_evict(c, c->budget, key, err) != 0) || cache_db_commit(c, err) != 0)
		goto fail;
	return 0;
fail:
	/* Still holding the write lock, take back what was put in place; the
	 * rollback puts a replaced entry's files back. */
	if (have_graph)
		cache_fs_unlink(graph);
	if (have_so)
		cache_fs_unlink(so);
	cache_db_rollback(c);
	return -1;
}

/* Checks every store makes before touching the disk. */
static int check_store_args(const char *key, const char *canon, size_t canon_len,
			    const char *meta, coil_err *err)
{
	if (cache_check_key(key, err) != 0)
		return -1;
	if (!canon && canon_len)
		return coil_errf(err, "no canonical graph text given");
	if (meta) {
		json_error_t jerr;
		errno = 0;
		json_t *j = json_loads(meta, JSON_DECODE_ANY, &jerr);
		if (!j && errno == ENOMEM) /* jansson reports it as a syntax error */
			return coil_errc(err, COIL_E_RESOURCE, "out of memory while checking the metadata");
		if (!j)
			return coil_errc(err, COIL_E_IO, "metadata is not JSON: line %d: %s", jerr.line, jerr.text);
		json_decref(j);
	}
	return 0;
}

/* One attempt at storing the file at src_path (data NULL) or len bytes at data. */
static int store_once(coil_cache *c, const char *key, const char *src_path, const void *data, size_t len,
		      const char *canon, size_t canon_len, const char *meta_json, coil_err *err)
{
	staged s;
	if (!src_path) {
		int ret = stage_open(c, &s, err);
		if (ret == 0)
			ret = stage_write(&s, data, len, err);
		if (ret == 0)
			ret = stage_commit(c, &s, key, canon, canon_len, meta_json, err);
		stage_abort(&s);
		return ret;
	}
	int src = open(src_path, O_RDONLY | O_CLOEXEC);
	if (src < 0)
		return coil_errc(err, coil_code_of_errno(errno), "cannot open %s: %s", src_path, strerror(errno));
	if (stage_open(c, &s, err) != 0) {
		close(src);
		return -1;
	}
	unsigned char buf[65536];
	int ret = 0;
	for (;;) {
		ssize_t n = read(src, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = coil_errc(err, coil_code_of_errno(errno), "cannot read %s: %s", src_path, strerror(errno));
			break;
		}
		if (n == 0 || (ret = stage_write(&s, buf, (size_t)n, err)) != 0)
			break;
	}
	close(src);
	if (ret == 0)
		ret = stage_commit(c, &s, key, canon, canon_len, meta_json, err);
	stage_abort(&s);
	return ret;
}

/* Did the last failure come from a full disk? */
static int disk_full(coil_cache *c, const coil_err *err)
{
	return (err && err->code == COIL_E_RESOURCE) || sqlite3_errcode(c->db) == SQLITE_FULL;
}

/* Evict least-recently-used entries other than keep, at least bytes of
 * them; the number evicted or -1. */
static int evict_lru(coil_cache *c, uint64_t bytes, const char *keep, coil_err *err)
{
	cache_stats_t before, after;
	uint64_t total = 0;
	if (cache_stats(c, &before, err) != 0 || cache_db_total(c, &total, err) != 0)
		return -1;
	if (total == 0)
		return 0;
	if (cache_db_begin(c, err) != 0)
		return -1;
	if (cache_db_evict(c, total > bytes ? total - bytes : 0, keep, err) != 0 || cache_db_commit(c, err) != 0) {
		cache_db_rollback(c);
		return -1;
	}
	if (cache_stats(c, &after, err) != 0)
		return -1;
	return (int)(after.evictions - before.evictions);
}

int cache_make_room(coil_cache *c, uint64_t bytes, coil_err *err)
{
	cache_db_make_room(c);
	int n = evict_lru(c, bytes, NULL, err);
	cache_db_make_room(c);
	return n < 0 ? coil_err_prefix(err, "cache_make_room") : n;
}

int64_t cache_free_bytes(const coil_cache *c)
{
	struct statvfs vfs;
	if (statvfs(c->dir, &vfs) != 0)
		return -1;
	return (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
}

/* A store on a full disk gets two more tries: after the index's write-ahead
 * log has been checkpointed and truncated (it grows between checkpoints and
 * can be most of what fills a small disk), then after least-recently-used
 * entries of twice its size have been evicted. */
static int store(coil_cache *c, const char *fn, const char *key, const char *src_path, const void *data,
		 size_t len, const char *canon, size_t canon_len, const char *meta_json, coil_err *err)
{
	if (check_store_args(key, canon, canon_len, meta_json, err) != 0)
		return coil_err_prefix(err, "%s", fn);
	if (!src_path && !data && len)
		return coil_errf(err, "%s %s: no data given", fn, key);
	int ret = store_once(c, key, src_path, data, len, canon, canon_len, meta_json, err);
	for (int round = 0; ret != 0 && round < 2 && disk_full(c, err); round++) {
		if (round == 0) {
			cache_db_make_room(c);
		} else {
			uint64_t need = 2 * ((uint64_t)len + canon_len);
			struct stat st;
			if (src_path && stat(src_path, &st) == 0)
				need = 2 * ((uint64_t)st.st_size + canon_len);
			coil_err e2 = {0};
			if (evict_lru(c, need, key, &e2) <= 0)
				break;
		}
		ret = store_once(c, key, src_path, data, len, canon, canon_len, meta_json, err);
	}
	return ret == 0 ? 0 : coil_err_prefix(err, "%s %s", fn, key);
}

int cache_store(coil_cache *c, const char *key, const char *src_path, const char *canon,
		size_t canon_len, const char *meta_json, coil_err *err)
{
	return store(c, "cache_store", key, src_path, NULL, 0, canon, canon_len, meta_json, err);
}

int cache_store_bytes(coil_cache *c, const char *key, const void *data, size_t len,
		      const char *canon, size_t canon_len, const char *meta_json, coil_err *err)
{
	return store(c, "cache_store_bytes", key, NULL, data, len, canon, canon_len, meta_json, err);
}

/* Removing on a full disk: the index needs room to record it; the
 * write-ahead log's truncation gives it. */
int cache_remove(coil_cache *c, const char *key, coil_err *err)
{
	if (cache_check_key(key, err) != 0)
		return coil_err_prefix(err, "cache_remove");
	for (int attempt = 0;; attempt++) {
		int ret = cache_db_begin(c, err);
		if (ret == 0 && (cache_db_drop(c, key, err) != 0 || cache_db_commit(c, err) != 0))
			ret = -1;
		if (ret == 0)
			return 0;
		cache_db_rollback(c);
		if (attempt > 0 || !disk_full(c, err))
			return coil_err_prefix(err, "cache_remove %s", key);
		cache_db_make_room(c);
	}
}

int cache_gc(coil_cache *c, uint64_t budget, coil_err *err)
{
	for (int attempt = 0;; attempt++) {
		int ret = cache_db_begin(c, err);
		if (ret == 0 && (cache_db_evict(c, budget, NULL, err) != 0 || cache_db_commit(c, err) != 0))
			ret = -1;
		if (ret == 0)
			return 0;
		cache_db_rollback(c);
		if (attempt > 0 || !disk_full(c, err))
			return coil_err_prefix(err, "cache_gc");
		cache_db_make_room(c);
	}
}
