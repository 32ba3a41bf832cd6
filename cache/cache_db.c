/* The SQLite index: opening it, its schema, transactions, counters and the
 * row operations that several entry points share.  Every statement is
 * prepared; every value is bound. */
#include "cache/cache_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a handle waits for another process's write transaction. */
#define BUSY_TIMEOUT_MS 30000

#define SCHEMA_VERSION 1

static const char *const schema[] = {
	"CREATE TABLE IF NOT EXISTS entries ("
	" key TEXT PRIMARY KEY NOT NULL,"      /* 64 lowercase hex digits */
	" size INTEGER NOT NULL,"              /* artifact bytes */
	" graph_size INTEGER NOT NULL,"        /* canonical graph text bytes */
	" sha256 TEXT NOT NULL,"               /* of the artifact, hex */
	" meta TEXT,"                          /* JSON text or NULL */
	" created INTEGER NOT NULL,"           /* Unix seconds */
	" last_used INTEGER NOT NULL,"         /* Unix seconds */
	" tick INTEGER NOT NULL)",             /* LRU order, see cache_internal.h */
	"CREATE INDEX IF NOT EXISTS entries_tick ON entries(tick)",
	"CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL)",
	"INSERT OR IGNORE INTO counters(name, value) VALUES"
	" ('hits', 0), ('misses', 0), ('evictions', 0), ('collisions', 0), ('tick', 0)",
	"PRAGMA user_version = 1",
};

coil_code cache_db_code(coil_cache *c)
{
	int e = c->db ? sqlite3_errcode(c->db) : SQLITE_CANTOPEN;
	return e == SQLITE_FULL || e == SQLITE_NOMEM ? COIL_E_RESOURCE : COIL_E_IO;
}

int cache_db_fail(coil_cache *c, const char *what, coil_err *err)
{
	return coil_errc(err, cache_db_code(c), "cache index: %s: %s", what, sqlite3_errmsg(c->db));
}

int cache_db_prepare(coil_cache *c, sqlite3_stmt **st, const char *sql, coil_err *err)
{
	if (sqlite3_prepare_v2(c->db, sql, -1, st, NULL) != SQLITE_OK) {
		*st = NULL;
		return coil_errc(err, cache_db_code(c), "cache index: preparing \"%.60s\": %s", sql, sqlite3_errmsg(c->db));
	}
	return 0;
}

/* Step st to the end; -1 with err on failure.  Does not finalize. */
static int step_done(coil_cache *c, sqlite3_stmt *st, coil_err *err)
{
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	if (rc != SQLITE_DONE)
		return coil_errc(err, cache_db_code(c), "cache index: \"%.60s\": %s", sqlite3_sql(st),
				 sqlite3_errmsg(c->db));
	return 0;
}

int cache_db_run(coil_cache *c, const char *sql, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, sql, err) != 0)
		return -1;
	int ret = step_done(c, st, err);
	sqlite3_finalize(st);
	return ret;
}

int cache_db_begin(coil_cache *c, coil_err *err)
{
	return cache_db_run(c, "BEGIN IMMEDIATE", err);
}

/* After the transaction: delete the trashed files (committed) or put them
 * back (rolled back). */
static void settle_trash(coil_cache *c, int committed)
{
	static const char *const exts[] = {".so", ".graph"};
	for (size_t i = 0; i < c->trash.n; i++)
		for (int e = 0; e < 2; e++) {
			char t[PATH_MAX], o[PATH_MAX];
			if (cache_trash_path(c, c->trash.keys[i], exts[e], t, sizeof t, NULL) != 0 ||
			    cache_obj_path(c, c->trash.keys[i], exts[e], o, sizeof o, NULL) != 0)
				continue;
			/* A file that will not move back stays in tmp/ for the next
			 * reconcile to restore (its row is there). */
			if (committed)
				cache_fs_unlink(t);
			else
				rename(t, o);
		}
	c->trash.n = 0;
}

int cache_db_commit(coil_cache *c, coil_err *err)
{
	if (cache_db_run(c, "COMMIT", err) != 0)
		return -1;
	settle_trash(c, 1);
	return 0;
}

void cache_db_rollback(coil_cache *c)
{
	if (!sqlite3_get_autocommit(c->db))
		cache_db_run(c, "ROLLBACK", NULL);
	settle_trash(c, 0);
}

/* Switch to WAL.  A database being created by another process at the same
 * moment can report busy here without waiting, so retry for a while. */
static int set_wal(coil_cache *c, coil_err *err)
{
	for (int attempt = 0;; attempt++) {
		sqlite3_stmt *st;
		if (cache_db_prepare(c, &st, "PRAGMA journal_mode = WAL", err) != 0)
			return -1;
		int rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			const char *mode = (const char *)sqlite3_column_text(st, 0);
			int ok = mode && strcmp(mode, "wal") == 0;
			if (!ok)
				coil_errc(err, COIL_E_IO, "cache index: cannot use WAL mode (journal mode is %s)",
					  mode ? mode : "?");
			sqlite3_finalize(st);
			return ok ? 0 : -1;
		}
		sqlite3_finalize(st);
		if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || attempt * 10 >= BUSY_TIMEOUT_MS)
			return cache_db_fail(c, "setting WAL mode", err);
		usleep(10 * 1000);
	}
}

