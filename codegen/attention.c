/* attention: graph rewrites ahead of lowering (after fold, before dnnl).
 *
 *   baddbmm(self, b1, b2, beta, alpha)  ->  bmm(b1, b2) [* alpha] [+ beta * self]
 *       (ATen reads self only when beta != 0), so that the mask an
 *       nn.MultiheadAttention adds this way is a plain add for the rule below
 *       and for fusion when the rule does not apply;
 *
 *   softmax(q @ k^T, scaled, masked) @ v, as traced  ->  aten.scaled_dot_product_attention
 *       matched from the final bmm back: the probabilities' chain (views and
 *       casts that keep the last two dims, dropout in inference), softmax over
 *       the last dim, then the scores' chain: scalar multiplies and divides
 *       (on the scores, or on q before the product), one mask (an add of a
 *       float tensor; or a bool one: masked_fill(m, f) or where(m, x, f),
 *       f -inf or a finite constant such as finfo.min, SDPA's masked_value;
 *       broadcast over heads or not), views and casts, down to bmm(q, k^T) where k^T is a transpose
 *       or permute of the last two dims.  Every value between the two
 *       products must be read by the chain alone (the scores are not kept);
 *       q, k and v are taken as far back through batch views as they stay
 *       compatible with the scores' batch dims (so an expand of shared k/v
 *       heads is read broadcast, not copied).  The attention is rebuilt in
 *       the frame where the mask applies (its rank and batch dims), with
 *       reshapes or a permute where q, k, v or the result need one.
 *
 * What does not match compiles as before, unfused.  COIL_ATTENTION=0 in the
 * compiler's environment turns the second rule off (measurement switch, not
 * in the cache key: use a private COIL_CACHE_DIR). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

typedef struct actx {
	coil_graph *g;  /* being rebuilt */
	coil_arena *a;
	coil_node *src; /* the nodes being read */
	int nsrc;
	int *prod;      /* per value: producing node in src, -1 */
	int *uses;      /* per value: reads by nodes and outputs */
	coil_err *err;
} actx;

/* --- building ----------------------------------------------------------------- */

/* A new node appended to g with one result: value `out`, or a new one. */
static coil_node *add_node(actx *c, coil_op op, const char *id, int out)
{
	return graph_append(c->g, c->a, op, id, out);
}

static int set_tensor(actx *c, coil_node *n, int i, int v)
{
	n->args[i].kind = ARG_TENSOR;
	n->args[i].n = 1;
	n->args[i].v = arena_alloc(c->a, sizeof(int));
	if (!n->args[i].v)
		return -1;
	n->args[i].v[0] = v;
	return 0;
}

static void set_scalar(coil_node *n, int i, double f)
{
	n->args[i].kind = ARG_SCALAR;
	n->args[i].f = f;
}

/* Infers the new node's result; its value. */
static int done(actx *c, coil_node *n)
{
	return infer_node(c->g, n, c->err) ? -1 : n->outs[0];
}

/* reshape(v, shape[0..rank)) as a new value (v itself when it has that shape). */
static int reshape(actx *c, int v, int rank, const coil_dim *shape, const char *id, int out)
{
	coil_value *x = &c->g->vals[v];
	int same = x->rank == rank && out < 0;
	for (int i = 0; same && i < rank; i++)
		same = dim_eq(&x->shape[i], &shape[i]);
	if (same)
		return v;
	coil_node *n = add_node(c, OP_RESHAPE, id, out);
	if (!n || set_tensor(c, n, 0, v))
		return -1;
	coil_arg *a = &n->args[1];
	a->kind = ARG_DIMS;
	a->n = rank;
	a->dims = arena_alloc(c->a, (size_t)(rank + 1) * sizeof *a->dims);
	a->ints = arena_alloc(c->a, (size_t)(rank + 1) * sizeof *a->ints);
	if (!a->dims || !a->ints)
		return -1;
	for (int i = 0; i < rank; i++) { /* ints only where every dim is a number */
		int64_t k;
		a->dims[i] = shape[i];
		if (a->ints && dim_is_const(&shape[i], &k))
			a->ints[i] = k;
		else
			a->ints = NULL;
	}
	return done(c, n);
}

