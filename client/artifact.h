/* Loading a compiled artifact (include/coil/artifact.h) safely: dlopen it
 * local, check its ABI version, read its description and refuse it before any
 * of its code runs beyond describe() when this CPU lacks its target's
 * features (never a SIGILL). */
#ifndef COIL_CLIENT_ARTIFACT_H
#define COIL_CLIENT_ARTIFACT_H

#include <stdint.h>

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
} coil_artifact;

int artifact_open(const char *path, coil_artifact **out, coil_err *err);
void artifact_close(coil_artifact *a); /* accepts NULL */

#endif
