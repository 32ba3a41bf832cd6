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
 * buffer, which also keeps the kernel graph acyclic.
 *
 * Inlining has a cost model (bound_inlining): no inlined expression is more
 * than FUSE_MAX_DEPTH nodes deep, and no node is evaluated more than
 * FUSE_MAX_RECOMPUTE times for each evaluation of the kernels that read it.
 * (a reshape counts FUSE_RESHAPE_DEPTH deep).  A node past either bound gets a buffer.  So the emitted C grows linearly
 * with the graph (a chain of softmaxes grew with its square, a chain of
 * add(x, x) exponentially), and every walk along an inlined expression (here,
 * in memplan and in the emitters) is at most FUSE_MAX_DEPTH deep.  Neither
 * bound changes a kernel of the model suite.
 *
 * A third bound counts elements: a costly node (exp, log, sqrt, a division,
 * tanh, erf ...: what vmath or a divider computes) that its readers evaluate
 * FUSE_MAX_RECOMPUTE or more times per element of its own, read through a
 * broadcast, gets a buffer too, unless it reads a reduction (a row's
 * statistic, which the reduction kernel's epilogue already computes once per
 * row).  A squeeze-excite gate, sigmoid(conv(mean(x))) of [N, C, 1, 1], was
 * recomputed for every pixel of the [N, C, H, W] product it scales: its exp
 * and division twice per element of that pass, the SiLU's being the other
 * (efficientnet_b0's 144 x 56 x 56 scale, one thread on a Zen 4: 0.27 ms,
 * 0.16 with the gate a buffer of 144 floats).  Symbolic dims count 1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"

typedef struct group {
	int kernel;       /* index in ir->ks */
	int red0;         /* first reduction: its input shape and mask */
} group;

#define FUSE_MAX_DEPTH 64
#define FUSE_MAX_RECOMPUTE 16
/* A reshape counts this deep: its index expressions repeat its reader's (a
 * linear offset, then a division and a remainder of it), so a chain of
 * reshapes doubles them at each step.  8 of them inline at most. */
#define FUSE_RESHAPE_DEPTH 8
/* A reduction or a materialized node looks for a reduction group to join
 * among the latest this many (a chain of 20,000 softmaxes looked through all
 * the groups before it, each time through the whole graph). */
#define FUSE_JOIN_WINDOW 64

