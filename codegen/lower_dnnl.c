/* lower_dnnl: plans which convolutions and matrix products run on oneDNN and
 * which nodes after each fuse into it (see dnnl.h), and builds the fused
 * extern node for decompose.
 *
 * A chain grows from the head's result while the current value has exactly
 * one reader (a graph output counts as one) and that reader is
 *   - a view that only reshapes (view, reshape, flatten, squeeze, unsqueeze,
 *     alias, clone, contiguous): same dense bytes;
 *   - an inference batch norm right after a convolution: folded;
 *   - add/sub/mul/div by a constant per-channel tensor or a scalar, before
 *     any activation: folded into weights and bias (convolutions); after one,
 *     or on a matrix product, a linear or binary post-op;
 *   - add of a tensor shaped like the result (a residual): oneDNN's sum;
 *     other broadcast add/sub/mul/div: binary post-ops;
 *   - relu, gelu (erf, tanh), silu, sigmoid, tanh, hardswish, hardsigmoid,
 *     hardtanh, clamp(_min/_max) with scalars, leaky_relu, elu (scale 1):
 *     eltwise post-ops.
 * A bf16 chain may end in a cast to f32 (the precision option's cast before
 * softmax or a norm): oneDNN writes f32, unrounded (not after a residual
 * sum, which accumulates in the dst's type).
 * A chain ends at its last non-view node; views after it stay views. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "common/infer.h"

typedef struct pctx {
	coil_graph *g;
	int *nuse;       /* per value: readers (node args, graph outputs) */
	int *user;       /* per value: the (last) node reading it */
	char *is_out;
	const uint8_t *unfuse; /* per node: a conv head whose activation stays out of its fusion (autotune) */
	int int8;              /* the target runs oneDNN's int8 kernels exactly (dn_int8) */
	int avx512;            /* the target has AVX-512 (costly activations stay out of f32 convs) */
} pctx;

/* oneDNN's int8 convolutions and matrix products multiply u8 by s8 in pairs summed
 * into 16 bits (vpmaddubsw) where the CPU lacks AVX-512 VNNI, which saturate (255 *
 * 127 * 2 > 32767: a dynamic linear came out 16% off on AVX2), and oneDNN 2.6
 * halves convolution weights there to avoid it.  Below a target with AVX-512 VNNI
 * the quantize/dequantize graph runs as written instead: f32 products of the
 * dequantized values, exact to f32 rounding, at f32 speed. */
static int dn_int8(unsigned features)
{
	return (features & F_AVX512_VNNI) != 0;
}

/* A param or constant of dtype t (f32 unless said). */
static int is_const_of(const coil_graph *g, int v, coil_dtype t)
{
	return v >= 0 && (g->vals[v].kind == VAL_PARAM || g->vals[v].kind == VAL_CONST) && g->vals[v].dtype == t;
}

/* A fold's operand (batch norm's statistics and affine, a per-channel
 * scale or shift): a constant of the conv's dtype or f32 (folds are
 * computed in f32; a bf16 graph from autocast keeps its norms' params f32). */
static int fold_const(const coil_graph *g, int v, coil_dtype t)
{
	return is_const_of(g, v, t) || is_const_of(g, v, COIL_F32);
}

/* The dtype a fusion headed by node h computes in: f32, or bf16 (oneDNN's
 * bf16 kernels: f32 inside, rounded once at the end of the chain). */
static coil_dtype head_dtype(const coil_graph *g, int h)
{
	return g->vals[g->nodes[h].outs[0]].dtype;
}

static int tensor_arg(const coil_node *n, int i)
{
	return n->args[i].kind == ARG_TENSOR ? n->args[i].v[0] : -1;
}

static int same_shape(const coil_value *a, const coil_value *b)
{
	return a->rank == b->rank && dims_equal(a->shape, b->shape, a->rank);
}

/* v broadcasts to shape (rank r) without growing it: right-aligned, each dim 1 or equal. */
static int bcasts_to(const coil_value *v, const coil_value *to)
{
	if (v->rank > to->rank)
		return 0;
	for (int i = 0; i < v->rank; i++) {
		const coil_dim *d = &v->shape[i], *t = &to->shape[to->rank - v->rank + i];
		if (!dim_eq_const(d, 1) && !dim_eq(d, t))
			return 0;
	}
	return 1;
}

/* Per-channel against the head's result: channel dim ch of out (conv: 1,
 * matmul: last); every other dim of v is 1. */
static int per_channel(const coil_value *v, const coil_value *out, int ch)
{
	if (!bcasts_to(v, out))
		return 0;
	for (int i = 0; i < v->rank; i++) {
		int od = out->rank - v->rank + i;
		if (od != ch && !dim_eq_const(&v->shape[i], 1))
			return 0;
	}
	return 1;
}

static double sarg(const coil_node *n, int i, double d) { return n->args[i].kind == ARG_SCALAR ? n->args[i].f : d; }

int dn_pool_window(coil_graph *g, const coil_node *n, dn_pool *w)
{
	const coil_value *x = node_in(g, n, 0), *o = node_out(g, n, 0);
	const int q8 = x->dtype == COIL_U8 || x->dtype == COIL_I8; /* max pooling of quantized values */
	if ((x->dtype != COIL_F32 && x->dtype != COIL_BF16 && !(q8 && !pool_is_avg(n->op) &&
								 n->op != OP_ADAPTIVE_AVG_POOL2D && n->op != OP_ADAPTIVE_AVG_POOL2D_)) ||
	    x->rank != 4 || !dim_is_const(&x->shape[1], NULL))
		return -1;
	int64_t in[2], out[2];
	int sym = 0;
	for (int i = 0; i < 2; i++) {
		if (!dim_is_const(&x->shape[2 + i], &in[i]) || !dim_is_const(&o->shape[2 + i], &out[i]))
			sym = 1;
		else if (in[i] < 1 || out[i] < 1)
			return -1;
	}
	memset(w, 0, sizeof *w);
	w->sym = sym;
	if (n->op == OP_ADAPTIVE_AVG_POOL2D || n->op == OP_ADAPTIVE_AVG_POOL2D_) {
		/* equal windows only: out divides in */
		for (int i = 0; i < 2 && !sym; i++) {
			if (in[i] % out[i])
				return -1;
			w->k[i] = w->s[i] = in[i] / out[i], w->d[i] = 1;
		}
		w->kind = 2;
		return sym ? -1 : 0;
	}
	pool_params pp;
	pool_get_params(n, &pp);
	if (pp.divisor)
		return -1;
	w->kind = n->op != OP_AVG_POOL2D ? 0 : pp.count_pad ? 1 : 2;
	for (int i = 0; i < 2; i++) {
		int64_t span = pp.d[i] * (pp.k[i] - 1) + 1;
		w->k[i] = pp.k[i], w->s[i] = pp.s[i], w->d[i] = pp.d[i], w->pl[i] = w->pr[i] = pp.p[i];
		if (sym) {
			/* sizes known at run time: the right padding for ceil_mode's
			 * overhang is computed there (make_pool), when it can be */
			if (pp.ceil && (w->kind == 1 || pp.s[i] > span))
				return -1;
			continue;
		}
		if (in[i] + 2 * pp.p[i] < span)
			return -1;
		if ((in[i] + 2 * pp.p[i] - span) / pp.s[i] + 1 != out[i]) {
			/* ceil_mode: the last window overhangs past in + pad */
			w->pr[i] = (out[i] - 1) * pp.s[i] + span - in[i] - pp.p[i];
			if (w->kind == 1)
				return -1; /* ATen's divisor clips there, oneDNN's does not */
		}
		if (w->pl[i] >= span || w->pr[i] >= span || w->pr[i] < 0)
			return -1;
	}
	if (sym)
		w->ceil = pp.ceil;
	return 0;
}

/* --- int8 ------------------------------------------------------------------ */

static int add_post(dn_fuse *f, enum dn_post_kind k, double a, double b, int val);

/* The bounds of hardtanh or clamp(_min/_max) with scalar bounds (+-inf where
 * absent): 0, or -1 for tensor bounds or lo > hi. */
