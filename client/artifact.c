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

int artifact_target_check(const char *what, const char *target, coil_err *err)
{
	coil_err e2;
	if (!target || !strcmp(target, "native") || !target_get(target, &e2))
		return coil_errc(err, COIL_E_UNSUPPORTED, "%s: unknown target '%.64s'; refusing to load it", what,
				 target ? target : "");
	const char *lack = target_missing(target);
	if (lack)
		return coil_errc(err, COIL_E_UNSUPPORTED,
				 "%s: built for target '%s', which needs %s: this CPU lacks it%s; refusing to load it", what,
				 target, lack, target_feature_masked(lack) ? " (COIL_CPU_MASK)" : "");
	return 0;
}

int artifact_peek_target(const void *bytes, size_t n, char target[64])
{
	static const char head[] = "{\"abi_version\": ", tkey[] = "\"target\": \"";
	const char *p = bytes, *end = p + n;
	for (const char *h; (h = memmem(p, (size_t)(end - p), head, sizeof head - 1)); p = h + 1) {
		const char *t = h + sizeof head - 1;
		while (t < end && *t >= '0' && *t <= '9')
			t++;
		if (end - t < 2 + (ptrdiff_t)sizeof tkey || t[0] != ',' || t[1] != ' ' ||
		    memcmp(t + 2, tkey, sizeof tkey - 1))
			continue;
		t += 2 + sizeof tkey - 1;
		size_t len = 0;
		while (t + len < end && len < 63 && t[len] != '"')
			len++;
		if (t + len >= end || t[len] != '"')
			continue;
		memcpy(target, t, len);
		target[len] = 0;
		return 0;
	}
	return -1;
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
	/* optional: artifacts built before the profile switch lack them */
	*(void **)&a->profile = dlsym(a->dl, "coil_model_profile");
	*(void **)&a->kernel_name = dlsym(a->dl, "coil_model_kernel_name");
	if (!a->profile || !a->kernel_name)
		a->profile = NULL, a->kernel_name = NULL;
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
	if (artifact_target_check(path, a->target, err))
		goto fail;
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
	return artifact_open_verified(path, NULL, out, err);
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

/* SHA-256 of the memfd's bytes, read from it after sealing, and the target
 * its description names ("" if none is found). */
static int sealed_sha256(int fd, char hex[65], char target[64], coil_err *err)
{
	struct stat st;
	target[0] = 0;
	if (fstat(fd, &st) != 0)
		return coil_errc(err, COIL_E_IO, "fstat: %s", strerror(errno));
	if (st.st_size == 0)
		return cache_sha256_bytes("", 0, hex, err);
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return coil_errc(err, COIL_E_RESOURCE, "mmap: %s", strerror(errno));
	int rc = cache_sha256_bytes(p, (size_t)st.st_size, hex, err);
	if (artifact_peek_target(p, (size_t)st.st_size, target))
		target[0] = 0;
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
	char actual[65], target[64];
	if (sealed_sha256(fd, actual, target, err) != 0) {
		close(fd);
		return coil_err_prefix(err, "%s", path);
	}
	if (sha256_hex && strcmp(actual, sha256_hex)) {
		close(fd);
		coil_errc(err, COIL_E_IO, "artifact %s: sha256 mismatch (expected %.64s, found %s), refusing to load it",
			  path, sha256_hex, actual);
		return -2;
	}
	/* Before dlopen runs a byte of it: the target its description names. */
	if (!target[0] || artifact_target_check(path, target, err)) {
		close(fd);
		if (!target[0])
			coil_err_input(err, "%s: not a coil artifact (no description found in its bytes); refusing to load it",
				       path);
		return -1;
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

/* ---- signature files ---- */

int artifact_sig_write(const char *so_path, const char *key, const char *sha256, const char *target,
		       const char *sig, coil_err *err)
{
	char path[CACHE_PATH_MAX + 8], tmp[CACHE_PATH_MAX + 32];
	snprintf(path, sizeof path, "%s.sig", so_path);
	snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:s}", "key", key, "sha256", sha256, "target", target,
			      "abi_version", COIL_ABI_VERSION, "signature", sig);
	char *text = o ? json_dumps(o, JSON_SORT_KEYS) : NULL;
	json_decref(o);
	if (!text)
		return coil_err_oom(err);
	FILE *f = fopen(tmp, "we");
	int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
	ok = f && fclose(f) == 0 && ok;
	free(text);
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		return coil_errc(err, COIL_E_IO, "%s: cannot write: %s", path, strerror(errno));
	}
	return 0;
}

int artifact_sig_read(const char *so_path, char key[65], char sha256[65], char target[64], char sig[SIGN_STR_MAX],
		      coil_err *err)
{
	char path[CACHE_PATH_MAX + 8];
	snprintf(path, sizeof path, "%s.sig", so_path);
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je);
	if (!o)
		return coil_err_input(err, "%s: trusted keys are configured and it has no readable signature file %s; "
					   "refusing it", so_path, path);
	const char *k = json_string_value(json_object_get(o, "key")), *h = json_string_value(json_object_get(o, "sha256"));
	const char *t = json_string_value(json_object_get(o, "target")), *s = json_string_value(json_object_get(o, "signature"));
	int ok = cache_key_valid(k) && cache_key_valid(h) && t && strlen(t) < 64 && (!s || strlen(s) < SIGN_STR_MAX);
	if (ok) {
		memcpy(key, k, 65);
		memcpy(sha256, h, 65);
		snprintf(target, 64, "%s", t);
		snprintf(sig, SIGN_STR_MAX, "%s", s ? s : "");
	}
	json_decref(o);
	return ok ? 0 : coil_err_input(err, "%s: malformed signature file; refusing it", path);
}
