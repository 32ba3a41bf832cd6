/* fold: computes what does not depend on the inputs before the run does.
 *
 * Every value is classed, in node order: dynamic (depends on an input),
 * constant (depends on graph constants and fills only: full, zeros, and
 * new_zeros or zeros_like of any value, whose values they do not read) or weight
 * (depends on params, perhaps constants too).  A node is dynamic, whatever
 * its inputs, when a result has a symbolic shape or a symbolic size argument,
 * when it is B = t(W) of a matrix product (oneDNN reads W transposed at no
 * cost: dn_b_transposed), or when it would grow
 * too much: every result of a folded node holds at most
 *     max(FOLD_MIN_ELEMS, 2 * the largest constant or param it is computed from)
 * elements (FOLD_MIN_WEIGHT_ELEMS for weights, which take memory, not artifact
 * bytes: Swin's relative-position bias, a table gathered by a constant index,
 * holds 2401 x heads), so an expand or a fill of a big shape stays a loop that
 * costs nothing to keep.  Weight nodes also exclude library calls (convolutions,
 * matrix products).
 *
 * The frontier, constant or weight values read by a node of a later class
 * or by the graph's outputs, is folded when it is worth a buffer: something
 * in its cone computes or moves data (a pointwise op, a reduction, cat, a
 * permute; not only reshapes, slices, expands, aliases and fills).
 *   - constants are computed now, by the reference interpreter (the tests'
 *     oracle), and become graph constants;
 *   - weights are computed in coil_model_create, once the params are bound,
 *     by the kernels of a second IR (`create`), into params numbered after
 *     the user's; run never executes them, and user params nothing reads
 *     any more are not copied at all.
 * The rest of the pipeline compiles a copy of the graph where folded values
 * are constants and params and the nodes only they needed are gone; the
 * user's graph is not changed.  A fold that cannot be done (the interpreter
 * or a create pass fails) is not done: the nodes stay in the run.
 *
 * COIL_FOLD=0 in the compiler's environment turns folding off (measurement
 * switch, not in the cache key: use a private COIL_CACHE_DIR). */
#include <stdlib.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "codegen/ir.h"
#include "common/infer.h"
#include "common/interp.h"

#define FOLD_MIN_ELEMS 4096
#define FOLD_MIN_WEIGHT_ELEMS 65536 /* 256 KB of f32 */

enum { DYN, CST, WGT };

typedef struct fctx {
	coil_graph *g;
	coil_arena *a;
	char *cls;        /* per value */
	char *worth;      /* per value: its cone computes something */
	int64_t *leaf;    /* per value: largest constant or param in its cone (elements) */
	char *fold;       /* per value: folded */
	char *keep;       /* per node: stays in the run graph */
	char *mark;       /* per node: scratch for cone walks */
	int *vnode;       /* per value: producing node, -1 */
	int *stack;       /* per node: cone's walk */
} fctx;

static int64_t numel(const coil_value *v)
{
	int64_t n = 1, d;
	for (int i = 0; i < v->rank; i++)
		n *= dim_is_const(&v->shape[i], &d) ? d : 0;
	return n;
}

/* Runs the statements after v for each tensor argument value v of node n. */
#define FOR_TENSOR_ARGS(n, VAR, ...)                                                        \
	do {                                                                                \
		const op_info *oi_ = op_get((n)->op);                                       \
		for (int a_ = 0; a_ < oi_->nargs; a_++)                                     \
			if ((n)->args[a_].kind == ARG_TENSOR || (n)->args[a_].kind == ARG_TENSORS) \
				for (int k_ = 0; k_ < (n)->args[a_].n; k_++) {              \
					int VAR = (n)->args[a_].v[k_];                      \
					if (VAR >= 0) {                                     \
						__VA_ARGS__;                                \
					}                                                   \
				}                                                           \
	} while (0)

/* A node whose results are fills, or views that move nothing (a permute
 * makes a strided read contiguous: it counts as work). */
