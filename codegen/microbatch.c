/* microbatch: a graph of static sizes whose images never meet, compiled for
 * c of its N images and run N / c times (the artifact's run loops over the
 * chunks, each input's and output's images at their offsets: emit_abi.c).
 *
 * At batch 8 a mobile network's activations (mobilenet_v2: 38 MB after its
 * first expansion) stream through memory between every two ops, where two
 * images' stay in the caches; the params, read once a run, are read N / c
 * times instead.  On a 2-vCPU Zen 4 EPYC, batch 8, one thread, in chunks of
 * 2 against the whole batch (paired): mobilenet_v2 90.5 -> 68.6 ms,
 * mnasnet1_0 84.8 -> 65.1, mobilenet_v3_large 65.7 -> 54.0, squeezenet1_1
 * 70.3 -> 55.0, efficientnet_b0 112.0 -> 101.6, regnet_y_800mf 151.7 ->
 * 139.0, densenet121 483 -> 454, shufflenet_v2_x1_5 61.6 -> 58.5; two threads
 * 1.02-1.13x for those; but resnet50, whose 100 MB of params outweigh an
 * image's activations, 532 -> 555 at one thread, resnet18 at two 110 ->
 * 123, regnet_x_400mf at two 35.6 -> 38.6.  The rule: chunks of MB_CHUNK
 * where an image's activations (every value read that depends on the
 * inputs, bytes) are at least MB_MIN_RATIO times the params' bytes
 * (mobilenet_v2 5.6, mnasnet1_0 3.6, mobilenet_v3_large 2.5; resnet50 1.5,
 * regnet_x_400mf 1.8, resnext50 1.9, resnet18 0.7), the batch at least
 * 2 x MB_CHUNK and a multiple of it.  COIL_MICROBATCH=0 in the compiler's
 * environment turns it off, =c forces chunks of c where the graph allows.
 *
 * Separable: every input has N at dim 0, and every value computed from an
 * input has N at dim 0 with image i's elements made from image i's alone;
 * values computed from params and constants only are left as they are and
 * may not reach a computed one at dim 0 (they would mix images).  Each op
 * that reads a computed value must be one known to keep images apart (the
 * pointwise ops, reductions and softmax away from dim 0, convolutions,
 * pooling, inference batch norm, layer norm of the trailing dims, matrix
 * products of a computed left side, views that keep dim 0, cat, split, pad,
 * transposes away from dim 0, ...); anything else keeps the graph whole.
 * The rewrite (on a copy) sets the inputs' dim 0 to c, dim 0 of the sizes
 * views and expands are given, and infers every computed node again; that
 * every computed value then has c at dim 0 is checked, else the graph is
 * kept whole. */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

#define MB_CHUNK 2        /* images a run of the rule's */
#define MB_MIN_RATIO 2.0  /* an image's activations at least this times the params' bytes */

typedef struct mctx {
	coil_graph *g;
	int64_t n;
	char *dep; /* per value: computed from an input */
} mctx;

static int is_dep(const mctx *m, const coil_arg *a) { return a->kind == ARG_TENSOR && a->v[0] >= 0 && m->dep[a->v[0]]; }

/* Dim 0 of value v is the batch (N). */
static int batch0(const mctx *m, int v)
{
	const coil_value *x = &m->g->vals[v];
	return x->rank >= 1 && dim_eq_const(&x->shape[0], m->n);
}

/* A value computed from params and constants only may broadcast into a computed one
 * of rank r without reaching its dim 0. */
static int free_ok(const mctx *m, int v, int r)
{
	const coil_value *x = &m->g->vals[v];
	return x->rank < r || dim_eq_const(&x->shape[0], 1);
}

/* d normalized for rank r; -1 if out of range */
static int64_t ndim(int64_t d, int r) { return d < 0 ? d + r : d; }

/* Integer argument i of n (ARG_INT / ARG_SCALAR integer), or dflt */
static int64_t iarg(const coil_node *n, int i, int64_t dflt)
{
	const coil_arg *a = &n->args[i];
	if (a->kind == ARG_INT || a->kind == ARG_BOOL || (a->kind == ARG_SCALAR && a->is_int))
		return a->i;
	return dflt;
}

