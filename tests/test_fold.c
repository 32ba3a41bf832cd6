/* Folding and in-place tests (codegen/fold.c, codegen/memplan.c): graphs
 * compiled to shared objects, run through the artifact ABI at one or more
 * batch sizes and compared with the reference interpreter; what was folded
 * (describe's folded_constants, folded_params, create_kernels, kernels) and
 * the arena's size are checked too, against COIL_FOLD=0 / COIL_INPLACE=0
 * builds where that says more. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "coil/artifact.h"
#include "common/interp.h"

static char tmpdir[] = "/tmp/coil-fold-XXXXXX";
static int sos;

typedef struct art {
	void *h;
	coil_graph *g;
	int (*create)(const void *const *, int, int, coil_model **);
	int (*run)(coil_model *, const void *const *, const int64_t *const *, void *const *);
	int (*oshape)(coil_model *, const int64_t *const *, int, int64_t *);
	void (*destroy)(coil_model *);
	const char *(*describe)(void);
	const char *(*lasterr)(void);
	char *src; /* the generated C */
} art;

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

#define G(ins, params, consts, nodes, outs)                                                                  \
	"{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[" ins "],\"params\":[" params "],\"constants\":[" \
	consts "],\"nodes\":[" nodes "],\"outputs\":[" outs "]}"
#define T(name, dt, shape) "{\"name\":\"" name "\",\"dtype\":\"" dt "\",\"shape\":" shape "}"
#define C(name, dt, shape, data) "{\"name\":\"" name "\",\"dtype\":\"" dt "\",\"shape\":" shape ",\"data\":" data "}"
#define ND(id, op, args, out) "{\"id\":\"" id "\",\"op\":\"" op "\",\"args\":" args ",\"outputs\":[\"" out "\"]}"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

/* Compiles json for target (NULL: generic) into a, keeping the C. */
static void compile_for(const char *json, const char *target, art *a)
{
	coil_err err = {0};
	memset(a, 0, sizeof *a);
	a->g = graph_parse(json, strlen(json), &err);
	if (!a->g)
		fail_msg("parse: %s\n%s", err.msg, json);
	char so[160], cpath[160];
	snprintf(so, sizeof so, "%s/m%d.so", tmpdir, sos);
	snprintf(cpath, sizeof cpath, "%s/m%d.c", tmpdir, sos++);
	codegen_opts o = {.opt = "-O1", .werror = 1, .target = target ? target : "generic", .keep_c = cpath};
	codegen_result res;
	if (codegen_compile(a->g, &o, so, &res, &err))
		fail_msg("compile: %s\n%s", err.msg, json);
	a->src = slurp(cpath);
	unlink(cpath);
	a->h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	unlink(so);
	assert_non_null(a->src);
	if (!a->h)
		fail_msg("dlopen: %s", dlerror());
	*(void **)&a->create = dlsym(a->h, "coil_model_create");
	*(void **)&a->run = dlsym(a->h, "coil_model_run");
	*(void **)&a->oshape = dlsym(a->h, "coil_model_output_shape");
	*(void **)&a->destroy = dlsym(a->h, "coil_model_destroy");
	*(void **)&a->describe = dlsym(a->h, "coil_artifact_describe");
	*(void **)&a->lasterr = dlsym(a->h, "coil_model_last_error");
	assert_true(a->create && a->run && a->oshape && a->destroy && a->describe && a->lasterr);
}

static void compile(const char *json, art *a) { compile_for(json, NULL, a); }

static void release(art *a)
{
	dlclose(a->h);
	graph_free(a->g);
	free(a->src);
}

/* The buffers without restrict (", float *a<N>") that the kernel functions'
 * definitions take, in all. */
static int unrestricted(const char *src)
{
	int all = 0;
	for (const char *l = strstr(src, "\nCOIL_KFN "); l; l = strstr(l + 1, "\nCOIL_KFN ")) {
		const char *e = strchr(l + 1, '\n');
		for (const char *p = strstr(l, ", float *a"); p && (!e || p < e); p = strstr(p + 1, ", float *a"))
			all++;
	}
	return all;
}

/* A number in describe's JSON: "key": N or "key": "N". */
static long long desc(const art *a, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\": ", key);
	const char *p = strstr(a->describe(), pat);
	if (!p)
		fail_msg("describe lacks %s: %s", key, a->describe());
	p += strlen(pat);
	return strtoll(p + (*p == '"'), NULL, 10);
}

/* params of conv stacks: vectors in [0.5, 1.5) (batch norms' variances),
 * weights in [-0.25, 0.25) (activations stay near 1 through the stack) */
static int conv_params;

static void fill(const coil_value *v, const int64_t *syms, coil_tensor *t)
{
	coil_err err;
	t->dtype = v->dtype;
	t->rank = v->rank;
	for (int i = 0; i < v->rank; i++)
		assert_int_equal(dim_eval(&v->shape[i], syms, &t->shape[i], &err), 0);
	int64_t n = tensor_numel(t);
	t->data = malloc((size_t)(n ? n : 1) * dtype_size(v->dtype));
	for (int64_t e = 0; e < n; e++)
		dtype_store(v->dtype, t->data, (size_t)e,
			    !dtype_is_float(v->dtype)                  ? (double)((int)(urand() * 5))
			    : !conv_params || v->kind != VAL_PARAM ? urand() * 4 - 2
			    : v->rank == 1                         ? urand() + 0.5
								   : urand() * 0.5 - 0.25);
}

