/* Shape and dtype rules.  Each rule reads a node's parsed arguments (aligned
 * with the ATen schema) and sets its results; errors name node, op and arg. */
#include "common/infer.h"
#include "common/upsample.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ARGERR(i, ...) arg_err(g, n, err, i, __VA_ARGS__)

/* What a graph asks that ATen does but coil does not: the error rc made,
 * marked unsupported. */
static int unsupported(coil_err *err, int rc)
{
	if (err)
		err->code = COIL_E_UNSUPPORTED;
	return rc;
}

static int arg_err(coil_graph *g, const coil_node *n, coil_err *err, int i, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int arg_err(coil_graph *g, const coil_node *n, coil_err *err, int i, const char *fmt, ...)
{
	(void)g;
	char msg[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return node_errf(err, n, "args[%d] '%s': %s", i, op_get(n->op)->args[i].name, msg);
}

static const char *shp(coil_graph *g, const coil_value *v, char *buf, size_t cap)
{
	return shape_format(v->shape, v->rank, &g->syms, buf, cap);
}

static void set_out(coil_graph *g, coil_node *n, int k, coil_dtype t, int rank, const coil_dim *shape)
{
	coil_value *o = node_out(g, n, k);
	o->dtype = t;
	o->rank = rank;
	for (int i = 0; i < rank; i++)
		o->shape[i] = shape[i];
}

static int has(const coil_node *n, int i)
{
	return n->args[i].kind != ARG_NONE;
}

/* Wraps a possibly negative dim of an arg into [0, rank). */
static int wrap_dim(coil_graph *g, coil_node *n, coil_err *err, int argi, int64_t d, int rank, int *out)
{
	int r = rank ? rank : 1; /* a scalar accepts dim 0 and -1 */
	*out = 0;
	if (d < -r || d >= r)
		return ARGERR(argi, "dim %lld out of range for rank %d", (long long)d, rank);
	*out = (int)(d < 0 ? d + r : d);
	return 0;
}

static int need_float(coil_graph *g, coil_node *n, coil_err *err, int argi)
{
	coil_value *v = node_in(g, n, argi);
	if (!dtype_is_float(v->dtype))
		return ARGERR(argi, "dtype %s is not supported (a floating dtype is required)", dtype_name(v->dtype));
	return 0;
}

/* Ensures a tensor arg's dims are static (for rules that need numbers). */
static int need_static(coil_graph *g, coil_node *n, coil_err *err, int argi, int from)
{
	coil_value *v = node_in(g, n, argi);
	for (int i = from; i < v->rank; i++)
		if (!dim_is_const(&v->shape[i], NULL))
			return ARGERR(argi, "dim %d must be static here", i);
	return 0;
}

static int64_t cdim(const coil_value *v, int i)
{
	int64_t x = 0;
	dim_is_const(&v->shape[i], &x);
	return x;
}

int broadcast_shapes(const coil_dim *a, int ra, const coil_dim *b, int rb, coil_dim *out, int *rout,
		     coil_err *err)
{
	int r = ra > rb ? ra : rb;
	for (int i = 0; i < r; i++) {
		const coil_dim *da = i < r - ra ? NULL : &a[i - (r - ra)];
		const coil_dim *db = i < r - rb ? NULL : &b[i - (r - rb)];
		if (!da || dim_eq_const(da, 1))
			out[i] = db ? *db : *da;
		else if (!db || dim_eq_const(db, 1) || dim_eq(da, db))
			out[i] = *da;
		else
			return coil_err_input(err, "dim %d does not broadcast", i);
	}
	*rout = r;
	return 0;
}

/* --- type promotion (c10's ResultTypeState) -------------------------------- */

static int cat_of(int t)
{
	return t < 0 ? -1 : t == COIL_BOOL ? 0 : dtype_is_float((coil_dtype)t) ? 2 : 1;
}

static int prom(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return dtype_promote((coil_dtype)a, (coil_dtype)b);
}

static int combine(int higher, int lower)
{
	if (cat_of(higher) == 2)
		return higher;
	if (higher == COIL_BOOL || cat_of(lower) == 2)
		return prom(higher, lower);
	return higher >= 0 ? higher : lower;
}

int infer_result_type(coil_graph *g, const coil_node *n, const int *idx, int cnt, coil_err *err)
{
	int dimr = -1, zeror = -1, wrapr = -1, bad = 0;
	for (int k = 0; k < cnt; k++) {
		const coil_arg *a = &n->args[idx[k]];
		if (a->kind == ARG_TENSOR) {
			coil_value *v = &g->vals[a->v[0]];
			int *slot = v->rank ? &dimr : &zeror;
			*slot = prom(*slot, v->dtype);
			bad |= *slot < 0;
		} else if (a->kind == ARG_SCALAR) {
			wrapr = prom(wrapr, a->is_bool ? COIL_BOOL : a->is_int ? COIL_I64 : COIL_F32);
		}
	}
	int r = combine(dimr, combine(zeror, wrapr));
	if (bad || r < 0)
		return node_errf(err, n, "operand dtypes do not promote to a dtype coil supports");
	return r;
}

/* --- rules ------------------------------------------------------------------ */

static int infer_conv(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *w = node_in(g, n, 1);
	char b1[200], b2[200];
	if (need_float(g, n, err, 0) || need_float(g, n, err, 1))
		return -1;
	if (x->rank < 3 || x->rank > 5)
		return ARGERR(0, "expected rank 3 to 5 (batch, channels, spatial...), got shape %s",
			      shp(g, x, b1, sizeof b1));
	int sd = x->rank - 2;
	if (w->rank != x->rank)
		return ARGERR(1, "weight shape %s does not match input shape %s", shp(g, w, b1, sizeof b1),
			      shp(g, x, b2, sizeof b2));
	if (w->dtype != x->dtype)
		return ARGERR(1, "dtype %s differs from input dtype %s", dtype_name(w->dtype), dtype_name(x->dtype));
	if (need_static(g, n, err, 1, 0))
		return -1;
	if (!dim_is_const(&x->shape[1], NULL))
		return ARGERR(0, "dim 1 must be static here");
	int64_t groups = n->args[8].i, transposed = n->args[6].i;
	if (groups < 1)
		return ARGERR(8, "groups must be positive");
	int64_t cin = cdim(x, 1), o0 = cdim(w, 0), o1 = cdim(w, 1);
	int64_t cout;
	if (!transposed) {
		if (cin % groups || o1 != cin / groups || o0 % groups)
			return ARGERR(1, "weight shape %s does not fit %lld input channels in %lld groups",
				      shp(g, w, b1, sizeof b1), (long long)cin, (long long)groups);
		cout = o0;
	} else {
		if (o0 != cin || cin % groups || __builtin_mul_overflow(o1, groups, &cout))
			return ARGERR(1, "weight shape %s does not fit %lld input channels in %lld groups",
				      shp(g, w, b1, sizeof b1), (long long)cin, (long long)groups);
	}
	if (has(n, 2)) {
		coil_value *b = node_in(g, n, 2);
		if (b->rank != 1 || !dim_eq_const(&b->shape[0], cout))
			return ARGERR(2, "bias shape %s, expected [%lld]", shp(g, b, b1, sizeof b1), (long long)cout);
		if (b->dtype != x->dtype)
			return ARGERR(2, "dtype %s differs from input dtype", dtype_name(b->dtype));
	}
	static const int lists[4] = {3, 4, 5, 7};
	for (int l = 0; l < 4; l++) {
		const coil_arg *a = &n->args[lists[l]];
		if (a->n != 1 && a->n != sd)
			return ARGERR(lists[l], "expected %d values, got %d", sd, a->n);
		for (int k = 0; k < a->n; k++)
			if (a->ints[k] < (l == 0 || l == 2 ? 1 : 0) || a->ints[k] > (1 << 20))
				return ARGERR(lists[l], "value %lld out of range", (long long)a->ints[k]);
	}
	coil_dim out[COIL_MAX_RANK];
	out[0] = x->shape[0];
	out[1] = dim_const(cout);
	for (int i = 0; i < sd; i++) {
#define LV(ai) (n->args[ai].n == 1 ? n->args[ai].ints[0] : n->args[ai].ints[i])
		int64_t s = LV(3), p = LV(4), d = LV(5), op = LV(7), k = cdim(w, 2 + i);
		if (transposed && op >= s && op >= d)
			return ARGERR(7, "output_padding must be smaller than stride or dilation");
		/* floor((in + 2p - d(k-1) - 1) / s) + 1, or (in-1)s - 2p + d(k-1) + op + 1 */
		coil_dim o, t, c = dim_const(transposed ? d * (k - 1) + op + 1 - 2 * p - s : 2 * p - d * (k - 1) - 1);
		if (transposed) {
			coil_dim sd_ = dim_const(s);
			if (dim_mul(&t, &x->shape[2 + i], &sd_, err) || dim_add(&o, &t, &c, err))
				return node_errf(err, n, "%s", err->msg);
		} else {
			coil_dim one = dim_const(1);
			if (dim_add(&t, &x->shape[2 + i], &c, err) || dim_floordiv(&o, &t, s, &g->syms, err) ||
			    dim_add(&o, &o, &one, err))
				return node_errf(err, n, "%s", err->msg);
		}
		int64_t oc;
		if (dim_is_const(&o, &oc) && oc <= 0)
			return transposed ? ARGERR(0, "output spatial dim %d would be %lld", i, (long long)oc)
					  : ARGERR(0, "spatial dim %d (%lld) is smaller than the dilated kernel (%lld)", i,
						   (long long)cdim(x, 2 + i), (long long)(d * (k - 1) + 1));
		if (graph_guard(g, n, GUARD_GE, &o, 1, "output size", err))
			return -1;
		out[2 + i] = o;
#undef LV
	}
	set_out(g, n, 0, x->dtype, x->rank, out);
	return 0;
}

static int matmul_dtypes(coil_graph *g, coil_node *n, coil_err *err, int a, int b)
{
	coil_value *x = node_in(g, n, a), *y = node_in(g, n, b);
	if (need_float(g, n, err, a))
		return -1;
	if (x->dtype != y->dtype)
		return ARGERR(b, "dtype %s differs from %s", dtype_name(y->dtype), dtype_name(x->dtype));
	return 0;
}

static int check_inner(coil_graph *g, coil_node *n, coil_err *err, int a, int b, const coil_dim *k1,
		       const coil_dim *k2)
{
	char b1[200], b2[200];
	if (!dim_eq(k1, k2))
		return ARGERR(b, "shape %s cannot be multiplied with %s", shp(g, node_in(g, n, b), b2, sizeof b2),
			      shp(g, node_in(g, n, a), b1, sizeof b1));
	return 0;
}

static int infer_mm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *y = node_in(g, n, 1);
	if (x->rank != 2)
		return ARGERR(0, "expected a matrix, got rank %d", x->rank);
	if (y->rank != 2)
		return ARGERR(1, "expected a matrix, got rank %d", y->rank);
	if (matmul_dtypes(g, n, err, 0, 1) || check_inner(g, n, err, 0, 1, &x->shape[1], &y->shape[0]))
		return -1;
	coil_dim o[2] = {x->shape[0], y->shape[1]};
	set_out(g, n, 0, x->dtype, 2, o);
	return 0;
}

static int infer_bmm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *y = node_in(g, n, 1);
	if (x->rank != 3)
		return ARGERR(0, "expected rank 3, got %d", x->rank);
	if (y->rank != 3)
		return ARGERR(1, "expected rank 3, got %d", y->rank);
	if (matmul_dtypes(g, n, err, 0, 1) || check_inner(g, n, err, 0, 1, &x->shape[2], &y->shape[1]))
		return -1;
	if (!dim_eq(&x->shape[0], &y->shape[0]))
		return ARGERR(1, "batch size differs from self's");
	coil_dim o[3] = {x->shape[0], x->shape[1], y->shape[2]};
	set_out(g, n, 0, x->dtype, 3, o);
	return 0;
}

static int infer_addmm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *s = node_in(g, n, 0), *x = node_in(g, n, 1), *y = node_in(g, n, 2);
	if (x->rank != 2)
		return ARGERR(1, "expected a matrix, got rank %d", x->rank);
	if (y->rank != 2)
		return ARGERR(2, "expected a matrix, got rank %d", y->rank);
	if (matmul_dtypes(g, n, err, 1, 2) || check_inner(g, n, err, 1, 2, &x->shape[1], &y->shape[0]))
		return -1;
	if (s->dtype != x->dtype)
		return ARGERR(0, "dtype %s differs from mat1's %s", dtype_name(s->dtype), dtype_name(x->dtype));
	coil_dim o[2] = {x->shape[0], y->shape[1]}, bo[COIL_MAX_RANK];
	int br;
	if (s->rank > 2 || broadcast_shapes(s->shape, s->rank, o, 2, bo, &br, err) || !dim_eq(&bo[0], &o[0]) ||
	    !dim_eq(&bo[1], &o[1])) {
		char b1[200];
		return ARGERR(0, "shape %s does not broadcast to the product's shape", shp(g, s, b1, sizeof b1));
	}
	set_out(g, n, 0, x->dtype, 2, o);
	return 0;
}

/* baddbmm: beta * self + alpha * (batch1 @ batch2), self broadcast to [B, M, N]. */
static int infer_baddbmm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *s = node_in(g, n, 0), *x = node_in(g, n, 1), *y = node_in(g, n, 2);
	if (x->rank != 3)
		return ARGERR(1, "expected rank 3, got %d", x->rank);
	if (y->rank != 3)
		return ARGERR(2, "expected rank 3, got %d", y->rank);
	if (matmul_dtypes(g, n, err, 1, 2) || check_inner(g, n, err, 1, 2, &x->shape[2], &y->shape[1]))
		return -1;
	if (!dim_eq(&x->shape[0], &y->shape[0]))
		return ARGERR(2, "batch size differs from batch1's");
	if (s->dtype != x->dtype)
		return ARGERR(0, "dtype %s differs from batch1's %s", dtype_name(s->dtype), dtype_name(x->dtype));
	coil_dim o[3] = {x->shape[0], x->shape[1], y->shape[2]}, bo[COIL_MAX_RANK];
	int br;
	if (s->rank > 3 || broadcast_shapes(s->shape, s->rank, o, 3, bo, &br, err) || !dim_eq(&bo[0], &o[0]) ||
	    !dim_eq(&bo[1], &o[1]) || !dim_eq(&bo[2], &o[2])) {
		char b1[200];
		return ARGERR(0, "shape %s does not broadcast to the product's shape", shp(g, s, b1, sizeof b1));
	}
	set_out(g, n, 0, x->dtype, 3, o);
	return 0;
}

/* scaled_dot_product_attention: query [..., L, E], key [..., S, E], value
 * [..., S, Ev] of one rank and float dtype, batch dims broadcasting; the
 * mask (bool: true keeps, else the score is masked_value, -inf by default;
 * or additive, of query's dtype) broadcasts to the scores [..., L, S]
 * without growing them. */
