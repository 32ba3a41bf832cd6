/* SHA-256 helpers (OpenSSL libcrypto, EVP), shared by the cache and anyone
 * else who needs a digest as 64 lowercase hex digits plus a NUL. */
#ifndef COIL_CACHE_SHA256_H
#define COIL_CACHE_SHA256_H

#include <stddef.h>

#include "common/error.h"

/* SHA-256 of the file at path into hex (64 lowercase hex digits + NUL).
 * Returns 0, or -1 with err filled. */
int cache_sha256_file(const char *path, char hex[65], coil_err *err);

/* SHA-256 of len bytes at data into hex.  Returns 0, or -1 with err filled. */
int cache_sha256_bytes(const void *data, size_t len, char hex[65], coil_err *err);

/* Incremental form, for code that hashes while it copies. */
typedef struct cache_sha256 cache_sha256;
/* A new context, or NULL with err filled; free with cache_sha256_free(). */
cache_sha256 *cache_sha256_new(coil_err *err);
int cache_sha256_update(cache_sha256 *h, const void *data, size_t len, coil_err *err);
/* Write the digest into hex; the context may not be updated afterwards. */
int cache_sha256_final(cache_sha256 *h, char hex[65], coil_err *err);
void cache_sha256_free(cache_sha256 *h);

#endif
