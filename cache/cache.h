/* The artifact cache: compiled kernels (.so files) addressed by a 256-bit key,
 * kept in one directory and indexed in SQLite so that several processes can
 * share it.
 *
 * Layout of a cache directory DIR:
 *   DIR/index.sqlite                 the index (WAL mode, busy timeout)
 *   DIR/objects/ab/<key>.so          the artifact; "ab" = first two hex digits
 *   DIR/objects/ab/<key>.graph       the canonical graph text it was built from
 *   DIR/tmp/                         temp files of stores and builds in progress
 *   DIR/locks/<key>.lock             per-key compile locks (flock)
 *
 * Keys are 64 lowercase hex digits (a SHA-256 digest).  Only keys that pass
 * cache_key_valid() ever become file names; every entry point rejects others.
 *
 * Invariants kept across crashes: a row in the index is inserted only after its
 * files are complete, fsynced and renamed into place; a lookup hit always has
 * the same canonical graph as the caller's; cache_open() drops rows whose files
 * are missing or have the wrong size, and deletes object files with no row,
 * temp files and build directories whose process is gone (their flock is
 * free) and lock files nobody holds.
 *
 * Threads: a coil_cache handle is used by one thread at a time.  Any number of
 * handles, in one process or in several, may share a directory (on a local
 * filesystem: SQLite WAL and flock need one).  The module has no static mutable
 * state.
 *
 * Unless said otherwise, functions return 0 on success and -1 on failure with
 * *err filled (err may be NULL). */
#ifndef COIL_CACHE_H
#define COIL_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/cache_sha256.h"
#include "common/error.h"

typedef struct coil_cache coil_cache;

/* Length of a key in hex digits. */
#define CACHE_KEY_HEX 64

/* A path_out buffer of this size always fits an artifact path. */
#define CACHE_PATH_MAX 4096

/* 1 if key is exactly 64 characters of [0-9a-f], else 0 (NULL gives 0). */
int cache_key_valid(const char *key);

/* Open (creating as needed) the cache in dir; dir NULL means
 * $XDG_CACHE_HOME/coil, else $HOME/.cache/coil.  budget_bytes bounds the
 * total size of artifacts plus their graph texts; 0 means unlimited.
 * Reconciles the index with the files on disk (see above).  On success *out
 * is a handle the caller releases with cache_close(). */
int cache_open(const char *dir, uint64_t budget_bytes, coil_cache **out, coil_err *err);

/* Release a handle (NULL is accepted).  The directory and its entries stay. */
void cache_close(coil_cache *c);

/* The cache directory; owned by the handle, valid until cache_close(). */
const char *cache_dir(const coil_cache *c);

/* Look key up.  Returns 1 on a hit, with the artifact's path written into
 * path_out (cap bytes), 0 on a miss, -1 on error.  The graph text stored with
 * the entry is compared byte for byte with canon[0..canon_len); if it differs
 * the lookup is a miss and also counts as a collision, so a hit never hands
 * back code built from another graph.  A hit updates the entry's last-use
 * time; hits, misses and collisions are counted in the index (best effort:
 * when the index cannot be written, on a full disk say, the lookup still
 * answers).  The artifact's bytes are not rehashed here (see cache_verify()). */
int cache_lookup(coil_cache *c, const char *key, const char *canon, size_t canon_len,
		 char *path_out, size_t cap, coil_err *err);

/* Store the file src_path under key, with its canonical graph text and
 * optional metadata (meta_json: a JSON text or NULL).  Crash-safe: the bytes
 * go to an exclusive temp file in DIR/tmp, are fsynced, renamed into place
 * (the directory fsynced too), and only then is the index row written.  An
 * existing entry for key is replaced.  Then least-recently-used entries other
 * than this one are evicted until the total fits the budget; an entry that
 * alone exceeds the budget is not stored and the call fails.  On a full disk
 * (ENOSPC, SQLITE_FULL) it tries again after truncating the index's log,
 * then after evicting least-recently-used entries of twice its size.  On
 * failure no file and no row is left behind. */
int cache_store(coil_cache *c, const char *key, const char *src_path, const char *canon,
		size_t canon_len, const char *meta_json, coil_err *err);

/* cache_store() with the artifact given as len bytes at data. */
int cache_store_bytes(coil_cache *c, const char *key, const void *data, size_t len,
		      const char *canon, size_t canon_len, const char *meta_json, coil_err *err);

/* The metadata of key: returns 1 if present, 0 if absent, -1 on error.  On a
 * hit, fills whichever outputs are non-NULL: *meta_out a malloc'd copy of the
 * stored JSON text (NULL if it was stored without metadata; the caller frees
 * it), sha256_hex the artifact's SHA-256, *size the artifact's size in bytes. */