/* Runs a at batch (symbol s0) and the interpreter on the same data; the
 * outputs must agree.  Returns the run's status (0, or -1 with its error
 * message in errbuf when the compiled run fails). */
static int check_at(art *a, int64_t batch, char *errbuf)
{
	coil_graph *g = a->g;
	int64_t syms[8] = {batch, 1, 1, 1, 1, 1, 1, 1};
	coil_tensor in[8] = {0}, par[16] = {0}, ref[8] = {0}, got[8] = {0};
	const void *inp[8], *pp[16];
	const int64_t *shp[8];
	void *outp[8];
	coil_err err = {0};
	int rc = 0;
	assert_true(g->ninputs <= 8 && g->nparams <= 16 && g->noutputs <= 8);
	for (int i = 0; i < g->ninputs; i++) {
		fill(&g->vals[g->inputs[i]], syms, &in[i]);
		inp[i] = in[i].data;
		shp[i] = in[i].shape;
	}
	for (int i = 0; i < g->nparams; i++) {
		fill(&g->vals[g->params[i]], syms, &par[i]);
		pp[i] = par[i].data;
	}
	int iref = interp_run(g, in, par, ref, &err);
	coil_model *m = NULL;
	if (a->create(pp, g->nparams, 2, &m))
		fail_msg("create: %s", a->lasterr());
	/* the caller's params may go away after create */
	for (int i = 0; i < g->nparams; i++)
		memset(par[i].data, 0xff, tensor_bytes(&par[i]));
	for (int j = 0; j < g->noutputs; j++) {
		got[j].rank = a->oshape(m, shp, j, got[j].shape);
		got[j].dtype = g->vals[g->outputs[j]].dtype;
		got[j].data = calloc((size_t)tensor_numel(&got[j]) + 1, dtype_size(got[j].dtype));
		outp[j] = got[j].data;
	}
	if (a->run(m, inp, shp, outp)) {
		snprintf(errbuf, 256, "%s", a->lasterr());
		rc = -1;
		assert_int_not_equal(iref, 0); /* the interpreter fails too */
	} else {
		if (iref)
			fail_msg("interp: %s", err.msg);
		for (int j = 0; j < g->noutputs; j++) {
			assert_int_equal(got[j].rank, ref[j].rank);
			int64_t n = tensor_numel(&ref[j]);
			for (int64_t e = 0; e < n; e++) {
				double r = dtype_load(ref[j].dtype, ref[j].data, (size_t)e);
				double x = dtype_load(got[j].dtype, got[j].data, (size_t)e);
				if (!(fabs(r - x) <= 1e-5 * (1 + fabs(r))) && !(isnan(r) && isnan(x)))
					fail_msg("batch %lld output %d elem %lld: got %.9g, want %.9g", (long long)batch, j,
						 (long long)e, x, r);
			}
		}
	}
	a->destroy(m);
	for (int i = 0; i < 16; i++)
		tensor_free(&par[i]);
	for (int i = 0; i < 8; i++) {
		tensor_free(&in[i]);
		tensor_free(&ref[i]);
		tensor_free(&got[i]);
	}
	return rc;
}

static void check(art *a)
{
	char e[256];
	assert_int_equal(check_at(a, 1, e), 0);
	assert_int_equal(check_at(a, 3, e), 0);
}

/* Compiles with an environment switch set to "0" (COIL_FOLD, COIL_INPLACE). */
static void compile_without(const char *sw, const char *json, art *a)
{
	setenv(sw, "0", 1);
	compile(json, a);
	unsetenv(sw);
}

/* --- compile-time folding ------------------------------------------------ */

/* c*c + 1 (constants only) folds to one constant: the run adds it to x. */
static const char *const const_chain =
	G(T("x", "f32", "[\"b\",8]"), "", C("c", "f32", "[8]", "[1,2,3,4,5,6,7,8]"),
	  ND("n0", "aten.mul.Tensor", "[\"c\",\"c\"]", "cc") "," ND("n1", "aten.add.Scalar", "[\"cc\", 1]", "cc1") ","
	  ND("n2", "aten.sqrt.default", "[\"cc1\"]", "r") "," ND("n3", "aten.add.Tensor", "[\"x\",\"r\"]", "y"),
	  "\"y\"");

static void test_const_chain(void **state)
{
	(void)state;
	art a, b;
	compile(const_chain, &a);
	assert_int_equal(desc(&a, "folded_constants"), 1);
	assert_int_equal(desc(&a, "folded_params"), 0);
	assert_int_equal(desc(&a, "kernels"), 1);
	/* the folded values are in the artifact: sqrt(c*c + 1) */
	assert_non_null(strstr(a.src, "{1.41421354f, 2.23606801f, 3.1622777f,"));
	check(&a);
	compile_without("COIL_FOLD", const_chain, &b);
	assert_int_equal(desc(&b, "folded_constants"), 0);
	assert_null(strstr(b.src, "1.41421354f"));
	check(&b);
	release(&a);
	release(&b);
}