/* --- baddbmm ------------------------------------------------------------------- */

static int lower_baddbmm(actx *c, const coil_node *n)
{
	double beta = n->args[3].f, alpha = n->args[4].f;
	int out = n->outs[0];
	coil_node *m = add_node(c, OP_BMM, n->id, beta == 0 && alpha == 1 ? out : -1);
	if (!m || set_tensor(c, m, 0, n->args[1].v[0]) || set_tensor(c, m, 1, n->args[2].v[0]))
		return -1;
	int p = done(c, m);
	if (p >= 0 && alpha != 1) {
		if (!(m = add_node(c, OP_MUL_S, n->id, beta == 0 ? out : -1)) || set_tensor(c, m, 0, p))
			return -1;
		set_scalar(m, 1, alpha);
		p = done(c, m);
	}
	if (p >= 0 && beta != 0) { /* p + beta * self */
		if (!(m = add_node(c, OP_ADD, n->id, out)) || set_tensor(c, m, 0, p) ||
		    set_tensor(c, m, 1, n->args[0].v[0]))
			return -1;
		set_scalar(m, 2, beta);
		p = done(c, m);
	}
	return p < 0 ? -1 : 0;
}

/* --- matching ------------------------------------------------------------------ */

static int last2_eq(const coil_value *a, const coil_value *b)
{
	return a->rank >= 2 && b->rank >= 2 && dim_eq(&a->shape[a->rank - 2], &b->shape[b->rank - 2]) &&
	       dim_eq(&a->shape[a->rank - 1], &b->shape[b->rank - 1]);
}

static int same_shape(const coil_value *a, const coil_value *b)
{
	int ok = a->rank == b->rank;
	for (int i = 0; ok && i < a->rank; i++)
		ok = dim_eq(&a->shape[i], &b->shape[i]);
	return ok;
}

/* The input of a node that only moves batch dims around (a view, reshape,
 * expand, copy, inference dropout; with cast, a float-to-float _to_copy too)
 * and keeps the last two dims; -1 otherwise. */
static int batch_view_src(actx *c, int v, int cast)
{
	if (v < 0 || c->prod[v] < 0)
		return -1;
	const coil_node *n = &c->src[c->prod[v]];
	coil_value *o = &c->g->vals[v], *x;
	switch (n->op) {
	case OP_VIEW: case OP_UNSAFE_VIEW: case OP_RESHAPE: case OP_EXPAND: case OP_CLONE: case OP_CONTIGUOUS:
	case OP_ALIAS: case OP_DETACH: case OP_LIFT_FRESH_COPY:
		break;
	case OP_DROPOUT:
		if (n->args[1].f != 0 && n->args[2].i)
			return -1;
		break;
	case OP_TO_COPY:
		x = node_in(c->g, n, 0);
		if (!cast || !dtype_is_float(x->dtype) || !dtype_is_float(o->dtype))
			return -1;
		for (int i = 2; i < op_get(n->op)->nargs; i++)
			if (n->args[i].kind != ARG_NONE && i != 6 && !(i == 5 && !n->args[i].i))
				return -1;
		break;
	default:
		return -1;
	}
	x = node_in(c->g, n, 0);
	return last2_eq(x, o) ? n->args[0].v[0] : -1;
}

/* A positive finite scalar factor: v = x * f or x / f; x, or -1. */
static int scale_src(actx *c, int v, double *f)
{
	if (v < 0 || c->prod[v] < 0)
		return -1;
	const coil_node *n = &c->src[c->prod[v]];
	if ((n->op != OP_MUL && n->op != OP_MUL_S && n->op != OP_DIV && n->op != OP_DIV_S) ||
	    n->args[1].kind != ARG_SCALAR)
		return -1;
	double s = n->args[1].f;
	if (!(s > 0) || !isfinite(s))
		return -1;
	*f = n->op == OP_DIV || n->op == OP_DIV_S ? 1 / s : s;
	coil_value *x = node_in(c->g, n, 0);
	return same_shape(x, &c->g->vals[v]) ? n->args[0].v[0] : -1;
}

