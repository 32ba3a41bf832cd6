/* coil: the command-line tool.  Each command is a function in the table at the
 * bottom; errors are one line on stderr and a non-zero exit. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "cache/sign.h"
#include "client/artifact.h"
#include "client/fleet.h"
#include "client/quantize.h"
#include "coil/coil.h"
#include "codegen/codegen.h"
#include "common/clock.h"
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

/* Options: one parser for every command.  A value option is spelled
 * "--name VALUE" or "--name=VALUE" (or its short form "-x VALUE"). */
typedef struct opts {
	const char *pos[64];
	int npos;
	const char *weights, *inputs, *out, *cache_dir, *budget, *target, *threads, *repeat, *opt, *precision;
	const char *dump_after, *emit_c, *mode;
	const char *method, *percentile; /* quantize */
	int dynamic;
	const char *server; /* --server URL or $COIL_SERVER: compile on a coild */
	const char *trusted_keys_file, *sign_key;
	char trusted_keys[4096]; /* every --trusted-key, space-separated */
	int ntrusted;
	int ops, canonical, repair, profile;
	coil_trust *trust;        /* resolved once: the flags', else the environment's */
	coil_signer *signer;      /* --sign-key or $COIL_SIGN_KEY_FILE: signs in-process builds */
} opts;

static const struct option_def {
	const char *name, *alias; /* "--weights", "-w" */
	size_t slot;              /* offset of the const char * it sets, or of the int flag */
	int flag;                 /* 1: a flag without a value; 2: repeatable, appended to a list */
} options[] = {
	{"--weights", "-w", offsetof(opts, weights), 0},
	{"--inputs", "-i", offsetof(opts, inputs), 0},
	{"--output", "-o", offsetof(opts, out), 0},
	{"--target", "-t", offsetof(opts, target), 0},
	{"--threads", NULL, offsetof(opts, threads), 0},
	{"--repeat", NULL, offsetof(opts, repeat), 0},
	{"--opt", NULL, offsetof(opts, opt), 0},
	{"--precision", NULL, offsetof(opts, precision), 0},
	{"--mode", NULL, offsetof(opts, mode), 0},
	{"--cache-dir", NULL, offsetof(opts, cache_dir), 0},
	{"--budget", NULL, offsetof(opts, budget), 0},
	{"--server", NULL, offsetof(opts, server), 0},
	{"--dump-after", NULL, offsetof(opts, dump_after), 0},
	{"--emit-c", NULL, offsetof(opts, emit_c), 0},
	{"--repair", NULL, offsetof(opts, repair), 1},
	{"--profile", NULL, offsetof(opts, profile), 1},
	{"--method", NULL, offsetof(opts, method), 0},
	{"--percentile", NULL, offsetof(opts, percentile), 0},
	{"--dynamic", NULL, offsetof(opts, dynamic), 1},
	{"--ops", NULL, offsetof(opts, ops), 1},
	{"--canonical", NULL, offsetof(opts, canonical), 1},
	{"--trusted-key", NULL, offsetof(opts, trusted_keys), 2},
	{"--trusted-keys-file", NULL, offsetof(opts, trusted_keys_file), 0},
	{"--sign-key", NULL, offsetof(opts, sign_key), 0},
};

static int parse_opts(int argc, char **argv, opts *o)
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-' || !a[1]) {
			if (o->npos == 64)
				return fprintf(stderr, "%s: too many arguments\n", prog), -1;
			o->pos[o->npos++] = a;
			continue;
		}
		const struct option_def *d = NULL;
		const char *val = NULL;
		for (size_t k = 0; k < sizeof options / sizeof *options && !d; k++) {
			size_t n = strlen(options[k].name);
			if (!strcmp(a, options[k].name) || (options[k].alias && !strcmp(a, options[k].alias)))
				d = &options[k];
			else if (!strncmp(a, options[k].name, n) && a[n] == '=' && options[k].flag != 1)
				d = &options[k], val = a + n + 1;
		}
		if (!d)
			return fprintf(stderr, "%s: unknown option '%s' (see 'coil help')\n", prog, a), -1;
		if (d->flag == 1) {
			*(int *)((char *)o + d->slot) = 1;
			continue;
		}
		if (!val) {
			if (i + 1 >= argc)
				return fprintf(stderr, "%s: option '%s' needs a value\n", prog, a), -1;
			val = argv[++i];
		}
		if (d->flag == 2) {
			size_t used = strlen(o->trusted_keys);
			if (used + strlen(val) + 2 > sizeof o->trusted_keys)
				return fprintf(stderr, "%s: too many --trusted-key\n", prog), -1;
			snprintf(o->trusted_keys + used, sizeof o->trusted_keys - used, "%s%s", used ? " " : "", val);
			o->ntrusted++;
			continue;
		}
		*(const char **)((char *)o + d->slot) = val;
	}
	return 0;
}

/* Trusted keys (--trusted-key, --trusted-keys-file, else $COIL_TRUSTED_KEYS
 * and $COIL_TRUSTED_KEYS_FILE) and the in-process signing key (--sign-key,
 * else $COIL_SIGN_KEY_FILE), for the commands that load or build. */
static int load_keys(opts *o)
{
	coil_err err = {0};
	if (trust_resolve(o->ntrusted ? o->trusted_keys : NULL, o->trusted_keys_file, &o->trust, &err) != 0)
		return fail(NULL, &err);
	const char *sk = o->sign_key ? o->sign_key : getenv("COIL_SIGN_KEY_FILE");
	if (sk && *sk && sign_key_load(sk, &o->signer, &err) != 0)
		return fail(NULL, &err);
	return 0;
}

/* --opt N: 0..3, or the default when absent. */
static int opt_level(const opts *o, int *level)
{
	*level = COMPILE_OPT_DEFAULT;
	if (!o->opt)
		return 0;
	char *end;
	long v = strtol(o->opt, &end, 10);
	if (!*o->opt || *end || v < 0 || v > 3)
		return -1;
	*level = (int)v;
	return 0;
}