static int is_passive(const coil_node *n)
{
	switch (n->op) {
	case OP_FULL: case OP_ZEROS: case OP_NEW_ZEROS: case OP_ZEROS_LIKE: case OP_ONES_LIKE: case OP_FULL_LIKE:
		return 1;
	case OP_PERMUTE: case OP_TRANSPOSE: case OP_T: return 0;
	default: return op_get(n->op)->kind == VIEW;
	}
}

/* Whether n reads its tensor arguments' values: a fill after a template
 * (new_zeros, zeros_like, ones_like, full_like) reads only its shape and
 * dtype, so Swin's shifted-window mask, new_zeros(x) and slices of it
 * assigned, is a constant, not a function of x. */
static int reads_values(const coil_node *n)
{
	double v;
	return !fill_value(n, &v);
}

static int symbolic_args(const coil_node *n)
{
	const op_info *oi = op_get(n->op);
	int64_t d;
	for (int a = 0; a < oi->nargs; a++)
		if (n->args[a].kind == ARG_DIMS)
			for (int k = 0; k < n->args[a].n; k++)
				if (!dim_is_const(&n->args[a].dims[k], &d))
					return 1;
	return 0;
}

static void classify(fctx *c, const char *dn_trans)
{
	coil_graph *g = c->g;
	for (int v = 0; v < g->nvals; v++) {
		coil_value *val = &g->vals[v];
		c->cls[v] = val->kind == VAL_PARAM ? WGT : val->kind == VAL_CONST ? CST : DYN;
		c->leaf[v] = val->kind == VAL_NODE ? 0 : numel(val);
	}
	for (int i = 0; i < g->nnodes; i++) {
		coil_node *n = &g->nodes[i];
		int cls = CST, worth = !is_passive(n);
		int64_t leaf = 0;
		if (reads_values(n))
			FOR_TENSOR_ARGS(n, v, {
				cls = c->cls[v] == DYN || cls == DYN ? DYN : c->cls[v] > cls ? c->cls[v] : cls;
				worth |= c->worth[v];
				leaf = c->leaf[v] > leaf ? c->leaf[v] : leaf;
			});
		if (dn_trans[i] || symbolic_args(n))
			cls = DYN;
		if (cls == WGT && op_get(n->op)->kind == EXT)
			cls = DYN;
		const int64_t lo = cls == WGT ? FOLD_MIN_WEIGHT_ELEMS : FOLD_MIN_ELEMS;
		int64_t cap = 2 * leaf > lo ? 2 * leaf : lo;
		for (int k = 0; k < n->nout; k++) {
			coil_value *o = node_out(g, n, k);
			if (!shape_is_const(o->shape, o->rank) || numel(o) > cap)
				cls = DYN;
		}
		for (int k = 0; k < n->nout; k++) {
			c->cls[n->outs[k]] = (char)cls;
			c->worth[n->outs[k]] = (char)worth;
			c->leaf[n->outs[k]] = leaf;
			c->vnode[n->outs[k]] = i;
		}
	}
}

/* The frontier, folded where worth it (a weight cast to bf16 under autocast
 * is converted once, in create). */
static void frontier(fctx *c)
{
	coil_graph *g = c->g;
	for (int i = 0; i < g->nnodes; i++) {
		coil_node *n = &g->nodes[i];
		int rc = c->cls[n->outs[0]];
		FOR_TENSOR_ARGS(n, v, {
			if (c->cls[v] != DYN && c->cls[v] != rc && (rc == DYN || c->cls[v] == CST))
				c->fold[v] = 1;
		});
	}
	for (int i = 0; i < g->noutputs; i++)
		if (c->cls[g->outputs[i]] != DYN)
			c->fold[g->outputs[i]] = 1;
	for (int v = 0; v < g->nvals; v++)
		if (g->vals[v].kind != VAL_NODE || !c->worth[v])
			c->fold[v] = 0;
}