/* exp(c) of a scalar folds; its expand to 64x128 (and a multiply there)
 * would be 8192 elements from one: they stay loops in the run. */
static const char *const const_big =
	G(T("x", "f32", "[64,128]"), "", C("c", "f32", "[]", "[0.5]"),
	  ND("n0", "aten.exp.default", "[\"c\"]", "e") "," ND("n1", "aten.expand.default", "[\"e\", [64,128]]", "big") ","
	  ND("n2", "aten.mul.Tensor", "[\"big\",\"c\"]", "m") "," ND("n3", "aten.add.Tensor", "[\"x\",\"m\"]", "y"),
	  "\"y\"");

static void test_const_size_rule(void **state)
{
	(void)state;
	art a;
	compile(const_big, &a);
	assert_int_equal(desc(&a, "folded_constants"), 1);
	assert_null(strstr(a.src, "[8192]"));
	assert_non_null(strstr(a.src, "c1[1] = {1.64872122f}"));
	check(&a);
	release(&a);
}

/* A fill after a template reads only the template's shape and dtype: Swin's
 * shifted-window mask, new_zeros(x) with slices assigned, permuted, is a
 * constant, and so is zeros_like(x) + 3; the run is the two products. */
static const char *const const_template =
	G(T("x", "f32", "[2,4,4]"), "", "",
	  ND("n0", "aten.new_zeros.default", "[\"x\", [4,4]]", "z") ","
	  ND("n1", "aten.full.default", "[[2,4], 1.5]", "f") ","
	  ND("n2", "aten.slice_scatter.default", "[\"z\", \"f\", 0, 1, 3]", "s") ","
	  ND("n3", "aten.permute.default", "[\"s\", [1,0]]", "t") ","
	  ND("n4", "aten.mul.Tensor", "[\"x\",\"t\"]", "y") ","
	  ND("n5", "aten.zeros_like.default", "[\"x\"]", "zl") ","
	  ND("n6", "aten.add.Scalar", "[\"zl\", 3]", "three") ","
	  ND("n7", "aten.mul.Tensor", "[\"x\",\"three\"]", "y2"),
	  "\"y\",\"y2\"");

static void test_const_template(void **state)
{
	(void)state;
	art a;
	compile(const_template, &a);
	assert_int_equal(desc(&a, "folded_constants"), 2);
	assert_int_equal(desc(&a, "kernels"), 2); /* a loop for each product */
	assert_null(strstr(a.src, "slice_scatter"));
	check(&a);
	release(&a);
}

/* A constant-only gather out of range: the interpreter cannot fold it, so
 * the run reports the error, as without folding. */
static const char *const const_bad =
	G(T("x", "f32", "[2,3]"), "", C("e", "f32", "[2,3]", "[1,2,3,4,5,6]") "," C("i", "i64", "[2]", "[0,7]"),
	  ND("n0", "aten.embedding.default", "[\"e\",\"i\"]", "q") "," ND("n1", "aten.add.Tensor", "[\"x\",\"q\"]", "y"),
	  "\"y\"");

static void test_const_interp_error(void **state)
{
	(void)state;
	art a;
	char e[256] = "";
	compile(const_bad, &a);
	assert_int_equal(desc(&a, "folded_constants"), 0);
	assert_int_equal(check_at(&a, 1, e), -1);
	assert_non_null(strstr(e, "embedding"));
	release(&a);
}

/* Constants of 256 elements and more are emitted as string bytes: a user
 * constant (f32 and i64) and a folded one (c * 2), read by the run. */
static void test_large_constants(void **state)
{
	(void)state;
	size_t cap = 64 * 1024, len = 0;
	char *j = malloc(cap);
	assert_non_null(j);
	len += (size_t)snprintf(j + len, cap - len, "{\"format\":\"coil-graph\",\"version\":1,\"inputs\":["
				T("x", "f32", "[300]") "],\"params\":[],\"constants\":["
				"{\"name\":\"c\",\"dtype\":\"f32\",\"shape\":[300],\"data\":[");
	for (int i = 0; i < 300; i++)
		len += (size_t)snprintf(j + len, cap - len, "%s%g", i ? "," : "", i * 0.37 - 50);
	len += (size_t)snprintf(j + len, cap - len, "]},{\"name\":\"k\",\"dtype\":\"i64\",\"shape\":[300],\"data\":[");
	for (int i = 0; i < 300; i++)
		len += (size_t)snprintf(j + len, cap - len, "%s%d", i ? "," : "", i * 7919 % 1000 - 500);
	snprintf(j + len, cap - len, "]}],\"nodes\":[" ND("n0", "aten.mul.Scalar", "[\"c\", 2]", "c2") ","
		 ND("n1", "aten.add.Tensor", "[\"x\",\"c2\"]", "a") "," ND("n2", "aten.mul.Tensor", "[\"a\",\"k\"]", "y")
		 "],\"outputs\":[\"y\"]}");
	art a;
	compile(j, &a);
	assert_int_equal(desc(&a, "folded_constants"), 1);
	assert_non_null(strstr(a.src, "unsigned char b[1201];"));
	assert_non_null(strstr(a.src, "unsigned char b[2401];"));
	check(&a);
	release(&a);
	free(j);
}