static coil_graph *load(const char *path)
{
	coil_err err = {0};
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
	coil_err err = {0};
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
			if (op_internal((coil_op)op))
				continue;
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
	for (int k = 0; k < g->syms.n; k++) {
		if (g->syms.kind[k] != SYM_FREE || (!g->syms.lo[k] && !g->syms.hi[k]))
			continue;
		char hi[32] = "inf";
		if (g->syms.hi[k])
			snprintf(hi, sizeof hi, "%lld", (long long)g->syms.hi[k]);
		printf("symbol  %-40s %lld..%s\n", g->syms.name[k], (long long)(g->syms.lo[k] > 0 ? g->syms.lo[k] : 0), hi);
	}
	for (int i = 0; i < g->nguards; i++) {
		char b[300];
		const coil_guard *gd = &g->guards[i];
		printf("guard   %-40s %s of node '%s'\n", guard_format(&g->syms, gd, b, sizeof b), gd->why,
		       gd->node >= 0 ? g->nodes[gd->node].id : "?");
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
	coil_err err = {0};
	st_file wf = {0}, inf = {0};
	coil_tensor *ins = calloc((size_t)g->ninputs + 1, sizeof *ins), *ps = calloc((size_t)g->nparams + 1, sizeof *ps);
	coil_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
	int rc = 1;
	if (!ins || !ps || !outs) {
		coil_err_oom(&err);
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
			coil_err_oom(&err);
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

typedef struct keylist {
	char (*keys)[65];
	size_t n, cap;
} keylist;

static int collect_key(void *ud, const char *key, uint64_t size, int64_t last_used, const char *meta)
{
	(void)size, (void)last_used, (void)meta;
	keylist *l = ud;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		char(*k)[65] = realloc(l->keys, cap * sizeof *k);
		if (!k)
			return 1;
		l->keys = k;
		l->cap = cap;
	}
	memcpy(l->keys[l->n++], key, 65);
	return 0;
}

/* With trusted keys, cache verify also checks every entry's signature: one
 * line per entry a trusted key did not sign (removed with --repair). */
static int verify_signatures(coil_cache *c, const coil_trust *t, int repair, int *bad, coil_err *err)
{
	keylist l = {0};
	if (cache_list(c, collect_key, &l, err)) {
		free(l.keys);
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; i < l.n && rc == 0; i++) {
		char sha[65], target[64], sig[SIGN_STR_MAX];
		coil_err e2 = {0};
		int v = cache_entry_verify(c, t, l.keys[i], sha, target, sig, &e2);
		if (v == 1 || v == 0)
			continue;
		if (e2.code != COIL_E_INPUT) {
			*err = e2;
			rc = -1;
			break;
		}
		print_problem(NULL, l.keys[i], e2.msg);
		(*bad)++;
		if (repair)
			rc = cache_remove(c, l.keys[i], err);
	}
	free(l.keys);
	return rc;
}

static int cmd_cache(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil cache stats|ls|gc|verify [--cache-dir DIR] [--budget SIZE] [--repair]");
	const char *dir = o->cache_dir ? o->cache_dir : getenv("COIL_CACHE_DIR");
	uint64_t budget = 0;
	if (o->budget && parse_size(o->budget, &budget))
		return usage_err("--budget takes a size such as 512M");
	coil_err err = {0};
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
		if ((o->repair ? cache_repair : cache_verify)(c, print_problem, NULL, &bad, &err) ||
		    (trust_count(o->trust) && verify_signatures(c, o->trust, o->repair, &bad, &err)))
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

/* A graph file read once and planned once (compile_plan: parsed, validated,
 * its target resolved and its cache key made), then compiled through the
 * local cache or a coild and loaded.  text is the file's bytes, for a server. */
typedef struct loaded {
	char *text;
	size_t len;
	compile_plan *plan;
	compile_result res;
	coil_artifact *art;
	double plan_ms, compile_ms, load_ms;
} loaded;

static void loaded_free(loaded *l)
{
	artifact_close(l->art);
	compile_plan_free(l->plan);
	free(l->text);
}

/* 0, or -1 with the error printed and l freed. */
static int plan_file(opts *o, const char *path, loaded *l)
{
	memset(l, 0, sizeof *l);
	coil_err err = {0};
	compile_opts co = {.target = o->target, .signer = o->signer};
	int rc = -1;
	if (o->precision)
		co.precision = !strcmp(o->precision, "bf16") ? COIL_BF16 : COIL_F32;
	if (opt_level(o, &co.opt_level))
		coil_err_input(&err, "--opt takes 0, 1, 2 or 3, not '%.20s'", o->opt);
	else if (o->precision && strcmp(o->precision, "f32") && strcmp(o->precision, "bf16"))
		coil_err_input(&err, "--precision takes f32 or bf16, not '%.20s'", o->precision);
	else if ((co.mode = compile_mode_parse(o->mode)) < 0)
		coil_err_input(&err, "--mode takes default or max-autotune, not '%.20s'", o->mode);
	else if (o->threads && (co.tune_threads = atoi(o->threads)) < 0)
		coil_err_input(&err, "--threads takes a positive number, not '%.20s'", o->threads);
	else if (!graph_read_file(path, &l->text, &l->len, &err)) {
		double t0 = clock_ms();
		rc = compile_plan_make(l->text, l->len, &co, &l->plan, &err);
		l->plan_ms = clock_ms() - t0;
		if (rc)
			coil_err_prefix(&err, "%s", path);
	}
	if (rc) {
		fail(NULL, &err);
		loaded_free(l);
	}
	return rc;
}

/* libcoil's trust: the same flags (else libcoil reads the environment). */
static void client_trust(const opts *o, coil_client_opts *copts)
{
	copts->trusted_keys = o->ntrusted ? o->trusted_keys : NULL;
	copts->trusted_keys_file = o->trusted_keys_file;
}

/* Remote mode: compile on the coild, fetch the artifact into the local cache
 * (its sha256 verified), and load it from there. */
static int compile_remote(opts *o, loaded *l, coil_err *err)
{
	coil_client_opts copts = {.cache_dir = o->cache_dir};
	client_trust(o, &copts);
	coil_client *c = NULL;
	coil_compile_opts co = {.target = o->target, .opt_level = o->opt ? l->plan->opt_level : COIL_OPT_DEFAULT,
				.precision = o->precision, .mode = o->mode,
				.tune_threads = o->threads ? atoi(o->threads) : 0};
	coil_compile_info info;
	double t0 = clock_ms();
	if (coil_client_create(o->server, getenv("COIL_TOKEN"), &copts, &c) ||
	    coil_compile(c, l->text, l->len, &co, &info) ||
	    coil_fetch(c, info.key, info.sha256, l->res.path, sizeof l->res.path)) {
		coil_errf(err, "%s", coil_last_error());
		coil_client_destroy(c);
		return -1;
	}
	coil_client_destroy(c);
	double t1 = clock_ms();
	memcpy(l->res.key, info.key, sizeof info.key);
	memcpy(l->res.sha256, info.sha256, sizeof info.sha256);
	snprintf(l->res.target, sizeof l->res.target, "%s", info.target);
	l->res.size = info.size;
	l->res.hit = info.hit;
	l->res.compile_ms = info.compile_ms;
	l->compile_ms = t1 - t0;
	/* coil_fetch verified and stored it; what is loaded is checked again
	 * (signature, then sha256 and target on a sealed copy) from the local
	 * cache's entry, as a hit would be. */
	coil_cache *lc = NULL;
	char sha[65], target[64];
	const char *dir = o->cache_dir ? o->cache_dir : getenv("COIL_CACHE_DIR");
	int rc = cache_open(dir, 0, &lc, err) ? -1
		 : cache_entry_verify(lc, o->trust, l->res.key, sha, target, l->res.signature, err) != 1 ? -1 : 0;
	cache_close(lc);
	if (rc == 0 && (strcmp(sha, l->res.sha256) || strcmp(target, l->res.target)))
		rc = coil_errc(err, COIL_E_IO, "artifact %s changed in the local cache after it was fetched", l->res.key);
	if (rc == 0)
		rc = artifact_open_verified(l->res.path, l->res.sha256, &l->art, err);
	l->load_ms = clock_ms() - t1;
	return rc;
}

static int compile_and_load(opts *o, const char *path, loaded *l, coil_err *err)
{
	if (o->server)
		return compile_remote(o, l, err);
	coil_cache *c = NULL;
	double t1 = clock_ms();
	const char *dir = o->cache_dir ? o->cache_dir : getenv("COIL_CACHE_DIR");
	if (cache_open(dir, 0, &c, err) || compile_plan_run(c, l->plan, &l->res, err)) {
		cache_close(c);
		return coil_err_prefix(err, "%s", path);
	}
	double t2 = clock_ms();
	/* A hit is loaded only if a trusted key signed it (when keys are
	 * trusted); what this call built is loaded on the strength of the bytes
	 * it hashed itself. */
	int rc = 0;
	if (!l->res.built && trust_count(o->trust)) {
		char sha[65], target[64];
		rc = cache_entry_verify(c, o->trust, l->res.key, sha, target, l->res.signature, err) != 1 ? -1 : 0;
		if (rc == 0 && (strcmp(sha, l->res.sha256) || strcmp(target, l->res.target)))
			rc = coil_errc(err, COIL_E_IO, "artifact %s changed in the cache while it was read", l->res.key);
		if (rc)
			coil_err_prefix(err, "%s: local cache", path);
	}
	if (rc == 0)
		rc = artifact_open_cached(c, l->res.key, l->res.path, l->res.sha256, &l->art, err);
	cache_close(c);
	l->compile_ms = t2 - t1;
	l->load_ms = clock_ms() - t2;
	return rc;
}

/* coil --server URL fetch KEY: the verified artifact into the local cache. */
static int cmd_fetch(opts *o)
{
	if (o->npos != 1 || !o->server)
		return usage_err("usage: coil --server URL fetch KEY");
	coil_client_opts copts = {.cache_dir = o->cache_dir};
	client_trust(o, &copts);
	coil_client *c = NULL;
	char path[4096];
	int rc = 0;
	if (coil_client_create(o->server, getenv("COIL_TOKEN"), &copts, &c) ||
	    coil_fetch(c, o->pos[0], NULL, path, sizeof path)) {
		fprintf(stderr, "%s: fetch: %s\n", prog, coil_last_error());
		rc = 1;
	} else {
		printf("%s\n", path);
	}
	coil_client_destroy(c);
	return rc;
}

/* One manifest entry: a key, or a graph (compiled through the tiers, the
 * last one compiling) with its options; 0 with the artifact in the local
 * cache, or -1 with msg. */
static int prefetch_one(coil_client *c, const char *dir, char *line, char *key_out, char *msg, size_t cap)
{
	char *save = NULL, *first = strtok_r(line, " \t", &save);
	if (cache_key_valid(first)) {
		/* "KEY" or a `coil cache ls` line ("KEY SIZE LAST_USED") */
		snprintf(key_out, 65, "%s", first);
		char path[4096];
		if (coil_fetch(c, first, NULL, path, sizeof path) != 0)
			return snprintf(msg, cap, "%s", coil_last_error()), -1;
		return 0;
	}
	coil_compile_opts co = {.opt_level = COIL_OPT_DEFAULT};
	for (char *w; (w = strtok_r(NULL, " \t", &save));) {
		if (!strncmp(w, "target=", 7))
			co.target = w + 7;
		else if (!strncmp(w, "precision=", 10))
			co.precision = w + 10;
		else if (!strncmp(w, "opt=", 4) && w[4] >= '0' && w[4] <= '3' && !w[5])
			co.opt_level = w[4] - '0';
		else if (!strncmp(w, "mode=", 5) && compile_mode_parse(w + 5) >= 0)
			co.mode = w + 5;
		else
			return snprintf(msg, cap, "'%.60s' is not target=T, opt=0..3, precision=P or mode=M", w), -1;
	}
	char gpath[8192 + 4096];
	if (first[0] == '/')
		snprintf(gpath, sizeof gpath, "%s", first);
	else
		snprintf(gpath, sizeof gpath, "%s/%s", dir, first);
	coil_compile_info info;
	char path[4096];
	if (coil_compile_file(c, gpath, &co, &info) != 0 || coil_fetch(c, info.key, info.sha256, path, sizeof path) != 0)
		return snprintf(msg, cap, "%s", coil_last_error()), -1;
	memcpy(key_out, info.key, 65);
	return 0;
}

/* coil --server URL prefetch MANIFEST: every artifact it names, verified,
 * into the local cache (a client's, or a coild's --cache-dir before it
 * starts), so that a machine takes traffic warm.  Lines: a key (or `coil
 * cache ls` output), or a graph path (relative to the manifest) with
 * target=T opt=N precision=P; '#' comments.  Each entry prints "KEY SOURCE";
 * a failing one is named on stderr by line and the rest go on. */
static int cmd_prefetch(opts *o)
{
	if (o->npos != 1 || !o->server)
		return usage_err("usage: coil --server URL prefetch MANIFEST");
	FILE *f = fopen(o->pos[0], "r");
	if (!f) {
		fprintf(stderr, "%s: prefetch: %s: cannot open\n", prog, o->pos[0]);
		return 1;
	}
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", o->pos[0]);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	else
		snprintf(dir, sizeof dir, ".");
	coil_client_opts copts = {.cache_dir = o->cache_dir};
	client_trust(o, &copts);
	coil_client *c = NULL;
	if (coil_client_create(o->server, getenv("COIL_TOKEN"), &copts, &c) != 0) {
		fclose(f);
		fprintf(stderr, "%s: prefetch: %s\n", prog, coil_last_error());
		return 1;
	}
	char line[8192], key[65], msg[1200];
	int lineno = 0, good = 0, bad = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		line[strcspn(line, "#\r\n")] = 0;
		if (!line[strspn(line, " \t")])
			continue;
		if (prefetch_one(c, dir, line, key, msg, sizeof msg) == 0) {
			printf("%s %s\n", key, coil_client_tier_used(c));
			good++;
		} else {
			fprintf(stderr, "%s: prefetch: %s:%d: %s\n", prog, o->pos[0], lineno, msg);
			bad++;
		}
	}
	fclose(f);
	coil_client_destroy(c);
	fprintf(stderr, "%s: prefetch: %d ready, %d failed\n", prog, good, bad);
	return bad ? 1 : 0;
}

/* coil key GRAPH.json: the cache key this build makes of the graph, target
 * and options: what a compile sends as X-Coil-Key, what `coil cache ls`
 * lists and a prefetch manifest may name. */
static int cmd_key(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil key GRAPH.json [--target T] [--opt N] [--precision P]");
	loaded l;
	if (plan_file(o, o->pos[0], &l))
		return 1;
	printf("%s\n", l.plan->key);
	loaded_free(&l);
	return 0;
}

static int cmd_compile(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil compile GRAPH.json [--target T] [--opt N] [--mode M] [-o m.so] "
				 "[--dump-after PASS] [--emit-c F|DIR]");
	coil_err err = {0};
	loaded l;
	int rc = 0;
	if (plan_file(o, o->pos[0], &l))
		return 1;
	/* Inspection: the same plan through the pipeline, its IR or C printed
	 * (nothing stored); with -o the artifact is made through the cache too. */
	if (o->dump_after || o->emit_c) {
		codegen_result cr;
		if (compile_plan_inspect(l.plan, o->dump_after, stdout, o->emit_c, &cr, &err)) {
			loaded_free(&l);
			return fail(o->pos[0], &err);
		}
		if (o->emit_c)
			fprintf(stderr, "coil: wrote %s (%d kernels in %d functions, %zu bytes of C, target %s)\n", o->emit_c,
				cr.nkernels, cr.nfuncs, cr.c_bytes, cr.target);
		if (!o->out) {
			loaded_free(&l);
			return 0;
		}
	}
	if (compile_and_load(o, o->pos[0], &l, &err)) {
		loaded_free(&l);
		return fail(NULL, &err);
	}
	printf("key %s\ntarget %s\n%s%s in %.1f ms\nartifact %s (%llu bytes, sha256 %s)\n", l.res.key, l.res.target,
	       o->server ? "server: " : "", l.res.hit ? "cache hit" : "compiled",
	       l.res.hit ? l.compile_ms : l.res.compile_ms, l.res.path,
	       (unsigned long long)l.res.size, l.res.sha256);
	if (l.res.signature[0])
		printf("signature %s\n", l.res.signature);
	if (l.res.autotune[0])
		printf("autotune %s\n", l.res.autotune);
	if (o->out) {
		int bad = 0;
		FILE *in = fopen(l.res.path, "rb"), *out = fopen(o->out, "wb");
		char buf[65536];
		size_t n;
		while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0)
			bad |= fwrite(buf, 1, n, out) != n;
		if (!in || !out || (out && fclose(out) != 0) || bad) {
			coil_errc(&err, COIL_E_IO, "%s: cannot write", o->out);
			rc = fail(NULL, &err);
		}
		if (in)
			fclose(in);
		/* its signature beside it, for a load that trusts keys (PATH.sig) */
		if (!rc && l.res.signature[0] &&
		    artifact_sig_write(o->out, l.res.key, l.res.sha256, l.res.target, l.res.signature, &err))
			rc = fail(NULL, &err);
	}
	loaded_free(&l);
	return rc;
}

