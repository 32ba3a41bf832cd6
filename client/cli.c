/* coil: the command-line tool.  Each command is a function in the table at the
 * bottom; errors are one line on stderr and a non-zero exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/graph.h"
#include "common/interp.h"
#include "common/tensor.h"

static const char *prog = "coil";

static int fail(const char *what, const coil_err *err)
{
	fprintf(stderr, "%s: %s%s%s\n", prog, what ? what : "", what ? ": " : "", err->msg);
	return 1;
}

static int usage_err(const char *msg)
{
	fprintf(stderr, "%s: %s (see 'coil help')\n", prog, msg);
	return 2;
}

/* Options: --name value pairs and positional arguments. */
typedef struct opts {
	const char *pos[8];
	int npos;
	const char *weights, *inputs, *out;
	int ops, canonical;
} opts;

static int parse_opts(int argc, char **argv, opts *o)
{
	memset(o, 0, sizeof *o);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char **slot = NULL;
		if (!strcmp(a, "--weights") || !strcmp(a, "-w"))
			slot = &o->weights;
		else if (!strcmp(a, "--inputs") || !strcmp(a, "-i"))
			slot = &o->inputs;
		else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
			slot = &o->out;
		else if (!strcmp(a, "--ops"))
			o->ops = 1;
		else if (!strcmp(a, "--canonical"))
			o->canonical = 1;
		else if (a[0] == '-' && a[1])
			return fprintf(stderr, "%s: unknown option '%s'\n", prog, a), -1;
		else if (o->npos < 8)
			o->pos[o->npos++] = a;
		else
			return fprintf(stderr, "%s: too many arguments\n", prog), -1;
		if (slot) {
			if (i + 1 >= argc)
				return fprintf(stderr, "%s: option '%s' needs a value\n", prog, a), -1;
			*slot = argv[++i];
		}
	}
	return 0;
}

static coil_graph *load(const char *path)
{
	coil_err err = {{0}};
	coil_graph *g = graph_load_file(path, &err);
	if (!g)
		fail(path, &err);
	return g;
}

static int cmd_validate(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil validate GRAPH.json");
	coil_graph *g = load(o->pos[0]);
	if (!g)
		return 1;
	printf("ok: %d inputs, %d params, %d nodes, %d outputs\n", g->ninputs, g->nparams, g->nnodes, g->noutputs);
	graph_free(g);
	return 0;
}

static int cmd_hash(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil hash [--canonical] GRAPH.json");
	coil_graph *g = load(o->pos[0]);
	if (!g)
		return 1;
	coil_err err = {{0}};
	char hex[65];
	int rc = 0;
	if (o->canonical) {
		size_t len;
		const char *txt = graph_canonical(g, &len, &err);
		if (!txt)
			rc = fail(o->pos[0], &err);
		else
			printf("%s\n", txt);
	} else if (graph_hash(g, hex, &err)) {
		rc = fail(o->pos[0], &err);
	} else {
		printf("%s\n", hex);
	}
	graph_free(g);
	return rc;
}

static void print_value(coil_graph *g, const char *role, const coil_value *v)
{
	char buf[512];
	printf("%-7s %-40s %-5s %s\n", role, v->name ? v->name : "-", dtype_name(v->dtype),
	       shape_format(v->shape, v->rank, &g->syms, buf, sizeof buf));
}

static int cmd_info(opts *o)
{
	if (o->ops) {
		for (int op = 0; op < COIL_NOPS; op++) {
			const op_info *oi = op_get((coil_op)op);
			/* names and schemas are compile-time ASCII without quotes */
			printf("{\"name\":\"%s\",\"schema\":\"%s\",\"results\":%d}\n", oi->name, oi->schema, oi->nres);
		}
		return 0;
	}
	if (o->npos != 1)
		return usage_err("usage: coil info GRAPH.json | coil info --ops");
	coil_graph *g = load(o->pos[0]);
	if (!g)
		return 1;
	for (int i = 0; i < g->ninputs; i++)
		print_value(g, "input", &g->vals[g->inputs[i]]);
	int64_t pbytes = 0;
	for (int i = 0; i < g->nparams; i++) {
		coil_value *v = &g->vals[g->params[i]];
		int64_t b = (int64_t)dtype_size(v->dtype);
		for (int d = 0; d < v->rank; d++)
			b *= dim_min(&v->shape[d]);
		pbytes += b;
	}
	for (int i = 0; i < g->noutputs; i++) {
		coil_value *v = &g->vals[g->outputs[i]];
		char role[32];
		snprintf(role, sizeof role, "output%d", i);
		print_value(g, role, v);
	}
	printf("params  %d tensors, %lld bytes\n", g->nparams, (long long)pbytes);
	int count[COIL_NOPS] = {0};
	for (int i = 0; i < g->nnodes; i++)
		count[g->nodes[i].op]++;
	printf("nodes   %d\n", g->nnodes);
	for (int op = 0; op < COIL_NOPS; op++)
		if (count[op])
			printf("  %-40s %d\n", op_name((coil_op)op), count[op]);
	graph_free(g);
	return 0;
}