typedef struct frame {
	int rank;
	coil_dim shape[COIL_MAX_RANK]; /* the scores [..., L, S] where the mask applies */
	coil_dim nb;                   /* product of the batch dims */
} frame;

static int nb_eq(const frame *f, const coil_value *x)
{
	coil_dim nb = dim_const(1);
	for (int i = 0; i < x->rank - 2; i++)
		if (dim_mul(&nb, &nb, &x->shape[i], NULL))
			return 0;
	return dim_eq(&nb, &f->nb);
}

/* x has the frame's rank and batch dims that broadcast to its (exact: equal). */
static int bcast(const frame *f, const coil_value *x, int exact)
{
	int ok = x->rank == f->rank;
	for (int i = 0; ok && i < f->rank - 2; i++)
		ok = dim_eq(&x->shape[i], &f->shape[i]) || (!exact && dim_eq_const(&x->shape[i], 1));
	return ok;
}

/* x's batch dims split f's (each of f's is the product of a run of x's, in
 * order): the frame with x's batch dims and f's last two into *rf. */
static int refines(const frame *f, const coil_value *x, frame *rf)
{
	int nr = x->rank - 2, j = 0;
	if (nr <= f->rank - 2 || x->rank > COIL_MAX_RANK)
		return 0;
	for (int i = 0; i < f->rank - 2; i++) {
		coil_dim p = dim_const(1);
		while (!dim_eq(&p, &f->shape[i]) && j < nr)
			if (dim_mul(&p, &p, &x->shape[j++], NULL))
				return 0;
		if (!dim_eq(&p, &f->shape[i]))
			return 0;
	}
	for (; j < nr; j++) /* the rest: ones */
		if (!dim_eq_const(&x->shape[j], 1))
			return 0;
	rf->rank = x->rank;
	memcpy(rf->shape, x->shape, sizeof(coil_dim) * (size_t)nr);
	rf->shape[nr] = f->shape[f->rank - 2];
	rf->shape[nr + 1] = f->shape[f->rank - 1];
	rf->nb = f->nb;
	return 1;
}

/* Back from v through batch views (with scale, through positive scalar
 * factors too, multiplied in): the deepest value the frame can read, one
 * with as many batch elements in the same order (reshapes keep the order),
 * or, past an expand to the frame's batch dims, the expand's input (*bc 1).
 * With refine: past an expand to batch dims that split the frame's (k/v
 * heads shared by groups of query heads, [B, Hk, G, S, E] from [B, Hk, 1, S,
 * E]), the expand's input too (*bc 2), read in the frame *refine (those
 * batch dims).  -1 if v itself does not fit. */
static int walk(actx *c, const frame *f, int v, double *scale, int *bc, frame *refine)
{
	int best = -1;
	double pending = 1, s;
	*bc = 0;
	for (int x = v; x >= 0;) {
		coil_value *xv = &c->g->vals[x];
		if (!nb_eq(f, xv))
			break;
		best = x;
		if (scale) { /* the factors down to best */
			*scale *= pending;
			pending = 1;
		}
		int y = scale ? scale_src(c, x, &s) : -1;
		if (y >= 0) {
			pending = s;
			x = y;
			continue;
		}
		y = batch_view_src(c, x, 0);
		if (y >= 0 && c->src[c->prod[x]].op == OP_EXPAND && !nb_eq(f, &c->g->vals[y])) {
			frame rf;
			if (bcast(f, xv, 1) && bcast(f, &c->g->vals[y], 0)) {
				best = y;
				*bc = 1;
			} else if (refine && refines(f, xv, &rf) && bcast(&rf, &c->g->vals[y], 0)) {
				best = y;
				*bc = 2;
				*refine = rf;
			}
			break;
		}
		x = y;
	}
	return best;
}

