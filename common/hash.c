/* Canonical form and hash of a graph (docs/graph-format.md, "Canonical form").
 * Values are renamed by first reach in a depth-first walk from the outputs, so
 * node order, node ids, intermediate names, JSON key order and dead nodes do
 * not matter; inputs and params keep their names (they are the interface). */
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/graph.h"

static json_t *jnum(double f, int is_int, int64_t i)
{
	if (is_int)
		return json_integer(i);
	if (isnan(f))
		return json_string("nan");
	if (isinf(f))
		return json_string(f > 0 ? "inf" : "-inf");
	return json_real(f);
}

/* tab: the graph's symbols with the free ones renamed by index (s0, s1, ...):
 * their names are not semantic; derived ones print their definition. */
static json_t *jdim(const coil_dim *d, const coil_symtab *tab)
{
	int64_t c;
	if (dim_is_const(d, &c))
		return json_integer(c);
	char buf[512];
	return json_string(dim_format(d, tab, buf, sizeof buf));
}

static json_t *jshape(const coil_value *v, const coil_symtab *tab)
{
	json_t *a = json_array();
	for (int i = 0; i < v->rank; i++)
		json_array_append_new(a, jdim(&v->shape[i], tab));
	return a;
}

typedef struct canon {
	coil_graph *g;
	char **name; /* canonical name per value */
	int next;
	json_t *consts, *nodes;
	coil_symtab *tab;
	int *order, norder; /* if order: the graph's node index of each canonical node */
} canon;

static json_t *jref(canon *c, int v)
{
	return v < 0 ? json_null() : json_string(c->name[v]);
}

static json_t *jarg(canon *c, const coil_arg *a)
{
	json_t *j;
	switch (a->kind) {
	case ARG_NONE: return json_null();
	case ARG_TENSOR: return jref(c, a->v[0]);
	case ARG_TENSORS:
		j = json_array();
		for (int k = 0; k < a->n; k++)
			json_array_append_new(j, jref(c, a->v[k]));
		return j;
	case ARG_INT: return json_integer(a->i);
	case ARG_SCALAR: return jnum(a->f, a->is_int, a->i);
	case ARG_BOOL: return json_boolean(a->i);
	case ARG_STR: return json_string(a->s);
	case ARG_DTYPE: return json_string(dtype_name((coil_dtype)a->i));
	case ARG_FLOATS:
		j = json_array();
		for (int k = 0; k < a->n; k++)
			json_array_append_new(j, jnum(a->floats[k], 0, 0));
		return j;
	case ARG_INTS:
	case ARG_DIMS:
		j = json_array();
		for (int k = 0; k < a->n; k++)
			json_array_append_new(j, a->kind == ARG_INTS ? json_integer(a->ints[k]) : jdim(&a->dims[k], c->tab));
		return j;
	}
	return json_null();
}

static int name_value(canon *c, int v)
{
	coil_value *val = &c->g->vals[v];
	if (c->name[v])
		return 0;
	if (val->kind == VAL_INPUT || val->kind == VAL_PARAM) {
		c->name[v] = (char *)val->name;
		return 0;
	}
	c->name[v] = arena_printf(c->g->arena, "%%%d", c->next++);
	if (!c->name[v])
		return -1;
	if (val->kind == VAL_CONST) {
		json_t *d = json_array();
		int64_t numel = 1;
		for (int i = 0; i < val->rank; i++)
			numel *= dim_min(&val->shape[i]);
		for (int64_t e = 0; e < numel; e++) {
			double x = dtype_load(val->dtype, val->data, (size_t)e);
			/* i64 read directly: a double would merge values beyond 2^53 */
			json_array_append_new(d, val->dtype == COIL_BOOL  ? json_boolean(x != 0)
						 : val->dtype == COIL_I64 ? json_integer(((const int64_t *)val->data)[e])
									  : jnum(x, !dtype_is_float(val->dtype), (int64_t)x));
		}
		json_array_append_new(c->consts, json_pack("{s:s,s:s,s:o,s:o}", "name", c->name[v], "dtype",
							   dtype_name(val->dtype), "shape", jshape(val, c->tab), "data", d));
	}
	return 0;
}

static int emit_node(canon *c, const coil_node *n)
{
	if (c->order)
		c->order[c->norder++] = (int)(n - c->g->nodes);
	const op_info *oi = op_get(n->op);
	json_t *args = json_array(), *outs = json_array();
	for (int i = 0; i < oi->nargs; i++) {
		const coil_arg *a = &n->args[i];
		/* a SymInt given as an expression is one value, as it was written */
		json_array_append_new(args, (oi->args[i].type == S_SYMINT || oi->args[i].type == S_SYMSCALAR) &&
						    a->kind == ARG_DIMS && a->n == 1
						    ? jdim(&a->dims[0], c->tab) : jarg(c, a));
	}
	for (int k = 0; k < n->nout; k++) {
		if (name_value(c, n->outs[k]))
			return -1;
		json_array_append_new(outs, json_string(c->name[n->outs[k]]));
	}
	return json_array_append_new(c->nodes, json_pack("{s:s,s:o,s:o}", "op", oi->name, "args", args, "outputs", outs));
}