/* Which nodes the run graph keeps: the dynamic ones and whatever they (or
 * the outputs) read that is not folded.  A kept node computes all its
 * results, so none of them is folded. */
static void keep_pass(fctx *c)
{
	coil_graph *g = c->g;
	char *need = c->mark;
	memset(need, 0, (size_t)g->nvals + 1);
	for (int i = 0; i < g->noutputs; i++)
		need[g->outputs[i]] = 1;
	for (int i = g->nnodes - 1; i >= 0; i--) {
		coil_node *n = &g->nodes[i];
		int keep = c->cls[n->outs[0]] == DYN;
		for (int k = 0; k < n->nout; k++)
			keep |= need[n->outs[k]] && !c->fold[n->outs[k]];
		c->keep[i] = (char)keep;
		if (!keep)
			continue;
		for (int k = 0; k < n->nout; k++)
			c->fold[n->outs[k]] = 0;
		FOR_TENSOR_ARGS(n, v, need[v] = 1);
	}
}

/* Marks (c->mark, per node) the nodes computing value v in graph vals. */
static void cone(fctx *c, const coil_value *vals, int v)
{
	if (vals[v].kind != VAL_NODE || c->mark[c->vnode[v]])
		return;
	/* as deep as the graph: a loop over a stack, each node pushed once */
	int sp = 0;
	c->mark[c->vnode[v]] = 1;
	c->stack[sp++] = c->vnode[v];
	while (sp) {
		coil_node *n = &c->g->nodes[c->stack[--sp]];
		if (!reads_values(n))
			continue;
		FOR_TENSOR_ARGS(n, u, {
			if (vals[u].kind == VAL_NODE && !c->mark[c->vnode[u]]) {
				c->mark[c->vnode[u]] = 1;
				c->stack[sp++] = c->vnode[u];
			}
		});
	}
}

/* A graph over a copy of vals holding the nodes with sel[i] set (renumbered;
 * results of the others are referenced by none of them), no inputs, the
 * user's params, the constants consts[0..nconsts) and the given outputs. */
static coil_graph *subgraph(fctx *c, const coil_value *vals, const char *sel, int nconsts, int *consts, int nout,
			    int *outs)
{
	coil_graph *g = c->g, *s = arena_alloc(c->a, sizeof *s);
	if (!s)
		return NULL;
	*s = *g;
	s->arena = c->a;
	s->capvals = g->nvals;
	s->vals = arena_alloc(c->a, (size_t)(g->nvals + 1) * sizeof *s->vals);
	s->nodes = arena_alloc(c->a, (size_t)(g->nnodes + 1) * sizeof *s->nodes);
	if (!s->vals || !s->nodes)
		return NULL;
	memcpy(s->vals, vals, (size_t)g->nvals * sizeof *s->vals);
	s->nnodes = 0;
	for (int i = 0; i < g->nnodes; i++) {
		coil_node *n = &g->nodes[i];
		for (int k = 0; k < n->nout; k++)
			if (s->vals[n->outs[k]].kind == VAL_NODE)
				s->vals[n->outs[k]].index = sel[i] ? s->nnodes : -1;
		if (sel[i])
			s->nodes[s->nnodes++] = *n;
	}
	s->nconsts = nconsts;
	s->consts = consts;
	s->noutputs = nout;
	s->outputs = outs;
	return s;
}

/* Compile-time folds: the constant values to fold, computed by the
 * interpreter; they become constants nconsts.. of vals.  0 with nothing
 * folded when the interpreter fails. */