/* The operand in the frame: as it is when its batch dims broadcast to the
 * frame's, else reshaped to them (d0, d1 the last two). */
static int in_frame(actx *c, const frame *f, int x, const coil_dim *d0, const coil_dim *d1, const char *id)
{
	if (bcast(f, &c->g->vals[x], 0))
		return x;
	coil_dim s[COIL_MAX_RANK];
	memcpy(s, f->shape, sizeof s);
	s[f->rank - 2] = *d0;
	s[f->rank - 1] = *d1;
	return reshape(c, x, f->rank, s, id, -1);
}

typedef struct match {
	int q, k, kperm;   /* k: the value under k^T's transpose; kperm: its permute node, -1 for a swap */
	int v, mask;
	frame f0;          /* the frame the mask applies in, when f refines it (grouped k/v heads) */
	int refined;
	int bool_mask;     /* SDPA's bool mask: keeps where true (negated: where false) ... */
	int negate;
	double fill;       /* ... else this score (-inf, or a finite torch.where/masked_fill value) */
	double scale;
	frame f;
} match;

/* A scalar constant (a fill op's result with no dim above 1) of float dtype t: its value. */
static int scalar_const(actx *c, int v, coil_dtype t, double *f)
{
	if (v < 0 || c->prod[v] < 0 || c->g->vals[v].dtype != t)
		return 0;
	coil_value *x = &c->g->vals[v];
	for (int i = 0; i < x->rank; i++)
		if (!dim_eq_const(&x->shape[i], 1))
			return 0;
	if (!fill_value(&c->src[c->prod[v]], f))
		return 0;
	*f = (double)(float)*f; /* as the kernel holds it */
	return 1;
}

/* A mask node on the scores x: add(x, m) / add(m, x) with m a float tensor
 * (additive), masked_fill(x, m, f) (bool, true masks out) with f a scalar or
 * scalar constant, where(m, x, f) / where(m, f, x) (bool).  Per way of
 * reading it (side), the chain operand and the mask into m; 0 when side is
 * not one. */
static int mask_node(actx *c, const coil_node *n, int side, const coil_value *xv, match *m, int *chain)
{
	coil_value *cv, *mv;
	switch (n->op) {
	case OP_ADD:
		if (n->args[2].f != 1 || n->args[1].kind != ARG_TENSOR || side > 1)
			return 0;
		*chain = n->args[side].v[0];
		m->mask = n->args[1 - side].v[0];
		m->bool_mask = m->negate = 0;
		mv = &c->g->vals[m->mask];
		if (mv->dtype != xv->dtype)
			return 0;
		break;
	case OP_MASKED_FILL: case OP_MASKED_FILL_T:
		if (side > 0)
			return 0;
		*chain = n->args[0].v[0];
		m->mask = n->args[1].v[0];
		m->bool_mask = m->negate = 1;
		if (n->op == OP_MASKED_FILL)
			m->fill = (double)(float)n->args[2].f;
		else if (!scalar_const(c, n->args[2].v[0], xv->dtype, &m->fill))
			return 0;
		break;
	case OP_WHERE:
		if (side > 1)
			return 0;
		*chain = n->args[1 + side].v[0];
		m->mask = n->args[0].v[0];
		m->bool_mask = 1;
		m->negate = side; /* where(m, fill, x) keeps where m is false */
		if (!scalar_const(c, n->args[2 - side].v[0], xv->dtype, &m->fill))
			return 0;
		break;
	default:
		return 0;
	}
	cv = &c->g->vals[*chain];
	mv = &c->g->vals[m->mask];
	if (!same_shape(cv, xv) || cv->dtype != xv->dtype || mv->rank > xv->rank)
		return 0;
	if (m->bool_mask && (mv->dtype != COIL_BOOL || m->fill != m->fill || m->fill == INFINITY))
		return 0; /* NaN or +inf fills: left as they are */
	return 1;
}