static int clamp_bounds(const coil_node *u, double *lo, double *hi)
{
	*lo = -INFINITY, *hi = INFINITY;
	if (u->op == OP_HARDTANH)
		*lo = sarg(u, 1, -1), *hi = sarg(u, 2, 1);
	else if (u->op == OP_CLAMP_MAX)
		*hi = sarg(u, 1, INFINITY);
	else
		*lo = sarg(u, 1, -INFINITY);
	if (u->op == OP_CLAMP)
		*hi = sarg(u, 2, INFINITY);
	for (int a = 1; a < (u->op == OP_CLAMP || u->op == OP_HARDTANH ? 3 : 2); a++)
		if (u->args[a].kind != ARG_SCALAR && u->args[a].kind != ARG_NONE)
			return -1;
	return *lo > *hi ? -1 : 0;
}

/* The eltwise post-op for activation u (relu, gelu, silu, sigmoid, tanh,
 * hardswish, hardsigmoid, hardtanh and clamp with scalar bounds, leaky_relu,
 * elu with unit scales) appended to f: 0, or -1 when u is none of them. */
/* An activation oneDNN's f32 convolution kernels compute slowly (exp, erf or tanh inside) */
static int costly_post(enum dn_post_kind k)
{
	return k == DN_GELU_ERF || k == DN_GELU_TANH || k == DN_SILU || k == DN_SIGMOID || k == DN_TANH || k == DN_ELU;
}

static int elt_post(dn_fuse *f, const coil_node *u)
{
	double lo, hi;
	switch (u->op) {
	case OP_RELU: return add_post(f, DN_RELU, 0, 0, -1);
	case OP_GELU:
		return add_post(f, u->args[1].kind == ARG_STR && !strcmp(u->args[1].s, "tanh") ? DN_GELU_TANH : DN_GELU_ERF,
				0, 0, -1);
	case OP_SILU: return add_post(f, DN_SILU, 0, 0, -1);
	case OP_SIGMOID: return add_post(f, DN_SIGMOID, 0, 0, -1);
	case OP_TANH: return add_post(f, DN_TANH, 0, 0, -1);
	case OP_HARDSWISH: return add_post(f, DN_HARDSWISH, 0, 0, -1);
	case OP_HARDSIGMOID: return add_post(f, DN_HARDSIGMOID, 0, 0, -1);
	case OP_HARDTANH: case OP_CLAMP: case OP_CLAMP_MIN: case OP_CLAMP_MAX:
		return clamp_bounds(u, &lo, &hi) ? -1 : add_post(f, DN_CLAMP, lo, hi, -1);
	case OP_LEAKY_RELU: return add_post(f, DN_LEAKY_RELU, sarg(u, 1, 0.01), 0, -1);
	case OP_ELU:
		if (sarg(u, 2, 1) != 1 || sarg(u, 3, 1) != 1)
			return -1;
		return add_post(f, DN_ELU, sarg(u, 1, 1), 0, -1);
	default:
		return -1;
	}
}

/* Tensor argument i of n (const graph). */
static const coil_value *qin(const coil_graph *g, const coil_node *n, int i) { return &g->vals[n->args[i].v[0]]; }

static int producer(const coil_graph *g, int v)
{
	return v >= 0 && g->vals[v].kind == VAL_NODE ? g->vals[v].index : -1;
}

/* v = dequantize_per_tensor(a u8/i8 value, scalar qparams): that node, else -1. */
static int dq_act(const coil_graph *g, int v)
{
	int p = producer(g, v);
	if (p < 0 || g->nodes[p].op != OP_DEQUANTIZE_PT)
		return -1;
	coil_dtype t = qin(g, &g->nodes[p], 0)->dtype;
	return t == COIL_U8 || t == COIL_I8 ? p : -1;
}

static int is_reshape_op(const coil_node *n);

/* v seen through reshapes (views that keep every element in order). */
static int unview(const coil_graph *g, int v)
{
	int p;
	while ((p = producer(g, v)) >= 0 && is_reshape_op(&g->nodes[p]))
		v = g->nodes[p].args[0].v[0];
	return v;
}

/* v = dequantize_per_tensor.tensor(quantize_per_tensor.tensor(x, s, z), s, z), (s, z) =
 * choose_qparams(x, or a reshape of it), one range and dtype throughout: x (f32)
 * quantized dynamically.  That dequantize node, else -1. */
static int dq_dyn(const coil_graph *g, int v)
{
	int d = producer(g, v), q, c;
	if (d < 0 || g->nodes[d].op != OP_DEQUANTIZE_PT_T || (q = producer(g, g->nodes[d].args[0].v[0])) < 0 ||
	    g->nodes[q].op != OP_QUANTIZE_PT_T || (c = producer(g, g->nodes[d].args[1].v[0])) < 0 ||
	    g->nodes[c].op != OP_CHOOSE_QPARAMS)
		return -1;
	const coil_node *dn = &g->nodes[d], *qn = &g->nodes[q], *cn = &g->nodes[c];
	const coil_dtype t = (coil_dtype)qn->args[5].i;
	if (dn->args[1].v[0] != cn->outs[0] || dn->args[2].v[0] != cn->outs[1] || qn->args[1].v[0] != cn->outs[0] ||
	    qn->args[2].v[0] != cn->outs[1] || (t != COIL_U8 && t != COIL_I8) || qin(g, qn, 0)->dtype != COIL_F32)
		return -1;
	for (int k = 3; k <= 5; k++)
		if (dn->args[k].i != qn->args[k].i || cn->args[k - 2 + (k == 5)].i != qn->args[k].i)
			return -1;
	return unview(g, qn->args[0].v[0]) == unview(g, cn->args[0].v[0]) ? d : -1;
}

/* The f32 input of a dynamic fusion's head (the q_xdq its dq_dyn found). */
static int dyn_src(const coil_graph *g, int xdq)
{
	return g->nodes[producer(g, g->nodes[xdq].args[0].v[0])].args[0].v[0];
}

/* v = a dequantize of an s8 weight: per tensor (scalar qparams, zero point 0) or per
 * channel along axis (zero points 0); with `cst`, of constants (after fold).  That node,
 * else -1. */
static int dq_wei(const coil_graph *g, int v, int axis, int cst)
{
	int p = producer(g, v);
	if (p < 0)
		return -1;
	const coil_node *n = &g->nodes[p];
	if (qin(g, n, 0)->dtype != COIL_I8 || (cst && !is_const_of(g, n->args[0].v[0], COIL_I8)))
		return -1;
	if (n->op == OP_DEQUANTIZE_PT)
		return n->args[2].i == 0 ? p : -1;
	if (n->op != OP_DEQUANTIZE_PC || n->args[3].i != axis)
		return -1;
	int s = n->args[1].v[0], z = n->args[2].v[0];
	const coil_value *zv = &g->vals[z];
	if (cst && (g->vals[s].kind == VAL_NODE || !dtype_is_float(g->vals[s].dtype)))
		return -1;
	/* the zero points: all 0 (oneDNN takes no weight zero points), a constant or a fill */
	int zp = producer(g, z);
	if (zp >= 0) {
		const coil_node *zn = &g->nodes[zp];
		int zero = zn->op == OP_ZEROS || zn->op == OP_ZEROS_LIKE || zn->op == OP_NEW_ZEROS ||
			   ((zn->op == OP_FULL || zn->op == OP_FULL_LIKE) && zn->args[1].kind == ARG_SCALAR &&
			    zn->args[1].f == 0);
		return zero ? p : -1;
	}
	int64_t c;
	if (zv->kind != VAL_CONST || !zv->data || !dim_is_const(&zv->shape[0], &c))
		return -1;
	for (int64_t i = 0; i < c; i++)
		if (dtype_load(zv->dtype, zv->data, (size_t)i) != 0)
			return -1;
	return p;
}

/* The int8 form of head h: its input's and weight's dequantize nodes (*xdq,
 * *wdq) and, for a matrix product, whether B is read transposed. */
