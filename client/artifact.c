#include "client/artifact.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The name a sealed copy is loaded under: /proc/self/fd/N. */
static void fd_path(int fd, char *buf, size_t cap)
{
	snprintf(buf, cap, "/proc/self/fd/%d", fd);
}

void artifact_close(coil_artifact *a)
{
	if (!a)
		return;
	if (a->dl)
		dlclose(a->dl);
	if (a->memfd >= 0) {
		/* dlopen finds a loaded object by name first: while one stays
		 * loaded under /proc/self/fd/N (one that cannot be unloaded), N
		 * must never name another copy, so its descriptor stays open. */
		char name[64];
		fd_path(a->memfd, name, sizeof name);
		void *still = a->dl ? dlopen(name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
		if (still)
			dlclose(still);
		else
			close(a->memfd);
	}
	free(a->inputs);
	free(a->params);
	free(a->outputs);
	free(a);
}

/* dlopen load_path (path in messages), memfd the sealed copy or -1; the
 * symbols, the ABI version, the description and the target checked. */
static int open_as(const char *load_path, const char *path, int memfd, coil_artifact **out, coil_err *err)
{
	*out = NULL;
	coil_artifact *a = calloc(1, sizeof *a);
	if (!a) {
		if (memfd >= 0)
			close(memfd);
		return coil_err_oom(err);
	}
	a->memfd = memfd;
	json_t *desc = NULL;
	/* Artifacts use OpenMP: keep libgomp loaded for good, or closing the last
	 * artifact would unmap it under its idle worker threads. */
	if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE)) {
		coil_errf(err, "cannot load the OpenMP runtime (libgomp.so.1): %s", dlerror());
		goto fail;
	}
	a->dl = dlopen(load_path, RTLD_NOW | RTLD_LOCAL);
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

int artifact_open(const char *path, coil_artifact **out, coil_err *err)
{
	return open_as(path, path, -1, out, err);
}

/* Copies in into fd, a memfd, then seals it: nothing can change its bytes
 * or its size from then on. */
static int copy_sealed(int in, int fd)
{
	char buf[16384];
	ssize_t n;
	while ((n = read(in, buf, sizeof buf)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));
			if (w < 0 && errno != EINTR)
				return -1;
			off += w > 0 ? w : 0;
		}
	}
	return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
}

/* SHA-256 of the memfd's bytes, read from it after sealing. */
static int sealed_sha256(int fd, char hex[65], coil_err *err)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return coil_errc(err, COIL_E_IO, "fstat: %s", strerror(errno));
	if (st.st_size == 0)
		return cache_sha256_bytes("", 0, hex, err);
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return coil_errc(err, COIL_E_RESOURCE, "mmap: %s", strerror(errno));
	int rc = cache_sha256_bytes(p, (size_t)st.st_size, hex, err);
	munmap(p, (size_t)st.st_size);
	return rc;
}

int artifact_open_verified(const char *path, const char *sha256_hex, coil_artifact **out, coil_err *err)
{
	*out = NULL;
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return coil_errc(err, COIL_E_IO, "%s: cannot open: %s", path, strerror(errno));
	int fd = memfd_create("coil-artifact", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int e = fd < 0 || copy_sealed(in, fd) != 0 ? errno : 0;
	close(in);
	if (e) {
		if (fd >= 0)
			close(fd);
		return coil_errc(err, e == ENOMEM ? COIL_E_RESOURCE : COIL_E_IO, "%s: cannot copy into memory: %s", path,
				 strerror(e));
	}
	char actual[65];
	if (sealed_sha256(fd, actual, err) != 0) {
		close(fd);
		return coil_err_prefix(err, "%s", path);
	}
	if (strcmp(actual, sha256_hex)) {
		close(fd);
		coil_errc(err, COIL_E_IO, "artifact %s: sha256 mismatch (expected %.64s, found %s), refusing to load it",
			  path, sha256_hex, actual);
		return -2;
	}
	char name[64];
	fd_path(fd, name, sizeof name);
	return open_as(name, path, fd, out, err);
}

int artifact_open_cached(coil_cache *c, const char *key, const char *path, const char *sha256_hex,
			 coil_artifact **out, coil_err *err)
{
	int rc = artifact_open_verified(path, sha256_hex, out, err);
	if (rc != -2)
		return rc;
	coil_err e2 = {0};
	if (cache_remove(c, key, &e2) == 0 && err)
		snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
			 "; removed it from the cache: compile again");
	return rc;
}
