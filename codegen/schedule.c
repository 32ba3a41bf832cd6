/* schedule: orders kernels so that each runs after the kernels whose buffers
 * it reads (depth-first topological sort; fuse guarantees no cycles). */
#include <string.h>

#include "codegen/ir.h"

typedef struct sctx {
	coil_ir *ir;
	char *state;  /* kernel: 0 new, 1 visiting, 2 done */
	char *seen;   /* node walk marks */
	int *order, n;
} sctx;

static int visit(sctx *c, int k, coil_err *err);

/* Kernels that write buffers read (inline) by kernel k from node v. */
static int deps(sctx *c, int v, int k, coil_err *err)
{
	ir_node *n = &c->ir->nodes[v];
	if (c->seen[v])
		return 0;
	c->seen[v] = 1;
	if (n->kernel >= 0 && n->kernel != k && (n->mat || n->op == IR_REDUCE || n->op == IR_EXTERN))
		return visit(c, n->kernel, err);
	if (n->op == IR_EXTERN && n->kernel == k) {
		for (int i = 0; i < n->nx; i++)
			if (deps(c, n->xsrc[i], k, err))
				return -1;
		return 0;
	}
	for (int i = 0; i < n->nsrc; i++)
		if (deps(c, n->src[i], k, err))
			return -1;
	return 0;
}

static int visit(sctx *c, int k, coil_err *err)
{
	if (c->state[k] == 2)
		return 0;
	if (c->state[k] == 1)
		return coil_errf(err, "internal error: kernel %d depends on itself", k);
	c->state[k] = 1;
	ir_kernel *K = &c->ir->ks[k];
	/* Each visit needs its own marks: save and restore around the walk. */
	char *saved = c->seen;
	c->seen = arena_alloc(c->ir->arena, (size_t)c->ir->n + 1);
	if (!c->seen)
		return coil_err_oom(err);
	for (int i = 0; i < K->nreds; i++)
		if (deps(c, K->reds[i], k, err))
			return -1;
	for (int i = 0; i < K->nouts; i++)
		if (deps(c, K->outs[i], k, err))
			return -1;
	c->seen = saved;
	c->state[k] = 2;
	c->order[c->n++] = k;
	return 0;
}

int ir_schedule(coil_ir *ir, coil_err *err)
{
	sctx c = {.ir = ir};
	c.state = arena_alloc(ir->arena, (size_t)ir->nk + 1);
	c.order = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof(int));
	if (!c.state || !c.order)
		return coil_err_oom(err);
	for (int k = 0; k < ir->nk; k++)
		if (visit(&c, k, err))
			return -1;
	/* Renumber kernels in schedule order. */
	ir_kernel *ks = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof *ks);
	int *newk = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof(int));
	if (!ks || !newk)
		return coil_err_oom(err);
	for (int i = 0; i < ir->nk; i++) {
		ks[i] = ir->ks[c.order[i]];
		newk[c.order[i]] = i;
	}
	for (int v = 0; v < ir->n; v++)
		if (ir->nodes[v].kernel >= 0)
			ir->nodes[v].kernel = newk[ir->nodes[v].kernel];
	ir->ks = ks;
	return 0;
}