static int fold_consts(fctx *c, coil_value *vals, int *nconsts, int *consts, int *nfolded)
{
	coil_graph *g = c->g;
	int *outs = arena_alloc(c->a, (size_t)(g->nvals + 1) * sizeof(int)), n = 0;
	if (!outs)
		return -1;
	memset(c->mark, 0, (size_t)g->nnodes + 1);
	for (int v = 0; v < g->nvals; v++)
		if (c->fold[v] && c->cls[v] == CST) {
			outs[n++] = v;
			cone(c, vals, v);
		}
	*nfolded = 0;
	if (!n)
		return 0;
	coil_graph *s = subgraph(c, vals, c->mark, g->nconsts, g->consts, n, outs);
	coil_tensor *res = calloc((size_t)n, sizeof *res);
	coil_err e = {0};
	if (!s || !res) {
		free(res);
		return -1;
	}
	s->ninputs = s->nparams = 0;
	if (interp_run(s, NULL, NULL, res, &e)) {
		/* e.g. an index out of range: the run reports it, as it would have */
		free(res);
		for (int j = 0; j < n; j++)
			c->fold[outs[j]] = 0;
		return 0;
	}
	int rc = 0;
	for (int j = 0; j < n && !rc; j++) {
		coil_value *val = &vals[outs[j]];
		size_t bytes = (size_t)numel(val) * dtype_size(val->dtype);
		void *d = arena_alloc(c->a, bytes + 1);
		if (!d) {
			rc = -1;
			break;
		}
		if (bytes)
			memcpy(d, res[j].data, bytes);
		val->kind = VAL_CONST;
		val->index = *nconsts;
		val->data = d;
		val->name = NULL;
		consts[(*nconsts)++] = outs[j];
	}
	for (int j = 0; j < n; j++)
		tensor_free(&res[j]);
	free(res);
	*nfolded = n;
	return rc;
}

/* The create IR: decompose, fuse, schedule and plan the weight folds of
 * graph vals.  NULL (nothing folded) when a pass fails: they stay in the run. */
static coil_ir *create_ir(fctx *c, const coil_value *vals, int nconsts, int *consts, int n, int *outs)
{
	memset(c->mark, 0, (size_t)c->g->nnodes + 1);
	for (int j = 0; j < n; j++)
		cone(c, vals, outs[j]);
	coil_graph *s = subgraph(c, vals, c->mark, nconsts, consts, n, outs);
	if (!s)
		return NULL;
	s->ninputs = 0;
	coil_err e = {0};
	coil_ir *ir = ir_create(s, &e);
	if (!ir)
		return NULL;
	if (ir_plan_dnnl(ir, &e) || (ir->dn && ir->dn->nf) || ir_decompose(ir, &e) || ir_fuse(ir, &e) ||
	    ir_schedule(ir, &e) || ir_memplan(ir, &e)) {
		ir_free(ir);
		return NULL;
	}
	return ir;
}

static int fold_off(void)
{
	const char *sw = getenv("COIL_FOLD");
	return sw && !strcmp(sw, "0");
}