static int q_head(const coil_graph *g, int h, int cst, int *xdq, int *wdq, int *btrans)
{
	const coil_node *n = &g->nodes[h];
	*btrans = 0;
	if (g->vals[n->outs[0]].dtype != COIL_F32)
		return 0;
	if (n->op == OP_CONVOLUTION) {
		const coil_value *x = qin(g, n, 0);
		int b = tensor_arg(n, 2);
		if (n->args[6].i || x->rank < 3 || x->rank > 5 || (b >= 0 && cst && !is_const_of(g, b, COIL_F32)) ||
		    !shape_is_const(x->shape, x->rank))
			return 0;
		*xdq = dq_act(g, n->args[0].v[0]);
		*wdq = dq_wei(g, n->args[1].v[0], 0, cst);
		return *xdq >= 0 && *wdq >= 0;
	}
	if (n->op != OP_MM && n->op != OP_ADDMM)
		return 0;
	int base = n->op == OP_ADDMM;
	const coil_value *a = qin(g, n, base);
	if (a->rank != 2 || !dim_is_const(&a->shape[1], NULL)) /* (m may be symbolic: objects per binding) */
		return 0;
	if (base) {
		const coil_value *bias = qin(g, n, 0);
		if (sarg(n, 3, 1) != 1 || sarg(n, 4, 1) != 1 || (cst && !is_const_of(g, n->args[0].v[0], COIL_F32)) ||
		    bias->rank < 1 || bias->rank > 2 || (bias->rank == 2 && !dim_eq_const(&bias->shape[0], 1)))
			return 0;
	}
	if ((*xdq = dq_act(g, n->args[base].v[0])) < 0) /* dynamic: under a linear's flattening view too */
		*xdq = dq_dyn(g, unview(g, n->args[base].v[0]));
	int bv = n->args[base + 1].v[0], t = producer(g, bv);
	if (t >= 0 && (g->nodes[t].op == OP_T || g->nodes[t].op == OP_TRANSPOSE || g->nodes[t].op == OP_PERMUTE) &&
	    qin(g, &g->nodes[t], 0)->rank == 2) {
		*wdq = dq_wei(g, g->nodes[t].args[0].v[0], 0, cst); /* W [n, k], per output feature */
		*btrans = 1;
	} else {
		*wdq = dq_wei(g, bv, 1, cst); /* B [k, n] */
	}
	return *xdq >= 0 && *wdq >= 0;
}


/* A clamp bound b in the units of a quantize with scale s: the integer ATen's quantize gives
 * b (rint(b * (1.0f / s)) in f32), where b / s itself may round the other way; clamping the
 * accumulator there commutes with the rounding after it, so the bits are ATen's. */
static double q_bound(double b, double s)
{
	return isinf(b) ? b : (double)rintf((float)b * (1.0f / (float)s));
}

/* Extends an int8 chain ending in quantize q1 over q1 -> dequantize -> an
 * activation -> quantize q2 (the FX flow's ReLU6, SiLU, hardswish ... after
 * a conv, each between a quantize and a dequantize):
 *   - relu, hardtanh or clamp with q2 = q1 (scale, zero point, dtype, range):
 *     a clamp post-op on the accumulator; clamping commutes with the
 *     rounding, so the bits are the same;
 *   - else q1 is computed on the way: round and saturate in q1's units,
 *     scale to real values, the activation, scale to q2's units; the result
 *     differs from the reference only where oneDNN's activation rounds
 *     differently from ATen's (a step of q2 at most). */
static void q_requant(pctx *c, dn_fuse *f, int *at)
{
	coil_graph *g = c->g;
	for (;;) {
		const coil_node *q = &g->nodes[f->last];
		int v = q->outs[0], di, ui, qi;
		if (c->nuse[v] != 1 || c->is_out[v] || at[di = c->user[v]] != -1)
			return;
		const coil_node *d = &g->nodes[di];
		if (d->op != OP_DEQUANTIZE_PT || (float)d->args[1].f != (float)q->args[1].f || d->args[2].i != q->args[2].i ||
		    d->args[5].i != q->args[5].i || c->nuse[d->outs[0]] != 1 || c->is_out[d->outs[0]] ||
		    at[ui = c->user[d->outs[0]]] != -1)
			return;
		const coil_node *u = &g->nodes[ui];
		if (u->args[0].v[0] != d->outs[0] || c->nuse[u->outs[0]] != 1 || c->is_out[u->outs[0]] ||
		    at[qi = c->user[u->outs[0]]] != -1)
			return;
		const coil_node *q2 = &g->nodes[qi];
		coil_dtype t2 = (coil_dtype)q2->args[5].i;
		if (q2->op != OP_QUANTIZE_PT || (t2 != COIL_U8 && t2 != COIL_I8))
			return;
		const double s1 = (float)q->args[1].f, s2 = (float)q2->args[1].f, z1 = (double)q->args[2].i;
		const int same = s1 == s2 && q2->args[2].i == q->args[2].i && q2->args[3].i == q->args[3].i &&
				 q2->args[4].i == q->args[4].i && q2->args[5].i == q->args[5].i;
		double lo = 0, hi = INFINITY;
		dn_fuse t = *f;
		if (same && (u->op == OP_RELU || !clamp_bounds(u, &lo, &hi))) {
			if (add_post(&t, DN_CLAMP, q_bound(lo, s1), q_bound(hi, s1), -1))
				return;
		} else {
			const double tmin = t2 == COIL_U8 ? 0 : -128, tmax = t2 == COIL_U8 ? 255 : 127;
			const double z2 = (double)q2->args[2].i;
			/* the activation's result scaled into q2's units by its own post-op scale */
			if (add_post(&t, DN_ROUND, 0, 0, -1) ||
			    add_post(&t, DN_CLAMP, (double)q->args[3].i - z1, (double)q->args[4].i - z1, -1) ||
			    add_post(&t, DN_LINEAR, s1, 0, -1) || elt_post(&t, u) ||
			    ((q2->args[3].i > tmin || q2->args[4].i < tmax) &&
			     add_post(&t, DN_CLAMP, (double)q2->args[3].i - z2, (double)q2->args[4].i - z2, -1)))
				return;
			t.post[t.npost - 1 - (q2->args[3].i > tmin || q2->args[4].i < tmax)].scale = 1 / s2;
		}
		if (t.q_rdq >= 0 && qin(g, &g->nodes[t.q_rdq], 0)->dtype != t2)
			return; /* the sum accumulates in the dst's type */
		*f = t;
		at[f->last] = at[di] = at[ui] = -2;
		f->last = qi;
	}
}

/* The chain of an int8 fusion: [add of a dequantized residual] [relu, clamp,
 * hardtanh ...] then a per-tensor quantize, which ends it.  Eltwise bounds
 * are rescaled into the quantized output's units (oneDNN applies post-ops to
 * the scaled accumulator).  0 and f filled, or -1 (nothing marked). */
static int q_chain(pctx *c, dn_fuse *f, int *at)
{
	coil_graph *g = c->g;
	int cur = g->nodes[f->head].outs[0], pend[8], np = 0;
	f->q_rdq = -1;
	for (;;) {
		if (c->nuse[cur] != 1 || c->is_out[cur])
			return -1;
		int ui = c->user[cur];
		const coil_node *u = &g->nodes[ui];
		if (at[ui] != -1 || np == 8 || f->npost >= DN_MAX_POST - 1)
			return -1;
		if (u->op == OP_QUANTIZE_PT) {
			coil_dtype t = (coil_dtype)u->args[5].i;
			if (t != COIL_U8 && t != COIL_I8)
				return -1;
			const double sy = (float)u->args[1].f, zy = (double)u->args[2].i;
			const double tmin = t == COIL_U8 ? 0 : -128, tmax = t == COIL_U8 ? 255 : 127;
			if (f->q_rdq >= 0 && node_in(g, &g->nodes[f->q_rdq], 0)->dtype != t)
				return -1; /* the sum accumulates in the dst's type */
			/* the accumulator comes in units of sy: clamp bounds scale, an activation
			 * computes on real values (see below) */
			for (int i = 0; i < f->npost; i++) {
				if (f->post[i].kind == DN_CLAMP)
					f->post[i].a = q_bound(f->post[i].a, sy), f->post[i].b = q_bound(f->post[i].b, sy);
				if (f->post[i].kind == DN_LINEAR && isnan(f->post[i].a))
					f->post[i].a = sy, f->post[i].b = 0, f->post[i + 1].scale = 1 / sy;
			}
			if (u->args[3].i > tmin || u->args[4].i < tmax) /* a narrower range: clip before rounding */
				add_post(f, DN_CLAMP, (double)u->args[3].i - zy, (double)u->args[4].i - zy, -1);
			for (int i = 0; i < np; i++)
				at[pend[i]] = -2;
			f->last = f->q_sdiv = ui;
			q_requant(c, f, at);
			return 0;
		}
		switch (u->op) {
		case OP_ADD: {
			int x = tensor_arg(u, 0), y = tensor_arg(u, 1), other = x == cur ? y : x, r;
			if ((x == cur) == (y == cur) || f->npost || f->q_rdq >= 0 || sarg(u, 2, 1) != 1 ||
			    (r = dq_act(g, other)) < 0 || !same_shape(&g->vals[other], &g->vals[cur]))
				return -1;
			f->q_rdq = r;
			if (add_post(f, DN_ADD_SAME, 0, 0, g->nodes[r].args[0].v[0]))
				return -1;
			break;
		}
		case OP_RELU: case OP_HARDTANH: case OP_CLAMP: case OP_CLAMP_MIN: case OP_CLAMP_MAX:
			if (elt_post(f, u))
				return -1;
			break;
		default:
			/* another activation: on real values, between a linear post-op to them (its scale
			 * set at the quantize, NAN until then) and its own result scale back */
			if (f->npost + 2 >= DN_MAX_POST || add_post(f, DN_LINEAR, NAN, 0, -1))
				return -1;
			if (elt_post(f, u)) /* (hardsigmoid's own linear part conflicts: refused) */
				return -1;
			break;
		}
		if (node_out(g, u, 0)->dtype != COIL_F32)
			return -1;
		pend[np++] = ui;
		cur = u->outs[0];
	}
}