int cache_get_meta(coil_cache *c, const char *key, char **meta_out, char sha256_hex[65],
		   uint64_t *size, coil_err *err);

/* The paths key's artifact (DIR/objects/ab/<key>.so) and canonical graph text
 * (.graph) have inside the cache, whether or not the entry exists; no I/O.
 * Either output may be NULL; each needs cap bytes (CACHE_PATH_MAX always
 * fits).  Fails for an invalid key.  For readers that go by key alone (coild
 * serving artifacts, libcoil checking its local copy): pair it with
 * cache_get_meta() for presence, size and SHA-256. */
int cache_entry_paths(const coil_cache *c, const char *key, char *so_out, char *graph_out, size_t cap,
		      coil_err *err);

/* Remove key's row and files.  Removing an absent key succeeds. */
int cache_remove(coil_cache *c, const char *key, coil_err *err);

typedef struct {
	uint64_t entries;    /* rows in the index */
	uint64_t bytes;      /* artifacts plus graph texts, the quantity the budget bounds */
	uint64_t budget;     /* this handle's budget, 0 = unlimited */
	uint64_t hits;       /* the counters below persist in the index and are shared */
	uint64_t misses;     /* every lookup that did not hit, collisions included */
	uint64_t evictions;  /* entries removed to meet a budget */
	uint64_t collisions; /* lookups whose key matched but whose graph differed */
} cache_stats_t;

int cache_stats(coil_cache *c, cache_stats_t *out, coil_err *err);

/* Call cb once per entry, least recently used first.  size is the artifact's
 * size, last_used a Unix time in seconds, meta the JSON text or NULL; the
 * strings are valid during the call only.  A nonzero return from cb stops
 * the walk early (cache_list still returns 0).  cb must not call back into
 * this handle. */
typedef int (*cache_list_cb)(void *ud, const char *key, uint64_t size, int64_t last_used,
			     const char *meta);
int cache_list(coil_cache *c, cache_list_cb cb, void *ud, coil_err *err);

/* Evict least-recently-used entries until the total is <= budget (0 empties
 * the cache).  Does not change the handle's own budget. */
int cache_gc(coil_cache *c, uint64_t budget, coil_err *err);

/* On a full disk: truncate the index's write-ahead log, then evict
 * least-recently-used entries of at least bytes in total (stores do this by
 * themselves when a write fails with ENOSPC).  Returns how many entries were
 * evicted, or -1. */
int cache_make_room(coil_cache *c, uint64_t bytes, coil_err *err);

/* Bytes free for us on the cache's file system, -1 if unknown. */
int64_t cache_free_bytes(const coil_cache *c);

/* Check every indexed entry: both files present, sizes as recorded, and the
 * artifact's SHA-256 recomputed and compared.  cb (may be NULL) is called
 * once per bad entry with a one-line description; a nonzero return stops the
 * check.  *bad_count (may be NULL) receives the number of bad entries found.
 * cache_repair() does the same and removes each bad entry. */
typedef int (*cache_problem_cb)(void *ud, const char *key, const char *problem);
int cache_verify(coil_cache *c, cache_problem_cb cb, void *ud, int *bad_count, coil_err *err);
int cache_repair(coil_cache *c, cache_problem_cb cb, void *ud, int *bad_count, coil_err *err);

/* Bring index and files back in line, as cache_open() does; also deletes
 * lock files that nobody holds. */
int cache_reconcile(coil_cache *c, coil_err *err);

/* A private directory DIR/tmp/build-XXXXXX for building an artifact (path
 * into buf), flocked through *fd_out: a reconcile removes it only once its
 * holder is gone, so a crash mid-build leaves nothing behind for long.
 * cache_tmpdir_remove() deletes it with its contents and closes fd. */
int cache_tmpdir_create(coil_cache *c, char *buf, size_t cap, int *fd_out, coil_err *err);
void cache_tmpdir_remove(const char *path, int fd);

/* Per-key exclusive lock (flock on DIR/locks/<key>.lock), held until
 * cache_unlock_key(*fd_out).  It excludes every other locker of key, in this
 * process (another handle or another call) or another one, so that a key is
 * compiled once: lock, cache_lookup again, compile, cache_store, unlock.
 * cache_lock_key() blocks; cache_trylock_key() returns 1 at once if the key is
 * locked elsewhere (*fd_out then -1), 0 when it took the lock. */
int cache_lock_key(coil_cache *c, const char *key, int *fd_out, coil_err *err);
int cache_trylock_key(coil_cache *c, const char *key, int *fd_out, coil_err *err);
void cache_unlock_key(int fd);

#endif
