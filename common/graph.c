/* JSON -> validated graph: declarations, nodes with schema-driven argument
 * parsing, topological order, then shape and dtype inference (infer.c). */
#include "common/graph.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/infer.h"

int node_errf(coil_err *err, const coil_node *n, const char *fmt, ...)
{
	if (!err)
		return -1;
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	coil_err_input(err, "node '%s' (%s): %s", n->id, op_name(n->op), msg);
	coil_err_node(err, n->id);
	return -1;
}

/* --- guards and symbols ------------------------------------------------- */

int graph_guard(coil_graph *g, const coil_node *n, enum guard_kind kind, const coil_dim *e, int64_t c,
		const char *why, coil_err *err)
{
	int64_t v;
	char b[256];
	if (kind == GUARD_DIV) {
		int all = c > 0;
		for (int i = 0; all && i < e->n; i++)
			all = e->t[i].coef % c == 0;
		if (all)
			return 0;
		if (dim_is_const(e, &v)) {
			coil_err_input(err, "%s %s is not divisible by %lld", why, dim_format(e, &g->syms, b, sizeof b),
				       (long long)c);
			return n ? node_errf(err, n, "%s", err->msg) : -1;
		}
	} else {
		coil_dim cd = dim_const(c), d;
		if (dim_sub(&d, e, &cd, err))
			return -1;
		if (dim_nonneg(&d, &g->syms))
			return 0;
		if (dim_is_const(e, &v)) {
			coil_err_input(err, "%s %lld is below %lld", why, (long long)v, (long long)c);
			return n ? node_errf(err, n, "%s", err->msg) : -1;
		}
	}
	int node = n ? (int)(n - g->nodes) : -1;
	for (int i = 0; i < g->nguards; i++)
		if (g->guards[i].kind == kind && g->guards[i].c == c && dim_eq(&g->guards[i].e, e))
			return 0;
	if (g->nguards == g->capguards) {
		int cap = g->capguards ? 2 * g->capguards : 16;
		coil_guard *ng = arena_alloc(g->arena, (size_t)cap * sizeof *ng);
		if (!ng)
			return coil_err_oom(err);
		if (g->nguards)
			memcpy(ng, g->guards, (size_t)g->nguards * sizeof *ng);
		g->guards = ng;
		g->capguards = cap;
	}
	coil_guard *gd = &g->guards[g->nguards++];
	gd->kind = kind;
	gd->e = *e;
	gd->c = c;
	gd->node = node;
	gd->why = arena_strdup(g->arena, why);
	return gd->why ? 0 : coil_err_oom(err);
}

char *guard_format(const coil_symtab *tab, const coil_guard *gd, char *buf, size_t cap)
{
	char e[256];
	dim_format(&gd->e, tab, e, sizeof e);
	if (gd->kind == GUARD_DIV)
		snprintf(buf, cap, "%s%s%s %% %lld == 0", gd->e.n > 1 ? "(" : "", e, gd->e.n > 1 ? ")" : "",
			 (long long)gd->c);
	else
		snprintf(buf, cap, "%s >= %lld", e, (long long)gd->c);
	return buf;
}

int graph_sym_binding(const coil_graph *g, int k, int *dim)
{
	for (int i = 0; i < g->ninputs; i++) {
		const coil_value *v = &g->vals[g->inputs[i]];
		for (int d = 0; d < v->rank; d++)
			if (dim_uses(&v->shape[d], k)) {
				*dim = d;
				return i;
			}
	}
	*dim = -1;
	return -1;
}

int graph_sym_root(const coil_graph *g, const coil_dim *e)
{
	for (int k = 0; k < g->syms.n; k++) {
		if (!dim_uses(e, k))
			continue;
		if (g->syms.kind[k] == SYM_FREE)
			return k;
		int r = graph_sym_root(g, &g->syms.a[k]);
		if (r < 0 && g->syms.kind[k] != SYM_FLOORDIV)
			r = graph_sym_root(g, &g->syms.b[k]);
		if (r >= 0)
			return r;
	}
	return -1;
}

/* "input 'x' dim 2 (h = 5)" for the free symbol k. */
static void sym_where(const coil_graph *g, int k, const int64_t *vals, char *buf, size_t cap)
{
	int d, i = k >= 0 ? graph_sym_binding(g, k, &d) : -1;
	if (i < 0)
		snprintf(buf, cap, "the inputs");
	else
		snprintf(buf, cap, "input '%s' dim %d (%s = %lld)", g->vals[g->inputs[i]].name, d, g->syms.name[k],
			 (long long)vals[k]);
}

int graph_check_syms(const coil_graph *g, int64_t *vals, coil_err *err)
{
	char w[200], b[300];
	for (int k = 0; k < g->syms.n; k++) {
		const coil_symtab *t = &g->syms;
		int64_t lo = t->lo[k] > 0 ? t->lo[k] : 0;
		if (t->kind[k] != SYM_FREE || (vals[k] >= lo && (!t->hi[k] || vals[k] <= t->hi[k])))
			continue;
		sym_where(g, k, vals, w, sizeof w);
		char hi[32] = "inf";
		if (t->hi[k])
			snprintf(hi, sizeof hi, "%lld", (long long)t->hi[k]);
		return coil_err_input(err, "%s: outside the range [%lld, %s] of '%s' (guard)", w, (long long)lo, hi,
				      t->name[k]);
	}
	if (symtab_derive(&g->syms, vals, err))
		return -1;
	for (int i = 0; i < g->nguards; i++) {
		const coil_guard *gd = &g->guards[i];
		int64_t v;
		if (dim_eval(&gd->e, vals, &v, err))
			return -1;
		if (gd->kind == GUARD_GE ? v >= gd->c : v % gd->c == 0)
			continue;
		sym_where(g, graph_sym_root(g, &gd->e), vals, w, sizeof w);
		guard_format(&g->syms, gd, b, sizeof b);
		const coil_node *n = gd->node >= 0 ? &g->nodes[gd->node] : NULL;
		coil_err_input(err, "%s: guard %s fails (%s of node '%s' (%s))", w, b, gd->why, n ? n->id : "?",
			       n ? op_name(n->op) : "?");
		if (n)
			coil_err_node(err, n->id);
		return -1;
	}
	return 0;
}

