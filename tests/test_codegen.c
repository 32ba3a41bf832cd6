/* codegen tests: compile small graphs to shared objects, run them through the
 * artifact ABI and compare with the reference interpreter. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "codegen/dnnl.h"
#include "coil/artifact.h"
#include "common/interp.h"
#include "tests/chains.h"

static char tmpdir[] = "/tmp/coil-test-XXXXXX";
static int sos;

typedef struct art {
	void *h;
	int (*create)(const void *const *, int, int, coil_model **);
	int (*run)(coil_model *, const void *const *, const int64_t *const *, void *const *);
	int (*oshape)(coil_model *, const int64_t *const *, int, int64_t *);
	void (*destroy)(coil_model *);
	const char *(*describe)(void);
	const char *(*lasterr)(void);
} art;

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* When set, float inputs and params take these values (cycled) instead of
 * random ones, and integer ones take forced_ints. */
static const double *forced;
static int nforced;
static const int64_t *forced_ints;
static int nforced_ints;
static int64_t fpos; /* position in the cycle, across tensors */
/* When set, outputs must equal the interpreter's bit for bit (NaN for NaN). */
static int exact;
/* When set, float params are in [0.5, 1.5) (batch norm variances > 0). */
static int positive_params;

/* Random tensor for value v at the given symbol values. */
static void fill_tensor(const coil_graph *g, const coil_value *v, const int64_t *syms, coil_tensor *t)
{
	coil_err err;
	t->dtype = v->dtype;
	t->rank = v->rank;
	for (int i = 0; i < v->rank; i++)
		assert_int_equal(dim_eval(&v->shape[i], syms, &t->shape[i], &err), 0);
	int64_t n = tensor_numel(t);
	t->data = malloc((size_t)(n ? n : 1) * dtype_size(v->dtype));
	for (int64_t e = 0; e < n; e++) {
		if (nforced && dtype_is_float(v->dtype)) {
			dtype_store(v->dtype, t->data, (size_t)e, forced[fpos++ % nforced]);
			continue;
		}
		if (nforced_ints && dtype_is_int(v->dtype)) {
			dtype_store(v->dtype, t->data, (size_t)e, (double)forced_ints[fpos++ % nforced_ints]);
			continue;
		}
		double x = v->dtype == COIL_BOOL ? (double)(rnd() & 1)
			   : dtype_is_int(v->dtype) ? (double)(rnd() % 5)
			   : positive_params && v->kind == VAL_PARAM ? urand() + 0.5
						     : urand() * 4 - 2;
		dtype_store(v->dtype, t->data, (size_t)e, x);
	}
	(void)g;
}

/* When set, compile for this target (test_simd_targets). */
static const char *force_target;
static int force_units;          /* codegen_opts.units for the next compiles */
static codegen_result last_res;  /* of the last compile */
static coil_tensor kept[16];     /* with keep set: the last run's outputs */
static int keep;

static int compile_json(const char *json, art *a, coil_graph **gout)
{
	coil_err err = {0};
	coil_graph *g = graph_parse(json, strlen(json), &err);
	if (!g) {
		print_error("parse: %s\n%s\n", err.msg, json);
		return -1;
	}
	char so[128];
	snprintf(so, sizeof so, "%s/m%d.so", tmpdir, sos++);
	/* COIL_TEST_OPT / COIL_TEST_TARGET: rerun the suite at another level or target */
	const char *opt = getenv("COIL_TEST_OPT"), *tgt = getenv("COIL_TEST_TARGET");
	codegen_opts o = {.opt = opt ? opt : "-O1", .werror = 1,
			  .target = force_target ? force_target : tgt ? tgt : "generic", .units = force_units};
	codegen_result res;
	if (codegen_compile(g, &o, so, &res, &err)) {
		print_error("compile: %s\n%s\n", err.msg, json);
		graph_free(g);
		return -1;
	}
	last_res = res;
	a->h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	unlink(so);
	if (!a->h) {
		print_error("dlopen: %s\n", dlerror());
		graph_free(g);
		return -1;
	}
	*(void **)&a->create = dlsym(a->h, "coil_model_create");
	*(void **)&a->run = dlsym(a->h, "coil_model_run");
	*(void **)&a->oshape = dlsym(a->h, "coil_model_output_shape");
	*(void **)&a->destroy = dlsym(a->h, "coil_model_destroy");
	*(void **)&a->describe = dlsym(a->h, "coil_artifact_describe");
	*(void **)&a->lasterr = dlsym(a->h, "coil_model_last_error");
	if (!a->create || !a->run || !a->oshape || !a->destroy || !a->describe || !a->lasterr) {
		print_error("artifact lacks an ABI function\n");
		dlclose(a->h);
		graph_free(g);
		return -1;
	}
	if (!strstr(a->describe(), "\"peak_bytes\": \"")) {
		print_error("describe lacks peak_bytes: %s\n", a->describe());
		dlclose(a->h);
		graph_free(g);
		return -1;
	}
	*gout = g;
	return 0;
}

/* Runs a compiled graph and the interpreter with the same random data;
 * symbol values from syms.  Returns 0 when all outputs match. */
static int check_run(coil_graph *g, art *a, const int64_t *syms, const char *json)
{
	coil_tensor in[16] = {0}, par[16] = {0}, ref[16] = {0}, got[16] = {0};
	const void *inp[16], *pp[16];
	const int64_t *shp[16];
	void *outp[16];
	coil_err err = {0};
	int bad = 0;
	for (int i = 0; i < g->ninputs; i++) {
		fill_tensor(g, &g->vals[g->inputs[i]], syms, &in[i]);
		inp[i] = in[i].data;
		shp[i] = in[i].shape;
	}
	for (int i = 0; i < g->nparams; i++) {
		fill_tensor(g, &g->vals[g->params[i]], syms, &par[i]);
		pp[i] = par[i].data;
	}
	if (interp_run(g, in, par, ref, &err)) {
		print_error("interp: %s\n", err.msg);
		bad = 1;
		goto out;
	}
	coil_model *m = NULL;
	if (a->create(pp, g->nparams, 2, &m)) {
		print_error("create: %s\n", a->lasterr());
		bad = 1;
		goto out;
	}
	for (int j = 0; j < g->noutputs; j++) {
		int r = a->oshape(m, shp, j, got[j].shape);
		assert_int_equal(r, ref[j].rank);
		got[j].rank = r;
		got[j].dtype = ref[j].dtype;
		for (int d = 0; d < r; d++)
			assert_int_equal(got[j].shape[d], ref[j].shape[d]);
		got[j].data = calloc((size_t)tensor_numel(&got[j]) + 1, dtype_size(got[j].dtype));
		outp[j] = got[j].data;
	}
	if (a->run(m, inp, shp, outp)) {
		print_error("run: %s\n", a->lasterr());
		bad = 1;
	}
	a->destroy(m);
	/* A reduction's rounding error grows with the number of terms and their
	 * size, not with its result, which cancellation can make tiny: allow
	 * 1e-5 * max|input| * sqrt(k) more for an output of n elements computed
	 * from inputs of up to k*n elements. */
	int64_t nin = 1;
	double xin = 0;
	for (int i = 0; i < g->ninputs + g->nparams; i++) {
		const coil_tensor *t = i < g->ninputs ? &in[i] : &par[i - g->ninputs];
		int64_t tn = tensor_numel(t);
		nin = tn > nin ? tn : nin;
		for (int64_t e = 0; e < tn && dtype_is_float(t->dtype); e++) {
			double v = fabs(dtype_load(t->dtype, t->data, (size_t)e));
			if (isfinite(v) && v > xin)
				xin = v;
		}
	}
	for (int j = 0; j < g->noutputs && !bad; j++) {
		int64_t n = tensor_numel(&ref[j]);
		double k = (double)nin / (double)(n > 0 ? n : 1);
		double extra = k > 1 ? 1e-5 * xin * sqrt(k) : 0;
		double mag = 0;
		for (int64_t e = 0; e < n; e++) {
			double r = dtype_load(ref[j].dtype, ref[j].data, (size_t)e);
			if (isfinite(r) && fabs(r) > mag)
				mag = fabs(r);
		}
		/* bf16 and f16: the interpreter computes in double, the kernels in
		 * float, each rounding once to the result's type; the two may land
		 * on neighbouring values of it */
		double eps = 0; /* and so may any float result computed from them */
		for (int v = 0; v < g->nvals; v++)
			eps = g->vals[v].dtype == COIL_BF16 ? 1.0 / 128 : g->vals[v].dtype == COIL_F16 && !eps ? 1.0 / 1024 : eps;
		for (int64_t e = 0; e < n && !bad; e++) {
			double r = dtype_load(ref[j].dtype, ref[j].data, (size_t)e);
			double x = dtype_load(got[j].dtype, got[j].data, (size_t)e);
			if ((isnan(r) && isnan(x)) || (r == x && signbit(r) == signbit(x)))
				continue;
			if (eps && dtype_is_float(ref[j].dtype) && !exact && fabs(r - x) <= eps * ((mag > 1 ? mag : 1) + fabs(r)) + extra)
				continue;
			/* exact: f32 and integers bit for bit; f64 to a few ulps (the
			 * interpreter computes in long double) */
			if ((exact && ref[j].dtype != COIL_F64) ||
			    !(fabs(r - x) <= (exact ? 1e-13 : 1e-5) * ((mag > 1 ? mag : 1) + fabs(r)) + (exact ? 0 : extra))) {
				print_error("output %d elem %lld: got %.17g, want %.17g\n%s\n", j, (long long)e, x, r, json);
				bad = 1;
			}
		}
	}
out:
	for (int i = 0; i < 16; i++) {
		tensor_free(&in[i]);
		tensor_free(&par[i]);
		tensor_free(&ref[i]);
		if (keep) {
			tensor_free(&kept[i]);
			kept[i] = got[i];
		} else {
			tensor_free(&got[i]);
		}
	}
	return bad ? -1 : 0;
}

/* Compile and check at one or two symbol bindings. */
static int check_graph(const char *json, int nbind, const int64_t syms[][8])
{
	art a;
	coil_graph *g;
	if (compile_json(json, &a, &g))
		return -1;
	int rc = 0;
	static const int64_t one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	if (nbind == 0)
		rc = check_run(g, &a, one, json);
	for (int i = 0; i < nbind && !rc; i++)
		rc = check_run(g, &a, syms[i], json);
	dlclose(a.h);
	graph_free(g);
	return rc;
}

#define G(ins, params, nodes, outs)                                                                        \
	"{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[" ins "],\"params\":[" params "],\"nodes\":[" nodes \
	"],\"outputs\":[" outs "]}"
#define T(name, dt, shape) "{\"name\":\"" name "\",\"dtype\":\"" dt "\",\"shape\":" shape "}"
#define ND(id, op, args, out) "{\"id\":\"" id "\",\"op\":\"" op "\",\"args\":" args ",\"outputs\":[\"" out "\"]}"

static const char *const fixed[] = {
	/* pointwise chain */
	G(T("x", "f32", "[3,5]"), "", ND("a", "aten.relu", "[\"x\"]", "r") "," ND("b", "aten.exp", "[\"r\"]", "e") ","
	  ND("c", "aten.mul.Tensor", "[\"e\",\"x\"]", "y"), "\"y\""),
	/* broadcasting with params, scalar ops */
	G(T("x", "f32", "[4,1,7]"), T("w", "f32", "[6,1]"),
	  ND("a", "aten.add.Tensor", "[\"x\",\"w\"]", "s") "," ND("b", "aten.mul.Scalar", "[\"s\", 2.5]", "y") ","
	  ND("c", "aten.sigmoid", "[\"y\"]", "z"), "\"z\",\"s\""),
	/* activations */
	G(T("x", "f32", "[33]"), "",
	  ND("a", "aten.gelu", "[\"x\"]", "g") "," ND("b", "aten.silu", "[\"g\"]", "s") "," ND("c", "aten.hardswish", "[\"s\"]", "h") ","
	  ND("d", "aten.tanh", "[\"h\"]", "t") "," ND("e", "aten.leaky_relu", "[\"t\", 0.2]", "l") ","
	  ND("f", "aten.elu", "[\"l\"]", "u") "," ND("g2", "aten.clamp", "[\"u\", -0.5, 0.7]", "v") ","
	  ND("h2", "aten.hardtanh", "[\"x\"]", "w") "," ND("i", "aten.gelu", "[\"w\"]", "w2"),
	  "\"v\",\"w2\""),
	/* softmax and log_softmax */
	G(T("x", "f32", "[4,37]"), "", ND("a", "aten._softmax", "[\"x\", 1, false]", "y") ","
	  ND("b", "aten._log_softmax", "[\"x\", 0, false]", "z"), "\"y\",\"z\""),
	/* layer norm */
	G(T("x", "f32", "[3,5,16]"), T("w", "f32", "[16]") "," T("b", "f32", "[16]"),
	  ND("a", "aten.layer_norm", "[\"x\", [16], \"w\", \"b\", 1e-5]", "y"), "\"y\""),
	/* batch norm */
	G(T("x", "f32", "[2,3,4,5]"), T("w", "f32", "[3]") "," T("b", "f32", "[3]") "," T("m", "f32", "[3]") "," T("v", "f32", "[3]"),
	  ND("a", "aten.batch_norm", "[\"x\", \"w\", \"b\", \"m\", \"v\", false, 0.1, 1e-5, false]", "y"), "\"y\""),
	/* views feeding pointwise */
	G(T("x", "f32", "[2,3,4]"), "",
	  ND("a", "aten.permute", "[\"x\", [2,0,1]]", "p") "," ND("b", "aten.reshape", "[\"p\", [4,6]]", "r") ","
	  ND("c", "aten.slice.Tensor", "[\"r\", 1, 1, 5, 2]", "s") "," ND("d", "aten.neg", "[\"s\"]", "y") ","
	  ND("e", "aten.t", "[\"y\"]", "z") "," ND("f", "aten.select.int", "[\"x\", 1, -1]", "q") ","
	  ND("g", "aten.unsqueeze", "[\"q\", 0]", "u") "," ND("h", "aten.expand", "[\"u\", [3,2,4]]", "w"),
	  "\"z\",\"w\""),
	/* reductions */
	G(T("x", "f32", "[5,6,7]"), "",
	  ND("a", "aten.sum.dim_IntList", "[\"x\", [1]]", "s") "," ND("b", "aten.mean.dim", "[\"x\", [0,2], true]", "m") ","
	  ND("c", "aten.amax", "[\"x\", [2]]", "mx") "," ND("d", "aten.var.correction", "[\"x\", [1]]", "v") ","
	  ND("e", "aten.argmax", "[\"x\", 1]", "am") "," ND("f", "aten.sum", "[\"x\"]", "tot") ","
	  ND("g", "aten.amin", "[\"x\", [0]]", "mn"),
	  "\"s\",\"m\",\"mx\",\"v\",\"am\",\"tot\",\"mn\""),
	/* max.dim two results, norm */
	G(T("x", "f32", "[4,9]"), "",
	  "{\"id\":\"a\",\"op\":\"aten.max.dim\",\"args\":[\"x\",1],\"outputs\":[\"mv\",\"mi\"]}," ND("b", "aten.norm.ScalarOpt_dim", "[\"x\", 2, [1]]", "n"),
	  "\"mv\",\"mi\",\"n\""),
	/* matmul family and extern inputs through views */
	G(T("x", "f32", "[3,8]"), T("w", "f32", "[5,8]") "," T("b", "f32", "[5]"),
	  ND("a", "aten.t", "[\"w\"]", "wt") "," ND("b2", "aten.addmm", "[\"b\", \"x\", \"wt\"]", "y") ","
	  ND("c", "aten.relu", "[\"y\"]", "z") "," ND("d", "aten.mm", "[\"z\", \"w\"]", "q"), "\"q\""),
	G(T("x", "f32", "[2,3,4]") "," T("y", "f32", "[2,4,5]"), "", ND("a", "aten.bmm", "[\"x\", \"y\"]", "z"), "\"z\""),
	/* cat, pad, embedding */
	G(T("x", "f32", "[2,3]") "," T("y", "f32", "[2,4]") "," T("i", "i64", "[5]"), T("e", "f32", "[5,3]"),
	  ND("a", "aten.cat", "[[\"x\", \"y\"], 1]", "c") "," ND("b", "aten.constant_pad_nd", "[\"c\", [1,2,0,1], 0.5]", "p") ","
	  ND("d", "aten.embedding", "[\"e\", \"i\"]", "q"), "\"p\",\"q\""),
	/* dtypes: masks, comparisons, where, casts, integer ops */
	G(T("x", "f32", "[4,5]") "," T("m", "bool", "[5]") "," T("k", "i64", "[4,1]"), "",
	  ND("a", "aten.gt.Scalar", "[\"x\", 0.1]", "g") "," ND("b", "aten.logical_and", "[\"g\", \"m\"]", "am") ","
	  ND("c", "aten.where.self", "[\"am\", \"x\", \"k\"]", "w") "," ND("d", "aten.masked_fill.Scalar", "[\"w\", \"m\", -1.5]", "f") ","
	  ND("e", "aten.add.Tensor", "[\"k\", \"k\"]", "kk") "," ND("f2", "aten.mul.Tensor", "[\"kk\", \"x\"]", "y") ","
	  ND("g2", "aten._to_copy", "[\"y\"], \"kwargs\":{\"dtype\":\"i64\"}", "yi"),
	  "\"f\",\"yi\",\"am\""),
	/* size-1 dims, rank 0 */
	G(T("x", "f32", "[1,1,3]") "," T("s", "f32", "[]"), "",
	  ND("a", "aten.add.Tensor", "[\"x\", \"s\"]", "y") "," ND("b", "aten.sum.dim_IntList", "[\"y\", [0,1], true]", "z") ","
	  ND("c", "aten._softmax", "[\"s\", 0, false]", "q"), "\"z\",\"q\",\"x\""),
};

static void test_fixed(void **state)
{
	(void)state;
	int fails = 0;
	for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
		if (check_graph(fixed[i], 0, NULL))
			fails++, print_error("fixed graph %zu failed\n", i);
	assert_int_equal(fails, 0);
}

static void test_symbolic_batch(void **state)
{
	(void)state;
	static const int64_t b[2][8] = {{1, 1}, {7, 1}};
	const char *j = G(T("x", "f32", "[\"batch\",6]"), T("w", "f32", "[6]"),
			  ND("a", "aten.mul.Tensor", "[\"x\", \"w\"]", "y") "," ND("b", "aten._softmax", "[\"y\", 1, false]", "s") ","
			  ND("c", "aten.layer_norm", "[\"s\", [6]]", "l") "," ND("d", "aten.sum.dim_IntList", "[\"l\", [0]]", "t") ","
			  ND("e", "aten.view", "[\"l\", [\"batch*6\"]]", "f") "," ND("f2", "aten.exp", "[\"f\"]", "g"),
			  "\"s\",\"t\",\"g\"");
	assert_int_equal(check_graph(j, 2, b), 0);
}

static int nkernels(const char *j)
{
	coil_err err;
	coil_graph *g = graph_parse(j, strlen(j), &err);
	assert_non_null(g);
	codegen_result res;
	codegen_opts o = {.target = "generic"};
	assert_int_equal(codegen_compile(g, &o, NULL, &res, &err), 0);
	graph_free(g);
	return res.nkernels;
}

/* One model handle (2 threads) run at the bindings b[0..n), `rounds` times
 * over, each run against the interpreter (within 1e-3 of the output's
 * largest magnitude: oneDNN's Winograd convs round differently). */
