/* Fuzz target: the safetensors reader (weights and inputs come from users).
 * Invariants: a rejected file has a message; an accepted one's tensors lie
 * inside the file. */
#include <string.h>

#include "common/tensor.h"
#include "tests/fuzz/fuzz.h"

int fuzz_safetensors(const uint8_t *data, size_t size)
{
	void *blob = malloc(size ? size : 1);
	if (!blob)
		return 0;
	memcpy(blob, data, size);
	st_file f;
	coil_err err = {0};
	if (st_parse(blob, size, &f, &err) != 0) { /* takes blob either way */
		FUZZ_CHECK(err.msg[0]);
		return 0;
	}
	for (int i = 0; i < f.n; i++) {
		const coil_tensor *t = &f.tensors[i];
		const char *lo = (const char *)f.blob, *p = (const char *)t->data;
		size_t bytes = tensor_bytes(t);
		FUZZ_CHECK(bytes == 0 || (p >= lo && p + bytes <= lo + f.size));
		FUZZ_CHECK(st_find(&f, f.names[i]) != NULL);
	}
	st_close(&f);
	return 0;
}

FUZZ_ENTRY(fuzz_safetensors)
