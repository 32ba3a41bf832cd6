/* fuse: decides which IR nodes get buffers and groups the rest into kernels.
 *
 * Nodes without a buffer are inlined (recomputed) into every kernel that reads
 * them: chains of pointwise ops and views become one loop nest with index
 * arithmetic.  Buffers: graph outputs, extern results and extern inputs.
 * Reductions with the same input shape and reduced dims form one K_REDUCE
 * kernel (a loop over the kept dims, inside it one loop per reduction and an
 * epilogue), so softmax and layer norm are one kernel each: later reductions
 * and epilogue outputs read earlier ones as scalars.  A reduction joins a group
 * only when every read of a group member is at the group's own row index
 * (checked on the index expressions) and never through another kernel's
 * buffer, which also keeps the kernel graph acyclic. */
#include <string.h>

#include "codegen/ir.h"

typedef struct group {
	int kernel;       /* index in ir->ks */
	int red0;         /* first reduction: its input shape and mask */
} group;

typedef struct fctx {
	coil_ir *ir;
	coil_err *err;
	int *grp;         /* node -> kernel index for reductions, -1 */
	char *seen;       /* boundary walk marks */
	int cur;          /* kernel being checked */
	int *cover;       /* node -> kernel mark for covering */
	int *scratch;
	int probe;        /* cover() only looks */
} fctx;

/* The loop variable of dim d of shape s ("0" for static size 1). */
static char *loopvar(coil_arena *a, const coil_dim *s, int d)
{
	return dim_eq_const(&s[d], 1) ? "0" : arena_printf(a, "i%d", d);
}

static int same_row(fctx *c, const ir_node *r, char **idx)
{
	for (int d = 0; d < r->rank; d++) {
		char *want = r->mask >> d & 1 ? "0" : loopvar(c->ir->arena, r->shape, d);
		if (strcmp(want, idx[d]))
			return 0;
	}
	return 1;
}

static int is_buffer(const ir_node *n)
{
	return n->mat || n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST || n->op == IR_EXTERN ||
	       n->op == IR_REDUCE;
}

/* Boundary walk: from v (read through a buffer), may kernel k be reached? */
static int reaches(fctx *c, int v, int k)
{
	ir_node *n = &c->ir->nodes[v];
	if (c->seen[v])
		return 0;
	c->seen[v] = 1;
	if (n->kernel == k && (n->op == IR_REDUCE || n->mat))
		return 1;
	int cnt;
	const int *s = ir_srcs(n, &cnt);
	for (int i = 0; i < cnt; i++)
		if (reaches(c, s[i], k))
			return 1;
	return 0;
}

/* Inline walk from v at index idx for kernel k: 0 if every read of a member
 * of k is a same-row inline read and no member is reached through a buffer. */
static int check(fctx *c, int v, char **idx, int k)
{
	ir_node *n = &c->ir->nodes[v];
	if (n->op == IR_REDUCE && n->kernel == k)
		return same_row(c, n, idx) ? 0 : -1;
	if (n->op == IR_FILL)
		return 0;
	if (is_buffer(n) && !(n->mat && n->kernel == k && n->op != IR_REDUCE)) {
		memset(c->seen, 0, (size_t)c->ir->n);
		return reaches(c, v, k) ? -1 : 0;
	}
	for (int i = 0; i < n->nsrc; i++) {
		char *sidx[COIL_MAX_RANK];
		ix_operand(c->ir, n, i, idx, sidx);
		if (check(c, n->src[i], sidx, k))
			return -1;
	}
	return 0;
}

static int new_kernel(coil_ir *ir, enum kernel_kind kind, coil_err *err)
{
	ir_kernel *ks = arena_alloc(ir->arena, (size_t)(ir->nk + 1) * sizeof *ks);
	if (!ks)
		return coil_err_oom(err);
	if (ir->nk)
		memcpy(ks, ir->ks, (size_t)ir->nk * sizeof *ks);
	ir->ks = ks;
	ks[ir->nk] = (ir_kernel){.kind = kind, .ext = -1};
	ks[ir->nk].outs = arena_alloc(ir->arena, (size_t)ir->n * sizeof(int));
	ks[ir->nk].reds = arena_alloc(ir->arena, (size_t)ir->n * sizeof(int));
	return ir->nk++;
}