static int single(actx *c, int v) { return v >= 0 && c->uses[v] == 1; }

/* The scores' chain back from x (read once each) to bmm(q, k^T). */
static int scores(actx *c, match *m, int x, int scaled, int reshaped)
{
	for (;;) {
		if (!single(c, x) || c->prod[x] < 0)
			return 0;
		const coil_node *n = &c->src[c->prod[x]];
		double s;
		int y;
		if ((y = scale_src(c, x, &s)) >= 0) {
			m->scale *= s;
			scaled = 1;
			x = y;
			continue;
		}
		if ((y = batch_view_src(c, x, 1)) >= 0) {
			if (!same_shape(&c->g->vals[y], &c->g->vals[x]))
				reshaped = 1;
			if (n->op == OP_EXPAND && !same_shape(&c->g->vals[y], &c->g->vals[x]))
				return 0;
			x = y;
			continue;
		}
		if (n->op == OP_ADD || n->op == OP_MASKED_FILL || n->op == OP_MASKED_FILL_T || n->op == OP_WHERE) {
			/* one mask, applied where no reshape has happened since, and
			 * an additive one not scaled after */
			if (m->mask >= 0 || reshaped || (n->op == OP_ADD && scaled))
				return 0;
			coil_value *xv = &c->g->vals[x];
			m->f.rank = xv->rank;
			memcpy(m->f.shape, xv->shape, sizeof xv->shape);
			for (int side = 0; side < 2; side++) {
				match save = *m;
				int chain;
				if (mask_node(c, n, side, xv, m, &chain) && scores(c, m, chain, scaled, 0))
					return 1;
				*m = save;
			}
			return 0;
		}
		if (n->op != OP_BMM)
			return 0;
		/* bmm(q, k^T): the frame is where the mask applies, else here */
		coil_value *xv = &c->g->vals[x];
		if (m->mask < 0) {
			m->f.rank = xv->rank;
			memcpy(m->f.shape, xv->shape, sizeof xv->shape);
		}
		m->f.nb = dim_const(1);
		for (int i = 0; i < m->f.rank - 2; i++)
			if (dim_mul(&m->f.nb, &m->f.nb, &m->f.shape[i], NULL))
				return 0;
		/* q, through its scales */
		int bc, qbc;
		if ((m->q = walk(c, &m->f, n->args[0].v[0], &m->scale, &qbc, NULL)) < 0)
			return 0;
		/* q with batch dims that split the frame's ([B, H] for the bmm's
		 * [B*H]): the frame takes them, so q, k and v are read as they
		 * are, not reshaped (copied) to the product */
		frame rq;
		if (!qbc && refines(&m->f, &c->g->vals[m->q], &rq)) {
			m->f0 = m->f;
			m->f = rq;
			m->refined = 1;
		}
		/* k^T: batch views down to a transpose of the last two dims */
		int kt = walk(c, &m->f, n->args[1].v[0], NULL, &bc, NULL);
		if (kt < 0 || c->prod[kt] < 0)
			return 0;
		const coil_node *tn = &c->src[c->prod[kt]];
		coil_value *tv = &c->g->vals[kt];
		int tr = tv->rank, perm[COIL_MAX_RANK];
		if ((tn->op != OP_TRANSPOSE && tn->op != OP_PERMUTE && tn->op != OP_T) || view_perm(c->g, tn, perm) ||
		    perm[tr - 1] == tr - 1)
			return 0;
		int swap_only = perm[tr - 2] == tr - 1 && perm[tr - 1] == tr - 2;
		for (int i = 0; swap_only && i < tr - 2; i++)
			swap_only = perm[i] == i;
		int kin = tn->args[0].v[0], bc2;
		m->kperm = swap_only ? -1 : c->prod[kt];
		m->k = kin;
		/* past an expand the transpose's input is read broadcast as it is;
		 * grouped heads (an expand that splits the frame's batch dims)
		 * move the attention into the finer frame, q (not broadcast) and
		 * the mask reshaped to it */
		if (swap_only && !bc) {
			frame rf;
			m->k = walk(c, &m->f, kin, NULL, &bc2, qbc ? NULL : &rf);
			if (m->k >= 0 && bc2 == 2) {
				if (!m->refined)
					m->f0 = m->f;
				m->f = rf;
				m->refined = 1;
			}
		}
		return m->k >= 0;
	}
}

