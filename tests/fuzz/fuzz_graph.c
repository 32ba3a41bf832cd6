/* Fuzz target: the graph loader, validator and shape inference
 * (graph_parse), then canonical text and hash.  Invariants: a rejected
 * graph comes with a one-line message; an accepted one has a canonical text
 * that parses again to the same hash (canonicalization is a fixed point, or
 * the cache key would drift). */
#include <string.h>

#include "common/graph.h"
#include "tests/fuzz/fuzz.h"

int fuzz_graph(const uint8_t *data, size_t size)
{
	coil_err err = {0};
	coil_graph *g = graph_parse((const char *)data, size, &err);
	if (!g) {
		FUZZ_CHECK(err.msg[0] && !strchr(err.msg, '\n'));
		return 0;
	}
	size_t n = 0;
	char h1[65], h2[65];
	const char *canon = graph_canonical(g, &n, &err);
	FUZZ_CHECK(canon && n > 0);
	FUZZ_CHECK(graph_hash(g, h1, &err) == 0);
	coil_graph *g2 = graph_parse(canon, n, &err);
	if (!g2)
		fprintf(stderr, "canonical text does not parse: %s\n%.*s\n", err.msg, (int)n, canon);
	FUZZ_CHECK(g2 != NULL);
	FUZZ_CHECK(graph_hash(g2, h2, &err) == 0);
	FUZZ_CHECK(strcmp(h1, h2) == 0);
	FUZZ_CHECK(g2->ninputs == g->ninputs && g2->nparams == g->nparams && g2->noutputs == g->noutputs);
	graph_free(g2);
	graph_free(g);
	return 0;
}

FUZZ_ENTRY(fuzz_graph)