/* Full-iteration index of a group (input shape of its first reduction). */
static void full_idx(fctx *c, const ir_node *src, char **idx)
{
	for (int d = 0; d < src->rank; d++)
		idx[d] = loopvar(c->ir->arena, src->shape, d);
}

/* Outer-level index for a node p whose non-1 dims are the kept dims of r. */
static int outer_idx(fctx *c, const ir_node *r, const ir_node *p, char **idx)
{
	int j = 0;
	for (int i = 0; i < p->rank; i++) {
		if (dim_eq_const(&p->shape[i], 1)) {
			idx[i] = "0";
			continue;
		}
		while (j < r->rank && dim_eq_const(&r->shape[j], 1))
			j++;
		if (j == r->rank || !dim_eq(&p->shape[i], &r->shape[j]))
			return -1;
		idx[i] = loopvar(c->ir->arena, r->shape, j);
		j++;
	}
	while (j < r->rank && dim_eq_const(&r->shape[j], 1))
		j++;
	return j == r->rank ? 0 : -1;
}

/* Inline walk collecting covered graph nodes and reductions read from other kernels. */
static void cover(fctx *c, int v, int k, ir_kernel *K)
{
	ir_node *n = &c->ir->nodes[v];
	if (c->cover[v] == k + 1)
		return;
	c->cover[v] = k + 1;
	if (n->gnode >= 0) {
		int dup = 0;
		for (int i = 0; i < K->ncover; i++)
			dup |= K->cover[i] == n->gnode;
		if (!dup)
			K->cover[K->ncover++] = n->gnode;
	}
	if (n->op == IR_REDUCE && n->kernel != k) {
		if (!c->probe)
			n->mat = 1;
		return;
	}
	if (n->op == IR_EXTERN || n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST)
		return;
	if (n->mat && n->kernel != k)
		return;
	for (int i = 0; i < n->nsrc; i++)
		cover(c, n->src[i], k, K);
}

