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
 * materialised for the extern (twice the messages' bytes, written then read). */
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

/* The node that produces value v, or NULL (an input, param or constant). */
static const coil_node *producer(const coil_graph *g, int v)
{
	return v >= 0 && g->vals[v].kind == VAL_NODE && g->vals[v].index >= 0 ? &g->nodes[g->vals[v].index] : NULL;
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

int ir_scatter_index(coil_graph **gp, coil_arena *a, coil_err *err)
{
	coil_graph *g0 = *gp, *g = NULL;
	for (int i = 0; i < g0->nnodes; i++) {
		const coil_node *n = &g0->nodes[i];
		if (n->op != OP_SCATTER_ADD && n->op != OP_SCATTER_REDUCE)
			continue;
		const coil_value *x = &g0->vals[n->args[0].v[0]], *s = &g0->vals[n->args[3].v[0]];
		const int R = x->rank, d = (int)(n->args[1].i < 0 ? n->args[1].i + R : n->args[1].i);
		const int iv = bcast_index(g0, n->args[2].v[0], d, x, s);
		if (iv < 0)
			continue;
		if (!g) { /* a copy of the node list: the caller's graph is left as it was */
			g = arena_alloc(a, sizeof *g);
			coil_node *nodes = arena_alloc(a, (size_t)(g0->nnodes + 1) * sizeof *nodes);
			if (!g || !nodes)
				return coil_err_oom(err);
			*g = *g0;
			memcpy(nodes, g0->nodes, (size_t)g0->nnodes * sizeof *nodes);
			g->nodes = nodes;
		}
		coil_node *m = &g->nodes[i];
		const coil_op op = n->op == OP_SCATTER_ADD ? OP_INDEX_ADD : OP_INDEX_REDUCE;
		const int na = op_get(op)->nargs;
		coil_arg *args = arena_alloc(a, (size_t)(na + 1) * sizeof *args);
		int *ia = arena_alloc(a, sizeof(int));
		if (!args || !ia)
			return coil_err_oom(err);
		memset(args, 0, (size_t)(na + 1) * sizeof *args);
		memcpy(args, n->args, (size_t)(op == OP_INDEX_ADD ? 4 : 6) * sizeof *args);
		*ia = iv;
		args[2].v = ia;
		if (op == OP_INDEX_ADD)
			args[4] = (coil_arg){.kind = ARG_SCALAR, .is_int = 1, .i = 1, .f = 1};
		m->op = op;
		m->args = args;
		if (infer_node(g, m, err))
			return -1;
	}
	if (g)
		*gp = g;
	return 0;
}