static void one_handle(const char *json, const int64_t (*b)[8], size_t n, int rounds)
{
	art a;
	coil_graph *g;
	assert_int_equal(compile_json(json, &a, &g), 0);
	coil_tensor par[8] = {0};
	const void *pp[8];
	assert_true(g->nparams <= 8 && g->noutputs <= 4);
	for (int i = 0; i < g->nparams; i++) {
		fill_tensor(g, &g->vals[g->params[i]], b[0], &par[i]);
		pp[i] = par[i].data;
	}
	coil_model *hm = NULL;
	assert_int_equal(a.create(pp, g->nparams, 2, &hm), 0);
	for (int round = 0; round < rounds; round++)
		for (size_t i = 0; i < n; i++) {
			coil_tensor in = {0}, ref[4] = {0};
			coil_err err = {0};
			fill_tensor(g, &g->vals[g->inputs[0]], b[i], &in);
			assert_int_equal(interp_run(g, &in, par, ref, &err), 0);
			const void *inp[1] = {in.data};
			const int64_t *shp[1] = {in.shape};
			void *outp[4];
			for (int j = 0; j < g->noutputs; j++)
				outp[j] = calloc((size_t)tensor_numel(&ref[j]) + 1, dtype_size(ref[j].dtype));
			if (a.run(hm, inp, shp, outp))
				fail_msg("run at binding %zu: %s", i, a.lasterr());
			for (int j = 0; j < g->noutputs; j++) {
				double mag = 1;
				for (int64_t e = 0; e < tensor_numel(&ref[j]); e++)
					mag = fmax(mag, fabs(dtype_load(ref[j].dtype, ref[j].data, (size_t)e)));
				for (int64_t e = 0; e < tensor_numel(&ref[j]); e++) {
					double r = dtype_load(ref[j].dtype, ref[j].data, (size_t)e);
					double x = dtype_load(ref[j].dtype, outp[j], (size_t)e);
					if (!(fabs(r - x) <= 1e-3 * mag))
						fail_msg("round %d binding %zu output %d elem %lld: %g vs %g", round, i, j,
							 (long long)e, x, r);
				}
				free(outp[j]);
				tensor_free(&ref[j]);
			}
			tensor_free(&in);
		}
	a.destroy(hm);
	for (int i = 0; i < 8; i++)
		tensor_free(&par[i]);
	dlclose(a.h);
	graph_free(g);
}

/* softmax and layer norm are one kernel each (and together, one kernel). */
static void test_softmax_one_kernel(void **state)
{
	(void)state;
	assert_int_equal(nkernels(G(T("x", "f32", "[4,10]"), "", ND("a", "aten._softmax", "[\"x\", 1, false]", "y"), "\"y\"")), 1);
	assert_int_equal(nkernels(G(T("x", "f32", "[4,10]"), T("w", "f32", "[10]"),
				    ND("b", "aten.layer_norm", "[\"x\", [10], \"w\"]", "z"), "\"z\"")), 1);
	assert_int_equal(nkernels(G(T("x", "f32", "[4,10]"), "", ND("a", "aten.relu", "[\"x\"]", "r") ","
				    ND("b", "aten.exp", "[\"r\"]", "e") "," ND("c", "aten.neg", "[\"e\"]", "y"), "\"y\"")), 1);
}

/* --- extern kernels: pooling, roll, convolution ------------------------------ */

/* A node with two results (either may be null). */
#define ND2(id, op, args, o1, o2) \
	"{\"id\":\"" id "\",\"op\":\"" op "\",\"args\":" args ",\"outputs\":[" o1 "," o2 "]}"

/* Checks each graph, bit for bit against the interpreter. */
static int check_all(const char *const *graphs, size_t n, const char *what)
{
	int fails = 0;
	exact = 1;
	for (size_t i = 0; i < n; i++)
		if (check_graph(graphs[i], 0, NULL))
			fails++, print_error("%s graph %zu failed\n", what, i);
	exact = 0;
	return fails;
}

/* Checks each graph against the interpreter within the float tolerance
 * (f32 convolutions and matrix products run on oneDNN, which sums in its
 * own order). */
static int check_close(const char *const *graphs, size_t n, const char *what)
{
	int fails = 0;
	for (size_t i = 0; i < n; i++)
		if (check_graph(graphs[i], 0, NULL))
			fails++, print_error("%s graph %zu failed\n", what, i);
	return fails;
}

/* A costly value read through a broadcast is computed once (fuse.c's third
 * bound): a squeeze-excite gate sigmoid(g) of [N, C, 1, 1] scaling x of [N, C,
 * H, W] is a kernel of its own, not an exp and a division per pixel; a cheap
 * one (g + 1) and one of x's own shape stay inlined, and layer norm stays one
 * kernel.  Each against the interpreter. */
#define SE_IN T("x", "f32", "[2,24,9,9]") "," T("g", "f32", "[2,24,1,1]") "," T("h", "f32", "[2,24,9,9]")
static void test_broadcast_recompute(void **state)
{
	(void)state;
	static const char *const graphs[] = {
		G(SE_IN, "", ND("a", "aten.sigmoid", "[\"g\"]", "s") "," ND("b", "aten.mul.Tensor", "[\"x\", \"s\"]", "y"),
		  "\"y\""),
		G(SE_IN, "", ND("a", "aten.add.Scalar", "[\"g\", 1]", "s") "," ND("b", "aten.mul.Tensor", "[\"x\", \"s\"]", "y"),
		  "\"y\""),
		G(SE_IN, "", ND("a", "aten.sigmoid", "[\"h\"]", "s") "," ND("b", "aten.mul.Tensor", "[\"x\", \"s\"]", "y"),
		  "\"y\""),
		/* the gate's exp once, the SiLU's per element: two kernels */
		G(SE_IN, "", ND("a", "aten.silu", "[\"x\"]", "u") "," ND("b", "aten.sigmoid", "[\"g\"]", "s") ","
		  ND("c", "aten.mul.Tensor", "[\"u\", \"s\"]", "y"), "\"y\""),
		G(T("x", "f32", "[4,40]"), T("w", "f32", "[40]"), ND("b", "aten.layer_norm", "[\"x\", [40], \"w\"]", "z"),
		  "\"z\""),
	};
	static const int want[] = {2, 1, 1, 2, 1};
	for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++)
		if (nkernels(graphs[i]) != want[i])
			fail_msg("graph %zu: %d kernels, want %d", i, nkernels(graphs[i]), want[i]);
	assert_int_equal(check_close(graphs, sizeof graphs / sizeof *graphs, "broadcast recompute"), 0);
}

/* A squeeze-excite block: x -> depthwise conv -> silu -> * s -> 1x1 conv of o
 * channels (sescale.c).  N images of c channels, hw x hw; s of n (N or 1)
 * images; with a bias or not. */
