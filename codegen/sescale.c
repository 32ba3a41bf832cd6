/* sescale: a graph rewrite ahead of lowering (after scatter, before fold).
 *
 *   convolution(y * s, W, b)  ->  permute(bmm(y', s' * W'), back) + b
 *
 * where the convolution is 1x1 (stride 1, no padding, one group), y is
 * [N, C, H, W], s a squeeze-excite scale of [N | 1, C, 1, 1] and their product
 * read by the convolution alone: y' = y as [N, H*W, C] (the bytes of an NHWC
 * y: no copy), W' = W as [C, O] (computed at create: fold.c), and s' * W'
 * the weights scaled per image, [N, C, O].  The scale then costs O * C
 * multiplies an image instead of a pass over y (read and written at C x H x
 * W: efficientnet's are the largest tensors of their blocks), and the
 * convolution is a matrix product of the same flops.  Taken where that pass
 * is the larger: H * W >= 4 * O (the scaled weights are made per call) and
 * 2 * O <= C (the bias, batch norm and residual after the product are a pass
 * over its O channels, which oneDNN's post-ops took before), the pass at least
 * SE_MIN_ELEMS, y coming from a convolution through ops that keep its shape
 * (so it is NHWC already and y' is a view), f32 and static sizes.
 * COIL_SE_SCALE=0 turns it off. */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

typedef struct sctx {
	coil_graph *g;
	coil_arena *a;
	coil_err *err;
	const char *id;
	int bad;        /* a shape rule refused a node (err says why) */
} sctx;

static const coil_node *producer(const coil_graph *g, int v)
{
	return v >= 0 && g->vals[v].kind == VAL_NODE && g->vals[v].index >= 0 ? &g->nodes[g->vals[v].index] : NULL;
}

static int off(void)
{
	const char *e = getenv("COIL_SE_SCALE");
	return e && !strcmp(e, "0");
}

/* Every entry of an int[] argument is v (an empty list counts as v). */
static int ints_all(const coil_arg *a, int64_t v)
{
	for (int i = 0; a->kind == ARG_INTS && i < a->n; i++)
		if (a->ints[i] != v)
			return 0;
	return a->kind == ARG_INTS || a->kind == ARG_NONE;
}

static int cdim(const coil_value *x, int d, int64_t *k)
{
	return dim_is_const(&x->shape[d], k);
}

/* y (the [N, C, H, W] operand of the product) comes from a convolution through
 * at most 8 ops whose first operand has their result's shape. */
static int from_conv(const coil_graph *g, int y)
{
	for (int hops = 0; hops < 8; hops++) {
		const coil_node *p = producer(g, y);
		if (!p)
			return 0;
		if (p->op == OP_CONVOLUTION)
			return 1;
		if (p->args[0].kind != ARG_TENSOR)
			return 0;
		const int x = p->args[0].v[0];
		const coil_value *a = &g->vals[x], *b = &g->vals[y];
		int same = a->rank == b->rank && a->dtype == b->dtype;
		for (int i = 0; same && i < a->rank; i++)
			same = dim_eq(&a->shape[i], &b->shape[i]);
		if (!same)
			return 0;
		y = x;
	}
	return 0;
}

/* --- building (each -1 on an operand of -1: a failure before it) ---------------- */

static coil_node *node(sctx *c, coil_op op, int out)
{
	return graph_append(c->g, c->a, op, c->id, out);
}

static int done(sctx *c, coil_node *n)
{
	if (n && infer_node(c->g, n, c->err))
		c->bad = 1, n = NULL;
	return n ? n->outs[0] : -1;
}

/* op(v, dims) for reshape and expand: an int list of static dims */
static int shaped(sctx *c, coil_op op, int v, int rank, const int64_t *dims, int out)
{
	coil_node *n = v < 0 ? NULL : node(c, op, out);
	if (!n || arg_tensor(&n->args[0], v, c->a))
		return -1;
	coil_arg *a = &n->args[1];
	a->kind = ARG_DIMS, a->n = rank;
	a->dims = arena_alloc(c->a, (size_t)rank * sizeof *a->dims);
	a->ints = arena_alloc(c->a, (size_t)rank * sizeof *a->ints);
	if (!a->dims || !a->ints)
		return -1;
	for (int i = 0; i < rank; i++)
		a->ints[i] = dims[i], a->dims[i] = dim_const(dims[i]);
	if (op == OP_EXPAND)
		n->args[2] = (coil_arg){.kind = ARG_BOOL, .i = 0};
	return done(c, n);
}