/* --- create-time folding ------------------------------------------------- */

/* t(w) * s feeding a matrix product, at a symbolic batch: computed once at
 * create (w and s are then not kept); f32 runs on oneDNN, f64 on loops. */
#define WEIGHT_MM(dt)                                                                                      \
	G(T("x", dt, "[\"b\",6]"), T("w", dt, "[8,6]") "," T("s", dt, "[8]"), "",                               \
	  ND("n0", "aten.t.default", "[\"w\"]", "wt") "," ND("n1", "aten.mul.Tensor", "[\"wt\",\"s\"]", "ws") "," \
	  ND("n2", "aten.mm.default", "[\"x\",\"ws\"]", "y"), "\"y\"")

static void test_weight_matmul(void **state)
{
	(void)state;
	static const char *const gs[] = {WEIGHT_MM("f32"), WEIGHT_MM("f64")};
	for (int i = 0; i < 2; i++) {
		art a, b;
		compile(gs[i], &a);
		assert_int_equal(desc(&a, "folded_params"), 1);
		assert_int_equal(desc(&a, "folded_bytes"), 6 * 8 * (i ? 8 : 4));
		assert_true(desc(&a, "create_kernels") >= 1);
		assert_int_equal(desc(&a, "kernels"), 1); /* the product alone */
		assert_non_null(strstr(a.src, "fold_kfn0(&x"));
		check(&a);
		compile_without("COIL_FOLD", gs[i], &b);
		assert_int_equal(desc(&b, "folded_params"), 0);
		assert_int_equal(desc(&b, "create_kernels"), 0);
		assert_true(desc(&b, "kernels") > 1);
		/* peak_bytes "K*s0+C": the weights create keeps (the folded 6x8,
		 * not w and s) and the arena are in C */
		const char *pa = strstr(a.describe(), "\"peak_bytes\": \""), *pb = strstr(b.describe(), "\"peak_bytes\": \"");
		assert_true(pa && pb && strchr(pa, '+') && strchr(pb, '+'));
		assert_int_equal(strtoll(strchr(pa, '+') + 1, NULL, 10), 6 * 8 * (i ? 8 : 4));
		assert_true(strtoll(strchr(pb, '+') + 1, NULL, 10) > (6 * 8 + 8) * (i ? 8 : 4));
		check(&b);
		release(&a);
		release(&b);
	}
}

/* A relative-position bias (Swin's): a param table gathered by a constant index
 * (600 rows of 8, more than twice the index's elements), viewed and permuted to
 * [8, 20, 30], added to the input.  Weights are computed once, at create: the
 * gathered bias folds (4800 elements, under FOLD_MIN_WEIGHT_ELEMS) and the run
 * reads it contiguously.  Its expand to [4, 8, 20, 30] (19200) folds too; an expand
 * past FOLD_MIN_WEIGHT_ELEMS, to [16, 8, 20, 30] (76800), stays a loop. */
static void test_weight_gather(void **state)
{
	(void)state;
	for (int big = 0; big < 3; big++) {
		size_t cap = 64 * 1024, len = 0;
		char *j = malloc(cap);
		assert_non_null(j);
		const char *x = big == 0 ? "[8,20,30]" : big == 1 ? "[4,8,20,30]" : "[16,8,20,30]";
		len += (size_t)snprintf(j + len, cap - len, "{\"format\":\"coil-graph\",\"version\":1,\"inputs\":["
					"{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":%s}],\"params\":["
					T("t", "f32", "[40,8]") "],\"constants\":["
					"{\"name\":\"k\",\"dtype\":\"i64\",\"shape\":[600],\"data\":[", x);
		for (int i = 0; i < 600; i++)
			len += (size_t)snprintf(j + len, cap - len, "%s%d", i ? "," : "", i * 7919 % 40);
		snprintf(j + len, cap - len, "]}],\"nodes\":["
			 ND("n0", "aten.embedding.default", "[\"t\",\"k\"]", "g") ","
			 ND("n1", "aten.view.default", "[\"g\", [20,30,8]]", "v") ","
			 ND("n2", "aten.permute.default", "[\"v\", [2,0,1]]", "p") ","
			 ND("n3", "aten.expand.default", "[\"p\", %s]", "e") ","
			 ND("n4", "aten.add.Tensor", "[\"x\",\"e\"]", "y") "],\"outputs\":[\"y\"]}", x);
		art a;
		compile(j, &a);
		assert_int_equal(desc(&a, "folded_params"), 1);
		assert_int_equal(desc(&a, "folded_bytes"), (big == 1 ? 4 : 1) * 8 * 20 * 30 * 4);
		assert_int_equal(desc(&a, "kernels"), 1);
		check(&a);
		release(&a);
		free(j);
	}
}