typedef struct fctx {
	coil_ir *ir;
	coil_err *err;
	int *grp;         /* node -> kernel index for reductions, -1 */
	int *seen;        /* boundary walk: the walk (walks) that visited a node */
	int walks;
	int *stack;       /* boundary walk: nodes to visit */
	int *kmin;        /* per kernel: its first member node (none before it reads it) */
	int cur;          /* kernel being checked */
	int *cover;       /* node -> the walk (gen) that covered it */
	int gen;          /* cover walks so far */
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

/* Boundary walk: from v (read through a buffer), may kernel k be reached?
 * Through buffers too, so as deep as the graph: a loop over a stack.  Nodes
 * come after what they read, so nothing before k's first member leads to it. */
static int reaches(fctx *c, int v, int k)
{
	int sp = 0, walk = ++c->walks;
	c->stack[sp++] = v;
	c->seen[v] = walk;
	while (sp) {
		ir_node *n = &c->ir->nodes[c->stack[--sp]];
		if (n->kernel == k && (n->op == IR_REDUCE || n->mat))
			return 1;
		int cnt;
		const int *s = ir_srcs(n, &cnt);
		for (int i = 0; i < cnt; i++)
			if (c->seen[s[i]] != walk && s[i] >= c->kmin[k]) {
				c->seen[s[i]] = walk;
				c->stack[sp++] = s[i]; /* each node once: the stack holds at most ir->n */
			}
	}
	return 0;
}

/* Read inline by its readers (no buffer of its own, not a constant fill). */
static int inlined(const ir_node *n)
{
	return !is_buffer(n) && n->op != IR_FILL;
}

/* A pointwise node that costs far more than a load (the third bound, top of file) */
static int costly(const ir_node *n)
{
	if (n->op == IR_UNARY)
		switch (n->sub) {
		case PR_EXP: case PR_LOG: case PR_LOG1P: case PR_SQRT: case PR_RECIP: case PR_SIN: case PR_COS:
		case PR_ERF: case PR_TANH:
			return 1;
		default:
			return 0;
		}
	return n->op == IR_BINARY && (n->sub == PR_DIV || n->sub == PR_POW || n->sub == PR_REM);
}

/* Elements of n, its symbolic dims counted 1 */
static double elems(const ir_node *n)
{
	double e = 1;
	for (int d = 0; d < n->rank; d++) {
		int64_t k;
		if (dim_is_const(&n->shape[d], &k))
			e *= (double)k;
	}
	return e;
}

/* The cost model (top of file): buffers for the live nodes that are inlined
 * deeper than FUSE_MAX_DEPTH, evaluated more than FUSE_MAX_RECOMPUTE times, or
 * costly and evaluated FUSE_MAX_RECOMPUTE times per element of their own.
 * Views are index arithmetic: their reads are counted on their source. */
static int bound_inlining(coil_ir *ir, const char *live, coil_err *err)
{
	int *depth = calloc((size_t)ir->n + 1, sizeof *depth);
	int64_t *evals = calloc((size_t)ir->n + 1, sizeof *evals);
	double *elts = calloc((size_t)ir->n + 1, sizeof *elts); /* elements evaluated per run */
	char *rred = calloc((size_t)ir->n + 1, 1);
	if (!depth || !evals || !elts || !rred) {
		free(depth);
		free(evals);
		free(elts);
		free(rred);
		return coil_err_oom(err);
	}
	for (int v = 0; v < ir->n; v++) {
		ir_node *n = &ir->nodes[v];
		if (!live[v] || !inlined(n))
			continue;
		int cnt, d = 0;
		const int *s = ir_srcs(n, &cnt);
		for (int i = 0; i < cnt; i++)
			d = depth[s[i]] > d ? depth[s[i]] : d;
		depth[v] = d + (n->op == IR_VIEW && n->sub == V_RESHAPE ? FUSE_RESHAPE_DEPTH : 1);
		if (depth[v] > FUSE_MAX_DEPTH) {
			n->mat = 1;
			depth[v] = 0;
		}
	}
	/* per node: it reads a reduction, itself or through inlined nodes */
	for (int v = 0; v < ir->n; v++) {
		ir_node *n = &ir->nodes[v];
		int cnt;
		const int *s = ir_srcs(n, &cnt);
		for (int i = 0; live[v] && i < cnt; i++)
			rred[v] |= ir->nodes[s[i]].op == IR_REDUCE || (inlined(&ir->nodes[s[i]]) && rred[s[i]]);
	}
	/* readers come after what they read: evaluations flow backwards */
	for (int v = ir->n - 1; v >= 0; v--) {
		ir_node *n = &ir->nodes[v];
		if (!live[v])
			continue;
		int64_t e = 1;
		double el = elems(n);
		if (inlined(n)) {
			e = evals[v];
			el = elts[v];
			if ((e > FUSE_MAX_RECOMPUTE ||
			     (costly(n) && !rred[v] && el >= FUSE_MAX_RECOMPUTE * elems(n))) && n->op != IR_VIEW) {
				n->mat = 1;
				e = 1;
				el = elems(n);
			}
		}
		int cnt;
		const int *s = ir_srcs(n, &cnt);
		for (int i = 0; i < cnt; i++) {
			evals[s[i]] = evals[s[i]] + e > INT32_MAX ? INT32_MAX : evals[s[i]] + e;
			elts[s[i]] += n->op == IR_REDUCE ? elems(&ir->nodes[s[i]]) : el; /* its input, once */
		}
	}
	free(depth);
	free(evals);
	free(elts);
	free(rred);
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
	if (is_buffer(n) && !(n->mat && n->kernel == k && n->op != IR_REDUCE))
		return reaches(c, v, k) ? -1 : 0;
	for (int i = 0; i < n->nsrc; i++) {
		char *sidx[COIL_MAX_RANK];
		ix_operand(c->ir, n, i, idx, sidx);
		if (check(c, n->src[i], sidx, k))
			return -1;
	}
	return 0;
}

/* Kernels and their lists grow by doubling (in the arena): a graph of many
 * kernels costs memory in proportion to it. */
static int grow(coil_arena *a, void **p, int n, int *cap, size_t size)
{
	if (n < *cap)
		return 0;
	int nc = *cap ? 2 * *cap : 4;
	void *q = arena_alloc(a, (size_t)nc * size);
	if (!q)
		return -1;
	if (n)
		memcpy(q, *p, (size_t)n * size);
	*p = q;
	*cap = nc;
	return 0;
}

static int new_kernel(coil_ir *ir, enum kernel_kind kind, coil_err *err)
{
	if (grow(ir->arena, (void **)&ir->ks, ir->nk, &ir->capk, sizeof *ir->ks))
		return coil_err_oom(err);
	ir->ks[ir->nk] = (ir_kernel){.kind = kind, .ext = -1};
	return ir->nk++;
}

/* Appends v to kernel k's outputs (reds: its reductions). */
static int kernel_add(fctx *c, int k, int v, int reds, coil_err *err)
{
	coil_ir *ir = c->ir;
	ir_kernel *K = &ir->ks[k];
	if (!K->nouts && !K->nreds)
		c->kmin[k] = v;
	c->kmin[k] = v < c->kmin[k] ? v : c->kmin[k];
	int **l = reds ? &K->reds : &K->outs, *n = reds ? &K->nreds : &K->nouts, *cap = reds ? &K->capreds : &K->capouts;
	if (grow(ir->arena, (void **)l, *n, cap, sizeof(int)))
		return coil_err_oom(err);
	(*l)[(*n)++] = v;
	return 0;
}

/* v into kernel joined, or into a new kernel of kind when joined is -1 (a
 * reduction among the kernel's reductions, anything else its outputs). */
static int place(fctx *c, int v, int joined, enum kernel_kind kind, coil_err *err)
{
	if (joined < 0 && (joined = new_kernel(c->ir, kind, err)) < 0)
		return -1;
	if (kernel_add(c, joined, v, c->ir->nodes[v].op == IR_REDUCE, err))
		return -1;
	c->ir->nodes[v].kernel = joined;
	return 0;
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

/* Inline walk collecting covered graph nodes and reductions read from other
 * kernels; one walk (c->gen) marks what it covered. */
static void cover(fctx *c, int v, int k, ir_kernel *K)
{
	ir_node *n = &c->ir->nodes[v];
	if (c->cover[v] == c->gen)
		return;
	c->cover[v] = c->gen;
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
	c.seen = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	c.kmin = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	c.cover = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	c.scratch = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	if (!c.scratch || !live || !c.seen || !c.kmin || !c.cover)
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
	c.stack = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	if (!c.stack || bound_inlining(ir, live, err))
		return !c.stack ? coil_err_oom(err) : -1;
	/* Extern kernels: one per graph node (gk: its kernel + 1). */
	int *gk = arena_alloc(ir->arena, (size_t)(ir->g->nnodes + 1) * sizeof(int));
	if (!gk)
		return coil_err_oom(err);
	for (int v = 0; v < ir->n; v++) {
		ir_node *n = &ir->nodes[v];
		if (!live[v] || n->op != IR_EXTERN)
			continue;
		if (place(&c, v, gk[n->gnode] - 1, K_EXTERN, err))
			return -1;
		gk[n->gnode] = n->kernel + 1;
		if (ir->ks[n->kernel].ext < 0)
			ir->ks[n->kernel].ext = v;
	}
	/* Reduction groups. */
	for (int v = 0; v < ir->n; v++) {
		ir_node *r = &ir->nodes[v];
		if (!live[v] || r->op != IR_REDUCE)
			continue;
		ir_node *src = &ir->nodes[r->src[0]];
		char *idx[COIL_MAX_RANK];
		int joined = -1, looked = 0;
		for (int k = ir->nk - 1; k >= 0 && joined < 0 && looked < FUSE_JOIN_WINDOW; k--) {
			ir_kernel *K = &ir->ks[k];
			if (K->kind != K_REDUCE)
				continue;
			looked++;
			ir_node *r0 = &ir->nodes[K->reds[0]], *s0 = &ir->nodes[r0->src[0]];
			if (r0->mask != r->mask || s0->rank != src->rank || !dims_equal(s0->shape, src->shape, src->rank))
				continue;
			full_idx(&c, src, idx);
			if (check(&c, r->src[0], idx, k) == 0)
				joined = k;
		}
		if (place(&c, v, joined, K_REDUCE, err))
			return -1;
	}
	/* Materialized pointwise nodes: a group's epilogue or a kernel of their own. */
	for (int v = 0; v < ir->n; v++) {
		ir_node *p = &ir->nodes[v];
		if (!live[v] || !p->mat || p->op == IR_EXTERN || p->op == IR_REDUCE)
			continue;
		int joined = -1, looked = 0;
		for (int k = ir->nk - 1; k >= 0 && joined < 0 && looked < FUSE_JOIN_WINDOW; k--) {
			ir_kernel *K = &ir->ks[k];
			if (K->kind != K_REDUCE)
				continue;
			looked++;
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
			ir_kernel tmp = {.cover = c.scratch};
			int uses = 0;
			c.probe = 1;
			c.gen++;
			cover(&c, v, k, &tmp);
			c.probe = 0;
			p->kernel = -1;
			for (int i = 0; i < K->nreds; i++)
				uses |= c.cover[K->reds[i]] == c.gen;
			if (uses)
				joined = k;
		}
		if (place(&c, v, joined, K_POINTWISE, err))
			return -1;
	}
	/* Covered graph nodes; reductions read from other kernels get buffers. */
	for (int k = 0; k < ir->nk; k++) {
		ir_kernel *K = &ir->ks[k];
		K->cover = c.scratch; /* then a copy of what it holds */
		K->ncover = 0;
		c.gen++;
		if (K->kind == K_EXTERN)
			K->cover[K->ncover++] = ir->nodes[K->ext].gnode;
		for (int i = 0; K->kind != K_EXTERN && i < K->nreds; i++)
			cover(&c, K->reds[i], k, K);
		for (int i = 0; K->kind != K_EXTERN && i < K->nouts; i++)
			cover(&c, K->outs[i], k, K);
		if (!(K->cover = arena_alloc(ir->arena, (size_t)(K->ncover + 1) * sizeof(int))))
			return coil_err_oom(err);
		memcpy(K->cover, c.scratch, (size_t)K->ncover * sizeof(int));
	}
	return 0;
}