static int infer_sdpa(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *q = node_in(g, n, 0), *k = node_in(g, n, 1), *v = node_in(g, n, 2);
	char b1[200], b2[200];
	int r = q->rank;
	if (r < 2)
		return ARGERR(0, "expected rank 2 or more ([..., L, E]), got %d", r);
	for (int a = 1; a < 3; a++) {
		coil_value *t = node_in(g, n, a);
		if (t->rank != r)
			return ARGERR(a, "rank %d differs from query's %d", t->rank, r);
		if (t->dtype != q->dtype)
			return ARGERR(a, "dtype %s differs from query's %s", dtype_name(t->dtype), dtype_name(q->dtype));
	}
	if (need_float(g, n, err, 0))
		return -1;
	if (!dim_eq(&k->shape[r - 1], &q->shape[r - 1]))
		return ARGERR(1, "shape %s: the last dim differs from query's %s", shp(g, k, b1, sizeof b1),
			      shp(g, q, b2, sizeof b2));
	if (!dim_eq(&v->shape[r - 2], &k->shape[r - 2]))
		return ARGERR(2, "shape %s: dim -2 differs from key's %s", shp(g, v, b1, sizeof b1),
			      shp(g, k, b2, sizeof b2));
	coil_dim o[COIL_MAX_RANK], t[COIL_MAX_RANK];
	int ro;
	if (broadcast_shapes(q->shape, r - 2, k->shape, r - 2, t, &ro, NULL) ||
	    broadcast_shapes(t, r - 2, v->shape, r - 2, o, &ro, NULL))
		return ARGERR(1, "batch dims of %s and %s do not broadcast with query's %s", shp(g, k, b1, sizeof b1),
			      shp(g, v, b2, sizeof b2), shp(g, q, b2, sizeof b2));
	if (n->args[4].f != 0)
		return ARGERR(4, "%g: only 0 (inference) is supported", n->args[4].f);
	if (has(n, 3)) {
		coil_value *m = node_in(g, n, 3);
		coil_dim sc[COIL_MAX_RANK], bo[COIL_MAX_RANK];
		memcpy(sc, o, (size_t)(r - 2) * sizeof *sc);
		sc[r - 2] = q->shape[r - 2];
		sc[r - 1] = k->shape[r - 2];
		int rb, ok = m->rank <= r && !broadcast_shapes(m->shape, m->rank, sc, r, bo, &rb, NULL);
		for (int i = 0; ok && i < r; i++)
			ok = dim_eq(&bo[i], &sc[i]);
		if (!ok)
			return ARGERR(3, "shape %s does not broadcast to the scores' shape %s", shp(g, m, b1, sizeof b1),
				      shape_format(sc, r, &g->syms, b2, sizeof b2));
		if (m->dtype != COIL_BOOL && m->dtype != q->dtype)
			return ARGERR(3, "dtype %s: a mask is bool or query's dtype %s", dtype_name(m->dtype),
				      dtype_name(q->dtype));
	}
	if (has(n, 7) && (!has(n, 3) || node_in(g, n, 3)->dtype != COIL_BOOL))
		return ARGERR(7, "applies to a bool attn_mask only (the score where the mask is false)");
	o[r - 2] = q->shape[r - 2];
	o[r - 1] = v->shape[r - 1];
	set_out(g, n, 0, q->dtype, r, o);
	return 0;
}

static int check_vec(coil_graph *g, coil_node *n, coil_err *err, int argi, int rank, const coil_dim *shape,
		     coil_dtype t)
{
	if (!has(n, argi))
		return 0;
	coil_value *v = node_in(g, n, argi);
	char b1[200], b2[200];
	int ok = v->rank == rank;
	for (int i = 0; ok && i < rank; i++)
		ok = dim_eq(&v->shape[i], &shape[i]);
	if (!ok)
		return ARGERR(argi, "shape %s, expected %s", shp(g, v, b1, sizeof b1),
			      shape_format(shape, rank, &g->syms, b2, sizeof b2));
	if (v->dtype != t && !(dtype_is_float(v->dtype) && dtype_is_float(t)))
		return ARGERR(argi, "dtype %s does not match input dtype %s", dtype_name(v->dtype), dtype_name(t));
	return 0;
}

static int infer_batch_norm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (need_float(g, n, err, 0))
		return -1;
	if (x->rank < 2)
		return ARGERR(0, "expected rank >= 2, got %d", x->rank);
	/* training=True without running statistics: the batch's own (instance_norm's
	 * form, on [1, N*C, ...]); updating running statistics is training */
	const int batch_stats = n->args[5].i != 0;
	if (batch_stats && (has(n, 3) || has(n, 4)))
		return unsupported(err, ARGERR(5, "training mode is not supported with running statistics to update "
						  "(inference only; without them, the batch's statistics normalize)"));
	if (!batch_stats && (!has(n, 3) || !has(n, 4)))
		return ARGERR(has(n, 3) ? 4 : 3, "running statistics are required in inference");
	for (int i = 1; i <= 4; i++)
		if (check_vec(g, n, err, i, 1, &x->shape[1], x->dtype))
			return -1;
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	coil_dim z = batch_stats ? x->shape[1] : dim_const(0);
	for (int k = 1; k < n->nout; k++)
		set_out(g, n, k, x->dtype, 1, &z);
	return 0;
}

/* native_group_norm: out like the input, mean and rstd [N, group].  The N, C
 * and HxW arguments restate the input's shape; the input's own dims are used. */
static int infer_group_norm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int64_t ch, grp = n->args[6].i;
	if (need_float(g, n, err, 0))
		return -1;
	if (x->rank < 2)
		return ARGERR(0, "expected rank >= 2 (N, C, ...), got %d", x->rank);
	if (!dim_is_const(&x->shape[1], &ch))
		return unsupported(err, ARGERR(0, "a symbolic channel count (dim 1) is not supported"));
	if (grp < 1 || ch % grp)
		return ARGERR(6, "%lld groups do not divide %lld channels", (long long)grp, (long long)ch);
	for (int i = 1; i <= 2; i++)
		if (check_vec(g, n, err, i, 1, &x->shape[1], x->dtype))
			return -1;
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	coil_dim ng[2] = {x->shape[0], dim_const(grp)};
	for (int k = 1; k < n->nout; k++)
		set_out(g, n, k, x->dtype, 2, ng);
	return 0;
}

static int infer_glu(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int d;
	int64_t len;
	if (need_float(g, n, err, 0) || wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	if (!x->rank)
		return ARGERR(0, "a 0-d tensor has no dim to halve");
	if (!dim_is_const(&x->shape[d], &len) || len % 2)
		return ARGERR(1, "dim %d must have an even static size", d);
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	out[d] = dim_const(len / 2);
	set_out(g, n, 0, x->dtype, x->rank, out);
	return 0;
}

static int infer_prelu(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *w = node_in(g, n, 1);
	char b1[200];
	if (need_float(g, n, err, 0))
		return -1;
	if (w->rank > 1)
		return ARGERR(1, "shape %s: expected one value or a 1-d tensor of one per channel",
			      shp(g, w, b1, sizeof b1));
	int64_t k;
	const int one = !w->rank || (dim_is_const(&w->shape[0], &k) && k == 1);
	if (!one) {
		if (x->rank < 2)
			return ARGERR(1, "shape %s: a rank-%d input has one channel", shp(g, w, b1, sizeof b1), x->rank);
		if (check_vec(g, n, err, 1, 1, &x->shape[1], x->dtype))
			return -1;
	} else if (!dtype_is_float(w->dtype)) {
		return ARGERR(1, "dtype %s is not supported (a floating dtype is required)", dtype_name(w->dtype));
	}
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

/* The quant_min, quant_max (at lo, lo + 1) and dtype (at dt) arguments of a
 * quantization op: a storage type and a range inside it. */
static int quant_range(coil_graph *g, coil_node *n, int lo, int dt, coil_err *err)
{
	const coil_dtype t = (coil_dtype)n->args[dt].i;
	if (t != COIL_U8 && t != COIL_I8 && t != COIL_I32)
		return ARGERR(dt, "dtype %s is not a quantized storage type (u8, i8 or i32)", dtype_name(t));
	const int64_t tmin = t == COIL_U8 ? 0 : t == COIL_I8 ? -128 : INT32_MIN;
	const int64_t tmax = t == COIL_U8 ? 255 : t == COIL_I8 ? 127 : INT32_MAX;
	const int64_t qmin = n->args[lo].i, qmax = n->args[lo + 1].i;
	if (qmin < tmin || qmin > tmax)
		return ARGERR(lo, "%lld is outside %s's range [%lld, %lld]", (long long)qmin, dtype_name(t),
			      (long long)tmin, (long long)tmax);
	if (qmax < qmin || qmax > tmax)
		return ARGERR(lo + 1, "%lld is outside [quant_min %lld, %lld]", (long long)qmax, (long long)qmin,
			      (long long)tmax);
	return 0;
}

/* quantize / dequantize (ops.h): per tensor with scalar or one-element tensor
 * qparams, or per channel along axis; u8/i8 (and i32) storage. */
static int infer_quant(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int dq = op_is_dequant(n->op), pc = op_quant_pc(n->op), lo = op_quant_min_arg(n->op);
	const coil_dtype t = (coil_dtype)n->args[lo + 2].i;
	const int64_t qmin = n->args[lo].i, qmax = n->args[lo + 1].i;
	char b1[200];
	if (quant_range(g, n, lo, lo + 2, err))
		return -1;
	if (dq ? x->dtype != t : !dtype_is_float(x->dtype))
		return ARGERR(0, dq ? "dtype %s does not match the dtype argument %s"
				    : "dtype %s is not supported (a floating dtype is required)",
			      dtype_name(x->dtype), dtype_name(t));
	if (!op_quant_tensor(n->op)) {
		double s = n->args[1].f;
		if (!(s > 0) || !isfinite(s) || !isfinite((float)s) || (float)s == 0)
			return ARGERR(1, "%g is not a positive finite f32 scale", s);
		if (n->args[2].i < qmin || n->args[2].i > qmax)
			return ARGERR(2, "%lld is outside [quant_min %lld, quant_max %lld]", (long long)n->args[2].i,
				      (long long)qmin, (long long)qmax);
	} else {
		int axis = 0;
		coil_dim c = dim_const(1);
		if (pc) {
			int64_t a = n->args[3].i;
			if (a < 0 || a >= x->rank) /* as ATen: no negative axis */
				return ARGERR(3, "axis %lld is out of range [0, %d)", (long long)a, x->rank);
			axis = (int)(a < 0 ? a + x->rank : a);
			c = x->shape[axis];
		}
		for (int k = 1; k <= 2; k++) {
			coil_value *v = node_in(g, n, k);
			int64_t numel = 1, d;
			for (int i = 0; i < v->rank; i++)
				numel = dim_is_const(&v->shape[i], &d) && numel >= 0 ? numel * d : -1;
			if (pc ? v->rank != 1 || !dim_eq(&v->shape[0], &c) : numel != 1)
				return ARGERR(k, pc ? "shape %s: expected one value per element of dim %d"
						    : "shape %s: expected one value", shp(g, v, b1, sizeof b1), axis);
			if (k == 1 ? !dtype_is_float(v->dtype) : !dtype_is_int(v->dtype))
				return ARGERR(k, "dtype %s is not supported (%s)", dtype_name(v->dtype),
					      k == 1 ? "a floating dtype is required" : "an integer dtype is required");
		}
	}
	set_out(g, n, 0, dq ? COIL_F32 : t, x->rank, x->shape);
	return 0;
}

/* choose_qparams (ops.h): the input's range gives [1] f32 scale, [1] i64 zero point. */
static int infer_choose_qparams(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (quant_range(g, n, 1, 4, err))
		return -1;
	if (n->args[2].i == n->args[1].i)
		return ARGERR(2, "equals quant_min: the range has no steps");
	if (!dtype_is_float(x->dtype))
		return ARGERR(0, "dtype %s is not supported (a floating dtype is required)", dtype_name(x->dtype));
	const double eps = n->args[3].f;
	if (!(eps > 0) || !isfinite(eps) || (float)eps == 0 || !isfinite((float)eps))
		return ARGERR(3, "%g is not a positive finite f32 value", eps);
	const coil_dim one = dim_const(1);
	set_out(g, n, 0, COIL_F32, 1, &one);
	set_out(g, n, 1, COIL_I64, 1, &one);
	return 0;
}

static int infer_layer_norm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *ns = &n->args[1];
	char b1[200];
	if (need_float(g, n, err, 0))
		return -1;
	if (ns->n < 1 || ns->n > x->rank)
		return ARGERR(1, "must have 1 to %d entries", x->rank);
	int axis = x->rank - ns->n;
	for (int i = 0; i < ns->n; i++)
		if (!dim_eq(&ns->dims[i], &x->shape[axis + i]))
			return ARGERR(1, "does not match the trailing dims of input shape %s", shp(g, x, b1, sizeof b1));
	if (check_vec(g, n, err, 2, ns->n, ns->dims, x->dtype) || check_vec(g, n, err, 3, ns->n, ns->dims, x->dtype))
		return -1;
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	coil_dim st[COIL_MAX_RANK];
	for (int i = 0; i < x->rank; i++)
		st[i] = i < axis ? x->shape[i] : dim_const(1);
	for (int k = 1; k < n->nout; k++)
		set_out(g, n, k, x->dtype, x->rank, st);
	return 0;
}

static int infer_softmax(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int d;
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	coil_dtype t = x->dtype;
	if ((n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX) && has(n, 2))
		t = (coil_dtype)n->args[2].i;
	else if (n->args[2].kind == ARG_BOOL && n->args[2].i) {
		if (x->dtype != COIL_F16 && x->dtype != COIL_BF16)
			return ARGERR(2, "half_to_float needs a half-precision input");
		t = COIL_F32;
	}
	if (!dtype_is_float(x->dtype))
		return ARGERR(0, "dtype %s is not supported (a floating dtype is required)", dtype_name(x->dtype));
	if (!dtype_is_float(t)) /* softmax's dtype argument */
		return ARGERR(2, "dtype %s is not supported (a floating dtype is required)", dtype_name(t));
	set_out(g, n, 0, t, x->rank, x->shape);
	return 0;
}


void pool_get_params(const coil_node *n, pool_params *pp)
{
	const coil_arg *a = n->args;
	int avg = pool_is_avg(n->op);
	memset(pp, 0, sizeof *pp);
	pp->nd = pool_is_3d(n->op) ? 3 : 2;
	for (int i = 0; i < pp->nd; i++) {
#define AT(ai, dflt) (a[ai].n == 0 ? (dflt) : a[ai].n == 1 ? a[ai].ints[0] : a[ai].ints[i])
		pp->k[i] = AT(1, 1);
		pp->s[i] = AT(2, pp->k[i]);
		pp->p[i] = AT(3, 0);
		pp->d[i] = avg ? 1 : AT(4, 1);
#undef AT
	}
	pp->ceil = (int)a[avg ? 4 : 5].i;
	pp->count_pad = avg ? (int)a[5].i : 0;
	pp->divisor = avg && a[6].kind == ARG_INT ? a[6].i : 0;
}

int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil)
{
	int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
	int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
	if (ceil && (o - 1) * s >= in + p)
		o--;
	return o;
}

int pool_out_dim(coil_symtab *tab, const coil_dim *in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil,
		 coil_dim *out, coil_err *err)
{
	int64_t c;
	if (dim_is_const(in, &c)) {
		*out = dim_const(pool_out_size(c, k, s, p, d, ceil));
		return 0;
	}
	/* floor((in + 2p - d(k-1) - 1 [+ s-1]) / s) + 1; with ceil_mode, the last
	 * window must start inside the input or left padding: at most
	 * floor((in + p - 1) / s) + 1 */
	coil_dim t, one = dim_const(1), cc = dim_const(2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0));
	if (dim_add(&t, in, &cc, err) || dim_floordiv(out, &t, s, tab, err) || dim_add(out, out, &one, err))
		return -1;
	if (ceil) {
		coil_dim m, pc = dim_const(p - 1);
		if (dim_add(&t, in, &pc, err) || dim_floordiv(&m, &t, s, tab, err) || dim_add(&m, &m, &one, err) ||
		    dim_minmax(out, out, &m, 0, tab, err))
			return -1;
	}
	return 0;
}