#define SE_BLOCK(N, n, c, hw, o, bias) \
	G(T("x", "f32", "[" #N "," #c "," #hw "," #hw "]") "," T("g", "f32", "[" #n "," #c ",1,1]"), \
	  T("wd", "f32", "[" #c ",1,3,3]") "," T("wp", "f32", "[" #o "," #c ",1,1]") "," T("bp", "f32", "[" #o "]"), \
	  ND("a", "aten.convolution", "[\"x\", \"wd\", null, [1,1], [1,1], [1,1], false, [0,0], " #c "]", "y0") "," \
	  ND("b", "aten.silu", "[\"y0\"]", "y") "," ND("c", "aten.sigmoid", "[\"g\"]", "s") "," \
	  ND("d", "aten.mul.Tensor", "[\"y\", \"s\"]", "u") "," \
	  ND("e", "aten.convolution", "[\"u\", \"wp\", " bias ", [1,1], [0,0], [1,1], false, [0,0], 1]", "z"), "\"z\"")

/* What the pipeline prints of graph j for target after pass (--dump-after). */
static char *dumped(const char *j, const char *target, const char *pass)
{
	coil_err err;
	coil_graph *g = graph_parse(j, strlen(j), &err);
	assert_non_null(g);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	codegen_opts o = {.target = target, .dump_after = pass, .dump_file = f};
	assert_int_equal(codegen_compile(g, &o, NULL, NULL, &err), 0);
	fclose(f);
	graph_free(g);
	return buf;
}

/* Whether the pipeline's print of graph j after fold has text */
static int fold_has(const char *j, const char *text)
{
	char *buf = dumped(j, "generic", "fold");
	int r = strstr(buf, text) != NULL;
	free(buf);
	return r;
}

/* ... a bmm (the scale in the weights) */
static int has_bmm(const char *j) { return fold_has(j, "aten.bmm"); }

/* The scale of a squeeze-excite block folded into the 1x1 conv after it, per
 * image, where the pass it saves is the larger (and not otherwise), each
 * against the interpreter. */
static void test_se_scale(void **state)
{
	(void)state;
	static const char *const graphs[] = {
		SE_BLOCK(1, 1, 48, 56, 12, "\"bp\""), SE_BLOCK(2, 2, 48, 40, 24, "null"),
		SE_BLOCK(3, 1, 48, 32, 4, "\"bp\""),
		SE_BLOCK(1, 1, 48, 56, 25, "\"bp\""), /* 25 of 48 channels: the pass after would cost more */
		SE_BLOCK(1, 1, 48, 32, 8, "null"),      /* 48 x 32 x 32: below SE_MIN_ELEMS */
		SE_BLOCK(1, 1, 1024, 12, 40, "null"),   /* more weights than 12 x 12 pixels pay for */
	};
	static const int want[] = {1, 1, 1, 0, 0, 0};
	for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++)
		if (has_bmm(graphs[i]) != want[i])
			fail_msg("graph %zu: rewritten %d, want %d", i, !want[i], want[i]);
	assert_int_equal(check_close(graphs, sizeof graphs / sizeof *graphs, "se scale"), 0);
	setenv("COIL_SE_SCALE", "0", 1);
	assert_int_equal(has_bmm(graphs[0]), 0);
	unsetenv("COIL_SE_SCALE");
}

static const char *const pools[] = {
	/* f32: max with and without indices, ceil_mode, padding, dilation; avg with
	 * count_include_pad on/off, ceil_mode, divisor_override; adaptive with
	 * non-divisible sizes; a max pool whose indices nobody reads */
	G(T("x", "f32", "[2,3,9,11]"), "",
	  ND2("a", "aten.max_pool2d_with_indices", "[\"x\", [3,3], [2,2], [1,1]]", "\"m1\"", "\"i1\"") ","
	  ND("b", "aten.max_pool2d", "[\"x\", [3,2], [2,3], [1,0], [2,1], true]", "m2") ","
	  ND2("c", "aten.max_pool2d_with_indices", "[\"x\", [2,2], [], [0,0], [1,1], true]", "\"m3\"", "\"i3\"") ","
	  ND("d", "aten.avg_pool2d", "[\"x\", [3,3], [2,2], [1,1]]", "p1") ","
	  ND("e", "aten.avg_pool2d", "[\"x\", [3,3], [2,2], [1,1], true, false]", "p2") ","
	  ND("f", "aten.avg_pool2d", "[\"x\", [3,2], [2,2], [1,1], true, true]", "p3") ","
	  ND("g", "aten.avg_pool2d", "[\"x\", [2,3], [1,2], [0,1], false, true, 5]", "p4") ","
	  ND("h", "aten._adaptive_avg_pool2d", "[\"x\", [4,5]]", "a1") ","
	  ND("i", "aten.adaptive_avg_pool2d", "[\"x\", [1,1]]", "a2") ","
	  ND2("j", "aten.adaptive_max_pool2d", "[\"x\", [4,3]]", "\"am\"", "\"ai\"") ","
	  ND2("k", "aten.max_pool2d_with_indices", "[\"x\", [2,3], [1,2], [1,1]]", "\"m4\"", "null") ","
	  ND2("l", "aten.adaptive_max_pool2d", "[\"x\", [2,7]]", "null", "\"ai2\""),
	  "\"m1\",\"i1\",\"m2\",\"m3\",\"i3\",\"p1\",\"p2\",\"p3\",\"p4\",\"a1\",\"a2\",\"am\",\"ai\",\"m4\",\"ai2\""),
	/* i64 max pooling (ties: the first maximum wins); rank-3 inputs; adaptive
	 * pools larger than or equal to the input */
	G(T("x", "i64", "[1,2,6,7]") "," T("y", "f32", "[3,8,8]"), "",
	  ND2("a", "aten.max_pool2d_with_indices", "[\"x\", [3,3], [1,1], [1,1]]", "\"m1\"", "\"i1\"") ","
	  ND2("b", "aten.max_pool2d_with_indices", "[\"x\", [2,2], [2,2], [0,0], [1,1], true]", "\"m2\"", "\"i2\"") ","
	  ND("c", "aten.max_pool2d", "[\"y\", [2,2]]", "m3") ","
	  ND("d", "aten.avg_pool2d", "[\"y\", [3,3], [1,1], [1,1], false, false]", "p1") ","
	  ND2("e", "aten.adaptive_max_pool2d", "[\"y\", [3,5]]", "\"am\"", "\"ai\"") ","
	  ND("f", "aten._adaptive_avg_pool2d", "[\"y\", [8,8]]", "a1") ","
	  ND("g", "aten._adaptive_avg_pool2d", "[\"y\", [10,3]]", "a2"),
	  "\"m1\",\"i1\",\"m2\",\"i2\",\"m3\",\"p1\",\"am\",\"ai\",\"a1\",\"a2\""),
};

static void test_pooling(void **state)
{
	(void)state;
	assert_int_equal(check_all(pools, sizeof pools / sizeof *pools, "pooling"), 0);
	/* large enough to run in parallel, symbolic batch */
	static const int64_t b[2][8] = {{1}, {3}};
	assert_int_equal(check_graph(G(T("x", "f32", "[\"batch\",16,20,20]"), "",
				       ND2("a", "aten.max_pool2d_with_indices", "[\"x\", [3,3], [2,2], [1,1]]", "\"m\"", "\"i\"") ","
				       ND("b", "aten.avg_pool2d", "[\"x\", [2,2]]", "p") ","
				       ND("c", "aten._adaptive_avg_pool2d", "[\"x\", [3,3]]", "a"),
				       "\"m\",\"i\",\"p\",\"a\""), 2, b), 0);
}

/* microbatch.c: a graph whose images never meet compiled for 2 of its 4 and
 * run twice (the chunks' inputs and outputs at their offsets), by the rule
 * where an image's activations outweigh the params, else kept whole; graphs
 * that mix images are never split.  Each against the interpreter. */
#define MB_NET(N, V0)                                                                                             \
	G(T("x", "f32", "[" #N ",3,8,8]") "," T("y", "f32", "[" #N ",6]"),                                        \
	  T("w", "f32", "[6,3,3,3]") "," T("b", "f32", "[6]") "," T("g", "f32", "[6]") "," T("be", "f32", "[6]") "," \
	  T("mu", "f32", "[6]") "," T("va", "f32", "[6]") "," T("fw", "f32", "[5,6]") "," T("fb", "f32", "[5]"),    \
	  ND("a", "aten.convolution", "[\"x\", \"w\", \"b\", [1,1], [1,1], [1,1], false, [0,0], 1]", "c") ","        \
	  "{\"id\":\"n\",\"op\":\"aten.native_batch_norm.default\",\"args\":[\"c\",\"g\",\"be\",\"mu\",\"va\",false,0.1,1e-5]," \
	  "\"outputs\":[\"n\",\"sm\",\"sv\"]}," ND("r", "aten.relu", "[\"n\"]", "r") ","                             \
	  ND2("p", "aten.max_pool2d_with_indices", "[\"r\", [2,2], [2,2]]", "\"pm\"", "\"pi\"") ","                 \
	  ND("m", "aten.mean.dim", "[\"pm\", [2,3]]", "mm") "," ND("v", "aten.view", "[\"mm\", [" V0 ",6]]", "f") ","  \
	  ND("s", "aten.add.Tensor", "[\"f\", \"y\"]", "fs") "," ND("t", "aten.t", "[\"fw\"]", "ft") ","             \
	  ND("l", "aten.addmm", "[\"fb\", \"fs\", \"ft\"]", "o"), "\"o\",\"r\"")

static int microbatched(const char *j) { return fold_has(j, "# microbatch: 2 of 4 images a run"); }

static void test_microbatch(void **state)
{
	(void)state;
	static const char *const split[] = {MB_NET(4, "4"), MB_NET(4, "-1")};
	static const char *const whole[] = {
		MB_NET(3, "3"), /* 3 images do not make runs of 2 */
		/* images mixed: softmax, a view and a cat across dim 0, a sum of everything,
		 * a product with the batch as the right side, a [4, 6] param added */
		G(T("x", "f32", "[4,6]"), "", ND("a", "aten._softmax", "[\"x\", 0, false]", "y"), "\"y\""),
		G(T("x", "f32", "[4,6]"), "",
		  ND("a", "aten.view", "[\"x\", [2,12]]", "v") "," ND("b", "aten.relu", "[\"v\"]", "r") ","
		  ND("c", "aten.view", "[\"r\", [4,6]]", "y"), "\"y\""),
		G(T("x", "f32", "[4,6]"), "", ND("a", "aten.cat", "[[\"x\", \"x\"], 0]", "c") ","
		  ND("b", "aten.slice.Tensor", "[\"c\", 0, 2, 6]", "y"), "\"y\""),
		G(T("x", "f32", "[4,6]"), "", ND("a", "aten.sum", "[\"x\"]", "s") ","
		  ND("b", "aten.mul.Tensor", "[\"x\", \"s\"]", "y"), "\"y\""),
		G(T("x", "f32", "[4,6]"), "", ND("a", "aten.t", "[\"x\"]", "t") "," ND("b", "aten.mm", "[\"x\", \"t\"]", "y"),
		  "\"y\""),
		G(T("x", "f32", "[4,6]"), T("p", "f32", "[4,6]"), ND("a", "aten.add.Tensor", "[\"x\", \"p\"]", "y"), "\"y\""),
	};
	positive_params = 1;
	setenv("COIL_MICROBATCH", "2", 1);
	for (size_t i = 0; i < sizeof split / sizeof *split; i++)
		if (!microbatched(split[i]))
			fail_msg("graph %zu: not run 2 images at a time", i);
	for (size_t i = 0; i < sizeof whole / sizeof *whole; i++)
		if (microbatched(whole[i]))
			fail_msg("graph %zu: split, its images meet", i);
	assert_int_equal(check_close(split, sizeof split / sizeof *split, "microbatch"), 0);
	assert_int_equal(check_close(whole, sizeof whole / sizeof *whole, "microbatch, whole"), 0);
	setenv("COIL_MICROBATCH", "0", 1);
	assert_int_equal(microbatched(split[0]), 0);
	unsetenv("COIL_MICROBATCH");
	/* the rule: this net's activations fit the caches (test_microbatch_cut chunks larger ones), a
	 * wide linear layer's params outweigh them */
	assert_int_equal(microbatched(split[0]), 0);
	assert_int_equal(microbatched(G(T("x", "f32", "[4,64]"), T("w", "f32", "[256,64]") "," T("b", "f32", "[256]"),
					ND("t", "aten.t", "[\"w\"]", "t") "," ND("a", "aten.addmm", "[\"b\", \"x\", \"t\"]", "y"),
					"\"y\"")), 0);
	positive_params = 0;
}

/* The rule's cut (microbatch.c): two 1x1 convolutions with a residual whose
 * batch outputs ([4, 24, 128, 128], 6.3 MB) would stream through memory, then
 * a pool, a mean and a linear head.  The layers run 2 images at a time up to a
 * join of the mean's [4, 24] (the one value crossing there, the smallest past
 * the big layers; none between the convolutions, where the residual crosses
 * too), the head once on the batch, which may then mix images (a softmax over
 * it).  An output made before the cut leaves no cut: the whole graph in chunks
 * where its images never meet; activations that fit the caches are not
 * chunked.  Each against the interpreter. */
#define CUT_NET(HW, HEAD, OUTS)                                                                                   \
	G(T("x", "f32", "[4,8," #HW "," #HW "]"),                                                                   \
	  T("w1", "f32", "[24,8,1,1]") "," T("w2", "f32", "[24,24,1,1]") "," T("fw", "f32", "[10,24]") ","          \
	  T("fb", "f32", "[10]"),                                                                                  \
	  ND("a", "aten.convolution", "[\"x\", \"w1\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c1") ","     \
	  ND("b", "aten.relu", "[\"c1\"]", "r") ","                                                                \
	  ND("c", "aten.convolution", "[\"r\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c2") ","     \
	  ND("d", "aten.add.Tensor", "[\"c2\", \"r\"]", "s") ","                                                   \
	  ND2("e", "aten.max_pool2d_with_indices", "[\"s\", [4,4], [4,4]]", "\"pm\"", "\"pi\"") ","                \
	  ND("f", "aten.mean.dim", "[\"pm\", [2,3]]", "m") "," ND("g", "aten.t", "[\"fw\"]", "ft") ","              \
	  ND("h", "aten.addmm", "[\"fb\", \"m\", \"ft\"]", "o") HEAD, OUTS)

static void test_microbatch_cut(void **state)
{
	(void)state;
	static const char *const graphs[] = {
		CUT_NET(128, "," ND("i", "aten._softmax", "[\"o\", 0, false]", "y"), "\"y\""),
		CUT_NET(128, "", "\"o\""),
		CUT_NET(128, "", "\"o\",\"r\""),
		CUT_NET(64, "", "\"o\""),
	};
	const char *join = "coil.mb_join.internal f32[4, 24] %";
	assert_true(microbatched(graphs[0]) && fold_has(graphs[0], join));
	assert_true(microbatched(graphs[1]) && fold_has(graphs[1], join));
	assert_true(microbatched(graphs[2]) && !fold_has(graphs[2], "coil.mb_join"));
	assert_false(microbatched(graphs[3]));
	/* the convolutions at 2 images, the head's product on all 4 */
	assert_true(fold_has(graphs[0], "f32[2, 24, 128, 128]") && fold_has(graphs[0], "aten.addmm.default f32[4, 10]"));
	assert_int_equal(check_close(graphs, sizeof graphs / sizeof *graphs, "microbatch cut"), 0);
	/* forced chunks are the whole graph's or none: the softmax over the batch keeps it whole */
	setenv("COIL_MICROBATCH", "2", 1);
	assert_false(microbatched(graphs[0]));
	unsetenv("COIL_MICROBATCH");
}

/* NaN and infinities through max pooling, reductions and activations: the
 * compiled code and the interpreter agree element for element (NaN where
 * NaN). */
static void test_nan_semantics(void **state)
{
	(void)state;
	static const double v[] = {0.5, NAN, -1, 3, INFINITY, -INFINITY, 2, -0.0, 7, -3.5, NAN, 1, -2.5};
	forced = v;
	nforced = (int)(sizeof v / sizeof *v);
	fpos = 0;
	int rc = check_graph(G(T("x", "f32", "[1,2,5,5]"), "",
			       ND2("a", "aten.max_pool2d_with_indices", "[\"x\", [2,2], [1,1]]", "\"m\"", "\"mi\"") ","
			       ND2("b", "aten.adaptive_max_pool2d", "[\"x\", [2,3]]", "\"am\"", "\"ai\"") ","
			       ND("c", "aten.avg_pool2d", "[\"x\", [2,2]]", "p") ","
			       ND("d", "aten.hardsigmoid", "[\"x\"]", "hs") "," ND("e", "aten.hardswish", "[\"x\"]", "hw") ","
			       ND("f", "aten.hardtanh", "[\"x\", 0, 6]", "ht") "," ND("g", "aten.relu", "[\"x\"]", "r") ","
			       ND("h", "aten.clamp", "[\"x\", -1, 1]", "cl") "," ND("i", "aten.leaky_relu", "[\"x\"]", "lr") ","
			       ND("j", "aten.amax", "[\"x\", [3]]", "mx") "," ND("k", "aten.argmax", "[\"x\", 3]", "amx") ","
			       ND2("l", "aten.max_pool2d_with_indices", "[\"x\", [3,3], [1,1]]", "null", "\"mi3\"") ","
			       ND("n", "aten.elu", "[\"x\"]", "el"),
			       "\"m\",\"mi\",\"am\",\"ai\",\"p\",\"hs\",\"hw\",\"ht\",\"r\",\"cl\",\"lr\",\"mx\",\"amx\",\"mi3\",\"el\""),
			     0, NULL);
	forced = NULL;
	nforced = 0;
	assert_int_equal(rc, 0);
}

static const char *const rolls[] = {
	G(T("x", "f32", "[3,4,5]") "," T("y", "i64", "[7]"), "",
	  ND("a", "aten.roll", "[\"x\", [1], [1]]", "r1") "," ND("b", "aten.roll", "[\"x\", [-2, 7], [0, 2]]", "r2") ","
	  ND("c", "aten.roll", "[\"x\", [3, -1], [-1, -1]]", "r3") "," ND("d", "aten.roll", "[\"x\", [5]]", "r4") ","
	  ND("e", "aten.roll", "[\"x\", [-13]]", "r5") "," ND("f", "aten.roll", "[\"y\", [2], [0]]", "r6") ","
	  ND("g", "aten.roll", "[\"x\", [0], [0]]", "r7") "," ND("h", "aten.roll", "[\"x\", [4, 1], [1, 0]]", "r8"),
	  "\"r1\",\"r2\",\"r3\",\"r4\",\"r5\",\"r6\",\"r7\",\"r8\""),
};

static void test_roll(void **state)
{
	(void)state;
	assert_int_equal(check_all(rolls, sizeof rolls / sizeof *rolls, "roll"), 0);
}

/* conv args: input, weight, bias, stride, padding, dilation, transposed, output_padding, groups */
static const char *const convs[] = {
	/* 2d: stride/padding/dilation with bias, depthwise, 1x1, grouped,
	 * transposed (output_padding), grouped transposed with dilation */
	G(T("x", "f32", "[2,4,9,8]"),
	  T("w1", "f32", "[6,4,3,3]") "," T("b1", "f32", "[6]") "," T("w2", "f32", "[4,1,3,3]") "," T("w3", "f32", "[8,4,1,1]") ","
	  T("b3", "f32", "[8]") "," T("w4", "f32", "[6,2,3,2]") "," T("w5", "f32", "[4,3,3,3]") "," T("b5", "f32", "[3]") ","
	  T("w6", "f32", "[4,2,2,3]"),
	  ND("a", "aten.convolution", "[\"x\", \"w1\", \"b1\", [2,1], [1,2], [1,2], false, [0,0], 1]", "y1") ","
	  ND("b", "aten.convolution", "[\"x\", \"w2\", null, [1,1], [1,1], [1,1], false, [0,0], 4]", "y2") ","
	  ND("c", "aten.convolution", "[\"x\", \"w3\", \"b3\", [1], [0], [1], false, [0], 1]", "y3") ","
	  ND("d", "aten.convolution", "[\"x\", \"w4\", null, [2,2], [0,0], [2,1], false, [0,0], 2]", "y4") ","
	  ND("e", "aten.convolution", "[\"x\", \"w5\", \"b5\", [2,2], [1,1], [1,1], true, [1,1], 1]", "y5") ","
	  ND("f", "aten.convolution", "[\"x\", \"w6\", null, [2,3], [0,1], [1,2], true, [1,0], 2]", "y6"),
	  "\"y1\",\"y2\",\"y3\",\"y4\",\"y5\",\"y6\""),
	/* 1d in f64: strided dilated conv, transposed conv */
	G(T("x", "f64", "[2,3,11]"), T("w1", "f64", "[5,3,3]") "," T("b1", "f64", "[5]") "," T("w2", "f64", "[3,2,4]"),
	  ND("a", "aten.convolution", "[\"x\", \"w1\", \"b1\", [2], [1], [2], false, [0], 1]", "y1") ","
	  ND("b", "aten.convolution", "[\"x\", \"w2\", null, [3], [1], [1], true, [2], 1]", "y2"),
	  "\"y1\",\"y2\""),
	/* 3d, and a transposed 3d */
	G(T("x", "f32", "[1,2,5,6,4]"), T("w1", "f32", "[3,2,3,2,3]") "," T("b1", "f32", "[3]") "," T("w2", "f32", "[2,2,2,2,2]"),
	  ND("a", "aten.convolution", "[\"x\", \"w1\", \"b1\", [1,2,1], [1,0,1], [1,1,1], false, [0,0,0], 1]", "y1") ","
	  ND("b", "aten.convolution", "[\"x\", \"w2\", null, [2], [0], [1], true, [0], 1]", "y2"),
	  "\"y1\",\"y2\""),
	/* wide rows (more than one 256-wide accumulator block), parallel */
	G(T("x", "f32", "[2,8,6,300]"), T("w", "f32", "[8,8,3,3]") "," T("w2", "f32", "[8,4,1,3]"),
	  ND("a", "aten.convolution", "[\"x\", \"w\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "y1") ","
	  ND("b", "aten.convolution", "[\"x\", \"w2\", null, [1,1], [0,0], [1,1], true, [0,0], 2]", "y2"),
	  "\"y1\",\"y2\""),
};

static void test_convolution(void **state)
{
	(void)state;
	assert_int_equal(check_close(convs, sizeof convs / sizeof *convs, "convolution"), 0);
	/* a small ResNet-style stem with a symbolic batch: conv, batch norm, relu,
	 * max pool, adaptive average pool, flatten, linear.  Positive params: a
	 * negative variance makes NaNs, which oneDNN's fused relu turns into 0. */
	static const int64_t b[2][8] = {{1}, {2}};
	positive_params = 1;
	assert_int_equal(check_graph(G(T("x", "f32", "[\"batch\",3,15,15]"),
				       T("w", "f32", "[8,3,3,3]") "," T("g", "f32", "[8]") "," T("bb", "f32", "[8]") ","
				       T("rm", "f32", "[8]") "," T("rv", "f32", "[8]") "," T("fw", "f32", "[5,8]") "," T("fb", "f32", "[5]"),
				       ND("a", "aten.convolution", "[\"x\", \"w\", null, [2,2], [1,1], [1,1], false, [0,0], 1]", "c") ","
				       ND("b", "aten.batch_norm", "[\"c\", \"g\", \"bb\", \"rm\", \"rv\", false, 0.1, 1e-5, false]", "n") ","
				       ND("c2", "aten.relu", "[\"n\"]", "r") ","
				       ND2("d", "aten.max_pool2d_with_indices", "[\"r\", [3,3], [2,2], [1,1]]", "\"m\"", "null") ","
				       ND("e", "aten.adaptive_avg_pool2d", "[\"m\", [1,1]]", "p") ","
				       ND("f", "aten.view", "[\"p\", [\"batch\", 8]]", "f") ","
				       ND("h", "aten.t", "[\"fw\"]", "ft") "," ND("i", "aten.addmm", "[\"fb\", \"f\", \"ft\"]", "y"),
				       "\"y\",\"m\""), 2, b), 0);
	positive_params = 0;
}


/* Symbolic batch, height and width: convolutions (on oneDNN, one set of
 * objects per binding, weights shared), pooling with ceil_mode, dilation and
 * padding, adaptive pooling, strided slices; each binding against the
 * interpreter, one handle reused across bindings (more than the 8 it keeps),
 * and the artifact's own guards. */
static const char *const spatial_graph =
	G(T("x", "f32", "[\"n\",3,\"h\",\"w\"]"),
	  T("w1", "f32", "[8,3,7,7]") "," T("b1", "f32", "[8]") "," T("w2", "f32", "[8,8,3,3]") "," T("w3", "f32", "[4,8,1,1]"),
	  ND("a", "aten.convolution", "[\"x\", \"w1\", \"b1\", [2,2], [3,3], [1,1], false, [0,0], 1]", "c1") ","
	  ND("b", "aten.relu", "[\"c1\"]", "r1") ","
	  ND2("c", "aten.max_pool2d_with_indices", "[\"r1\", [3,3], [2,2], [1,1]]", "\"m1\"", "\"i1\"") ","
	  ND("d", "aten.convolution", "[\"m1\", \"w2\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c2") ","
	  ND("e", "aten.avg_pool2d", "[\"c2\", [3,2], [2,2], [1,1], true, false]", "p1") ","
	  ND("f", "aten.max_pool2d", "[\"c2\", [2,2], [1,1], [0,0], [2,1], true]", "p2") ","
	  ND("g", "aten.convolution", "[\"p1\", \"w3\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c3") ","
	  ND("h", "aten.adaptive_avg_pool2d", "[\"c3\", [3,2]]", "a1") ","
	  ND("i", "aten.slice.Tensor", "[\"c2\", 2, 1, 9223372036854775807, 2]", "s1") ","
	  ND("j", "aten.mean.dim", "[\"s1\", [2,3], true]", "y"),
	  "\"y\",\"a1\",\"i1\",\"p2\"");

static char *emitted_c(const char *j);
static char *emitted_c_for(const char *j, const char *target);

static void test_symbolic_spatial(void **state)
{
	(void)state;
	/* the dilated 2x2 max pool needs 3 rows of c2: h, w >= 9 */
	static const int64_t b[][8] = {{1, 9, 9}, {2, 17, 9},  {1, 32, 33}, {3, 12, 40}, {1, 9, 10}, {2, 64, 48},
				       {1, 13, 11}, {1, 11, 19}, {2, 17, 9}, {1, 20, 21}, {1, 9, 9}};
	char *c = emitted_c(spatial_graph);
	assert_non_null(strstr(c, "rt_conv_create")); /* the convolutions run on oneDNN */
	assert_non_null(strstr(c, "coil_fdiv("));     /* derived sizes */
	free(c);
	art a;
	coil_graph *g;
	assert_int_equal(compile_json(spatial_graph, &a, &g), 0);
	for (size_t i = 0; i < sizeof b / sizeof *b; i++)
		assert_int_equal(check_run(g, &a, b[i], spatial_graph), 0);
	dlclose(a.h);
	graph_free(g);
	/* one handle across more bindings than it keeps (8), revisiting old ones */
	one_handle(spatial_graph, b, sizeof b / sizeof *b, 2);

	/* pools between NHWC convs run on oneDNN at symbolic sizes too (ceil_mode's
	 * right padding set per binding) */
	const char *pj = G(T("x", "f32", "[\"n\",4,\"h\",\"w\"]"),
			   T("w1", "f32", "[8,4,3,3]") "," T("w2", "f32", "[8,8,3,3]") "," T("w3", "f32", "[8,8,1,1]"),
			   ND("a", "aten.convolution", "[\"x\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") ","
			   ND("b", "aten.max_pool2d", "[\"c1\", [3,3], [2,2], [1,1], [1,1], true]", "p1") ","
			   ND("c", "aten.convolution", "[\"p1\", \"w2\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c2") ","
			   ND("d", "aten.avg_pool2d", "[\"c2\", [2,2], [2,2], [0,0], true, false]", "p2") ","
			   ND("e", "aten.convolution", "[\"p2\", \"w3\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
			   "\"y\"");
	c = emitted_c(pj);
	assert_non_null(strstr(c, "rt_pool_create"));
	free(c);
	static const int64_t pb[][8] = {{1, 4, 4}, {2, 9, 7}, {1, 16, 16}, {3, 5, 12}};
	assert_int_equal(check_graph(pj, 4, pb), 0);

	/* resampling at symbolic sizes: a scale over h and w (nearest x2, then
	 * bilinear 0.5 and 1.5: (2h*1)//2 and (2w*3)//2), and output sizes given
	 * as expressions (align_corners); source rows and weights computed at
	 * run time by the interpreter's rule */
	const char *uj = G(T("x", "f32", "[\"n\",3,\"h\",\"w\"]"), "",
			   ND("a", "aten.upsample_nearest2d.vec", "[\"x\", null, [2.0, 2.0]]", "u1") ","
			   ND("b", "aten.upsample_bilinear2d.vec", "[\"u1\", null, false, [0.5, 1.5]]", "u2") ","
			   ND("c", "aten.upsample_bilinear2d.vec", "[\"u2\", [\"h+3\", \"2*w-1\"], true, null]", "u3") ","
			   ND("d", "aten.upsample_nearest2d.vec", "[\"u3\", [\"h\", 5], null]", "u4"),
			   "\"u2\",\"u3\",\"u4\"");
	c = emitted_c(uj);
	assert_non_null(strstr(c, "coil_upsample_source("));
	free(c);
	static const int64_t ub[][8] = {{1, 1, 1}, {2, 5, 7}, {1, 16, 3}, {3, 9, 33}, {1, 2, 2}};
	assert_int_equal(check_graph(uj, 5, ub), 0);
	/* a scale over a symbolic dim that is not a multiple of 1/64 is refused, named */
	coil_err uerr = {0};
	const char *ubad = G(T("x", "f32", "[1,3,\"h\",4]"), "",
			     ND("a", "aten.upsample_nearest2d.vec", "[\"x\", null, [0.3, 2.0]]", "y"), "\"y\"");
	coil_graph *ug = graph_parse(ubad, strlen(ubad), &uerr);
	assert_null(ug);
	if (!strstr(uerr.msg, "node 'a'") || !strstr(uerr.msg, "multiples of 1/64"))
		fail_msg("%s", uerr.msg);

	/* guards in the artifact: a 5x5 valid conv needs h, w >= 5; a view
	 * needs an even count; declared ranges */
	const char *gj = "{\"format\":\"coil-graph\",\"version\":1,\"symbols\":{\"h\":{\"min\":2,\"max\":64}},"
			 "\"inputs\":[" T("x", "f32", "[1,1,\"h\",\"w\"]") "],\"constants\":[{\"name\":\"k\",\"dtype\":\"f32\","
			 "\"shape\":[1,1,5,1],\"data\":[1,2,3,4,5]}],\"nodes\":["
			 ND("cv", "aten.convolution", "[\"x\", \"k\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c") ","
			 ND("v", "aten.view", "[\"c\", [-1, 2]]", "y") "],\"outputs\":[\"y\"]}";
	assert_int_equal(compile_json(gj, &a, &g), 0);
	coil_model *m = NULL;
	assert_int_equal(a.create(NULL, 0, 1, &m), 0);
	static const struct { int64_t h, w; const char *want; } cases[] = {
		{6, 2, NULL},
		{4, 2, "input 0 dim 2 (s0 = 4): guard s0-4 >= 1 fails (output size of node 0 (aten.convolution.default))"},
		{6, 3, NULL},
		{7, 3, "input 0 dim 2 (s0 = 7): guard (-4*s1+s0*s1) % 2 == 0 fails (element count of the input of node 1 "},
		{65, 2, "input 0 dim 2 (s0 = 65): outside the range [2, 64] of s0 (guard)"},
		{1, 2, "outside the range [2, 64] of s0"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int64_t shape[4] = {1, 1, cases[i].h, cases[i].w}, oshape[2];
		const int64_t *shp[1] = {shape};
		float *x = calloc((size_t)(cases[i].h * cases[i].w), sizeof *x), y[1024];
		const void *in[1] = {x};
		void *outp[1] = {y};
		int rc = a.oshape(m, shp, 0, oshape);
		if (rc >= 0)
			rc = a.run(m, in, shp, outp);
		if (!cases[i].want && rc < 0)
			fail_msg("h=%lld w=%lld refused: %s", (long long)cases[i].h, (long long)cases[i].w, a.lasterr());
		if (cases[i].want && (rc >= 0 || !strstr(a.lasterr(), cases[i].want)))
			fail_msg("h=%lld w=%lld: rc %d, \"%s\", want \"%s\"", (long long)cases[i].h, (long long)cases[i].w, rc,
				 a.lasterr(), cases[i].want);
		free(x);
	}
	a.destroy(m);
	dlclose(a.h);
	graph_free(g);
}

/* Matrix products whose only symbolic size is m: a binding's first runs take
 * the handle's shape-generic objects (m at run time, nothing created for the
 * binding), its third gets per-shape ones kept in a set; a chain oneDNN has
 * no generic fast kernel for (gelu then a residual sum) stays per-shape. */
static void test_dnnl_generic_m(void **state)
{
	(void)state;
	const char *j = G(T("x", "f32", "[\"b\",\"s\",32]"),
			  T("w1", "f32", "[64,32]") "," T("b1", "f32", "[64]") "," T("w2", "f32", "[32,64]") ","
			  T("b2", "f32", "[32]") "," T("w3", "f32", "[32,64]"),
			  ND("v", "aten.view", "[\"x\", [\"b*s\", 32]]", "xv") ","
			  ND("t1", "aten.t", "[\"w1\"]", "w1t") "," ND("l1", "aten.addmm", "[\"b1\", \"xv\", \"w1t\"]", "h") ","
			  ND("g1", "aten.gelu", "[\"h\"]", "hg") ","
			  ND("t2", "aten.t", "[\"w2\"]", "w2t") "," ND("l2", "aten.addmm", "[\"b2\", \"hg\", \"w2t\"]", "y0") ","
			  ND("r2", "aten.add.Tensor", "[\"y0\", \"xv\"]", "y1") ","
			  ND("t3", "aten.t", "[\"w3\"]", "w3t") "," ND("l3", "aten.mm", "[\"hg\", \"w3t\"]", "z0") ","
			  ND("g3", "aten.gelu", "[\"z0\"]", "z1") "," ND("r3", "aten.add.Tensor", "[\"z1\", \"y1\"]", "z2") ","
			  ND("o", "aten.view", "[\"z2\", [\"b\", \"s\", 32]]", "z"),
			  "\"z\",\"y1\"");
	char *c = emitted_c(j);
	assert_non_null(strstr(c, "coil_dn_cold(d, sym)"));
	assert_non_null(strstr(c, "dd.m_runtime = gen;"));
	assert_non_null(strstr(c, "rt_matmul_run((rt_matmul *)dn->obj[0], (s0*s1), "));
	free(c);
	/* new bindings, runs up to hot (DN_HOT) and past it, more hot ones than
	 * the DN_SETS sets keep (the first ones' sets rebuilt for later ones),
	 * then each again once, and a last new one; twice over */
	static int64_t b[(DN_SETS + 3) * (DN_HOT + 2) + 1][8];
	int nb = 0;
	for (int k = 0; k < DN_SETS + 3; k++)
		for (int r = 0; r < DN_HOT + 1; r++)
			b[nb][0] = 1 + k % 4, b[nb][1] = 1 + k, nb++;
	for (int k = 0; k < DN_SETS + 3; k++)
		b[nb][0] = 1 + k % 4, b[nb][1] = 1 + k, nb++;
	b[nb][0] = 33, b[nb][1] = 9, nb++;
	one_handle(j, (const int64_t(*)[8])b, (size_t)nb, 2);
}

/* Attention's head split with a symbolic batch: [s, b, 256] read as
 * [s, 4*b, 64], transposed.  The reshape splits 4*b into (b, 4) so the rows
 * of 64 stay contiguous: vector loads, no per-element gather. */
static void test_symbolic_reshape(void **state)
{
	(void)state;
	const char *j = G(T("x", "f32", "[\"s\",\"b\",256]"), "",
			  ND("v", "aten.view", "[\"x\", [\"s\", \"4*b\", 64]]", "h") ","
			  ND("t", "aten.transpose.int", "[\"h\", 0, 1]", "ht") ","
			  ND("m", "aten.mul.Scalar", "[\"ht\", 0.125]", "y") ","
			  ND("u", "aten.view", "[\"y\", [\"b\", 4, \"s\", 64]]", "y2") ","
			  ND("e", "aten.exp", "[\"y2\"]", "y3"),
			  "\"y\",\"y3\"");
	char *c = emitted_c_for(j, "x86-64-v4");
	assert_non_null(strstr(c, "_mm512_loadu_ps(&a0["));
	assert_null(strstr(c, "g0[l_] ="));
	free(c);
	static const int64_t b[][8] = {{1, 1}, {7, 3}, {33, 2}, {5, 9}};
	assert_int_equal(check_graph(j, 4, b), 0);
}

/* --- oneDNN fusions (codegen/lower_dnnl.c) --------------------------------- */

/* conv [1,4,7,6] -> [1,6,7,6] (3x3, pad 1, bias) followed by NODES reading "c". */
#define CONV_THEN(nodes, outs)                                                                                  \
	G(T("x", "f32", "[1,4,7,6]") "," T("r", "f32", "[1,6,7,6]"),                                                 \
	  T("w", "f32", "[6,4,3,3]") "," T("b", "f32", "[6]") "," T("g", "f32", "[6]") "," T("be", "f32", "[6]") "," \
	  T("mu", "f32", "[6]") "," T("va", "f32", "[6]") "," T("k", "f32", "[6,1,1]"),                              \
	  ND("cv", "aten.convolution.default", "[\"x\", \"w\", \"b\", [1,1], [1,1], [1,1], false, [0,0], 1]", "c") \
	  "," nodes, outs)
#define ACT(op, args) CONV_THEN(ND("a", op, "[\"c\"" args "]", "y"), "\"y\"")

static const char *const fusions[] = {
	/* conv + bias + each activation */
	ACT("aten.relu.default", ""), ACT("aten.gelu.default", ""),
	"{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[" T("x", "f32", "[1,4,7,6]") "],\"params\":["
	T("w", "f32", "[6,4,3,3]") "],\"nodes\":[" ND("cv", "aten.convolution.default",
	"[\"x\", \"w\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c") ","
	"{\"id\":\"a\",\"op\":\"aten.gelu.default\",\"args\":[\"c\"],\"kwargs\":{\"approximate\":\"tanh\"},\"outputs\":[\"y\"]}"
	"],\"outputs\":[\"y\"]}",
	ACT("aten.silu.default", ""), ACT("aten.sigmoid.default", ""), ACT("aten.tanh.default", ""),
	ACT("aten.hardswish.default", ""), ACT("aten.hardsigmoid.default", ""), ACT("aten.hardtanh.default", ", 0, 6"),
	ACT("aten.clamp.default", ", -0.5, 0.7"), ACT("aten.clamp_min.default", ", 0.25"),
	ACT("aten.leaky_relu.default", ", 0.2"), ACT("aten.elu.default", ", 0.7"),
	/* batch norm folded, then relu; constant multiply and per-channel add folded */
	CONV_THEN(ND2("n", "aten.native_batch_norm.default", "[\"c\", \"g\", \"be\", \"mu\", \"va\", false, 0.1, 1e-5]",
		      "\"n\"", "null,null") "," ND("a", "aten.relu.default", "[\"n\"]", "y"), "\"y\""),
	CONV_THEN(ND("m", "aten.mul.Scalar", "[\"c\", 0.5]", "m") "," ND("s", "aten.add.Tensor", "[\"m\", \"k\"]", "s") ","
		  ND("d", "aten.div.Tensor", "[\"s\", \"k\"]", "y"), "\"y\""),
	/* residual add (sum post-op), then relu; the residual first or second */
	CONV_THEN(ND("s", "aten.add.Tensor", "[\"c\", \"r\"]", "s") "," ND("a", "aten.relu.default", "[\"s\"]", "y"), "\"y\""),
	CONV_THEN(ND2("n", "aten.native_batch_norm.default", "[\"c\", \"g\", \"be\", \"mu\", \"va\", false, 0.1, 1e-5]",
		      "\"n\"", "null,null") "," ND("s", "aten.add.Tensor", "[\"r\", \"n\"]", "s") ","
		  ND("a", "aten.relu.default", "[\"s\"]", "y"), "\"y\""),
	/* a chain: activation, scalar ops and broadcast binaries after it */
	CONV_THEN(ND("a", "aten.relu.default", "[\"c\"]", "a") "," ND("m", "aten.mul.Tensor", "[\"a\", \"k\"]", "m") ","
		  ND("s", "aten.sub.Scalar", "[\"m\", 0.25]", "s") "," ND("t", "aten.tanh.default", "[\"s\"]", "y"), "\"y\""),
	/* not fusable: the intermediate is also an output; it has a second reader */
	CONV_THEN(ND("a", "aten.relu.default", "[\"c\"]", "a") "," ND("t", "aten.sigmoid.default", "[\"a\"]", "y"),
		  "\"y\",\"a\""),
	CONV_THEN(ND("a", "aten.relu.default", "[\"c\"]", "a") "," ND("t", "aten.sigmoid.default", "[\"a\"]", "t") ","
		  ND("u", "aten.add.Tensor", "[\"t\", \"a\"]", "y"), "\"y\""),
	/* linear + gelu, as exported: addmm(b, x, t(W)); on 3-d input through views; bmm */
	G(T("x", "f32", "[2,5,8]"), T("w", "f32", "[6,8]") "," T("b", "f32", "[6]") "," T("w2", "f32", "[3,6]"),
	  ND("t", "aten.t.default", "[\"w\"]", "wt") "," ND("v", "aten.view.default", "[\"x\", [10,8]]", "xv") ","
	  ND("a", "aten.addmm.default", "[\"b\", \"xv\", \"wt\"]", "h") "," ND("v2", "aten.view.default", "[\"h\", [2,5,6]]", "hv") ","
	  ND("g", "aten.gelu.default", "[\"hv\"]", "y") "," ND("v3", "aten.view.default", "[\"y\", [10,6]]", "yv") ","
	  ND("t2", "aten.t.default", "[\"w2\"]", "w2t") "," ND("m", "aten.mm.default", "[\"yv\", \"w2t\"]", "z"),
	  "\"z\""),
	G(T("x", "f32", "[3,4,5]") "," T("y", "f32", "[3,5,6]") "," T("r", "f32", "[3,4,6]"), "",
	  ND("a", "aten.bmm.default", "[\"x\", \"y\"]", "z") "," ND("d", "aten.div.Scalar", "[\"z\", 8.0]", "q") ","
	  ND("s", "aten.add.Tensor", "[\"q\", \"r\"]", "o"), "\"o\""),
	/* depthwise, grouped, strided, dilated, 1x1 and transposed convs with relu */
	G(T("x", "f32", "[2,4,9,8]"),
	  T("w1", "f32", "[4,1,3,3]") "," T("w2", "f32", "[6,2,3,3]") "," T("w3", "f32", "[8,4,1,1]") "," T("w4", "f32", "[4,3,3,3]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w1\", null, [2,2], [1,1], [1,1], false, [0,0], 4]", "c1") ","
	  ND("a2", "aten.relu.default", "[\"c1\"]", "y1") ","
	  ND("b", "aten.convolution.default", "[\"x\", \"w2\", null, [1,2], [2,1], [2,1], false, [0,0], 2]", "c2") ","
	  ND("b2", "aten.hardswish.default", "[\"c2\"]", "y2") ","
	  ND("c", "aten.convolution.default", "[\"x\", \"w3\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c3") ","
	  ND("c2", "aten.relu.default", "[\"c3\"]", "y3") ","
	  ND("d", "aten.convolution.default", "[\"x\", \"w4\", null, [2,2], [1,1], [1,1], true, [1,1], 1]", "c4") ","
	  ND("d2", "aten.sigmoid.default", "[\"c4\"]", "y4"),
	  "\"y1\",\"y2\",\"y3\",\"y4\""),
	/* a conv chain kept NHWC in between (a residual block), NCHW at the pooling */
	G(T("x", "f32", "[2,8,6,6]"), T("w1", "f32", "[8,8,3,3]") "," T("w2", "f32", "[8,8,1,1]") "," T("w3", "f32", "[8,8,3,3]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") ","
	  ND("a2", "aten.relu.default", "[\"c1\"]", "r1") ","
	  ND("b", "aten.convolution.default", "[\"r1\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c2") ","
	  ND("b2", "aten.relu.default", "[\"c2\"]", "r2") ","
	  ND("c", "aten.convolution.default", "[\"r2\", \"w3\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c3") ","
	  ND("s", "aten.add.Tensor", "[\"c3\", \"r1\"]", "s") "," ND("s2", "aten.relu.default", "[\"s\"]", "r3") ","
	  ND("p", "aten.adaptive_avg_pool2d.default", "[\"r3\", [1,1]]", "y"),
	  "\"y\""),
	/* SiLU, then the residual (efficientnet_v2's fused MBConv; below AVX-512 the runtime applies both) */
	CONV_THEN(ND("a", "aten.silu.default", "[\"c\"]", "a") "," ND("s", "aten.add.Tensor", "[\"a\", \"r\"]", "y"), "\"y\""),
};

/* Pooling between convs runs on oneDNN in NHWC (rt_pool_run) when oneDNN
 * computes exactly what ATen does; the rest stays generated. */
#define CONV_POOL(pool, out_shape_w2)                                                                      \
	G(T("x", "f32", "[2,16,14,14]"), T("w1", "f32", "[16,16,3,3]") "," T("w2", "f32", out_shape_w2),           \
	  ND("a", "aten.convolution.default", "[\"x\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") "," \
	  ND("r", "aten.relu.default", "[\"c1\"]", "r1") "," pool ","                                             \
	  ND("b", "aten.convolution.default", "[\"p\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),  \
	  "\"y\"")
static const char *const dnnl_pools[] = {
	/* resnet's stem: max pool 3x3 s2 p1, indices unread */
	CONV_POOL(ND2("m", "aten.max_pool2d_with_indices.default", "[\"r1\", [3,3], [2,2], [1,1]]", "\"p\"", "null"),
		  "[8,16,1,1]"),
	/* ceil_mode overhang: max, and an average that excludes padding */
	CONV_POOL(ND("m", "aten.max_pool2d.default", "[\"r1\", [3,3], [2,2], [0,0], [1,1], true]", "p"), "[8,16,1,1]"),
	CONV_POOL(ND("m", "aten.avg_pool2d.default", "[\"r1\", [3,3], [2,2], [1,1], true, false]", "p"), "[8,16,1,1]"),
	/* averages counting padding, plain 2x2, equal adaptive windows, global */
	CONV_POOL(ND("m", "aten.avg_pool2d.default", "[\"r1\", [3,3], [2,2], [1,1]]", "p"), "[8,16,1,1]"),
	CONV_POOL(ND("m", "aten.avg_pool2d.default", "[\"r1\", [2,2]]", "p"), "[8,16,1,1]"),
	CONV_POOL(ND("m", "aten.adaptive_avg_pool2d.default", "[\"r1\", [7,2]]", "p"), "[8,16,1,1]"),
	CONV_POOL(ND("m", "aten.adaptive_avg_pool2d.default", "[\"r1\", [1,1]]", "p"), "[8,16,1,1]"),
	/* not on oneDNN: ceil overhang counting padding (ATen's divisor clips),
	 * divisor_override, unequal adaptive windows, wanted indices */
	CONV_POOL(ND("m", "aten.avg_pool2d.default", "[\"r1\", [3,3], [2,2], [1,1], true, true]", "p"), "[8,16,1,1]"),
	CONV_POOL(ND("m", "aten.avg_pool2d.default", "[\"r1\", [2,2], [2,2], [0,0], false, true, 3]", "p"), "[8,16,1,1]"),
	CONV_POOL(ND("m", "aten.adaptive_avg_pool2d.default", "[\"r1\", [4,5]]", "p"), "[8,16,1,1]"),
	G(T("x", "f32", "[1,16,14,14]"), T("w1", "f32", "[16,16,3,3]") "," T("w2", "f32", "[8,16,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") ","
	  ND2("m", "aten.max_pool2d_with_indices.default", "[\"c1\", [2,2]]", "\"p\"", "\"i\"") ","
	  ND("b", "aten.convolution.default", "[\"p\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\",\"i\""),
	/* a global pool feeding a classifier: NHWC in, [n,c,1,1] out */
	G(T("x", "f32", "[3,16,9,9]"), T("w1", "f32", "[16,16,3,3]") "," T("fw", "f32", "[5,16]") "," T("fb", "f32", "[5]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") ","
	  ND("r", "aten.relu.default", "[\"c1\"]", "r1") ","
	  ND("m", "aten.adaptive_avg_pool2d.default", "[\"r1\", [1,1]]", "p") ","
	  ND("f", "aten.view.default", "[\"p\", [3,16]]", "v") "," ND("t", "aten.t.default", "[\"fw\"]", "wt") ","
	  ND("l", "aten.addmm.default", "[\"fb\", \"v\", \"wt\"]", "y"),
	  "\"y\""),
};

static char *emitted_c_for(const char *j, const char *target);

/* The generated C of graph j (generic target). */
static char *emitted_c(const char *j) { return emitted_c_for(j, "generic"); }

static char *emitted_c_for(const char *j, const char *target) { return dumped(j, target, "emit_c"); }

/* Channels-last frames (lower_dnnl.c's layout, decompose's cl_enter): nodes with
 * per-channel operands, H/W means and channel cats between convs keep the activations
 * NHWC: every conv but the first (NCHW input) and the last (NCHW output) reads and
 * writes NHWC (the SE block's [n, c, 1, 1] convs are the same bytes either way: the
 * first reads the mean's result as NCHW). */
static const char *const cl_graphs[] = {
	/* an SE block: conv -> silu -> mean over H, W -> 1x1 convs -> sigmoid -> scale -> conv */
	G(T("x", "f32", "[2,16,7,9]"),
	  T("w0", "f32", "[16,16,3,3]") "," T("w1", "f32", "[4,16,1,1]") "," T("b1", "f32", "[4]") ","
	  T("w2", "f32", "[16,4,1,1]") "," T("b2", "f32", "[16]") "," T("w3", "f32", "[16,16,3,3]") ","
	  T("w4", "f32", "[8,16,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c0") ","
	  ND("s", "aten.silu.default", "[\"c0\"]", "s0") ","
	  ND("m", "aten.mean.dim", "[\"s0\", [2,3], true]", "m0") ","
	  ND("f1", "aten.convolution.default", "[\"m0\", \"w1\", \"b1\", [1,1], [0,0], [1,1], false, [0,0], 1]", "z1") ","
	  ND("r", "aten.relu.default", "[\"z1\"]", "z2") ","
	  ND("f2", "aten.convolution.default", "[\"z2\", \"w2\", \"b2\", [1,1], [0,0], [1,1], false, [0,0], 1]", "z3") ","
	  ND("g", "aten.sigmoid.default", "[\"z3\"]", "z4") ","
	  ND("k", "aten.mul.Tensor", "[\"s0\", \"z4\"]", "se") ","
	  ND("b", "aten.convolution.default", "[\"se\", \"w3\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") ","
	  ND("c", "aten.convolution.default", "[\"c1\", \"w4\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
	/* a dense block: conv, cat of its input and result along the channels, pre-activation
	 * batch norm (its own statistics) and relu, a per-channel shift, conv, conv */
	G(T("x", "f32", "[2,8,6,5]"),
	  T("w0", "f32", "[8,8,3,3]") "," T("w1", "f32", "[6,8,1,1]") "," T("g", "f32", "[14]") ","
	  T("be", "f32", "[14]") "," T("mu", "f32", "[14]") "," T("va", "f32", "[14]") "," T("sh", "f32", "[1,14,1,1]") ","
	  T("w2", "f32", "[8,14,3,3]") "," T("w3", "f32", "[4,8,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c0") ","
	  ND("r0", "aten.relu.default", "[\"c0\"]", "h0") ","
	  ND("d", "aten.convolution.default", "[\"h0\", \"w1\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c1") ","
	  ND("k", "aten.cat.default", "[[\"h0\", \"c1\"], 1]", "k0") ","
	  ND2("n", "aten.native_batch_norm.default", "[\"k0\", \"g\", \"be\", \"mu\", \"va\", false, 0.1, 1e-5]",
	      "\"n0\"", "null,null") ","
	  ND("r", "aten.relu.default", "[\"n0\"]", "n1") "," ND("p", "aten.add.Tensor", "[\"n1\", \"sh\"]", "n2") ","
	  ND("b", "aten.convolution.default", "[\"n2\", \"w2\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c2") ","
	  ND("c", "aten.convolution.default", "[\"c2\", \"w3\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
	/* a ConvNeXt block: depthwise conv, permute to [n, h, w, c], layer norm, linear, GELU,
	 * linear, permute back, per-channel scale, residual; the permutes between the layouts
	 * relabel the NHWC bytes (nhwc_permute), so the depthwise conv is NHWC on both sides */
	G(T("x", "f32", "[2,8,6,5]"),
	  T("w0", "f32", "[8,8,3,3]") "," T("wd", "f32", "[8,1,3,3]") "," T("g", "f32", "[8]") "," T("be", "f32", "[8]") ","
	  T("w1", "f32", "[16,8]") "," T("b1", "f32", "[16]") "," T("w2", "f32", "[8,16]") "," T("ls", "f32", "[8,1,1]") ","
	  T("w3", "f32", "[4,8,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c0") ","
	  ND("d", "aten.convolution.default", "[\"c0\", \"wd\", null, [1,1], [1,1], [1,1], false, [0,0], 8]", "d0") ","
	  ND("p", "aten.permute.default", "[\"d0\", [0,2,3,1]]", "q0") ","
	  ND2("n", "aten.native_layer_norm.default", "[\"q0\", [8], \"g\", \"be\", 1e-6]", "\"l0\"", "null,null") ","
	  ND("v", "aten.view.default", "[\"l0\", [60,8]]", "l1") "," ND("t1", "aten.t.default", "[\"w1\"]", "wt1") ","
	  ND("m1", "aten.addmm.default", "[\"b1\", \"l1\", \"wt1\"]", "h0") ","
	  ND("e", "aten.gelu.default", "[\"h0\"]", "h1") "," ND("t2", "aten.t.default", "[\"w2\"]", "wt2") ","
	  ND("m2", "aten.mm.default", "[\"h1\", \"wt2\"]", "h2") ","
	  ND("u", "aten.view.default", "[\"h2\", [2,6,5,8]]", "h3") ","
	  ND("q", "aten.permute.default", "[\"h3\", [0,3,1,2]]", "r0") ","
	  ND("k", "aten.mul.Tensor", "[\"r0\", \"ls\"]", "r1") "," ND("s", "aten.add.Tensor", "[\"r1\", \"c0\"]", "r2") ","
	  ND("b", "aten.convolution.default", "[\"r2\", \"w3\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
	/* two ShuffleNet units: split into halves, a conv of one, cat, the channel shuffle as
	 * PyTorch traces it (view, transpose, clone, view: shuffle.c makes it one
	 * channel_shuffle), split again; the cats, shuffle and splits in the frame */
	G(T("x", "f32", "[2,16,6,5]"),
	  T("w0", "f32", "[16,16,3,3]") "," T("w1", "f32", "[8,8,1,1]") "," T("w2", "f32", "[8,8,3,3]") ","
	  T("w3", "f32", "[4,16,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c0") ","
	  ND2("s1", "aten.split.Tensor", "[\"c0\", 8, 1]", "\"h1\"", "\"h2\"") ","
	  ND("d", "aten.convolution.default", "[\"h2\", \"w1\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c1") ","
	  ND("r", "aten.relu.default", "[\"c1\"]", "r1") "," ND("k", "aten.cat.default", "[[\"h1\", \"r1\"], 1]", "k0") ","
	  ND("v1", "aten.view.default", "[\"k0\", [2,2,8,6,5]]", "v0") ","
	  ND("t", "aten.transpose.int", "[\"v0\", 1, 2]", "t0") "," ND("cl", "aten.clone.default", "[\"t0\"]", "t1") ","
	  ND("v2", "aten.view.default", "[\"t1\", [2,-1,6,5]]", "q0") ","
	  ND2("s2", "aten.split.Tensor", "[\"q0\", 8, 1]", "\"u1\"", "\"u2\"") ","
	  ND("b", "aten.convolution.default", "[\"u2\", \"w2\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c2") ","
	  ND("k2", "aten.cat.default", "[[\"u1\", \"c2\"], 1]", "k1") ","
	  ND("c", "aten.convolution.default", "[\"k1\", \"w3\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
	/* a gated split (GLU over the channels: a * sigmoid(b)) between convs, the halves in the frame */
	G(T("x", "f32", "[2,8,5,6]"),
	  T("w0", "f32", "[16,8,3,3]") "," T("w1", "f32", "[8,8,3,3]") "," T("w2", "f32", "[4,8,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c0") ","
	  ND("r", "aten.relu.default", "[\"c0\"]", "r0") ","
	  ND2("s", "aten.split_with_sizes.default", "[\"r0\", [8, 8], -3]", "\"h1\"", "\"h2\"") ","
	  ND("g", "aten.sigmoid.default", "[\"h2\"]", "g0") "," ND("m", "aten.mul.Tensor", "[\"h1\", \"g0\"]", "u") ","
	  ND("b", "aten.convolution.default", "[\"u\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "c1") ","
	  ND("c", "aten.convolution.default", "[\"c1\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
	/* channel_shuffle itself (4 groups) between convs */
	G(T("x", "f32", "[1,16,5,7]"),
	  T("w0", "f32", "[16,16,1,1]") "," T("w1", "f32", "[16,1,3,3]") "," T("w2", "f32", "[8,16,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c0") ","
	  ND("s", "aten.channel_shuffle.default", "[\"c0\", 4]", "s0") ","
	  ND("d", "aten.convolution.default", "[\"s0\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 16]", "c1") ","
	  ND("c", "aten.convolution.default", "[\"c1\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
};

/* Convolutions of graph j NHWC on both sides, in its generated C (native target). */
static int convs_nhwc(const char *j)
{
	char *c = emitted_c(j);
	int k = 0;
	for (const char *p = c; (p = strstr(p, "dd.channels_last = 1;")); p++)
		k++;
	free(c);
	return k;
}

static void test_dnnl_channels_last(void **state)
{
	(void)state;
	positive_params = 1;
	const size_t n = sizeof cl_graphs / sizeof *cl_graphs;
	assert_int_equal(check_close(cl_graphs, n, "channels-last frame"), 0);
	/* convs with both sides NHWC: f2 and b; d and b; d; d and b; b; d */
	static const int convs_inside[] = {2, 2, 1, 2, 1, 1};
	for (size_t i = 0; i < n; i++)
		if (convs_nhwc(cl_graphs[i]) != convs_inside[i])
			fail_msg("channels-last graph %zu: %d convs NHWC on both sides, want %d", i, convs_nhwc(cl_graphs[i]),
				 convs_inside[i]);
	/* the shuffle rewritten, and not without it (COIL_SHUFFLE=0): the views keep the cat,
	 * and with it both splits and the convs d and b read, in NCHW */
	assert_true(fold_has(cl_graphs[3], "aten.channel_shuffle"));
	setenv("COIL_SHUFFLE", "0", 1);
	assert_false(fold_has(cl_graphs[3], "aten.channel_shuffle"));
	assert_int_equal(convs_nhwc(cl_graphs[3]), 0);
	assert_int_equal(check_close(cl_graphs + 3, 1, "channels-last frame, no shuffle rewrite"), 0);
	unsetenv("COIL_SHUFFLE");
	positive_params = 0;
}

/* Views that only look like a channel shuffle are left as they are (shuffle.c),
 * each against the interpreter: a transpose of other dims, a view splitting
 * another dim, an inner view read twice, a final view to another shape. */
static void test_channel_shuffle_rewrite(void **state)
{
	(void)state;
#define SH_IN T("x", "f32", "[2,12,3,4]")
#define SH_TAIL(tr, v2) \
	ND("t", "aten.transpose.int", "[\"v0\", " tr "]", "t0") "," ND("c", "aten.clone.default", "[\"t0\"]", "t1") "," \
	ND("w", "aten.view.default", "[\"t1\", " v2 "]", "y")
	static const char *const shuffles[] = {
		G(SH_IN, "", ND("v", "aten.view.default", "[\"x\", [2,3,4,3,4]]", "v0") "," SH_TAIL("1, 2", "[2,12,3,4]"), "\"y\""),
		G(SH_IN, "", ND("v", "aten.reshape.default", "[\"x\", [2,6,2,3,4]]", "v0") "," SH_TAIL("2, 1", "[2,12,3,4]"),
		  "\"y\""),
		G(T("x", "f32", "[3,8,5]"), "", ND("v", "aten.view.default", "[\"x\", [3,4,2,5]]", "v0") ","
		  SH_TAIL("-2, 1", "[3,8,5]"), "\"y\""),
	};
	static const char *const others[] = {
		G(SH_IN, "", ND("v", "aten.view.default", "[\"x\", [2,3,4,3,4]]", "v0") "," SH_TAIL("2, 3", "[2,12,3,4]"), "\"y\""),
		G(SH_IN, "", ND("v", "aten.view.default", "[\"x\", [2,12,3,2,2]]", "v0") "," SH_TAIL("1, 2", "[2,36,2,2]"),
		  "\"y\""),
		G(SH_IN, "", ND("v", "aten.view.default", "[\"x\", [2,3,4,3,4]]", "v0") "," SH_TAIL("1, 2", "[2,4,3,12]"), "\"y\""),
		G(SH_IN, "", ND("v", "aten.view.default", "[\"x\", [2,3,4,3,4]]", "v0") "," SH_TAIL("1, 2", "[2,12,3,4]") ","
		  ND("r", "aten.relu.default", "[\"v0\"]", "z"), "\"y\",\"z\""),
	};
#undef SH_TAIL
#undef SH_IN
	for (size_t i = 0; i < sizeof shuffles / sizeof *shuffles; i++)
		if (!fold_has(shuffles[i], "aten.channel_shuffle"))
			fail_msg("shuffle %zu: not rewritten", i);
	for (size_t i = 0; i < sizeof others / sizeof *others; i++)
		if (fold_has(others[i], "aten.channel_shuffle"))
			fail_msg("graph %zu: rewritten into a channel shuffle", i);
	assert_int_equal(check_close(shuffles, sizeof shuffles / sizeof *shuffles, "channel shuffle"), 0);
	assert_int_equal(check_close(others, sizeof others / sizeof *others, "not a channel shuffle"), 0);
}

static void test_dnnl_pooling(void **state)
{
	(void)state;
	const size_t n = sizeof dnnl_pools / sizeof *dnnl_pools;
	assert_int_equal(check_close(dnnl_pools, n, "pool fusion"), 0);
	for (size_t i = 0; i < n; i++) {
		char *c = emitted_c(dnnl_pools[i]);
		int want = i < 7 || i == n - 1;
		if (!!strstr(c, "rt_pool_run(") != want)
			fail_msg("pool graph %zu: %s on oneDNN", i, want ? "not" : "wrongly");
		free(c);
	}
}

static void test_dnnl_fusions(void **state)
{
	(void)state;
	positive_params = 1;
	assert_int_equal(check_close(fusions, sizeof fusions / sizeof *fusions, "fusion"), 0);
	/* fused means one kernel: conv + batch norm + residual + relu */
	assert_int_equal(nkernels(fusions[16]), 1);
	/* ... but not when the intermediate is an output or has a second reader */
	assert_int_equal(nkernels(fusions[18]), 2);
	assert_int_equal(nkernels(fusions[19]), 2);
	positive_params = 0;
}

/* Batch norm folded into the conv's weights and bias versus the interpreter's
 * unfolded batch norm: within 1e-4 relative, on magnitudes as in trained
 * models (positive variances, small and large). */
static void test_bn_folding(void **state)
{
	(void)state;
	static const double vals[] = {0.9, 1.3, 0.02, 0.7, 2.5, 0.11, 1.7, 0.05, 3.1, 0.6, 1.05};
	forced = vals;
	nforced = sizeof vals / sizeof *vals;
	fpos = 0;
	const char *json = CONV_THEN(ND2("n", "aten.native_batch_norm.default",
					 "[\"c\", \"g\", \"be\", \"mu\", \"va\", false, 0.1, 1e-3]", "\"n\"", "null,null"),
				     "\"n\"");
	assert_int_equal(check_graph(json, 0, NULL), 0);
	forced = NULL;
	nforced = 0;
}

/* --- runtime errors ------------------------------------------------------ */

/* Runs json with the forced integer inputs: the interpreter and the compiled
 * code must both fail, the latter with a message containing want. */
static void expect_run_error(const char *json, const int64_t *ints, int nints, const char *want)
{
	art a;
	coil_graph *g;
	assert_int_equal(compile_json(json, &a, &g), 0);
	forced_ints = ints;
	nforced_ints = nints;
	fpos = 0;
	coil_tensor in[8] = {0}, par[8] = {0}, ref[8] = {0}, got[8] = {0};
	const void *inp[8], *pp[8];
	const int64_t *shp[8];
	void *outp[8];
	static const int64_t one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	for (int i = 0; i < g->ninputs; i++) {
		fill_tensor(g, &g->vals[g->inputs[i]], one, &in[i]);
		inp[i] = in[i].data;
		shp[i] = in[i].shape;
	}
	for (int i = 0; i < g->nparams; i++) {
		fill_tensor(g, &g->vals[g->params[i]], one, &par[i]);
		pp[i] = par[i].data;
	}
	forced_ints = NULL;
	nforced_ints = 0;
	coil_err err = {0};
	assert_int_not_equal(interp_run(g, in, par, ref, &err), 0);
	coil_model *m = NULL;
	assert_int_equal(a.create(pp, g->nparams, 2, &m), 0);
	for (int j = 0; j < g->noutputs; j++) {
		int r = a.oshape(m, shp, j, got[j].shape);
		got[j].rank = r;
		got[j].dtype = g->vals[g->outputs[j]].dtype;
		got[j].data = calloc((size_t)tensor_numel(&got[j]) + 1, dtype_size(got[j].dtype));
		outp[j] = got[j].data;
	}
	int rc = a.run(m, inp, shp, outp);
	const char *msg = a.lasterr();
	if (rc == 0 || !strstr(msg, want))
		print_error("run returned %d, error '%s' (interpreter: '%s'), want '%s'\n", rc, msg, err.msg, want);
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(msg, want));
	const char *tail = strstr(want, ": "); /* the interpreter names the node its own way */
	assert_non_null(strstr(err.msg, tail ? tail + 2 : want));
	a.destroy(m);
	for (int i = 0; i < 8; i++) {
		tensor_free(&in[i]);
		tensor_free(&par[i]);
		tensor_free(&ref[i]);
		tensor_free(&got[i]);
	}
	dlclose(a.h);
	graph_free(g);
}

static void test_runtime_errors(void **state)
{
	(void)state;
	const char *emb = G(T("i", "i64", "[2,3]"), T("e", "f32", "[4,3]"),
			    ND("a%n%s\\\"q", "aten.embedding", "[\"e\", \"i\"]", "q") "," ND("b", "aten.relu", "[\"q\"]", "y"),
			    "\"y\"");
	static const int64_t bad_hi[] = {0, 1, 3, 7, 2, 9}, bad_lo[] = {0, -1, 2};
	/* the node named by its id, which reaches the artifact's C escaped (a printf format there) */
	expect_run_error(emb, bad_hi, 6, "node 'a%n%s\"q' (aten.embedding.default): index 7 out of range for 4 embeddings");
	expect_run_error(emb, bad_lo, 3, "index -1 out of range for 4 embeddings");
	/* in range (rnd() % 5 would not be): a clean run after a failing one */
	static const int64_t good[] = {3, 0, 2, 1};
	forced_ints = good;
	nforced_ints = 4;
	fpos = 0;
	int rc = check_graph(emb, 0, NULL);
	forced_ints = NULL;
	nforced_ints = 0;
	assert_int_equal(rc, 0);
	/* integer floor and trunc division by zero, fused into pointwise kernels */
	static const int64_t zero[] = {7, -3, 0, 2, 5};
	expect_run_error(G(T("x", "i64", "[5]") "," T("y", "i64", "[5]"), "",
			   ND("a", "aten.div.Tensor_mode", "[\"x\", \"y\"], \"kwargs\":{\"rounding_mode\":\"floor\"}", "q") ","
			   ND("b", "aten.add.Tensor", "[\"q\", \"x\"]", "z"), "\"z\""),
			 zero, 5, "integer division by zero");
	expect_run_error(G(T("x", "i32", "[5]") "," T("y", "i32", "[5]"), "",
			   ND("a", "aten.div.Tensor_mode", "[\"x\", \"y\"], \"kwargs\":{\"rounding_mode\":\"trunc\"}", "q"), "\"q\""),
			 zero, 5, "integer division by zero");
	/* nonzero divisors: floor and trunc agree with the interpreter */
	static const int64_t nz[] = {7, -3, 4, -2, 5, 1, -9};
	forced_ints = nz;
	nforced_ints = 7;
	fpos = 0;
	rc = check_graph(G(T("x", "i64", "[6]") "," T("y", "i64", "[6]"), "",
			   ND("a", "aten.div.Tensor_mode", "[\"x\", \"y\"], \"kwargs\":{\"rounding_mode\":\"floor\"}", "q") ","
			   ND("b", "aten.div.Tensor_mode", "[\"y\", \"x\"], \"kwargs\":{\"rounding_mode\":\"trunc\"}", "r"),
			   "\"q\",\"r\""), 0, NULL);
	forced_ints = NULL;
	nforced_ints = 0;
	assert_int_equal(rc, 0);
}

/* --- random graphs ------------------------------------------------------- */

/* Builds a random DAG of pointwise, broadcast, view and reduction ops over
 * values of shape [A,B] (or reduced [A,1]). */
static char *random_graph(int seed)
{
	static char buf[16384];
	rng = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1);
	int A = 1 + (int)(rnd() % 5), B = 1 + (int)(rnd() % 9);
	char *p = buf;
	p += sprintf(p, "{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[{\"name\":\"x0\",\"dtype\":\"f32\",\"shape\":[%d,%d]},"
		       "{\"name\":\"x1\",\"dtype\":\"f32\",\"shape\":[%d]}],\"params\":[],\"nodes\":[", A, B, B);
	/* values: v0 = x0 [A,B], v1 = x1 [B] */
	int nv = 2, full[64] = {1, 0};
	char names[64][8] = {"x0", "x1"};
	int nn = 3 + (int)(rnd() % 8);
	for (int i = 0; i < nn; i++) {
		int a = (int)(rnd() % (unsigned)nv), b = (int)(rnd() % (unsigned)nv);
		while (!full[a])
			a = (int)(rnd() % (unsigned)nv);
		char out[8];
		snprintf(out, sizeof out, "v%d", nv);
		int k = (int)(rnd() % 12);
		const char *sep = i ? "," : "";
		switch (k) {
		case 0: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.add.Tensor\",\"args\":[\"%s\",\"%s\"],\"outputs\":[\"%s\"]}", sep, i, names[a], names[b], out); break;
		case 1: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.mul.Tensor\",\"args\":[\"%s\",\"%s\"],\"outputs\":[\"%s\"]}", sep, i, names[a], names[b], out); break;
		case 2: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.tanh\",\"args\":[\"%s\"],\"outputs\":[\"%s\"]}", sep, i, names[a], out); break;
		case 3: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.relu\",\"args\":[\"%s\"],\"outputs\":[\"%s\"]}", sep, i, names[a], out); break;
		case 4: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.sub.Tensor\",\"args\":[\"%s\",\"%s\"],\"outputs\":[\"%s\"]}", sep, i, names[a], names[b], out); break;
		case 5: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.amax\",\"args\":[\"%s\",[1],true],\"outputs\":[\"%s\"]}", sep, i, names[a], out); break;
		case 6: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.mean.dim\",\"args\":[\"%s\",[1],true],\"outputs\":[\"%s\"]}", sep, i, names[a], out); break;
		case 7: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten._softmax\",\"args\":[\"%s\",1,false],\"outputs\":[\"%s\"]}", sep, i, names[a], out); break;
		case 8: /* view round trip: transpose, neg, transpose back */
			p += sprintf(p, "%s{\"id\":\"n%dt\",\"op\":\"aten.t\",\"args\":[\"%s\"],\"outputs\":[\"%st\"]},", sep, i, names[a], out);
			p += sprintf(p, "{\"id\":\"n%dn\",\"op\":\"aten.neg\",\"args\":[\"%st\"],\"outputs\":[\"%sn\"]},", i, out, out);
			p += sprintf(p, "{\"id\":\"n%d\",\"op\":\"aten.t\",\"args\":[\"%sn\"],\"outputs\":[\"%s\"]}", i, out, out);
			break;
		case 9: /* flip through reshape */
			p += sprintf(p, "%s{\"id\":\"n%dr\",\"op\":\"aten.reshape\",\"args\":[\"%s\",[%d]],\"outputs\":[\"%sr\"]},", sep, i, names[a], A * B, out);
			p += sprintf(p, "{\"id\":\"n%d\",\"op\":\"aten.view\",\"args\":[\"%sr\",[%d,%d]],\"outputs\":[\"%s\"]}", i, out, A, B, out);
			break;
		case 10: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.layer_norm\",\"args\":[\"%s\",[%d]],\"outputs\":[\"%s\"]}", sep, i, names[a], B, out); break;
		default: p += sprintf(p, "%s{\"id\":\"n%d\",\"op\":\"aten.sum.dim_IntList\",\"args\":[\"%s\",[1],true],\"outputs\":[\"%s\"]}", sep, i, names[a], out); break;
		}
		full[nv] = !(k == 5 || k == 6 || k == 11);
		/* binary with a full operand stays full */
		if ((k == 0 || k == 1 || k == 4) && (full[a] || full[b]))
			full[nv] = 1;
		memcpy(names[nv], out, sizeof out);
		nv++;
	}
	p += sprintf(p, "],\"outputs\":[\"%s\",\"%s\"]}", names[nv - 1], names[nv - 2 > 1 ? nv - 2 : nv - 1]);
	return buf;
}

/* --- SIMD: each vector table (AVX-512, AVX2) and the scalar one ---------------- */

/* Kernels that exercise the vector paths: full vectors and masked tails (odd
 * sizes), broadcasts, gathers and 2D tiles (permutes), masks (compare, where),
 * row reductions (parallel over rows, and split across threads for a single
 * row), column reductions, Welford (layer norm, var) and the row cache
 * (softmax). */
static const char *const simd_graphs[] = {
	G(T("x", "f32", "[5,37]") "," T("m", "f32", "[37]"), T("w", "f32", "[37]") "," T("b", "f32", "[37]"),
	  ND("a", "aten._softmax", "[\"x\", 1, false]", "s") "," ND("b2", "aten._log_softmax", "[\"x\", 1, false]", "l") ","
	  ND("c", "aten.layer_norm", "[\"x\", [37], \"w\", \"b\", 1e-5]", "n") ","
	  ND("d", "aten.gt.Tensor", "[\"x\", \"m\"]", "g") "," ND("e", "aten.where.self", "[\"g\", \"x\", \"m\"]", "y") ","
	  ND("f", "aten.gelu", "[\"y\"]", "z") "," ND("h", "aten.var.correction", "[\"x\", [1]]", "v") ","
	  ND("i", "aten.tanh", "[\"z\"]", "t") "," ND("j", "aten.sigmoid", "[\"t\"]", "q") ","
	  ND("k", "aten.log", "[\"q\"]", "lq") "," ND("k2", "aten.floor", "[\"lq\"]", "fl") ","
	  ND("k3", "aten.sin", "[\"fl\"]", "sn"),
	  "\"s\",\"l\",\"n\",\"z\",\"v\",\"sn\""),
	/* sums over each axis, amax over all (a single row: split), mean over two dims */
	G(T("x", "f32", "[67,33,129]"), "",
	  ND("a", "aten.sum.dim_IntList", "[\"x\", [0]]", "s0") "," ND("b", "aten.sum.dim_IntList", "[\"x\", [1]]", "s1") ","
	  ND("c", "aten.sum.dim_IntList", "[\"x\", [2]]", "s2") "," ND("d", "aten.amax", "[\"x\", [0,1,2]]", "mx") ","
	  ND("e", "aten.mean.dim", "[\"x\", [1,2]]", "mn") "," ND("f", "aten.sum", "[\"x\"]", "all") ","
	  ND("g", "aten.var.correction", "[\"x\", [0,1,2]]", "va") "," ND("h", "aten.amin", "[\"x\", [0]]", "mi"),
	  "\"s0\",\"s1\",\"s2\",\"mx\",\"mn\",\"all\",\"va\",\"mi\""),
	/* permutes (2D tiles), broadcast chain, large enough to run in parallel */
	G(T("x", "f32", "[70,45,19]") "," T("s", "f32", "[70,1,1]"), T("b", "f32", "[19]"),
	  ND("a", "aten.permute", "[\"x\", [2,0,1]]", "p") "," ND("b2", "aten.neg", "[\"p\"]", "y") ","
	  ND("c", "aten.add.Tensor", "[\"x\", \"b\"]", "t1") "," ND("d", "aten.mul.Tensor", "[\"t1\", \"s\"]", "t2") ","
	  ND("e", "aten.relu", "[\"t2\"]", "t3") "," ND("f", "aten.sub.Tensor", "[\"t3\", \"b\"]", "t4") ","
	  ND("g", "aten.transpose.int", "[\"x\", 0, 1]", "tr") "," ND("h", "aten.exp", "[\"tr\"]", "te"),
	  "\"y\",\"t4\",\"te\""),
	/* layer norm over two dims, softmax over a middle dim (column reduction) */
	G(T("x", "f32", "[3,40,50]"), T("w", "f32", "[40,50]"),
	  ND("a", "aten.layer_norm", "[\"x\", [40,50], \"w\"]", "n") "," ND("b", "aten._softmax", "[\"x\", 1, false]", "s"),
	  "\"n\",\"s\""),
	/* wide rows and columns: layer norm's two passes in 4 accumulators (with a
	 * remainder and a tail), column blocks of 4 vectors feeding a second
	 * reduction and an epilogue (softmax over dim 0, log_softmax over dim 1) */
	G(T("x", "f32", "[9,1000]") "," T("y", "f32", "[4,6,133]"), T("w", "f32", "[1000]"),
	  ND("a", "aten.layer_norm", "[\"x\", [1000], \"w\"]", "n") "," ND("b", "aten._softmax", "[\"x\", 0, false]", "s") ","
	  ND("c", "aten._log_softmax", "[\"y\", 1, false]", "l"),
	  "\"n\",\"s\",\"l\""),
};

/* Checks graphs[0..n) against the interpreter on every target from targets[from]
 * on that this machine runs (and sym, when given, with its nb bindings b);
 * returns the number of failures. */
static const char *const all_targets[] = {"generic", "x86-64-v3", "x86-64-v4"};

static int on_targets(const char *what, const char *const *graphs, size_t n, size_t from, const char *sym, int nb,
		      const int64_t b[][8])
{
	int fails = 0;
	for (size_t t = from; t < sizeof all_targets / sizeof *all_targets; t++) {
		if (!target_runs_here(all_targets[t])) {
			print_message("# %s does not run here: skipped\n", all_targets[t]);
			continue;
		}
		force_target = all_targets[t];
		for (size_t i = 0; i < n; i++)
			if (check_graph(graphs[i], 0, NULL))
				fails++, print_error("%s graph %zu failed on %s\n", what, i, all_targets[t]);
		if (sym && check_graph(sym, nb, b))
			fails++, print_error("symbolic %s graph failed on %s\n", what, all_targets[t]);
		force_target = NULL;
	}
	return fails;
}

static void test_simd_targets(void **state)
{
	(void)state;
	int fails = on_targets("simd", simd_graphs, sizeof simd_graphs / sizeof *simd_graphs, 0, NULL, 0, NULL);
	/* the fixed graphs on the vector targets (test_fixed runs them on generic) */
	fails += on_targets("fixed", fixed, sizeof fixed / sizeof *fixed, 1, NULL, 0, NULL);
	assert_int_equal(fails, 0);
}

/* bf16 and f16 (storage types computed in f32, rounded once per op): every
 * kernel family on every target against the interpreter, bf16 and f16
 * params, constants and casts; what cannot run in them is refused by name. */
#define HALF_GRAPHS(H)                                                                                          \
	G(T("x", H, "[4,37]") "," T("y", "f32", "[37]"), "",                                                     \
	  ND("a", "aten.gelu", "[\"x\"]", "g") "," ND("b", "aten.add.Tensor", "[\"g\", \"x\"]", "s") ","                \
	  ND("c", "aten.mul.Scalar", "[\"s\", 1.3]", "m") "," ND("d", "aten._softmax", "[\"m\", 1, false]", "sm") ","      \
	  ND("e", "aten.add.Tensor", "[\"m\", \"y\"]", "p") "," ND("f", "aten.gt.Scalar", "[\"x\", 0.25]", "k") ","       \
	  ND("h", "aten.where.self", "[\"k\", \"x\", \"g\"]", "w") "," ND("i", "aten.exp", "[\"w\"]", "ex"),                 \
	  "\"sm\",\"p\",\"ex\",\"k\""),                                                                                  \
	G(T("x", H, "[3,5,16]"), T("w", H, "[16]") "," T("b", H, "[16]"),                                                 \
	  ND("a", "aten.layer_norm", "[\"x\", [16], \"w\", \"b\", 1e-5]", "y") ","                                         \
	  ND("b2", "aten.sum.dim_IntList", "[\"x\", [2]]", "s") "," ND("c", "aten.mean.dim", "[\"x\", [0,2], true]", "mn") "," \
	  ND("d", "aten.amax", "[\"x\", [1]]", "mx") "," ND("e", "aten.var.correction", "[\"x\", [2]]", "v") ","            \
	  ND("f", "aten.argmax", "[\"x\", 2]", "am"),                                                                   \
	  "\"y\",\"s\",\"mn\",\"mx\",\"v\",\"am\""),                                                                        \
	G(T("x", H, "[2,3,4]") "," T("i", "i64", "[5]"), T("e", H, "[6,3]"),                                          \
	  ND("a", "aten.permute", "[\"x\", [2,0,1]]", "p") "," ND("b", "aten.reshape", "[\"p\", [4,6]]", "r") ","               \
	  ND("c", "aten.cat", "[[\"r\", \"r\"], 1]", "c") "," ND("d", "aten.constant_pad_nd", "[\"c\", [1,2], 0.3]", "pd") "," \
	  ND("f", "aten.embedding", "[\"e\", \"i\"]", "q") "," ND("g", "aten._to_copy", "[\"q\"], \"kwargs\":{\"dtype\":\"f32\"}", "qf") "," \
	  ND("h", "aten._to_copy", "[\"pd\"], \"kwargs\":{\"dtype\":\"i64\"}", "pi") ","                                    \
	  ND("j", "aten._to_copy", "[\"r\"], \"kwargs\":{\"dtype\":\"f32\"}", "rf") ","                                     \
	  ND("k", "aten.cat", "[[\"r\", \"rf\", \"r\"], 1]", "cm"), /* promoted to f32 */                                \
	  "\"pd\",\"qf\",\"pi\",\"cm\""),                                                                                \
	G(T("x", "f32", "[5,33]"), "",                                                                                \
	  ND("a", "aten._to_copy", "[\"x\"], \"kwargs\":{\"dtype\":\"" H "\"}", "h") "," ND("b", "aten.relu", "[\"h\"]", "r") "," \
	  ND("c", "aten.mul.Tensor", "[\"r\", \"x\"]", "y"),                                                              \
	  "\"h\",\"y\"")

static const char *const half_graphs[] = {HALF_GRAPHS("bf16"), HALF_GRAPHS("f16")};

/* Matrix products in bf16 run on oneDNN's bf16 kernels (f32 inside, one
 * rounding at the end of the fused chain): a linear with gelu and a
 * residual, a product with a transposed constant, an attention's two
 * batched products around a softmax. */
static const char *const bf16_dnn_graphs[] = {
	G(T("x", "bf16", "[6,32]"), T("w", "bf16", "[48,32]") "," T("b", "bf16", "[48]") "," T("w2", "bf16", "[32,48]"),
	  ND("a", "aten.t", "[\"w\"]", "wt") "," ND("b2", "aten.addmm", "[\"b\", \"x\", \"wt\"]", "y") ","
	  ND("c", "aten.gelu", "[\"y\"]", "g") "," ND("d", "aten.t", "[\"w2\"]", "w2t") ","
	  ND("e", "aten.mm", "[\"g\", \"w2t\"]", "z") "," ND("f", "aten.add.Tensor", "[\"z\", \"x\"]", "r"),
	  "\"r\""),
	G(T("q", "bf16", "[4,9,16]") "," T("k", "bf16", "[4,16,9]") "," T("v", "bf16", "[4,9,16]"), "",
	  ND("a", "aten.bmm", "[\"q\", \"k\"]", "s") "," ND("b", "aten.mul.Scalar", "[\"s\", 0.25]", "sc") ","
	  ND("c", "aten._softmax", "[\"sc\", 2, false]", "p") "," ND("d", "aten.bmm", "[\"p\", \"v\"]", "o"),
	  "\"o\""),
	G(T("x", "bf16", "[\"n\",24]"), T("w", "bf16", "[24,40]"),
	  ND("a", "aten.mm", "[\"x\", \"w\"]", "y") "," ND("b", "aten.relu", "[\"y\"]", "r"), "\"r\""),
	/* a residual block: conv, batch norm (folded in f32), relu, max pool, conv + residual,
	 * global average pool, linear */
	G(T("x", "bf16", "[2,8,12,12]"),
	  T("w1", "bf16", "[8,8,3,3]") "," T("g", "bf16", "[8]") "," T("be", "bf16", "[8]") "," T("mu", "bf16", "[8]") ","
	  T("va", "bf16", "[8]") "," T("w2", "bf16", "[8,8,3,3]") "," T("b2", "bf16", "[8]") "," T("fw", "bf16", "[5,8]") ","
	  T("fb", "bf16", "[5]"),
	  ND("c1", "aten.convolution", "[\"x\", \"w1\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "y1") ","
	  ND("bn", "aten.batch_norm", "[\"y1\", \"g\", \"be\", \"mu\", \"va\", false, 0.1, 1e-5, false]", "z1") ","
	  ND("r1", "aten.relu", "[\"z1\"]", "a1") ","
	  "{\"id\":\"mp\",\"op\":\"aten.max_pool2d_with_indices\",\"args\":[\"a1\", [2,2], [2,2]],\"outputs\":[\"p1\",\"i1\"]},"
	  ND("c2", "aten.convolution", "[\"p1\", \"w2\", \"b2\", [1,1], [1,1], [1,1], false, [0,0], 1]", "y2") ","
	  ND("ad", "aten.add.Tensor", "[\"y2\", \"p1\"]", "s2") "," ND("r2", "aten.relu", "[\"s2\"]", "a2") ","
	  ND("gp", "aten.adaptive_avg_pool2d", "[\"a2\", [1,1]]", "gp") "," ND("fl", "aten.flatten.using_ints", "[\"gp\", 1]", "f") ","
	  ND("ft", "aten.t", "[\"fw\"]", "fwt") "," ND("fc", "aten.addmm", "[\"fb\", \"f\", \"fwt\"]", "out"),
	  "\"out\""),
	/* chains ending in a cast to f32: oneDNN writes f32 (dst_f32), unrounded */
	G(T("x", "bf16", "[5,16]") "," T("im", "bf16", "[1,3,6,6]"), T("w", "bf16", "[16,12]") "," T("cw", "bf16", "[4,3,3,3]"),
	  ND("a", "aten.mm", "[\"x\", \"w\"]", "y") "," ND("b", "aten.mul.Scalar", "[\"y\", 0.5]", "s") ","
	  ND("c", "aten._to_copy", "[\"s\"], \"kwargs\":{\"dtype\":\"f32\"}", "sf") ","
	  ND("d", "aten._softmax", "[\"sf\", 1, false]", "p") ","
	  ND("e", "aten.convolution", "[\"im\", \"cw\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "cv") ","
	  ND("f", "aten.relu", "[\"cv\"]", "cr") "," ND("g", "aten._to_copy", "[\"cr\"], \"kwargs\":{\"dtype\":\"f32\"}", "cf"),
	  "\"p\",\"cf\""),
};

static void test_half(void **state)
{
	(void)state;
	int fails = on_targets("half", half_graphs, sizeof half_graphs / sizeof *half_graphs, 0, NULL, 0, NULL);
	assert_int_equal(fails, 0);
	/* values that round: ties to even, NaN and infinities, subnormals of f32 */
	static const double special[] = {1.00390625, 1.01171875, -2.0078125, NAN, INFINITY, -INFINITY, 1e-39, -3e-40,
					 65504, 65520, 1e5, 3.0000001};
	forced = special, nforced = sizeof special / sizeof *special;
	fails = on_targets("half (special values)", half_graphs + 3, 1, 0, NULL, 0, NULL);
	fails += on_targets("half (special values)", half_graphs + 7, 1, 0, NULL, 0, NULL);
	forced = NULL, nforced = 0;
	assert_int_equal(fails, 0);
	positive_params = 1; /* batch norm variances */
	fails = on_targets("bf16 oneDNN", bf16_dnn_graphs, sizeof bf16_dnn_graphs / sizeof *bf16_dnn_graphs, 0, NULL, 0, NULL);
	positive_params = 0;
	static const int64_t nb[2][8] = {{1}, {7}};
	fails += check_graph(bf16_dnn_graphs[2], 2, nb) != 0;
	assert_int_equal(fails, 0);
	/* each runs on oneDNN in bf16 with AVX-512; below it (oneDNN 2.6 has no bf16
	 * kernels there) on oneDNN in f32, between casts (widen.c) */
	for (size_t i = 0; i < sizeof bf16_dnn_graphs / sizeof *bf16_dnn_graphs; i++) {
		char *c = emitted_c_for(bf16_dnn_graphs[i], "x86-64-v3");
		assert_null(strstr(c, "RT_BF16"));
		assert_true(strstr(c, "rt_conv_create") || strstr(c, "rt_matmul_create"));
		free(c);
		c = emitted_c_for(bf16_dnn_graphs[i], "x86-64-v4");
		assert_non_null(strstr(c, "dd.dtype = RT_BF16"));
		if (i == 3)
			assert_non_null(strstr(c, "dd.wei_f32 = 1")); /* the batch norm folded */
		if (i == 4) { /* both chains write f32 */
			char *p = strstr(c, "dd.dst_f32 = 1");
			assert_non_null(p);
			assert_non_null(strstr(p + 1, "dd.dst_f32 = 1"));
		}
		free(c);
	}
	/* upsampling in bf16 is not a loop here */
	coil_err err = {0};
	const char *mm = G(T("x", "bf16", "[1,3,4,4]"), "",
			   ND("a", "aten.upsample_nearest2d.vec", "[\"x\", [8,8], null]", "y"), "\"y\"");
	coil_graph *g = graph_parse(mm, strlen(mm), &err);
	assert_non_null(g);
	codegen_opts o = {.target = "generic", .opt = "-O1"};
	char so[128];
	snprintf(so, sizeof so, "%s/mm.so", tmpdir);
	codegen_result res;
	assert_int_equal(codegen_compile(g, &o, so, &res, &err), -1);
	assert_int_equal(err.code, COIL_E_UNSUPPORTED);
	if (!strstr(err.msg, "node 'a'") || !strstr(err.msg, "runs on oneDNN only"))
		fail_msg("%s", err.msg);
	graph_free(g);
}

static void test_random_graphs(void **state)
{
	(void)state;
	int fails = 0;
	for (int s = 0; s < 200; s++) {
		char *j = random_graph(s);
		if (check_graph(j, 0, NULL))
			fails++;
	}
	assert_int_equal(fails, 0);
}

/* --- the generated C's shape: shared kernel functions, translation units ---- */

/* n blocks h = roll(softmax(h + w_i), 1, 0) over [6, 40] (the roll, an
 * extern kernel, ends each fused kernel): kernels alike but for their
 * buffers. */
static char *repeated_blocks(int n)
{
	static char j[8192];
	char params[2048] = "", nodes[4096] = "";
	for (int i = 0; i < n; i++) {
		char a[512];
		snprintf(a, sizeof a, "%s{\"name\":\"w%d\",\"dtype\":\"f32\",\"shape\":[40]}", i ? "," : "", i);
		strcat(params, a);
		snprintf(a, sizeof a,
			 "%s{\"id\":\"a%d\",\"op\":\"aten.add.Tensor\",\"args\":[\"h%d\",\"w%d\"],\"outputs\":[\"s%d\"]},"
			 "{\"id\":\"m%d\",\"op\":\"aten._softmax\",\"args\":[\"s%d\",1,false],\"outputs\":[\"y%d\"]},"
			 "{\"id\":\"r%d\",\"op\":\"aten.roll\",\"args\":[\"y%d\",[1],[0]],\"outputs\":[\"h%d\"]}",
			 i ? "," : "", i, i, i, i, i, i, i, i, i, i + 1);
		strcat(nodes, a);
	}
	snprintf(j, sizeof j,
		 "{\"format\":\"coil-graph\",\"version\":1,\"inputs\":[{\"name\":\"h0\",\"dtype\":\"f32\",\"shape\":[6,40]}],"
		 "\"params\":[%s],\"nodes\":[%s],\"outputs\":[\"h%d\"]}",
		 params, nodes, n);
	return j;
}

/* Repeated patterns compile to fewer functions than kernels (describe says
 * so too) and still match the interpreter, scalar and SIMD. */
static void test_shared_functions(void **state)
{
	(void)state;
	const char *j = repeated_blocks(6);
	for (size_t t = 0; t < sizeof all_targets / sizeof *all_targets; t++) {
		if (!target_runs_here(all_targets[t]))
			continue;
		force_target = all_targets[t];
		art a;
		coil_graph *g;
		assert_int_equal(compile_json(j, &a, &g), 0);
		force_target = NULL;
		print_message("# %s: %d kernels, %d functions\n", all_targets[t], last_res.nkernels, last_res.nfuncs);
		assert_true(last_res.nkernels >= 12);
		/* the first softmax reads an input, the last roll writes an output */
		assert_true(last_res.nfuncs <= 4);
		char want[64];
		snprintf(want, sizeof want, "\"kernels\": %d, \"functions\": %d,", last_res.nkernels, last_res.nfuncs);
		assert_non_null(strstr(a.describe(), want));
		static const int64_t one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
		assert_int_equal(check_run(g, &a, one, j), 0);
		dlclose(a.h);
		graph_free(g);
	}
	/* the emitted C: one definition per function, a call per kernel */
	coil_err err;
	coil_graph *g = graph_parse(j, strlen(j), &err);
	assert_non_null(g);
	char path[128];
	snprintf(path, sizeof path, "%s/shared.c", tmpdir);
	codegen_opts o = {.target = "generic", .keep_c = path, .units = -1};
	codegen_result res;
	assert_int_equal(codegen_compile(g, &o, NULL, &res, &err), 0);
	graph_free(g);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[4096];
	int defs = 0, calls = 0;
	while (fgets(line, sizeof line, f)) {
		defs += !strncmp(line, "COIL_KFN void kfn", 17);
		const char *l = line + strspn(line, "\t");
		calls += l > line && !strncmp(l, "kfn", 3); /* a call, indented (in the run or a profile loop) */
	}
	fclose(f);
	unlink(path);
	assert_int_equal(defs, res.nfuncs);
	assert_int_equal(calls, res.nkernels);
}

/* Compiles and runs json in one file and split into units (units 3), with
 * the same data: both match the interpreter and each other bit for bit. */
/* Attention: the op itself (each mask kind, causal, broadcast k/v heads,
 * lengths that are not multiples of the blocks, fully masked rows, bf16),
 * and traced forms the attention rule rewrites into it, against the
 * interpreter running them as written (bmm, softmax, bmm). */
#define SDPA(args, kw) "{\"id\":\"a\",\"op\":\"aten.scaled_dot_product_attention\",\"args\":" args ",\"kwargs\":" kw ",\"outputs\":[\"o\"]}"
static const char *const attn_graphs[] = {
	G(T("q", "f32", "[2,3,1,16]") "," T("k", "f32", "[2,3,1,16]") "," T("v", "f32", "[2,3,1,16]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{}"), "\"o\""),
	G(T("q", "f32", "[1,2,7,32]") "," T("k", "f32", "[1,2,129,32]") "," T("v", "f32", "[1,2,129,48]") ","
	  T("m", "f32", "[1,1,7,129]"), "", SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{\"scale\":0.3}"), "\"o\""),
	G(T("q", "f32", "[2,2,129,64]") "," T("k", "f32", "[2,2,129,64]") "," T("v", "f32", "[2,2,129,64]") ","
	  T("m", "bool", "[2,1,1,129]"), "", SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{\"is_causal\":true}"), "\"o\""),
	G(T("q", "f32", "[1,1,1000,16]") "," T("k", "f32", "[1,1,1000,16]") "," T("v", "f32", "[1,1,1000,20]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{\"is_causal\":true}"), "\"o\""),
	/* most keys masked: rows masked everywhere are NaN, as softmax makes them */
	G(T("q", "f32", "[1,3,7,24]") "," T("k", "f32", "[1,3,7,24]") "," T("v", "f32", "[1,3,7,24]") ","
	  T("u", "f32", "[7,7]"), "",
	  ND("l", "aten.lt.Scalar", "[\"u\", -1.5]", "m") "," SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{}"), "\"o\""),
	/* a finite masked_value (torch.where masks): rows masked everywhere are
	 * uniform; a second key block masked for every row is skipped exactly */
	G(T("q", "f32", "[1,3,7,24]") "," T("k", "f32", "[1,3,7,24]") "," T("v", "f32", "[1,3,7,24]") ","
	  T("u", "f32", "[7,7]"), "",
	  ND("l", "aten.lt.Scalar", "[\"u\", -1.5]", "m") "," SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{\"masked_value\":-1e9}"),
	  "\"o\""),
	G(T("q", "f32", "[2,2,40,16]") "," T("k", "f32", "[2,2,300,16]") "," T("v", "f32", "[2,2,300,16]") ","
	  T("u", "f32", "[2,1,1,300]"), "",
	  ND("l", "aten.lt.Scalar", "[\"u\", 2.5]", "m") ","
	  SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{\"is_causal\":true,\"masked_value\":-3.4028234663852886e38}"),
	  "\"o\""),
	/* head dims 128, and 100 / 72 (vector tails in both products) */
	G(T("q", "f32", "[1,2,129,128]") "," T("k", "f32", "[1,2,200,128]") "," T("v", "f32", "[1,2,200,128]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{\"is_causal\":true}"), "\"o\""),
	G(T("q", "f32", "[2,1,33,100]") "," T("k", "f32", "[2,1,40,100]") "," T("v", "f32", "[2,1,40,72]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{}"), "\"o\""),
	/* k and v shared by the heads (broadcast), 2 query rows (the direct path) */
	G(T("q", "f32", "[2,4,2,40]") "," T("k", "f32", "[2,1,300,40]") "," T("v", "f32", "[2,1,300,24]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{}"), "\"o\""),
};

/* bf16 (on avx512_bf16 too: products as vdpbf16ps, P rounded to bf16): odd
 * head dims and key counts (zero-padded pairs), two key blocks, each mask
 * kind, causal, broadcast k/v, a finite masked_value. */
static const char *const attn_bf16[] = {
	G(T("q", "bf16", "[1,2,33,64]") "," T("k", "bf16", "[1,2,65,64]") "," T("v", "bf16", "[1,2,65,64]") ","
	  T("m", "bf16", "[33,65]"), "", SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{}"), "\"o\""),
	G(T("q", "bf16", "[3,1,128]") "," T("k", "bf16", "[3,257,128]") "," T("v", "bf16", "[3,257,16]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{\"is_causal\":false}"), "\"o\""),
	G(T("q", "bf16", "[2,3,70,37]") "," T("k", "bf16", "[2,1,301,37]") "," T("v", "bf16", "[2,1,301,45]") ","
	  T("u", "f32", "[2,1,1,301]"), "",
	  ND("l", "aten.lt.Scalar", "[\"u\", 1.8]", "m") ","
	  SDPA("[\"q\",\"k\",\"v\",\"m\"]", "{\"is_causal\":true,\"masked_value\":-1e4}"), "\"o\""),
	G(T("q", "bf16", "[1,4,129,64]") "," T("k", "bf16", "[1,4,129,64]") "," T("v", "bf16", "[1,4,129,64]"), "",
	  SDPA("[\"q\",\"k\",\"v\"]", "{\"is_causal\":true,\"scale\":0.3}"), "\"o\""),
};

/* Traced attention the rule rewrites: [0] and [1] as nn.MultiheadAttention
 * writes it (q scaled first, baddbmm with an additive mask; masked_fill of a
 * key padding mask), [2] GPT style on 4-d views with the scale after, [3] and
 * [4] bool masks with finite fills; the last keeps its probabilities as an
 * output, so it stays unfused. */
static const char *const attn_traced[] = {
	G(T("q", "f32", "[6,7,16]") "," T("k", "f32", "[6,9,16]") "," T("v", "f32", "[6,9,8]") "," T("m", "f32", "[7,9]"), "",
	  ND("s", "aten.div.Scalar", "[\"q\", 4.0]", "qs") "," ND("t", "aten.transpose.int", "[\"k\", -2, -1]", "kt") ","
	  ND("b", "aten.baddbmm", "[\"m\", \"qs\", \"kt\"]", "a") "," ND("p", "aten._softmax", "[\"a\", -1, false]", "p") ","
	  ND("o", "aten.bmm", "[\"p\", \"v\"]", "o"), "\"o\""),
	G(T("q", "f32", "[6,130,16]") "," T("k", "f32", "[6,300,16]") "," T("v", "f32", "[6,300,8]") ","
	  T("pad", "bool", "[6,1,300]"), "",
	  ND("t", "aten.transpose.int", "[\"k\", 1, 2]", "kt") "," ND("b", "aten.bmm", "[\"q\", \"kt\"]", "s") ","
	  ND("f", "aten.masked_fill.Scalar", "[\"s\", \"pad\", \"-inf\"]", "a") ","
	  ND("p", "aten._softmax", "[\"a\", -1, false]", "p") "," ND("o", "aten.bmm", "[\"p\", \"v\"]", "o"), "\"o\""),
	G(T("q", "f32", "[2,3,5,8]") "," T("k", "f32", "[2,3,5,8]") "," T("v", "f32", "[2,3,5,8]") "," T("c", "bool", "[1,1,5,5]"), "",
	  ND("t", "aten.transpose.int", "[\"k\", -2, -1]", "kt") ","
	  ND("e1", "aten.expand", "[\"q\", [2,3,5,8]]", "qe") "," ND("v1", "aten.view", "[\"qe\", [6,5,8]]", "q3") ","
	  ND("e2", "aten.expand", "[\"kt\", [2,3,8,5]]", "ke") "," ND("v2", "aten._unsafe_view", "[\"ke\", [6,8,5]]", "k3") ","
	  ND("b", "aten.bmm", "[\"q3\", \"k3\"]", "s3") "," ND("v3", "aten._unsafe_view", "[\"s3\", [2,3,5,5]]", "s") ","
	  ND("m", "aten.mul.Scalar", "[\"s\", 0.35]", "ss") "," ND("n", "aten.logical_not", "[\"c\"]", "nc") ","
	  ND("f", "aten.masked_fill.Scalar", "[\"ss\", \"nc\", \"-inf\"]", "a") ","
	  ND("p", "aten._softmax", "[\"a\", -1, false]", "p") ","
	  ND("e3", "aten.expand", "[\"p\", [2,3,5,5]]", "pe") "," ND("v4", "aten.view", "[\"pe\", [6,5,5]]", "p3") ","
	  ND("e4", "aten.expand", "[\"v\", [2,3,5,8]]", "ve") "," ND("v5", "aten.view", "[\"ve\", [6,5,8]]", "v3") ","
	  ND("o", "aten.bmm", "[\"p3\", \"v3\"]", "o3") "," ND("v6", "aten._unsafe_view", "[\"o3\", [2,3,5,8]]", "o"), "\"o\""),
	/* HF GPT-2's torch.where(causal, scores, finfo.min), and masked_fill with
	 * a finite value (rows of u < -1.2 masked everywhere: uniform) */
	G(T("q", "f32", "[6,33,8]") "," T("k", "f32", "[6,33,8]") "," T("v", "f32", "[6,33,8]") ","
	  T("c", "bool", "[1,33,33]"), "",
	  ND("t", "aten.transpose.int", "[\"k\", -1, -2]", "kt") "," ND("b", "aten.bmm", "[\"q\", \"kt\"]", "s") ","
	  ND("d", "aten.div.Scalar", "[\"s\", 2.8284271247461903]", "sd") ","
	  ND("fl", "aten.full", "[[], -3.4028234663852886e38]", "f") ","
	  ND("w", "aten.where.self", "[\"c\", \"sd\", \"f\"]", "a") ","
	  ND("p", "aten._softmax", "[\"a\", -1, false]", "p") "," ND("o", "aten.bmm", "[\"p\", \"v\"]", "o"), "\"o\""),
	G(T("q", "f32", "[4,9,16]") "," T("k", "f32", "[4,9,16]") "," T("v", "f32", "[4,9,8]") "," T("u", "f32", "[4,9,1]"),
	  "",
	  ND("l", "aten.lt.Scalar", "[\"u\", -1.2]", "pad") ","
	  ND("t", "aten.transpose.int", "[\"k\", 1, 2]", "kt") "," ND("b", "aten.bmm", "[\"q\", \"kt\"]", "s") ","
	  ND("f", "aten.masked_fill.Scalar", "[\"s\", \"pad\", -10000.0]", "a") ","
	  ND("p", "aten._softmax", "[\"a\", -1, false]", "p") "," ND("o", "aten.bmm", "[\"p\", \"v\"]", "o"), "\"o\""),
	G(T("q", "f32", "[2,7,16]") "," T("k", "f32", "[2,9,16]") "," T("v", "f32", "[2,9,8]"), "",
	  ND("t", "aten.transpose.int", "[\"k\", 1, 2]", "kt") "," ND("b", "aten.bmm", "[\"q\", \"kt\"]", "s") ","
	  ND("p", "aten._softmax", "[\"s\", -1, false]", "p") "," ND("o", "aten.bmm", "[\"p\", \"v\"]", "o"), "\"o\", \"p\""),
};

static void test_attention(void **state)
{
	(void)state;
	size_t n = sizeof attn_graphs / sizeof *attn_graphs, nt = sizeof attn_traced / sizeof *attn_traced;
	int fails = on_targets("attention", attn_graphs, n, 0, NULL, 0, NULL);
	fails += on_targets("traced attention", attn_traced, nt, 0, NULL, 0, NULL);
	size_t nb = sizeof attn_bf16 / sizeof *attn_bf16;
	fails += on_targets("bf16 attention", attn_bf16, nb, 0, NULL, 0, NULL);
	if (target_runs_here("avx512_bf16")) {
		force_target = "avx512_bf16";
		for (size_t i = 0; i < nb; i++)
			if (check_graph(attn_bf16[i], 0, NULL))
				fails++, print_error("bf16 attention graph %zu failed on avx512_bf16\n", i);
		force_target = NULL;
	} else {
		print_message("# avx512_bf16 does not run here: skipped\n");
	}
	assert_int_equal(fails, 0);
	for (size_t i = 0; i < nt; i++) {
		char *c = emitted_c(attn_traced[i]);
		if ((strstr(c, "coil_sdpa(&sa)") != NULL) != (i != nt - 1))
			fail_msg("traced attention %zu: %s", i, i != nt - 1 ? "not fused" : "fused, though p is an output");
		free(c);
	}
	/* baddbmm alone: bmm, then alpha and beta */
	static const char *const bad[] = {
		G(T("s", "f32", "[3,1,5]") "," T("a", "f32", "[3,4,6]") "," T("b", "f32", "[3,6,5]"), "",
		  "{\"id\":\"b\",\"op\":\"aten.baddbmm\",\"args\":[\"s\",\"a\",\"b\"],\"kwargs\":{\"beta\":0.5,\"alpha\":2},"
		  "\"outputs\":[\"o\"]}", "\"o\""),
		G(T("s", "f32", "[5]") "," T("a", "f32", "[3,4,6]") "," T("b", "f32", "[3,6,5]"), "",
		  "{\"id\":\"b\",\"op\":\"aten.baddbmm\",\"args\":[\"s\",\"a\",\"b\"],\"kwargs\":{\"beta\":0},"
		  "\"outputs\":[\"o\"]}", "\"o\""),
	};
	assert_int_equal(check_close(bad, 2, "baddbmm"), 0);
}

static int check_split(const char *json)
{
	coil_tensor one_tu[16];
	uint64_t seed = rng;
	static const int64_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	int rc = 0, nout = 0;
	for (int pass = 0; pass < 2 && !rc; pass++) {
		art a;
		coil_graph *g;
		force_units = pass ? 3 : -1;
		rng = seed;
		keep = 1;
		rc = compile_json(json, &a, &g);
		force_units = 0;
		if (rc) {
			keep = 0;
			break;
		}
		if (pass && last_res.nunits < 2) {
			print_error("units 3 compiled %d unit(s)\n", last_res.nunits);
			rc = -1;
		}
		rc = rc ? rc : check_run(g, &a, ones, json);
		keep = 0;
		nout = g->noutputs;
		dlclose(a.h);
		graph_free(g);
		for (int i = 0; i < 16; i++) {
			if (!pass) {
				one_tu[i] = kept[i];
				memset(&kept[i], 0, sizeof kept[i]);
				continue;
			}
			if (!rc && i < nout &&
			    (tensor_numel(&kept[i]) != tensor_numel(&one_tu[i]) ||
			     memcmp(kept[i].data, one_tu[i].data, (size_t)tensor_numel(&kept[i]) * dtype_size(kept[i].dtype)))) {
				print_error("output %d differs between one unit and three\n%s\n", i, json);
				rc = -1;
			}
			tensor_free(&kept[i]);
			tensor_free(&one_tu[i]);
		}
	}
	return rc;
}

static void test_split_units(void **state)
{
	(void)state;
	int fails = 0;
	for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
		fails += check_split(fixed[i]) != 0;
	fails += check_split(repeated_blocks(5)) != 0;
	positive_params = 1;
	for (size_t i = 0; i < sizeof fusions / sizeof *fusions; i++) /* oneDNN: the runtime is a unit too */
		fails += check_split(fusions[i]) != 0;
	positive_params = 0;
	force_target = target_runs_here("x86-64-v4") ? "x86-64-v4" : target_runs_here("x86-64-v3") ? "x86-64-v3" : NULL;
	for (size_t i = 0; force_target && i < sizeof simd_graphs / sizeof *simd_graphs; i++)
		fails += check_split(simd_graphs[i]) != 0;
	force_target = NULL;
	for (int s = 0; s < 20; s++)
		fails += check_split(random_graph(1000 + s)) != 0;
	assert_int_equal(fails, 0);
}

static void test_errors(void **state)
{
	(void)state;
	coil_err err;
	assert_null(target_get("pentium", &err));
	assert_non_null(target_get("x86-64-v4", &err));
	const coil_target *t = target_get("native", &err);
	assert_non_null(t);
	assert_null(strstr(t->flags, "native"));
}

/* Column reductions (rows outer, blocks of columns in buffers; row slices
 * combined when the blocks are fewer than the team) and 2D-tiled permutes,
 * at odd sizes and a symbolic batch, on every target. */
static const char *const layout_graphs[] = {
	/* blocks over dim 1 (inner 21), a second pass (softmax, log_softmax over dim 0), Welford */
	G(T("x", "f32", "[37,19,21]"), "",
	  ND("a", "aten.sum.dim_IntList", "[\"x\", [0]]", "s") "," ND("b", "aten.amax", "[\"x\", [0]]", "mx") ","
	  ND("c", "aten.amin", "[\"x\", [0], true]", "mn") "," ND("d", "aten.var.correction", "[\"x\", [0]]", "v") ","
	  ND("e", "aten._softmax", "[\"x\", 0, false]", "sm") "," ND("f", "aten._log_softmax", "[\"x\", 0, false]", "ls") ","
	  ND("g", "aten.mean.dim", "[\"x\", [0,1]]", "m2"),
	  "\"s\",\"mx\",\"mn\",\"v\",\"sm\",\"ls\",\"m2\""),
	/* few columns: row slices per thread and their combine (sum, max, Welford) */
	G(T("x", "f32", "[4099,17]"), "",
	  ND("a", "aten.sum.dim_IntList", "[\"x\", [0]]", "s") "," ND("b", "aten.amax", "[\"x\", [0]]", "mx") ","
	  ND("c", "aten.var.correction", "[\"x\", [0]]", "v") "," ND("d", "aten.mean.dim", "[\"x\", [0], true]", "m") ","
	  ND("e", "aten.sub.Tensor", "[\"x\", \"m\"]", "y"),
	  "\"s\",\"mx\",\"v\",\"y\""),
	/* reduced dims around a kept one, a size-1 dim, a wide inner dim (several blocks) */
	G(T("x", "f32", "[30,3,1,7,19]") "," T("z", "f32", "[9,5000]"), "",
	  ND("a", "aten.sum.dim_IntList", "[\"x\", [0,3]]", "s") "," ND("b", "aten.var.correction", "[\"x\", [0,3]]", "v") ","
	  ND("c", "aten.sum.dim_IntList", "[\"z\", [0]]", "t") "," ND("d", "aten.amin", "[\"z\", [0]]", "u"),
	  "\"s\",\"v\",\"t\",\"u\""),
	/* 64 tasks or more (no row slices), short blocks in registers */
	G(T("x", "f32", "[70,9,5]"), "",
	  ND("a", "aten.sum.dim_IntList", "[\"x\", [1]]", "s") "," ND("b", "aten.var.correction", "[\"x\", [1]]", "v") ","
	  ND("c", "aten.amax", "[\"x\", [1]]", "m"),
	  "\"s\",\"v\",\"m\""),
	/* permutes: (2,0,1) of odd sizes, a transpose with a tail, and a 4D one */
	G(T("x", "f32", "[67,33,21]") "," T("y", "f32", "[19,130]") "," T("w", "f32", "[3,17,5,40]"), "",
	  ND("a", "aten.permute", "[\"x\", [2,0,1]]", "p") "," ND("b", "aten.clone", "[\"p\"]", "q") ","
	  ND("c", "aten.t", "[\"y\"]", "yt") "," ND("d", "aten.clone", "[\"yt\"]", "r") ","
	  ND("e", "aten.permute", "[\"w\", [0,3,1,2]]", "wp") "," ND("f", "aten.mul.Scalar", "[\"wp\", 2.0]", "o"),
	  "\"q\",\"r\",\"o\""),
};

/* Transposes through registers (coil_tr##w blocks): a transposed read next to
 * contiguous ones, two transposed buffers in one kernel, partial blocks on
 * both sides, outputs large enough for streaming stores (a transpose from 1 MB,
 * pointwise and row kernels from 16 MB, one row split across threads), and reads that must still be gathered (an
 * int64 buffer, a reshape of a permute). */
static const char *const transpose_graphs[] = {
	G(T("a", "f32", "[300,1001]") "," T("z", "f32", "[1001,300]") "," T("c", "f32", "[300,1001]"), "",
	  ND("a1", "aten.t", "[\"a\"]", "at") "," ND("b1", "aten.add.Tensor", "[\"at\", \"z\"]", "s") ","
	  ND("c1", "aten.permute", "[\"z\", [1,0]]", "zt") "," ND("d1", "aten.mul.Tensor", "[\"zt\", \"a\"]", "m") ","
	  ND("e1", "aten.t", "[\"c\"]", "ct") "," ND("f1", "aten.sub.Tensor", "[\"at\", \"ct\"]", "st"),
	  "\"s\",\"m\",\"st\""),
	/* short source rows (tiled w by 256 on AVX2, and on AVX-512 where the rows of
	 * stores are far apart): rows of 3; rows of 60 under 300-wide vectors with
	 * streaming stores (over 1 MB); rows of 16 whose stores lie 4096 floats apart */
	G(T("x", "f32", "[2,45,17,3]") "," T("y", "f32", "[2,3,45,17]") "," T("w", "f32", "[16,300,60]") ","
	  T("f", "f32", "[8,512,16]"), "",
	  ND("a", "aten.permute", "[\"x\", [0,3,1,2]]", "p") "," ND("b", "aten.mul.Tensor", "[\"p\", \"y\"]", "o") ","
	  ND("c", "aten.permute", "[\"w\", [0,2,1]]", "wp") "," ND("d", "aten.neg", "[\"wp\"]", "wn") ","
	  ND("e", "aten.permute", "[\"f\", [2,0,1]]", "fp") "," ND("g", "aten.clone", "[\"fp\"]", "fc"),
	  "\"o\",\"wn\",\"fc\""),
	G(T("x", "f32", "[4100,1024]") "," T("r", "f32", "[1,4200000]"), T("w", "f32", "[1024]"),
	  ND("a", "aten.relu", "[\"x\"]", "y") "," ND("b", "aten.layer_norm", "[\"x\", [1024], \"w\"]", "n") ","
	  ND("c", "aten._softmax", "[\"x\", 1, false]", "s") "," ND("d", "aten._softmax", "[\"r\", 1, false]", "rs"),
	  "\"y\",\"n\",\"s\",\"rs\""),
	/* reshapes by groups of dims: split and merge at once, an uneven regroup, a channel
	 * shuffle (view, transpose, view) read back through a slice, and a merge whose last
	 * index is the vector one */
	G(T("x", "f32", "[6,4,5]") "," T("y", "f32", "[4,6]") "," T("z", "f32", "[1,116,7,9]"), "",
	  ND("a", "aten.reshape", "[\"x\", [2,3,20]]", "r1") "," ND("b", "aten.relu", "[\"r1\"]", "o1") ","
	  ND("c", "aten.reshape", "[\"y\", [3,8]]", "r2") "," ND("d", "aten.neg", "[\"r2\"]", "o2") ","
	  ND("e", "aten.view", "[\"z\", [1,2,58,7,9]]", "z1") "," ND("f", "aten.transpose.int", "[\"z1\", 1, 2]", "z2") ","
	  ND("g", "aten.reshape", "[\"z2\", [1,116,7,9]]", "z3") "," ND("h", "aten.slice.Tensor", "[\"z3\", 1, 58, 116]", "z4") ","
	  ND("i", "aten.exp", "[\"z4\"]", "o3") "," ND("j", "aten.reshape", "[\"z\", [1,116,63]]", "z5") ","
	  ND("k", "aten.mul.Scalar", "[\"z5\", 3.0]", "o4"),
	  "\"o1\",\"o2\",\"o3\",\"o4\""),
	G(T("x", "f32", "[37,29,5]") "," T("i", "i64", "[37,29]"), "",
	  ND("a", "aten.permute", "[\"x\", [2,1,0]]", "p") "," ND("b", "aten.t", "[\"i\"]", "it") ","
	  ND("c", "aten.add.Tensor", "[\"p\", \"it\"]", "o") "," ND("d", "aten.permute", "[\"x\", [1,0,2]]", "q") ","
	  ND("e", "aten.reshape", "[\"q\", [29,185]]", "r") "," ND("f", "aten.neg", "[\"r\"]", "nr"),
	  "\"o\",\"nr\""),
};

static void test_transposes(void **state)
{
	(void)state;
	/* reshapes with a symbolic batch: it pairs up with itself, the rest regroups */
	static const int64_t b[3][8] = {{1}, {5}, {33}};
	const char *sym = G(T("x", "f32", "[\"batch\",6,4]"), "",
			    ND("a", "aten.reshape", "[\"x\", [\"batch\",24]]", "r") "," ND("b", "aten.neg", "[\"r\"]", "o") ","
			    ND("c", "aten.reshape", "[\"x\", [\"batch\",2,3,4]]", "q") "," ND("d", "aten.exp", "[\"q\"]", "e"),
			    "\"o\",\"e\"");
	int fails = on_targets("transpose", transpose_graphs, sizeof transpose_graphs / sizeof *transpose_graphs, 0, sym,
			       3, b);
	assert_int_equal(fails, 0);
	/* the emitted C takes the register path where it should */
	static const struct {
		const char *target, *tr, *st;
	} v[] = {{"x86-64-v3", "coil_tr8(&", "coil_st8(&"}, {"x86-64-v4", "coil_tr16(&", "coil_st16(&"}};
	for (size_t t = 0; t < 2; t++) {
		char *c = emitted_c_for(transpose_graphs[0], v[t].target);
		assert_non_null(strstr(c, v[t].tr));
		assert_non_null(strstr(c, v[t].st));
		free(c);
		c = emitted_c_for(transpose_graphs[1], v[t].target);
		assert_non_null(strstr(c, v[t].tr));
		/* short rows: AVX2 tiles them 8 rows at a time; AVX-512 16 where the rows of
		 * stores lie far apart, else 32 */
		assert_non_null(strstr(c, t ? "t1 < (60); t1 += 32)" : "t1 < (60); t1 += 8)"));
		assert_non_null(strstr(c, t ? "t0 < (16); t0 += 16)" : "t0 < (16); t0 += 8)"));
		free(c);
		c = emitted_c_for(transpose_graphs[4], v[t].target);
		assert_null(strstr(c, v[t].tr));
		free(c);
	}
	char *c = emitted_c_for(transpose_graphs[0], "generic");
	assert_null(strstr(c, "coil_tr8(&"));
	free(c);
}

/* A channel shuffle read NHWC between convs is a gather of interleaved runs
 * (vec.c's ilv_of): where a vector starts a group, the runs are loaded whole
 * and interleaved in registers (coil_ilv8 / coil_ilv16), elsewhere lane by
 * lane.  Two groups split in halves (every vector whole), split at an odd
 * channel (the second part's vectors start mid-group), four groups; each on
 * every target this machine runs, against the interpreter. */
static const char *const ilv_graphs[] = {
	G(T("x", "f32", "[1,64,5,6]"),
	  T("w0", "f32", "[64,64,1,1]") "," T("w1", "f32", "[8,32,1,1]") "," T("w2", "f32", "[8,32,3,3]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c0") ","
	  ND("s", "aten.channel_shuffle.default", "[\"c0\", 2]", "s0") ","
	  ND2("p", "aten.split.Tensor", "[\"s0\", 32, 1]", "\"h1\"", "\"h2\"") ","
	  ND("b", "aten.convolution.default", "[\"h1\", \"w1\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y1") ","
	  ND("c", "aten.convolution.default", "[\"h2\", \"w2\", null, [1,1], [1,1], [1,1], false, [0,0], 1]", "y2"),
	  "\"y1\",\"y2\""),
	G(T("x", "f32", "[2,64,3,5]"),
	  T("w0", "f32", "[64,64,1,1]") "," T("w1", "f32", "[8,31,1,1]") "," T("w2", "f32", "[8,33,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c0") ","
	  ND("s", "aten.channel_shuffle.default", "[\"c0\", 2]", "s0") ","
	  ND2("p", "aten.split_with_sizes.default", "[\"s0\", [31, 33], 1]", "\"h1\"", "\"h2\"") ","
	  ND("b", "aten.convolution.default", "[\"h1\", \"w1\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y1") ","
	  ND("c", "aten.convolution.default", "[\"h2\", \"w2\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y2"),
	  "\"y1\",\"y2\""),
	G(T("x", "f32", "[1,48,4,7]"),
	  T("w0", "f32", "[48,48,1,1]") "," T("w1", "f32", "[8,48,1,1]"),
	  ND("a", "aten.convolution.default", "[\"x\", \"w0\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "c0") ","
	  ND("s", "aten.channel_shuffle.default", "[\"c0\", 4]", "s0") ","
	  ND("r", "aten.relu.default", "[\"s0\"]", "r0") ","
	  ND("b", "aten.convolution.default", "[\"r0\", \"w1\", null, [1,1], [0,0], [1,1], false, [0,0], 1]", "y"),
	  "\"y\""),
};

/* A run flushes denormals (MXCSR's FTZ and DAZ) on each thread of its
 * team and gives each thread back its own bits; COIL_DENORMALS=keep at
 * create keeps gradual underflow.  x (a denormal) times 2 over 64K floats (one batch: not cut in microbatches),
 * which run in parallel at 2 threads: 0 with the flush; 2x exactly with keep,
 * on every element, which a worker left flushing by the run before fails. */
static void run_denormal(const char *json, const char *env, float want)
{
	art a;
	coil_graph *g;
	if (env)
		setenv("COIL_DENORMALS", env, 1);
	else
		unsetenv("COIL_DENORMALS");
	assert_int_equal(compile_json(json, &a, &g), 0);
	enum { N = 64 * 1024 };
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	for (int i = 0; i < N; i++)
		x[i] = 1e-40f;
	const int64_t shape[2] = {1, 65536};
	const void *in[1] = {x};
	const int64_t *shp[1] = {shape};
	void *out[1] = {y};
	coil_model *m = NULL;
	assert_int_equal(a.create(NULL, 0, 2, &m), 0);
#if defined(__x86_64__)
	const unsigned before = __builtin_ia32_stmxcsr();
#endif
	for (int r = 0; r < 2; r++) {
		assert_int_equal(a.run(m, in, shp, out), 0);
		for (int i = 0; i < N; i++)
			if (memcmp(&y[i], &want, sizeof want))
				fail_msg("COIL_DENORMALS=%s, run %d, element %d: %g, want %g", env ? env : "(unset)", r, i,
					 (double)y[i], (double)want);
	}
#if defined(__x86_64__)
	assert_int_equal(__builtin_ia32_stmxcsr() & 0x8040u, before & 0x8040u); /* the caller's own */
#endif
	a.destroy(m);
	dlclose(a.h);
	graph_free(g);
	free(x);
	free(y);
	unsetenv("COIL_DENORMALS");
}

static void test_denormals(void **state)
{
	(void)state;
#if !defined(__x86_64__)
	skip();
#endif
	const char *json = G(T("x", "f32", "[1,65536]"), "", ND("a", "aten.mul.Scalar", "[\"x\", 2.0]", "y"), "\"y\"");
	run_denormal(json, NULL, 0.0f);
	const float twice = 1e-40f + 1e-40f; /* exact: the denormals' sum */
	run_denormal(json, "keep", twice);
	run_denormal(json, "flush", 0.0f);
	run_denormal(json, "keep", twice);
}

static void test_interleaved_gather(void **state)
{
	(void)state;
	positive_params = 1;
	const size_t n = sizeof ilv_graphs / sizeof *ilv_graphs;
	assert_int_equal(on_targets("interleaved gather", ilv_graphs, n, 0, NULL, 0, NULL), 0);
	static const struct {
		const char *target, *fn;
	} v[] = {{"x86-64-v3", "coil_ilv8(&"}, {"x86-64-v4", "coil_ilv16(&"}};
	for (size_t t = 0; t < 2; t++)
		for (size_t i = 0; i < n; i++) {
			char *c = emitted_c_for(ilv_graphs[i], v[t].target);
			const char *p = strstr(c, v[t].fn);
			if (!p)
				fail_msg("interleaved gather graph %zu on %s: no %s", i, v[t].target, v[t].fn);
			/* the groups: 2, 2, 4; the runs 32 apart, or 12 */
			const char *want = i == 2 ? "], 12, 4);" : "], 32, 2);";
			if (!strstr(p, want))
				fail_msg("interleaved gather graph %zu on %s: no %s", i, v[t].target, want);
			free(c);
		}
	/* the generic target has no vectors: the plain gather */
	char *c = emitted_c_for(ilv_graphs[0], "generic");
	assert_null(strstr(c, "coil_ilv8(&"));
	assert_null(strstr(c, "coil_ilv16(&"));
	free(c);
	positive_params = 0;
}

static void test_layouts(void **state)
{
	(void)state;
	static const int64_t b[3][8] = {{1}, {3001}, {64}};
	const char *sym = G(T("x", "f32", "[\"batch\",37]") "," T("y", "f32", "[\"batch\",3,40]"), "",
			    ND("a", "aten.sum.dim_IntList", "[\"x\", [0]]", "s") "," ND("b", "aten.var.correction", "[\"x\", [0]]", "v") ","
			    ND("c", "aten._softmax", "[\"x\", 0, false]", "sm") "," ND("d", "aten.permute", "[\"y\", [2,0,1]]", "p") ","
			    ND("e", "aten.clone", "[\"p\"]", "q") "," ND("f", "aten.amax", "[\"y\", [0]]", "m"),
			    "\"s\",\"v\",\"sm\",\"q\",\"m\"");
	int fails = on_targets("layout", layout_graphs, sizeof layout_graphs / sizeof *layout_graphs, 0, sym, 3, b);
	assert_int_equal(fails, 0);
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

/* Code generation of a graph up to its C (no compiler), on a thread with a
 * 256 KiB stack: no pass may recurse as deep as the graph. */
typedef struct emit_job {
	const char *json;
	size_t len, max_c;
	int rc;
	coil_err err;
	codegen_result res;
} emit_job;

static void *emit_thread(void *p)
{
	emit_job *j = p;
	coil_graph *g = graph_parse(j->json, j->len, &j->err);
	codegen_opts o = {.target = "x86-64-v4", .max_c_bytes = j->max_c};
	j->rc = g ? codegen_compile(g, &o, NULL, &j->res, &j->err) : -1;
	graph_free(g);
	return NULL;
}

static int emit_small_stack(emit_job *j)
{
	pthread_attr_t at;
	pthread_t th;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 256 << 10);
	assert_int_equal(pthread_create(&th, &at, emit_thread, j), 0);
	pthread_join(th, NULL);
	pthread_attr_destroy(&at);
	return j->rc;
}

/* Chains of 20,000 nodes of each kind go through every pass on a small stack
 * (each pass iterative, or as deep as fusion lets an expression be); 2,000
 * of each compile and match the interpreter.  A chain of softmaxes makes C
 * linear in its length (it grew with the square), and a graph whose C passes
 * the limit is refused with a 'limit' error naming it. */
static void test_deep_graphs(void **state)
{
	(void)state;
	static const char *const kinds[] = {"relu", "transpose", "view", "add", "softmax"};
	for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
		int soft = !strcmp(kinds[k], "softmax"), n = soft ? 1000 : 20000;
		size_t len;
		char *g = chain_graph(kinds[k], n, &len);
		emit_job j = {.json = g, .len = len};
		if (emit_small_stack(&j))
			fail_msg("a chain of %d %s: %s", n, kinds[k], j.err.msg);
		print_message("# %d %s: %d kernels, %zu bytes of C\n", n, kinds[k], j.res.nkernels, j.res.c_bytes);
		free(g);
		g = chain_graph(kinds[k], soft ? 200 : 2000, &len);
		if (check_graph(g, 0, NULL))
			fail_msg("a chain of %s does not match the interpreter", kinds[k]);
		free(g);
	}
	size_t c[2];
	for (int i = 0; i < 2; i++) {
		size_t len;
		char *g = chain_graph("softmax", i ? 1000 : 250, &len);
		emit_job j = {.json = g, .len = len};
		assert_int_equal(emit_small_stack(&j), 0);
		c[i] = j.res.c_bytes;
		free(g);
	}
	print_message("# softmax chains: 250 -> %zu, 1000 -> %zu bytes of C\n", c[0], c[1]);
	/* linear: at most 4 KiB of C a softmax past the prelude (200 of them made
	 * 88 MB of C before fusion had a cost model) */
	assert_true(c[1] > c[0] && (c[1] - c[0]) / 750 < 4096);
	size_t len;
	char *g = chain_graph("relu", 10, &len);
	emit_job j = {.json = g, .len = len, .max_c = 4096};
	assert_int_equal(emit_small_stack(&j), -1);
	assert_int_equal(j.err.code, COIL_E_LIMIT);
	assert_non_null(strstr(j.err.msg, "more than the limit of 4096"));
	free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_softmax_one_kernel),
		cmocka_unit_test(test_broadcast_recompute),
		cmocka_unit_test(test_se_scale),
		cmocka_unit_test(test_microbatch),
		cmocka_unit_test(test_microbatch_cut),
		cmocka_unit_test(test_fixed),
		cmocka_unit_test(test_symbolic_batch),
		cmocka_unit_test(test_pooling),
		cmocka_unit_test(test_nan_semantics),
		cmocka_unit_test(test_roll),
		cmocka_unit_test(test_convolution),
		cmocka_unit_test(test_symbolic_spatial),
		cmocka_unit_test(test_symbolic_reshape),
		cmocka_unit_test(test_dnnl_generic_m),
		cmocka_unit_test(test_dnnl_fusions),
		cmocka_unit_test(test_dnnl_pooling),
		cmocka_unit_test(test_dnnl_channels_last),
		cmocka_unit_test(test_interleaved_gather),
		cmocka_unit_test(test_denormals),
		cmocka_unit_test(test_channel_shuffle_rewrite),
		cmocka_unit_test(test_bn_folding),
		cmocka_unit_test(test_runtime_errors),
		cmocka_unit_test(test_random_graphs),
		cmocka_unit_test(test_simd_targets),
		cmocka_unit_test(test_half),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_layouts), cmocka_unit_test(test_transposes),
		cmocka_unit_test(test_shared_functions),
		cmocka_unit_test(test_split_units),
		cmocka_unit_test(test_deep_graphs),
	};
	/* COIL_TEST_FILTER=test_split*: run only the matching tests */
	if (getenv("COIL_TEST_FILTER"))
		cmocka_set_test_filter(getenv("COIL_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
