/* autocast: an f32 graph rewritten as torch.autocast("cpu", dtype=t) would
 * have traced it (graph.h, graph_autocast).  Autocast's CPU rules, as coil
 * runs them:
 *   - convolutions and matrix products (mm, addmm, bmm) take their float
 *     operands cast to t, and so give t;
 *   - softmax, log_softmax, layer norm, sums, means, variances and norms
 *     take theirs cast to f32 (they accumulate), and so do adaptive pooling,
 *     upsampling and the pooling oneDNN cannot run (their loops are f32);
 *     the rest of pooling runs in t (max is exact; oneDNN's average
 *     accumulates in f32);
 *   - everything else runs in what its operands promote to;
 *   - the graph's float outputs are cast back to the dtype they had.
 * The rewrite is done on the canonical text (its nodes found in the parsed
 * copy by their results' names, "%N"), with the casts as aten._to_copy
 * nodes, and parsed again: shape and dtype inference run as for any graph.  A weight's cast is folded
 * (fold.c): converted once, at create. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "common/graph.h"

enum { AC_NONE, AC_LOW, AC_F32 };

static int ac_class(coil_graph *g, const coil_node *n, const char *read)
{
	dn_pool w;
	switch (n->op) {
	case OP_CONVOLUTION: case OP_MM: case OP_ADDMM: case OP_BMM:
		return AC_LOW;
	case OP_MAX_POOL2D_WI: case OP_MAX_POOL2D: case OP_AVG_POOL2D: /* oneDNN's, unless indices are read */
		return (n->nout == 1 || n->outs[1] < 0 || !read[n->outs[1]]) && dn_pool_window(g, n, &w) == 0 ? AC_NONE
														  : AC_F32;
	case OP_SOFTMAX_: case OP_SOFTMAX: case OP_LOG_SOFTMAX_: case OP_LOG_SOFTMAX: case OP_LAYER_NORM: case OP_NATIVE_GROUP_NORM:
	case OP_NATIVE_LAYER_NORM: case OP_SUM: case OP_SUM_DIM: case OP_MEAN: case OP_MEAN_DIM: case OP_VAR_CORR:
	case OP_VAR_DIM: case OP_STD_CORR: case OP_STD_DIM: case OP_LOGSUMEXP: case OP_NORM: case OP_ADAPTIVE_AVG_POOL2D_: case OP_ADAPTIVE_AVG_POOL2D:
	case OP_ADAPTIVE_MAX_POOL2D: case OP_UPSAMPLE_BILINEAR2D_VEC: case OP_UPSAMPLE_BILINEAR2D:
	case OP_UPSAMPLE_NEAREST2D_VEC: case OP_UPSAMPLE_NEAREST2D:
		return AC_F32;
	default:
		return AC_NONE;
	}
}

typedef struct actx {
	const coil_graph *g; /* the canonical text parsed */
	json_t *out;         /* the new node list */
	int next;
} actx;

/* Per value of g: read by a node or an output. */
static char *read_values(const coil_graph *g)
{
	char *r = calloc((size_t)g->nvals + 1, 1);
	for (int i = 0; r && i < g->nnodes; i++) {
		const coil_node *n = &g->nodes[i];
		for (int a = 0; a < op_get(n->op)->nargs; a++)
			if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
				for (int k = 0; k < n->args[a].n; k++)
					if (n->args[a].v[k] >= 0)
						r[n->args[a].v[k]] = 1;
	}
	for (int k = 0; r && k < g->noutputs; k++)
		r[g->outputs[k]] = 1;
	return r;
}

/* "%acK" for K = c->next: a name for a cast's result.  Intermediates are
 * "%N" in the canonical text, and no input or param may start with "%ac"
 * (ac_names_free). */
static void fresh(actx *c, char *buf, size_t cap)
{
	snprintf(buf, cap, "%%ac%d", c->next++);
}