static void chain(pctx *c, dn_fuse *f, int *at);

/* Head h as an int8 fusion when its pattern holds to the end: 1, else 0 (f left clean). */
static int q_fusion(pctx *c, int h, dn_fuse *f, int *at)
{
	int xdq, wdq, bt;
	if (!c->int8 || !q_head(c->g, h, 1, &xdq, &wdq, &bt))
		return 0;
	dn_fuse t = *f;
	t.q = 1, t.q_xdq = xdq, t.q_wdq = wdq, t.q_rdq = -1;
	t.is_conv = c->g->nodes[h].op == OP_CONVOLUTION;
	if (!t.is_conv) {
		t.b_param = c->g->nodes[wdq].args[0].v[0];
		t.b_trans = bt;
	}
	if (c->g->nodes[xdq].op == OP_DEQUANTIZE_PT_T) {
		/* dynamic: real values out, the f32 chain of any matmul */
		t.q = 2;
		chain(c, &t, at);
	} else if (q_chain(c, &t, at)) {
		return 0;
	}
	*f = t;
	return 1;
}

/* Readers of each value: c->nuse, c->user (the last), c->is_out; arrays of nvals + 1. */
static void count_uses(pctx *c)
{
	const coil_graph *g = c->g;
	memset(c->is_out, 0, (size_t)g->nvals + 1);
	for (int i = 0; i < g->noutputs; i++)
		c->is_out[g->outputs[i]] = 1;
	graph_node_reads(g, c->nuse, c->user);
}

int dn_q_weights(coil_graph *g, unsigned features, char *mark)
{
	if (!dn_enabled() || !dn_int8(features))
		return 0;
	pctx c = {.g = g};
	c.nuse = malloc((size_t)(g->nvals + 1) * sizeof(int));
	c.user = malloc((size_t)(g->nvals + 1) * sizeof(int));
	c.is_out = malloc((size_t)g->nvals + 1);
	int *at = malloc((size_t)(g->nnodes + 1) * sizeof(int));
	if (!c.nuse || !c.user || !c.is_out || !at) {
		free(c.nuse), free(c.user), free(c.is_out), free(at);
		return -1;
	}
	count_uses(&c);
	for (int i = 0; i < g->nnodes; i++)
		at[i] = -1;
	/* the plan's walk, on the graph before fold: each head whose int8 pattern holds */
	for (int i = 0; i < g->nnodes; i++) {
		int xdq, wdq, bt;
		if (at[i] != -1 || !q_head(g, i, 0, &xdq, &wdq, &bt))
			continue;
		dn_fuse f;
		memset(&f, 0, sizeof f);
		f.head = f.last = i, f.q = 1, f.q_xdq = xdq, f.q_wdq = wdq;
		f.is_conv = g->nodes[i].op == OP_CONVOLUTION;
		if (g->nodes[xdq].op != OP_DEQUANTIZE_PT_T && q_chain(&c, &f, at))
			continue;
		at[f.last] = 0, at[i] = -2;
		mark[wdq] = 1;
	}
	free(c.nuse), free(c.user), free(c.is_out), free(at);
	return 0;
}

/* A depthwise convolution with a dilation above 1 */
static int dw_dilated(coil_graph *g, const coil_node *n)
{
	const coil_value *x = node_in(g, n, 0);
	int64_t ch, grp = n->args[8].i;
	int dilated = 0;
	for (int i = 0; i < n->args[5].n; i++)
		dilated |= n->args[5].ints[i] > 1;
	return dilated && !n->args[6].i && grp > 1 && dim_is_const(&x->shape[1], &ch) && ch == grp;
}

/* Whether head node h can run on oneDNN at all; fills the matmul B fields. */
static int eligible(pctx *c, int h, dn_fuse *f)
{
	coil_graph *g = c->g;
	const coil_node *n = &g->nodes[h];
	const coil_value *o = node_out(g, n, 0);
	const coil_dtype T = o->dtype;
	if (T != COIL_F32 && T != COIL_BF16 && !(T == COIL_U8 || T == COIL_I8)) /* u8/i8: max pools only */
		return 0;
	f->b_param = -1;
	if (n->op == OP_CONVOLUTION) {
		const coil_value *x = node_in(g, n, 0), *w = node_in(g, n, 1);
		int b = tensor_arg(n, 2);
		if (x->dtype != T || x->rank < 3 || x->rank > 5 || !is_const_of(g, n->args[1].v[0], T) ||
		    (b >= 0 && !is_const_of(g, b, T)) || !dim_is_const(&x->shape[1], NULL) || !shape_is_const(w->shape, w->rank) ||
		    !dim_is_const(&o->shape[1], NULL))
			return 0;
		for (int i = 0; i < o->rank; i++) /* empty convolutions stay on the generated loops */
			if (dim_eq_const(&o->shape[i], 0) || (i < x->rank && dim_eq_const(&x->shape[i], 0)))
				return 0;
		/* oneDNN 2.6's NHWC depthwise kernel takes no dilation: it falls back to gemm, ~250x
		 * slower (ConvTasNet's dilated depthwise 1-d convs: 12.5 ms each, against 0.05 ms of
		 * work).  Its jit_dw kernel does, and the runtime runs 2-d f32 ones on it
		 * (conv_blocked_ok; ConvTasNet's 1-d ones, dilation up to 128, ran 2x slower there than in
		 * the generated loops); the rest, at static sizes, stay on the generated loops */
		if (dw_dilated(g, n) && dim_eq(&o->shape[1], &x->shape[1]) && shape_is_const(x->shape, x->rank) &&
		    !(T == COIL_F32 && x->rank == 4))
			return 0;
		f->is_conv = 1;
		return 1;
	}
	if (n->op == OP_MAX_POOL2D_WI || n->op == OP_MAX_POOL2D || n->op == OP_AVG_POOL2D ||
	    n->op == OP_ADAPTIVE_AVG_POOL2D || n->op == OP_ADAPTIVE_AVG_POOL2D_) {
		dn_pool w;
		if (n->nout > 1 && n->outs[1] >= 0 && (c->nuse[n->outs[1]] || c->is_out[n->outs[1]]))
			return 0; /* the indices are wanted */
		f->is_pool = 1;
		return dn_pool_window(g, n, &w) == 0;
	}
	if (T != COIL_F32 && T != COIL_BF16)
		return 0;
	if (n->op != OP_MM && n->op != OP_ADDMM && n->op != OP_BMM)
		return 0;
	int base = n->op == OP_ADDMM;
	const coil_value *a = node_in(g, n, base), *bv = node_in(g, n, base + 1);
	if (a->dtype != T || bv->dtype != T)
		return 0;
	/* oneDNN needs non-empty operands; empty products stay on the generated loops */
	for (int i = 0; i < a->rank; i++)
		if (dim_eq_const(&a->shape[i], 0))
			return 0;
	for (int i = 0; i < bv->rank; i++)
		if (dim_eq_const(&bv->shape[i], 0))
			return 0;
	if (base) {
		const coil_value *bias = node_in(g, n, 0);
		double alpha = sarg(n, 4, 1);
		if (bias->dtype != T || alpha == 0 || bias->rank > 2)
			return 0;
		/* bias [n], [1, n] or [m, n] */
		if (bias->rank == 0 || dim_eq_const(&bias->shape[bias->rank - 1], 1) != dim_eq_const(&o->shape[1], 1))
			return 0;
		if (!dim_eq(&bias->shape[bias->rank - 1], &o->shape[1]))
			return 0;
		if (bias->rank == 2 && !dim_eq_const(&bias->shape[0], 1) && !dim_eq(&bias->shape[0], &o->shape[0]))
			return 0;
	}
	/* a constant B, or B = t(W) / transpose(W, 0, 1) of a constant W */
	int bv_i = n->args[base + 1].v[0], t;
	if (n->op != OP_BMM && is_const_of(g, bv_i, T))
		f->b_param = bv_i;
	else if ((t = dn_b_transposed(g, n)) >= 0)
		f->b_param = g->nodes[t].args[0].v[0], f->b_trans = 1;
	return 1;
}

