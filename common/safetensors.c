/* safetensors: 8-byte little-endian header length, a JSON header mapping names
 * to {dtype, shape, data_offsets}, then the raw little-endian bytes. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tensor.h"

#define ST_MAX_HEADER (100u << 20)

int64_t tensor_numel(const coil_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->shape[i];
	return n;
}

size_t tensor_bytes(const coil_tensor *t)
{
	return (size_t)tensor_numel(t) * dtype_size(t->dtype);
}

void st_close(st_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->n; i++)
		free(f->names[i]);
	free(f->names);
	free(f->tensors);
	free(f->blob);
	memset(f, 0, sizeof *f);
}

const coil_tensor *st_find(const st_file *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->names[i], name))
			return &f->tensors[i];
	return NULL;
}

typedef struct span {
	uint64_t b, e;
} span;

static int span_cmp(const void *a, const void *b)
{
	const span *x = a, *y = b;
	return x->b < y->b ? -1 : x->b > y->b;
}

int st_parse(void *blob, size_t size, st_file *out, coil_err *err)
{
	memset(out, 0, sizeof *out);
	out->blob = blob;
	out->size = size;
	unsigned char *p = blob;
	span *spans = NULL;
	json_t *root = NULL;
	if (size < 8) {
		coil_err_input(err, "safetensors: file shorter than its 8-byte header length");
		goto fail;
	}
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | p[i];
	if (hl > ST_MAX_HEADER || hl > size - 8) {
		coil_err_input(err, "safetensors: header length %llu is invalid", (unsigned long long)hl);
		goto fail;
	}
	json_error_t je;
	root = json_loadb((const char *)p + 8, hl, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(root)) {
		coil_err_input(err, "safetensors: header is not a JSON object (%s)", root ? "wrong type" : je.text);
		goto fail;
	}
	size_t cnt = json_object_size(root);
	out->names = calloc(cnt + 1, sizeof(char *));
	out->tensors = calloc(cnt + 1, sizeof(coil_tensor));
	spans = calloc(cnt + 1, sizeof(span));
	if (!out->names || !out->tensors || !spans) {
		coil_err_oom(err);
		goto fail;
	}
	uint64_t data_len = size - 8 - hl;
	unsigned char *data = p + 8 + hl;
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v)
	{
		if (!strcmp(key, "__metadata__"))
			continue;
		coil_tensor *t = &out->tensors[out->n];
		json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
		       *jo = json_object_get(v, "data_offsets");
		int dt = json_is_string(jd) ? dtype_parse_st(json_string_value(jd)) : -1;
		if (dt < 0) {
			coil_err_input(err, "safetensors: tensor '%.100s': unsupported dtype", key);
			goto fail;
		}
		t->dtype = (coil_dtype)dt;
		if (!json_is_array(js) || json_array_size(js) > COIL_MAX_RANK) {
			coil_err_input(err, "safetensors: tensor '%.100s': bad shape", key);
			goto fail;
		}
		t->rank = (int)json_array_size(js);
		uint64_t bytes = dtype_size(t->dtype);
		for (int i = 0; i < t->rank; i++) {
			json_t *d = json_array_get(js, (size_t)i);
			if (!json_is_integer(d) || json_integer_value(d) < 0 ||
			    __builtin_mul_overflow(bytes, (uint64_t)json_integer_value(d), &bytes)) {
				coil_err_input(err, "safetensors: tensor '%.100s': bad shape", key);
				goto fail;
			}
			t->shape[i] = json_integer_value(d);
		}
		json_t *b = json_array_get(jo, 0), *e = json_array_get(jo, 1);
		if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
		    json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b) ||
		    (uint64_t)json_integer_value(e) > data_len ||
		    (uint64_t)(json_integer_value(e) - json_integer_value(b)) != bytes) {
			coil_err_input(err, "safetensors: tensor '%.100s': data_offsets do not match its shape and the file",
				  key);
			goto fail;
		}
		spans[out->n] = (span){(uint64_t)json_integer_value(b), (uint64_t)json_integer_value(e)};
		t->data = data + json_integer_value(b);
		if (!(out->names[out->n] = strdup(key))) {
			coil_err_oom(err);
			goto fail;
		}
		out->n++;
	}
	qsort(spans, (size_t)out->n, sizeof *spans, span_cmp);
	for (int i = 1; i < out->n; i++)
		if (spans[i].b < spans[i - 1].e) {
			coil_err_input(err, "safetensors: tensors overlap");
			goto fail;
		}
	free(spans);
	json_decref(root);
	return 0;
fail:
	free(spans);
	json_decref(root);
	st_close(out);
	return -1;
}

int st_open(const char *path, st_file *out, coil_err *err)
{
	memset(out, 0, sizeof *out);
	FILE *f = fopen(path, "rb");
	if (!f)
		return coil_errc(err, COIL_E_IO, "%s: %s", path, strerror(errno));
	void *blob = NULL;
	long sz = -1;
	if (fseek(f, 0, SEEK_END) == 0)
		sz = ftell(f);
	if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return coil_errc(err, COIL_E_IO, "%s: cannot read", path);
	}
	blob = malloc((size_t)sz + 1);
	if (!blob || fread(blob, 1, (size_t)sz, f) != (size_t)sz) {
		free(blob);
		fclose(f);
		return coil_errc(err, COIL_E_IO, "%s: cannot read", path);
	}
	fclose(f);
	if (st_parse(blob, (size_t)sz, out, err))
		return coil_err_prefix(err, "%s", path);
	return 0;
}

static int cmp_idx(const void *a, const void *b, void *names)
{
	const char *const *nm = names;
	return strcmp(nm[*(const int *)a], nm[*(const int *)b]);
}

int st_write(const char *path, int n, const char *const *names, const coil_tensor *ts, coil_err *err)
{
	int *order = malloc((size_t)(n ? n : 1) * sizeof(int));
	json_t *hdr = json_object();
	char *txt = NULL;
	FILE *f = NULL;
	int rc = -1;
	if (!order || !hdr) {
		coil_err_oom(err);
		goto out;
	}
	for (int i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, (size_t)n, sizeof(int), cmp_idx, (void *)names);
	uint64_t off = 0;
	for (int k = 0; k < n; k++) {
		const coil_tensor *t = &ts[order[k]];
		json_t *shape = json_array();
		for (int i = 0; i < t->rank; i++)
			json_array_append_new(shape, json_integer(t->shape[i]));
		uint64_t b = tensor_bytes(t);
		json_object_set_new(hdr, names[order[k]],
				    json_pack("{s:s,s:o,s:[I,I]}", "dtype", dtype_st_name(t->dtype), "shape", shape,
					      "data_offsets", (json_int_t)off, (json_int_t)(off + b)));
		off += b;
	}
	txt = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
	if (!txt) {
		coil_err_oom(err);
		goto out;
	}
	size_t hl = strlen(txt), pad = (8 - hl % 8) % 8;
	unsigned char len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((hl + pad) >> (8 * i));
	f = fopen(path, "wb");
	if (!f) {
		coil_errc(err, COIL_E_IO, "%s: %s", path, strerror(errno));
		goto out;
	}
	int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(txt, 1, hl, f) == hl && fwrite("        ", 1, pad, f) == pad;
	for (int k = 0; ok && k < n; k++) {
		size_t b = tensor_bytes(&ts[order[k]]);
		ok = fwrite(ts[order[k]].data, 1, b, f) == b;
	}
	if (fclose(f) != 0 || !ok) {
		coil_errc(err, COIL_E_IO, "%s: write failed", path);
		goto out;
	}
	rc = 0;
out:
	free(order);
	free(txt);
	json_decref(hdr);
	return rc;
}