/* Whether node n, some of whose tensor operands are computed, keeps images apart. */
static int node_ok(const mctx *m, const coil_node *n)
{
	coil_graph *g = m->g;
	const op_info *oi = op_get(n->op);
	const int r0 = n->args[0].kind == ARG_TENSOR ? g->vals[n->args[0].v[0]].rank : 0;
	const int out_r = n->nout > 0 && n->outs[0] >= 0 ? g->vals[n->outs[0]].rank : 0;
	/* every computed tensor operand has the batch at dim 0; others as the op allows below */
	for (int i = 0; i < oi->nargs; i++) {
		const coil_arg *a = &n->args[i];
		if (a->kind == ARG_TENSORS) {
			for (int k = 0; k < a->n; k++)
				if (a->v[k] >= 0 && m->dep[a->v[k]] && !batch0(m, a->v[k]))
					return 0;
			continue;
		}
		if (is_dep(m, a) && !batch0(m, a->v[0]))
			return 0;
	}
	if (oi->kind == PW) {
		for (int i = 0; i < oi->nargs; i++) {
			const coil_arg *a = &n->args[i];
			if (a->kind == ARG_TENSORS)
				return 0;
			if (a->kind != ARG_TENSOR || a->v[0] < 0)
				continue;
			if (m->dep[a->v[0]] ? g->vals[a->v[0]].rank != out_r : !free_ok(m, a->v[0], out_r))
				return 0;
		}
		return 1;
	}
	if (oi->kind == RED) {
		unsigned mask;
		int keep;
		return n->args[0].kind == ARG_TENSOR && is_dep(m, &n->args[0]) && reduce_dims(g, n, &mask, &keep) == 0 &&
		       !(mask & 1u);
	}
	switch (n->op) {
	/* the same element for element, or per image */
	case OP_ALIAS: case OP_DETACH: case OP_CLONE: case OP_CONTIGUOUS: case OP_LIFT_FRESH_COPY:
	case OP_MAX_POOL2D_WI: case OP_MAX_POOL2D: case OP_AVG_POOL2D: case OP_MAX_POOL3D_WI: case OP_MAX_POOL3D:
	case OP_AVG_POOL3D: case OP_ADAPTIVE_AVG_POOL2D_: case OP_ADAPTIVE_AVG_POOL2D: case OP_ADAPTIVE_MAX_POOL2D:
	case OP_UPSAMPLE_BILINEAR2D_VEC: case OP_UPSAMPLE_BILINEAR2D: case OP_UPSAMPLE_NEAREST2D_VEC:
	case OP_UPSAMPLE_NEAREST2D: case OP_CHANNEL_SHUFFLE:
		for (int i = 1; i < oi->nargs; i++)
			if (is_dep(m, &n->args[i]))
				return 0;
		return is_dep(m, &n->args[0]);
	case OP_PIXEL_SHUFFLE: case OP_PIXEL_UNSHUFFLE: /* [*, C, H, W]: per image where a batch dim leads */
		return is_dep(m, &n->args[0]) && r0 >= 4;
	case OP_DROPOUT: /* inference's: the identity */
		return !iarg(n, 2, 1);
	case OP_CONVOLUTION: /* a computed input; weight and bias not */
		return is_dep(m, &n->args[0]) && !is_dep(m, &n->args[1]) && !is_dep(m, &n->args[2]);
	case OP_NATIVE_BATCH_NORM: case OP_BATCH_NORM: /* inference: running statistics */
		for (int i = 1; i < 5; i++)
			if (is_dep(m, &n->args[i]))
				return 0;
		return !iarg(n, 5, 1);
	case OP_NATIVE_LAYER_NORM: /* the trailing dims, not dim 0 */
		return !is_dep(m, &n->args[2]) && !is_dep(m, &n->args[3]) && n->args[1].n < r0;
	case OP_SOFTMAX: case OP_SOFTMAX_: case OP_LOG_SOFTMAX: case OP_LOG_SOFTMAX_:
		return ndim(iarg(n, 1, 0), r0) != 0;
	case OP_MM: /* rows of a computed left side by a fixed right */
		return is_dep(m, &n->args[0]) && !is_dep(m, &n->args[1]);
	case OP_ADDMM:
		return is_dep(m, &n->args[1]) && !is_dep(m, &n->args[2]) &&
		       (is_dep(m, &n->args[0]) ? g->vals[n->args[0].v[0]].rank == 2 : free_ok(m, n->args[0].v[0], 2));
	case OP_BMM: /* image by image; a fixed side would hold N of its own */
		return is_dep(m, &n->args[0]) && is_dep(m, &n->args[1]);
	case OP_VIEW: case OP_RESHAPE: case OP_UNSAFE_VIEW: case OP_EXPAND: {
		/* dim 0 kept (its size given as N or -1; rewritten) */
		const coil_arg *s = &n->args[1];
		return is_dep(m, &n->args[0]) && s->n >= 1 && (s->kind == ARG_INTS || s->kind == ARG_DIMS) && s->ints &&
		       (s->ints[0] == m->n || (s->ints[0] == -1 && n->op != OP_EXPAND)) && out_r >= 1;
	}
	case OP_FLATTEN:
		return ndim(iarg(n, 1, 0), r0) >= 1;
	case OP_PERMUTE:
		return n->args[1].kind == ARG_INTS && n->args[1].n >= 1 && ndim(n->args[1].ints[0], r0) == 0;
	case OP_TRANSPOSE:
		return ndim(iarg(n, 1, 0), r0) != 0 && ndim(iarg(n, 2, 0), r0) != 0;
	case OP_UNSQUEEZE:
		return ndim(iarg(n, 1, 0), out_r) != 0;
	case OP_SQUEEZE:
		return 1; /* dim 0 is N > 1: not squeezed */
	case OP_SQUEEZE_DIM: case OP_SELECT: case OP_SLICE: case OP_UNBIND:
		return ndim(iarg(n, 1, 0), r0) != 0;
	case OP_SPLIT: case OP_SPLIT_WITH_SIZES:
		return ndim(iarg(n, 2, 0), r0) != 0;
	case OP_CAT: case OP_STACK: { /* computed operands alone */
		const coil_arg *a = &n->args[0];
		for (int k = 0; k < a->n; k++)
			if (a->v[k] < 0 || !m->dep[a->v[k]])
				return 0;
		return a->n >= 1 && ndim(iarg(n, 1, 0), n->op == OP_STACK ? out_r : g->vals[a->v[0]].rank) != 0;
	}
	case OP_CONSTANT_PAD_ND:
		return n->args[1].kind == ARG_INTS && n->args[1].n <= 2 * (r0 - 1);
	default:
		return 0;
	}
}

