/* Loading a compiled artifact (include/coil/artifact.h) safely: dlopen it
 * local, check its ABI version, read its description and refuse it before any
 * of its code runs beyond describe() when this CPU lacks its target's
 * features (never a SIGILL).  With its expected SHA-256, the bytes loaded are
 * the bytes checked: a sealed copy in memory, hashed, then loaded. */
#ifndef COIL_CLIENT_ARTIFACT_H
#define COIL_CLIENT_ARTIFACT_H

#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cache/sign.h"
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
	int (*profile)(coil_model *, double *);   /* the profile switch (emit_abi.c); NULL in older artifacts */
	const char *(*kernel_name)(int);
	char target[64];
	char graph_hash[65];
	int ninputs, nparams, noutputs;
	art_tensor *inputs, *params, *outputs;
	int memfd;        /* the sealed copy it was loaded from, or -1 */
} coil_artifact;

/* Loads path's bytes, unverified (an artifact the user names): as
 * artifact_open_verified without a digest. */
int artifact_open(const char *path, coil_artifact **out, coil_err *err);
/* 0 when this CPU runs target (known, not "native", every feature present);
 * else -1 with err (COIL_E_UNSUPPORTED) naming what (a path, a key), the
 * target and the first missing feature. */
int artifact_target_check(const char *what, const char *target, coil_err *err);
/* The target named by the description (coil_artifact_describe's static JSON)
 * found in an artifact's bytes, read without loading them; -1 if none. */
int artifact_peek_target(const void *bytes, size_t n, char target[64]);
/* Loads path's bytes only if their SHA-256 is sha256_hex (64 lowercase hex
 * digits; NULL: any): they are copied into a memfd, sealed (no write, no
 * resize), hashed there, the target their description names checked
 * against this CPU (artifact_target_check), and loaded from there (dlopen of
 * /proc/self/fd/N), so no window is left between the checks and the load.  -2 (with err, COIL_E_IO, "sha256
 * mismatch ... refusing to load it") when the digest differs, -1 on other
 * failures. */
int artifact_open_verified(const char *path, const char *sha256_hex, coil_artifact **out, coil_err *err);
/* artifact_open_verified() of key's artifact in cache c (path and sha256_hex
 * as cache_lookup and cache_get_meta give them); on a mismatch the entry is
 * also removed from c, so that the next compile builds it again. */
int artifact_open_cached(coil_cache *c, const char *key, const char *path, const char *sha256_hex,
			 coil_artifact **out, coil_err *err);
void artifact_close(coil_artifact *a); /* accepts NULL */

/* The signature file of an artifact copied out of a cache, SO_PATH.sig: JSON
 * {"key", "sha256", "target", "abi_version", "signature"}, what a trusted
 * key signed (cache/sign.h).  read: -1 with err when absent or malformed. */
int artifact_sig_write(const char *so_path, const char *key, const char *sha256, const char *target,
		       const char *sig, coil_err *err);
int artifact_sig_read(const char *so_path, char key[65], char sha256[65], char target[64], char sig[SIGN_STR_MAX],
		      coil_err *err);

#endif
