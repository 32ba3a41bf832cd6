#include "client/artifact.h"

#include <dlfcn.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

static int read_tensors(json_t *desc, const char *key, art_tensor **out, int *n, coil_err *err)
{
	json_t *arr = json_object_get(desc, key);
	if (!json_is_array(arr))
		return coil_errf(err, "artifact description lacks '%s'", key);
	*n = (int)json_array_size(arr);
	*out = calloc((size_t)*n + 1, sizeof **out);
	if (!*out)
		return coil_err_oom(err);
	for (int i = 0; i < *n; i++) {
		json_t *t = json_array_get(arr, (size_t)i);
		int dt = dtype_parse(json_string_value(json_object_get(t, "dtype")) ? json_string_value(json_object_get(t, "dtype")) : "");
		json_t *shape = json_object_get(t, "shape");
		if (dt < 0 || !json_is_array(shape) || json_array_size(shape) > COIL_MAX_RANK)
			return coil_errf(err, "artifact description: bad %s[%d]", key, i);
		(*out)[i].dtype = (coil_dtype)dt;
		(*out)[i].rank = (int)json_array_size(shape);
	}
	return 0;
}

void artifact_close(coil_artifact *a)
{
	if (!a)
		return;
	if (a->dl)
		dlclose(a->dl);
	free(a->inputs);
	free(a->params);
	free(a->outputs);
	free(a);
}

int artifact_open(const char *path, coil_artifact **out, coil_err *err)
{
	*out = NULL;
	coil_artifact *a = calloc(1, sizeof *a);
	if (!a)
		return coil_err_oom(err);
	json_t *desc = NULL;
	/* Artifacts use OpenMP: keep libgomp loaded for good, or closing the last
	 * artifact would unmap it under its idle worker threads. */
	if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE)) {
		coil_errf(err, "cannot load the OpenMP runtime (libgomp.so.1): %s", dlerror());
		goto fail;
	}
	a->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!a->dl) {
		coil_errf(err, "%s: cannot load: %s", path, dlerror());
		goto fail;
	}
#define SYM(field, name)                                                                   \
	if (!(*(void **)&a->field = dlsym(a->dl, name))) {                                 \
		coil_errf(err, "%s: not a coil artifact (no %s)", path, name);             \
		goto fail;                                                                 \
	}
	SYM(abi_version, "coil_abi_version")
	SYM(describe, "coil_artifact_describe")
	SYM(create, "coil_model_create")
	SYM(output_shape, "coil_model_output_shape")
	SYM(run, "coil_model_run")
	SYM(destroy, "coil_model_destroy")
	SYM(last_error, "coil_model_last_error")
#undef SYM
	if (a->abi_version() != COIL_ABI_VERSION) {
		coil_errf(err, "%s: artifact ABI version %d, this coil speaks %d", path, a->abi_version(), COIL_ABI_VERSION);
		goto fail;
	}
	errno = 0;
	desc = json_loads(a->describe(), 0, NULL);
	if (!desc && errno == ENOMEM) {
		coil_errf(err, "%s: out of memory reading the artifact's description", path);
		goto fail;
	}
	const char *tgt = json_string_value(json_object_get(desc, "target"));
	const char *hash = json_string_value(json_object_get(desc, "graph_hash"));
	if (!desc || !tgt || strlen(tgt) >= sizeof a->target) {
		coil_errf(err, "%s: artifact description is not valid", path);
		goto fail;
	}
	snprintf(a->target, sizeof a->target, "%s", tgt);
	snprintf(a->graph_hash, sizeof a->graph_hash, "%s", hash ? hash : "");
	if (!target_runs_here(a->target)) {
		coil_errf(err, "%s: built for target '%s', which this CPU does not support", path, a->target);
		goto fail;
	}
	if (read_tensors(desc, "inputs", &a->inputs, &a->ninputs, err) ||
	    read_tensors(desc, "params", &a->params, &a->nparams, err) ||
	    read_tensors(desc, "outputs", &a->outputs, &a->noutputs, err))
		goto fail;
	json_decref(desc);
	*out = a;
	return 0;
fail:
	json_decref(desc);
	artifact_close(a);
	return -1;
}
