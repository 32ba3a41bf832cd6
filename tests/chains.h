/* Graphs made to break a compiler, shared by the suites that feed them to
 * codegen (test_codegen) and to a real coild (test_server). */
#ifndef COIL_TESTS_CHAINS_H
#define COIL_TESTS_CHAINS_H

#include <stdlib.h>
#include <string.h>

/* A chain of n nodes of one kind on x: f32[4, 4] (the JSON in a malloc'd
 * string): relu, transpose(0, 1), view to [16] and back, add(v, v), softmax. */
static inline char *chain_graph(const char *kind, int n, size_t *len)
{
	size_t cap = (size_t)n * 128 + 512, m = 0;
	char *b = malloc(cap);
	assert_non_null(b);
	m += (size_t)snprintf(b + m, cap - m, "{\"format\": \"coil-graph\", \"version\": 1, \"inputs\": [{\"name\": "
					     "\"v0\", \"dtype\": \"f32\", \"shape\": [4, 4]}], \"nodes\": [");
	for (int i = 1; i <= n; i++) {
		char args[96];
		if (!strcmp(kind, "relu"))
			snprintf(args, sizeof args, "\"v%d\"", i - 1);
		else if (!strcmp(kind, "transpose"))
			snprintf(args, sizeof args, "\"v%d\", 0, 1", i - 1);
		else if (!strcmp(kind, "view"))
			snprintf(args, sizeof args, "\"v%d\", %s", i - 1, i % 2 ? "[16]" : "[4, 4]");
		else if (!strcmp(kind, "add"))
			snprintf(args, sizeof args, "\"v%d\", \"v%d\"", i - 1, i - 1);
		else
			snprintf(args, sizeof args, "\"v%d\", -1", i - 1);
		const char *op = !strcmp(kind, "relu") ? "aten.relu.default" : !strcmp(kind, "transpose") ? "aten.transpose.int"
			       : !strcmp(kind, "view") ? "aten.view.default" : !strcmp(kind, "add") ? "aten.add.Tensor"
			       : "aten.softmax.int";
		m += (size_t)snprintf(b + m, cap - m, "%s{\"id\": \"n%d\", \"op\": \"%s\", \"args\": [%s], \"outputs\": [\"v%d\"]}",
				      i > 1 ? ", " : "", i, op, args, i);
	}
	int last = !strcmp(kind, "view") && n % 2 ? n - 1 : n; /* an output of shape [4, 4] */
	m += (size_t)snprintf(b + m, cap - m, "], \"outputs\": [\"v%d\"]}", last);
	assert_true(m < cap);
	*len = m;
	return b;
}

#endif