/* Inputs and params for a run: from safetensors files, or random when absent
 * (check only). Random data is owned by rnd_bufs. */
typedef struct bound {
	coil_tensor *ins, *ps;
	st_file wf, inf;
	void **rnd;
	int nrnd;
} bound;

static void bound_free(bound *b)
{
	free(b->ins);
	free(b->ps);
	st_close(&b->wf);
	st_close(&b->inf);
	for (int i = 0; i < b->nrnd; i++)
		free(b->rnd[i]);
	free(b->rnd);
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A 64-byte aligned buffer of n bytes that b owns (freed with it), as
 * torch's tensors are: kernels then time the same on coil and on eager. */
static void *bound_alloc(bound *b, size_t n)
{
	void **nr = realloc(b->rnd, (size_t)(b->nrnd + 1) * sizeof *nr);
	if (!nr)
		return NULL;
	b->rnd = nr;
	void *d = aligned_alloc(64, (n + 64) & ~(size_t)63);
	if (d)
		b->rnd[b->nrnd++] = d;
	return d;
}

static int random_tensor(coil_graph *g, const coil_value *v, bound *b, coil_tensor *t, uint64_t *seed, coil_err *err)
{
	t->dtype = v->dtype;
	t->rank = v->rank;
	int64_t n = 1;
	for (int d = 0; d < v->rank; d++) {
		int64_t c = 0;
		if (!dim_is_const(&v->shape[d], &c))
			c = 2; /* symbols: a small batch */
		t->shape[d] = c;
		n *= c;
	}
	(void)g;
	if (!(t->data = bound_alloc(b, (size_t)n * dtype_size(v->dtype))))
		return coil_err_oom(err);
	for (int64_t e = 0; e < n; e++) {
		double u = (double)(rng_next(seed) >> 11) / 9007199254740992.0;
		double x = dtype_is_float(v->dtype) ? (u * 2 - 1) * 2 : floor(u * 2);
		dtype_store(v->dtype, t->data, (size_t)e, x);
	}
	return 0;
}

static int bind_all(coil_graph *g, opts *o, int allow_random, bound *b, coil_err *err)
{
	memset(b, 0, sizeof *b);
	b->ins = calloc((size_t)g->ninputs + 1, sizeof *b->ins);
	b->ps = calloc((size_t)g->nparams + 1, sizeof *b->ps);
	if (!b->ins || !b->ps)
		return coil_err_oom(err);
	if ((o->weights && st_open(o->weights, &b->wf, err)) || (o->inputs && st_open(o->inputs, &b->inf, err)))
		return -1;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int pass = 0; pass < 2; pass++) {
		const int *list = pass ? g->params : g->inputs;
		int n = pass ? g->nparams : g->ninputs;
		const char *file = pass ? o->weights : o->inputs;
		coil_tensor *out = pass ? b->ps : b->ins;
		if (file || !allow_random) {
			if (bind_list(g, list, n, file ? (pass ? &b->wf : &b->inf) : NULL, pass ? "param" : "input", out, err))
				return -1;
			/* a safetensors file's data is packed, not aligned: inputs get
			 * aligned copies (params are read once, by create, mostly) */
			for (int i = 0; !pass && i < n; i++) {
				size_t nb = tensor_bytes(&out[i]);
				void *d = bound_alloc(b, nb);
				if (!d)
					return coil_err_oom(err);
				if (nb)
					memcpy(d, out[i].data, nb);
				out[i].data = d;
			}
			continue;
		}
		for (int i = 0; i < n; i++)
			if (random_tensor(g, &g->vals[list[i]], b, &out[i], &seed, err))
				return -1;
	}
	return 0;
}

