/* schedule: orders kernels so that each runs after the kernels whose buffers
 * it reads (depth-first topological sort; fuse guarantees no cycles).  Both
 * walks loop over stacks: a graph may be as deep as it likes. */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"

/* A growable list of ints (malloc'd). */
typedef struct ilist {
	int n, cap, *v;
} ilist;

static int push(ilist *l, int x)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 64;
		int *v = realloc(l->v, (size_t)cap * sizeof *v);
		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

/* The kernels whose buffers kernel k reads, each once, in the order a
 * depth-first walk from its reductions, then its outputs, meets them: the
 * walk goes through what k computes inline and stops at other kernels'
 * buffers.  A loop over a stack (nodes stamped k + 1 when visited). */
static int kernel_deps(coil_ir *ir, int k, int *stamp, char *met, ilist *stack, ilist *out)
{
	ir_kernel *K = &ir->ks[k];
	out->n = 0;
	stack->n = 0;
	for (int i = K->nouts - 1; i >= 0; i--)
		if (push(stack, K->outs[i]))
			return -1;
	for (int i = K->nreds - 1; i >= 0; i--)
		if (push(stack, K->reds[i]))
			return -1;
	while (stack->n) {
		int v = stack->v[--stack->n];
		ir_node *n = &ir->nodes[v];
		if (stamp[v] == k + 1)
			continue;
		stamp[v] = k + 1;
		if (n->kernel >= 0 && n->kernel != k && (n->mat || n->op == IR_REDUCE || n->op == IR_EXTERN)) {
			if (!met[n->kernel] && push(out, n->kernel))
				return -1;
			met[n->kernel] = 1;
			continue;
		}
		int cnt;
		const int *s = n->op == IR_EXTERN && n->kernel == k ? n->xsrc : n->src;
		cnt = n->op == IR_EXTERN && n->kernel == k ? n->nx : n->nsrc;
		for (int i = cnt - 1; i >= 0; i--)
			if (push(stack, s[i]))
				return -1;
	}
	for (int i = 0; i < out->n; i++)
		met[out->v[i]] = 0;
	return 0;
}

/* Kernels in depth-first post-order: each after the kernels it reads, in
 * the order it meets them.  The kernel graph may be as deep as the graph: a
 * loop over a stack of (kernel, next dependency). */
static int order_kernels(coil_ir *ir, int *order, coil_err *err)
{
	int nk = ir->nk, n = 0, rc = -1;
	char *state = calloc((size_t)nk + 1, 1), *met = calloc((size_t)nk + 1, 1);
	int *stamp = calloc((size_t)ir->n + 1, sizeof *stamp), *first = calloc((size_t)nk + 1, sizeof *first);
	int *next = calloc((size_t)nk + 1, sizeof *next);
	ilist all = {0}, stack = {0}, one = {0}, dfs = {0};
	if (!state || !met || !stamp || !first || !next)
		goto oom;
	/* every kernel's dependencies, one after another in all.v */
	for (int k = 0; k < nk; k++) {
		if (kernel_deps(ir, k, stamp, met, &stack, &one))
			goto oom;
		first[k] = all.n;
		for (int i = 0; i < one.n; i++)
			if (push(&all, one.v[i]))
				goto oom;
		next[k] = first[k];
	}
	for (int root = 0; root < nk; root++) {
		if (state[root])
			continue;
		state[root] = 1;
		if (push(&dfs, root))
			goto oom;
		while (dfs.n) {
			int k = dfs.v[dfs.n - 1], end = k + 1 < nk ? first[k + 1] : all.n;
			if (next[k] < end) {
				int d = all.v[next[k]++];
				if (state[d] == 1) {
					coil_errf(err, "internal error: kernel %d depends on itself", d);
					goto out;
				}
				if (!state[d]) {
					state[d] = 1;
					if (push(&dfs, d))
						goto oom;
				}
				continue;
			}
			state[k] = 2;
			order[n++] = k;
			dfs.n--;
		}
	}
	rc = 0;
	goto out;
oom:
	coil_err_oom(err);
out:
	free(state);
	free(met);
	free(stamp);
	free(first);
	free(next);
	free(all.v);
	free(stack.v);
	free(one.v);
	free(dfs.v);
	return rc;
}

int ir_schedule(coil_ir *ir, coil_err *err)
{
	int *order = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof(int));
	if (!order)
		return coil_err_oom(err);
	if (order_kernels(ir, order, err))
		return -1;
	/* Renumber kernels in schedule order. */
	ir_kernel *ks = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof *ks);
	int *newk = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof(int));
	if (!ks || !newk)
		return coil_err_oom(err);
	for (int i = 0; i < ir->nk; i++) {
		ks[i] = ir->ks[order[i]];
		newk[order[i]] = i;
	}
	for (int v = 0; v < ir->n; v++)
		if (ir->nodes[v].kernel >= 0)
			ir->nodes[v].kernel = newk[ir->nodes[v].kernel];
	ir->ks = ks;
	ir->capk = ir->nk;
	return 0;
}