static int infer_pool2d(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int nd = pool_is_3d(n->op) ? 3 : 2, avg = pool_is_avg(n->op);
	if (x->rank != nd + 1 && x->rank != nd + 2)
		return ARGERR(0, "expected rank %d or %d, got %d", nd + 1, nd + 2, x->rank);
	if (x->dtype == COIL_BOOL || (avg && !dtype_is_float(x->dtype)))
		return ARGERR(0, "dtype %s is not supported", dtype_name(x->dtype));
	for (int ai = 1; ai <= (avg ? 3 : 4); ai++) {
		const coil_arg *a = &n->args[ai];
		if (a->n > nd || (a->n == 0 && ai == 1) || (a->n > 1 && a->n < nd))
			return ARGERR(ai, "expected 1 or %d values", nd);
		for (int k = 0; k < a->n; k++)
			if (a->ints[k] < (ai == 3 ? 0 : 1) || a->ints[k] > (1 << 20))
				return ARGERR(ai, "value %lld out of range", (long long)a->ints[k]);
	}
	if (avg && has(n, 6) && n->args[6].i == 0)
		return ARGERR(6, "divisor must not be zero");
	pool_params pp;
	pool_get_params(n, &pp);
	coil_dim out[COIL_MAX_RANK];
	int r = x->rank;
	for (int i = 0; i < r - nd; i++)
		out[i] = x->shape[i];
	for (int i = 0; i < nd; i++) {
		if (pp.p[i] * 2 > pp.d[i] * (pp.k[i] - 1) + 1)
			return ARGERR(3, "padding should be at most half of the effective kernel size");
		coil_dim o;
		if (pool_out_dim(&g->syms, &x->shape[r - nd + i], pp.k[i], pp.s[i], pp.p[i], pp.d[i], pp.ceil, &o, err))
			return node_errf(err, n, "%s", err->msg);
		int64_t oc;
		if (dim_is_const(&o, &oc) && oc <= 0)
			return ARGERR(1, "output size would be %lld", (long long)oc);
		if (graph_guard(g, n, GUARD_GE, &o, 1, "output size", err))
			return -1;
		out[r - nd + i] = o;
	}
	set_out(g, n, 0, x->dtype, r, out);
	if (n->nout == 2)
		set_out(g, n, 1, COIL_I64, r, out);
	return 0;
}

static int infer_adaptive_pool2d(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *os = &n->args[1];
	if (x->rank != 3 && x->rank != 4)
		return ARGERR(0, "expected rank 3 or 4, got %d", x->rank);
	if (need_float(g, n, err, 0))
		return -1;
	if (os->n != 2 && os->n != 1)
		return ARGERR(1, "expected 2 values");
	if (!os->ints)
		return ARGERR(1, "must be static");
	coil_dim out[4];
	int r = x->rank;
	for (int i = 0; i < r - 2; i++)
		out[i] = x->shape[i];
	for (int i = 0; i < 2; i++) {
		int64_t o = os->ints[os->n == 1 ? 0 : i];
		if (o < 1 || o > (1 << 20))
			return ARGERR(1, "output size %lld out of range", (long long)o);
		if (dim_eq_const(&x->shape[r - 2 + i], 0))
			return ARGERR(0, "spatial dims must be non-empty");
		out[r - 2 + i] = dim_const(o);
	}
	set_out(g, n, 0, x->dtype, r, out);
	if (n->nout == 2)
		set_out(g, n, 1, COIL_I64, r, out);
	return 0;
}

/* --- resampling ------------------------------------------------------------- */

void upsample_get_params(const coil_node *n, upsample_params *up)
{
	const coil_arg *a = n->args;
	int vec = n->op == OP_UPSAMPLE_BILINEAR2D_VEC || n->op == OP_UPSAMPLE_NEAREST2D_VEC;
	memset(up, 0, sizeof *up);
	up->linear = n->op == OP_UPSAMPLE_BILINEAR2D_VEC || n->op == OP_UPSAMPLE_BILINEAR2D;
	up->align_corners = up->linear && a[2].i;
	int sa = up->linear ? 3 : 2; /* scale_factors, or scales_h then scales_w */
	for (int i = 0; i < 2; i++) {
		const coil_arg *s = vec ? &a[sa] : &a[sa + i];
		if (vec && s->kind == ARG_FLOATS && s->n == 2)
			up->scale[i] = s->floats[i];
		else if (!vec && s->kind == ARG_SCALAR)
			up->scale[i] = s->f;
	}
}

/* The interpreter's and static artifacts' rule: common/upsample.h. */
void upsample_source(const upsample_params *up, int dim, coil_dtype t, int64_t in, int64_t out, int64_t i,
		     int64_t src[2], double w[2])
{
	coil_upsample_source(up->linear, up->align_corners, up->scale[dim], t == COIL_F64, in, out, i, src, w);
}

/* Output H, W from output_size, or from the input's and scale_factors
 * (floor(in * scale)); N and C pass through (symbolic ones too).  Symbolic
 * H and W: a symbolic output_size is taken as given (guarded >= 1); a scale
 * over a symbolic dim must be a multiple of 1/64, so that floor(in * scale)
 * is (in * p) // q exactly, as ATen computes it in double. */
static int infer_upsample2d(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int linear = n->op == OP_UPSAMPLE_BILINEAR2D_VEC || n->op == OP_UPSAMPLE_BILINEAR2D;
	int vec = n->op == OP_UPSAMPLE_BILINEAR2D_VEC || n->op == OP_UPSAMPLE_NEAREST2D_VEC;
	int sa = linear ? 3 : 2;
	if (x->rank != 4)
		return ARGERR(0, "expected rank 4 (N, C, H, W), got %d", x->rank);
	if (!dtype_is_float(x->dtype) && (linear || x->dtype != COIL_U8))
		return ARGERR(0, "dtype %s is not supported (a floating dtype%s is required)", dtype_name(x->dtype),
			      linear ? "" : " or u8");
	const coil_arg *os = &n->args[1], *sf = &n->args[sa];
	if (vec && has(n, 1) == has(n, sa))
		return node_errf(err, n, "exactly one of 'output_size' and 'scale_factors' must be given");
	coil_dim out[4] = {x->shape[0], x->shape[1]};
	for (int i = 0; i < 2; i++) {
		const coil_dim *in = &x->shape[2 + i];
		int64_t ci;
		int st = dim_is_const(in, &ci);
		if (st && ci == 0)
			return ARGERR(0, "H and W must be non-empty");
		if (!st && graph_guard(g, n, GUARD_GE, in, 1, "non-empty input", err))
			return -1;
		if (has(n, 1)) {
			if (os->n != 2)
				return ARGERR(1, "expected 2 values, got %d", os->n);
			if (!os->dims)
				return ARGERR(1, "must be a list of sizes");
			out[2 + i] = os->dims[i];
		} else {
			if (sf->n != 2)
				return ARGERR(sa, "expected 2 values, got %d", sf->n);
			double sc = sf->floats[i];
			if (!(sc > 0 && sc <= (1 << 20)))
				return ARGERR(sa, "scale %g out of range", sc);
			if (st) {
				out[2 + i] = dim_const((int64_t)floor((double)ci * sc));
			} else {
				int64_t q = 1;
				while (q <= 64 && sc * (double)q != floor(sc * (double)q))
					q *= 2;
				if (q > 64)
					return ARGERR(sa, "a scale of %g over symbolic dim %d: coil takes multiples of 1/64 "
							  "there (floor(in * scale) is then exact)", sc, 2 + i);
				coil_dim p = dim_const((int64_t)(sc * (double)q)), t;
				if (dim_mul(&t, in, &p, err) || dim_floordiv(&out[2 + i], &t, q, &g->syms, err))
					return node_errf(err, n, "%s", err->msg);
			}
		}
		int64_t o;
		if (dim_is_const(&out[2 + i], &o)) {
			if (!(o >= 1 && o <= (1 << 20)))
				return ARGERR(has(n, 1) ? 1 : sa, "output size %lld out of range", (long long)o);
		} else if (graph_guard(g, n, GUARD_GE, &out[2 + i], 1, "output size", err)) {
			return -1;
		}
	}
	set_out(g, n, 0, x->dtype, 4, out);
	return 0;
}

static int infer_unary(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (x->dtype == COIL_BOOL && n->op != OP_CLAMP)
		return ARGERR(0, "dtype bool is not supported");
	if (n->op == OP_CLAMP && !has(n, 1) && !has(n, 2))
		return node_errf(err, n, "at least one of 'min' and 'max' must be given");
	coil_dtype t = x->dtype;
	/* A float bound on an integer tensor promotes, as in ATen's clamp. */
	static const int sc[] = {0, 1, 2};
	if (n->op == OP_CLAMP || n->op == OP_CLAMP_MIN || n->op == OP_CLAMP_MAX) {
		int r = infer_result_type(g, n, sc, n->op == OP_CLAMP ? 3 : 2, err);
		if (r < 0)
			return -1;
		t = (coil_dtype)r;
	}
	set_out(g, n, 0, t, x->rank, x->shape);
	return 0;
}

static int infer_unary_float(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (n->op == OP_GELU && strcmp(n->args[1].s, "none") && strcmp(n->args[1].s, "tanh"))
		return ARGERR(1, "must be \"none\" or \"tanh\", not \"%s\"", n->args[1].s);
	int activation = n->op == OP_GELU || n->op == OP_SILU || n->op == OP_HARDSWISH ||
			 n->op == OP_HARDSIGMOID || n->op == OP_LEAKY_RELU || n->op == OP_ELU || n->op == OP_SOFTPLUS ||
			 n->op == OP_MISH;
	if (activation && !dtype_is_float(x->dtype))
		return ARGERR(0, "dtype %s is not supported (a floating dtype is required)", dtype_name(x->dtype));
	set_out(g, n, 0, dtype_is_float(x->dtype) ? x->dtype : COIL_F32, x->rank, x->shape);
	return 0;
}

static int infer_unary_bool(coil_graph *g, coil_node *n, coil_err *err)
{
	(void)err;
	coil_value *x = node_in(g, n, 0);
	set_out(g, n, 0, COIL_BOOL, x->rank, x->shape);
	return 0;
}

/* Broadcast shape of the tensor args in idx. */
static int bcast_args(coil_graph *g, coil_node *n, coil_err *err, const int *idx, int cnt, coil_dim *out,
		      int *rank)
{
	*rank = 0;
	for (int k = 0; k < cnt; k++) {
		if (n->args[idx[k]].kind != ARG_TENSOR)
			continue;
		coil_value *v = node_in(g, n, idx[k]);
		coil_dim tmp[COIL_MAX_RANK];
		char b1[200], b2[200];
		if (broadcast_shapes(out, *rank, v->shape, v->rank, tmp, rank, err))
			return ARGERR(idx[k], "shape %s does not broadcast with %s", shp(g, v, b1, sizeof b1),
				      shape_format(out, *rank, &g->syms, b2, sizeof b2));
		memcpy(out, tmp, sizeof(coil_dim) * (size_t)*rank);
	}
	return 0;
}

static int infer_binary(coil_graph *g, coil_node *n, coil_err *err)
{
	static const int idx[2] = {0, 1};
	coil_dim out[COIL_MAX_RANK];
	int rank;
	if (bcast_args(g, n, err, idx, 2, out, &rank))
		return -1;
	int t = infer_result_type(g, n, idx, 2, err);
	if (t < 0)
		return -1;
	int sub = n->op == OP_SUB || n->op == OP_SUB_S || n->op == OP_RSUB || n->op == OP_RSUB_S;
	if ((n->op == OP_REMAINDER || n->op == OP_REMAINDER_S) && t == COIL_BOOL)
		return ARGERR(0, "remainder of bool tensors is not supported");
	if (sub && (node_in(g, n, 0)->dtype == COIL_BOOL ||
		    (n->args[1].kind == ARG_TENSOR && node_in(g, n, 1)->dtype == COIL_BOOL)))
		return node_errf(err, n, "subtraction of bool tensors is not supported");
	if ((n->op == OP_ADD || n->op == OP_ADD_S || sub) && n->args[2].kind == ARG_SCALAR && !n->args[2].is_int &&
	    !dtype_is_float((coil_dtype)t))
		return ARGERR(2, "a float alpha needs a floating result dtype");
	if (n->op == OP_POW_TS && !dtype_is_float((coil_dtype)t) && n->args[1].is_int && n->args[1].i < 0)
		return ARGERR(1, "integers to negative integer powers are not allowed");
	set_out(g, n, 0, (coil_dtype)t, rank, out);
	return 0;
}

static int infer_div(coil_graph *g, coil_node *n, coil_err *err)
{
	if (infer_binary(g, n, err))
		return -1;
	coil_value *o = node_out(g, n, 0);
	if (n->op == OP_DIV_MODE && has(n, 2)) {
		if (strcmp(n->args[2].s, "trunc") && strcmp(n->args[2].s, "floor"))
			return ARGERR(2, "must be \"trunc\", \"floor\" or null, not \"%s\"", n->args[2].s);
		if (o->dtype == COIL_BOOL)
			return ARGERR(0, "bool operands are not supported with a rounding mode");
		return 0;
	}
	if (!dtype_is_float(o->dtype))
		o->dtype = COIL_F32;
	return 0;
}

static int infer_compare(coil_graph *g, coil_node *n, coil_err *err)
{
	static const int idx[2] = {0, 1};
	coil_dim out[COIL_MAX_RANK];
	int rank;
	if (bcast_args(g, n, err, idx, 2, out, &rank) || infer_result_type(g, n, idx, 2, err) < 0)
		return -1;
	set_out(g, n, 0, COIL_BOOL, rank, out);
	return 0;
}

/* bitwise and, or, xor, not (a & b, ~m: on bool, the logical ops) and shifts:
 * integer or bool operands (shifts: integers), the result type promoted as
 * arithmetic's. */
static int infer_bitwise(coil_graph *g, coil_node *n, coil_err *err)
{
	const int na = n->op == OP_BITWISE_NOT ? 1 : 2, shift = op_is_shift(n->op);
	for (int i = 0; i < na; i++) {
		if (n->args[i].kind == ARG_SCALAR) {
			if (!n->args[i].is_int || (shift && n->args[i].is_bool))
				return ARGERR(i, "%s needs an integer%s scalar", shift ? "a shift" : "a bitwise op",
					      shift ? "" : " or bool");
			continue;
		}
		if (n->args[i].kind != ARG_TENSOR)
			return ARGERR(i, "expected a tensor");
		coil_dtype t = node_in(g, n, i)->dtype;
		if (dtype_is_float(t) || (shift && t == COIL_BOOL))
			return ARGERR(i, "dtype %s: %s needs integer%s tensors", dtype_name(t), shift ? "a shift" : "a bitwise op",
				      shift ? "" : " or bool");
	}
	if (na == 1) {
		coil_value *x = node_in(g, n, 0);
		set_out(g, n, 0, x->dtype, x->rank, x->shape);
		return 0;
	}
	static const int idx[2] = {0, 1};
	coil_dim out[COIL_MAX_RANK];
	int rank, t;
	if (bcast_args(g, n, err, idx, 2, out, &rank) || (t = infer_result_type(g, n, idx, 2, err)) < 0)
		return -1;
	set_out(g, n, 0, (coil_dtype)t, rank, out);
	return 0;
}

static int infer_where(coil_graph *g, coil_node *n, coil_err *err)
{
	static const int idx[3] = {0, 1, 2};
	int cond = n->op == OP_WHERE ? 0 : 1;
	coil_value *c = node_in(g, n, cond);
	if (c->dtype != COIL_BOOL && c->dtype != COIL_U8)
		return ARGERR(cond, "must be bool, not %s", dtype_name(c->dtype));
	coil_dim out[COIL_MAX_RANK];
	int rank;
	if (bcast_args(g, n, err, idx, 3, out, &rank))
		return -1;
	coil_dtype t;
	if (n->op == OP_WHERE) {
		static const int vals[2] = {1, 2};
		int r = infer_result_type(g, n, vals, 2, err);
		if (r < 0)
			return -1;
		t = (coil_dtype)r;
	} else {
		/* out of place, self broadcasts too (ATen's expand_outplace) */
		t = node_in(g, n, 0)->dtype;
		if (n->op == OP_MASKED_FILL_T && node_in(g, n, 2)->rank != 0)
			return ARGERR(2, "value must be a 0-dim tensor");
	}
	set_out(g, n, 0, t, rank, out);
	return 0;
}

static int infer_to_copy(coil_graph *g, coil_node *n, coil_err *err)
{
	(void)err;
	coil_value *x = node_in(g, n, 0);
	set_out(g, n, 0, has(n, 1) ? (coil_dtype)n->args[1].i : x->dtype, x->rank, x->shape);
	return 0;
}