/* --- name table: open addressing, name -> value index ------------------- */

typedef struct names {
	int cap;
	int *slot; /* value index + 1; 0 empty */
} names;

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

static int names_find(const names *t, const coil_graph *g, const char *s)
{
	for (uint64_t i = hash_str(s) & (uint64_t)(t->cap - 1);; i = (i + 1) & (uint64_t)(t->cap - 1)) {
		int v = t->slot[i] - 1;
		if (v < 0)
			return -1;
		if (!strcmp(g->vals[v].name, s))
			return v;
	}
}

static void names_put(names *t, const coil_graph *g, int v)
{
	uint64_t i = hash_str(g->vals[v].name) & (uint64_t)(t->cap - 1);
	while (t->slot[i])
		i = (i + 1) & (uint64_t)(t->cap - 1);
	t->slot[i] = v + 1;
}

/* --- parse state ---------------------------------------------------------- */

typedef struct pstate {
	coil_graph *g;
	names nm;
	coil_err *err;
} pstate;

static int oom(coil_err *err)
{
	return coil_err_oom(err);
}

static int new_value(pstate *ps, const char *name, enum value_kind kind, int index, const char *where)
{
	coil_graph *g = ps->g;
	if (name) {
		size_t n = strlen(name);
		if (n == 0 || n > COIL_MAX_NAME)
			return coil_err_input(ps->err, "%s: name must be 1 to %d characters", where, COIL_MAX_NAME);
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
				return coil_err_input(ps->err, "%s: name contains a non-printable character", where);
		if (names_find(&ps->nm, g, name) >= 0)
			return coil_err_input(ps->err, "%s: name '%s' is defined twice", where, name);
	}
	if (g->nvals == g->capvals) {
		int cap = g->capvals ? g->capvals * 2 : 64;
		coil_value *nv = realloc(g->vals, (size_t)cap * sizeof *nv);
		if (!nv)
			return oom(ps->err);
		g->vals = nv;
		g->capvals = cap;
	}
	int v = g->nvals++;
	coil_value *val = &g->vals[v];
	memset(val, 0, sizeof *val);
	val->kind = kind;
	val->index = index;
	val->dtype = COIL_F32;
	if (name) {
		val->name = arena_strdup(g->arena, name);
		if (!val->name)
			return oom(ps->err);
		names_put(&ps->nm, g, v);
	}
	return v;
}

/* Numbers that may be written as "nan", "inf", "-inf". */
static int get_number(json_t *j, double *out)
{
	if (json_is_number(j)) {
		*out = json_number_value(j);
		return 0;
	}
	if (json_is_string(j)) {
		const char *s = json_string_value(j);
		if (!strcmp(s, "nan"))
			*out = NAN;
		else if (!strcmp(s, "inf"))
			*out = INFINITY;
		else if (!strcmp(s, "-inf"))
			*out = -INFINITY;
		else
			return -1;
		return 0;
	}
	return -1;
}

/* Checks that a tensor of this shape stays under COIL_MAX_BYTES (symbols as 1). */
/* Sizes are non-negative and a tensor fits in 2^40 bytes (symbols taken as
 * 1).  A symbolic size not provably non-negative is a guard of node n (an
 * error for a declaration, n NULL). */
static int check_size(coil_graph *g, const coil_node *n, int res, const coil_dim *shape, int rank,
		      coil_dtype t, const char *where, coil_err *err)
{
	int64_t bytes = (int64_t)dtype_size(t), c;
	for (int i = 0; i < rank; i++) {
		int64_t d = dim_min(&shape[i]);
		if (dim_is_const(&shape[i], &c) && c < 0)
			return coil_err_input(err, "%s: dim %d is negative", where, i);
		if (!dim_nonneg(&shape[i], &g->syms)) {
			if (!n)
				return coil_err_input(err, "%s: dim %d can be negative", where, i);
			char why[64];
			snprintf(why, sizeof why, "size of result %d dim %d", res, i);
			if (graph_guard(g, n, GUARD_GE, &shape[i], 0, why, err))
				return -1;
		}
		if (d < 0)
			d = 0;
		if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > COIL_MAX_BYTES)
			return coil_err_input(err, "%s: tensor larger than 2^40 bytes", where);
	}
	return 0;
}