int dn_b_transposed(coil_graph *g, const coil_node *n)
{
	if (n->op != OP_MM && n->op != OP_ADDMM)
		return -1;
	int bv = n->args[(n->op == OP_ADDMM) + 1].v[0];
	if (bv < 0 || g->vals[bv].kind != VAL_NODE)
		return -1;
	const coil_node *t = &g->nodes[g->vals[bv].index];
	if ((t->op == OP_T || t->op == OP_TRANSPOSE || t->op == OP_PERMUTE) && node_in(g, t, 0)->rank == 2 &&
	    is_const_of(g, t->args[0].v[0], g->vals[bv].dtype))
		return g->vals[bv].index;
	return -1;
}

static int is_reshape_op(const coil_node *n)
{
	switch (n->op) {
	case OP_VIEW: case OP_UNSAFE_VIEW: case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_SQUEEZE_DIM:
	case OP_UNSQUEEZE: case OP_ALIAS: case OP_DETACH: case OP_CLONE: case OP_CONTIGUOUS: case OP_LIFT_FRESH_COPY:
		return 1;
	default:
		return 0;
	}
}

/* The oneDNN eltwise algorithms post-op p becomes (up to two) with their
 * parameters: alg[i] (its kind, RELU for leaky_relu too, LINEAR and CLAMP for
 * hardsigmoid's two), prm[i][0..1].  Returns how many. */
static int post_algs(const dn_post *p, int alg[2], double prm[2][2])
{
	if (p->kind >= DN_ADD_SAME)
		return 0;
	alg[0] = p->kind == DN_LEAKY_RELU ? DN_RELU : p->kind == DN_HARDSIGMOID ? DN_LINEAR : (int)p->kind;
	prm[0][0] = p->kind == DN_HARDSIGMOID ? 1.0 / 6 : p->kind == DN_RELU ? 0 : p->a;
	prm[0][1] = p->kind == DN_HARDSIGMOID ? 0.5 : p->b;
	if (p->kind != DN_HARDSIGMOID)
		return 1;
	alg[1] = DN_CLAMP, prm[1][0] = 0, prm[1][1] = 1;
	return 2;
}

static int add_post(dn_fuse *f, enum dn_post_kind k, double a, double b, int val)
{
	if (f->npost >= DN_MAX_POST)
		return -1;
	/* oneDNN 2.6's jit kernels (brgconv, jit_int8, f32 and int8 alike) apply the
	 * parameters of the first eltwise post-op of an algorithm to every later one of
	 * the same algorithm (conv -> linear(0.5) -> linear(2) scales by 0.25): a second
	 * one with other parameters ends the chain instead */
	dn_post np = {.kind = k, .a = a, .b = b, .val = val};
	int na, nb, alg_a[2], alg_b[2];
	double pa[2][2], pb[2][2];
	na = post_algs(&np, alg_a, pa);
	for (int i = 0; i < f->npost; i++) {
		nb = post_algs(&f->post[i], alg_b, pb);
		for (int x = 0; x < na; x++)
			for (int y = 0; y < nb; y++)
				if (alg_a[x] == alg_b[y] && (pa[x][0] != pb[y][0] || pa[x][1] != pb[y][1] || f->post[i].scale != 0))
					return -1;
	}
	f->post[f->npost++] = np;
	return 0;
}

/* x (op) s for a scalar s: folded, or the post-op a*x + b. */
static int scalar_step(dn_fuse *f, coil_op op, double s, int can_fold)
{
	int add = op == OP_ADD || op == OP_ADD_S, sub = op == OP_SUB || op == OP_SUB_S;
	int mul = op == OP_MUL || op == OP_MUL_S;
	if (!add && !sub && !mul && s == 0)
		return -1;
	if (can_fold) {
		f->fold[f->nfold++] = (dn_fold){.kind = add ? FOLD_ADD : sub ? FOLD_SUB : mul ? FOLD_MUL : FOLD_DIV,
						.val = -1, .s = s};
		return 0;
	}
	return add ? add_post(f, DN_LINEAR, 1, s, -1) : sub ? add_post(f, DN_LINEAR, 1, -s, -1)
	       : mul ? add_post(f, DN_LINEAR, s, 0, -1) : add_post(f, DN_LINEAR, 1 / s, 0, -1);
}

/* One step of the chain: node u reads cur (the chain's value).  0 and the
 * fusion updated when u fuses, -1 when the chain stops before u. */
static int step(pctx *c, dn_fuse *f, const coil_node *u, int cur, int view_free)
{
	coil_graph *g = c->g;
	const coil_value *hv = node_out(g, &g->nodes[f->head], 0), *cv = &g->vals[cur];
	const coil_value *uo = node_out(g, u, 0);
	int conv = f->is_conv, tr = conv && g->nodes[f->head].args[6].i;
	int ch = conv ? 1 : hv->rank - 1;
	/* folds apply to convolutions only, before any post-op, at the head's shape */
	int can_fold = conv && !tr && f->npost == 0 && view_free && f->nfold < DN_MAX_FOLD;
	const coil_dtype T = head_dtype(g, f->head);
	if (f->dst_f32)
		return -1;
	if (u->op == OP_TO_COPY && T == COIL_BF16 && uo->dtype == COIL_F32 && u->args[0].v[0] == cur) {
		for (int i = 0; i < f->npost; i++)
			if (f->post[i].kind == DN_ADD_SAME)
				return -1;
		f->dst_f32 = 1;
		return 0;
	}
	if (uo->dtype != T)
		return -1;
	/* oneDNN 2.6's deconvolution with any post-op (relu, gelu, a residual
	 * sum) runs 4-6x slower than without (jit:avx512_core, hdemucs' and a
	 * U-Net's shapes: ic96 oc48 32x173 k8x1 s4x1 8.7 ms bare, 53 ms with a
	 * relu): a transposed conv's readers stay generated code */
	if (tr)
		return -1;
	for (int k = 1; k < u->nout; k++)
		if (u->outs[k] >= 0 && (c->nuse[u->outs[k]] || c->is_out[u->outs[k]]))
			return -1;
	switch (u->op) {
	case OP_NATIVE_BATCH_NORM: case OP_BATCH_NORM: {
		if (!can_fold || u->args[0].v[0] != cur || u->args[5].i)
			return -1;
		for (int a = 1; a <= 4; a++) {
			int v = tensor_arg(u, a);
			if ((a >= 3 && v < 0) || (v >= 0 && (!fold_const(g, v, T) || g->vals[v].rank != 1 ||
							    !dim_eq(&g->vals[v].shape[0], &hv->shape[1]))))
				return -1;
		}
		f->fold[f->nfold++] = (dn_fold){.kind = FOLD_BN, .gnode = (int)(u - g->nodes), .val = -1};
		return 0;
	}
	case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: {
		int x = tensor_arg(u, 0), y = tensor_arg(u, 1);
		int other = x == cur ? y : x;
		if ((x == cur) == (y == cur) && y >= 0)
			return -1; /* x op x, or not reading cur */
		if ((u->op == OP_SUB || u->op == OP_DIV) && x != cur)
			return -1;
		if ((u->op == OP_ADD || u->op == OP_SUB) && sarg(u, 2, 1) != 1)
			return -1;
		if (!same_shape(uo, cv))
			return -1;
		if (other < 0) /* a scalar operand */
			return u->args[1].kind == ARG_SCALAR ? scalar_step(f, u->op, u->args[1].f, can_fold) : -1;
		const coil_value *ov = &g->vals[other];
		if (ov->dtype != T && !(can_fold && fold_const(g, other, T)))
			return -1;
		if (can_fold && fold_const(g, other, T) && per_channel(ov, hv, ch)) {
			enum dn_fold_kind k = u->op == OP_ADD ? FOLD_ADD : u->op == OP_SUB ? FOLD_SUB
					      : u->op == OP_MUL ? FOLD_MUL : FOLD_DIV;
			f->fold[f->nfold++] = (dn_fold){.kind = k, .val = other};
			return 0;
		}
		/* a dilated depthwise conv runs blocked (the runtime's conv_blocked_ok): no
		 * binary post-op */
		if (conv && dw_dilated(g, &g->nodes[f->head]))
			return -1;
		if (u->op == OP_ADD && same_shape(ov, cv)) {
			int has_sum = 0;
			for (int i = 0; i < f->npost; i++)
				has_sum |= f->post[i].kind == DN_ADD_SAME;
			if (!has_sum)
				return add_post(f, DN_ADD_SAME, 0, 0, other);
		}
		if (!bcasts_to(ov, cv))
			return -1;
		int last_only = !view_free;
		if (last_only) {
			/* after a view: only operands along the (unchanged) last dim */
			if (!dim_eq(&cv->shape[cv->rank - 1], &hv->shape[hv->rank - 1]))
				return -1;
			for (int i = 0; i + 1 < ov->rank; i++)
				if (!dim_eq_const(&ov->shape[i], 1))
					return -1;
		}
		enum dn_post_kind k = u->op == OP_ADD ? DN_ADD_BCAST : u->op == OP_SUB ? DN_SUB_BCAST
				      : u->op == OP_MUL ? DN_MUL_BCAST : DN_DIV_BCAST;
		if (add_post(f, k, 0, 0, other))
			return -1;
		f->post[f->npost - 1].last_only = last_only;
		return 0;
	}
	case OP_ADD_S: case OP_SUB_S: case OP_MUL_S: case OP_DIV_S:
		if (u->args[1].kind != ARG_SCALAR || ((u->op == OP_ADD_S || u->op == OP_SUB_S) && sarg(u, 2, 1) != 1))
			return -1;
		return scalar_step(f, u->op, u->args[1].f, can_fold);
	default:
		if (elt_post(f, u))
			return -1;
		if (!f->is_pool && !f->q && c->unfuse && c->unfuse[f->head]) { /* autotune's choice: generated code */
			f->npost--;
			f->act = (int)(u - g->nodes);
			return -1;
		}
		/* oneDNN 2.6 computes a transcendental activation in its AVX-512 f32 conv kernels at
		 * ~0.4 ns an element (1x1 conv 32->144 at 112x112: 1.06 ms bare, 1.81 with swish, 2.1
		 * with gelu), several times what a generated kernel takes for it (0.14 ns) and a pass
		 * more: there those stay out of f32 convolutions (relu, clamps and the hard ones cost
		 * ~0.05 ns and stay).  Below AVX-512 the generated pass (~0.75 ns an element over
		 * 112x112x96, memory-bound) costs more than the fused one: efficientnet_b0 on an
		 * AVX2 EPYC 18.1 -> 16.0 ms at one thread, 12.5 -> 11.6 at two (paired). */
		if (f->is_conv && T == COIL_F32 && c->avx512 && costly_post(f->post[f->npost - 1].kind)) {
			f->npost--;
			return -1;
		}
		f->elt += !f->is_pool && !f->q;
		return 0;
	}
}