static int create_schema(coil_cache *c, coil_err *err)
{
	if (cache_db_begin(c, err) != 0)
		return -1;
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "PRAGMA user_version", err) != 0)
		goto fail;
	int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
	sqlite3_finalize(st);
	if (version < 0) {
		cache_db_fail(c, "reading the schema version", err);
		goto fail;
	}
	if (version > SCHEMA_VERSION) {
		coil_errc(err, COIL_E_IO, "cache index: schema version %d is newer than this coil's (%d)", version,
			  SCHEMA_VERSION);
		goto fail;
	}
	if (version < SCHEMA_VERSION)
		for (size_t i = 0; i < sizeof schema / sizeof schema[0]; i++)
			if (cache_db_run(c, schema[i], err) != 0)
				goto fail;
	if (cache_db_commit(c, err) == 0)
		return 0;
fail:
	cache_db_rollback(c);
	return -1;
}

int cache_db_open(coil_cache *c, coil_err *err)
{
	char path[PATH_MAX];
	if (cache_path(c, "index.sqlite", path, sizeof path, err) != 0)
		return -1;
	int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		coil_errc(err, COIL_E_IO, "cannot open index %s: %s", path,
			  c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		return -1; /* cache_close() closes c->db */
	}
	sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
	if (set_wal(c, err) != 0 ||
	    /* In WAL mode NORMAL loses at most the last commits on power loss; the
	     * files those rows name are then orphans that reconcile deletes. */
	    cache_db_run(c, "PRAGMA synchronous = NORMAL", err) != 0 ||
	    /* After a checkpoint the log shrinks back to this: on a small disk
	     * it must not keep its high-water mark. */
	    cache_db_run(c, "PRAGMA journal_size_limit = 1048576", err) != 0 || create_schema(c, err) != 0)
		return coil_err_prefix(err, "index %s", path);
	return 0;
}

int cache_db_bump(coil_cache *c, const char *name, int64_t by, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "UPDATE counters SET value = value + ?1 WHERE name = ?2", err) != 0)
		return -1;
	sqlite3_bind_int64(st, 1, by);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	int ret = step_done(c, st, err);
	sqlite3_finalize(st);
	return ret;
}

int cache_db_tick(coil_cache *c, int64_t *tick, coil_err *err)
{
	if (cache_db_bump(c, "tick", 1, err) != 0)
		return -1;
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT value FROM counters WHERE name = 'tick'", err) != 0)
		return -1;
	int ret = 0;
	if (sqlite3_step(st) == SQLITE_ROW)
		*tick = sqlite3_column_int64(st, 0);
	else
		ret = cache_db_fail(c, "reading the tick counter", err);
	sqlite3_finalize(st);
	return ret;
}

int cache_db_total(coil_cache *c, uint64_t *bytes, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT COALESCE(SUM(size + graph_size), 0) FROM entries", err) != 0)
		return -1;
	int ret = 0;
	if (sqlite3_step(st) == SQLITE_ROW)
		*bytes = (uint64_t)sqlite3_column_int64(st, 0);
	else
		ret = cache_db_fail(c, "summing sizes", err);
	sqlite3_finalize(st);
	return ret;
}

int cache_db_trash_files(coil_cache *c, const char *key, coil_err *err)
{
	static const char *const exts[] = {".so", ".graph"};
	for (size_t i = 0; i < c->trash.n; i++)
		if (!strcmp(c->trash.keys[i], key))
			return 0; /* already trashed in this transaction */
	/* Listed before anything moves, so a rollback always finds it. */
	if (cache_keys_add(&c->trash, key, err) != 0)
		return -1;
	for (int e = 0; e < 2; e++) {
		char o[PATH_MAX], t[PATH_MAX];
		if (cache_obj_path(c, key, exts[e], o, sizeof o, err) != 0 ||
		    cache_trash_path(c, key, exts[e], t, sizeof t, err) != 0)
			return -1;
		/* A file that will not move fails the transaction: deleting it
		 * now could not be undone by a rollback. */
		if (rename(o, t) != 0 && errno != ENOENT)
			return coil_errc(err, coil_code_of_errno(errno), "cannot move %s aside: %s", o, strerror(errno));
	}
	return 0;
}

int cache_db_drop(coil_cache *c, const char *key, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "DELETE FROM entries WHERE key = ?1", err) != 0)
		return -1;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	int ret = step_done(c, st, err);
	sqlite3_finalize(st);
	if (ret != 0)
		return -1;
	return cache_db_trash_files(c, key, err);
}

int cache_db_evict(coil_cache *c, uint64_t budget, const char *keep, coil_err *err)
{
	uint64_t total;
	if (cache_db_total(c, &total, err) != 0)
		return -1;
	if (total <= budget)
		return 0;

	/* Choose the victims first, then drop them: no deleting under a cursor. */
	cache_keys victims = {0};
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st,
			     "SELECT key, size + graph_size FROM entries WHERE key != ?1"
			     " ORDER BY tick, key",
			     err) != 0)
		return -1;
	sqlite3_bind_text(st, 1, keep ? keep : "", -1, SQLITE_STATIC);
	int rc = SQLITE_DONE, ret = 0;
	while (total > budget && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		uint64_t bytes = (uint64_t)sqlite3_column_int64(st, 1);
		if (!cache_key_valid(key))
			continue;
		if (cache_keys_add(&victims, key, err) != 0) {
			ret = -1;
			break;
		}
		total = bytes < total ? total - bytes : 0;
	}
	if (ret == 0 && total > budget && rc != SQLITE_DONE)
		ret = cache_db_fail(c, "choosing entries to evict", err);
	sqlite3_finalize(st);

	for (size_t i = 0; ret == 0 && i < victims.n; i++)
		ret = cache_db_drop(c, victims.keys[i], err);
	if (ret == 0 && victims.n)
		ret = cache_db_bump(c, "evictions", (int64_t)victims.n, err);
	free(victims.keys);
	return ret;
}

void cache_db_make_room(coil_cache *c)
{
	sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
}
