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
 * dequantize nodes left unread are dropped.  A quantize of a cat of other
 * values moves into the cat's inputs first (push_into_cats). */
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
 * alias of its result; q(dq(x)) alike an alias of x.  1 done, 0 not this
 * pattern, -1 error. */
static int requant(coil_graph *g, coil_node *q, const int *uses, coil_arena *a, coil_err *err)
{
	int v = q->args[0].v[0], pi = producer(g, v), x;
	if (pi >= 0 && (x = same_dq(g, v, q)) >= 0) {
		coil_arg *qa = node_reargs(q, OP_ALIAS, 0, a);
		if (!qa || arg_tensor(&qa[0], x, a))
			return coil_err_oom(err);
		return infer_node(g, q, err) ? -1 : 1;
	}
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

/* The quantize that is the only reader of cat node c's result, or -1. */
static int cat_quantize(const coil_graph *g, const coil_node *c, const int *uses, const int *reader)
{
	int v = c->outs[0];
	if (c->op != OP_CAT || uses[v] != 1 || reader[v] < 0 || c->args[0].n > 64)
		return -1;
	const coil_node *q = &g->nodes[reader[v]];
	if (q->op != OP_QUANTIZE_PT || q->args[0].v[0] != v)
		return -1;
	for (int j = 0; j < c->args[0].n; j++)
		if (c->args[0].v[j] < 0 || !dtype_is_float(g->vals[c->args[0].v[j]].dtype))
			return -1;
	return reader[v];
}

/*   quantize(cat(v_1, .. v_k))  ->  cat(quantize(v_1), .. quantize(v_k))
 * (the same quantization; elementwise, so the same bits): cat then moves u8,
 * and a v_j dequantized alike drops its pair (requant).  densenet's FX model
 * concatenates features of different quantizations before each layer.  The
 * node list is rebuilt with the new quantizes before their cat. */
static int push_into_cats(coil_graph *g, int *uses, coil_arena *a, coil_err *err)
{
	int *reader = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int)), extra = 0;
	if (!reader)
		return coil_err_oom(err);
	graph_node_reads(g, NULL, reader);
	for (int i = 0; i < g->nnodes; i++)
		if (cat_quantize(g, &g->nodes[i], uses, reader) >= 0)
			extra += g->nodes[i].args[0].n;
	if (!extra)
		return 0;
	coil_node *src = g->nodes, *nodes = arena_alloc(a, (size_t)(g->nnodes + extra + 1) * sizeof *nodes);
	coil_value *vals = arena_alloc(a, (size_t)(g->nvals + extra + 1) * sizeof *vals);
	char *aliased = arena_alloc(a, (size_t)g->nnodes + 1);
	if (!nodes || !vals || !aliased)
		return coil_err_oom(err);
	memcpy(vals, g->vals, (size_t)g->nvals * sizeof *vals);
	memset(aliased, 0, (size_t)g->nnodes + 1);
	const int n0 = g->nnodes;
	g->vals = vals, g->capvals = g->nvals + extra, g->nodes = nodes, g->nnodes = 0;
	for (int i = 0; i < n0; i++) {
		coil_node n = src[i];
		int qi = cat_quantize(g, &n, uses, reader);
		if (qi >= 0) {
			const coil_node *q = &src[qi];
			int *vs = arena_alloc(a, (size_t)(n.args[0].n + 1) * sizeof(int));
			coil_arg *cargs = arena_alloc(a, (size_t)(op_get(OP_CAT)->nargs + 1) * sizeof *cargs);
			if (!vs || !cargs)
				return coil_err_oom(err);
			for (int j = 0; j < n.args[0].n; j++) {
				coil_node m = {.id = q->id, .op = OP_QUANTIZE_PT, .nout = 1};
				coil_arg *qa = arena_alloc(a, (size_t)(op_get(OP_QUANTIZE_PT)->nargs + 1) * sizeof *qa);
				int *out = arena_alloc(a, sizeof(int));
				if (!qa || !out)
					return coil_err_oom(err);
				memcpy(qa, q->args, (size_t)op_get(OP_QUANTIZE_PT)->nargs * sizeof *qa);
				if (arg_tensor(&qa[0], n.args[0].v[j], a))
					return coil_err_oom(err);
				*out = g->nvals;
				vals[g->nvals++] = (coil_value){.kind = VAL_NODE, .index = g->nnodes, .out = 0};
				m.args = qa, m.outs = out;
				nodes[g->nnodes] = m;
				if (infer_node(g, &nodes[g->nnodes], err))
					return -1;
				g->nnodes++;
				vs[j] = *out;
			}
			memcpy(cargs, n.args, (size_t)op_get(OP_CAT)->nargs * sizeof *cargs);
			cargs[0].v = vs;
			n.args = cargs;
			aliased[qi] = 1;
		}
		if (aliased[i]) { /* the quantize the cat took in: an alias of its result */
			coil_arg *qa = node_reargs(&n, OP_ALIAS, 0, a);
			if (!qa || arg_tensor(&qa[0], src[i].args[0].v[0], a))
				return coil_err_oom(err);
		}
		nodes[g->nnodes] = n;
		for (int k = 0; k < n.nout; k++)
			if (n.outs[k] >= 0)
				vals[n.outs[k]].index = g->nnodes;
		if ((qi >= 0 || aliased[i]) && infer_node(g, &nodes[g->nnodes], err))
			return -1;
		g->nnodes++;
	}
	return 1;
}

int ir_requant(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp, *g;
	int cand = 0;
	for (int i = 0; i < g0->nnodes && !cand; i++)
		cand = g0->nodes[i].op == OP_QUANTIZE_PT;
	if (!cand)
		return 0;
	if (!(g = graph_copy(g0, a)))
		return coil_err_oom(err);
	int changed = 0, *uses = arena_alloc(a, (size_t)(g0->nvals + 1) * sizeof(int));
	if (!uses)
		return coil_err_oom(err);
	graph_count_uses(g, uses);
	int pushed = push_into_cats(g, uses, a, err);
	if (pushed < 0)
		return -1;
	if (pushed) {
		changed = 1;
		if (!(uses = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int))))
			return coil_err_oom(err);
	}
	graph_count_uses(g, uses);
	int r = graph_rewrite_each(g, uses, OP_QUANTIZE_PT, OP_QUANTIZE_PT, requant, a, err);
	if (r < 0)
		return -1;
	return graph_rewrite_done(gp, g, changed | r, uses, a, err);
}
