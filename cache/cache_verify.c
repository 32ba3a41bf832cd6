/* Checking every entry against its files, and removing the bad ones.  The
 * hashing runs outside any transaction, so other processes keep working; a
 * bad entry is reported (and removed) only if its row is still the one that
 * was checked. */
#include "cache/cache_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
	char key[CACHE_KEY_HEX + 1];
	char sha[65];
	int64_t size, graph_size;
} row;

/* A snapshot of every row. */
static int read_rows(coil_cache *c, row **rows, size_t *n, coil_err *err)
{
	*rows = NULL;
	*n = 0;
	size_t cap = 0;
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st, "SELECT key, sha256, size, graph_size FROM entries ORDER BY key",
			     err) != 0)
		return -1;
	int rc, ret = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		const char *sha = (const char *)sqlite3_column_text(st, 1);
		if (!cache_key_valid(key))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			row *p = realloc(*rows, cap * sizeof **rows);
			if (!p) {
				ret = coil_err_oom(err);
				break;
			}
			*rows = p;
		}
		row *r = &(*rows)[(*n)++];
		memcpy(r->key, key, sizeof r->key);
		snprintf(r->sha, sizeof r->sha, "%s", sha ? sha : "");
		r->size = sqlite3_column_int64(st, 2);
		r->graph_size = sqlite3_column_int64(st, 3);
	}
	if (ret == 0 && rc != SQLITE_DONE)
		ret = cache_db_fail(c, "reading entries", err);
	sqlite3_finalize(st);
	if (ret != 0) {
		free(*rows);
		*rows = NULL;
	}
	return ret;
}

/* Describe what is wrong with r's files into problem ("" if nothing).
 * -1 only for errors that are not the entry's fault. */
static int check_row(coil_cache *c, const row *r, char *problem, size_t cap, coil_err *err)
{
	char so[PATH_MAX], graph[PATH_MAX], sha[65];
	struct stat st;
	problem[0] = '\0';
	if (cache_obj_path(c, r->key, ".so", so, sizeof so, err) != 0 ||
	    cache_obj_path(c, r->key, ".graph", graph, sizeof graph, err) != 0)
		return -1;
	if (stat(so, &st) != 0)
		snprintf(problem, cap, "artifact %s: %s", so, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		snprintf(problem, cap, "artifact %s is not a regular file", so);
	else if (st.st_size != r->size)
		snprintf(problem, cap, "artifact is %lld bytes, the index says %lld",
			 (long long)st.st_size, (long long)r->size);
	else if (cache_sha256_file(so, sha, NULL) != 0)
		snprintf(problem, cap, "artifact %s cannot be read", so);
	else if (strcmp(sha, r->sha) != 0)
		snprintf(problem, cap, "artifact sha256 is %s, the index says %s", sha, r->sha);
	else if (stat(graph, &st) != 0)
		snprintf(problem, cap, "graph text %s: %s", graph, strerror(errno));
	else if (!S_ISREG(st.st_mode) || st.st_size != r->graph_size)
		snprintf(problem, cap, "graph text is %lld bytes, the index says %lld",
			 (long long)st.st_size, (long long)r->graph_size);
	return 0;
}

/* Inside a transaction: is r's row still as it was read?  Then, if repair,
 * drop it.  1 if it was still there, 0 if it changed meanwhile. */
static int still_there(coil_cache *c, const row *r, int repair, coil_err *err)
{
	sqlite3_stmt *st;
	if (cache_db_prepare(c, &st,
			     "SELECT 1 FROM entries WHERE key = ?1 AND sha256 = ?2 AND size = ?3"
			     " AND graph_size = ?4",
			     err) != 0)
		return -1;
	sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, r->sha, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, r->size);
	sqlite3_bind_int64(st, 4, r->graph_size);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return cache_db_fail(c, "rereading an entry", err);
	if (rc == SQLITE_ROW && repair && cache_db_drop(c, r->key, err) != 0)
		return -1;
	return rc == SQLITE_ROW;
}

static int verify(coil_cache *c, int repair, cache_problem_cb cb, void *ud, int *bad_count,
		  coil_err *err)
{
	const char *fn = repair ? "cache_repair" : "cache_verify";
	if (bad_count)
		*bad_count = 0;
	row *rows;
	size_t n;
	if (read_rows(c, &rows, &n, err) != 0)
		return coil_err_prefix(err, "%s", fn);
	int ret = 0, bad = 0;
	for (size_t i = 0; i < n; i++) {
		char problem[PATH_MAX + 128];
		if ((ret = check_row(c, &rows[i], problem, sizeof problem, err)) != 0)
			break;
		if (!problem[0])
			continue;
		if ((ret = cache_db_begin(c, err)) != 0)
			break;
		int there = still_there(c, &rows[i], repair, err);
		if (there < 0 || cache_db_commit(c, err) != 0) {
			cache_db_rollback(c);
			ret = -1;
			break;
		}
		if (!there)
			continue;
		bad++;
		if (cb && cb(ud, rows[i].key, problem) != 0)
			break;
	}
	free(rows);
	if (bad_count)
		*bad_count = bad;
	return ret == 0 ? 0 : coil_err_prefix(err, "%s", fn);
}

int cache_verify(coil_cache *c, cache_problem_cb cb, void *ud, int *bad_count, coil_err *err)
{
	return verify(c, 0, cb, ud, bad_count, err);
}

int cache_repair(coil_cache *c, cache_problem_cb cb, void *ud, int *bad_count, coil_err *err)
{
	return verify(c, 1, cb, ud, bad_count, err);
}