int reduce_dims(const coil_graph *g, const coil_node *n, unsigned *mask, int *keepdim)
{
	const coil_value *x = &g->vals[n->args[0].v[0]];
	int dim_arg = -1, keep_arg = -1;
	switch (n->op) {
	case OP_SUM_DIM: case OP_MEAN_DIM: case OP_AMAX: case OP_AMIN: dim_arg = 1; keep_arg = 2; break;
	case OP_VAR_CORR: case OP_VAR_DIM: case OP_STD_CORR: case OP_STD_DIM: dim_arg = 1; keep_arg = 3; break;
	case OP_NORM: dim_arg = 2; keep_arg = 3; break;
	case OP_MAX_DIM: case OP_ARGMAX: case OP_MIN_DIM: case OP_ARGMIN: case OP_LOGSUMEXP: dim_arg = 1; keep_arg = 2; break;
	default: break;
	}
	*keepdim = keep_arg >= 0 ? (int)n->args[keep_arg].i : 0;
	*mask = 0;
	const coil_arg *a = dim_arg >= 0 ? &n->args[dim_arg] : NULL;
	if (!a || a->kind == ARG_NONE || (a->kind == ARG_INTS && a->n == 0)) {
		*mask = x->rank ? (1u << x->rank) - 1 : 0;
		return 0;
	}
	int r = x->rank ? x->rank : 1;
	int cnt = a->kind == ARG_INT ? 1 : a->n;
	for (int k = 0; k < cnt; k++) {
		int64_t d = a->kind == ARG_INT ? a->i : a->ints[k];
		if (d < -r || d >= r)
			return -1;
		d = d < 0 ? d + r : d;
		if (*mask & (1u << d))
			return -2;
		*mask |= 1u << d;
	}
	if (!x->rank)
		*mask = 0;
	return 0;
}

static int infer_reduce(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	unsigned mask;
	int keep;
	int dim_arg = n->op == OP_NORM ? 2 : 1;
	int rc = reduce_dims(g, n, &mask, &keep);
	if (rc == -1)
		return ARGERR(dim_arg, "dim out of range for rank %d", x->rank);
	if (rc == -2)
		return ARGERR(dim_arg, "a dim appears twice");
	coil_dtype t = x->dtype;
	switch (n->op) {
	case OP_SUM: case OP_SUM_DIM:
		if (!dtype_is_float(t))
			t = COIL_I64;
		if (has(n, n->op == OP_SUM ? 1 : 3))
			t = (coil_dtype)n->args[n->op == OP_SUM ? 1 : 3].i;
		break;
	case OP_MEAN: case OP_MEAN_DIM:
		if (has(n, n->op == OP_MEAN ? 1 : 3))
			t = (coil_dtype)n->args[n->op == OP_MEAN ? 1 : 3].i;
		if (!dtype_is_float(t)) /* name the dtype argument when it is the one at fault */
			return ARGERR(has(n, n->op == OP_MEAN ? 1 : 3) ? (n->op == OP_MEAN ? 1 : 3) : 0,
				      "mean needs a floating dtype, not %s", dtype_name(t));
		break;
	case OP_LOGSUMEXP: /* integers in the default float dtype, as ATen does */
		if (!dtype_is_float(t))
			t = COIL_F32;
		break;
	case OP_VAR_CORR: case OP_VAR_DIM: case OP_STD_CORR: case OP_STD_DIM: case OP_NORM:
		if (need_float(g, n, err, 0))
			return -1;
		break;
	case OP_ARGMAX: case OP_ARGMIN:
		t = COIL_I64;
		break;
	default:
		if (t == COIL_BOOL && (n->op == OP_AMAX || n->op == OP_AMIN || n->op == OP_MAX_ALL || n->op == OP_MIN_ALL))
			return ARGERR(0, "dtype bool is not supported");
		break;
	}
	if (n->op == OP_NORM && has(n, 1) && n->args[1].f != 2 && n->args[1].f != 1)
		return ARGERR(1, "only p=1 and p=2 are supported");
	if (n->op == OP_AMAX || n->op == OP_AMIN || n->op == OP_MAX_DIM || n->op == OP_ARGMAX || n->op == OP_MIN_DIM ||
	    n->op == OP_ARGMIN || n->op == OP_MAX_ALL || n->op == OP_MIN_ALL)
		for (int i = 0; i < x->rank; i++)
			if ((mask >> i & 1) && dim_eq_const(&x->shape[i], 0))
				return ARGERR(0, "cannot take the max/min over an empty dim");
	coil_dim out[COIL_MAX_RANK];
	int r = 0;
	for (int i = 0; i < x->rank; i++) {
		if (!(mask >> i & 1))
			out[r++] = x->shape[i];
		else if (keep)
			out[r++] = dim_const(1);
	}
	set_out(g, n, 0, t, r, out);
	if (n->nout == 2)
		set_out(g, n, 1, COIL_I64, r, out);
	return 0;
}

static int numel_of(const coil_dim *s, int r, coil_dim *out, coil_err *err)
{
	*out = dim_const(1);
	for (int i = 0; i < r; i++)
		if (dim_mul(out, out, &s[i], err))
			return -1;
	return 0;
}

/* d with the floor division symbol k taken as exact, times its divisor:
 * den*d with den*floor(a/den) replaced by a. */
static int subst_exact(const coil_symtab *tab, int k, const coil_dim *d, coil_dim *out, coil_err *err)
{
	coil_dim r = {0}, den = dim_const(tab->den[k]);
	for (int i = 0; i < d->n; i++) {
		coil_dim t = {.n = 1, .t = {d->t[i]}};
		if (t.t[0].pow[k] > 1)
			return -1;
		if (t.t[0].pow[k] == 1) {
			t.t[0].pow[k] = 0;
			if (dim_mul(&t, &t, &tab->a[k], err))
				return -1;
		} else if (dim_mul(&t, &t, &den, err)) {
			return -1;
		}
		if (dim_add(&r, &r, &t, err))
			return -1;
	}
	*out = r;
	return 0;
}

/* Whether sizes a and b are equal when the floor divisions in them are
 * exact; then those divisibilities become guards of node n (a view from
 * [b, s, 8] to [b, s//2, 16] holds for even s). */
static int equal_if_exact(coil_graph *g, coil_node *n, const coil_dim *a, const coil_dim *b, coil_err *err)
{
	coil_dim x = *a, y = *b;
	int used[COIL_MAX_SYMS] = {0}, any = 0;
	coil_err e;
	for (int k = g->syms.n - 1; k >= 0; k--) {
		if (g->syms.kind[k] != SYM_FLOORDIV || (!dim_uses(&x, k) && !dim_uses(&y, k)))
			continue;
		if (subst_exact(&g->syms, k, &x, &x, &e) || subst_exact(&g->syms, k, &y, &y, &e))
			return 0;
		used[k] = any = 1;
	}
	if (!any || !dim_eq(&x, &y))
		return 0;
	for (int k = 0; k < g->syms.n; k++)
		if (used[k] && graph_guard(g, n, GUARD_DIV, &g->syms.a[k], g->syms.den[k], "exact division in the sizes", err))
			return -1;
	return 1;
}

static int infer_reshape(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	char b1[200], b2[200];
	coil_dim out[COIL_MAX_RANK], total, known = dim_const(1);
	if (numel_of(x->shape, x->rank, &total, err))
		return node_errf(err, n, "input size: %s", err->msg);
	if (n->op == OP_FLATTEN) {
		int s, e;
		if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &s) || wrap_dim(g, n, err, 2, n->args[2].i, x->rank, &e))
			return -1;
		if (s > e)
			return ARGERR(1, "start_dim %d is after end_dim %d", s, e);
		int r = 0;
		if (x->rank == 0) {
			out[r++] = dim_const(1);
		} else {
			for (int i = 0; i < s; i++)
				out[r++] = x->shape[i];
			coil_dim m;
			if (numel_of(&x->shape[s], e - s + 1, &m, err))
				return node_errf(err, n, "%s", err->msg);
			out[r++] = m;
			for (int i = e + 1; i < x->rank; i++)
				out[r++] = x->shape[i];
		}
		set_out(g, n, 0, x->dtype, r, out);
		return 0;
	}
	const coil_arg *sz = &n->args[1];
	if (sz->n > COIL_MAX_RANK)
		return ARGERR(1, "rank %d exceeds %d", sz->n, COIL_MAX_RANK);
	int infer_at = -1;
	for (int i = 0; i < sz->n; i++) {
		int64_t c;
		if (dim_is_const(&sz->dims[i], &c) && c < 0) {
			if (c != -1 || infer_at >= 0)
				return ARGERR(1, "invalid size %lld at %d", (long long)c, i);
			infer_at = i;
			continue;
		}
		int is_size = 0; /* one of the input's dims is a size, whatever its expression's range says */
		for (int k = 0; k < x->rank && !is_size; k++)
			is_size = dim_eq(&x->shape[k], &sz->dims[i]);
		if (!is_size && dim_min(&sz->dims[i]) < 0)
			return ARGERR(1, "negative size at %d", i);
		out[i] = sz->dims[i];
		if (dim_mul(&known, &known, &sz->dims[i], err))
			return ARGERR(1, "%s", err->msg);
	}
	if (infer_at >= 0) {
		coil_dim q, m, q1;
		int64_t kc = known.n == 1 ? known.t[0].coef : 0;
		if (!dim_eq_const(&known, 0) && dim_div(&q, &total, &known, err) && kc > 0 &&
		    !dim_is_const(&total, NULL)) {
			/* total = m*q1 over known = kc*m: q1 // kc, exact when kc divides q1 (a guard) */
			m = known;
			m.t[0].coef = 1;
			if (dim_div(&q1, &total, &m, err))
				return ARGERR(1, "shape %s is invalid for input of shape %s",
					      shape_format(sz->dims, sz->n, &g->syms, b1, sizeof b1), shp(g, x, b2, sizeof b2));
			if (dim_floordiv(&q, &q1, kc, &g->syms, err))
				return node_errf(err, n, "%s", err->msg);
			if (graph_guard(g, n, GUARD_DIV, &q1, kc, "element count of the input", err))
				return -1;
		} else if (dim_eq_const(&known, 0) || dim_div(&q, &total, &known, err))
			return ARGERR(1, "shape %s is invalid for input of shape %s",
				      shape_format(sz->dims, sz->n, &g->syms, b1, sizeof b1), shp(g, x, b2, sizeof b2));
		out[infer_at] = q;
	} else if (!dim_eq(&known, &total)) {
		int r = equal_if_exact(g, n, &known, &total, err);
		if (r < 0)
			return -1;
		if (r == 0)
			return ARGERR(1, "shape %s is invalid for input of shape %s",
			      shape_format(sz->dims, sz->n, &g->syms, b1, sizeof b1), shp(g, x, b2, sizeof b2));
	}
	set_out(g, n, 0, x->dtype, sz->n, out);
	return 0;
}

/* Output dim i of a permute-like view reads input dim perm[i]. */
int view_perm(const coil_graph *g, const coil_node *n, int *perm)
{
	const coil_value *x = &g->vals[n->args[0].v[0]];
	int r = x->rank;
	for (int i = 0; i < r; i++)
		perm[i] = i;
	if (n->op == OP_T) {
		if (r == 2) {
			perm[0] = 1;
			perm[1] = 0;
		}
		return 0;
	}
	if (n->op == OP_TRANSPOSE) {
		int64_t a = n->args[1].i, b = n->args[2].i, rr = r ? r : 1;
		if (a < -rr || a >= rr)
			return 1;
		if (b < -rr || b >= rr)
			return 2;
		if (!r)
			return 0;
		a = a < 0 ? a + r : a;
		b = b < 0 ? b + r : b;
		perm[a] = (int)b;
		perm[b] = (int)a;
		return 0;
	}
	const coil_arg *d = &n->args[1];
	if (d->n != r)
		return 1;
	unsigned seen = 0;
	for (int i = 0; i < r; i++) {
		int64_t v = d->ints[i];
		if (v < -r || v >= r)
			return 1;
		v = v < 0 ? v + r : v;
		if (seen & (1u << v))
			return 1;
		seen |= 1u << v;
		perm[i] = (int)v;
	}
	return 0;
}

static int infer_permute(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int perm[COIL_MAX_RANK];
	if (n->op == OP_T && x->rank > 2)
		return ARGERR(0, "t() expects a tensor of rank <= 2, got %d", x->rank);
	int bad = view_perm(g, n, perm);
	if (bad)
		return ARGERR(bad, n->op == OP_PERMUTE ? "not a permutation of the %d dims" : "dim out of range for rank %d",
			      x->rank);
	coil_dim out[COIL_MAX_RANK];
	for (int i = 0; i < x->rank; i++)
		out[i] = x->shape[perm[i]];
	set_out(g, n, 0, x->dtype, x->rank, out);
	return 0;
}

static int infer_expand(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *sz = &n->args[1];
	char b1[200], b2[200];
	if (sz->n < x->rank || sz->n > COIL_MAX_RANK)
		return ARGERR(1, "size %s has fewer dims than input shape %s or more than %d",
			      shape_format(sz->dims, sz->n, &g->syms, b1, sizeof b1), shp(g, x, b2, sizeof b2),
			      COIL_MAX_RANK);
	coil_dim out[COIL_MAX_RANK];
	int lead = sz->n - x->rank;
	for (int i = 0; i < sz->n; i++) {
		const coil_dim *want = &sz->dims[i];
		if (dim_eq_const(want, -1)) {
			if (i < lead)
				return ARGERR(1, "-1 is not allowed for a new leading dim");
			out[i] = x->shape[i - lead];
			continue;
		}
		if (dim_min(want) < 0)
			return ARGERR(1, "negative size at %d", i);
		if (i >= lead && !dim_eq(&x->shape[i - lead], want) && !dim_eq_const(&x->shape[i - lead], 1))
			return ARGERR(1, "cannot expand shape %s to %s", shp(g, x, b1, sizeof b1),
				      shape_format(sz->dims, sz->n, &g->syms, b2, sizeof b2));
		out[i] = *want;
	}
	set_out(g, n, 0, x->dtype, sz->n, out);
	return 0;
}

