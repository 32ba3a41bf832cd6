/* microbatch: a graph of static sizes whose images never meet, compiled for
 * c of its N images and run N / c times (the artifact's run loops over the
 * chunks, each input's and output's images at their offsets: emit_abi.c),
 * up to a cut: the nodes after it run once on the whole batch.
 *
 * At batch 8 a network's first layers (mobilenet_v2: 38 MB after its first
 * expansion) stream their outputs through memory between every two ops,
 * where two images' stay in the caches; the params, read once a run, are
 * read N / c times instead, and the later layers, whose outputs fit the
 * caches at any batch and whose params are the larger, only lose by it (and
 * by kernels of a quarter of the work: at two threads they scale the worse).
 * So the rule (find_cut) runs chunks of MB_CHUNK = 2 up to the point where
 * the gain is largest: each convolution's, matrix product's or pooling's
 * batch output of at least MB_CUT_BYTES whose chunk's share fits
 * MB_FIT_BYTES gains twice its bytes (written and read again in memory),
 * each one's params lose (N / c - 1) x their bytes, and a cut loses the
 * bytes of the value it joins.  The cut is where one computed value alone
 * crosses, so the chunks end at one join (coil.mb_join, an internal op: each
 * chunk's images copied into their place in the batch's buffer, which memplan
 * keeps alive through all the chunks).  The part after it need not keep
 * images apart.  Paired on a 2-vCPU Zen 5 EPYC at batch 8 against the old
 * rule (the whole graph chunked where an image's activations were at least
 * twice the params' bytes, else none), one thread / two: mobilenet_v3_large
 * 43.8 -> 38.4 / 23.6 -> 18.9 ms, mobilenet_v2 35.3 -> 32.3 / 24.2 -> 21.2,
 * mnasnet1_0 36.5 -> 33.7 / 26.3 -> 23.1, efficientnet_b0 69.9 -> 65.3 /
 * 42.5 -> 37.0, squeezenet1_1 32.4 -> 31.7 / 23.5 -> 20.5; resnet18, never
 * chunked before, 149 -> 133 at one thread (the same at two).  The batch
 * must be a multiple of 2 of at least 4.  COIL_MICROBATCH=0 in the
 * compiler's environment turns it off, =c forces chunks of c over the whole
 * graph where it allows.
 *
 * Separable: every input has N at dim 0, and every value computed from an
 * input has N at dim 0 with image i's elements made from image i's alone;
 * values computed from params and constants only are left as they are and
 * may not reach a computed one at dim 0 (they would mix images).  Each op
 * that reads a computed value must be one known to keep images apart (the
 * pointwise ops, reductions and softmax away from dim 0, convolutions,
 * pooling, inference batch norm, layer norm of the trailing dims, matrix
 * products of a computed left side, views that keep dim 0, cat, split, pad,
 * transposes away from dim 0, ...); anything else ends the part that may
 * be chunked.
 * The rewrite (on a copy) sets the inputs' dim 0 to c and dim 0 of the sizes
 * views and expands are given before the cut, puts the join at the cut (the
 * nodes after it read its result where they read the crossing value), and
 * infers every computed node before it again; that every computed value
 * there then has c at dim 0 and the join the crossing value's shape is
 * checked, else the graph is kept whole. */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

#define MB_CHUNK 2        /* images a run of the rule's */
#define MB_CUT_BYTES (5.0 * (1 << 20)) /* a layer's batch output that streams through memory, */
#define MB_FIT_BYTES (8.0 * (1 << 20)) /* where a chunk's stays in the caches */

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

/* The bytes node n reads that are not computed from the inputs: params,
 * constants and what is made of them alone (a linear layer's t(weight)). */
static double param_bytes(const mctx *m, const coil_node *n)
{
	const op_info *oi = op_get(n->op);
	double b = 0;
	for (int i = 0; i < oi->nargs; i++)
		if (n->args[i].kind == ARG_TENSOR && n->args[i].v[0] >= 0 && !m->dep[n->args[i].v[0]])
			b += (double)graph_value_bytes(&m->g->vals[n->args[i].v[0]]);
	return b;
}

/* The cut of the rule's (see the top): nodes [0, s) run per chunk, [s,
 * nnodes) once on the batch, s where the net gain is largest and positive
 * (the latest of equals: past the pointwise ops and batch norms fused with a
 * layer), at a point where one computed value alone (*v) crosses, no input
 * is read after it and no output made before; or the end (whole: the graph
 * allows chunks throughout), *v -1.  -2 where nothing gains, -3 out of
 * memory.  ok_to: the nodes before it keep images apart. */
