/* rewrite: what the graph rewrites ahead of lowering (attention.c, scatter.c,
 * sescale.c) share: reads per value, appending nodes, and dropping the nodes
 * nobody reads. */
#include <string.h>

#include "codegen/ir.h"

void graph_node_reads(const coil_graph *g, int *uses, int *last)
{
	if (uses)
		memset(uses, 0, (size_t)g->nvals * sizeof *uses);
	for (int v = 0; last && v < g->nvals; v++)
		last[v] = -1;
	for (int i = 0; i < g->nnodes; i++) {
		const coil_node *n = &g->nodes[i];
		const op_info *oi = op_get(n->op);
		for (int k = 0; k < oi->nargs; k++)
			if (n->args[k].kind == ARG_TENSOR || n->args[k].kind == ARG_TENSORS)
				for (int j = 0; j < n->args[k].n; j++) {
					const int v = n->args[k].v[j];
					if (v >= 0 && uses)
						uses[v]++;
					if (v >= 0 && last)
						last[v] = i;
				}
	}
}

/* Reads of each value by g's nodes and outputs. */
void graph_count_uses(const coil_graph *g, int *uses)
{
	graph_node_reads(g, uses, NULL);
	for (int o = 0; o < g->noutputs; o++)
		uses[g->outputs[o]]++;
}

/* Drops nodes none of whose results is read (in reverse, so chains go). */
int graph_drop_dead(coil_graph *g, int *uses, coil_arena *a)
{
	char *live = arena_alloc(a, (size_t)g->nnodes + 1);
	if (!live)
		return -1;
	graph_count_uses(g, uses);
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const coil_node *n = &g->nodes[i];
		live[i] = 0;
		for (int k = 0; k < n->nout; k++)
			live[i] |= n->outs[k] >= 0 && uses[n->outs[k]] > 0;
		if (live[i])
			continue;
		const op_info *oi = op_get(n->op);
		for (int k = 0; k < oi->nargs; k++)
			if (n->args[k].kind == ARG_TENSOR || n->args[k].kind == ARG_TENSORS)
				for (int j = 0; j < n->args[k].n; j++)
					if (n->args[k].v[j] >= 0)
						uses[n->args[k].v[j]]--;
	}
	int m = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const coil_node *n = &g->nodes[i];
		for (int k = 0; k < n->nout; k++)
			if (n->outs[k] >= 0)
				g->vals[n->outs[k]].index = live[i] ? m : -1;
		if (live[i])
			g->nodes[m++] = *n;
	}
	g->nnodes = m;
	return 0;
}

/* The bytes of value v; 0 for a symbolic size */
int64_t graph_value_bytes(const coil_value *v)
{
	int64_t n = (int64_t)dtype_size(v->dtype), d;
	for (int i = 0; i < v->rank; i++)
		n *= dim_is_const(&v->shape[i], &d) ? d : 0;
	return n;
}

/* A copy of g's node and value lists in a (the caller's graph is left as it was). */
coil_graph *graph_copy(const coil_graph *g0, coil_arena *a)
{
	coil_graph *g = arena_alloc(a, sizeof *g);
	coil_node *nodes = arena_alloc(a, (size_t)(g0->nnodes + 1) * sizeof *nodes);
	coil_value *vals = arena_alloc(a, (size_t)(g0->nvals + 1) * sizeof *vals);
	if (!g || !nodes || !vals)
		return NULL;
	*g = *g0;
	memcpy(nodes, g0->nodes, (size_t)g0->nnodes * sizeof *nodes);
	memcpy(vals, g0->vals, (size_t)g0->nvals * sizeof *vals);
	g->nodes = nodes, g->vals = vals, g->capvals = g0->nvals;
	return g;
}

/* n made op, with a fresh argument array of op's schema size, the first `keep` copied. */
coil_arg *node_reargs(coil_node *n, coil_op op, int keep, coil_arena *a)
{
	const int na = op_get(op)->nargs;
	coil_arg *args = arena_alloc(a, (size_t)(na + 1) * sizeof *args);
	if (!args)
		return NULL;
	memset(args, 0, (size_t)(na + 1) * sizeof *args);
	memcpy(args, n->args, (size_t)keep * sizeof *args);
	n->op = op;
	n->args = args;
	return args;
}

/* *arg made the tensor argument v. */
int arg_tensor(coil_arg *arg, int v, coil_arena *a)
{
	int *p = arena_alloc(a, sizeof(int));
	if (!p)
		return -1;
	*p = v;
	*arg = (coil_arg){.kind = ARG_TENSOR, .n = 1, .v = p};
	return 0;
}

int graph_rewrite_each(coil_graph *g, int *uses, coil_op op1, coil_op op2, graph_node_fn fn, coil_arena *a,
		       coil_err *err)
{
	int changed = 0;
	for (int i = 0; i < g->nnodes; i++) {
		if (g->nodes[i].op != op1 && g->nodes[i].op != op2)
			continue;
		int r = fn(g, &g->nodes[i], uses, a, err);
		if (r < 0)
			return -1;
		if (r) {
			changed = 1;
			graph_count_uses(g, uses);
		}
	}
	return changed;
}

int graph_rewrite_done(coil_graph **gp, coil_graph *g, int changed, int *uses, coil_arena *a, coil_err *err)
{
	if (!changed)
		return 0;
	if (graph_drop_dead(g, uses, a))
		return coil_err_oom(err);
	*gp = g;
	return 0;
}

coil_node *graph_append(coil_graph *g, coil_arena *a, coil_op op, const char *id, int out)
{
	const op_info *oi = op_get(op);
	coil_node *n = &g->nodes[g->nnodes];
	memset(n, 0, sizeof *n);
	n->op = op;
	n->id = id;
	n->args = arena_alloc(a, (size_t)(oi->nargs + 1) * sizeof *n->args);
	n->outs = arena_alloc(a, sizeof(int));
	if (!n->args || !n->outs)
		return NULL;
	memset(n->args, 0, (size_t)(oi->nargs + 1) * sizeof *n->args);
	if (out < 0) {
		out = g->nvals++;
		memset(&g->vals[out], 0, sizeof g->vals[out]);
		g->vals[out].kind = VAL_NODE;
	}
	g->vals[out].index = g->nnodes;
	g->vals[out].out = 0;
	n->nout = 1;
	n->outs[0] = out;
	g->nnodes++;
	return n;
}