/* The profile of runs runs (acc: 3 doubles a kernel, the run's own part last;
 * emit_abi.c), slowest kernel first, on stdout. */
/* A kernel's name with the artifact's canonical node ids ("#k", hash.c) as g
 * names them. */
static void print_kernel_name(const char *name, coil_graph *g, const int *order, int norder)
{
	while (name && *name) {
		char *end;
		long k = *name == '#' ? strtol(name + 1, &end, 10) : -1;
		if (k >= 0 && k < norder && *end == ':' && g->nodes[order[k]].id) {
			fputs(g->nodes[order[k]].id, stdout);
			name = end;
		}
		size_t n = strcspn(name, " ");
		fwrite(name, 1, n + (name[n] == ' '), stdout);
		name += n + (name[n] == ' ');
	}
	putchar('\n');
}

static void print_profile(coil_artifact *a, coil_graph *g, const double *acc, int nk, int runs)
{
	int *ord = malloc(((size_t)nk + 1) * sizeof *ord), *order = malloc(((size_t)g->nnodes + 1) * sizeof *order);
	double tot = 0, cum = 0;
	coil_err err = {0};
	int norder = order ? graph_canonical_order(g, order, &err) : -1;
	if (!ord || !order) {
		free(ord);
		free(order);
		return;
	}
	for (int k = 0; k <= nk; k++) {
		ord[k] = k;
		tot += acc[3 * k];
	}
	for (int i = 1; i <= nk; i++) /* by time, slowest first */
		for (int j = i; j > 0 && acc[3 * ord[j]] > acc[3 * ord[j - 1]]; j--) {
			int t = ord[j];
			ord[j] = ord[j - 1];
			ord[j - 1] = t;
		}
	printf("profile: %d kernels, %.3f ms a run over %d runs\n", nk, 1e3 * tot / runs, runs);
	printf("%6s %9s %6s %6s %8s %8s  %s\n", "kernel", "ms", "%", "cum %", "GB/s", "GFLOP/s", "what");
	for (int i = 0; i <= nk; i++) {
		const double *p = &acc[3 * ord[i]];
		char gb[16] = "", gf[16] = "";
		cum += p[0];
		if (p[0] > 0 && p[1] > 0)
			snprintf(gb, sizeof gb, "%.1f", p[1] / p[0] / 1e9);
		if (p[0] > 0 && p[2] > 0)
			snprintf(gf, sizeof gf, "%.1f", p[2] / p[0] / 1e9);
		printf("%6d %9.4f %6.1f %6.1f %8s %8s  ", ord[i], 1e3 * p[0] / runs, tot > 0 ? 100 * p[0] / tot : 0,
		       tot > 0 ? 100 * cum / tot : 0, gb, gf);
		print_kernel_name(a->kernel_name(ord[i]), g, order, norder);
	}
	free(ord);
	free(order);
}

