/* Concrete tensors (row-major, contiguous) and their safetensors files. */
#ifndef COIL_TENSOR_H
#define COIL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "common/dim.h"
#include "common/dtype.h"
#include "common/error.h"

typedef struct coil_tensor {
	coil_dtype dtype;
	int rank;
	int64_t shape[COIL_MAX_RANK];
	void *data; /* numel * dtype_size bytes */
} coil_tensor;

int64_t tensor_numel(const coil_tensor *t);
size_t tensor_bytes(const coil_tensor *t);

/* A safetensors file in memory: names, tensors pointing into the file's bytes. */
typedef struct st_file {
	int n;
	char **names;
	coil_tensor *tensors;
	void *blob; /* the whole file */
	size_t size;
} st_file;

/* Reads and validates a file (header, dtypes, offsets inside the data, no
 * overlaps).  Free with st_close. */
int st_open(const char *path, st_file *out, coil_err *err);
int st_parse(void *blob, size_t size, st_file *out, coil_err *err); /* takes blob (malloc'd) */
void st_close(st_file *f);
const coil_tensor *st_find(const st_file *f, const char *name);
/* Writes n named tensors, sorted by name as the format recommends. */
int st_write(const char *path, int n, const char *const *names, const coil_tensor *ts, coil_err *err);

#endif