int ir_fold_graph(coil_graph *g, unsigned features, ir_fold **out, coil_err *err)
{
	coil_arena *a = arena_create();
	ir_fold *fd = a ? arena_alloc(a, sizeof *fd) : NULL;
	*out = NULL;
	if (!fd) {
		arena_destroy(a);
		return coil_err_oom(err);
	}
	fd->arena = a;
	fd->g = g;
	fd->param_live = arena_alloc(a, (size_t)g->nparams + 1);
	if (!fd->param_live)
		goto oom;
	memset(fd->param_live, 1, (size_t)g->nparams);
	if (fold_off() || !g->nnodes) {
		*out = fd;
		return 0;
	}
	size_t nv = (size_t)g->nvals + 1, nn = (size_t)g->nnodes + 1;
	fctx c = {.g = g, .a = a};
	c.cls = arena_alloc(a, nv);
	c.worth = arena_alloc(a, nv);
	c.fold = arena_alloc(a, nv);
	c.mark = arena_alloc(a, nv > nn ? nv : nn);
	c.keep = arena_alloc(a, nn);
	c.leaf = arena_alloc(a, nv * sizeof(int64_t));
	c.vnode = arena_alloc(a, nv * sizeof(int));
	c.stack = arena_alloc(a, nn * sizeof(int));
	char *dn_trans = arena_alloc(a, nn);
	coil_value *vals = arena_alloc(a, nv * sizeof *vals);
	int *consts = arena_alloc(a, (nv + (size_t)g->nconsts) * sizeof(int));
	if (!c.cls || !c.worth || !c.fold || !c.mark || !c.keep || !c.leaf || !c.vnode || !c.stack || !dn_trans || !vals ||
	    !consts)
		goto oom;
	for (int v = 0; v < g->nvals; v++)
		c.vnode[v] = -1;
	/* B = t(W) of a matrix product stays for oneDNN to read transposed */
	for (int i = 0; i < g->nnodes && dn_enabled(); i++) {
		int t = dn_b_transposed(g, &g->nodes[i]);
		if (t >= 0)
			dn_trans[t] = 1;
	}
	/* and an int8 layer's weight dequantize, for oneDNN to read the s8 weight */
	if (dn_q_weights(g, features, dn_trans))
		goto oom;
	classify(&c, dn_trans);
	frontier(&c);
	keep_pass(&c);

	/* compile time */
	memcpy(vals, g->vals, (size_t)g->nvals * sizeof *vals);
	if (g->nconsts)
		memcpy(consts, g->consts, (size_t)g->nconsts * sizeof(int));
	int nconsts = g->nconsts;
	if (fold_consts(&c, vals, &nconsts, consts, &fd->nconst))
		goto oom;
	if (!fd->nconst) /* the interpreter failed: nothing folded */
		keep_pass(&c);

	/* create time */
	int *wouts = arena_alloc(a, nv * sizeof(int)), nw = 0;
	if (!wouts)
		goto oom;
	for (int v = 0; v < g->nvals; v++)
		if (c.fold[v] && c.cls[v] == WGT)
			wouts[nw++] = v;
	if (nw && !(fd->create = create_ir(&c, vals, nconsts, consts, nw, wouts))) {
		for (int j = 0; j < nw; j++)
			c.fold[wouts[j]] = 0;
		keep_pass(&c);
		nw = 0;
	}
	fd->nparam = nw;
	fd->bytes = arena_alloc(a, (size_t)(nw + 1) * sizeof(int64_t));
	if (!fd->bytes)
		goto oom;
	for (int j = 0; j < nw; j++) {
		coil_value *val = &vals[wouts[j]];
		fd->bytes[j] = numel(val) * (int64_t)dtype_size(val->dtype);
		fd->folded_bytes += fd->bytes[j];
	}
	if (!fd->nconst && !nw) {
		*out = fd;
		return 0;
	}
	/* the run graph: folded weights are params nparams.. */
	coil_graph *rg = subgraph(&c, vals, c.keep, nconsts, consts, g->noutputs, g->outputs);
	if (!rg)
		goto oom;
	for (int j = 0; j < nw; j++) {
		rg->vals[wouts[j]].kind = VAL_PARAM;
		rg->vals[wouts[j]].index = g->nparams + j;
		rg->vals[wouts[j]].name = NULL;
	}
	for (int i = 0; i < g->nparams; i++) {
		int used = 0;
		for (int o = 0; o < g->noutputs; o++)
			used |= g->outputs[o] == g->params[i];
		fd->param_live[i] = (char)used;
	}
	for (int i = 0; i < rg->nnodes; i++) {
		coil_node *n = &rg->nodes[i];
		FOR_TENSOR_ARGS(n, v, {
			if (v < g->nvals && rg->vals[v].kind == VAL_PARAM && rg->vals[v].index < g->nparams)
				fd->param_live[rg->vals[v].index] = 1;
		});
	}
	fd->g = rg;
	*out = fd;
	return 0;
oom:
	ir_fold_free(fd);
	return coil_err_oom(err);
}

void ir_fold_free(ir_fold *fd)
{
	if (!fd)
		return;
	ir_free(fd->create);
	arena_destroy(fd->arena);
}