/* Runs a loaded artifact; outputs get malloc'd data.  Times the median of repeat runs;
 * with profile, prints the kernels' times over them (the first run's too when it is the only one). */
static int run_artifact(coil_artifact *a, coil_graph *g, bound *b, int threads, int repeat, int profile,
			coil_tensor *outs, double *create_ms, double *run_ms, coil_err *err)
{
	double *acc = NULL;
	int nk = 0;
	coil_model *m = NULL;
	const void **par = calloc((size_t)g->nparams + 1, sizeof *par);
	const void **in = calloc((size_t)g->ninputs + 1, sizeof *in);
	const int64_t **shp = calloc((size_t)g->ninputs + 1, sizeof *shp);
	void **outp = calloc((size_t)g->noutputs + 1, sizeof *outp);
	double *times = calloc((size_t)repeat + 1, sizeof *times);
	int rc = -1;
	if (!par || !in || !shp || !outp || !times) {
		coil_err_oom(err);
		goto out;
	}
	if (a->ninputs != g->ninputs || a->nparams != g->nparams || a->noutputs != g->noutputs) {
		coil_errf(err, "artifact does not match the graph");
		goto out;
	}
	for (int i = 0; i < g->nparams; i++) {
		const coil_value *v = &g->vals[g->params[i]];
		for (int d = 0; d < v->rank; d++)
			if (b->ps[i].dtype != v->dtype || b->ps[i].rank != v->rank || !dim_eq_const(&v->shape[d], b->ps[i].shape[d])) {
				coil_errf(err, "param '%s': dtype or shape does not match the graph", v->name);
				goto out;
			}
		par[i] = b->ps[i].data;
	}
	int64_t syms[COIL_MAX_SYMS];
	if (bind_symbols(g, b->ins, syms, err))
		goto out;
	for (int i = 0; i < g->ninputs; i++) {
		in[i] = b->ins[i].data;
		shp[i] = b->ins[i].shape;
	}
	double t0 = clock_ms();
	if (a->create(par, g->nparams, threads, &m)) {
		coil_errf(err, "create: %s", a->last_error());
		goto out;
	}
	*create_ms = clock_ms() - t0;
	for (int i = 0; i < g->noutputs; i++) {
		coil_tensor *t = &outs[i];
		t->dtype = a->outputs[i].dtype;
		t->rank = a->output_shape(m, shp, i, t->shape);
		if (t->rank < 0) {
			coil_errf(err, "output shape: %s", a->last_error());
			goto out;
		}
		t->data = aligned_alloc(64, (tensor_bytes(t) + 64) & ~(size_t)63);
		if (!t->data) {
			coil_err_oom(err);
			goto out;
		}
		outp[i] = t->data;
	}
	if (profile && !a->profile) {
		coil_errf(err, "the artifact predates the profile switch (coil_model_profile): compile it again");
		goto out;
	}
	if (profile) {
		nk = a->profile(m, NULL);
		if (!(acc = calloc(3 * ((size_t)nk + 1), sizeof *acc))) {
			coil_err_oom(err);
			goto out;
		}
	}
	for (int r = 0; r < repeat; r++) {
		if (acc && (r == 1 || repeat == 1)) /* the first of several runs makes the arena and oneDNN's objects */
			a->profile(m, acc);
		double t1 = clock_ms();
		if (a->run(m, in, shp, outp)) {
			coil_errf(err, "run: %s", a->last_error());
			goto out;
		}
		times[r] = clock_ms() - t1;
	}
	for (int i = 1; i < repeat; i++) /* insertion sort: repeat is small */
		for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
			double t = times[j];
			times[j] = times[j - 1];
			times[j - 1] = t;
		}
	*run_ms = times[repeat / 2];
	if (acc)
		print_profile(a, g, acc, nk, repeat > 1 ? repeat - 1 : 1);
	rc = 0;