/* A transposed weight read by a pointwise op and a bias summed from a
 * weight: both computed at create; the run is one kernel. */
static const char *const weight_pw =
	G(T("x", "f32", "[\"b\",8,8]"), T("w", "f32", "[8,8]") "," T("v", "f32", "[5,8]"), "",
	  ND("n0", "aten.permute.default", "[\"w\", [1,0]]", "wt") "," ND("n1", "aten.mul.Tensor", "[\"x\",\"wt\"]", "m") ","
	  ND("n2", "aten.sum.dim_IntList", "[\"v\", [0]]", "bias") "," ND("n3", "aten.add.Tensor", "[\"m\",\"bias\"]", "y"),
	  "\"y\"");

static void test_weight_pointwise(void **state)
{
	(void)state;
	art a;
	compile(weight_pw, &a);
	assert_int_equal(desc(&a, "folded_params"), 2);
	assert_int_equal(desc(&a, "create_kernels"), 2);
	assert_int_equal(desc(&a, "kernels"), 1);
	assert_int_equal(desc(&a, "folded_bytes"), (8 * 8 + 8) * 4);
	check(&a);
	release(&a);
}

/* A sum or mean over the middle dims of a buffer, [b][rows][cols] to [b][cols]
 * (codegen/emit_c.c's emit_colsum, the prelude's coil_colsum) against the
 * interpreter at batch 1 (two threads, one block: the rows cut in two) and 3:
 * columns in registers (8, 13, 40, 64: every vector count, tails), in an L1
 * array (72, 200) and in two blocks (2100); 0 (a mean of none: NaN), 1, 3 or 5
 * rows (a partial group of four); keepdim; a sum; over two middle dims. */
static void test_colsum(void **state)
{
	(void)state;
	static const struct { const char *shape, *op, *args; } cs[] = {
		{"[\"b\",5,8]", "aten.mean.dim", "[1], false"},     {"[\"b\",3,13]", "aten.mean.dim", "[1], false"},
		{"[\"b\",5,40]", "aten.sum.dim_IntList", "[1], false"}, {"[\"b\",1,64]", "aten.mean.dim", "[1], true"},
		{"[\"b\",6,72]", "aten.mean.dim", "[1], false"},     {"[\"b\",7,200]", "aten.sum.dim_IntList", "[1], true"},
		{"[\"b\",3,2100]", "aten.mean.dim", "[1], false"},   {"[\"b\",3,4,24]", "aten.mean.dim", "[1, 2], false"},
		{"[\"b\",0,8]", "aten.mean.dim", "[1], false"}, /* no rows: 0 / 0, NaN as the interpreter's */
	};
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
		char json[1024];
		snprintf(json, sizeof json,
			 G(T("x", "f32", "%s"), "", "", "{\"id\":\"m\",\"op\":\"%s\",\"args\":[\"x\", %s],\"outputs\":[\"y\"]}",
			   "\"y\""),
			 cs[i].shape, cs[i].op, cs[i].args);
		art a;
		compile(json, &a);
		if (!strstr(a.src, "coil_colsum(a"))
			fail_msg("case %zu: no coil_colsum call", i);
		check(&a);
		release(&a);
	}
}

/* Only part folds: c*c at compile time, s + c*c at create; x * that + w in
 * the run (w read directly, not folded). */
static const char *const mixed =
	G(T("x", "f32", "[\"b\",8]"), T("s", "f32", "[8]") "," T("w", "f32", "[8]"), C("c", "f32", "[8]", "[1,2,3,4,5,6,7,8]"),
	  ND("n0", "aten.mul.Tensor", "[\"c\",\"c\"]", "cc") "," ND("n1", "aten.add.Tensor", "[\"s\",\"cc\"]", "sc") ","
	  ND("n2", "aten.mul.Tensor", "[\"x\",\"sc\"]", "m") "," ND("n3", "aten.add.Tensor", "[\"m\",\"w\"]", "y"),
	  "\"y\"");

static void test_mixed(void **state)
{
	(void)state;
	art a;
	compile(mixed, &a);
	assert_int_equal(desc(&a, "folded_constants"), 1);
	assert_int_equal(desc(&a, "folded_params"), 1);
	assert_int_equal(desc(&a, "folded_bytes"), 32);
	assert_int_equal(desc(&a, "kernels"), 1);
	check(&a);
	release(&a);
}

/* addmm(b, x, t(w)) in f32: oneDNN reads w transposed itself, so t(w) is
 * not folded into a copy. */
static const char *const linear =
	G(T("x", "f32", "[\"b\",8]"), T("w", "f32", "[5,8]") "," T("bias", "f32", "[5]"), "",
	  ND("n0", "aten.t.default", "[\"w\"]", "wt") "," ND("n1", "aten.addmm.default", "[\"bias\",\"x\",\"wt\"]", "y"),
	  "\"y\"");

static void test_linear_not_folded(void **state)
{
	(void)state;
	const char *sw = getenv("COIL_DNNL");
	art a;
	compile(linear, &a);
	if (!(sw && !strcmp(sw, "0")))
		assert_int_equal(desc(&a, "folded_params"), 0);
	check(&a);
	release(&a);
}

