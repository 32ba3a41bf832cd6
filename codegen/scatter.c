/* scatter: a graph rewrite ahead of lowering (after attention, before fold).
 *
 *   scatter_add(self, d, expand(i'), src)            ->  index_add(self, d, i, src)
 *   scatter_reduce(self, d, expand(i'), src, r, inc) ->  index_reduce(self, d, i, src, r, inc)
 *
 * where i is 1-d (a target per position along d) and i' is i viewed with size
 * 1 at every other dim, as message passing writes it
 * (`dst.unsqueeze(1).expand_as(msg)`), and index, src and self agree off d,
 * index and src along d.  Both sides compute the same thing; the kernel then
 * reads i once per row of src instead of an [edges, features] i64 copy of it,
 * materialised for the extern (twice the messages' bytes, written then read);
 *
 *   index_add / index_reduce(self, 0, dst, index_select(x, 0, src) [* w])
 *       ->  coil.gather_scatter(self, x, src, dst, w)
 *
 * where the gathered messages (and their product with a per-edge weight w of
 * shape [E, 1, ...]) are read by the scatter alone: x's rows are read as the
 * scatter needs them and the [edges, features] messages never exist.  Nodes
 * left unread are dropped.  COIL_GATHER_SCATTER=0 turns the fusion off. */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

/* The node that produces value v, or NULL (an input, param or constant). */
static const coil_node *producer(const coil_graph *g, int v)
{
	return v >= 0 && g->vals[v].kind == VAL_NODE && g->vals[v].index >= 0 ? &g->nodes[g->vals[v].index] : NULL;
}

/* COIL_GATHER_SCATTER=0 in the compiler's environment: no gather fusion (measurement switch). */
static int fuse_off(void)
{
	const char *e = getenv("COIL_GATHER_SCATTER");
	return e && !strcmp(e, "0");
}

static int is_reshape(coil_op op)
{
	return op == OP_UNSQUEEZE || op == OP_VIEW || op == OP_UNSAFE_VIEW || op == OP_RESHAPE || op == OP_ALIAS ||
	       op == OP_DETACH || op == OP_SQUEEZE_DIM;
}

/* The 1-d value i when index value ix is expand(i') as above for dim d of a
 * scatter whose self and src are x and s, else -1. */
static int bcast_index(const coil_graph *g, int ix, int d, const coil_value *x, const coil_value *s)
{
	const coil_node *e = producer(g, ix);
	const coil_value *iv = &g->vals[ix];
	if (!e || e->op != OP_EXPAND)
		return -1;
	for (int k = 0; k < iv->rank; k++)
		if (!dim_eq(&iv->shape[k], &s->shape[k]) || (k != d && !dim_eq(&iv->shape[k], &x->shape[k])))
			return -1;
	int u = e->args[0].v[0];
	const coil_value *uv = &g->vals[u];
	const int du = d - (iv->rank - uv->rank); /* expand may add leading dims */
	if (du < 0)
		return -1;
	for (int k = 0; k < uv->rank; k++) {
		int64_t one;
		if (k != du && !(dim_is_const(&uv->shape[k], &one) && one == 1))
			return -1;
	}
	if (!dim_eq(&uv->shape[du], &iv->shape[d]))
		return -1;
	/* back through reshapes to the 1-d value they view */
	for (int hops = 0; uv->rank != 1 && hops < 8; hops++) {
		const coil_node *p = producer(g, u);
		if (!p || !is_reshape(p->op))
			return -1;
		u = p->args[0].v[0];
		uv = &g->vals[u];
	}
	return uv->rank == 1 && (uv->dtype == COIL_I64 || uv->dtype == COIL_I32) ? u : -1;
}

/* index_add (alpha 1) / index_reduce along dim 0 whose source is index_select(x, 0, src)
 * along dim 0, or that times a per-edge weight w ([E, 1, ...], a view of a 1-d [E]), read
 * by nothing else: one coil.gather_scatter(self, x, src, dst, w).  0 when not. */