/* Resolved (start, length, step) of a slice or select on a static or symbolic dim. */
int view_slice(const coil_graph *g, const coil_node *n, int *dim, coil_dim *start, coil_dim *len, int64_t *step,
	       coil_err *err)
{
	/* slice/select(self, dim, ...); slice_scatter/select_scatter(self, src, dim, ...) */
	const int off = n->op == OP_SLICE_SCATTER || n->op == OP_SELECT_SCATTER;
	const coil_value *x = &g->vals[n->args[0].v[0]];
	const coil_arg *a = n->args + off; /* a[1]: dim, a[2]: start or index, a[3]: end, a[4]: step */
	int64_t d = a[1].i;
	if (x->rank == 0)
		return coil_err_input(err, "args[0] 'self': cannot slice a 0-dim tensor");
	if (d < -x->rank || d >= x->rank)
		return coil_err_input(err, "args[%d] 'dim': dim %lld out of range for rank %d", 1 + off, (long long)d,
				      x->rank);
	*dim = (int)(d < 0 ? d + x->rank : d);
	const coil_dim *size = &x->shape[*dim];
	int64_t sz;
	int is_static = dim_is_const(size, &sz);
	if (n->op == OP_SELECT || n->op == OP_SELECT_SCATTER) {
		*step = 1;
		*len = dim_const(1);
		if (a[2].kind != ARG_INT)
			return coil_err_input(err, "args[%d] 'index': must be static", 2 + off);
		int64_t i = a[2].i;
		if (is_static) {
			if (i < -sz || i >= sz)
				return coil_err_input(err, "args[%d] 'index': %lld out of range for size %lld", 2 + off,
						      (long long)i, (long long)sz);
			*start = dim_const(i < 0 ? i + sz : i);
		} else if (i < 0) {
			coil_dim c = dim_const(i);
			return dim_add(start, size, &c, err);
		} else {
			*start = dim_const(i);
		}
		return 0;
	}
	if (a[4].kind != ARG_INT || a[4].i < 1)
		return coil_err_input(err, "args[%d] 'step': must be a positive static integer", 4 + off);
	*step = a[4].i;
	int64_t s = a[2].kind == ARG_INT ? a[2].i : 0, e = a[3].kind == ARG_INT ? a[3].i : INT64_MAX;
	int sym_s = a[2].kind == ARG_DIMS && a[2].n == 1, sym_e = a[3].kind == ARG_DIMS && a[3].n == 1;
	if (a[2].kind != ARG_INT && a[2].kind != ARG_NONE && !sym_s)
		return coil_err_input(err, "args[%d] 'start': expected an integer or a size expression", 2 + off);
	if (a[3].kind != ARG_INT && a[3].kind != ARG_NONE && !sym_e)
		return coil_err_input(err, "args[%d] 'end': expected an integer or a size expression", 3 + off);
	if (sym_s && dim_is_const(&a[2].dims[0], &s))
		sym_s = 0;
	if (sym_e && dim_is_const(&a[3].dims[0], &e))
		sym_e = 0;
	if (is_static && !sym_s && !sym_e) {
		if (s < 0)
			s += sz;
		if (e < 0)
			e += sz;
		s = s < 0 ? 0 : s > sz ? sz : s;
		e = e < s ? s : e > sz ? sz : e;
		*start = dim_const(s);
		*len = dim_const((e - s) / *step + ((e - s) % *step != 0)); /* no overflow for a huge step */
		return 0;
	}
	/* symbolic: clamp as Python does, with min/max kept symbolic where the
	 * order of the operands depends on the sizes (a symbolic bound is taken
	 * as non-negative) */
	coil_symtab *tab = (coil_symtab *)&g->syms; /* infer made every symbol; later calls find them */
	coil_dim S, E, z = dim_const(0), t;
	if (sym_s)
		S = a[2].dims[0];
	else if (s < 0) {
		coil_dim c = dim_const(s);
		if (dim_add(&S, size, &c, err) || dim_minmax(&S, &S, &z, 1, tab, err))
			return -1;
	} else
		S = dim_const(s);
	if (dim_minmax(&S, &S, size, 0, tab, err))
		return -1;
	if (sym_e)
		E = a[3].dims[0];
	else if (e >= ((int64_t)1 << 62))
		E = *size;
	else if (e < 0) {
		coil_dim c = dim_const(e);
		if (dim_add(&E, size, &c, err) || dim_minmax(&E, &E, &z, 1, tab, err))
			return -1;
	} else
		E = dim_const(e);
	if (dim_minmax(&E, &E, size, 0, tab, err) || dim_minmax(&E, &E, &S, 1, tab, err))
		return -1;
	coil_dim c = dim_const(*step - 1);
	*start = S;
	if (dim_sub(&t, &E, &S, err) || dim_add(&t, &t, &c, err) || dim_floordiv(len, &t, *step, tab, err))
		return -1;
	return 0;
}

/* A slice's start, a select's index, inside the dim for every binding of the
 * symbols: guarded where they are not known to be (a size-expression start
 * below 0, a select index at or past a symbolic size, would address memory
 * outside the tensor; PyTorch would wrap the first, fail the second). */
static int slice_in_bounds(coil_graph *g, coil_node *n, int d, const coil_dim *start, coil_err *err)
{
	const int sel = n->op == OP_SELECT || n->op == OP_SELECT_SCATTER;
	const char *why = sel ? "select index inside the dim" : "slice start not negative";
	if (graph_guard(g, n, GUARD_GE, start, 0, why, err))
		return -1;
	coil_dim room;
	if (sel && (dim_sub(&room, &node_in(g, n, 0)->shape[d], start, err) || graph_guard(g, n, GUARD_GE, &room, 1, why, err)))
		return -1;
	return 0;
}

static int infer_slice(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int d;
	coil_dim start, len;
	int64_t step;
	if (view_slice(g, n, &d, &start, &len, &step, err))
		return node_errf(err, n, "%s", err->msg);
	if (slice_in_bounds(g, n, d, &start, err))
		return -1;
	coil_dim out[COIL_MAX_RANK];
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (i != d)
			out[r++] = x->shape[i];
		else if (n->op == OP_SLICE)
			out[r++] = len;
	set_out(g, n, 0, x->dtype, r, out);
	return 0;
}

/* slice_scatter / select_scatter: self's shape and dtype; src is the slice's
 * shape exactly (ATen's check), any dtype (converted as copy_ does). */
static int infer_slice_scatter(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *s = node_in(g, n, 1);
	int d;
	coil_dim start, len, want[COIL_MAX_RANK];
	int64_t step;
	char b1[200], b2[200];
	if (view_slice(g, n, &d, &start, &len, &step, err))
		return node_errf(err, n, "%s", err->msg);
	if (slice_in_bounds(g, n, d, &start, err))
		return -1;
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (i != d)
			want[r++] = x->shape[i];
		else if (n->op == OP_SLICE_SCATTER)
			want[r++] = len;
	int same = s->rank == r;
	for (int i = 0; same && i < r; i++)
		same = dim_eq(&s->shape[i], &want[i]);
	if (!same)
		return ARGERR(1, "shape %s is not the %s's %s", shp(g, s, b1, sizeof b1),
			      n->op == OP_SLICE_SCATTER ? "slice" : "selection", shape_format(want, r, &g->syms, b2, sizeof b2));
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

static int infer_squeeze(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	coil_dim out[COIL_MAX_RANK];
	int r = 0, d = -1;
	if (n->op == OP_UNSQUEEZE) {
		if (x->rank == COIL_MAX_RANK)
			return ARGERR(0, "rank would exceed %d", COIL_MAX_RANK);
		if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank + 1, &d))
			return -1;
		for (int i = 0; i <= x->rank; i++)
			out[i] = i < d ? x->shape[i] : i == d ? dim_const(1) : x->shape[i - 1];
		set_out(g, n, 0, x->dtype, x->rank + 1, out);
		return 0;
	}
	if (n->op == OP_SQUEEZE_DIM && wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	for (int i = 0; i < x->rank; i++)
		if (!dim_eq_const(&x->shape[i], 1) || (d >= 0 && i != d))
			out[r++] = x->shape[i];
	set_out(g, n, 0, x->dtype, r, out);
	return 0;
}

/* _embedding_bag(_forward_only): [bags, D] of a 2-d float weight; the other
 * results (offset2bag, bag_size, max_indices) shaped as ATen's. */
static int infer_embedding_bag(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *w = node_in(g, n, 0), *ix = node_in(g, n, 1), *of = node_in(g, n, 2);
	const int64_t mode = n->args[4].i;
	if (w->rank != 2 || !dtype_is_float(w->dtype))
		return ARGERR(0, "must be a 2-d float tensor, got %s of rank %d", dtype_name(w->dtype), w->rank);
	if (ix->rank != 1 || (ix->dtype != COIL_I64 && ix->dtype != COIL_I32))
		return ARGERR(1, "must be a 1-d i64 or i32 tensor");
	if (of->rank != 1 || of->dtype != ix->dtype)
		return ARGERR(2, "must be a 1-d tensor of indices' dtype");
	if (mode < 0 || mode > 2)
		return ARGERR(4, "mode %lld: 0 (sum), 1 (mean) or 2 (max)", (long long)mode);
	if (has(n, 6)) {
		coil_value *pw = node_in(g, n, 6);
		if (mode != 0)
			return ARGERR(6, "per-sample weights need mode 0 (sum)");
		if (pw->dtype != w->dtype || pw->rank != 1 || !dim_eq(&pw->shape[0], &ix->shape[0]))
			return ARGERR(6, "must be 1-d of the indices' length and the weight's dtype");
	}
	coil_dim bags = of->shape[0], one = dim_const(1);
	if (n->args[7].i && dim_sub(&bags, &bags, &one, err))
		return node_errf(err, n, "%s", err->msg);
	if (n->args[7].i && graph_guard(g, n, GUARD_GE, &bags, 0, "offsets hold the last one", err))
		return -1;
	coil_dim o0[2] = {bags, w->shape[1]}, z = dim_const(0);
	set_out(g, n, 0, w->dtype, 2, o0);
	set_out(g, n, 1, ix->dtype, 1, mode ? &ix->shape[0] : &z);
	set_out(g, n, 2, ix->dtype, 1, &of->shape[0]);
	if (mode == 2)
		set_out(g, n, 3, ix->dtype, 2, o0);
	else
		set_out(g, n, 3, ix->dtype, 1, &of->shape[0]);
	return 0;
}

static int infer_spmm(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *cr = node_in(g, n, 0), *co = node_in(g, n, 1), *d = node_in(g, n, 3);
	const char *red = n->args[4].s;
	if (strcmp(red, "sum") && strcmp(red, "mean") && strcmp(red, "amax") && strcmp(red, "amin"))
		return ARGERR(4, "must be sum, mean, amax or amin, not \"%s\"", red);
	if (cr->rank != 1 || (cr->dtype != COIL_I64 && cr->dtype != COIL_I32))
		return ARGERR(0, "must be a 1-d i64 or i32 tensor (rows + 1 offsets)");
	if (co->rank != 1 || co->dtype != cr->dtype)
		return ARGERR(1, "must be a 1-d tensor of crow_indices' dtype");
	if (d->rank != 2 || !dtype_is_float(d->dtype) || dtype_is_half(d->dtype))
		return ARGERR(3, "must be a 2-d f32 or f64 tensor");
	if (has(n, 2)) {
		coil_value *v = node_in(g, n, 2);
		if (v->rank != 1 || v->dtype != d->dtype || !dim_eq(&v->shape[0], &co->shape[0]))
			return ARGERR(2, "must be 1-d, one per column index, of other's dtype");
	}
	coil_dim rows, one = dim_const(1);
	if (dim_sub(&rows, &cr->shape[0], &one, err))
		return node_errf(err, n, "%s", err->msg);
	int64_t rc;
	if (dim_is_const(&rows, &rc) && rc < 0)
		return ARGERR(0, "needs at least one offset");
	if (graph_guard(g, n, GUARD_GE, &rows, 0, "crow_indices not empty", err))
		return -1;
	coil_dim out[2] = {rows, d->shape[1]};
	set_out(g, n, 0, d->dtype, 2, out);
	return 0;
}

/* coil.lstm / gru / rnn_*: input [T, B, I] ([B, T, I] batch first), f32;
 * G gates (LSTM 4, GRU 3, RNN 1); per layer and direction w_ih [G*H, in], w_hh
 * [G*H, HO] (and b_ih, b_hh [G*H]; LSTM with a projection w_hr [P, H] last,
 * HO = P, else HO = H); states [L*D, B, HO] (LSTM's c [L*D, B, H]); the
 * output [T, B, D*HO] (batch first: [B, T, ...]); lengths (i64 [B]) make
 * the steps at and past a sequence's length padding. */
static int infer_rnn(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int lstm = n->op == OP_LSTM, L = (int)n->args[4].i, D = n->args[5].i ? 2 : 1, bf = (int)n->args[6].i;
	const int nb = n->args[3].i ? 4 : 2, G = op_rnn_gates(n->op);
	const coil_arg *ps = &n->args[2];
	char b1[200];
	if (x->rank != 3 || x->dtype != COIL_F32)
		return unsupported(err, ARGERR(0, "a 3-d f32 input is supported, not %s of rank %d", dtype_name(x->dtype),
					       x->rank));
	if (L < 1 || L > 64)
		return ARGERR(4, "%d layers (1 to 64)", L);
	const int proj = lstm && ps->n == L * D * (nb + 1), np = nb + proj;
	if (ps->n != L * D * np)
		return ARGERR(2, "%d tensors, expected %d (%d layers x %d directions x %d%s)", ps->n, L * D * nb, L, D, nb,
			      lstm ? ", or one more each with a projection" : "");
	const coil_value *wih = &g->vals[ps->v[0]], *whr = proj ? &g->vals[ps->v[np - 1]] : NULL;
	int64_t gh, hv, pv = 0;
	if (wih->rank != 2 || !dim_is_const(&wih->shape[0], &gh) || gh % G || gh < G)
		return ARGERR(2, "params[0] (w_ih) must be 2-d with a static multiple of %d rows", G);
	hv = gh / G;
	if (proj && (whr->rank != 2 || !dim_is_const(&whr->shape[0], &pv) || pv < 1 || pv >= hv))
		return ARGERR(2, "params[%d] (w_hr) must be 2-d [P, H] with 0 < P < H = %lld", np - 1, (long long)hv);
	const int64_t ho = proj ? pv : hv;
	const coil_dim B = x->shape[bf ? 0 : 1], T = x->shape[bf ? 1 : 0];
	int64_t tv;
	if (dim_is_const(&T, &tv)) {
		if (tv < 1)
			return ARGERR(0, "a sequence of %lld steps (at least one, as PyTorch)", (long long)tv);
	} else if (graph_guard(g, n, GUARD_GE, &T, 1, "a sequence of at least one step", err)) {
		return -1;
	}
	const coil_dim H = dim_const(hv), HO = dim_const(ho), GH = dim_const(gh), dh = dim_const(D * ho),
		       dl = dim_const(L * D);
	static const char *const names[] = {"w_ih", "w_hh", "b_ih", "b_hh"};
	for (int l = 0; l < L; l++)
		for (int d = 0; d < D; d++)
			for (int k = 0; k < np; k++) {
				const coil_value *p = &g->vals[ps->v[(l * D + d) * np + k]];
				const int pk = proj && k == np - 1; /* w_hr */
				const coil_dim want[2] = {pk ? HO : GH, pk ? H : k == 0 ? (l ? dh : x->shape[2]) : HO};
				const int rank = k < 2 || pk ? 2 : 1;
				int ok = p->rank == rank && p->dtype == COIL_F32;
				for (int i = 0; ok && i < rank; i++)
					ok = dim_eq(&p->shape[i], &want[i]);
				if (!ok)
					return ARGERR(2, "params[%d] (layer %d%s %s) has shape %s, expected %s f32", (l * D + d) * np + k,
						      l, d ? " reverse" : "", pk ? "w_hr" : names[k], shp(g, p, b1, sizeof b1),
						      pk ? "[P, H]" : rank == 2 ? (k ? "[G*H, P or H]" : "[G*H, in]") : "[G*H]");
			}
	for (int k = 0; k < (lstm ? 2 : 1); k++) {
		const coil_value *h = lstm ? &g->vals[n->args[1].v[k]] : node_in(g, n, 1);
		if (lstm && n->args[1].n != 2)
			return ARGERR(1, "needs h and c, got %d tensors", n->args[1].n);
		const coil_dim hs[3] = {dl, B, k ? H : HO};
		int ok = h->rank == 3 && h->dtype == COIL_F32;
		for (int i = 0; ok && i < 3; i++)
			ok = dim_eq(&h->shape[i], &hs[i]);
		if (!ok)
			return ARGERR(1, "%s has shape %s, expected [layers x directions, batch, %s] f32", k ? "c" : "h",
				      shp(g, h, b1, sizeof b1), k || !proj ? "hidden" : "projection");
	}
	if (has(n, 7)) {
		const coil_value *ln = node_in(g, n, 7);
		if (ln->dtype != COIL_I64 || ln->rank != 1 || !dim_eq(&ln->shape[0], &B))
			return ARGERR(7, "has shape %s %s, expected [batch] i64", shp(g, ln, b1, sizeof b1), dtype_name(ln->dtype));
	}
	coil_dim os[3] = {x->shape[0], x->shape[1], dh};
	set_out(g, n, 0, COIL_F32, 3, os);
	const coil_dim hs[3] = {dl, B, HO}, cs[3] = {dl, B, H};
	for (int k = 1; k < n->nout; k++)
		set_out(g, n, k, COIL_F32, 3, k == 2 ? cs : hs);
	return 0;
}