/* --- in place ------------------------------------------------------------ */

/* r and a are arena buffers; b = relu(a*2 + 1) is a pointwise kernel's
 * output (cat reads it) and the last reader of a: it takes a's slot. */
#define INPLACE(mid, cat)                                                                                    \
	G(T("x", "f32", "[16,16]"), "", "",                                                                    \
	  ND("n0", "aten.roll.default", "[\"x\", [1], [0]]", "r") ","                                         \
	  ND("n1", "aten.roll.default", "[\"x\", [2], [1]]", "a") "," mid ","                                 \
	  ND("n5", "aten.cat.default", "[" cat ", 0]", "y"), "\"y\"")
#define CHAIN                                                                                                \
	ND("n2", "aten.mul.Scalar", "[\"a\", 2]", "a2") "," ND("n3", "aten.add.Scalar", "[\"a2\", 1]", "a3") "," \
	ND("n4", "aten.relu.default", "[\"a3\"]", "b")

static void test_inplace(void **state)
{
	(void)state;
	static const char *const targets[] = {"generic", "native"};
	const char *g = INPLACE(CHAIN, "[\"b\",\"r\"]");
	for (int t = 0; t < 2; t++) {
		art a, b;
		compile_for(g, targets[t], &a);
		setenv("COIL_INPLACE", "0", 1);
		compile_for(g, targets[t], &b);
		unsetenv("COIL_INPLACE");
		/* two 1 KiB buffers alive at once instead of three */
		assert_int_equal(desc(&a, "arena_bytes"), 2 * 1024);
		assert_int_equal(desc(&b, "arena_bytes"), 3 * 1024);
		/* the function of the kernel writing in place takes both buffers
		 * without restrict (and shares with no kernel that does not) */
		assert_int_equal(unrestricted(a.src), 2);
		assert_int_equal(unrestricted(b.src), 0);
		check(&a);
		check(&b);
		release(&a);
		release(&b);
	}
}

/* Where in place must not happen; results stay right and the arena is what
 * it is without in place. */
static void test_inplace_refused(void **state)
{
	(void)state;
	static const char *const gs[] = {
		/* a is read again later (by cat) */
		INPLACE(CHAIN, "[\"b\",\"a\",\"r\"]"),
		/* a is a graph output */
		"{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[" T("x", "f32", "[16,16]") "],\"params\":[],"
		"\"nodes\":[" ND("n0", "aten.roll.default", "[\"x\", [1], [0]]", "r") ","
		ND("n1", "aten.roll.default", "[\"x\", [2], [1]]", "a") "," CHAIN ","
		ND("n5", "aten.cat.default", "[[\"b\",\"r\"], 0]", "y") "],\"outputs\":[\"y\",\"a\"]}",
		/* a is read transposed: same size, other elements */
		INPLACE(ND("n2", "aten.t.default", "[\"a\"]", "at") "," ND("n4", "aten.mul.Scalar", "[\"at\", 2]", "b"),
			"[\"b\",\"r\"]"),
		/* a is read at the element written and transposed */
		INPLACE(ND("n2", "aten.t.default", "[\"a\"]", "at") "," ND("n4", "aten.add.Tensor", "[\"a\",\"at\"]", "b"),
			"[\"b\",\"r\"]"),
		/* a is broadcast (a row of it read for every row of b) */
		"{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[" T("x", "f32", "[16,16]") "," T("z", "f32", "[16,16]")
		"],\"params\":[],\"nodes\":[" ND("n0", "aten.roll.default", "[\"x\", [1], [0]]", "r") ","
		ND("n1", "aten.sum.dim_IntList", "[\"x\", [0], true]", "a") ","
		ND("n2", "aten.roll.default", "[\"a\", [3], [1]]", "ar") ","
		ND("n4", "aten.add.Tensor", "[\"z\",\"ar\"]", "b") ","
		ND("n5", "aten.cat.default", "[[\"b\",\"r\"], 0]", "y") "],\"outputs\":[\"y\"]}",
	};
	for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) {
		art a, b;
		compile(gs[i], &a);
		compile_without("COIL_INPLACE", gs[i], &b);
		check(&a);
		if (desc(&a, "arena_bytes") != desc(&b, "arena_bytes"))
			fail_msg("case %zu: arena %lld, without in place %lld", i, desc(&a, "arena_bytes"),
				 desc(&b, "arena_bytes"));
		assert_int_equal(unrestricted(a.src), 0);
		release(&a);
		release(&b);
	}
}

/* --- oneDNN fusions: residual in place, params only oneDNN reads ---------- */

#define ND2(id, op, args, o1, o2) \
	"{\"id\":\"" id "\",\"op\":\"" op "\",\"args\":" args ",\"outputs\":[" o1 "," o2 "]}"