int ir_fuse(coil_ir *ir, coil_err *err)
{
	fctx c = {.ir = ir, .err = err};
	/* Every graph output gets a node of its own that is not a graph buffer. */
	for (int j = 0; j < ir->nout; j++) {
		ir_node *n = &ir->nodes[ir->outs[j]];
		if (n->out >= 0 || n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST) {
			ir_node p = {.op = IR_VIEW, .sub = V_EXPAND, .dtype = n->dtype, .nsrc = 1, .src = {ir->outs[j]},
				     .rank = n->rank, .gnode = -1};
			memcpy(p.shape, n->shape, sizeof p.shape);
			int v = ir_add(ir, &p, err);
			if (v < 0)
				return -1;
			ir->outs[j] = v;
		}
		ir->nodes[ir->outs[j]].out = j;
		ir->nodes[ir->outs[j]].mat = 1;
	}
	/* Liveness from the outputs (nodes are in topological order). */
	char *live = arena_alloc(ir->arena, (size_t)ir->n + 1);
	c.seen = arena_alloc(ir->arena, (size_t)ir->n + 1);
	c.cover = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	c.scratch = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	if (!c.scratch || !live || !c.seen || !c.cover)
		return coil_err_oom(err);
	for (int j = 0; j < ir->nout; j++)
		live[ir->outs[j]] = 1;
	for (int v = ir->n - 1; v >= 0; v--) {
		ir_node *n = &ir->nodes[v];
		if (!live[v])
			continue;
		if (n->op == IR_EXTERN) {
			n->mat = 1;
			for (int i = 0; i < n->nx; i++) {
				ir_node *s = &ir->nodes[n->xsrc[i]];
				if (s->op != IR_INPUT && s->op != IR_PARAM && s->op != IR_CONST)
					s->mat = 1;
			}
		}
		int cnt;
		const int *s = ir_srcs(n, &cnt);
		for (int i = 0; i < cnt; i++) {
			live[s[i]] = 1;
			ir->nodes[s[i]].nuse++;
		}
	}
	/* Extern kernels: one per graph node. */
	for (int v = 0; v < ir->n; v++) {
		ir_node *n = &ir->nodes[v];
		if (!live[v] || n->op != IR_EXTERN)
			continue;
		int k = -1;
		for (int i = 0; i < ir->nk; i++)
			if (ir->ks[i].kind == K_EXTERN && ir->nodes[ir->ks[i].ext].gnode == n->gnode)
				k = i;
		if (k < 0 && (k = new_kernel(ir, K_EXTERN, err)) < 0)
			return -1;
		if (ir->ks[k].ext < 0)
			ir->ks[k].ext = v;
		ir->ks[k].outs[ir->ks[k].nouts++] = v;
		n->kernel = k;
	}
	/* Reduction groups. */
	for (int v = 0; v < ir->n; v++) {
		ir_node *r = &ir->nodes[v];
		if (!live[v] || r->op != IR_REDUCE)
			continue;
		ir_node *src = &ir->nodes[r->src[0]];
		char *idx[COIL_MAX_RANK];
		int joined = -1;
		for (int k = ir->nk - 1; k >= 0 && joined < 0; k--) {
			ir_kernel *K = &ir->ks[k];
			if (K->kind != K_REDUCE)
				continue;
			ir_node *r0 = &ir->nodes[K->reds[0]], *s0 = &ir->nodes[r0->src[0]];
			if (r0->mask != r->mask || s0->rank != src->rank || !dims_equal(s0->shape, src->shape, src->rank))
				continue;
			full_idx(&c, src, idx);
			if (check(&c, r->src[0], idx, k) == 0)
				joined = k;
		}
		if (joined < 0 && (joined = new_kernel(ir, K_REDUCE, err)) < 0)
			return -1;
		ir_kernel *K = &ir->ks[joined];
		K->reds[K->nreds++] = v;
		r->kernel = joined;
	}
	/* Materialized pointwise nodes: a group's epilogue or a kernel of their own. */
	for (int v = 0; v < ir->n; v++) {
		ir_node *p = &ir->nodes[v];
		if (!live[v] || !p->mat || p->op == IR_EXTERN || p->op == IR_REDUCE)
			continue;
		int joined = -1;
		for (int k = ir->nk - 1; k >= 0 && joined < 0; k--) {
			ir_kernel *K = &ir->ks[k];
			if (K->kind != K_REDUCE)
				continue;
			ir_node *r0 = &ir->nodes[K->reds[0]], *s0 = &ir->nodes[r0->src[0]];
			char *idx[COIL_MAX_RANK];
			int full = p->rank == s0->rank && dims_equal(p->shape, s0->shape, p->rank);
			if (full)
				full_idx(&c, s0, idx);
			else if (outer_idx(&c, r0, p, idx))
				continue;
			/* must read a member inline to be worth it */
			p->kernel = k;
			int ok = check(&c, v, idx, k) == 0;
			if (!ok) {
				p->kernel = -1;
				continue;
			}
			/* worth it only when v reads a member inline */
			memset(c.cover, 0, (size_t)(ir->n + 1) * sizeof(int));
			ir_kernel tmp = {.cover = c.scratch};
			int uses = 0;
			c.probe = 1;
			cover(&c, v, k, &tmp);
			c.probe = 0;
			p->kernel = -1;
			for (int i = 0; i < K->nreds; i++)
				uses |= c.cover[K->reds[i]] == k + 1;
			if (uses)
				joined = k;
		}
		if (joined < 0 && (joined = new_kernel(ir, K_POINTWISE, err)) < 0)
			return -1;
		ir_kernel *K = &ir->ks[joined];
		K->outs[K->nouts++] = v;
		p->kernel = joined;
	}
	/* Covered graph nodes; reductions read from other kernels get buffers. */
	for (int k = 0; k < ir->nk; k++) {
		ir_kernel *K = &ir->ks[k];
		K->cover = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
		memset(c.cover, 0, (size_t)(ir->n + 1) * sizeof(int));
		if (K->kind == K_EXTERN) {
			K->cover[K->ncover++] = ir->nodes[K->ext].gnode;
			continue;
		}
		for (int i = 0; i < K->nreds; i++)
			cover(&c, K->reds[i], k, K);
		for (int i = 0; i < K->nouts; i++)
			cover(&c, K->outs[i], k, K);
	}
	return 0;
}
