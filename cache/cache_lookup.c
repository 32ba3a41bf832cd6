/* Reading the cache: lookup (which also records use), metadata, stats, list. */
#include "cache/cache_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Outcome of checking an entry's files against the caller's graph. */
enum { ENTRY_HIT, ENTRY_ABSENT, ENTRY_STALE, ENTRY_COLLISION };

/* Inside the lookup's transaction: classify key's entry. */
static int classify(coil_cache *c, const char *key, const char *canon, size_t canon_len,
		    const char *so, const char *graph, int *kind, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT size, graph_size FROM entries WHERE key = ?1", err) != 0)
		return -1;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	int64_t size = 0, graph_size = 0;
	if (rc == SQLITE_ROW) {
		size = sqlite3_column_int64(st, 0);
		graph_size = sqlite3_column_int64(st, 1);
	}
	sqlite3_finalize(st);
	if (rc == SQLITE_DONE) {
		*kind = ENTRY_ABSENT;
		return 0;
	}
	if (rc != SQLITE_ROW)
		return cache_db_fail(c, "looking up a key", err);

	/* Files missing or of the wrong size (deleted by hand, a crash between
	 * an eviction's unlink and its commit): the row is stale. */
	struct stat sst, gst;
	if (stat(so, &sst) != 0 || !S_ISREG(sst.st_mode) || sst.st_size != size ||
	    stat(graph, &gst) != 0 || !S_ISREG(gst.st_mode) || gst.st_size != graph_size) {
		*kind = ENTRY_STALE;
		return 0;
	}
	if ((uint64_t)graph_size != canon_len) {
		*kind = ENTRY_COLLISION;
		return 0;
	}
	int same = cache_fs_same_bytes(graph, canon, canon_len, err);
	if (same < 0)
		return -1;
	*kind = same ? ENTRY_HIT : ENTRY_COLLISION;
	return 0;
}

/* Record a hit: the entry becomes the most recently used. */
static int touch(coil_cache *c, const char *key, coil_err *err)
{
	int64_t tick;
	if (cache_db_tick(c, &tick, err) != 0)
		return -1;
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "UPDATE entries SET last_used = ?1, tick = ?2 WHERE key = ?3",
			     err) != 0)
		return -1;
	sqlite3_bind_int64(st, 1, cache_now());
	sqlite3_bind_int64(st, 2, tick);
	sqlite3_bind_text(st, 3, key, -1, SQLITE_STATIC);
	int ret = sqlite3_step(st) == SQLITE_DONE ? 0 : cache_db_fail(c, "updating last use", err);
	sqlite3_finalize(st);
	return ret;
}

int cache_lookup(coil_cache *c, const char *key, const char *canon, size_t canon_len,
		 char *path_out, size_t cap, coil_err *err)
{
	char so[PATH_MAX], graph[PATH_MAX];
	if (cache_check_key(key, err) != 0)
		return coil_err_prefix(err, "cache_lookup");
	if (!canon && canon_len)
		return coil_errf(err, "cache_lookup %s: no canonical graph text given", key);
	if (cache_obj_path(c, key, ".so", so, sizeof so, err) != 0 ||
	    cache_obj_path(c, key, ".graph", graph, sizeof graph, err) != 0)
		return coil_err_prefix(err, "cache_lookup %s", key);
	if (!path_out || strlen(so) >= cap)
		return coil_errf(err, "cache_lookup %s: path buffer of %zu bytes is too small", key, cap);

	/* The answer needs only reads; the bookkeeping after it (last use,
	 * counters, dropping a stale row) needs a write transaction.  When the
	 * index cannot be written (a full disk, a writer holding the lock past
	 * the busy timeout) the lookup still answers, without the bookkeeping:
	 * a cache that cannot record a hit keeps serving it. */
	int kind = ENTRY_ABSENT;
	int writing = cache_db_begin(c, NULL) == 0;
	if (classify(c, key, canon, canon_len, so, graph, &kind, err) != 0) {
		if (writing)
			cache_db_rollback(c);
		return coil_err_prefix(err, "cache_lookup %s", key);
	}
	int ok = writing;
	switch (kind) {
	case ENTRY_HIT:
		ok = ok && touch(c, key, NULL) == 0 && cache_db_bump(c, "hits", 1, NULL) == 0;
		break;
	case ENTRY_STALE:
		ok = ok && cache_db_drop(c, key, NULL) == 0;
		/* fall through */
	case ENTRY_ABSENT:
		ok = ok && cache_db_bump(c, "misses", 1, NULL) == 0;
		break;
	case ENTRY_COLLISION:
		ok = ok && cache_db_bump(c, "collisions", 1, NULL) == 0 &&
		     cache_db_bump(c, "misses", 1, NULL) == 0;
		break;
	}
	if (writing && (!ok || cache_db_commit(c, NULL) != 0))
		cache_db_rollback(c);
	if (kind != ENTRY_HIT)
		return 0;
	memcpy(path_out, so, strlen(so) + 1);
	return 1;
}