static int infer_tri(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (x->rank < 2)
		return ARGERR(0, "needs rank >= 2, got %d", x->rank);
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

/* The result dtype of a sum-like op over x (cumsum, prod): dtype (args[di])
 * when given, else integers and bool in i64, floats as they are. */
static coil_dtype sum_dtype(const coil_node *n, const coil_value *x, int di)
{
	if (has(n, di))
		return (coil_dtype)n->args[di].i;
	return dtype_is_float(x->dtype) ? x->dtype : COIL_I64;
}

static int infer_guard(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *v = node_in(g, n, 1);
	int64_t numel = 1, d;
	char b1[200];
	for (int i = 0; i < v->rank; i++)
		numel = dim_is_const(&v->shape[i], &d) && numel >= 0 ? numel * d : -1;
	if (numel != 1 || !dtype_is_int(v->dtype))
		return ARGERR(1, "shape %s, dtype %s: expected one integer element", shp(g, v, b1, sizeof b1),
			      dtype_name(v->dtype));
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

/* coil.mb_join (microbatch.c): self's shape with dim 0 the batch's total */
static int infer_mb_join(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (x->rank < 1 || n->args[1].i < 1)
		return ARGERR(1, "a batch of %lld for a value of rank %d", (long long)n->args[1].i, x->rank);
	coil_dim s[COIL_MAX_RANK];
	memcpy(s, x->shape, sizeof s);
	s[0] = dim_const(n->args[1].i);
	set_out(g, n, 0, x->dtype, x->rank, s);
	return 0;
}

static int infer_cumsum(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int d;
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	set_out(g, n, 0, sum_dtype(n, x, 2), x->rank, x->shape);
	return 0;
}

static int infer_prod(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_dtype t = sum_dtype(n, x, n->op == OP_PROD ? 1 : 3);
	if (n->op == OP_PROD) {
		set_out(g, n, 0, t, 0, NULL);
		return 0;
	}
	int d, r = 0;
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	coil_dim out[COIL_MAX_RANK];
	for (int i = 0; i < x->rank; i++)
		if (i != d || n->args[2].i)
			out[r++] = i == d ? dim_const(1) : x->shape[i];
	set_out(g, n, 0, t, r, out);
	return 0;
}

/* sort, sort.stable, topk: values and i64 indices; topk's k static, within the dim. */
static int infer_sort(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int di = n->op == OP_SORT ? 1 : 2;
	int d;
	if (wrap_dim(g, n, err, di, n->args[di].i, x->rank, &d))
		return -1;
	if (n->op == OP_TOPK && x->dtype == COIL_BOOL)
		return ARGERR(0, "dtype bool is not supported");
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	if (n->op == OP_TOPK) {
		const coil_arg *k = &n->args[1];
		int64_t kv, len;
		if (!dim_is_const(&k->dims[0], &kv))
			return unsupported(err, ARGERR(1, "a symbolic k is not supported"));
		if (kv < 0)
			return ARGERR(1, "k %lld is negative", (long long)kv);
		if (x->rank) {
			if (dim_is_const(&x->shape[d], &len)) {
				if (kv > len)
					return ARGERR(1, "k %lld is larger than dim %d's size %lld", (long long)kv, d, (long long)len);
			} else {
				coil_dim slack, kd = dim_const(kv);
				if (dim_sub(&slack, &x->shape[d], &kd, err) ||
				    graph_guard(g, n, GUARD_GE, &slack, 0, "topk's k within the dim", err))
					return -1;
			}
			out[d] = dim_const(kv);
		} else if (kv > 1) {
			return ARGERR(1, "k %lld is larger than a 0-dim input's 1 element", (long long)kv);
		}
	}
	set_out(g, n, 0, x->dtype, x->rank, out);
	set_out(g, n, 1, COIL_I64, x->rank, out);
	return 0;
}

static int infer_same(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (n->op == OP_ROLL) {
		const coil_arg *sh = &n->args[1], *dm = &n->args[2];
		if (dm->n != 0 && dm->n != sh->n)
			return ARGERR(2, "needs as many dims as shifts");
		if (dm->n == 0 && sh->n != 1)
			return ARGERR(1, "needs exactly one shift when no dims are given");
		for (int k = 0; k < dm->n; k++) {
			int d;
			if (wrap_dim(g, n, err, 2, dm->ints[k], x->rank, &d))
				return -1;
		}
		if (need_static(g, n, err, 0, 0))
			return -1;
	}
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

static int infer_dropout(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	if (n->args[2].kind != ARG_BOOL || n->args[2].i) /* native_dropout: train=None means training */
		return unsupported(err, ARGERR(2, "training mode is not supported (inference only)"));
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	if (n->nout == 2)
		set_out(g, n, 1, COIL_BOOL, x->rank, x->shape);
	return 0;
}

static int infer_cat(coil_graph *g, coil_node *n, coil_err *err)
{
	const coil_arg *ts = &n->args[0];
	char b1[200], b2[200];
	if (ts->n == 0)
		return ARGERR(0, "needs at least one tensor");
	const coil_value *ref = NULL;
	int t = -1;
	for (int k = 0; k < ts->n; k++) {
		const coil_value *v = &g->vals[ts->v[k]];
		t = t < 0 ? (int)v->dtype : dtype_promote((coil_dtype)t, v->dtype);
		if (t < 0)
			return ARGERR(0, "dtypes do not promote");
		if (!(v->rank == 1 && dim_eq_const(&v->shape[0], 0)) && !ref)
			ref = v;
	}
	if (!ref)
		ref = &g->vals[ts->v[0]];
	if (ref->rank == 0)
		return ARGERR(0, "zero-dim tensors cannot be concatenated");
	int d;
	if (wrap_dim(g, n, err, 1, n->args[1].i, ref->rank, &d))
		return -1;
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, ref->shape, sizeof(coil_dim) * (size_t)ref->rank);
	out[d] = dim_const(0);
	for (int k = 0; k < ts->n; k++) {
		const coil_value *v = &g->vals[ts->v[k]];
		if (v->rank == 1 && dim_eq_const(&v->shape[0], 0) && ref->rank != 1)
			continue; /* legacy: empty 1-D tensors are skipped */
		if (v->rank != ref->rank)
			return ARGERR(0, "tensor %d has rank %d, expected %d", k, v->rank, ref->rank);
		for (int i = 0; i < v->rank; i++)
			if (i != d && !dim_eq(&v->shape[i], &ref->shape[i]))
				return ARGERR(0, "tensor %d has shape %s, which does not match %s outside dim %d", k,
					      shp(g, v, b1, sizeof b1), shp(g, ref, b2, sizeof b2), d);
		if (dim_add(&out[d], &out[d], &v->shape[d], err))
			return ARGERR(0, "%s", err->msg);
	}
	set_out(g, n, 0, (coil_dtype)t, ref->rank, out);
	return 0;
}

static int infer_pixel_shuffle(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int64_t r = n->args[1].i;
	const int up = n->op == OP_PIXEL_SHUFFLE, R = x->rank;
	char b1[200];
	if (R < 3 || R > COIL_MAX_RANK - 2)
		return ARGERR(0, "expected rank 3 to %d (..., C, H, W), got %d", COIL_MAX_RANK - 2, R);
	if (r < 1)
		return ARGERR(1, "must be positive, got %lld", (long long)r);
	coil_dim out[COIL_MAX_RANK], rr = dim_const(r), r2 = dim_const(r * r);
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)R);
	if (up) {
		int64_t ch;
		if (!dim_is_const(&x->shape[R - 3], &ch) || ch % (r * r))
			return ARGERR(0, "shape %s: the channels (dim %d) must be a static multiple of %lld",
				      shp(g, x, b1, sizeof b1), R - 3, (long long)(r * r));
		out[R - 3] = dim_const(ch / (r * r));
		if (dim_mul(&out[R - 2], &x->shape[R - 2], &rr, err) || dim_mul(&out[R - 1], &x->shape[R - 1], &rr, err))
			return ARGERR(0, "%s", err->msg);
	} else {
		for (int i = R - 2; i < R; i++) {
			coil_err e2;
			if (!dim_div(&out[i], &x->shape[i], &rr, &e2))
				continue;
			if (dim_is_const(&x->shape[i], NULL))
				return ARGERR(0, "shape %s: height and width must be multiples of %lld",
					      shp(g, x, b1, sizeof b1), (long long)r);
			/* symbolic: floor division, guarded exact at run time */
			if (dim_floordiv(&out[i], &x->shape[i], r, &g->syms, err))
				return node_errf(err, n, "%s", err->msg);
			if (graph_guard(g, n, GUARD_DIV, &x->shape[i], r,
					i == R - 2 ? "height a multiple of the factor" : "width a multiple of the factor", err))
				return -1;
		}
		if (dim_mul(&out[R - 3], &x->shape[R - 3], &r2, err))
			return ARGERR(0, "%s", err->msg);
	}
	set_out(g, n, 0, x->dtype, R, out);
	return 0;
}

/* channel_shuffle: [N, C, *] as it is, C a static multiple of groups (the channels'
 * order is the kernel's) */
static int infer_channel_shuffle(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int64_t gr = n->args[1].i;
	int64_t ch;
	char b1[200];
	if (x->rank < 3 || x->rank > COIL_MAX_RANK - 1)
		return ARGERR(0, "expected rank 3 to %d ([N, C, *]), got %d", COIL_MAX_RANK - 1, x->rank);
	if (gr < 1)
		return ARGERR(1, "must be positive, got %lld", (long long)gr);
	if (!dim_is_const(&x->shape[1], &ch) || ch % gr)
		return ARGERR(0, "shape %s: the channels (dim 1) must be a static multiple of %lld",
			      shp(g, x, b1, sizeof b1), (long long)gr);
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

static int infer_repeat(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *rp = &n->args[1];
	char b1[200];
	if (rp->n < x->rank)
		return ARGERR(1, "%d repeats for a rank-%d input (one per dim at least)", rp->n, x->rank);
	if (rp->n > COIL_MAX_RANK / 2)
		return unsupported(err, ARGERR(1, "repeats over %d dims (at most %d)", rp->n, COIL_MAX_RANK / 2));
	coil_dim out[COIL_MAX_RANK];
	const int lead = rp->n - x->rank;
	for (int i = 0; i < rp->n; i++) {
		int64_t k;
		if (dim_is_const(&rp->dims[i], &k) && k < 0) /* a symbolic count is a size (instance norm's batch) */
			return ARGERR(1, "repeat %d is negative (%lld)", i, (long long)k);
		coil_dim s = i < lead ? dim_const(1) : x->shape[i - lead];
		if (dim_mul(&out[i], &s, &rp->dims[i], err))
			return ARGERR(1, "%s (input %s)", err->msg, shp(g, x, b1, sizeof b1));
	}
	set_out(g, n, 0, x->dtype, rp->n, out);
	return 0;
}

/* stack: equal shapes, a new dim of their count at dim (of rank + 1); dtypes
 * promote as cat's do. */
static int infer_stack(coil_graph *g, coil_node *n, coil_err *err)
{
	const coil_arg *ts = &n->args[0];
	char b1[200], b2[200];
	if (ts->n == 0)
		return ARGERR(0, "needs at least one tensor");
	const coil_value *ref = &g->vals[ts->v[0]];
	int t = -1, d;
	if (ref->rank + 1 > COIL_MAX_RANK)
		return ARGERR(0, "rank %d is the most a tensor has; stacking adds a dim", COIL_MAX_RANK);
	for (int k = 0; k < ts->n; k++) {
		const coil_value *v = &g->vals[ts->v[k]];
		t = t < 0 ? (int)v->dtype : dtype_promote((coil_dtype)t, v->dtype);
		if (t < 0)
			return ARGERR(0, "dtypes do not promote");
		int same = v->rank == ref->rank;
		for (int i = 0; same && i < v->rank; i++)
			same = dim_eq(&v->shape[i], &ref->shape[i]);
		if (!same)
			return ARGERR(0, "tensor %d has shape %s, tensor 0 %s: stack needs equal shapes", k,
				      shp(g, v, b1, sizeof b1), shp(g, ref, b2, sizeof b2));
	}
	if (wrap_dim(g, n, err, 1, n->args[1].i, ref->rank + 1, &d))
		return -1;
	coil_dim out[COIL_MAX_RANK];
	for (int i = 0, j = 0; i <= ref->rank; i++)
		out[i] = i == d ? dim_const(ts->n) : ref->shape[j++];
	set_out(g, n, 0, (coil_dtype)t, ref->rank + 1, out);
	return 0;
}

/* unbind: one result per index of a static dim, that dim removed. */
static int infer_unbind(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int d;
	int64_t size;
	if (x->rank == 0)
		return ARGERR(0, "cannot unbind a 0-dim tensor");
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	if (!dim_is_const(&x->shape[d], &size))
		return ARGERR(0, "dim %d must be static to unbind", d);
	if (size != n->nout)
		return node_errf(err, n, "'outputs' names %d results, but dim %d has size %lld", n->nout, d,
				 (long long)size);
	coil_dim out[COIL_MAX_RANK];
	for (int i = 0, j = 0; i < x->rank; i++)
		if (i != d)
			out[j++] = x->shape[i];
	for (int k = 0; k < n->nout; k++)
		set_out(g, n, k, x->dtype, x->rank - 1, out);
	return 0;
}

static int infer_split(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int d;
	if (wrap_dim(g, n, err, 2, n->args[2].i, x->rank, &d))
		return -1;
	if (x->rank == 0)
		return ARGERR(0, "cannot split a 0-dim tensor");
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	if (n->op == OP_SPLIT || n->op == OP_UNSAFE_SPLIT) {
		if (n->args[1].kind != ARG_INT || n->args[1].i < 0)
			return ARGERR(1, "must be a non-negative static integer");
		int64_t ss = n->args[1].i, size;
		if (!dim_is_const(&x->shape[d], &size))
			return ARGERR(0, "dim %d must be static to split", d);
		if (ss == 0 && size != 0)
			return ARGERR(1, "split_size 0 needs an empty dim, but dim %d has size %lld", d, (long long)size);
		int64_t chunks = ss == 0 || size == 0 ? 1 : size / ss + (size % ss != 0);
		if (chunks != n->nout)
			return node_errf(err, n, "'outputs' names %d results, but splitting size %lld by %lld gives %lld",
					 n->nout, (long long)size, (long long)ss, (long long)chunks);
		for (int k = 0; k < n->nout; k++) {
			int64_t len = size - k * ss < ss ? size - k * ss : ss;
			out[d] = dim_const(len);
			set_out(g, n, k, x->dtype, x->rank, out);
		}
		return 0;
	}
	const coil_arg *sz = &n->args[1];
	if (sz->n != n->nout)
		return node_errf(err, n, "'outputs' names %d results, but split_sizes has %d", n->nout, sz->n);
	coil_dim sum = dim_const(0);
	for (int k = 0; k < sz->n; k++) {
		if (dim_min(&sz->dims[k]) < 0)
			return ARGERR(1, "negative size");
		if (dim_add(&sum, &sum, &sz->dims[k], err))
			return ARGERR(1, "%s", err->msg);
		out[d] = sz->dims[k];
		set_out(g, n, k, x->dtype, x->rank, out);
	}
	if (!dim_eq(&sum, &x->shape[d]))
		return ARGERR(1, "sizes do not add up to the size of dim %d", d);
	return 0;
}

static int infer_pad(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *p = &n->args[1];
	if (p->n % 2 || p->n / 2 > x->rank)
		return ARGERR(1, "needs an even number of values, at most 2 per dim (%d given)", p->n);
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	for (int k = 0; k < p->n / 2; k++) {
		int d = x->rank - 1 - k;
		if (dim_add(&out[d], &out[d], &p->dims[2 * k], err) || dim_add(&out[d], &out[d], &p->dims[2 * k + 1], err))
			return ARGERR(1, "%s", err->msg);
		int64_t v;
		if (dim_is_const(&out[d], &v) && v < 0)
			return ARGERR(1, "padding makes dim %d negative", d);
		if (graph_guard(g, n, GUARD_GE, &out[d], 0, "padding keeps the dim's size", err))
			return -1;
	}
	if (x->dtype == COIL_BOOL)
		return ARGERR(0, "dtype bool is not supported");
	set_out(g, n, 0, x->dtype, x->rank, out);
	return 0;
}

static int infer_gather(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *ix = node_in(g, n, 2);
	char b1[200], b2[200];
	int d;
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank ? x->rank : 1, &d))
		return -1;
	if (ix->dtype != COIL_I64)
		return ARGERR(2, "index must be i64, not %s", dtype_name(ix->dtype));
	if (ix->rank != x->rank) {
		if (x->rank <= 1 && ix->rank <= 1) /* ATen lets a 0-d stand for a 1-element 1-d */
			return unsupported(err, ARGERR(2, "a 0-d and a 1-d tensor (ranks %d, %d)", ix->rank, x->rank));
		return ARGERR(2, "index has rank %d, self %d: they must match", ix->rank, x->rank);
	}
	for (int i = 0; i < ix->rank && i < x->rank; i++) {
		int64_t a, b;
		if (i != d && dim_is_const(&ix->shape[i], &a) && dim_is_const(&x->shape[i], &b) && a > b)
			return ARGERR(2, "index shape %s is larger than self %s outside dim %d", shp(g, ix, b1, sizeof b1),
				      shp(g, x, b2, sizeof b2), d);
		coil_dim slack;
		if (i != d && !dim_eq(&ix->shape[i], &x->shape[i]) &&
		    !(dim_is_const(&ix->shape[i], NULL) && dim_is_const(&x->shape[i], NULL))) {
			/* sizes that are symbols: index's may not exceed self's (a guard) */
			if (dim_sub(&slack, &x->shape[i], &ix->shape[i], err))
				return node_errf(err, n, "%s", err->msg);
			if (graph_guard(g, n, GUARD_GE, &slack, 0, "index no larger than self outside dim", err))
				return -1;
		}
	}
	set_out(g, n, 0, x->dtype, ix->rank, ix->shape);
	return 0;
}