/* Grows the chain of fusion f; marks absorbed nodes in at[]. */
static void chain(pctx *c, dn_fuse *f, int *at)
{
	coil_graph *g = c->g;
	int cur = g->nodes[f->head].outs[0], pend[64], np = 0, view_free = 1;
	while (!f->is_pool) {
		if (c->nuse[cur] != 1 || c->is_out[cur])
			return;
		int ui = c->user[cur];
		const coil_node *u = &g->nodes[ui];
		if (at[ui] != -1) /* already in another fusion (the other side of an add) */
			return;
		if (is_reshape_op(u)) {
			if (u->args[0].v[0] != cur || np == 64 || node_out(g, u, 0)->dtype != head_dtype(g, f->head))
				return;
			pend[np++] = ui;
			cur = u->outs[0];
			view_free = 0;
			continue;
		}
		/* a view that changes nothing keeps folds possible */
		if (np && same_shape(&g->vals[cur], node_out(g, &g->nodes[f->head], 0)))
			view_free = 1;
		if (step(c, f, u, cur, view_free))
			return;
		for (int i = 0; i < np; i++)
			at[pend[i]] = -2;
		np = 0;
		if (f->last != f->head)
			at[f->last] = -2;
		f->last = ui;
		cur = u->outs[0];
	}
}

/* Whether v, an operand of a node with rank-4 result o, holds one value per channel (and
 * per batch): [N or 1, C or 1, 1, 1] or [C or 1, 1, 1].  Such a value's bytes are the same
 * in either layout; against an NHWC operand it broadcasts along the last dim of the
 * channels-last frame (decompose's frame). */
static int chan_operand(const coil_value *v, const coil_value *o)
{
	if (v->rank != 3 && v->rank != 4)
		return 0;
	const int off = 4 - v->rank;
	for (int i = 0; i < v->rank; i++) {
		const int d = i + off;
		if (!dim_eq_const(&v->shape[i], 1) && (d == 2 || d == 3 || !dim_eq(&v->shape[i], &o->shape[d])))
			return 0;
	}
	return 1;
}

/* A cat of rank-4 values along dim 1. */
static int cat_channels(const coil_graph *g, const coil_node *n)
{
	const coil_value *o = &g->vals[n->outs[0]];
	if (o->rank != 4 || (n->args[1].i != 1 && n->args[1].i != -3) || n->args[0].n < 1 || n->args[0].n > 256)
		return 0;
	for (int k = 0; k < n->args[0].n; k++) {
		int v = n->args[0].v[k];
		if (v < 0 || g->vals[v].rank != 4 || g->vals[v].dtype != o->dtype)
			return 0;
	}
	return 1;
}

/* A split of a rank-4 value along dim 1 (ShuffleNet's halves), some result read. */
static int split_channels(const coil_graph *g, const coil_node *n)
{
	if ((n->op != OP_SPLIT && n->op != OP_UNSAFE_SPLIT && n->op != OP_SPLIT_WITH_SIZES) ||
	    g->vals[n->args[0].v[0]].rank != 4 || (n->args[2].i != 1 && n->args[2].i != -3))
		return 0;
	for (int k = 0; k < n->nout; k++)
		if (n->outs[k] >= 0)
			return 1;
	return 0;
}

/* An inference batch norm whose statistics results are unread (its [C] operands are
 * per channel by definition). */
static int bn_inference(const pctx *c, const coil_node *n)
{
	if ((n->op != OP_NATIVE_BATCH_NORM && n->op != OP_BATCH_NORM) || n->args[5].i)
		return 0;
	for (int k = 1; k < n->nout; k++)
		if (n->outs[k] >= 0 && (c->nuse[n->outs[k]] || c->is_out[n->outs[k]]))
			return 0;
	return 1;
}

/* A node that computes the same in either layout when its operands share it:
 * elementwise over one rank-4 shape (pointwise ops, per-tensor quantize and
 * dequantize, identities), every tensor operand of that shape or rank 0: 1.
 * 2 when some operand is per channel (chan_operand; a batch norm's statistics):
 * in NHWC it is decomposed in the channels-last frame (dn_plan.cl).  Else 0. */
static int transparent(const pctx *c, const coil_node *n)
{
	const coil_graph *g = c->g;
	const op_info *oi = op_get(n->op);
	const int bn = bn_inference(c, n);
	if (n->op == OP_CAT) /* along the channels: in the frame, along its last dim */
		return cat_channels(g, n) ? 2 : 0;
	if (n->op == OP_MB_JOIN) /* images along dim 0: the same bytes in either layout */
		return n->outs[0] >= 0 && g->vals[n->outs[0]].rank == 4 ? 2 : 0;
	if (n->op == OP_CHANNEL_SHUFFLE) /* a permute of the channels: of the frame's last dim */
		return n->outs[0] >= 0 && g->vals[n->outs[0]].rank == 4 ? 2 : 0;
	if (split_channels(g, n)) /* slices of the frame's last dim */
		return 2;
	int ew = oi->kind == PW || n->op == OP_QUANTIZE_PT || n->op == OP_DEQUANTIZE_PT || n->op == OP_ALIAS ||
		 n->op == OP_DETACH || n->op == OP_CLONE || n->op == OP_CONTIGUOUS || bn;
	if (!ew || (n->nout != 1 && !bn) || n->outs[0] < 0)
		return 0;
	const coil_value *o = &g->vals[n->outs[0]];
	if (o->rank != 4)
		return 0;
	int chan = bn;
	for (int a = 0; a < oi->nargs; a++) {
		if (n->args[a].kind == ARG_TENSORS)
			return 0;
		if (n->args[a].kind != ARG_TENSOR)
			continue;
		const coil_value *v = &g->vals[n->args[a].v[0]];
		if (bn && a > 0)
			continue;
		if (v->rank && !(v->rank == 4 && dims_equal(v->shape, o->shape, 4))) {
			if (!chan_operand(v, o))
				return 0;
			chan = 1;
		}
	}
	return 1 + chan;
}