/* bmm node i: P @ V with P = softmax(scores); fills m. */
static int match_attention(actx *c, const coil_node *n, match *m)
{
	memset(m, 0, sizeof *m);
	m->mask = -1;
	m->scale = 1;
	int p = n->args[0].v[0];
	for (int y; single(c, p) && (y = batch_view_src(c, p, 1)) >= 0;) {
		if (c->src[c->prod[p]].op == OP_EXPAND && !same_shape(&c->g->vals[y], &c->g->vals[p]))
			return 0;
		p = y;
	}
	if (!single(c, p) || c->prod[p] < 0)
		return 0;
	const coil_node *sm = &c->src[c->prod[p]];
	if (sm->op != OP_SOFTMAX_ && sm->op != OP_SOFTMAX)
		return 0;
	coil_value *x = node_in(c->g, sm, 0);
	int d = (int)sm->args[1].i;
	if ((d != -1 && d != x->rank - 1) || x->rank < 2 || !dtype_is_float(x->dtype))
		return 0;
	if (sm->op == OP_SOFTMAX_ && sm->args[2].i)
		return 0;
	if (!scores(c, m, sm->args[0].v[0], 0, 0))
		return 0;
	int bc;
	if ((m->v = walk(c, &m->f, n->args[1].v[0], NULL, &bc, NULL)) < 0)
		return 0;
	coil_value *q = &c->g->vals[m->q], *k = &c->g->vals[m->k], *v = &c->g->vals[m->v];
	return q->dtype == node_out(c->g, n, 0)->dtype && q->dtype == k->dtype && q->dtype == v->dtype && dtype_is_float(q->dtype) &&
	       (m->mask < 0 || m->bool_mask || c->g->vals[m->mask].dtype == q->dtype);
}

/* The mask (broadcasting to the frame f0) reshaped to broadcast the same way
 * to the finer frame f: each of f0's batch dims becomes its run of f's, or
 * ones where the mask broadcasts. */
static int mask_in_frame(actx *c, const match *m, int mask, const char *id)
{
	const frame *f0 = &m->f0, *f = &m->f;
	coil_value *mv = &c->g->vals[mask];
	int r0 = f0->rank, pad = r0 - mv->rank, nr = f->rank - 2, j = 0, o = 0;
	coil_dim s[COIL_MAX_RANK];
	for (int i = 0; i < r0 - 2; i++) {
		int j0 = j;
		coil_dim p = dim_const(1);
		while (!dim_eq(&p, &f0->shape[i]) && j < nr)
			if (dim_mul(&p, &p, &f->shape[j++], NULL))
				return -1;
		if (i == r0 - 3)
			j = nr; /* trailing ones */
		const coil_dim *md = i >= pad ? &mv->shape[i - pad] : NULL;
		int ones = !md || (dim_eq_const(md, 1) && !dim_eq_const(&f0->shape[i], 1));
		for (int k = j0; k < j; k++)
			s[o++] = ones ? dim_const(1) : f->shape[k];
	}
	for (int i = r0 - 2; i < r0; i++)
		s[o++] = i >= pad ? mv->shape[i - pad] : dim_const(1);
	return reshape(c, mask, o, s, id, -1);
}