static int fuse_gather(coil_graph *g, coil_node *m, const int *uses, coil_arena *a, coil_err *err)
{
	const coil_value *self = &g->vals[m->args[0].v[0]];
	const int R = self->rank, d = (int)(m->args[1].i < 0 ? m->args[1].i + R : m->args[1].i);
	const coil_arg *al = &m->args[4];
	if (d != 0 || (m->op == OP_INDEX_ADD && al->kind == ARG_SCALAR && (al->is_int ? al->i != 1 : al->f != 1)))
		return 0;
	int sv = m->args[3].v[0], gv = sv, wv = -1;
	const coil_node *p = producer(g, sv);
	if (!p || uses[sv] != 1)
		return 0;
	if (p->op == OP_MUL) {
		for (int k = 0; k < 2 && wv < 0; k++) {
			const coil_node *q = producer(g, p->args[k].v[0]);
			if (q && q->op == OP_INDEX_SELECT && uses[p->args[k].v[0]] == 1)
				gv = p->args[k].v[0], wv = p->args[1 - k].v[0];
		}
		if (wv < 0)
			return 0;
		/* the weight: [E, 1, ...] over a 1-d [E] */
		const coil_value *w = &g->vals[wv], *sval = &g->vals[sv];
		int ok = w->rank == sval->rank && w->dtype == sval->dtype && dim_eq(&w->shape[0], &sval->shape[0]);
		for (int i = 1; ok && i < w->rank; i++) {
			int64_t one;
			ok = dim_is_const(&w->shape[i], &one) && one == 1;
		}
		for (int hops = 0; ok && g->vals[wv].rank != 1 && hops < 8; hops++) {
			const coil_node *q = producer(g, wv);
			ok = q && is_reshape(q->op);
			if (ok)
				wv = q->args[0].v[0];
		}
		if (!ok || g->vals[wv].rank != 1)
			return 0;
		p = producer(g, gv);
	}
	if (!p || p->op != OP_INDEX_SELECT)
		return 0;
	const coil_value *x = &g->vals[p->args[0].v[0]], *si = &g->vals[p->args[2].v[0]];
	const int xd = (int)(p->args[1].i < 0 ? p->args[1].i + x->rank : p->args[1].i);
	if (xd != 0 || si->rank != 1 || x->dtype != self->dtype)
		return 0;
	const int x_v = p->args[0].v[0], si_v = p->args[2].v[0];
	const int is_add = m->op == OP_INDEX_ADD;
	const char *red = is_add ? "sum" : m->args[4].s;
	const int self_in = is_add ? 1 : (int)m->args[5].i, di_v = m->args[2].v[0];
	coil_arg *args = node_reargs(m, OP_GATHER_SCATTER, 1, a);
	if (!args || arg_tensor(&args[1], x_v, a) || arg_tensor(&args[2], si_v, a) || arg_tensor(&args[3], di_v, a) ||
	    (wv >= 0 && arg_tensor(&args[4], wv, a)))
		return coil_err_oom(err);
	args[5] = (coil_arg){.kind = ARG_STR, .s = red};
	args[6] = (coil_arg){.kind = ARG_BOOL, .is_int = 1, .is_bool = 1, .i = self_in};
	return infer_node(g, m, err) ? -1 : 1;
}

int ir_scatter_index(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp, *g = NULL;
	int cand = 0;
	for (int i = 0; i < g0->nnodes; i++) {
		const coil_op op = g0->nodes[i].op;
		cand |= op == OP_SCATTER_ADD || op == OP_SCATTER_REDUCE || op == OP_INDEX_ADD || op == OP_INDEX_REDUCE;
	}
	if (!cand)
		return 0;
	if (!(g = graph_copy(g0, a)))
		return coil_err_oom(err);
	int changed = 0, *uses = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int));
	if (!uses)
		return coil_err_oom(err);
	for (int i = 0; i < g->nnodes; i++) { /* scatters over a broadcast index */
		coil_node *m = &g->nodes[i];
		if (m->op != OP_SCATTER_ADD && m->op != OP_SCATTER_REDUCE)
			continue;
		const coil_value *x = &g->vals[m->args[0].v[0]], *s = &g->vals[m->args[3].v[0]];
		const int R = x->rank, d = (int)(m->args[1].i < 0 ? m->args[1].i + R : m->args[1].i);
		const int iv = bcast_index(g, m->args[2].v[0], d, x, s);
		if (iv < 0)
			continue;
		const coil_op op = m->op == OP_SCATTER_ADD ? OP_INDEX_ADD : OP_INDEX_REDUCE;
		coil_arg *args = node_reargs(m, op, op == OP_INDEX_ADD ? 4 : 6, a);
		if (!args || arg_tensor(&args[2], iv, a))
			return coil_err_oom(err);
		if (op == OP_INDEX_ADD)
			args[4] = (coil_arg){.kind = ARG_SCALAR, .is_int = 1, .i = 1, .f = 1};
		if (infer_node(g, m, err))
			return -1;
		changed = 1;
	}
	graph_count_uses(g, uses);
	if (!fuse_off()) { /* gathers read as the scatter reads them */
		int r = graph_rewrite_each(g, uses, OP_INDEX_ADD, OP_INDEX_REDUCE, fuse_gather, a, err);
		if (r < 0)
			return -1;
		changed |= r;
	}
	return graph_rewrite_done(gp, g, changed, uses, a, err);
}