#define CONV(id, x, w, y) ND(id, "aten.convolution.default", "[\"" x "\", \"" w "\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", y)
#define BN(id, x, k, y) \
	ND2(id, "aten.native_batch_norm.default", "[\"" x "\", \"g" k "\", \"b" k "\", \"m" k "\", \"v" k "\", false, 0.1, 1e-5]", \
	    "\"" y "\"", "null,null")
#define BNP(k) T("g" k, "f32", "[8]") "," T("b" k, "f32", "[8]") "," T("m" k, "f32", "[8]") "," T("v" k, "f32", "[8]")
/* r = relu(conv(x)); a residual block on r: conv, bn, relu, conv, bn,
 * add(r), relu = y; then TAIL reading y (and r), outputs OUTS. */
#define RESBLOCK(batch, tail, outs)                                                                          \
	G(T("x", "f32", "[" batch ",8,8,8]"),                                                                  \
	  T("w0", "f32", "[8,8,3,3]") "," T("w1", "f32", "[8,8,3,3]") "," T("w2", "f32", "[8,8,3,3]") ","        \
	  T("w3", "f32", "[8,8,3,3]") "," BNP("1") "," BNP("2"), "",                                             \
	  CONV("c0", "x", "w0", "c0") "," ND("r", "aten.relu.default", "[\"c0\"]", "r") ","                   \
	  CONV("c1", "r", "w1", "c1") "," BN("n1", "c1", "1", "n1") "," ND("a1", "aten.relu.default", "[\"n1\"]", "a1") "," \
	  CONV("c2", "a1", "w2", "c2") "," BN("n2", "c2", "2", "n2") ","                                        \
	  ND("s", "aten.add.Tensor", "[\"n2\", \"r\"]", "s") "," ND("y", "aten.relu.default", "[\"s\"]", "y")   \
	  tail, outs)

/* Fusions whose residual sum runs in place: ps (the post-op operands) holds
 * the dst the call passes.  -1 when a fusion has other tensor operands. */
static int sums_in_place(const char *src)
{
	int n = 0;
	for (const char *p = src; (p = strstr(p, "const void *const ps[")); p++) {
		char res[32], dst[32];
		const char *call = strstr(p, "_run((rt_");
		if (!call || sscanf(strchr(p, '{') + 1, "%31[^,}]", res) != 1 ||
		    sscanf(strchr(call, ']') + 1, ", %*[^,], %31[^,]", dst) != 1)
			return -1;
		n += !strcmp(res, dst);
	}
	return n;
}

static int dnnl_off(void)
{
	const char *sw = getenv("COIL_DNNL");
	return sw && !strcmp(sw, "0");
}

/* The residual r (relu(conv(x)) is an arena intermediate the block's second
 * conv reads last: the fusion's output takes r's slot and the rt gets the
 * same buffer as dst and residual (no copy).  NHWC inside a conv chain, at
 * an NCHW boundary (y read by cat), and not when r is read again. */
static void test_residual_in_place(void **state)
{
	(void)state;
	if (dnnl_off()) {
		print_message("# COIL_DNNL=0: no oneDNN lowering to check\n");
		skip();
	}
	static const struct {
		const char *g, *layout;
		int in_place;
	} cs[] = {
		{RESBLOCK("1", "," CONV("c3", "y", "w3", "o"), "\"o\""), "dd.channels_last = 1", 1},
		{RESBLOCK("1", "," ND("z", "aten.cat.default", "[[\"y\", \"x\"], 1]", "z"), "\"z\""), "dd.src_nhwc = 1", 1},
		/* y is an output: the caller's buffer, the rt copies r into it */
		{RESBLOCK("1", "", "\"y\""), "dd.src_nhwc = 1", 0},
		{RESBLOCK("1", "," ND("z", "aten.cat.default", "[[\"y\", \"r\"], 1]", "z"), "\"z\""), NULL, 0},
		/* a symbolic batch: the same, slots laid out at run time */
		{RESBLOCK("\"b\"", "," CONV("c3", "y", "w3", "o"), "\"o\""), "dd.channels_last = 1", 1},
	};
	conv_params = 1;
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
		art a, b;
		compile(cs[i].g, &a);
		compile_without("COIL_INPLACE", cs[i].g, &b);
		if (cs[i].layout && !strstr(a.src, cs[i].layout))
			fail_msg("case %zu: no %s", i, cs[i].layout);
		if (sums_in_place(a.src) != cs[i].in_place || sums_in_place(b.src) != 0)
			fail_msg("case %zu: %d sums in place (%d without in place), want %d", i, sums_in_place(a.src),
				 sums_in_place(b.src), cs[i].in_place);
		check(&a);
		check(&b);
		/* [1,8,8,8] f32 is 2 KiB: r, conv1's and conv2's outputs alive at
		 * once without in place, two of them with */
		if (i < 2) {
			assert_int_equal(desc(&a, "arena_bytes"), 2 * 2048);
			assert_int_equal(desc(&b, "arena_bytes"), 3 * 2048);
		} else if (i == 2 || i == 3) {
			assert_int_equal(desc(&a, "arena_bytes"), desc(&b, "arena_bytes"));
		}
		release(&a);
		release(&b);
	}
	conv_params = 0;
}