static int permute(sctx *c, int v, int rank, const int64_t *perm, int out)
{
	coil_node *n = v < 0 ? NULL : node(c, OP_PERMUTE, out);
	if (!n || arg_tensor(&n->args[0], v, c->a))
		return -1;
	coil_arg *a = &n->args[1];
	a->kind = ARG_INTS, a->n = rank;
	if (!(a->ints = arena_alloc(c->a, (size_t)rank * sizeof *a->ints)))
		return -1;
	memcpy(a->ints, perm, (size_t)rank * sizeof *perm);
	return done(c, n);
}

static int binary(sctx *c, coil_op op, int x, int y, int out)
{
	coil_node *n = x < 0 || y < 0 ? NULL : node(c, op, out);
	if (!n || arg_tensor(&n->args[0], x, c->a) || arg_tensor(&n->args[1], y, c->a))
		return -1;
	if (op == OP_ADD)
		n->args[2] = (coil_arg){.kind = ARG_SCALAR, .is_int = 1, .i = 1, .f = 1};
	return done(c, n);
}

/* --- the rule ------------------------------------------------------------------- */

/* The pass saved must outweigh the kernels added (the weights' scaling, the
 * bias and batch norm after the product): 1 MB read and written.
 * mobilenet_v3_small's five blocks of 96-240 x 14 x 14 ran 7% slower so. */
#define SE_MIN_ELEMS (128 << 10)

typedef struct match {
	int y, s, w, b;
	int64_t n, ns, ch, h, wd, o;
} match;

static int match_conv(const coil_graph *g, const coil_node *n, const int *uses, match *m)
{
	if (n->nout < 1 || n->outs[0] < 0)
		return 0;
	const coil_value *out = &g->vals[n->outs[0]];
	if (out->dtype != COIL_F32 || out->rank != 4 || n->args[0].kind != ARG_TENSOR || n->args[1].kind != ARG_TENSOR ||
	    n->args[6].i || n->args[8].i != 1 || !ints_all(&n->args[3], 1) || !ints_all(&n->args[4], 0) ||
	    !ints_all(&n->args[5], 1))
		return 0;
	const int u = n->args[0].v[0];
	const coil_node *p = producer(g, u);
	if (!p || p->op != OP_MUL || uses[u] != 1 || p->args[0].kind != ARG_TENSOR || p->args[1].kind != ARG_TENSOR)
		return 0;
	const coil_value *w = &g->vals[n->args[1].v[0]];
	int64_t k0, k1;
	if (w->rank != 4 || !cdim(w, 0, &m->o) || !cdim(w, 2, &k0) || !cdim(w, 3, &k1) || k0 != 1 ||
	    k1 != 1 || w->dtype != COIL_F32)
		return 0;
	m->w = n->args[1].v[0];
	m->b = n->args[2].kind == ARG_TENSOR ? n->args[2].v[0] : -1;
	for (int side = 0; side < 2; side++) {
		const int y = p->args[side].v[0], s = p->args[1 - side].v[0];
		const coil_value *yv = &g->vals[y], *sv = &g->vals[s], *uv = &g->vals[u];
		int64_t one2, one3, sn;
		if (yv->rank != 4 || sv->rank != 4 || yv->dtype != COIL_F32 || sv->dtype != COIL_F32 ||
		    !cdim(yv, 0, &m->n) || !cdim(yv, 1, &m->ch) || !cdim(yv, 2, &m->h) ||
		    !cdim(yv, 3, &m->wd) || !cdim(sv, 0, &sn) || !cdim(sv, 2, &one2) ||
		    !cdim(sv, 3, &one3) || one2 != 1 || one3 != 1 || !dim_eq(&sv->shape[1], &yv->shape[1]) ||
		    (sn != m->n && sn != 1))
			continue;
		int same = 1;
		for (int i = 0; i < 4; i++)
			same &= dim_eq(&uv->shape[i], &yv->shape[i]);
		if (!same || m->h * m->wd < 4 * m->o || 2 * m->o > m->ch || m->n * m->ch * m->h * m->wd < SE_MIN_ELEMS ||
		    !from_conv(g, y))
			continue;
		m->y = y, m->s = s, m->ns = sn;
		return 1;
	}
	return 0;
}

