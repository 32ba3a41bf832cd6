/* `coil compile`: graph JSON -> shared object. */
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"

int codegen_cli(int argc, char **argv)
{
	codegen_opts o = {0};
	const char *path = NULL, *out = NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strncmp(a, "--dump-after=", 13))
			o.dump_after = a + 13;
		else if ((!strcmp(a, "--target") || !strcmp(a, "-t")) && i + 1 < argc)
			o.target = argv[++i];
		else if (!strncmp(a, "--target=", 9))
			o.target = a + 9;
		else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(a, "--emit-c") && i + 1 < argc)
			o.keep_c = argv[++i];
		else if (a[0] == '-' && a[1])
			return fprintf(stderr, "coil: compile: unknown option '%s'\n", a), 2;
		else if (!path)
			path = a;
		else
			return fprintf(stderr, "coil: compile: too many arguments\n"), 2;
	}
	if (!path)
		return fprintf(stderr, "coil: usage: coil compile GRAPH.json [--target T] [-o m.so] [--dump-after=PASS] [--emit-c F|DIR]\n"), 2;
	coil_err err = {0};
	coil_graph *g = graph_load_file(path, &err);
	if (!g)
		return fprintf(stderr, "coil: %s: %s\n", path, err.msg), 1;
	codegen_result res;
	if (!out && !o.dump_after && !o.keep_c)
		out = "model.so";
	int rc = codegen_compile(g, &o, out, &res, &err);
	graph_free(g);
	if (rc)
		return fprintf(stderr, "coil: compile: %s\n", err.msg), 1;
	if (out)
		fprintf(stderr, "coil: wrote %s (%d kernels in %d functions, %zu bytes of C in %d unit%s, target %s, arena %s bytes, cc %.2fs)\n",
			out, res.nkernels, res.nfuncs, res.c_bytes, res.nunits, res.nunits == 1 ? "" : "s", res.target,
			res.arena_bytes, res.compile_s);
	return 0;
}
