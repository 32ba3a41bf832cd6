/* What the cache's source files share; not part of the public API. */
#ifndef COIL_CACHE_INTERNAL_H
#define COIL_CACHE_INTERNAL_H

#include <dirent.h>
#include <stdint.h>

#include <sqlite3.h>

#include "cache/cache.h"

/* A growable list of keys. */
typedef struct {
	char (*keys)[CACHE_KEY_HEX + 1];
	size_t n, cap;
} cache_keys;

struct coil_cache {
	char *dir;        /* the cache directory, no trailing slash */
	sqlite3 *db;      /* DIR/index.sqlite */
	uint64_t budget;  /* bytes, 0 = unlimited */
	unsigned tmp_seq; /* makes this handle's temp file names distinct */
	cache_keys trash; /* entries whose files this transaction moved to DIR/tmp (cache_db_drop) */
};

/* ---- cache.c ---- */
/* Append a valid key (copied); free the list with free(l->keys). */
int cache_keys_add(cache_keys *l, const char *key, coil_err *err);
/* 0 if key is valid, else -1 with err naming the offending key. */
int cache_check_key(const char *key, coil_err *err);
/* "DIR/sub" into buf; -1 with err if it does not fit. */
int cache_path(const coil_cache *c, const char *sub, char *buf, size_t cap, coil_err *err);
/* opendir("DIR/sub"), its path in buf; NULL with err. */
DIR *cache_opendir(const coil_cache *c, const char *sub, char *buf, size_t cap, coil_err *err);
/* DIR/objects/ab (fan-out directory of key) and DIR/objects/ab/<key><ext>. */
int cache_fan_path(const coil_cache *c, const char *key, char *buf, size_t cap, coil_err *err);
int cache_obj_path(const coil_cache *c, const char *key, const char *ext, char *buf, size_t cap,
		   coil_err *err);
/* DIR/tmp/<key><ext>.trash and DIR/locks/<key>.lock. */
int cache_trash_path(const coil_cache *c, const char *key, const char *ext, char *buf, size_t cap,
		     coil_err *err);
int cache_lock_path(const coil_cache *c, const char *key, char *buf, size_t cap, coil_err *err);
/* 1 with the key copied out when name is "<key><suffix>" with a valid key. */
int cache_key_of_name(const char *name, const char *suffix, char key[CACHE_KEY_HEX + 1]);
/* ---- cache_db.c: the index ----
 * Schema (user_version 1):
 *   entries(key TEXT PRIMARY KEY, size, graph_size, sha256, meta, created, last_used, tick)
 *   counters(name TEXT PRIMARY KEY, value)  -- hits, misses, evictions, collisions, tick
 * "tick" is a shared counter bumped on every store and hit; entries are evicted
 * in increasing tick order, which is exact where second-resolution times tie. */
int cache_db_open(coil_cache *c, coil_err *err);
/* The code of the index's last failure: resource for a full disk or no
 * memory, else I/O. */
coil_code cache_db_code(coil_cache *c);
/* Fill err with "cache index: WHAT: <sqlite message>"; returns -1. */
int cache_db_fail(coil_cache *c, const char *what, coil_err *err);
int cache_db_prepare(coil_cache *c, sqlite3_stmt **st, const char *sql, coil_err *err);
/* Prepare, step to the end and finalize a statement without parameters. */
int cache_db_run(coil_cache *c, const char *sql, coil_err *err);
/* BEGIN IMMEDIATE (waits out other writers up to the busy timeout), COMMIT,
 * ROLLBACK.  Every read-modify-write of the index runs inside one.  After a
 * failed COMMIT the caller still calls cache_db_rollback() (a no-op for the
 * index when SQLite has already rolled back; it still puts trashed files
 * back).  A COMMIT deletes the files trashed in the transaction. */
int cache_db_begin(coil_cache *c, coil_err *err);
int cache_db_commit(coil_cache *c, coil_err *err);
void cache_db_rollback(coil_cache *c);
/* On a full disk: checkpoint the write-ahead log into the index and
 * truncate it (outside any transaction; best effort). */
void cache_db_make_room(coil_cache *c);
/* counters[name] += by. */
int cache_db_bump(coil_cache *c, const char *name, int64_t by, coil_err *err);
/* counters["tick"] += 1, its new value into *tick. */
int cache_db_tick(coil_cache *c, int64_t *tick, coil_err *err);
/* Sum of size + graph_size over all entries. */
int cache_db_total(coil_cache *c, uint64_t *bytes, coil_err *err);
/* Inside a transaction: delete key's row and move its two files (those that
 * exist) to DIR/tmp/<key>.so.trash and .graph.trash.  The transaction's
 * COMMIT deletes them, its ROLLBACK moves them back, and after a crash in
 * between, cache_reconcile() does one or the other as the index says: an
 * entry's files are never gone while its row stays, even on a full disk
 * where the COMMIT fails. */
int cache_db_drop(coil_cache *c, const char *key, coil_err *err);
/* The same for key's files alone (a store replacing an entry). */
int cache_db_trash_files(coil_cache *c, const char *key, coil_err *err);
/* Inside a transaction: drop least-recently-used entries other than keep
 * (NULL: none is kept) until the total is <= budget; counts evictions. */
int cache_db_evict(coil_cache *c, uint64_t budget, const char *keep, coil_err *err);

/* ---- cache_lock.c ---- */
/* Delete the lock files that nobody holds. */
int cache_locks_cleanup(coil_cache *c, coil_err *err);

/* ---- cache_fs.c: files ---- */
/* mkdir path; an existing directory is fine.  *created (may be NULL) says
 * whether this call made it. */
int cache_fs_mkdir(const char *path, int *created, coil_err *err);
/* mkdir -p */
int cache_fs_mkdirs(const char *path, coil_err *err);
int cache_fs_fsync_dir(const char *path, coil_err *err);
/* Write all n bytes (retrying short writes); path is for the message. */
int cache_fs_write_all(int fd, const void *p, size_t n, const char *path, coil_err *err);
/* Create a new file in DIR/tmp with O_EXCL; its path into buf.  The file is
 * flocked for as long as *fd_out stays open: keep it open until the file
 * has been renamed away or unlinked. */
int cache_fs_tmp_create(coil_cache *c, const char *suffix, char *buf, size_t cap, int *fd_out,
			coil_err *err);
/* Delete the files and directories in DIR/tmp that nobody holds (their
 * process died): stores and builds in progress keep theirs flocked. */
int cache_fs_sweep_tmp(coil_cache *c, coil_err *err);
/* Is the file open as fd still the one at path? */
int cache_fs_still_linked(int fd, const char *path);
/* Does the file at path hold exactly data[0..len)?  1 yes, 0 no (also when
 * it is missing), -1 on a read error. */
int cache_fs_same_bytes(const char *path, const void *data, size_t len, coil_err *err);
/* unlink, treating "already gone" as success; returns 0 or -1 (errno set). */
int cache_fs_unlink(const char *path);
/* Unix time now, in seconds. */
int64_t cache_now(void);

#endif