/* The nodes of the rewrite, the last writing the convolution's result. */
static int rewrite(sctx *c, const coil_node *n, const match *m)
{
	const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2}, tr[2] = {1, 0};
	const int64_t rows[3] = {m->n, m->h * m->wd, m->ch}, wco[2] = {m->o, m->ch}, s3[3] = {m->ns, m->ch, 1};
	const int64_t ws[3] = {m->n, m->ch, m->o}, t4[4] = {m->n, m->h, m->wd, m->o}, b3[3] = {m->o, 1, 1};
	const int out = n->outs[0];
	int y2 = shaped(c, OP_RESHAPE, permute(c, m->y, 4, to_nhwc, -1), 3, rows, -1);
	int wt = permute(c, shaped(c, OP_RESHAPE, m->w, 2, wco, -1), 2, tr, -1);
	int sw = binary(c, OP_MUL, shaped(c, OP_RESHAPE, m->s, 3, s3, -1), wt, -1);
	if (sw >= 0 && m->ns != m->n)
		sw = shaped(c, OP_EXPAND, sw, 3, ws, -1);
	if (y2 < 0 || wt < 0 || sw < 0)
		return -1;
	int t = shaped(c, OP_RESHAPE, binary(c, OP_BMM, y2, sw, -1), 4, t4, -1);
	if (t < 0)
		return -1;
	if (m->b < 0)
		return permute(c, t, 4, to_nchw, out) < 0 ? -1 : 0;
	int r = permute(c, t, 4, to_nchw, -1), b = shaped(c, OP_RESHAPE, m->b, 3, b3, -1);
	return r < 0 || b < 0 || binary(c, OP_ADD, r, b, out) < 0 ? -1 : 0;
}

#define SE_NODES 12 /* nodes (and values) a rewrite adds at most */

int ir_se_scale(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp;
	if (off())
		return 0;
	int *uses = arena_alloc(a, (size_t)(g0->nvals + 1) * sizeof *uses);
	if (!uses)
		return coil_err_oom(err);
	graph_count_uses(g0, uses);
	int cand = 0;
	match m;
	for (int i = 0; i < g0->nnodes; i++)
		cand += g0->nodes[i].op == OP_CONVOLUTION && match_conv(g0, &g0->nodes[i], uses, &m);
	if (!cand)
		return 0;
	coil_graph *g = graph_copy(g0, a);
	const int extra = cand * SE_NODES;
	coil_node *nodes = arena_alloc(a, (size_t)(g0->nnodes + extra + 1) * sizeof *nodes);
	coil_value *vals = arena_alloc(a, (size_t)(g0->nvals + extra + 1) * sizeof *vals);
	int *uses2 = arena_alloc(a, (size_t)(g0->nvals + extra + 1) * sizeof *uses2);
	if (!g || !nodes || !vals || !uses2)
		return coil_err_oom(err);
	memcpy(vals, g0->vals, (size_t)g0->nvals * sizeof *vals);
	g->vals = vals, g->capvals = g0->nvals + extra, g->nodes = nodes, g->nnodes = 0;
	sctx c = {g, a, err, NULL, 0};
	for (int i = 0; i < g0->nnodes; i++) {
		const coil_node *n = &g0->nodes[i];
		if (n->op == OP_CONVOLUTION && match_conv(g0, n, uses, &m)) {
			c.id = n->id;
			if (rewrite(&c, n, &m))
				return c.bad ? -1 : coil_err_oom(err);
			continue;
		}
		nodes[g->nnodes] = *n;
		for (int k = 0; k < n->nout; k++)
			if (n->outs[k] >= 0)
				vals[n->outs[k]].index = g->nnodes;
		g->nnodes++;
	}
	return graph_rewrite_done(gp, g, 1, uses2, a, err);
}