out:
	free(acc);
	if (m)
		a->destroy(m);
	free(par);
	free(in);
	free(shp);
	free(outp);
	free(times);
	return rc;
}

static int write_outputs(const char *path, coil_tensor *outs, int n, coil_err *err)
{
	char(*buf)[24] = calloc((size_t)n + 1, 24);
	const char **names = calloc((size_t)n + 1, sizeof *names);
	int rc = -1;
	if (buf && names) {
		for (int i = 0; i < n; i++) {
			snprintf(buf[i], 24, "output%d", i);
			names[i] = buf[i];
		}
		rc = st_write(path, n, names, outs, err);
	} else {
		coil_err_oom(err);
	}
	free(buf);
	free(names);
	return rc;
}

static int cmd_run(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil run GRAPH.json -w W.safetensors -i I.safetensors [-o OUT] [--threads N] [--repeat N] [--profile]");
	coil_err err = {0};
	loaded l;
	if (!o->threads)
		o->threads = "1"; /* what it runs at, and so what max-autotune times at */
	if (plan_file(o, o->pos[0], &l))
		return 1;
	coil_graph *g = l.plan->g;
	bound b = {0};
	coil_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
	int threads = o->threads ? atoi(o->threads) : 1, repeat = o->repeat ? atoi(o->repeat) : 1, rc = 1;
	double create_ms = 0, run_ms = 0;
	if (repeat < 1 || repeat > 100000 || threads < 0) {
		rc = usage_err("--repeat and --threads take positive numbers");
		goto out;
	}
	if (!outs || bind_all(g, o, 0, &b, &err) || compile_and_load(o, o->pos[0], &l, &err) ||
	    run_artifact(l.art, g, &b, threads, repeat, o->profile, outs, &create_ms, &run_ms, &err) ||
	    (o->out && write_outputs(o->out, outs, g->noutputs, &err))) {
		fail(NULL, &err);
		goto out;
	}
	fprintf(stderr, "coil: parse+hash %.1f ms, %s %.1f ms, load %.1f ms, create %.1f ms, run %.3f ms%s\n", l.plan_ms,
		l.res.hit ? "cache hit" : "compile", l.compile_ms, l.load_ms, create_ms, run_ms,
		repeat > 1 ? " (median)" : "");
	if (!o->out)
		for (int i = 0; i < g->noutputs; i++) {
			int64_t n = tensor_numel(&outs[i]);
			printf("output%d %s:", i, dtype_name(outs[i].dtype));
			for (int64_t e = 0; e < n && e < 8; e++)
				printf(" %.6g", dtype_load(outs[i].dtype, outs[i].data, (size_t)e));
			printf("%s\n", n > 8 ? " ..." : "");
		}
	rc = 0;
out:
	for (int i = 0; outs && i < g->noutputs; i++)
		tensor_free(&outs[i]);
	free(outs);
	bound_free(&b);
	loaded_free(&l);
	return rc;
}

