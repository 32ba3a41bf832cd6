/* Loading a compiled artifact (include/coil/artifact.h) safely: dlopen it
 * local, check its ABI version, read its description and refuse it before any
 * of its code runs beyond describe() when this CPU lacks its target's
 * features (never a SIGILL).  With its expected SHA-256, the bytes loaded are
 * the bytes checked: a sealed copy in memory, hashed, then loaded. */
#ifndef COIL_CLIENT_ARTIFACT_H
#define COIL_CLIENT_ARTIFACT_H

#include <stdint.h>

#include "cache/cache.h"
#include "coil/artifact.h"
#include "common/dim.h"
#include "common/dtype.h"
#include "common/error.h"

typedef struct art_tensor {
	coil_dtype dtype;
	int rank;
} art_tensor;

typedef struct coil_artifact {
	void *dl;
	int (*abi_version)(void);
	const char *(*describe)(void);
	int (*create)(const void *const *, int, int, coil_model **);
	int (*output_shape)(coil_model *, const int64_t *const *, int, int64_t *);
	int (*run)(coil_model *, const void *const *, const int64_t *const *, void *const *);
	void (*destroy)(coil_model *);
	const char *(*last_error)(void);
	char target[64];
	char graph_hash[65];
	int ninputs, nparams, noutputs;
	art_tensor *inputs, *params, *outputs;
	int memfd;        /* the sealed copy it was loaded from, or -1 */
} coil_artifact;

/* Loads path as it is on disk, unverified (an artifact the user names). */
int artifact_open(const char *path, coil_artifact **out, coil_err *err);
/* Loads path's bytes only if their SHA-256 is sha256_hex (64 lowercase hex
 * digits): they are copied into a memfd, sealed (no write, no resize), hashed
 * there and loaded from there (dlopen of /proc/self/fd/N), so no window is
 * left between the check and the load.  -2 (with err, COIL_E_IO, "sha256
 * mismatch ... refusing to load it") when the digest differs, -1 on other
 * failures. */
int artifact_open_verified(const char *path, const char *sha256_hex, coil_artifact **out, coil_err *err);
/* artifact_open_verified() of key's artifact in cache c (path and sha256_hex
 * as cache_lookup and cache_get_meta give them); on a mismatch the entry is
 * also removed from c, so that the next compile builds it again. */
int artifact_open_cached(coil_cache *c, const char *key, const char *path, const char *sha256_hex,
			 coil_artifact **out, coil_err *err);
void artifact_close(coil_artifact *a); /* accepts NULL */

#endif
