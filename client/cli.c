/* coil: the command-line tool.  Each command is a function in the table at the
 * bottom; errors are one line on stderr and a non-zero exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
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
	const char *weights, *inputs, *out, *cache_dir, *budget;
	int ops, canonical, repair;
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
		else if (!strcmp(a, "--cache-dir"))
			slot = &o->cache_dir;
		else if (!strcmp(a, "--budget"))
			slot = &o->budget;
		else if (!strcmp(a, "--repair"))
			o->repair = 1;
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

/* Sizes like 1048576, 512K, 64M, 2G. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	if (end == s)
		return -1;
	switch (*end) {
	case 'K': case 'k': mul = 1ull << 10; end++; break;
	case 'M': case 'm': mul = 1ull << 20; end++; break;
	case 'G': case 'g': mul = 1ull << 30; end++; break;
	default: break;
	}
	if (*end || v > UINT64_MAX / mul)
		return -1;
	*out = v * mul;
	return 0;
}

static int print_entry(void *ud, const char *key, uint64_t size, int64_t last_used, const char *meta)
{
	(void)ud;
	(void)meta;
	printf("%s %12llu %lld\n", key, (unsigned long long)size, (long long)last_used);
	return 0;
}

static int print_problem(void *ud, const char *key, const char *problem)
{
	(void)ud;
	printf("%s: %s\n", key, problem);
	return 0;
}

static int cmd_cache(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil cache stats|ls|gc|verify [--cache-dir DIR] [--budget SIZE] [--repair]");
	const char *dir = o->cache_dir ? o->cache_dir : getenv("COIL_CACHE_DIR");
	uint64_t budget = 0;
	if (o->budget && parse_size(o->budget, &budget))
		return usage_err("--budget takes a size such as 512M");
	coil_err err = {{0}};
	coil_cache *c = NULL;
	const char *sub = o->pos[0];
	if (strcmp(sub, "stats") && strcmp(sub, "ls") && strcmp(sub, "gc") && strcmp(sub, "verify"))
		return usage_err("cache takes stats, ls, gc or verify");
	if (cache_open(dir, 0, &c, &err))
		return fail("cache", &err);
	int rc = 0;
	if (!strcmp(sub, "stats")) {
		cache_stats_t st;
		if (cache_stats(c, &st, &err))
			rc = fail("cache", &err);
		else
			printf("dir %s\nentries %llu\nbytes %llu\nhits %llu\nmisses %llu\nevictions %llu\ncollisions %llu\n",
			       cache_dir(c), (unsigned long long)st.entries, (unsigned long long)st.bytes,
			       (unsigned long long)st.hits, (unsigned long long)st.misses,
			       (unsigned long long)st.evictions, (unsigned long long)st.collisions);
	} else if (!strcmp(sub, "ls")) {
		if (cache_list(c, print_entry, NULL, &err))
			rc = fail("cache", &err);
	} else if (!strcmp(sub, "gc")) {
		if (!o->budget)
			rc = usage_err("cache gc needs --budget SIZE");
		else if (cache_gc(c, budget, &err))
			rc = fail("cache", &err);
	} else {
		int bad = 0;
		if ((o->repair ? cache_repair : cache_verify)(c, print_problem, NULL, &bad, &err))
			rc = fail("cache", &err);
		else if (bad) {
			fprintf(stderr, "%s: cache: %d bad entr%s%s\n", prog, bad, bad == 1 ? "y" : "ies",
				o->repair ? " removed" : "");
			rc = o->repair ? 0 : 1;
		} else {
			printf("ok\n");
		}
	}
	cache_close(c);
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
	{"cache", cmd_cache, "cache stats|ls|gc|verify       inspect the local artifact cache (--cache-dir, --budget, --repair)"},
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