/* Binds each declared value of list (inputs or params) from a safetensors file. */
static int bind_list(coil_graph *g, const int *list, int n, const st_file *f, const char *what, coil_tensor *out,
		     coil_err *err)
{
	for (int i = 0; i < n; i++) {
		const coil_value *v = &g->vals[list[i]];
		const coil_tensor *t = f ? st_find(f, v->name) : NULL;
		if (!t)
			return coil_errf(err, "%s '%s' is missing from the %s file", what, v->name, what);
		out[i] = *t;
	}
	return 0;
}

static int cmd_eval(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil eval GRAPH.json --weights W.safetensors --inputs I.safetensors -o OUT.safetensors");
	coil_graph *g = load(o->pos[0]);
	if (!g)
		return 1;
	coil_err err = {{0}};
	st_file wf = {0}, inf = {0};
	coil_tensor *ins = calloc((size_t)g->ninputs + 1, sizeof *ins), *ps = calloc((size_t)g->nparams + 1, sizeof *ps);
	coil_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
	int rc = 1;
	if (!ins || !ps || !outs) {
		coil_errf(&err, "out of memory");
		goto out;
	}
	if ((o->weights && st_open(o->weights, &wf, &err)) || (o->inputs && st_open(o->inputs, &inf, &err)))
		goto out;
	if (bind_list(g, g->inputs, g->ninputs, o->inputs ? &inf : NULL, "input", ins, &err) ||
	    bind_list(g, g->params, g->nparams, o->weights ? &wf : NULL, "param", ps, &err))
		goto out;
	if (interp_run(g, ins, ps, outs, &err))
		goto out;
	if (o->out) {
		char **names = calloc((size_t)g->noutputs, sizeof(char *));
		char(*buf)[24] = calloc((size_t)g->noutputs, 24);
		if (!names || !buf) {
			free(names);
			free(buf);
			coil_errf(&err, "out of memory");
			goto out;
		}
		for (int i = 0; i < g->noutputs; i++) {
			snprintf(buf[i], 24, "output%d", i);
			names[i] = buf[i];
		}
		int wrc = st_write(o->out, g->noutputs, (const char *const *)names, outs, &err);
		free(names);
		free(buf);
		if (wrc)
			goto out;
	} else {
		for (int i = 0; i < g->noutputs; i++) {
			printf("output%d %s [", i, dtype_name(outs[i].dtype));
			for (int d = 0; d < outs[i].rank; d++)
				printf("%s%lld", d ? ", " : "", (long long)outs[i].shape[d]);
			printf("]:");
			int64_t n = tensor_numel(&outs[i]);
			for (int64_t e = 0; e < n && e < 8; e++)
				printf(" %.6g", dtype_load(outs[i].dtype, outs[i].data, (size_t)e));
			printf("%s\n", n > 8 ? " ..." : "");
		}
	}
	rc = 0;
out:
	if (rc)
		fail(o->pos[0], &err);
	for (int i = 0; outs && i < g->noutputs; i++)
		tensor_free(&outs[i]);
	free(ins);
	free(ps);
	free(outs);
	st_close(&wf);
	st_close(&inf);
	graph_free(g);
	return rc;
}

static int cmd_help(opts *o);

static const struct command {
	const char *name;
	int (*fn)(opts *);
	const char *help;
} commands[] = {
	{"validate", cmd_validate, "validate GRAPH.json            check a graph; print a summary or the first error"},
	{"hash", cmd_hash, "hash [--canonical] GRAPH.json  print the canonical graph hash (or the canonical form)"},
	{"info", cmd_info, "info GRAPH.json | info --ops   describe a graph, or list every supported op as JSON lines"},
	{"eval", cmd_eval, "eval GRAPH.json -w W -i I -o O run the reference interpreter (safetensors in and out)"},
	{"help", cmd_help, "help                          this text"},
};

static int cmd_help(opts *o)
{
	(void)o;
	printf("coil: a compiler for tensor graphs\n\nusage: coil COMMAND [ARGS]\n\n");
	for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
		printf("  coil %s\n", commands[i].help);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return cmd_help(NULL), 2;
	for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
		if (!strcmp(argv[1], commands[i].name)) {
			opts o;
			if (parse_opts(argc - 2, argv + 2, &o))
				return 2;
			return commands[i].fn(&o);
		}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cmd_help(NULL);
	fprintf(stderr, "%s: unknown command '%s' (see 'coil help')\n", prog, argv[1]);
	return 2;
}