/* SDPA in the frame, its result into bmm n's output value. */
static int rewrite(actx *c, const coil_node *n, match *m)
{
	const frame *f = &m->f;
	int r = f->rank;
	coil_value *qv = &c->g->vals[m->q];
	coil_dim L = f->shape[r - 2], S = f->shape[r - 1], E = qv->shape[qv->rank - 1];
	const char *id = arena_printf(c->a, "%s.attention", n->id ? n->id : "bmm");
	int q = in_frame(c, f, m->q, &L, &E, id), k = m->k, v;
	if (m->kperm >= 0) { /* permute(x, p) then a swap of the last two: one permute */
		const coil_node *tn = &c->src[m->kperm];
		int perm[COIL_MAX_RANK], tr = c->g->vals[tn->outs[0]].rank;
		view_perm(c->g, tn, perm);
		int t = perm[tr - 1];
		perm[tr - 1] = perm[tr - 2];
		perm[tr - 2] = t;
		coil_node *pn = add_node(c, OP_PERMUTE, id, -1);
		if (!pn || set_tensor(c, pn, 0, k))
			return -1;
		pn->args[1].kind = ARG_INTS;
		pn->args[1].n = tr;
		pn->args[1].ints = arena_alloc(c->a, (size_t)tr * sizeof(int64_t));
		if (!pn->args[1].ints)
			return -1;
		for (int i = 0; i < tr; i++)
			pn->args[1].ints[i] = perm[i];
		if ((k = done(c, pn)) < 0)
			return -1;
	}
	k = k >= 0 ? in_frame(c, f, k, &S, &E, id) : -1;
	coil_value *vv = &c->g->vals[m->v];
	coil_dim Ev = vv->shape[vv->rank - 1];
	v = in_frame(c, f, m->v, &S, &Ev, id);
	int mask = m->mask;
	if (q < 0 || k < 0 || v < 0)
		return -1;
	if (mask >= 0 && m->refined && (mask = mask_in_frame(c, m, mask, id)) < 0)
		return -1;
	if (mask >= 0 && m->negate) { /* masked_fill's true masks out; SDPA's keeps */
		coil_node *nn = add_node(c, OP_LOGICAL_NOT, id, -1);
		if (!nn || set_tensor(c, nn, 0, mask) || (mask = done(c, nn)) < 0)
			return -1;
	}
	coil_value *out = &c->g->vals[n->outs[0]];
	int direct = out->rank == r;
	for (int i = 0; direct && i < r - 2; i++)
		direct = dim_eq(&out->shape[i], &f->shape[i]);
	coil_node *a = add_node(c, OP_SDPA, id, direct ? n->outs[0] : -1);
	if (!a || set_tensor(c, a, 0, q) || set_tensor(c, a, 1, k) || set_tensor(c, a, 2, v) ||
	    (mask >= 0 && set_tensor(c, a, 3, mask)))
		return -1;
	a->args[4].kind = ARG_SCALAR; /* dropout_p 0 */
	a->args[5].kind = ARG_BOOL;
	set_scalar(a, 6, m->scale);
	if (mask >= 0 && m->bool_mask && m->fill != -INFINITY)
		set_scalar(a, 7, m->fill);
	int o = done(c, a);
	if (o < 0)
		return -1;
	if (!direct) {
		coil_value *ov = &c->g->vals[n->outs[0]];
		coil_dim s[COIL_MAX_RANK];
		memcpy(s, ov->shape, sizeof s);
		if (reshape(c, o, ov->rank, s, id, n->outs[0]) < 0)
			return -1;
	}
	return 0;
}

/* --- driver -------------------------------------------------------------------- */

/* Reads of each value and its producer, over g's nodes. */
static void index_graph(actx *c)
{
	coil_graph *g = c->g;
	for (int v = 0; v < g->nvals; v++)
		c->prod[v] = -1, c->uses[v] = 0;
	for (int i = 0; i < c->nsrc; i++) {
		const coil_node *n = &c->src[i];
		for (int k = 0; k < n->nout; k++)
			if (n->outs[k] >= 0)
				c->prod[n->outs[k]] = i;
		const op_info *oi = op_get(n->op);
		for (int a = 0; a < oi->nargs; a++)
			if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
				for (int j = 0; j < n->args[a].n; j++)
					if (n->args[a].v[j] >= 0)
						c->uses[n->args[a].v[j]]++;
	}
	for (int o = 0; o < g->noutputs; o++)
		c->uses[g->outputs[o]]++;
}