static int parse_shape(pstate *ps, json_t *js, coil_value *val, int allow_syms, const char *where)
{
	char w[300];
	if (!json_is_array(js))
		return coil_err_input(ps->err, "%s: 'shape' must be an array", where);
	size_t rank = json_array_size(js);
	if (rank > COIL_MAX_RANK)
		return coil_err_input(ps->err, "%s: rank %zu exceeds %d", where, rank, COIL_MAX_RANK);
	val->rank = (int)rank;
	for (size_t i = 0; i < rank; i++) {
		json_t *d = json_array_get(js, i);
		snprintf(w, sizeof w, "%s: shape[%zu]", where, i);
		if (json_is_integer(d)) {
			json_int_t x = json_integer_value(d);
			if (x < 0)
				return coil_err_input(ps->err, "%s: negative size %lld", w, (long long)x);
			val->shape[i] = dim_const(x);
		} else if (json_is_string(d) && allow_syms) {
			coil_dim dd;
			const char *s = json_string_value(d);
			if (dim_parse(s, &ps->g->syms, 1, &dd, ps->err))
				return coil_err_prefix(ps->err, "%s", w);
			int pows = 0;
			for (int k = 0; dd.n == 1 && k < COIL_MAX_SYMS; k++)
				pows += dd.t[0].pow[k];
			if (dd.n != 1 || dd.t[0].coef != 1 || pows != 1)
				return coil_err_input(ps->err, "%s: '%s' must be a single symbol", w, s);
			val->shape[i] = dd;
		} else {
			return coil_err_input(ps->err, "%s: must be a non-negative integer%s", w,
					 allow_syms ? " or a symbol name" : "");
		}
	}
	return check_size(ps->g, NULL, 0, val->shape, val->rank, val->dtype, where, ps->err);
}

static int parse_decls(pstate *ps, json_t *root, const char *key, enum value_kind kind, int **list,
		       int *count)
{
	json_t *arr = json_object_get(root, key);
	if (!arr) {
		*count = 0;
		return 0;
	}
	if (!json_is_array(arr))
		return coil_err_input(ps->err, "'%s' must be an array", key);
	size_t n = json_array_size(arr);
	if (n > COIL_MAX_NODES)
		return coil_err_input(ps->err, "'%s' has too many entries", key);
	*list = arena_alloc(ps->g->arena, (n ? n : 1) * sizeof(int));
	if (!*list)
		return oom(ps->err);
	for (size_t i = 0; i < n; i++) {
		json_t *d = json_array_get(arr, i);
		char where[200];
		snprintf(where, sizeof where, "%s[%zu]", key, i);
		if (!json_is_object(d))
			return coil_err_input(ps->err, "%s: must be an object", where);
		const char *k;
		json_t *x;
		json_object_foreach(d, k, x)
		{
			if (strcmp(k, "name") && strcmp(k, "dtype") && strcmp(k, "shape") &&
			    (kind != VAL_CONST || strcmp(k, "data")))
				return coil_err_input(ps->err, "%s: unknown key '%.40s'", where, k);
		}
		json_t *jn = json_object_get(d, "name");
		if (!json_is_string(jn))
			return coil_err_input(ps->err, "%s: 'name' must be a string", where);
		const char *name = json_string_value(jn);
		snprintf(where, sizeof where, "%s[%zu] '%.128s'", key, i, name);
		int v = new_value(ps, name, kind, (int)i, where);
		if (v < 0)
			return -1;
		coil_value *val = &ps->g->vals[v];
		json_t *jt = json_object_get(d, "dtype");
		int t = json_is_string(jt) ? dtype_parse(json_string_value(jt)) : -1;
		if (t < 0)
			return coil_err_input(ps->err, "%s: 'dtype' must be one of f32 bf16 f16 f64 i64 i32 i8 u8 bool",
					 where);
		val->dtype = (coil_dtype)t;
		if (parse_shape(ps, json_object_get(d, "shape"), val, kind == VAL_INPUT, where))
			return -1;
		(*list)[i] = v;
		if (kind != VAL_CONST)
			continue;
		int64_t numel = 1;
		for (int k = 0; k < val->rank; k++)
			numel *= dim_min(&val->shape[k]);
		if (numel > COIL_MAX_CONST_ELEMS)
			return coil_err_input(ps->err, "%s: constants hold at most %d elements; use a param",
					 where, COIL_MAX_CONST_ELEMS);
		json_t *data = json_object_get(d, "data");
		if (!json_is_array(data) || (int64_t)json_array_size(data) != numel)
			return coil_err_input(ps->err, "%s: 'data' must be an array of %lld elements", where,
					 (long long)numel);
		val->data = arena_alloc(ps->g->arena, (size_t)numel * dtype_size(val->dtype));
		if (!val->data)
			return oom(ps->err);
		for (int64_t e = 0; e < numel; e++) {
			json_t *x = json_array_get(data, (size_t)e);
			double f;
			if (json_is_boolean(x))
				f = json_is_true(x);
			else if (get_number(x, &f))
				return coil_err_input(ps->err, "%s: data[%lld] is not a number", where, (long long)e);
			if (!dtype_is_float(val->dtype) && (!json_is_integer(x) && !json_is_boolean(x)))
				return coil_err_input(ps->err, "%s: data[%lld] must be an integer for %s", where,
						 (long long)e, dtype_name(val->dtype));
			if (dtype_is_int(val->dtype) && json_is_integer(x)) {
				/* exact: an i64 beyond 2^53 must not go through a double */
				json_int_t iv = json_integer_value(x);
				int bits = (int)dtype_size(val->dtype) * 8;
				int ok = val->dtype == COIL_U8 ? iv >= 0 && iv <= 255
					 : bits == 64	      ? 1
							      : iv >= -((json_int_t)1 << (bits - 1)) &&
								   iv < ((json_int_t)1 << (bits - 1));
				if (!ok)
					return coil_err_input(ps->err, "%s: data[%lld] %lld is out of range for %s", where,
							 (long long)e, (long long)iv, dtype_name(val->dtype));
				if (val->dtype == COIL_I64) {
					((int64_t *)val->data)[e] = iv;
					continue;
				}
			}
			dtype_store(val->dtype, val->data, (size_t)e, f);
		}
	}
	*count = (int)n;
	return 0;
}

/* --- arguments --------------------------------------------------------------- */