int cache_get_meta(coil_cache *c, const char *key, char **meta_out, char sha256_hex[65],
		   uint64_t *size, coil_err *err)
{
	if (meta_out)
		*meta_out = NULL;
	if (cache_check_key(key, err) != 0)
		return coil_err_prefix(err, "cache_get_meta");
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT meta, sha256, size FROM entries WHERE key = ?1", err) != 0)
		return coil_err_prefix(err, "cache_get_meta %s", key);
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st), ret = 0;
	if (rc == SQLITE_ROW) {
		const char *meta = (const char *)sqlite3_column_text(st, 0);
		const char *sha = (const char *)sqlite3_column_text(st, 1);
		ret = 1;
		if (meta_out && meta && !(*meta_out = strdup(meta)))
			ret = coil_errc(err, COIL_E_RESOURCE, "cache_get_meta %s: out of memory", key);
		if (sha256_hex)
			snprintf(sha256_hex, 65, "%s", sha ? sha : "");
		if (size)
			*size = (uint64_t)sqlite3_column_int64(st, 2);
	} else if (rc != SQLITE_DONE) {
		ret = cache_db_fail(c, "reading an entry", err);
		coil_err_prefix(err, "cache_get_meta %s", key);
	}
	sqlite3_finalize(st);
	return ret;
}

int cache_stats(coil_cache *c, cache_stats_t *out, coil_err *err)
{
	/* One statement, so one consistent snapshot. */
	static const char sql[] =
		"SELECT (SELECT COUNT(*) FROM entries),"
		" (SELECT COALESCE(SUM(size + graph_size), 0) FROM entries),"
		" (SELECT value FROM counters WHERE name = 'hits'),"
		" (SELECT value FROM counters WHERE name = 'misses'),"
		" (SELECT value FROM counters WHERE name = 'evictions'),"
		" (SELECT value FROM counters WHERE name = 'collisions')";
	memset(out, 0, sizeof *out);
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, sql, err) != 0)
		return coil_err_prefix(err, "cache_stats");
	int ret = 0;
	if (sqlite3_step(st) == SQLITE_ROW) {
		out->entries = (uint64_t)sqlite3_column_int64(st, 0);
		out->bytes = (uint64_t)sqlite3_column_int64(st, 1);
		out->hits = (uint64_t)sqlite3_column_int64(st, 2);
		out->misses = (uint64_t)sqlite3_column_int64(st, 3);
		out->evictions = (uint64_t)sqlite3_column_int64(st, 4);
		out->collisions = (uint64_t)sqlite3_column_int64(st, 5);
		out->budget = c->budget;
	} else {
		ret = cache_db_fail(c, "reading stats", err);
		coil_err_prefix(err, "cache_stats");
	}
	sqlite3_finalize(st);
	return ret;
}

int cache_list(coil_cache *c, cache_list_cb cb, void *ud, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT key, size, last_used, meta FROM entries ORDER BY tick, key",
			     err) != 0)
		return coil_err_prefix(err, "cache_list");
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		if (!cache_key_valid(key))
			continue;
		if (cb(ud, key, (uint64_t)sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
		       (const char *)sqlite3_column_text(st, 3)) != 0) {
			rc = SQLITE_DONE;
			break;
		}
	}
	int ret = 0;
	if (rc != SQLITE_DONE) {
		ret = cache_db_fail(c, "listing entries", err);
		coil_err_prefix(err, "cache_list");
	}
	sqlite3_finalize(st);
	return ret;
}