/* No input or param name starts with "%ac" (the casts' names). */
static int ac_names_free(const coil_graph *g, coil_err *err)
{
	for (int k = 0; k < g->ninputs + g->nparams; k++) {
		const char *nm = g->vals[k < g->ninputs ? g->inputs[k] : g->params[k - g->ninputs]].name;
		if (nm && !strncmp(nm, "%ac", 3))
			return coil_err_input(err, "autocast: the name '%.60s' is reserved for its casts (rename it)", nm);
	}
	return 0;
}

/* Appends `name = _to_copy(from, dtype=t)`; name into buf. */
static int cast_node(actx *c, const char *from, coil_dtype t, char *buf, size_t cap)
{
	fresh(c, buf, cap);
	json_t *n = json_pack("{s:s,s:[s],s:{s:s},s:[s]}", "op", "aten._to_copy.default", "args", from, "kwargs",
			      "dtype", dtype_name(t), "outputs", buf);
	return n ? json_array_append_new(c->out, n) : -1;
}

/* A renaming: to[K] for the cast "%acK" that turned out to be a no-op (its
 * operand's name), NULL for the others. */
typedef struct renames {
	int n, cap;
	const char **to;
} renames;

static const char *renamed(const renames *r, const char *s)
{
	if (strncmp(s, "%ac", 3))
		return s;
	long k = strtol(s + 3, NULL, 10);
	return k >= 0 && k < r->cap && r->to[k] ? r->to[k] : s;
}

static int rename_in(const renames *r, json_t *a)
{
	if (json_is_string(a)) {
		const char *to = renamed(r, json_string_value(a));
		return to != json_string_value(a) ? json_string_set(a, to) : 0;
	}
	size_t i;
	json_t *e;
	json_array_foreach(a, i, e)
		if ((json_is_string(e) || json_is_array(e)) && rename_in(r, e))
			return -1;
	return 0;
}

/* The casts of the rewrite whose operand already had the dtype (a product
 * reading another's result, an f32 op reading an f32 value) dropped, so
 * that nothing stands between, e.g., two convolutions; res parsed again. */
static coil_graph *drop_noop_casts(coil_graph *res, json_t *root, int ncasts, coil_err *err)
{
	renames r = {.cap = ncasts};
	r.to = calloc((size_t)ncasts + 1, sizeof *r.to);
	for (int i = 0; r.to && i < res->nnodes; i++) {
		coil_node *n = &res->nodes[i];
		const coil_value *o = &res->vals[n->outs[0]], *x = n->op == OP_TO_COPY ? node_in(res, n, 0) : NULL;
		long k = x && o->name && !strncmp(o->name, "%ac", 3) ? strtol(o->name + 3, NULL, 10) : -1;
		if (k >= 0 && k < ncasts && x->name && x->dtype == o->dtype)
			r.to[k] = x->name, r.n++;
	}
	coil_graph *out = res;
	if (!r.to) {
		coil_err_oom(err);
		out = NULL;
	} else if (r.n) {
		json_t *nodes = json_object_get(root, "nodes"), *kept = json_array();
		size_t i;
		json_t *nj;
		int bad = !kept;
		json_array_foreach(nodes, i, nj) {
			const char *o0 = json_string_value(json_array_get(json_object_get(nj, "outputs"), 0));
			if (o0 && renamed(&r, o0) != o0)
				continue;
			bad |= rename_in(&r, json_object_get(nj, "args")) || json_array_append(kept, nj);
		}
		bad |= rename_in(&r, json_object_get(root, "outputs")) || json_object_set_new(root, "nodes", kept);
		out = bad ? NULL : graph_from_json(root, err);
		if (bad)
			coil_err_oom(err);
	}
	free(r.to);
	if (out != res)
		graph_free(res);
	return out;
}