/* A sum or mean over dims 2 and 3 (H, W) of a rank-4 float value (an SE block's pool): it
 * reads either layout (decompose's frame reduces dims 1 and 2 of [N, H, W, C]) and its
 * result, [N, C, 1, 1] or [N, C], is the same bytes in both. */
static int hw_reduce(const coil_graph *g, const coil_node *n)
{
	if ((n->op != OP_MEAN_DIM && n->op != OP_SUM_DIM) || n->args[3].kind != ARG_NONE || n->args[1].kind != ARG_INTS ||
	    n->args[1].n != 2)
		return 0;
	const coil_value *x = &g->vals[n->args[0].v[0]];
	if (x->rank != 4 || !dtype_is_float(x->dtype) || dtype_is_half(x->dtype))
		return 0;
	unsigned m = 0;
	for (int k = 0; k < 2; k++) {
		int64_t d = n->args[1].ints[k];
		m |= 1u << (d < 0 ? d + 4 : d);
	}
	return m == (1u << 2 | 1u << 3);
}

/* A permute between the layouts: (0, 2, 3, 1) of a rank-4 value is the value's bytes
 * when it is NHWC (4: it reads NHWC, its result is plain, as hw_reduce's), and
 * (0, 3, 1, 2) of a rank-4 value is its operand's bytes as an NHWC result (5: it reads
 * plain).  ConvNeXt's blocks and Swin's patch embedding put LayerNorms and linear
 * layers between such permutes. */
static int nhwc_permute(const coil_graph *g, const coil_node *n)
{
	int p[COIL_MAX_RANK];
	if (n->op != OP_PERMUTE || n->outs[0] < 0 || g->vals[n->outs[0]].rank != 4 || view_perm(g, n, p))
		return 0;
	return p[0] == 0 && p[1] == 2 && p[2] == 3 && p[3] == 1 ? 4 : p[0] == 0 && p[1] == 3 && p[2] == 1 && p[3] == 2 ? 5 : 0;
}

/* The operands of transparent node n that share its result's layout (not the per-channel
 * ones): into vs (capacity cap), their count. */
static int shared_operands(const coil_graph *g, const coil_node *n, int *vs, int cap)
{
	const coil_value *o = &g->vals[n->outs[0]];
	const op_info *oi = op_get(n->op);
	int nv = 0;
	if (n->op == OP_CAT) {
		for (int k = 0; k < n->args[0].n && nv < cap; k++)
			vs[nv++] = n->args[0].v[k];
		return nv;
	}
	if (split_channels(g, n) || n->op == OP_MB_JOIN) {
		vs[nv++] = n->args[0].v[0];
		return nv;
	}
	for (int a = 0; a < oi->nargs && nv < cap; a++) {
		if (n->args[a].kind != ARG_TENSOR || ((n->op == OP_NATIVE_BATCH_NORM || n->op == OP_BATCH_NORM) && a > 0))
			continue;
		const coil_value *v = &g->vals[n->args[a].v[0]];
		if (v->rank == 4 && dims_equal(v->shape, o->shape, 4))
			vs[nv++] = n->args[a].v[0];
	}
	return nv;
}

/* Whether node i may read value v (its tensor argument a) in NHWC: a
 * transparent node (its layout is settled with its result's), or a fusion's
 * node that takes it so: the head's src, the residual (or, int8, the
 * residual's dequantized value). */
static int nhwc_read(const coil_graph *g, const dn_plan *p, const char *ok, const int *owner, const char *tp, int i,
		     int a, int v)
{
	if (tp[i])
		return tp[i] != 5;
	int o = owner[i];
	if (o < 0 || !ok[o])
		return 0;
	const dn_fuse *f = &p->f[o];
	if (i == f->head)
		return a == 0;
	for (int q = 0; q < f->npost; q++)
		if (f->post[q].kind == DN_ADD_SAME && f->post[q].val == v)
			return 1;
	return f->q && f->q_rdq >= 0 && v == g->nodes[f->q_rdq].outs[0];
}

/* Layout: between consecutive 2-d convolutions activations stay NHWC
 * (oneDNN's fast kernels want it; NCHW costs a reorder on each side of each
 * conv).  A value is NHWC when it is the result of a 2-d conv or pool fusion
 * without broadcast operands, or of a transparent node (elementwise over one
 * shape: the residual add between int8 convs, a quantize, a ReLU6), no graph
 * output, and every reader takes it so: such a fusion reading it as its
 * input or residual, or a transparent node whose operands and result are all
 * NHWC; a residual and the dst it is added to agree (fixed point, only ever
 * turning NHWC off).  Transparent nodes compute in whichever layout their
 * operands share; a permute between the layouts (nhwc_permute) relabels the
 * same bytes; everything else, generated kernels included, sees NCHW. */
static void layout(pctx *c, dn_plan *p, int *owner)
{
	coil_graph *g = c->g;
	char *ok = calloc((size_t)p->nf + 1, 1), *nhwc = calloc((size_t)g->nvals + 1, 1);
	char *tp = calloc((size_t)g->nnodes + 1, 1);
	int *outv = calloc((size_t)p->nf + 1, sizeof(int));
	if (!ok || !nhwc || !outv || !tp)
		goto out;
	for (int j = 0; j < p->nf; j++) {
		dn_fuse *f = &p->f[j];
		outv[j] = g->nodes[f->last].outs[0];
		ok[j] = (f->is_conv || f->is_pool) && node_in(g, &g->nodes[f->head], 0)->rank == 4;
		for (int k = 0; k < f->npost; k++)
			ok[j] &= f->post[k].kind < DN_ADD_BCAST;
	}
	/* candidates: the fusions' results and the transparent nodes' (rank 4, no graph output) */
	for (int i = 0; i < g->nnodes; i++) {
		const coil_node *n = &g->nodes[i];
		if (owner[i] >= 0)
			continue;
		tp[i] = (char)transparent(c, n);
		if (!tp[i])
			tp[i] = hw_reduce(g, n) ? 3 /* reads NHWC; its result is no layout's */ : (char)nhwc_permute(g, n);
		if (tp[i] == 1 || tp[i] == 2 || tp[i] == 5)
			for (int k = 0; k < n->nout && (k == 0 || split_channels(g, n)); k++)
				if (n->outs[k] >= 0)
					nhwc[n->outs[k]] = 1;
	}
	for (int j = 0; j < p->nf; j++)
		nhwc[outv[j]] = ok[j];
	for (int i = 0; i < g->noutputs; i++)
		nhwc[g->outputs[i]] = 0;
	for (int changed = 1; changed;) {
		changed = 0;
		/* every read of an NHWC value is one that takes it so */
		for (int i = 0; i < g->nnodes; i++) {
			const coil_node *n = &g->nodes[i];
			const op_info *oi = op_get(n->op);
			for (int a = 0; a < oi->nargs; a++) {
				if (n->args[a].kind != ARG_TENSOR && n->args[a].kind != ARG_TENSORS)
					continue;
				for (int k = 0; k < n->args[a].n; k++) {
					int v = n->args[a].v[k];
					if (v >= 0 && nhwc[v] && !nhwc_read(g, p, ok, owner, tp, i, a, v))
						nhwc[v] = 0, changed = 1;
				}
			}
		}
		/* a transparent node's operands and result share one layout */
		for (int i = 0; i < g->nnodes; i++) {
			if (!tp[i] || tp[i] >= 3)
				continue;
			const coil_node *n = &g->nodes[i];
			/* its results: a split's every one */
			const int nr = split_channels(g, n) ? n->nout : 1;
			int vs[256], nv = shared_operands(g, n, vs, 256), all = 1;
			for (int k = 0; k < nr; k++)
				all &= n->outs[k] < 0 || nhwc[n->outs[k]];
			for (int k = 0; k < nv; k++)
				all &= nhwc[vs[k]];
			if (all)
				continue;
			for (int k = 0; k < nr; k++)
				if (n->outs[k] >= 0 && nhwc[n->outs[k]])
					nhwc[n->outs[k]] = 0, changed = 1;
			for (int k = 0; k < nv; k++)
				if (nhwc[vs[k]])
					nhwc[vs[k]] = 0, changed = 1;
		}
		/* a residual and the dst it is added to agree */
		for (int j = 0; j < p->nf; j++)
			for (int q = 0; q < p->f[j].npost; q++) {
				int r = p->f[j].post[q].val;
				if (p->f[j].post[q].kind == DN_ADD_SAME && nhwc[r] != nhwc[outv[j]]) {
					changed |= nhwc[r] || nhwc[outv[j]];
					nhwc[r] = nhwc[outv[j]] = 0;
				}
			}
	}
	for (int i = 0; i < g->nnodes; i++)
		p->cl[i] = tp[i] == 3 || tp[i] == 4 || (tp[i] == 2 && split_channels(g, &g->nodes[i])) ? nhwc[g->nodes[i].args[0].v[0]]
			: tp[i] && nhwc[g->nodes[i].outs[0]];
	for (int j = 0; j < p->nf; j++) {
		dn_fuse *f = &p->f[j];
		f->dst_nhwc = nhwc[outv[j]];
		f->src_nhwc = (f->is_conv || f->is_pool) && nhwc[f->q ? g->nodes[f->q_xdq].args[0].v[0] : g->nodes[f->head].args[0].v[0]];
		const coil_value *o = &g->vals[outv[j]];
		if (f->is_pool && dim_eq_const(&o->shape[2], 1) && dim_eq_const(&o->shape[3], 1))
			f->dst_nhwc = f->src_nhwc; /* [n, c, 1, 1]: both layouts are the same bytes */
	}
out:
	free(ok);
	free(nhwc);
	free(tp);
	free(outv);
}