static int arg_errf(pstate *ps, const coil_node *n, int i, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int arg_errf(pstate *ps, const coil_node *n, int i, const char *fmt, ...)
{
	char msg[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return node_errf(ps->err, n, "args[%d] '%s': %s", i, op_get(n->op)->args[i].name, msg);
}

static int ref(pstate *ps, const coil_node *n, int i, json_t *j)
{
	const char *s = json_string_value(j);
	int v = names_find(&ps->nm, ps->g, s);
	if (v < 0)
		return arg_errf(ps, n, i, "unknown value '%.128s'", s);
	return v;
}

static int parse_dimval(pstate *ps, const coil_node *n, int i, json_t *j, coil_dim *d)
{
	if (json_is_integer(j)) {
		*d = dim_const(json_integer_value(j));
		return 0;
	}
	if (json_is_string(j)) {
		if (dim_parse(json_string_value(j), &ps->g->syms, 0, d, ps->err)) {
			char m[sizeof ps->err->msg];
			memcpy(m, ps->err->msg, sizeof m);
			return arg_errf(ps, n, i, "%s", m);
		}
		return 0;
	}
	return arg_errf(ps, n, i, "expected an integer or a size expression");
}

static int parse_arg(pstate *ps, coil_node *n, int i, json_t *j)
{
	const sch_arg *sa = &op_get(n->op)->args[i];
	coil_arg *a = &n->args[i];
	coil_arena *ar = ps->g->arena;
	memset(a, 0, sizeof *a);
	if (sa->type == S_IGNORED) {
		a->kind = ARG_NONE;
		return 0;
	}
	if (json_is_null(j)) {
		if (!sa->optional)
			return arg_errf(ps, n, i, "is required (null given)");
		a->kind = ARG_NONE;
		return 0;
	}
	switch (sa->type) {
	case S_TENSOR:
		if (!json_is_string(j))
			return arg_errf(ps, n, i, "expected a value name");
		a->kind = ARG_TENSOR;
		a->n = 1;
		a->v = arena_alloc(ar, sizeof(int));
		if (!a->v)
			return oom(ps->err);
		return (a->v[0] = ref(ps, n, i, j)) < 0 ? -1 : 0;
	case S_TENSOR_LIST: {
		if (!json_is_array(j))
			return arg_errf(ps, n, i, "expected an array of value names");
		size_t cnt = json_array_size(j);
		if (cnt > 4096)
			return arg_errf(ps, n, i, "more than 4096 tensors");
		a->kind = ARG_TENSORS;
		a->n = (int)cnt;
		a->v = arena_alloc(ar, (cnt + 1) * sizeof(int));
		if (!a->v)
			return oom(ps->err);
		for (size_t k = 0; k < cnt; k++) {
			json_t *e = json_array_get(j, k);
			if (json_is_null(e) && sa->optional)
				a->v[k] = -1;
			else if (!json_is_string(e))
				return arg_errf(ps, n, i, "entry %zu is not a value name", k);
			else if ((a->v[k] = ref(ps, n, i, e)) < 0)
				return -1;
		}
		return 0;
	}
	case S_INT:
		if (!json_is_integer(j))
			return arg_errf(ps, n, i, "expected an integer");
		a->kind = ARG_INT;
		a->i = json_integer_value(j);
		return 0;
	case S_SYMINT:
	case S_SYMINT_LIST:
	case S_INT_LIST: {
		int single = json_is_integer(j) || (json_is_string(j) && sa->type != S_INT_LIST);
		if (sa->list_len > 1 && json_is_array(j) && json_array_size(j) == 1) {
			j = json_array_get(j, 0); /* int[2] given as [k] means [k, k], as in ATen */
			single = 1;
		}
		if (!json_is_array(j) && !(single && (sa->type == S_SYMINT || sa->list_len)))
			return arg_errf(ps, n, i, sa->type == S_SYMINT ? "expected an integer or a size expression"
								      : "expected an array of integers");
		if (sa->type == S_SYMINT && !single)
			return arg_errf(ps, n, i, "expected an integer or a size expression");
		size_t cnt = single ? (sa->list_len ? (size_t)sa->list_len : 1) : json_array_size(j);
		if (cnt > 64)
			return arg_errf(ps, n, i, "list longer than 64");
		if (sa->list_len > 1 && !single && cnt != (size_t)sa->list_len && !(sa->has_default && cnt == 0))
			return arg_errf(ps, n, i, "expected %d integers, got %zu", sa->list_len, cnt);
		a->n = (int)cnt;
		a->ints = arena_alloc(ar, (cnt + 1) * sizeof(int64_t));
		a->dims = arena_alloc(ar, (cnt + 1) * sizeof(coil_dim));
		if (!a->ints || !a->dims)
			return oom(ps->err);
		int all_static = 1;
		for (size_t k = 0; k < cnt; k++) {
			json_t *e = single ? j : json_array_get(j, k);
			if (sa->type == S_INT_LIST) {
				if (!json_is_integer(e))
					return arg_errf(ps, n, i, "entry %zu is not an integer", k);
				a->ints[k] = json_integer_value(e);
				a->dims[k] = dim_const(a->ints[k]);
				continue;
			}
			if (parse_dimval(ps, n, i, e, &a->dims[k]))
				return -1;
			if (!dim_is_const(&a->dims[k], &a->ints[k]))
				all_static = 0;
		}
		a->kind = sa->type == S_INT_LIST ? ARG_INTS : ARG_DIMS;
		if (sa->type == S_SYMINT && all_static) {
			a->kind = ARG_INT;
			a->i = a->ints[0];
		}
		if (!all_static)
			a->ints = NULL;
		return 0;
	}
	case S_SYMSCALAR: {
		double f;
		if (json_is_string(j) && get_number(j, &f)) { /* a size expression (not "inf"): ARG_DIMS of one */
			a->n = 1;
			a->ints = arena_alloc(ar, sizeof(int64_t));
			a->dims = arena_alloc(ar, sizeof(coil_dim));
			if (!a->ints || !a->dims)
				return oom(ps->err);
			if (parse_dimval(ps, n, i, j, &a->dims[0]))
				return -1;
			if (!dim_is_const(&a->dims[0], &a->ints[0])) {
				a->kind = ARG_DIMS;
				return 0;
			}
			a->kind = ARG_SCALAR;
			a->is_int = 1;
			a->i = a->ints[0];
			a->f = (double)a->i;
			return 0;
		}
	}
		/* fall through */
	case S_FLOAT:
	case S_SCALAR:
		if (json_is_boolean(j) && sa->type != S_FLOAT) {
			a->is_int = 1;
			a->is_bool = 1;
			a->i = json_is_true(j);
			a->f = (double)a->i;
		} else if (get_number(j, &a->f)) {
			return arg_errf(ps, n, i, "expected a number");
		} else if (json_is_integer(j) && sa->type != S_FLOAT) {
			a->is_int = 1;
			a->i = json_integer_value(j);
		}
		a->kind = ARG_SCALAR;
		return 0;
	case S_FLOAT_LIST: {
		if (!json_is_array(j))
			return arg_errf(ps, n, i, "expected an array of numbers");
		size_t cnt = json_array_size(j);
		if (cnt > 64)
			return arg_errf(ps, n, i, "list longer than 64");
		a->kind = ARG_FLOATS;
		a->n = (int)cnt;
		a->floats = arena_alloc(ar, (cnt + 1) * sizeof(double));
		if (!a->floats)
			return oom(ps->err);
		for (size_t k = 0; k < cnt; k++)
			if (get_number(json_array_get(j, k), &a->floats[k]))
				return arg_errf(ps, n, i, "entry %zu is not a number", k);
		return 0;
	}
	case S_BOOL:
		if (!json_is_boolean(j))
			return arg_errf(ps, n, i, "expected true or false");
		a->kind = ARG_BOOL;
		a->i = json_is_true(j);
		return 0;
	case S_STR:
		if (!json_is_string(j) || strlen(json_string_value(j)) > 64)
			return arg_errf(ps, n, i, "expected a string of at most 64 characters");
		a->kind = ARG_STR;
		a->s = arena_strdup(ar, json_string_value(j));
		return a->s ? 0 : oom(ps->err);
	case S_DTYPE: {
		int t = json_is_string(j) ? dtype_parse(json_string_value(j)) : -1;
		if (t < 0)
			return arg_errf(ps, n, i, "expected a dtype name");
		a->kind = ARG_DTYPE;
		a->i = t;
		return 0;
	}
	case S_IGNORED:
		break;
	}
	return 0;
}

static int parse_node_args(pstate *ps, coil_node *n, json_t *jn)
{
	const op_info *oi = op_get(n->op);
	json_t *args = json_object_get(jn, "args"), *kw = json_object_get(jn, "kwargs");
	if (args && !json_is_array(args))
		return node_errf(ps->err, n, "'args' must be an array");
	if (kw && !json_is_object(kw))
		return node_errf(ps->err, n, "'kwargs' must be an object");
	size_t npos = args ? json_array_size(args) : 0;
	if (npos > (size_t)oi->nargs)
		return node_errf(ps->err, n, "takes at most %d argument%s, %zu given", oi->nargs,
				 oi->nargs == 1 ? "" : "s", npos);
	json_t *given[COIL_MAX_ARGS] = {0};
	for (size_t i = 0; i < npos; i++)
		given[i] = json_array_get(args, i);
	const char *k;
	json_t *x;
	if (kw)
		json_object_foreach(kw, k, x)
		{
			int i;
			for (i = 0; i < oi->nargs; i++)
				if (!strcmp(oi->args[i].name, k))
					break;
			if (i == oi->nargs)
				return node_errf(ps->err, n, "kwargs: unknown argument '%.40s'", k);
			if (given[i])
				return node_errf(ps->err, n, "kwargs: argument '%s' given twice", k);
			given[i] = x;
		}
	n->args = arena_alloc(ps->g->arena, (size_t)(oi->nargs ? oi->nargs : 1) * sizeof(coil_arg));
	if (!n->args)
		return oom(ps->err);
	for (int i = 0; i < oi->nargs; i++) {
		json_t *j = given[i], *dflt = NULL;
		if (!j) {
			if (!oi->args[i].has_default) {
				if (oi->args[i].type == S_IGNORED || (oi->args[i].optional && oi->args[i].kw_only))
					continue; /* ARG_NONE */
				return node_errf(ps->err, n, "args[%d] '%s': missing", i, oi->args[i].name);
			}
			dflt = j = json_loads(oi->args[i].deflt, JSON_DECODE_ANY, NULL);
			if (!j)
				return oom(ps->err);
		}
		int rc = parse_arg(ps, n, i, j);
		json_decref(dflt);
		if (rc)
			return -1;
	}
	return 0;
}

/* --- nodes, order, outputs ---------------------------------------------------- */

static int parse_nodes(pstate *ps, json_t *root)
{
	coil_graph *g = ps->g;
	json_t *arr = json_object_get(root, "nodes");
	if (!arr)
		return 0;
	if (!json_is_array(arr))
		return coil_err_input(ps->err, "'nodes' must be an array");
	size_t nn = json_array_size(arr);
	if (nn > COIL_MAX_NODES)
		return coil_err_input(ps->err, "'nodes' has more than %d entries", COIL_MAX_NODES);
	coil_node *nodes = arena_alloc(g->arena, (nn ? nn : 1) * sizeof *nodes);
	if (!nodes)
		return oom(ps->err);
	/* Pass 1: ids, ops, result values (so nodes may come in any order). */
	for (size_t i = 0; i < nn; i++) {
		json_t *jn = json_array_get(arr, i);
		coil_node *n = &nodes[i];
		if (!json_is_object(jn))
			return coil_err_input(ps->err, "nodes[%zu]: must be an object", i);
		json_t *jid = json_object_get(jn, "id");
		if (jid && (!json_is_string(jid) || !json_string_length(jid) ||
			    json_string_length(jid) > COIL_MAX_NAME))
			return coil_err_input(ps->err, "nodes[%zu]: 'id' must be a string of 1 to %d characters", i,
					 COIL_MAX_NAME);
		n->id = jid ? arena_strdup(g->arena, json_string_value(jid)) : arena_printf(g->arena, "#%zu", i);
		if (!n->id)
			return oom(ps->err);
		for (char *c = (char *)n->id; *c; c++) /* messages stay one printable line */
			if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
				*c = '?';
		const char *k;
		json_t *x;
		json_object_foreach(jn, k, x)
		{
			if (strcmp(k, "id") && strcmp(k, "op") && strcmp(k, "args") && strcmp(k, "kwargs") &&
			    strcmp(k, "outputs"))
				return coil_err_input(ps->err, "node '%s': unknown key '%.40s'", n->id, k);
		}
		json_t *jop = json_object_get(jn, "op");
		if (!json_is_string(jop))
			return coil_err_input(ps->err, "node '%s': 'op' must be a string", n->id);
		int op = op_lookup(json_string_value(jop));
		if (op < 0 || op_internal((coil_op)op)) { /* the compiler's own ops are not a graph's */
			coil_errc(ps->err, COIL_E_UNSUPPORTED, "node '%s': unknown op '%.100s'", n->id,
				  json_string_value(jop));
			coil_err_node(ps->err, n->id);
			return -1;
		}
		n->op = (coil_op)op;
		json_t *outs = json_object_get(jn, "outputs");
		if (!json_is_array(outs) || json_array_size(outs) == 0)
			return node_errf(ps->err, n, "'outputs' must be a non-empty array");
		size_t no = json_array_size(outs);
		int want = op_get(n->op)->nres;
		if (want > 0 && no != (size_t)want)
			return node_errf(ps->err, n, "'outputs' must name %d result%s, not %zu", want,
					 want > 1 ? "s" : "", no);
		if (no > 4096)
			return node_errf(ps->err, n, "'outputs' has more than 4096 entries");
		n->nout = (int)no;
		n->outs = arena_alloc(g->arena, no * sizeof(int));
		if (!n->outs)
			return oom(ps->err);
		for (size_t k = 0; k < no; k++) {
			json_t *o = json_array_get(outs, k);
			if (!json_is_null(o) && !json_is_string(o))
				return node_errf(ps->err, n, "outputs[%zu] must be a name or null", k);
			char where[200];
			snprintf(where, sizeof where, "node '%s' (%s): outputs[%zu]", n->id, op_name(n->op), k);
			int v = new_value(ps, json_is_null(o) ? NULL : json_string_value(o), VAL_NODE, (int)i, where);
			if (v < 0)
				return -1;
			g->vals[v].out = (int)k;
			n->outs[k] = v;
		}
	}
	/* Node ids are unique (they name nodes in messages). */
	if (nn > 1) {
		size_t cap = 16;
		while (cap < 2 * nn)
			cap *= 2;
		int *seen = calloc(cap, sizeof(int)); /* node index + 1; 0 empty */
		if (!seen)
			return oom(ps->err);
		for (size_t i = 0; i < nn; i++) {
			size_t h = (size_t)hash_str(nodes[i].id) & (cap - 1);
			for (; seen[h]; h = (h + 1) & (cap - 1))
				if (!strcmp(nodes[seen[h] - 1].id, nodes[i].id)) {
					free(seen);
					return coil_err_input(ps->err, "nodes[%zu]: id '%s' is used twice", i, nodes[i].id);
				}
			seen[h] = (int)i + 1;
		}
		free(seen);
	}
	/* Pass 2: arguments. */
	for (size_t i = 0; i < nn; i++)
		if (parse_node_args(ps, &nodes[i], json_array_get(arr, i)))
			return -1;
	g->nodes = nodes;
	g->nnodes = (int)nn;
	return 0;
}

/* Calls f(value) for each tensor a node reads. */
#define FOR_NODE_INPUTS(n, nargs, v, body)                                            \
	for (int ai_ = 0; ai_ < (nargs); ai_++) {                                     \
		const coil_arg *a_ = &(n)->args[ai_];                                 \
		if (a_->kind != ARG_TENSOR && a_->kind != ARG_TENSORS)                \
			continue;                                                     \
		for (int k_ = 0; k_ < a_->n; k_++) {                                  \
			int v = a_->v[k_];                                            \
			if (v < 0)                                                    \
				continue;                                             \
			body                                                          \
		}                                                                     \
	}

/* Kahn's algorithm, stable in the file's order; reports a node on a cycle. */
static int toposort(pstate *ps)
{
	coil_graph *g = ps->g;
	int nn = g->nnodes;
	if (!nn)
		return 0;
	int *indeg = calloc((size_t)nn, sizeof(int)), *order = malloc((size_t)nn * sizeof(int));
	int *users_start = calloc((size_t)nn + 1, sizeof(int)), *users = NULL, *fill = NULL;
	int rc = -1;
	if (!indeg || !order || !users_start)
		goto out;
	int nedges = 0;
	for (int i = 0; i < nn; i++) {
		coil_node *n = &g->nodes[i];
		FOR_NODE_INPUTS(n, op_get(n->op)->nargs, v, {
			if (g->vals[v].kind == VAL_NODE) {
				indeg[i]++;
				users_start[g->vals[v].index + 1]++;
				nedges++;
			}
		})
	}
	for (int i = 0; i < nn; i++)
		users_start[i + 1] += users_start[i];
	users = malloc((size_t)(nedges ? nedges : 1) * sizeof(int));
	fill = calloc((size_t)nn, sizeof(int));
	if (!users || !fill)
		goto out;
	for (int i = 0; i < nn; i++) {
		coil_node *n = &g->nodes[i];
		FOR_NODE_INPUTS(n, op_get(n->op)->nargs, v, {
			if (g->vals[v].kind == VAL_NODE) {
				int p = g->vals[v].index;
				users[users_start[p] + fill[p]++] = i;
			}
		})
	}
	int head = 0, tail = 0;
	for (int i = 0; i < nn; i++)
		if (!indeg[i])
			order[tail++] = i;
	while (head < tail) {
		int i = order[head++];
		for (int e = users_start[i]; e < users_start[i + 1]; e++)
			if (--indeg[users[e]] == 0)
				order[tail++] = users[e];
	}
	if (tail < nn) {
		/* Nodes left over are on a cycle or downstream of one.  Each has an
		 * unsorted producer; following those nn times lands on the cycle. */
		int i = 0;
		while (!indeg[i])
			i++;
		for (int step = 0; step < nn; step++) {
			int next = -1;
			coil_node *n = &g->nodes[i];
			FOR_NODE_INPUTS(n, op_get(n->op)->nargs, v, {
				if (next < 0 && g->vals[v].kind == VAL_NODE && indeg[g->vals[v].index])
					next = g->vals[v].index;
			})
			if (next < 0)
				break;
			i = next;
		}
		node_errf(ps->err, &g->nodes[i], "is part of a cycle");
		goto out;
	}
	coil_node *sorted = arena_alloc(g->arena, (size_t)nn * sizeof *sorted);
	if (!sorted) {
		oom(ps->err);
		goto out;
	}
	for (int i = 0; i < nn; i++) {
		sorted[i] = g->nodes[order[i]];
		for (int k = 0; k < sorted[i].nout; k++)
			g->vals[sorted[i].outs[k]].index = i;
	}
	g->nodes = sorted;
	rc = 0;
out:
	if (rc && !ps->err->msg[0])
		oom(ps->err);
	free(indeg);
	free(order);
	free(users_start);
	free(users);
	free(fill);
	return rc;
}

static int parse_outputs(pstate *ps, json_t *root)
{
	coil_graph *g = ps->g;
	json_t *outs = json_object_get(root, "outputs");
	if (!json_is_array(outs) || json_array_size(outs) == 0)
		return coil_err_input(ps->err, "'outputs' must be a non-empty array of value names");
	size_t n = json_array_size(outs);
	if (n > 4096)
		return coil_err_input(ps->err, "'outputs' has more than 4096 entries");
	g->outputs = arena_alloc(g->arena, n * sizeof(int));
	if (!g->outputs)
		return oom(ps->err);
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_array_get(outs, i);
		if (!json_is_string(o))
			return coil_err_input(ps->err, "outputs[%zu]: must be a value name", i);
		int v = names_find(&ps->nm, g, json_string_value(o));
		if (v < 0)
			return coil_err_input(ps->err, "outputs[%zu]: unknown value '%.128s'", i, json_string_value(o));
		g->outputs[i] = v;
	}
	g->noutputs = (int)n;
	return 0;
}

/* Top-level "symbols": {"seq": {"min": 1, "max": 512}}: ranges of symbols the
 * inputs declare. */
static int parse_symbols(pstate *ps, json_t *root)
{
	json_t *js = json_object_get(root, "symbols");
	if (!js)
		return 0;
	if (!json_is_object(js))
		return coil_err_input(ps->err, "'symbols' must be an object: {\"name\": {\"min\": 1, \"max\": 512}}");
	coil_symtab *t = &ps->g->syms;
	const char *k;
	json_t *x;
	json_object_foreach(js, k, x)
	{
		int idx = -1;
		for (int i = 0; i < t->n; i++)
			if (t->kind[i] == SYM_FREE && !strcmp(t->name[i], k))
				idx = i;
		if (idx < 0)
			return coil_err_input(ps->err, "symbols: '%.40s' is not a symbol of any input's shape", k);
		if (!json_is_object(x))
			return coil_err_input(ps->err, "symbols.%s: must be an object with \"min\" and/or \"max\"", t->name[idx]);
		const char *f;
		json_t *y;
		json_object_foreach(x, f, y)
		{
			if (strcmp(f, "min") && strcmp(f, "max"))
				return coil_err_input(ps->err, "symbols.%s: unknown key '%.40s' (min, max)", t->name[idx], f);
			if (!json_is_integer(y) || json_integer_value(y) < 0 || json_integer_value(y) > ((int64_t)1 << 40))
				return coil_err_input(ps->err, "symbols.%s.%s: must be an integer in [0, 2^40]", t->name[idx], f);
		}
		json_t *lo = json_object_get(x, "min"), *hi = json_object_get(x, "max");
		t->lo[idx] = lo ? json_integer_value(lo) : 0;
		t->hi[idx] = hi ? json_integer_value(hi) : 0;
		if (hi && t->hi[idx] < (t->lo[idx] > 0 ? t->lo[idx] : 1))
			return coil_err_input(ps->err, "symbols.%s: max %lld is below min %lld", t->name[idx],
					      (long long)t->hi[idx], (long long)(t->lo[idx] > 0 ? t->lo[idx] : 1));
	}
	return 0;
}

static int check_top(pstate *ps, json_t *root)
{
	if (!json_is_object(root))
		return coil_err_input(ps->err, "graph must be a JSON object");
	const char *k;
	json_t *x;
	static const char *known[] = {"format", "version", "inputs", "params", "constants", "nodes", "outputs",
				      "metadata", "symbols"};
	json_object_foreach(root, k, x)
	{
		size_t i;
		for (i = 0; i < sizeof known / sizeof *known; i++)
			if (!strcmp(k, known[i]))
				break;
		if (i == sizeof known / sizeof *known)
			return coil_err_input(ps->err, "unknown top-level key '%.40s'", k);
	}
	json_t *f = json_object_get(root, "format");
	if (!json_is_string(f) || strcmp(json_string_value(f), "coil-graph"))
		return coil_err_input(ps->err, "'format' must be \"coil-graph\"");
	json_t *v = json_object_get(root, "version");
	if (!json_is_integer(v))
		return coil_err_input(ps->err, "'version' must be an integer");
	if (json_integer_value(v) != COIL_FORMAT_VERSION)
		return coil_errc(ps->err, COIL_E_UNSUPPORTED, "'version' %lld is not supported (this coil reads version %d)",
				 (long long)json_integer_value(v), COIL_FORMAT_VERSION);
	return 0;
}

/* Messages quote user text (names, keys, op names): keep them one printable line. */
static void printable_msg(coil_err *err)
{
	for (char *c = err->msg; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
}

coil_graph *graph_parse(const char *text, size_t len, coil_err *err)
{
	json_t *root = graph_json_load(text, len, err);
	if (!root)
		return NULL;
	coil_graph *g = graph_from_json(root, err);
	json_decref(root);
	return g;
}

json_t *graph_json_load(const char *text, size_t len, coil_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root && json_error_code(&je) == json_error_out_of_memory)
		coil_err_oom(err);
	else if (!root) {
		coil_err_input(err, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
		printable_msg(err);
	}
	return root;
}

coil_graph *graph_from_json(json_t *root, coil_err *err)
{
	coil_err local;
	if (!err)
		err = &local;
	err->msg[0] = 0;
	coil_graph *g = calloc(1, sizeof *g);
	pstate ps = {.g = g, .err = err};
	if (!g || !(g->arena = arena_create())) {
		oom(err);
		goto fail;
	}
	if (check_top(&ps, root))
		goto fail;
	/* Size the name table for every name the file can define. */
	size_t names = 16;
	static const char *lists[] = {"inputs", "params", "constants"};
	for (int i = 0; i < 3; i++)
		names += json_array_size(json_object_get(root, lists[i]));
	json_t *jnodes = json_object_get(root, "nodes");
	for (size_t i = 0; i < json_array_size(jnodes); i++)
		names += json_array_size(json_object_get(json_array_get(jnodes, i), "outputs"));
	int cap = 64;
	while ((size_t)cap < names * 2 && cap < (1 << 30))
		cap *= 2;
	ps.nm.cap = cap;
	ps.nm.slot = calloc((size_t)cap, sizeof(int));
	if (!ps.nm.slot) {
		oom(err);
		goto fail;
	}
	if (parse_decls(&ps, root, "inputs", VAL_INPUT, &g->inputs, &g->ninputs) ||
	    parse_decls(&ps, root, "params", VAL_PARAM, &g->params, &g->nparams) ||
	    parse_decls(&ps, root, "constants", VAL_CONST, &g->consts, &g->nconsts) || parse_symbols(&ps, root) ||
	    parse_nodes(&ps, root) || parse_outputs(&ps, root) || toposort(&ps))
		goto fail;
	for (int i = 0; i < g->nnodes; i++) {
		coil_node *n = &g->nodes[i];
		if (infer_node(g, n, err))
			goto fail;
		for (int k = 0; k < n->nout; k++) {
			coil_value *o = node_out(g, n, k);
			char where[300];
			snprintf(where, sizeof where, "node '%s' (%s): result %d", n->id, op_name(n->op), k);
			if (check_size(g, n, k, o->shape, o->rank, o->dtype, where, err))
				goto fail;
		}
	}
	free(ps.nm.slot);
	return g;
fail:
	printable_msg(err);
	free(ps.nm.slot);
	graph_free(g);
	return NULL;
}

int graph_read_file(const char *path, char **text, size_t *len, coil_err *err)
{
	*text = NULL;
	*len = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return coil_errc(err, COIL_E_IO, "%s: cannot open: %s", path, strerror(errno));
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (cap - n < 65536) {
			if (cap > ((size_t)1 << 31)) {
				fclose(f);
				free(buf);
				return coil_errc(err, COIL_E_LIMIT, "%s: larger than 2 GiB", path);
			}
			cap = cap ? cap * 2 : 65536;
			char *nb = realloc(buf, cap);
			if (!nb) {
				fclose(f);
				free(buf);
				return coil_err_oom(err);
			}
			buf = nb;
		}
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (r == 0)
			break;
	}
	int bad = ferror(f) ? errno : 0;
	fclose(f);
	if (bad) {
		free(buf);
		return coil_errc(err, COIL_E_IO, "%s: cannot read: %s", path, strerror(bad));
	}
	*text = buf;
	*len = n;
	return 0;
}

coil_graph *graph_load_file(const char *path, coil_err *err)
{
	char *text;
	size_t len;
	if (graph_read_file(path, &text, &len, err))
		return NULL;
	coil_graph *g = graph_parse(text, len, err);
	free(text);
	return g;
}

void graph_free(coil_graph *g)
{
	if (!g)
		return;
	arena_destroy(g->arena);
	free(g->vals);
	free(g);
}
