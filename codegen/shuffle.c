/* shuffle: a graph rewrite ahead of lowering (after sescale, before fold).
 *
 *   view(clone(transpose(view(x, [N, g, C/g, *]), 1, 2)), [N, C, *])  ->  channel_shuffle(x, g)
 *
 * ShuffleNet's channel shuffle as PyTorch traces it (torchvision's and
 * nn.ChannelShuffle's Python form): the clone may be a contiguous or absent
 * (a reshape copies), the transpose a permute swapping dims 1 and 2, the
 * views reshapes; the inner values read by the chain alone.  Both sides
 * compute the same; channel_shuffle is one node, which the layout
 * (lower_dnnl.c) keeps in NHWC between the convolutions around it: the
 * chain's rank-5 views kept each block's cat and split in NCHW, with a
 * oneDNN reorder on either side of every block.  COIL_SHUFFLE=0 turns the
 * rewrite off (measurement switch). */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

static int is_reshape(coil_op op)
{
	return op == OP_VIEW || op == OP_UNSAFE_VIEW || op == OP_RESHAPE;
}

/* The node producing value v when it is read once (by the chain), else NULL. */
static const coil_node *sole_producer(const coil_graph *g, const int *uses, int v)
{
	if (v < 0 || g->vals[v].kind != VAL_NODE || g->vals[v].index < 0 || uses[v] != 1)
		return NULL;
	return &g->nodes[g->vals[v].index];
}

static int shuffle_chain(coil_graph *g, coil_node *m, const int *uses, coil_arena *a, coil_err *err)
{
	const coil_node *t = sole_producer(g, uses, m->args[0].v[0]);
	if (t && (t->op == OP_CLONE || t->op == OP_CONTIGUOUS))
		t = sole_producer(g, uses, t->args[0].v[0]);
	int p[COIL_MAX_RANK];
	if (!t || (t->op != OP_TRANSPOSE && t->op != OP_PERMUTE) || view_perm(g, t, p))
		return 0;
	const coil_node *u = sole_producer(g, uses, t->args[0].v[0]);
	if (!u || !is_reshape(u->op))
		return 0;
	const int x = u->args[0].v[0];
	const coil_value *xv = &g->vals[x], *uv = &g->vals[u->outs[0]], *ov = &g->vals[m->outs[0]];
	const int R = xv->rank;
	int64_t gr, per, ch;
	if (R < 3 || uv->rank != R + 1 || ov->rank != R || !dims_equal(ov->shape, xv->shape, R) ||
	    !dim_is_const(&xv->shape[1], &ch) || !dim_is_const(&uv->shape[1], &gr) ||
	    !dim_is_const(&uv->shape[2], &per) || gr * per != ch || !dim_eq(&uv->shape[0], &xv->shape[0]))
		return 0;
	for (int i = 2; i < R; i++)
		if (!dim_eq(&uv->shape[i + 1], &xv->shape[i]))
			return 0;
	for (int i = 0; i <= R; i++)
		if (p[i] != (i == 1 ? 2 : i == 2 ? 1 : i))
			return 0;
	coil_arg *args = node_reargs(m, OP_CHANNEL_SHUFFLE, 0, a);
	if (!args || arg_tensor(&args[0], x, a))
		return coil_err_oom(err);
	args[1] = (coil_arg){.kind = ARG_INT, .is_int = 1, .i = gr};
	return infer_node(g, m, err) ? -1 : 1;
}

int ir_channel_shuffle(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp, *g = NULL;
	const char *e = getenv("COIL_SHUFFLE");
	int cand = 0;
	for (int i = 0; i < g0->nnodes && !cand; i++)
		cand = g0->nodes[i].op == OP_TRANSPOSE || g0->nodes[i].op == OP_PERMUTE;
	if (!cand || (e && !strcmp(e, "0")))
		return 0;
	if (!(g = graph_copy(g0, a)))
		return coil_err_oom(err);
	int *uses = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int));
	if (!uses)
		return coil_err_oom(err);
	graph_count_uses(g, uses);
	int r1 = graph_rewrite_each(g, uses, OP_VIEW, OP_UNSAFE_VIEW, shuffle_chain, a, err);
	int r2 = r1 < 0 ? -1 : graph_rewrite_each(g, uses, OP_RESHAPE, OP_RESHAPE, shuffle_chain, a, err);
	if (r1 < 0 || r2 < 0)
		return -1;
	return graph_rewrite_done(gp, g, r1 | r2, uses, a, err);
}