/* Iterative post-order DFS from value v: a node is emitted after all the
 * values it reads, which get their names first. */
static int visit(canon *c, int root, char *state, int *stack)
{
	coil_graph *g = c->g;
	int sp = 0;
	stack[sp++] = root;
	while (sp) {
		int v = stack[sp - 1];
		coil_value *val = &g->vals[v];
		if (val->kind != VAL_NODE) {
			sp--;
			if (name_value(c, v))
				return -1;
			continue;
		}
		int ni = val->index;
		const coil_node *n = &g->nodes[ni];
		if (state[ni] == 2) {
			sp--;
			continue;
		}
		if (state[ni] == 0) {
			state[ni] = 1;
			/* push inputs in reverse so the first argument is visited first */
			const op_info *oi = op_get(n->op);
			for (int i = oi->nargs - 1; i >= 0; i--) {
				const coil_arg *a = &n->args[i];
				if (a->kind != ARG_TENSOR && a->kind != ARG_TENSORS)
					continue;
				for (int k = a->n - 1; k >= 0; k--) {
					int u = a->v[k];
					if (u < 0 || c->name[u])
						continue;
					if (g->vals[u].kind == VAL_NODE && state[g->vals[u].index])
						continue;
					stack[sp++] = u;
				}
			}
			continue;
		}
		sp--;
		state[ni] = 2;
		if (emit_node(c, n))
			return -1;
	}
	return 0;
}

static json_t *decls(coil_graph *g, const int *list, int n, const coil_symtab *tab)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		coil_value *v = &g->vals[list[i]];
		json_array_append_new(a, json_pack("{s:s,s:s,s:o}", "name", v->name, "dtype", dtype_name(v->dtype),
						   "shape", jshape(v, tab)));
	}
	return a;
}

static const char *canonical(coil_graph *g, size_t *len, int *order, int *norder, coil_err *err)
{
	canon c = {.g = g, .tab = malloc(sizeof(coil_symtab)), .order = order};
	int total_stack = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const op_info *oi = op_get(g->nodes[i].op);
		for (int a = 0; a < oi->nargs; a++)
			total_stack += g->nodes[i].args[a].n;
	}
	c.name = calloc((size_t)g->nvals + 1, sizeof(char *));
	char *state = calloc((size_t)g->nnodes + 1, 1);
	int *stack = malloc(((size_t)total_stack + (size_t)g->noutputs + 1) * sizeof(int));
	c.consts = json_array();
	c.nodes = json_array();
	json_t *outs = json_array(), *root = NULL, *syms = json_object();
	char *text = NULL, *res = NULL;
	if (!c.name || !state || !stack || !c.consts || !c.nodes || !outs || !c.tab || !syms)
		goto out;
	symtab_canonical(&g->syms, c.tab);
	for (int k = 0; k < g->syms.n; k++) {
		if (g->syms.kind[k] == SYM_FREE && (g->syms.lo[k] || g->syms.hi[k])) {
			json_t *r = json_object();
			if (g->syms.lo[k])
				json_object_set_new(r, "min", json_integer(g->syms.lo[k]));
			if (g->syms.hi[k])
				json_object_set_new(r, "max", json_integer(g->syms.hi[k]));
			json_object_set_new(syms, c.tab->name[k], r);
		}
	}
	for (int i = 0; i < g->noutputs; i++) {
		if (visit(&c, g->outputs[i], state, stack))
			goto out;
		json_array_append_new(outs, json_string(c.name[g->outputs[i]]));
	}
	root = json_pack("{s:s,s:i,s:o,s:o,s:O,s:O,s:O}", "format", "coil-graph", "version", COIL_FORMAT_VERSION,
			 "inputs", decls(g, g->inputs, g->ninputs, c.tab), "params", decls(g, g->params, g->nparams, c.tab),
			 "constants", c.consts, "nodes", c.nodes, "outputs", outs);
	if (!root)
		goto out;
	if (json_object_size(syms))
		json_object_set(root, "symbols", syms);
	text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	if (!text)
		goto out;
	*len = strlen(text);
	if (norder)
		*norder = c.norder;
	res = arena_alloc(g->arena, *len + 1);
	if (res)
		memcpy(res, text, *len + 1);
out:
	if (!res)
		coil_errf(err, "out of memory while making the canonical graph");
	free(text);
	json_decref(root);
	json_decref(c.consts);
	json_decref(c.nodes);
	json_decref(outs);
	json_decref(syms);
	free(c.tab);
	free(c.name);
	free(state);
	free(stack);
	return res;
}

const char *graph_canonical(coil_graph *g, size_t *len, coil_err *err) { return canonical(g, len, NULL, NULL, err); }

int graph_canonical_order(coil_graph *g, int *order, coil_err *err)
{
	size_t len;
	int n = 0;
	return canonical(g, &len, order, &n, err) ? n : -1;
}

int graph_hash(coil_graph *g, char hex[65], coil_err *err)
{
	size_t len;
	const char *text = graph_canonical(g, &len, err);
	if (!text)
		return -1;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return coil_errf(err, "SHA-256 failed");
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}
