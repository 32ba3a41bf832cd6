/* quant: a graph rewrite ahead of lowering (after scatter, before fold).
 *
 *   quantize(op(dequantize(x, s, z)), s, z)  ->  op(x)
 *
 * for ops that only move or select data (max pooling, views, cat, stack,
 * padding, nearest upsampling, roll): op commutes with the monotone affine
 * map, and quantize(dequantize(x)) is x for the same scale, zero point and
 * dtype (|k * s * (1/s) - k| stays far below half a step for |k| <= 2^16), so
 * both sides are equal to the bit.  The op then reads and writes u8/i8, a
 * quarter of the bytes, and the dequantized f32 copy between is gone (the
 * FX reference flow puts a q/dq pair around each of them).  A padding value v
 * becomes quantize(v).  The quantize node becomes an alias of op's result;
 * dequantize nodes left unread are dropped. */
#include <math.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

static int producer(const coil_graph *g, int v)
{
	return v >= 0 && g->vals[v].kind == VAL_NODE ? g->vals[v].index : -1;
}

static int moves_only(const coil_node *n)
{
	switch (n->op) {
	case OP_MAX_POOL2D: case OP_MAX_POOL2D_WI: case OP_MAX_POOL3D: case OP_MAX_POOL3D_WI:
	case OP_ADAPTIVE_MAX_POOL2D: case OP_CAT: case OP_STACK: case OP_CONSTANT_PAD_ND:
	case OP_UPSAMPLE_NEAREST2D: case OP_UPSAMPLE_NEAREST2D_VEC: case OP_ROLL:
		return 1;
	case OP_DROPOUT: case OP_NATIVE_DROPOUT:
		return 0;
	default:
		return op_get(n->op)->kind == VIEW && op_get(n->op)->nres == 1;
	}
}

/* Whether value v is dequantize_per_tensor(x) with q's scale, zero point and
 * dtype and a range inside q's (so that q(dq(x)) = x): x, else -1. */
static int same_dq(const coil_graph *g, int v, const coil_node *q)
{
	int p = producer(g, v);
	if (p < 0)
		return -1;
	const coil_node *d = &g->nodes[p];
	if (d->op != OP_DEQUANTIZE_PT || (float)d->args[1].f != (float)q->args[1].f || d->args[2].i != q->args[2].i ||
	    d->args[5].i != q->args[5].i || d->args[3].i < q->args[3].i || d->args[4].i > q->args[4].i)
		return -1;
	return d->args[0].v[0];
}

/* q(n(dq(..))) as above: n rewritten to read the quantized values, q made an
 * alias of its result.  1 done, 0 not this pattern, -1 error. */
static int requant(coil_graph *g, coil_node *q, const int *uses, coil_arena *a, coil_err *err)
{
	int v = q->args[0].v[0], pi = producer(g, v);
	if (pi < 0 || uses[v] != 1)
		return 0;
	coil_node *n = &g->nodes[pi];
	if (!moves_only(n))
		return 0;
	for (int k = 1; k < n->nout; k++)
		if (n->outs[k] >= 0 && uses[n->outs[k]])
			return 0; /* a max pool's indices are read */
	/* every data input dequantized alike: arg 0, a tensor or a list */
	coil_arg *in = &n->args[0];
	int xs[64];
	if ((in->kind != ARG_TENSOR && in->kind != ARG_TENSORS) || in->n > 64)
		return 0;
	for (int j = 0; j < in->n; j++)
		if ((xs[j] = same_dq(g, in->v[j], q)) < 0)
			return 0;
	const op_info *oi = op_get(n->op);
	for (int k = 1; k < oi->nargs; k++)
		if (n->args[k].kind == ARG_TENSOR || n->args[k].kind == ARG_TENSORS)
			return 0;
	coil_arg *args = node_reargs(n, n->op, oi->nargs, a);
	int *vs = arena_alloc(a, (size_t)(in->n + 1) * sizeof(int));
	if (!args || !vs)
		return coil_err_oom(err);
	memcpy(vs, xs, (size_t)in->n * sizeof(int));
	args[0].v = vs;
	if (n->op == OP_CONSTANT_PAD_ND && args[2].kind == ARG_SCALAR) { /* the padding value, quantized */
		const float s = (float)q->args[1].f;
		double pv = rintf((float)args[2].f * (1.0f / s)) + (double)q->args[2].i;
		pv = fmax(fmin(pv, (double)q->args[4].i), (double)q->args[3].i);
		args[2] = (coil_arg){.kind = ARG_SCALAR, .is_int = 1, .i = (int64_t)pv, .f = pv};
	}
	if (infer_node(g, n, err))
		return -1;
	int out = n->outs[0];
	coil_arg *qa = node_reargs(q, OP_ALIAS, 0, a);
	if (!qa || arg_tensor(&qa[0], out, a))
		return coil_err_oom(err);
	return infer_node(g, q, err) ? -1 : 1;
}

int ir_requant(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp, *g;
	int cand = 0;
	for (int i = 0; i < g0->nnodes && !cand; i++)
		cand = g0->nodes[i].op == OP_QUANTIZE_PT;
	if (!cand)
		return 0;
	int *uses = arena_alloc(a, (size_t)(g0->nvals + 1) * sizeof(int));
	if (!(g = graph_copy(g0, a)) || !uses)
		return coil_err_oom(err);
	int changed = 0;
	graph_count_uses(g, uses);
	for (int i = 0; i < g->nnodes; i++) {
		if (g->nodes[i].op != OP_QUANTIZE_PT)
			continue;
		int r = requant(g, &g->nodes[i], uses, a, err);
		if (r < 0)
			return -1;
		if (r) {
			changed = 1;
			graph_count_uses(g, uses);
		}
	}
	if (!changed)
		return 0;
	if (graph_drop_dead(g, uses, a))
		return coil_err_oom(err);
	*gp = g;
	return 0;
}