/* Compiled versus interpreted: max error relative to each output's scale. */
static int cmd_check(opts *o)
{
	if (o->npos != 1)
		return usage_err("usage: coil check GRAPH.json [-w W.safetensors] [-i I.safetensors] [--target T]");
	coil_err err = {0};
	loaded l;
	if (plan_file(o, o->pos[0], &l))
		return 1;
	coil_graph *g = l.plan->g;
	bound b = {0};
	coil_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs), *ref = calloc((size_t)g->noutputs + 1, sizeof *ref);
	double create_ms, run_ms;
	int rc = 1;
	if (!outs || !ref || bind_all(g, o, 1, &b, &err) || compile_and_load(o, o->pos[0], &l, &err) ||
	    run_artifact(l.art, g, &b, 1, 1, 0, outs, &create_ms, &run_ms, &err) || interp_run(g, b.ins, b.ps, ref, &err)) {
		fail(NULL, &err);
		goto out;
	}
	int bad = 0;
	/* the tolerance of the narrowest float the graph computes in (a bf16
	 * product's error reaches an f32 output through it) */
	double narrow = 1e-4;
	for (int v = 0; v < g->nvals; v++)
		narrow = g->vals[v].dtype == COIL_BF16 ? 2e-2 : g->vals[v].dtype == COIL_F16 ? fmax(narrow, 2e-3) : narrow;
	/* a quantizing graph: a value on a rounding boundary may land a step apart in the
	 * compiled code (its f32 accumulation order differs), and the steps of later layers add
	 * up: four 8-bit steps of the output's range */
	int quantizes = 0;
	for (int i = 0; i < g->nnodes; i++)
		quantizes |= op_is_quant(g->nodes[i].op) && !op_is_dequant(g->nodes[i].op);
	if (quantizes)
		narrow = fmax(narrow, 4.0 / 255);
	for (int i = 0; i < g->noutputs; i++) {
		int64_t n = tensor_numel(&ref[i]);
		int same_shape = outs[i].rank == ref[i].rank;
		for (int d = 0; same_shape && d < ref[i].rank; d++)
			same_shape = outs[i].shape[d] == ref[i].shape[d];
		double scale = 0, maxerr = 0;
		for (int64_t e = 0; same_shape && e < n; e++) {
			double r = dtype_load(ref[i].dtype, ref[i].data, (size_t)e), c = dtype_load(outs[i].dtype, outs[i].data, (size_t)e);
			if (isnan(r) != isnan(c) || (isinf(r) && r != c) || (isinf(c) && r != c))
				maxerr = INFINITY;
			else if (isfinite(r)) {
				scale = fmax(scale, fabs(r));
				maxerr = fmax(maxerr, fabs(r - c));
			}
		}
		double rel = !same_shape ? INFINITY : maxerr / (scale > 0 ? scale : 1);
		double tol = dtype_is_float(ref[i].dtype) || quantizes ? narrow : 1e-4;
		printf("output%d: max error %.3g relative to scale %.3g: %s\n", i, rel, scale, rel <= tol ? "ok" : "MISMATCH");
		bad |= !(rel <= tol);
	}
	rc = bad;
	if (bad)
		fprintf(stderr, "%s: %s: compiled result differs from the interpreter\n", prog, o->pos[0]);
out:
	for (int i = 0; outs && ref && i < g->noutputs; i++) {
		tensor_free(&outs[i]);
		tensor_free(&ref[i]);
	}
	free(outs);
	free(ref);
	bound_free(&b);
	loaded_free(&l);
	return rc;
}

/* coil keygen NAME SECRET_FILE PUBLIC_FILE: an Ed25519 key pair for signing
 * artifacts; the public key is printed too. */
/* coil quantize GRAPH.json [CALIB.safetensors ...] -w W -o DIR: the int8 graph and its
 * weights (client/quantize.c); calibration runs the folded graph compiled, with the
 * observed values as extra outputs, on each file's inputs. */
static int cmd_quantize(opts *o)
{
	if (o->npos < 1 || !o->weights || !o->out || (!o->dynamic && o->npos < 2))
		return usage_err("usage: coil quantize GRAPH.json CALIB.safetensors... -w W.safetensors -o DIR "
				 "[--method histogram|minmax] [--percentile P] [--threads N] | coil quantize GRAPH.json "
				 "--dynamic -w W.safetensors -o DIR");
	coil_err err = {0};
	st_file wf = {0};
	loaded l;
	memset(&l, 0, sizeof l);
	qz *q = NULL;
	bound b;
	memset(&b, 0, sizeof b);
	coil_tensor *outs = NULL;
	char *text = NULL;
	size_t len = 0, clen = 0;
	int rc = 1, threads = o->threads ? atoi(o->threads) : 1;
	const double pct = o->percentile ? atof(o->percentile) : 99.99;
	if (qz_options(o->method ? o->method : "histogram", pct, &err) || graph_read_file(o->pos[0], &text, &len, &err) || st_open(o->weights, &wf, &err) ||
	    qz_plan(text, len, &wf, o->dynamic, &q, &err))
		goto out;
	const char *calib = qz_calib(q, &clen);
	if (calib && o->npos > 1) {
		compile_opts co = {.target = o->target};
		if (!(l.text = malloc(clen + 1)))
			goto oom;
		memcpy(l.text, calib, clen + 1);
		l.len = clen;
		if (compile_plan_make(l.text, l.len, &co, &l.plan, &err) || compile_and_load(o, o->pos[0], &l, &err))
			goto out;
		coil_graph *g = l.plan->g;
		if (!(b.ins = calloc((size_t)g->ninputs + 1, sizeof *b.ins)) ||
		    !(b.ps = calloc((size_t)g->nparams + 1, sizeof *b.ps)) ||
		    !(outs = calloc((size_t)g->noutputs + 1, sizeof *outs)))
			goto oom;
		for (int i = 0; i < g->nparams; i++) {
			const coil_tensor *t = qz_param(q, g->vals[g->params[i]].name);
			if (!t) {
				coil_errf(&err, "param '%s' is missing from the weights file", g->vals[g->params[i]].name);
				goto out;
			}
			b.ps[i] = *t;
		}
		for (int f = 1; f < o->npos; f++) {
			double cms, rms;
			st_close(&b.inf);
			if (st_open(o->pos[f], &b.inf, &err) ||
			    bind_list(g, g->inputs, g->ninputs, &b.inf, "input", b.ins, &err)) {
				coil_err_prefix(&err, "%s", o->pos[f]);
				goto out;
			}
			for (int i = 0; i < g->ninputs; i++) { /* aligned copies, as bind_all makes */
				size_t nb = tensor_bytes(&b.ins[i]);
				void *d = bound_alloc(&b, nb);
				if (!d)
					goto oom;
				if (nb)
					memcpy(d, b.ins[i].data, nb);
				b.ins[i].data = d;
			}
			if (run_artifact(l.art, g, &b, threads, 1, 0, outs, &cms, &rms, &err) ||
			    qz_observe(q, b.ins, g->ninputs, outs, g->noutputs, &err)) {
				coil_err_prefix(&err, "%s", o->pos[f]);
				goto out;
			}
			for (int i = 0; i < g->noutputs; i++)
				tensor_free(&outs[i]);
		}
	}
	if (qz_write(q, o->method ? o->method : "histogram", pct, o->out, stdout, &err))
		goto out;
	rc = 0;
	goto out;
oom:
	coil_err_oom(&err);
out:
	if (rc)
		fail(o->pos[0], &err);
	for (int i = 0; outs && l.plan && i < l.plan->g->noutputs; i++)
		tensor_free(&outs[i]);
	free(outs);
	bound_free(&b);
	loaded_free(&l);
	qz_free(q);
	st_close(&wf);
	free(text);
	return rc;
}