/* Drops nodes none of whose results is read (rewrite.c). */
static void dead_code(actx *c)
{
	graph_drop_dead(c->g, c->uses, c->a);
}

static int attention_off(void)
{
	const char *e = getenv("COIL_ATTENTION");
	return e && !strcmp(e, "0");
}

/* A fresh node list (and value room) for g's copy, the old nodes kept in src. */
static int restart(actx *c, int extra)
{
	coil_graph *g = c->g;
	c->src = g->nodes;
	c->nsrc = g->nnodes;
	coil_value *vals = arena_alloc(c->a, (size_t)(g->nvals + extra + 1) * sizeof *vals);
	coil_node *nodes = arena_alloc(c->a, (size_t)(g->nnodes + extra + 1) * sizeof *nodes);
	c->prod = arena_alloc(c->a, (size_t)(g->nvals + extra + 1) * sizeof(int));
	c->uses = arena_alloc(c->a, (size_t)(g->nvals + extra + 1) * sizeof(int));
	if (!vals || !nodes || !c->prod || !c->uses)
		return -1;
	memcpy(vals, g->vals, (size_t)g->nvals * sizeof *vals);
	g->vals = vals;
	g->capvals = g->nvals + extra;
	g->nodes = nodes;
	g->nnodes = 0;
	return 0;
}

int ir_attention(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp;
	int nb = 0, nbmm = 0;
	for (int i = 0; i < g0->nnodes; i++) {
		nb += g0->nodes[i].op == OP_BADDBMM;
		nbmm += g0->nodes[i].op == OP_BMM;
	}
	int fuse = !attention_off() && nbmm + nb > 0;
	if (!nb && !fuse)
		return 0;
	coil_graph *g = arena_alloc(a, sizeof *g);
	if (!g)
		return coil_err_oom(err);
	*g = *g0;
	actx c = {.g = g, .a = a, .err = err};
	if (restart(&c, 3 * nb))
		return coil_err_oom(err);
	for (int i = 0; i < c.nsrc; i++) {
		const coil_node *n = &c.src[i];
		if (n->op != OP_BADDBMM)
			g->nodes[g->nnodes++] = *n, g->vals[n->outs[0]].index = g->nnodes - 1;
		else if (lower_baddbmm(&c, n))
			return err->msg[0] ? -1 : coil_err_oom(err);
		for (int k = 1; k < n->nout; k++)
			if (n->outs[k] >= 0)
				g->vals[n->outs[k]].index = g->nnodes - 1;
	}
	c.nsrc = g->nnodes;
	c.src = g->nodes;
	dead_code(&c);
	if (fuse) {
		int n0 = g->nnodes;
		if (restart(&c, 8 * (n0 + 1)))
			return coil_err_oom(err);
		index_graph(&c);
		for (int i = 0; i < c.nsrc; i++) {
			const coil_node *n = &c.src[i];
			match m;
			int at = g->nnodes, nv = g->nvals;
			if (n->op == OP_BMM && match_attention(&c, n, &m)) {
				coil_err e2 = {0};
				c.err = &e2;
				int rc = rewrite(&c, n, &m);
				c.err = err;
				if (!rc)
					continue;
				g->nnodes = at; /* undo: keep the bmm */
				g->nvals = nv;
			}
			g->nodes[g->nnodes++] = *n;
			for (int k = 0; k < n->nout; k++)
				if (n->outs[k] >= 0)
					g->vals[n->outs[k]].index = g->nnodes - 1;
		}
		c.nsrc = g->nnodes;
		c.src = g->nodes;
		dead_code(&c);
	}
	*gp = g;
	return 0;
}