coil_graph *graph_autocast(coil_graph *g, coil_dtype t, coil_err *err)
{
	size_t len;
	const char *text = ac_names_free(g, err) ? NULL : graph_canonical(g, &len, err);
	if (!text)
		return NULL;
	json_t *root = graph_json_load(text, len, err);
	coil_graph *gc = root ? graph_parse(text, len, err) : NULL, *res = NULL;
	json_t *nodes = root ? json_object_get(root, "nodes") : NULL, *outs = root ? json_object_get(root, "outputs") : NULL;
	actx c = {.g = gc, .out = json_array()};
	int *by = NULL;
	char *read = NULL;
	if (!gc || !json_is_array(nodes) || !json_is_array(outs) || !c.out ||
	    json_array_size(nodes) != (size_t)gc->nnodes || json_array_size(outs) != (size_t)gc->noutputs) {
		if (err && !err->msg[0])
			coil_errf(err, "autocast: the canonical graph does not read back");
		goto out;
	}
	/* the parsed node of each JSON node, by its first result's "%N" */
	by = calloc((size_t)gc->nvals + 1, sizeof *by);
	read = read_values(gc);
	if (!by || !read)
		goto oom;
	for (int i = 0; i < gc->nnodes; i++) {
		const char *nm = gc->vals[gc->nodes[i].outs[0]].name;
		long k = nm && nm[0] == '%' ? strtol(nm + 1, NULL, 10) : -1;
		if (k >= 0 && k < gc->nvals)
			by[k] = i + 1;
	}
	char name[32];
	for (size_t j = 0; j < json_array_size(nodes); j++) {
		json_t *nj = json_array_get(nodes, j), *args = json_object_get(nj, "args");
		const char *o0 = json_string_value(json_array_get(json_object_get(nj, "outputs"), 0));
		long k = o0 && o0[0] == '%' ? strtol(o0 + 1, NULL, 10) : -1;
		if (k < 0 || k >= gc->nvals || !by[k]) {
			coil_errf(err, "autocast: node %zu of the canonical graph not found", j);
			goto out;
		}
		coil_node *n = &gc->nodes[by[k] - 1];
		int cls = ac_class(gc, n, read);
		for (int a = 0; cls != AC_NONE && a < op_get(n->op)->nargs; a++) {
			if (n->args[a].kind != ARG_TENSOR || n->args[a].v[0] < 0 || (size_t)a >= json_array_size(args))
				continue;
			const coil_value *v = &gc->vals[n->args[a].v[0]];
			coil_dtype to = cls == AC_LOW ? t : COIL_F32;
			if (!dtype_is_float(v->dtype) || v->dtype == COIL_F64 || (cls == AC_LOW && v->dtype != COIL_F32))
				continue;
			json_t *from = json_array_get(args, (size_t)a);
			if (!json_is_string(from) || cast_node(&c, json_string_value(from), to, name, sizeof name) ||
			    json_array_set_new(args, (size_t)a, json_string(name)))
				goto oom;
		}
		if (json_array_append(c.out, nj))
			goto oom;
	}
	for (int k = 0; k < gc->noutputs; k++) {
		const coil_value *v = &gc->vals[gc->outputs[k]];
		json_t *o = json_array_get(outs, (size_t)k);
		if (!dtype_is_float(v->dtype) || !json_is_string(o))
			continue;
		if (cast_node(&c, json_string_value(o), v->dtype, name, sizeof name) ||
		    json_array_set_new(outs, (size_t)k, json_string(name)))
			goto oom;
	}
	if (json_object_set(root, "nodes", c.out))
		goto oom;
	res = graph_from_json(root, err);
	if (res)
		res = drop_noop_casts(res, root, c.next, err);
	if (!res)
		coil_err_prefix(err, "autocast to %s", dtype_name(t));
	goto out;
oom:
	coil_err_oom(err);
out:
	free(by);
	free(read);
	json_decref(c.out);
	json_decref(root);
	graph_free(gc);
	return res;
}