int dn_enabled(void)
{
	const char *sw = getenv("COIL_DNNL");
	return !(sw && !strcmp(sw, "0"));
}

dn_plan *dn_plan_graph(coil_graph *g, const uint8_t *unfuse, unsigned features, coil_arena *a, coil_err *err)
{
	if (!dn_enabled())
		return NULL;
	pctx c = {.g = g, .unfuse = unfuse, .int8 = dn_int8(features), .avx512 = (features & F_AVX512) != 0};
	c.nuse = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int));
	c.user = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int));
	c.is_out = arena_alloc(a, (size_t)g->nvals + 1);
	dn_plan *p = arena_alloc(a, sizeof *p);
	if (!c.nuse || !c.user || !c.is_out || !p ||
	    !(p->at = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof(int))) ||
	    !(p->f = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof(dn_fuse))) ||
	    !(p->cl = arena_alloc(a, (size_t)g->nnodes + 1))) {
		coil_err_oom(err);
		return NULL;
	}
	count_uses(&c);
	for (int i = 0; i < g->nnodes; i++)
		p->at[i] = -1;
	memset(p->cl, 0, (size_t)g->nnodes + 1);
	p->nf = 0;
	int *owner = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof(int));
	if (!owner) {
		coil_err_oom(err);
		return NULL;
	}
	for (int i = 0; i < g->nnodes; i++) {
		if (p->at[i] != -1)
			continue;
		dn_fuse *f = &p->f[p->nf];
		memset(f, 0, sizeof *f);
		f->head = f->last = i;
		f->act = -1;
		if (!q_fusion(&c, i, f, p->at)) {
			if (!eligible(&c, i, f))
				continue;
			chain(&c, f, p->at);
		}
		p->at[f->last] = p->nf;
		if (f->last != f->head)
			p->at[f->head] = -2;
		p->nf++;
	}
	/* which fusion each node belongs to */
	for (int i = 0; i < g->nnodes; i++)
		owner[i] = -1;
	for (int j = 0; j < p->nf; j++) {
		owner[p->f[j].head] = owner[p->f[j].last] = j;
		/* the absorbed nodes between: walk the chain again */
		int cur = g->nodes[p->f[j].head].outs[0];
		while (c.nuse[cur] == 1 && !c.is_out[cur]) {
			int u = c.user[cur];
			if (u > p->f[j].last || (p->at[u] != -2 && u != p->f[j].last))
				break;
			owner[u] = j;
			if (u == p->f[j].last)
				break;
			cur = g->nodes[u].outs[0];
		}
	}
	const char *lay = getenv("COIL_DNNL_NHWC");
	if (!lay || strcmp(lay, "0"))
		layout(&c, p, owner);
	/* a pool with NCHW on both sides stays generated code (but for u8/i8, which the
	 * generated loops do lane by lane) */
	int live = 0;
	for (int j = 0; j < p->nf; j++) {
		dn_fuse *f = &p->f[j];
		if (f->is_pool && !f->src_nhwc && !f->dst_nhwc && dtype_is_float(node_in(g, &g->nodes[f->head], 0)->dtype))
			p->at[f->head] = -1;
		else
			live++;
	}
	return live ? p : NULL;
}

/* The IR node of graph value v, seen through reshapes: a materialized node
 * holds the same dense bytes as any reshape of it. */
static int dense_src(coil_ir *ir, int v)
{
	int n = ir->val_node[v];
	while (ir->nodes[n].op == IR_VIEW && ir->nodes[n].sub == V_RESHAPE)
		n = ir->nodes[n].src[0];
	return n;
}

int dn_decompose_node(coil_ir *ir, int i, int *res, coil_err *err)
{
	dn_plan *p = ir->dn;
	if (!p || p->at[i] == -1)
		return 0;
	if (p->at[i] == -2)
		return 2;
	dn_fuse *f = &p->f[p->at[i]];
	coil_graph *g = ir->g;
	const coil_node *h = &g->nodes[f->head];
	const coil_value *o = node_out(g, &g->nodes[f->last], 0);
	int *xs = arena_alloc(ir->arena, (3 + DN_MAX_POST + 5 * DN_MAX_FOLD) * sizeof(int)), nx = 0;
	if (!xs)
		return coil_err_oom(err);
	/* the head's tensor inputs (a constant B as its parameter) */
	const op_info *oi = op_get(h->op);
	for (int a = 0; a < oi->nargs; a++) {
		int v = tensor_arg(h, a);
		if (v < 0)
			continue;
		if (!f->is_conv && a == (h->op == OP_ADDMM ? 2 : 1) && f->b_param >= 0)
			v = f->b_param;
		if (f->q == 2 && !f->is_conv && a == (h->op == OP_ADDMM)) /* int8 dynamic: the f32 input (same bytes) */
			v = dyn_src(g, f->q_xdq);
		else if (f->q && v == g->nodes[f->q_xdq].outs[0]) /* int8: the quantized input */
			v = g->nodes[f->q_xdq].args[0].v[0];
		else if (f->q && f->is_conv && a == 1)
			v = g->nodes[f->q_wdq].args[0].v[0];
		xs[nx++] = dense_src(ir, v);
	}
	for (int k = 0; k < f->npost; k++)
		if (f->post[k].val >= 0)
			xs[nx++] = dense_src(ir, f->post[k].val);
	if (f->q && g->nodes[f->q_wdq].op == OP_DEQUANTIZE_PC) /* the weight's scales, last */
		xs[nx++] = dense_src(ir, g->nodes[f->q_wdq].args[1].v[0]);
	ir_node e = {.op = IR_EXTERN, .dtype = o->dtype, .rank = o->rank, .index = 0, .nx = nx, .xsrc = xs,
		     .gnode = f->head};
	memcpy(e.shape, o->shape, sizeof e.shape);
	const int cl = f->dst_nhwc && o->rank == 4;
	if (cl) /* NHWC bytes: the node is [N, H, W, C], the value an [N, C, H, W] reshape of it */
		e.shape[1] = o->shape[2], e.shape[2] = o->shape[3], e.shape[3] = o->shape[1];
	int r = ir_add(ir, &e, err);
	if (r < 0)
		return -1;
	if (cl) {
		ir_node v = {.op = IR_VIEW, .sub = V_RESHAPE, .dtype = o->dtype, .nsrc = 1, .src = {r}, .rank = 4,
			     .gnode = f->head};
		memcpy(v.shape, o->shape, sizeof v.shape);
		if ((r = ir_add(ir, &v, err)) < 0)
			return -1;
	}
	for (int k = 0; k < g->nodes[f->last].nout; k++)
		res[k] = r; /* a max pool's unread indices: dead, dropped by fuse */
	return 1;
}