/* A scatter's reduce (args[ai]). */
static int check_reduce(coil_graph *g, coil_node *n, coil_err *err, int ai)
{
	static const char *const kinds[] = {"sum", "prod", "mean", "amax", "amin"};
	for (int k = 0; k < 5; k++)
		if (!strcmp(n->args[ai].s, kinds[k]))
			return 0;
	return ARGERR(ai, "must be sum, prod, mean, amax or amin, not \"%s\"", n->args[ai].s);
}

/* scatter_add, scatter_reduce: self, index and src of one rank; index no larger
 * than src anywhere nor than self outside dim (symbolic sizes: guards). */
static int infer_scatter(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *ix = node_in(g, n, 2), *src = node_in(g, n, 3);
	char b1[200], b2[200];
	int d;
	if (n->op == OP_SCATTER_REDUCE && check_reduce(g, n, err, 4))
		return -1;
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank ? x->rank : 1, &d))
		return -1;
	if (ix->dtype != COIL_I64)
		return ARGERR(2, "index must be i64, not %s", dtype_name(ix->dtype));
	if (src->dtype != x->dtype)
		return ARGERR(3, "dtype %s differs from self's %s", dtype_name(src->dtype), dtype_name(x->dtype));
	if (x->dtype == COIL_BOOL || dtype_is_half(x->dtype))
		return unsupported(err, ARGERR(0, "dtype %s is not supported", dtype_name(x->dtype)));
	if (ix->rank != x->rank || src->rank != x->rank || x->rank == 0)
		return ARGERR(2, "self, index and src need one rank >= 1 (got %d, %d, %d)", x->rank, ix->rank, src->rank);
	for (int i = 0; i < ix->rank; i++)
		for (int w = 0; w < 2; w++) {
			const coil_value *o = w ? x : src;
			if (w && i == d)
				continue;
			int64_t a, b;
			if (dim_is_const(&ix->shape[i], &a) && dim_is_const(&o->shape[i], &b)) {
				if (a > b)
					return ARGERR(2, "index shape %s is larger than %s %s at dim %d", shp(g, ix, b1, sizeof b1),
						      w ? "self" : "src", shp(g, o, b2, sizeof b2), i);
			} else if (!dim_eq(&ix->shape[i], &o->shape[i])) {
				coil_dim slack;
				if (dim_sub(&slack, &o->shape[i], &ix->shape[i], err))
					return node_errf(err, n, "%s", err->msg);
				if (graph_guard(g, n, GUARD_GE, &slack, 0, w ? "index no larger than self" : "index no larger than src",
						err))
					return -1;
			}
		}
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

/* index_select and index_add: self of rank >= 1, dim (args[1]) wrapped into *d,
 * an i64 or i32 index (args[2]) of rank <= 1. */
static int check_index_1d(coil_graph *g, coil_node *n, coil_err *err, int *d)
{
	coil_value *x = node_in(g, n, 0), *ix = node_in(g, n, 2);
	if (x->rank == 0)
		return unsupported(err, ARGERR(0, "a 0-dim input is not supported"));
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, d))
		return -1;
	if (ix->dtype != COIL_I64 && ix->dtype != COIL_I32)
		return ARGERR(2, "index must be i64 or i32, not %s", dtype_name(ix->dtype));
	if (ix->rank > 1)
		return ARGERR(2, "index must be 0-d or 1-d, got rank %d", ix->rank);
	return 0;
}

static int infer_index_add(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *ix = node_in(g, n, 2), *src = node_in(g, n, 3);
	char b1[200], b2[200];
	int d;
	if (check_index_1d(g, n, err, &d) || (n->op == OP_INDEX_REDUCE && check_reduce(g, n, err, 4)))
		return -1;
	if (src->dtype != x->dtype)
		return ARGERR(3, "dtype %s differs from self's %s", dtype_name(src->dtype), dtype_name(x->dtype));
	if (x->dtype == COIL_BOOL || dtype_is_half(x->dtype))
		return unsupported(err, ARGERR(0, "dtype %s is not supported", dtype_name(x->dtype)));
	const coil_dim len = ix->rank ? ix->shape[0] : dim_const(1);
	int ok = src->rank == x->rank;
	for (int i = 0; ok && i < x->rank; i++)
		ok = dim_eq(&src->shape[i], i == d ? &len : &x->shape[i]);
	if (!ok)
		return ARGERR(3, "shape %s: expected self's %s with dim %d the index's length", shp(g, src, b1, sizeof b1),
			      shp(g, x, b2, sizeof b2), d);
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

int index_plan_of(coil_graph *g, coil_node *n, index_plan *p, coil_err *err)
{
	const coil_value *x = &g->vals[n->args[0].v[0]];
	const coil_arg *ix = &n->args[1];
	int first = -1, last = -1, gap = 0, r = 0;
	if (ix->n > x->rank)
		return ARGERR(1, "%d indices for a rank-%d tensor", ix->n, x->rank);
	p->rb = 0;
	for (int k = 0; k < ix->n; k++) {
		if (ix->v[k] < 0)
			continue;
		const coil_value *v = &g->vals[ix->v[k]];
		if (v->dtype == COIL_BOOL || v->dtype == COIL_U8)
			return unsupported(err, ARGERR(1, "indices[%d] is a %s mask: not supported, the result's shape would "
							  "depend on its values (index with integers, or use where/masked_fill)",
						       k, dtype_name(v->dtype)));
		if (v->dtype != COIL_I64) /* as PyTorch 1.13 */
			return ARGERR(1, "indices[%d] must be i64, not %s", k, dtype_name(v->dtype));
		coil_dim tmp[COIL_MAX_RANK];
		char b1[200];
		if (broadcast_shapes(p->b, p->rb, v->shape, v->rank, tmp, &p->rb, err))
			return ARGERR(1, "indices[%d] of shape %s does not broadcast with the others", k,
				      shape_format(v->shape, v->rank, &g->syms, b1, sizeof b1));
		memcpy(p->b, tmp, sizeof tmp);
		gap |= last >= 0 && last != k - 1;
		first = first < 0 ? k : first;
		last = k;
	}
	if (first < 0)
		return ARGERR(1, "needs at least one index tensor");
	p->bpos = gap ? 0 : first;
	if (x->rank - (last - first + 1) + p->rb > COIL_MAX_RANK)
		return unsupported(err, ARGERR(1, "the result's rank exceeds %d", COIL_MAX_RANK));
	for (int d = 0; d < x->rank; d++) {
		if (r == p->bpos)
			r += p->rb;
		p->keep[d] = d < ix->n && ix->v[d] >= 0 ? -1 : r++;
	}
	return 0;
}

static int infer_index_t(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	index_plan p;
	if (index_plan_of(g, n, &p, err))
		return -1;
	coil_dim out[COIL_MAX_RANK];
	int r = p.rb;
	for (int i = 0; i < p.rb; i++)
		out[p.bpos + i] = p.b[i];
	for (int d = 0; d < x->rank; d++)
		if (p.keep[d] >= 0) {
			out[p.keep[d]] = x->shape[d];
			r++;
		}
	set_out(g, n, 0, x->dtype, r, out);
	return 0;
}

static int infer_gather_scatter(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *s = node_in(g, n, 0), *x = node_in(g, n, 1), *si = node_in(g, n, 2), *di = node_in(g, n, 3);
	char b1[200], b2[200];
	if (check_reduce(g, n, err, 5))
		return -1;
	if (s->rank < 1 || x->rank != s->rank || x->dtype != s->dtype || s->dtype == COIL_BOOL || dtype_is_half(s->dtype))
		return ARGERR(1, "x %s must be self's dtype and rank (self %s)", shp(g, x, b1, sizeof b1), shp(g, s, b2, sizeof b2));
	for (int i = 1; i < s->rank; i++)
		if (!dim_eq(&x->shape[i], &s->shape[i]))
			return ARGERR(1, "x %s and self %s differ beyond dim 0", shp(g, x, b1, sizeof b1), shp(g, s, b2, sizeof b2));
	for (int k = 2; k <= 3; k++) {
		coil_value *v = node_in(g, n, k);
		if (v->rank != 1 || (v->dtype != COIL_I64 && v->dtype != COIL_I32))
			return ARGERR(k, "must be a 1-d i64 or i32 tensor");
	}
	if (!dim_eq(&si->shape[0], &di->shape[0]))
		return ARGERR(3, "%s indices, src has %s", shp(g, di, b1, sizeof b1), shp(g, si, b2, sizeof b2));
	if (has(n, 4)) {
		coil_value *w = node_in(g, n, 4);
		if (w->rank != 1 || w->dtype != s->dtype || !dim_eq(&w->shape[0], &di->shape[0]))
			return ARGERR(4, "must be 1-d, one per edge, of self's dtype");
	}
	set_out(g, n, 0, s->dtype, s->rank, s->shape);
	return 0;
}

static int infer_index_select(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0), *ix = node_in(g, n, 2);
	int d;
	if (check_index_1d(g, n, err, &d))
		return -1;
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	out[d] = ix->rank ? ix->shape[0] : dim_const(1);
	set_out(g, n, 0, x->dtype, x->rank, out);
	return 0;
}

static int infer_embedding(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *w = node_in(g, n, 0), *ix = node_in(g, n, 1);
	if (w->rank != 2)
		return ARGERR(0, "expected a matrix, got rank %d", w->rank);
	if (ix->dtype != COIL_I64 && ix->dtype != COIL_I32)
		return ARGERR(1, "indices must be i64 or i32, not %s", dtype_name(ix->dtype));
	if (ix->rank + 1 > COIL_MAX_RANK)
		return ARGERR(1, "rank too large");
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, ix->shape, sizeof(coil_dim) * (size_t)ix->rank);
	out[ix->rank] = w->shape[1];
	set_out(g, n, 0, w->dtype, ix->rank + 1, out);
	return 0;
}

int fill_value(const coil_node *n, double *v)
{
	switch (n->op) {
	case OP_FULL: *v = n->args[1].f; return 1;
	case OP_FULL_LIKE: *v = n->args[1].f; return 1;
	case OP_ONES_LIKE: *v = 1; return 1;
	case OP_ZEROS: case OP_NEW_ZEROS: case OP_ZEROS_LIKE: *v = 0; return 1;
	default: return 0;
	}
}

static int infer_fill(coil_graph *g, coil_node *n, coil_err *err)
{
	if (n->op == OP_ZEROS_LIKE || n->op == OP_ONES_LIKE || n->op == OP_FULL_LIKE) { /* self's shape and dtype */
		coil_value *x = node_in(g, n, 0);
		int dt = n->op == OP_FULL_LIKE ? 2 : 1;
		coil_dtype t = has(n, dt) ? (coil_dtype)n->args[dt].i : x->dtype;
		set_out(g, n, 0, t, x->rank, x->shape);
		return 0;
	}
	int size_arg = n->op == OP_NEW_ZEROS ? 1 : 0, dt_arg = n->op == OP_FULL ? 2 : n->op == OP_ZEROS ? 1 : 2;
	const coil_arg *sz = &n->args[size_arg];
	if (sz->n > COIL_MAX_RANK)
		return ARGERR(size_arg, "rank %d exceeds %d", sz->n, COIL_MAX_RANK);
	for (int i = 0; i < sz->n; i++)
		if (dim_min(&sz->dims[i]) < 0)
			return ARGERR(size_arg, "negative size at %d", i);
	coil_dtype t = COIL_F32;
	if (n->op == OP_NEW_ZEROS)
		t = node_in(g, n, 0)->dtype;
	else if (n->op == OP_FULL && n->args[1].is_int)
		t = COIL_I64; /* 1.13: full(size, True) is i64 too */
	if (has(n, dt_arg))
		t = (coil_dtype)n->args[dt_arg].i;
	if (n->op == OP_FULL && !dtype_is_float(t) && t != COIL_BOOL) {
		static const double lo[COIL_NDTYPES] = {[COIL_I64] = -9.2233720368547758e18, [COIL_I32] = -2147483648.0,
							[COIL_I8] = -128, [COIL_U8] = 0};
		static const double hi[COIL_NDTYPES] = {[COIL_I64] = 9.2233720368547758e18, [COIL_I32] = 2147483647.0,
							[COIL_I8] = 127, [COIL_U8] = 255};
		double v = n->args[1].f;
		if (!(v >= lo[t] && v <= hi[t]))
			return ARGERR(1, "value %g overflows %s", v, dtype_name(t));
	}
	set_out(g, n, 0, t, sz->n, sz->dims);
	return 0;
}

/* arange's arguments by op: *start (NULL: 0), *end, step (1 where absent), dtype's index. */
void arange_args(const coil_node *n, const coil_arg **start, const coil_arg **end, double *step, int *is_int,
		 int *dt)
{
	const int one = n->op == OP_ARANGE;
	*start = one ? NULL : &n->args[0];
	*end = &n->args[one ? 0 : 1];
	*step = n->op == OP_ARANGE_STEP && n->args[2].kind == ARG_SCALAR ? n->args[2].f : 1;
	*is_int = n->op != OP_ARANGE_STEP || n->args[2].kind != ARG_SCALAR || n->args[2].is_int;
	*dt = one ? 1 : n->op == OP_ARANGE_START ? 2 : 3;
}

/* arange: [ceil((end - start) / step)] as ATen counts it (in double; integer
 * dtypes truncate the bounds first), an error where the bounds disagree with
 * step's sign (ATen's).  The dtype: given, else i64 when every bound is an
 * integer, else f32.  Size expressions as bounds (arange(seq)): integer
 * start and step, the size (end - start + step - 1) // step (step < 0: the
 * mirror), guarded not negative. */