static int cmd_keygen(opts *o)
{
	if (o->npos != 3)
		return usage_err("usage: coil keygen NAME SECRET_FILE PUBLIC_FILE");
	coil_err err = {0};
	char pub[SIGN_STR_MAX];
	if (sign_keygen(o->pos[0], o->pos[1], o->pos[2], pub, &err))
		return fail("keygen", &err);
	printf("%s\n", pub);
	return 0;
}

static int cmd_help(opts *o);

static const struct command {
	const char *name;
	int (*fn)(opts *);
	const char *help;
} commands[] = {
	{"validate", cmd_validate, "validate GRAPH.json            check a graph; print a summary or the first error"},
	{"hash", cmd_hash, "hash [--canonical] GRAPH.json  print the canonical graph hash (or the canonical form)"},
	{"key", cmd_key, "key GRAPH.json [--target T] [--opt N] [--precision P]\n"
			 "                                the cache key of the graph for this build (what a compile\n"
			 "                                sends as X-Coil-Key for a farm's nginx to route by)"},
	{"info", cmd_info, "info GRAPH.json | info --ops   describe a graph, or list every supported op as JSON lines"},
	{"eval", cmd_eval, "eval GRAPH.json -w W -i I -o O run the reference interpreter (safetensors in and out)"},
	{"compile", cmd_compile, "compile GRAPH.json [--target T] [--opt N] [--mode M] [-o m.so] [--dump-after PASS] [--emit-c F|DIR]\n"
			   "                                compile through the local cache (--mode max-autotune [--threads N]:\n"
			   "                                time the valid lowerings here, build in the fastest); --dump-after prints a pass's\n"
			   "                                result (fold dnnl decompose fuse schedule memplan emit_c build),\n"
			   "                                --emit-c writes the C (inspection only, unless -o is given);\n"
			   "                                --precision bf16: convolutions and matrix products in bf16\n"
			   "                                (autocast's rules; also for run and check)"},
	{"run", cmd_run, "run GRAPH.json -w W -i I [-o O] [--threads N] [--repeat N] [--profile]\n"
			 "                                compile (or hit the cache), load and run; prints each phase's time\n"
			 "                                (--profile: each kernel's, slowest first, with its GB/s and GFLOP/s)"},
	{"check", cmd_check, "check GRAPH.json [-w W] [-i I]   compiled versus the interpreter (random data if none given)"},
	{"quantize", cmd_quantize, "quantize GRAPH.json CALIB.safetensors... -w W -o DIR [--method histogram|minmax]\n"
				   "                              [--percentile P] | quantize GRAPH.json --dynamic -w W -o DIR\n"
				   "                                int8: DIR/graph.json and DIR/weights.safetensors (BN folded,\n"
				   "                                u8 activations observed on the calibration inputs, s8 weights per\n"
				   "                                channel; --dynamic: linear layers, inputs quantized per run);\n"
				   "                                prints each layer, int8 or f32 with the reason"},
	{"fetch", cmd_fetch, "--server URL fetch KEY          download and verify an artifact into the local cache"},
	{"prefetch", cmd_prefetch, "--server URL prefetch MANIFEST  every artifact a manifest names into the local cache\n"
				   "                                (lines: KEY, or GRAPH.json [target=T] [opt=N] [precision=P]);\n"
				   "                                --server takes a tier list \"URL URL ...\", nearest first"},
	{"cache", cmd_cache, "cache stats|ls|gc|verify       inspect the local artifact cache (--cache-dir, --budget, --repair)"},
	{"keygen", cmd_keygen, "keygen NAME SECRET_FILE PUBLIC_FILE\n"
			       "                                an Ed25519 key pair for signed artifacts (secret mode 0600);\n"
			       "                                compile, run, check and fetch take --trusted-key NAME:BASE64\n"
			       "                                (repeatable), --trusted-keys-file F (else $COIL_TRUSTED_KEYS,\n"
			       "                                $COIL_TRUSTED_KEYS_FILE) and --sign-key F ($COIL_SIGN_KEY_FILE)"},
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
	/* --server URL may come before the command too (or $COIL_SERVER). */
	opts o = {.server = getenv("COIL_SERVER")};
	if (o.server && !*o.server)
		o.server = NULL;
	int first = 1;
	while (first < argc && (!strcmp(argv[first], "--server") || !strncmp(argv[first], "--server=", 9))) {
		o.server = argv[first][8] == '=' ? argv[first] + 9 : first + 1 < argc ? argv[first + 1] : NULL;
		first += argv[first][8] == '=' ? 1 : 2;
	}
	if (first >= argc || (!o.server && first > 1))
		return usage_err(first >= argc ? "a command must follow --server URL" : "--server needs a URL");
	const char *cmd = argv[first];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
		return cmd_help(NULL);
	for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
		if (!strcmp(cmd, commands[i].name)) {
			if (parse_opts(argc - first - 1, argv + first + 1, &o))
				return 2;
			int rc = commands[i].fn == cmd_keygen || commands[i].fn == cmd_help ? 0 : load_keys(&o);
			if (rc == 0)
				rc = commands[i].fn(&o);
			trust_free(o.trust);
			sign_key_free(o.signer);
			return rc;
		}
	fprintf(stderr, "%s: unknown command '%s' (see 'coil help')\n", prog, cmd);
	return 2;
}