/* n's size argument with dim 0 made c (a copy: the caller's graph keeps its own). */
static int resize_arg(coil_node *n, int64_t c, coil_arena *a)
{
	const int na = op_get(n->op)->nargs;
	coil_arg *args = arena_alloc(a, (size_t)(na + 1) * sizeof *args);
	if (!args)
		return -1;
	memcpy(args, n->args, (size_t)na * sizeof *args);
	coil_arg *s = &args[1];
	if (s->ints[0] == -1)
		goto done;
	int64_t *ints = arena_alloc(a, (size_t)s->n * sizeof *ints);
	if (!ints)
		return -1;
	memcpy(ints, s->ints, (size_t)s->n * sizeof *ints);
	ints[0] = c;
	s->ints = ints;
	if (s->dims) {
		coil_dim *dims = arena_alloc(a, (size_t)s->n * sizeof *dims);
		if (!dims)
			return -1;
		memcpy(dims, s->dims, (size_t)s->n * sizeof *dims);
		dims[0] = dim_const(c);
		s->dims = dims;
	}
done:
	n->args = args;
	return 0;
}

int ir_microbatch(coil_graph **gp, int64_t *chunkp, coil_arena *a, int64_t *total, coil_err *err)
{
	coil_graph *g0 = *gp;
	int64_t chunk = *chunkp;
	*total = 0;
	if (chunk < 0 || g0->syms.n || g0->ninputs < 1 || g0->nguards)
		return 0;
	int64_t n;
	const coil_value *x0 = &g0->vals[g0->inputs[0]];
	if (x0->rank < 1 || !dim_is_const(&x0->shape[0], &n) || n < 2 || (chunk && (n <= chunk || n % chunk)))
		return 0;
	mctx m = {g0, n, calloc((size_t)g0->nvals + 1, 1)};
	int *uses = calloc((size_t)g0->nvals + 1, sizeof *uses);
	char *reads = calloc((size_t)g0->nnodes + 1, 1); /* per node: reads a computed value */
	if (!m.dep || !uses || !reads) {
		free(m.dep), free(uses), free(reads);
		return coil_err_oom(err);
	}
	graph_count_uses(g0, uses);
	int ok = 1;
	for (int i = 0; i < g0->ninputs && ok; i++) {
		m.dep[g0->inputs[i]] = 1;
		ok = batch0(&m, g0->inputs[i]);
	}
	for (int i = 0; i < g0->nnodes && ok; i++) {
		const coil_node *nd = &g0->nodes[i];
		const op_info *oi = op_get(nd->op);
		int any = 0;
		for (int k = 0; k < oi->nargs; k++) {
			const coil_arg *ar = &nd->args[k];
			if (ar->kind == ARG_TENSOR && ar->v[0] >= 0)
				any |= m.dep[ar->v[0]];
			else if (ar->kind == ARG_TENSORS)
				for (int j = 0; j < ar->n; j++)
					any |= ar->v[j] >= 0 && m.dep[ar->v[j]];
		}
		if (!(reads[i] = (char)any))
			continue;
		ok = node_ok(&m, nd);
		/* its results: the batch at dim 0, or never read (batch norm's saved statistics) */
		for (int k = 0; k < nd->nout && ok; k++)
			if (nd->outs[k] >= 0 && (batch0(&m, nd->outs[k]) || uses[nd->outs[k]]))
				m.dep[nd->outs[k]] = 1, ok = batch0(&m, nd->outs[k]);
	}
	for (int i = 0; i < g0->noutputs && ok; i++)
		ok = m.dep[g0->outputs[i]] && batch0(&m, g0->outputs[i]);
	if (!ok) {
		free(m.dep), free(uses), free(reads);
		return 0;
	}
	if (!chunk) { /* the rule: two at a time where the activations outweigh the params */
		double act = 0, par = 0;
		for (int v = 0; v < g0->nvals; v++) {
			const coil_value *x = &g0->vals[v];
			if (x->kind == VAL_PARAM || x->kind == VAL_CONST)
				par += (double)graph_value_bytes(x);
			else if (m.dep[v] && x->kind == VAL_NODE && uses[v])
				act += (double)graph_value_bytes(x);
		}
		chunk = n >= 2 * MB_CHUNK && n % MB_CHUNK == 0 && act / (double)n >= MB_MIN_RATIO * par ? MB_CHUNK : 0;
		if (!chunk) {
			free(m.dep), free(uses), free(reads);
			return 0;
		}
	}
	/* the copy at c images: inputs, sizes, then every node inferred again */
	coil_graph *g = graph_copy(g0, a);
	int rc = g ? 0 : -1;
	if (g)
		g->capguards = g->nguards; /* a guard added would not write into g0's */
	for (int i = 0; g && i < g->ninputs; i++)
		g->vals[g->inputs[i]].shape[0] = dim_const(chunk);
	for (int i = 0; !rc && i < g->nnodes; i++) {
		coil_node *nd = &g->nodes[i];
		if ((nd->op == OP_VIEW || nd->op == OP_RESHAPE || nd->op == OP_UNSAFE_VIEW || nd->op == OP_EXPAND) &&
		    is_dep(&m, &nd->args[0]) && resize_arg(nd, chunk, a))
			rc = -1;
	}
	free(uses);
	if (rc) {
		free(m.dep), free(reads);
		return coil_err_oom(err);
	}
	coil_err e2 = {0};
	for (int i = 0; ok && i < g->nnodes; i++) {
		if (!reads[i])
			continue;
		ok = infer_node(g, &g->nodes[i], &e2) == 0;
		for (int k = 0; ok && k < g->nodes[i].nout; k++) {
			const int v = g->nodes[i].outs[k];
			ok = v < 0 || !m.dep[v] || dim_eq_const(&g->vals[v].shape[0], chunk);
		}
	}
	free(m.dep), free(reads);
	if (!ok || g->nguards != g0->nguards || g->syms.n)
		return 0; /* a size the rewrite did not reach: kept whole */
	*gp = g;
	*total = n;
	*chunkp = chunk;
	return 0;
}