static int find_cut(const mctx *m, const int *last, int ok_to, int whole, int64_t chunk, int *v)
{
	const coil_graph *g = m->g;
	/* live[s]: computed values made before s and read at s or later (outputs: read at the end) */
	int *live = calloc((size_t)g->nnodes + 2, sizeof *live), *xo = calloc((size_t)g->nnodes + 2, sizeof *xo);
	int in_last = -1;
	if (!live || !xo) {
		free(live), free(xo);
		return -3;
	}
	for (int i = 0; i < g->ninputs; i++)
		in_last = last[g->inputs[i]] > in_last ? last[g->inputs[i]] : in_last;
	for (int i = 0; i < ok_to; i++) {
		const coil_node *nd = &g->nodes[i];
		for (int k = 0; k < nd->nout; k++) {
			const int w = nd->outs[k];
			if (w >= 0 && m->dep[w] && last[w] > i) {
				const int wt = last[w] == g->nnodes ? 2 : 1; /* an output: no cut after it */
				live[i + 1] += wt, live[last[w] + 1] -= wt;
				xo[i + 1] ^= w, xo[last[w] + 1] ^= w; /* where one alone is live, the xor is it */
			}
		}
	}
	double gain = 0, best = 0;
	int s = -2, run = 0, cross = 0;
	for (int i = 0; i < ok_to; i++) {
		const coil_node *nd = &g->nodes[i];
		const int ext = op_get(nd->op)->kind == EXT;
		const int layer = ext || nd->op == OP_MAX_POOL2D_WI || nd->op == OP_MAX_POOL2D || nd->op == OP_AVG_POOL2D;
		if (nd->nout >= 1 && nd->outs[0] >= 0 && m->dep[nd->outs[0]]) {
			const double ob = (double)graph_value_bytes(&g->vals[nd->outs[0]]);
			const int streams = ob >= MB_CUT_BYTES && ob / (double)m->n * (double)chunk <= MB_FIT_BYTES;
			gain += (layer && streams ? 2 * ob : 0) - (ext ? (double)(m->n / chunk - 1) * param_bytes(m, nd) : 0);
		}
		run += live[i + 1];
		cross ^= xo[i + 1];
		const int cut = i + 1 > in_last && i + 1 < g->nnodes && run == 1, end = i + 1 == g->nnodes && whole;
		if (!cut && !end)
			continue;
		/* at a cut the join copies the crossing value, which the rest then reads from memory;
		 * where the gain stays the same (pointwise ops, batch norm: fused with their layer), later */
		const double net = end ? gain : gain - (double)graph_value_bytes(&g->vals[cross]);
		if (net > 0 && net >= best)
			best = net, s = i + 1, *v = end ? -1 : cross;
	}
	free(live), free(xo);
	return s;
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
	int *uses = calloc((size_t)g0->nvals + 1, sizeof *uses), *last = calloc((size_t)g0->nvals + 1, sizeof *last);
	char *reads = calloc((size_t)g0->nnodes + 1, 1); /* per node: reads a computed value */
	if (!m.dep || !uses || !reads || !last) {
		free(m.dep), free(uses), free(reads), free(last);
		return coil_err_oom(err);
	}
	graph_count_uses(g0, uses);
	graph_node_reads(g0, NULL, last);
	for (int o = 0; o < g0->noutputs; o++)
		last[g0->outputs[o]] = g0->nnodes;
	int ok = 1, ok_to = g0->nnodes; /* the nodes before ok_to keep images apart */
	for (int i = 0; i < g0->ninputs && ok; i++) {
		m.dep[g0->inputs[i]] = 1;
		ok = batch0(&m, g0->inputs[i]);
	}
	if (!ok)
		ok_to = 0;
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
		if (!ok) { /* what follows runs on the whole batch, if a cut allows */
			ok_to = i;
			for (int k = 0; k < nd->nout; k++)
				if (nd->outs[k] >= 0)
					m.dep[nd->outs[k]] = 0;
		}
	}
	int whole = ok_to == g0->nnodes;
	for (int i = 0; i < g0->noutputs && whole; i++)
		whole = m.dep[g0->outputs[i]] && batch0(&m, g0->outputs[i]);
	int s = whole ? g0->nnodes : -1, cv = -1;
	if (!chunk) { /* the rule: chunks of two up to the cut */
		chunk = MB_CHUNK;
		s = n >= 2 * MB_CHUNK && n % MB_CHUNK == 0 ? find_cut(&m, last, ok_to, whole, chunk, &cv) : -2;
	}
	free(uses), free(last);
	if (s == -3) {
		free(m.dep), free(reads);
		return coil_err_oom(err);
	}
	if (s < 0) {
		free(m.dep), free(reads);
		return 0;
	}
	/* the copy at c images: inputs, sizes, the join at the cut, then every node before it inferred again */
	coil_graph *g = graph_copy(g0, a);
	const int cut = s < g0->nnodes;
	coil_node *nodes = cut ? arena_alloc(a, (size_t)(g0->nnodes + 2) * sizeof *nodes) : NULL;
	coil_value *vals = cut ? arena_alloc(a, (size_t)(g0->nvals + 2) * sizeof *vals) : NULL;
	int rc = g && (!cut || (nodes && vals)) ? 0 : -1;
	if (g)
		g->capguards = g->nguards; /* a guard added would not write into g0's */
	for (int i = 0; !rc && i < g->ninputs; i++)
		g->vals[g->inputs[i]].shape[0] = dim_const(chunk);
	for (int i = 0; !rc && i < s; i++) {
		coil_node *nd = &g->nodes[i];
		if ((nd->op == OP_VIEW || nd->op == OP_RESHAPE || nd->op == OP_UNSAFE_VIEW || nd->op == OP_EXPAND) &&
		    is_dep(&m, &nd->args[0]) && resize_arg(nd, chunk, a))
			rc = -1;
	}
	if (!rc && cut) { /* w = join(v) at s; the nodes after it read w where they read v */
		memcpy(vals, g->vals, (size_t)g->nvals * sizeof *vals);
		memcpy(nodes, g->nodes, (size_t)s * sizeof *nodes);
		g->vals = vals, g->capvals = g->nvals + 1, g->nodes = nodes, g->nnodes = s;
		coil_node *j = graph_append(g, a, OP_MB_JOIN, "microbatch", -1);
		if (!j || arg_tensor(&j->args[0], cv, a))
			rc = -1;
		else
			j->args[1] = (coil_arg){.kind = ARG_INT, .i = n};
		const int w = j ? j->outs[0] : -1;
		for (int i = s; !rc && i < g0->nnodes; i++) {
			coil_node *nd = &nodes[g->nnodes];
			*nd = g0->nodes[i];
			const op_info *oi = op_get(nd->op);
			int has_v = 0;
			for (int k = 0; k < oi->nargs; k++)
				if (nd->args[k].kind == ARG_TENSOR || nd->args[k].kind == ARG_TENSORS)
					for (int q = 0; q < nd->args[k].n; q++)
						has_v |= nd->args[k].v[q] == cv;
			if (has_v) { /* its arguments copied, v made w */
				coil_arg *args = arena_alloc(a, (size_t)(oi->nargs + 1) * sizeof *args);
				if (!args) {
					rc = -1;
					break;
				}
				memcpy(args, nd->args, (size_t)oi->nargs * sizeof *args);
				for (int k = 0; k < oi->nargs && !rc; k++) {
					if (args[k].kind != ARG_TENSOR && args[k].kind != ARG_TENSORS)
						continue;
					int *vs = arena_alloc(a, (size_t)(args[k].n + 1) * sizeof *vs);
					if (!vs)
						rc = -1;
					for (int q = 0; vs && q < args[k].n; q++)
						vs[q] = args[k].v[q] == cv ? w : args[k].v[q];
					args[k].v = vs;
				}
				nd->args = args;
			}
			for (int k = 0; k < nd->nout; k++)
				if (nd->outs[k] >= 0)
					vals[nd->outs[k]].index = g->nnodes;
			g->nnodes++;
		}
	}
	if (rc) {
		free(m.dep), free(reads);
		return coil_err_oom(err);
	}
	coil_err e2 = {0};
	ok = 1;
	for (int i = 0; ok && i < s; i++) {
		if (!reads[i])
			continue;
		ok = infer_node(g, &g->nodes[i], &e2) == 0;
		for (int k = 0; ok && k < g->nodes[i].nout; k++) {
			const int v = g->nodes[i].outs[k];
			ok = v < 0 || !m.dep[v] || dim_eq_const(&g->vals[v].shape[0], chunk);
		}
	}
	if (ok && cut) { /* the join gives back v's own shape: the nodes after it stand as they were */
		const coil_value *v0 = &g0->vals[cv], *w = &g->vals[g->nodes[s].outs[0]];
		ok = infer_node(g, &g->nodes[s], &e2) == 0 && w->rank == v0->rank && dims_equal(w->shape, v0->shape, w->rank);
	}
	free(m.dep), free(reads);
	if (!ok || g->nguards != g0->nguards || g->syms.n)
		return 0; /* a size the rewrite did not reach: kept whole */
	*gp = g;
	*total = n;
	*chunkp = chunk;
	return 0;
}
