/* codegen tests: compile small graphs to shared objects, run them through the
 * artifact ABI and compare with the reference interpreter. */
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
		double x = v->dtype == COIL_BOOL ? (double)(rnd() & 1)
			   : dtype_is_int(v->dtype) ? (double)(rnd() % 5)
						     : urand() * 4 - 2;
		dtype_store(v->dtype, t->data, (size_t)e, x);
	}
	(void)g;
}

static int compile_json(const char *json, art *a, coil_graph **gout)
{
	coil_err err = {{0}};
	coil_graph *g = graph_parse(json, strlen(json), &err);
	if (!g) {
		print_error("parse: %s\n%s\n", err.msg, json);
		return -1;
	}
	char so[128];
	snprintf(so, sizeof so, "%s/m%d.so", tmpdir, sos++);
	codegen_opts o = {.opt = "-O1", .werror = 1, .target = "generic"};
	codegen_result res;
	if (codegen_compile(g, &o, so, &res, &err)) {
		print_error("compile: %s\n%s\n", err.msg, json);
		graph_free(g);
		return -1;
	}
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
	*(void **)&a->lasterr = dlsym(a->h, "coil_last_error");
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
	coil_err err = {{0}};
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
	for (int j = 0; j < g->noutputs && !bad; j++) {
		int64_t n = tensor_numel(&ref[j]);
		double mag = 0;
		for (int64_t e = 0; e < n; e++) {
			double r = dtype_load(ref[j].dtype, ref[j].data, (size_t)e);
			if (isfinite(r) && fabs(r) > mag)
				mag = fabs(r);
		}
		for (int64_t e = 0; e < n && !bad; e++) {
			double r = dtype_load(ref[j].dtype, ref[j].data, (size_t)e);
			double x = dtype_load(got[j].dtype, got[j].data, (size_t)e);
			if (isnan(r) && isnan(x))
				continue;
			if (!(fabs(r - x) <= 1e-5 * (mag > 1 ? mag : 1) + 1e-5 * fabs(r))) {
				print_error("output %d elem %lld: got %.9g, want %.9g\n%s\n", j, (long long)e, x, r, json);
				bad = 1;
			}
		}
	}
out:
	for (int i = 0; i < 16; i++) {
		tensor_free(&in[i]);
		tensor_free(&par[i]);
		tensor_free(&ref[i]);
		tensor_free(&got[i]);
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
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_softmax_one_kernel),
		cmocka_unit_test(test_fixed),
		cmocka_unit_test(test_symbolic_batch),
		cmocka_unit_test(test_random_graphs),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