static int infer_arange(coil_graph *g, coil_node *n, coil_err *err)
{
	const coil_arg *s0, *e0;
	double step;
	int step_int, dt;
	arange_args(n, &s0, &e0, &step, &step_int, &dt);
	const int ei = s0 ? 1 : 0, sym = e0->kind == ARG_DIMS || (s0 && s0->kind == ARG_DIMS);
	int all_int = step_int && (e0->kind == ARG_DIMS || e0->is_int) && (!s0 || s0->kind == ARG_DIMS || s0->is_int);
	coil_dtype t = has(n, dt) ? (coil_dtype)n->args[dt].i : all_int ? COIL_I64 : COIL_F32;
	if (t == COIL_BOOL)
		return ARGERR(dt, "arange has no bool form");
	if (!(step == step) || step == 0 || step == INFINITY || step == -INFINITY)
		return ARGERR(2, "step must be finite and nonzero, got %g", step);
	coil_dim size;
	if (sym) {
		if (!step_int || (s0 && s0->kind != ARG_DIMS && !s0->is_int))
			return unsupported(err, ARGERR(s0 && s0->kind != ARG_DIMS && !s0->is_int ? 0 : 2,
						       "a size expression bound needs an integer start and step"));
		const int64_t k = (int64_t)step;
		coil_dim lo = !s0 ? dim_const(0) : s0->kind == ARG_DIMS ? s0->dims[0] : dim_const(s0->i);
		coil_dim hi = e0->kind == ARG_DIMS ? e0->dims[0] : dim_const(e0->i), span;
		if (k > 0 ? dim_sub(&span, &hi, &lo, err) : dim_sub(&span, &lo, &hi, err))
			return node_errf(err, n, "%s", err->msg);
		int64_t v;
		if (dim_is_const(&span, &v) ? v < 0 : 0)
			return ARGERR(ei, "upper bound and larger bound inconsistent with step sign");
		if (!dim_is_const(&span, &v) &&
		    graph_guard(g, n, GUARD_GE, &span, 0, "bounds consistent with the step's sign", err))
			return -1;
		coil_dim adj = dim_const((k > 0 ? k : -k) - 1);
		if (dim_add(&size, &span, &adj, err) || dim_floordiv(&size, &size, k > 0 ? k : -k, &g->syms, err))
			return node_errf(err, n, "%s", err->msg);
	} else {
		double lo = s0 ? s0->f : 0, hi = e0->f;
		if (!(lo == lo && hi == hi) || lo == INFINITY || lo == -INFINITY || hi == INFINITY || hi == -INFINITY)
			return ARGERR(lo == lo && lo != INFINITY && lo != -INFINITY ? ei : 0, "bounds must be finite");
		if (dtype_is_int(t)) { /* ATen's int64 arithmetic: bounds and step truncated */
			if (fabs(lo) >= 9.2e18 || fabs(hi) >= 9.2e18 || fabs(step) >= 9.2e18)
				return ARGERR(ei, "bounds out of the integer range");
			lo = (double)(int64_t)lo, hi = (double)(int64_t)hi, step = (double)(int64_t)step;
			if (step == 0)
				return ARGERR(2, "step must be nonzero, got 0 after truncation to an integer");
		}
		if (!((step > 0 && hi >= lo) || (step < 0 && hi <= lo)))
			return ARGERR(ei, "upper bound and larger bound inconsistent with step sign");
		double cnt = ceil((hi - lo) / step);
		if (!(cnt >= 0 && cnt <= (double)(COIL_MAX_BYTES / dtype_size(t))))
			return ARGERR(ei, "%g elements: larger than 2^40 bytes", cnt);
		size = dim_const((int64_t)cnt);
	}
	set_out(g, n, 0, t, 1, &size);
	return 0;
}

typedef int (*infer_fn)(coil_graph *, coil_node *, coil_err *);

/* flip: the same shape, each listed dim (once) reversed. */
static int infer_flip(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	int seen[COIL_MAX_RANK] = {0}, d;
	for (int i = 0; i < n->args[1].n; i++) {
		if (wrap_dim(g, n, err, 1, n->args[1].ints[i], x->rank, &d))
			return -1;
		if (seen[d]++)
			return ARGERR(1, "dim %d appears twice", d);
	}
	set_out(g, n, 0, x->dtype, x->rank, x->shape);
	return 0;
}

/* unfold: dim d of size n becomes (n - size) / step + 1 windows, the window
 * a new last dim of size (n >= size; guarded when n is symbolic). */
static int infer_unfold(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int64_t size = n->args[2].i, step = n->args[3].i;
	int d;
	char b1[200];
	if (x->rank < 1 || x->rank + 1 > COIL_MAX_RANK)
		return unsupported(err, ARGERR(0, "rank %d (1 to %d)", x->rank, COIL_MAX_RANK - 1));
	if (wrap_dim(g, n, err, 1, n->args[1].i, x->rank, &d))
		return -1;
	if (size < 0)
		return ARGERR(2, "must not be negative, got %lld", (long long)size);
	if (step < 1)
		return ARGERR(3, "must be positive, got %lld", (long long)step);
	int64_t v;
	if (dim_is_const(&x->shape[d], &v) ? v < size : 0)
		return ARGERR(2, "windows of %lld along dim %d of %s", (long long)size, d, shp(g, x, b1, sizeof b1));
	if (!dim_is_const(&x->shape[d], &v) && graph_guard(g, n, GUARD_GE, &x->shape[d], size, "size at least the window", err))
		return -1;
	coil_dim out[COIL_MAX_RANK], neg = dim_const(-size), one = dim_const(1);
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	if (dim_add(&out[d], &x->shape[d], &neg, err) || dim_floordiv(&out[d], &out[d], step, &g->syms, err) ||
	    dim_add(&out[d], &out[d], &one, err))
		return node_errf(err, n, "%s", err->msg);
	out[x->rank] = dim_const(size);
	set_out(g, n, 0, x->dtype, x->rank + 1, out);
	return 0;
}

/* as_strided over self's elements in row-major order: static sizes, strides
 * and offset, every element read inside self. */
static int infer_as_strided(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *sz = &n->args[1], *st = &n->args[2], *of = &n->args[3];
	char b1[200];
	if (!sz->ints || !st->ints || (of->kind != ARG_NONE && of->kind != ARG_INT))
		return unsupported(err, ARGERR(sz->ints ? (st->ints ? 3 : 2) : 1, "must be static"));
	if (sz->n != st->n)
		return ARGERR(2, "%d strides for %d sizes", st->n, sz->n);
	if (sz->n > COIL_MAX_RANK)
		return unsupported(err, ARGERR(1, "rank %d (at most %d)", sz->n, COIL_MAX_RANK));
	int64_t numel = 1, v, last = of->kind == ARG_INT ? of->i : 0, any = 1;
	for (int i = 0; i < x->rank; i++) {
		if (!dim_is_const(&x->shape[i], &v))
			return unsupported(err, ARGERR(0, "shape %s: as_strided needs static sizes", shp(g, x, b1, sizeof b1)));
		numel *= v;
	}
	if (last < 0)
		return ARGERR(3, "negative offset %lld", (long long)last);
	coil_dim out[COIL_MAX_RANK];
	for (int i = 0; i < sz->n; i++) {
		if (sz->ints[i] < 0 || st->ints[i] < 0)
			return ARGERR(sz->ints[i] < 0 ? 1 : 2, "entry %d is negative", i);
		any &= sz->ints[i] > 0;
		int64_t span;
		if (sz->ints[i] > 0 && (__builtin_mul_overflow(sz->ints[i] - 1, st->ints[i], &span) ||
					__builtin_add_overflow(last, span, &last)))
			return ARGERR(1, "entry %d: the offsets overflow", i);
		out[i] = dim_const(sz->ints[i]);
	}
	if (any && last >= numel)
		return ARGERR(1, "reads element %lld of self %s (%lld elements)", (long long)last, shp(g, x, b1, sizeof b1),
			      (long long)numel);
	set_out(g, n, 0, x->dtype, sz->n, out);
	return 0;
}

/* col2im: [N, C*kh*kw, L] -> [N, C, H, W] (N optional), L = the blocks that
 * fit; im2col the other way.  Static spatial sizes. */
static int infer_col2im(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const int fold = n->op == OP_COL2IM, a0 = fold ? 2 : 1;
	const int64_t *k = n->args[a0].ints, *dl = n->args[a0 + 1].ints, *pd = n->args[a0 + 2].ints,
		      *sd = n->args[a0 + 3].ints;
	char b1[200];
	const int rk = fold ? 3 : 4, R = x->rank;
	if (R != rk && R != rk - 1)
		return ARGERR(0, "expected rank %d or %d, got %d", rk - 1, rk, R);
	for (int i = 0; i < 2; i++) {
		if (k[i] < 1 || dl[i] < 1 || sd[i] < 1 || pd[i] < 0)
			return ARGERR(a0, "kernel_size, dilation and stride must be positive, padding not negative");
		if (k[i] > (1 << 20) || dl[i] > (1 << 20) || sd[i] > (1 << 20) || pd[i] > (1 << 20))
			return unsupported(err, ARGERR(a0, "kernel_size, dilation, padding and stride above 2^20"));
	}
	int64_t hw[2], nb[2], ch, L;
	if (fold) {
		if (!n->args[1].ints)
			return unsupported(err, ARGERR(1, "must be static"));
		hw[0] = n->args[1].ints[0], hw[1] = n->args[1].ints[1];
		if (!dim_is_const(&x->shape[R - 2], &ch) || !dim_is_const(&x->shape[R - 1], &L))
			return unsupported(err, ARGERR(0, "shape %s: its last two dims must be static", shp(g, x, b1, sizeof b1)));
	} else if (!dim_is_const(&x->shape[R - 3], &ch) || !dim_is_const(&x->shape[R - 2], &hw[0]) ||
		   !dim_is_const(&x->shape[R - 1], &hw[1])) {
		return unsupported(err, ARGERR(0, "shape %s: its last three dims must be static", shp(g, x, b1, sizeof b1)));
	}
	if (hw[0] < 0 || hw[1] < 0 || hw[0] > (1LL << 31) || hw[1] > (1LL << 31))
		return ARGERR(fold ? 1 : 0, "image size %lld x %lld out of range", (long long)hw[0], (long long)hw[1]);
	for (int i = 0; i < 2; i++) {
		nb[i] = (hw[i] + 2 * pd[i] - dl[i] * (k[i] - 1) - 1) / sd[i] + 1;
		if (hw[i] + 2 * pd[i] - dl[i] * (k[i] - 1) - 1 < 0 || nb[i] < 1)
			return ARGERR(0, "no %s block fits (size %lld, kernel %lld, dilation %lld, padding %lld)",
				      i ? "horizontal" : "vertical", (long long)hw[i], (long long)k[i], (long long)dl[i],
				      (long long)pd[i]);
	}
	coil_dim out[4];
	int r = 0;
	if (R == rk)
		out[r++] = x->shape[0];
	if (fold) {
		if (ch % (k[0] * k[1]) || L != nb[0] * nb[1])
			return ARGERR(0, "shape %s: expected [N, C*%lld, %lld] for output_size [%lld, %lld]",
				      shp(g, x, b1, sizeof b1), (long long)(k[0] * k[1]), (long long)(nb[0] * nb[1]),
				      (long long)hw[0], (long long)hw[1]);
		out[r++] = dim_const(ch / (k[0] * k[1])), out[r++] = dim_const(hw[0]), out[r++] = dim_const(hw[1]);
	} else {
		out[r++] = dim_const(ch * k[0] * k[1]), out[r++] = dim_const(nb[0] * nb[1]);
	}
	if (x->dtype == COIL_BOOL)
		return ARGERR(0, "dtype bool is not supported");
	set_out(g, n, 0, x->dtype, r, out);
	return 0;
}

/* reflection / replication padding of the last 1, 2 or 3 dims (pads in
 * constant_pad_nd's order: last dim first); reflection needs each pad below
 * its dim's size, replication a size of 1 at least (guarded when symbolic). */
static int infer_pad_mode(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *p = &n->args[1];
	const int refl = n->op == OP_REFLECTION_PAD1D || n->op == OP_REFLECTION_PAD2D || n->op == OP_REFLECTION_PAD3D;
	const int k = p->n / 2;
	char b1[200];
	if (!p->ints)
		return unsupported(err, ARGERR(1, "must be static"));
	if (x->rank < k + 1)
		return ARGERR(0, "shape %s: expected rank %d or more", shp(g, x, b1, sizeof b1), k + 1);
	if (x->dtype == COIL_BOOL)
		return ARGERR(0, "dtype bool is not supported");
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	for (int j = 0; j < k; j++) {
		const int d = x->rank - 1 - j;
		const int64_t lo = p->ints[2 * j], hi = p->ints[2 * j + 1], need = refl ? (lo > hi ? lo : hi) + 1 : 1;
		int64_t v;
		if (refl && (lo < 0 || hi < 0))
			return ARGERR(1, "negative padding (%lld, %lld)", (long long)lo, (long long)hi);
		if (dim_is_const(&x->shape[d], &v)) {
			if (v < need && refl)
				return ARGERR(1, "padding (%lld, %lld) of dim %d must be below its size %lld", (long long)lo,
					      (long long)hi, d, (long long)v);
			if (v < need)
				return ARGERR(0, "dim %d is empty: replication needs a value to repeat", d);
		} else if (graph_guard(g, n, GUARD_GE, &x->shape[d], need,
				       refl ? "size above the reflection's padding" : "size at least 1", err)) {
			return -1;
		}
		coil_dim add = dim_const(lo + hi);
		if (dim_add(&out[d], &out[d], &add, err))
			return ARGERR(1, "%s", err->msg);
		if (dim_min(&out[d]) < 0)
			return ARGERR(1, "padding makes dim %d negative", d);
	}
	set_out(g, n, 0, x->dtype, x->rank, out);
	return 0;
}

/* coil.fft_r2c / fft_c2r / fft_c2c over f32, complex values as a last dim
 * of 2: the transformed dims count over the complex shape (the input's
 * shape for r2c, less its last dim otherwise). */
static int infer_fft(coil_graph *g, coil_node *n, coil_err *err)
{
	coil_value *x = node_in(g, n, 0);
	const coil_arg *dm = &n->args[1];
	const int r2c = n->op == OP_FFT_R2C, c2r = n->op == OP_FFT_C2R;
	const int R = r2c ? x->rank : x->rank - 1; /* the complex shape's rank */
	char b1[200];
	if (x->dtype != COIL_F32)
		return unsupported(err, ARGERR(0, "dtype %s: transforms run in f32", dtype_name(x->dtype)));
	if (!r2c && (x->rank < 1 || !dim_eq_const(&x->shape[x->rank - 1], 2)))
		return ARGERR(0, "shape %s: complex values need a last dim of 2 (view_as_real)", shp(g, x, b1, sizeof b1));
	if (dm->n < 1 || R < 1)
		return ARGERR(1, "no dim to transform");
	if (n->args[2].i < 0 || n->args[2].i > 2)
		return ARGERR(2, "must be 0, 1 or 2, got %lld", (long long)n->args[2].i);
	int seen[COIL_MAX_RANK] = {0}, last = 0;
	for (int i = 0; i < dm->n; i++) {
		int d;
		if (wrap_dim(g, n, err, 1, dm->ints[i], R, &d))
			return -1;
		if (seen[d]++)
			return ARGERR(1, "dim %d appears twice", d);
		last = d;
	}
	coil_dim out[COIL_MAX_RANK];
	memcpy(out, x->shape, sizeof(coil_dim) * (size_t)x->rank);
	int rank = x->rank;
	if (r2c) {
		if (x->rank + 1 > COIL_MAX_RANK)
			return unsupported(err, ARGERR(0, "rank %d (the result adds a dim)", x->rank));
		if (n->args[3].i) {
			coil_dim one = dim_const(1);
			if (dim_floordiv(&out[last], &x->shape[last], 2, &g->syms, err) || dim_add(&out[last], &out[last], &one, err))
				return node_errf(err, n, "%s", err->msg);
		}
		out[rank++] = dim_const(2);
	} else if (c2r) {
		const coil_arg *ls = &n->args[3];
		coil_dim nl = ls->kind == ARG_INT ? dim_const(ls->i) : ls->dims[0];
		int64_t nv, have;
		if (dim_is_const(&nl, &nv) && nv < 1)
			return ARGERR(3, "must be positive, got %lld", (long long)nv);
		if (dim_is_const(&nl, &nv) && dim_is_const(&x->shape[last], &have) && have < nv / 2 + 1)
			return ARGERR(0, "shape %s: dim %d has %lld points, a real signal of %lld needs %lld", shp(g, x, b1, sizeof b1),
				      last, (long long)have, (long long)nv, (long long)(nv / 2 + 1));
		out[last] = nl;
		rank--;
	}
	set_out(g, n, 0, COIL_F32, rank, out);
	return 0;
}

static const infer_fn rules[COIL_NOPS] = {
#define X(e, name, schema, nres, kind, rule, kern) [OP_##e] = infer_##rule,
	COIL_OPS(X)
#undef X
};

int infer_node(coil_graph *g, coil_node *n, coil_err *err)
{
	/* Views of constant-free values keep the dtype of their input; every rule
	 * sees inputs whose shapes are known because nodes are in topological order. */
	return rules[n->op](g, n, err);
}
