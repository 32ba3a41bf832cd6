/* The fuzz targets' entry points.  Each tests/fuzz/fuzz_NAME.c defines
 * fuzz_NAME(data, size), which runs one input through the code under test
 * and abort()s when an invariant breaks.  Built with clang and
 * -DCOIL_LIBFUZZER (make fuzz) it is also LLVMFuzzerTestOneInput; built with
 * gcc it is linked into tests/test_fuzz_replay.c, which replays the corpus
 * in tests/fuzz/corpus/NAME and the regressions in tests/fuzz/regress/NAME
 * (every crash the fuzzer found) on every `make test`. */
#ifndef COIL_TESTS_FUZZ_H
#define COIL_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int fuzz_graph(const uint8_t *data, size_t size);
int fuzz_http(const uint8_t *data, size_t size);
int fuzz_safetensors(const uint8_t *data, size_t size);

/* An invariant that must hold for every input. */
#define FUZZ_CHECK(cond)                                                                             \
	do {                                                                                         \
		if (!(cond)) {                                                                       \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                     \
		}                                                                                    \
	} while (0)

#ifdef COIL_LIBFUZZER
#define FUZZ_ENTRY(fn)                                                    \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);     \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)      \
	{                                                                 \
		fn(data, size);                                           \
		return 0;                                                 \
	}
#else
#define FUZZ_ENTRY(fn)
#endif

#endif