/* Without symbols, params only oneDNN reads (conv weights, batch norms
 * folded into them) are read from the caller's during create and not kept:
 * peak_bytes is below params + arena (check() overwrites the caller's params
 * after create).  With a symbolic batch the objects are built at the first
 * run of each batch size, so create keeps them. */
static void test_params_dropped(void **state)
{
	(void)state;
	if (dnnl_off()) {
		print_message("# COIL_DNNL=0: no oneDNN lowering to check\n");
		skip();
	}
	const long long params = (4 * 8 * 8 * 9 + 8 * 8) * 4, out = 8 * 8 * 8 * 4;
	conv_params = 1;
	art a, b;
	compile(RESBLOCK("1", "," CONV("c3", "y", "w3", "o"), "\"o\""), &a);
	compile(RESBLOCK("\"b\"", "," CONV("c3", "y", "w3", "o"), "\"o\""), &b);
	long long arena = desc(&a, "arena_bytes");
	if (desc(&a, "peak_bytes") != arena + out)
		fail_msg("static: peak %lld, arena %lld, params %lld", desc(&a, "peak_bytes"), arena, params);
	assert_null(strstr(a.src, "memcpy(m->par["));
	assert_non_null(strstr(a.src, "m->par[0] = (void *)params[0];"));
	check(&a);
	/* peak_bytes "K*s0+C": the kept params are in C */
	const char *pb = strstr(b.describe(), "\"peak_bytes\": \"");
	assert_true(pb && strchr(pb, '+'));
	assert_true(strtoll(strchr(pb, '+') + 1, NULL, 10) >= params);
	assert_non_null(strstr(b.src, "memcpy(m->par[0]"));
	check(&b); /* batch 1, then 3 */
	release(&a);
	release(&b);
	conv_params = 0;
}

/* Two relu kernels of the same text, one in place (r1 is not read again)
 * and one not (cat reads r2): they do not share a function, whose buffers
 * would be restrict for one and aliased for the other; without in place
 * they do. */
static void test_inplace_not_shared(void **state)
{
	(void)state;
	const char *g = G(T("x", "f32", "[16,16]"), "", "",
			  ND("n0", "aten.roll.default", "[\"x\", [1], [0]]", "r1") ","
			  ND("n1", "aten.relu.default", "[\"r1\"]", "a1") ","
			  ND("n2", "aten.roll.default", "[\"a1\", [1], [0]]", "r2") ","
			  ND("n3", "aten.relu.default", "[\"r2\"]", "a2") ","
			  ND("n4", "aten.cat.default", "[[\"a2\",\"r2\"], 0]", "y"),
			  "\"y\"");
	art a, b;
	compile(g, &a);
	compile_without("COIL_INPLACE", g, &b);
	assert_int_equal(unrestricted(a.src), 2);
	assert_int_equal(unrestricted(b.src), 0);
	assert_int_equal(desc(&a, "kernels"), desc(&b, "kernels"));
	assert_int_equal(desc(&a, "functions"), desc(&b, "functions") + 1);
	check(&a);
	check(&b);
	release(&a);
	release(&b);
}

/* r1 -> a1 = relu(r1) in place, then a1 -> b = a1 * roll(a1) in place: a1
 * is aliased in both kernels, restrict in neither. */
static void test_inplace_chain(void **state)
{
	(void)state;
	const char *g = G(T("x", "f32", "[16,16]"), "", "",
			  ND("n0", "aten.roll.default", "[\"x\", [1], [0]]", "r1") ","
			  ND("n1", "aten.relu.default", "[\"r1\"]", "a1") ","
			  ND("n2", "aten.roll.default", "[\"a1\", [1], [1]]", "r2") ","
			  ND("n3", "aten.mul.Tensor", "[\"a1\",\"r2\"]", "b") ","
			  ND("n4", "aten.roll.default", "[\"b\", [1], [0]]", "y"),
			  "\"y\"");
	art a, b;
	compile(g, &a);
	compile_without("COIL_INPLACE", g, &b);
	assert_int_equal(unrestricted(a.src), 4);
	assert_int_equal(unrestricted(b.src), 0);
	assert_true(desc(&a, "arena_bytes") < desc(&b, "arena_bytes"));
	check(&a);
	check(&b);
	release(&a);
	release(&b);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rmdir(tmpdir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_const_chain),
		cmocka_unit_test(test_const_size_rule),
		cmocka_unit_test(test_const_template),
		cmocka_unit_test(test_const_interp_error),
		cmocka_unit_test(test_large_constants),
		cmocka_unit_test(test_weight_matmul),
		cmocka_unit_test(test_weight_gather),
		cmocka_unit_test(test_weight_pointwise),
		cmocka_unit_test(test_colsum),
		cmocka_unit_test(test_mixed),
		cmocka_unit_test(test_linear_not_folded),
		cmocka_unit_test(test_inplace),
		cmocka_unit_test(test_inplace_refused),
		cmocka_unit_test(test_residual_in_place),
		cmocka_unit_test(test_params_dropped),
		cmocka_unit_test(test_inplace_not_shared),
		cmocka_unit_test(test_inplace_chain),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
