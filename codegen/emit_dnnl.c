/* emit_dnnl: renders the fusions planned by lower_dnnl.c (see dnnl.h).
 *
 * Generated pieces:
 *   - before the kernels: the rt's source (#include "dnnl_rt.c", written
 *     beside model.c by build.c) and struct coil_dn: the model's rt context
 *     (its thread count is the model's), one rt object per fusion and the
 *     symbol binding they were built for;
 *   - per fusion, coil_dn_make<J>: the descriptor from the shapes (symbols
 *     bound), the weights with folds applied (batch norm, constant
 *     multiply/add), then rt_conv_create / rt_matmul_create, which prepack
 *     them into the layout the chosen primitive wants;
 *   - coil_dn_prepare (re)builds every object when the binding changes: at
 *     create when the graph has no symbols, else at the DN_HOT-th run of each
 *     binding (before it, matrix products over a symbolic m run on the
 *     handle's shape-generic objects and only the others are made for the
 *     binding: generic_ok); coil_dn_free;
 *   - the kernel of a fusion: one rt_conv_run / rt_matmul_run. */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "common/infer.h"

typedef struct nctx {
	coil_ir *ir;
	FILE *f;
} nctx;

static void out(nctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(nctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(c->f, fmt, ap);
	va_end(ap);
}

static char *dimc(nctx *c, const coil_dim *d) { return arena_printf(c->ir->arena, "(%s)", ir_dim_c(c->ir->arena, d)); }

int dn_used(const coil_ir *ir) { return ir->dn != NULL; }

static dn_fuse *fusion_of(coil_ir *ir, int gnode, int *j)
{
	dn_plan *p = ir->dn;
	for (int i = 0; p && i < p->nf; i++)
		if (p->f[i].head == gnode) {
			*j = i;
			return &p->f[i];
		}
	return NULL;
}

/* A graph value that is a parameter or constant, as a C expression in create. */
static char *const_ptr(nctx *c, int v)
{
	coil_value *val = &c->ir->g->vals[v];
	if (val->kind == VAL_PARAM)
		return arena_printf(c->ir->arena, "((const void *)m->par[%d])", val->index);
	return arena_printf(c->ir->arena, "c%d", val->index);
}

/* A float literal (clamp bounds may be infinite). */
static char *flit(nctx *c, double v)
{
	if (isinf(v))
		return v < 0 ? "-INFINITY" : "INFINITY";
	return arena_printf(c->ir->arena, "(float)%.17g", v);
}

static int tensor_arg(const coil_node *n, int i) { return n->args[i].kind == ARG_TENSOR ? n->args[i].v[0] : -1; }
static int producer_of(const coil_graph *g, int v) { return g->vals[v].index; }

static int is_const_val(const coil_graph *g, int v)
{
	return v >= 0 && (g->vals[v].kind == VAL_PARAM || g->vals[v].kind == VAL_CONST);
}

/* --- kernels ---------------------------------------------------------------- */

int dn_create_only(coil_ir *ir, int ext, int i)
{
	const ir_node *e = &ir->nodes[ext];
	int j;
	dn_fuse *fz = e->op == IR_EXTERN ? fusion_of(ir, e->gnode, &j) : NULL;
	if (!fz || fz->is_pool)
		return 0;
	const coil_node *h = &ir->g->nodes[fz->head];
	if (fz->q && i == e->nx - 1 && ir->g->nodes[fz->q_wdq].op == OP_DEQUANTIZE_PC)
		return 1; /* the weight's scales */
	if (fz->is_conv) /* weight and bias */
		return i == 1 || (i == 2 && tensor_arg(h, 2) >= 0);
	int base = h->op == OP_ADDMM;
	if (i == base + 1)
		return fz->b_param >= 0;
	return base && i == 0 && is_const_val(ir->g, tensor_arg(h, 0));
}

int dn_residual(coil_ir *ir, int ext)
{
	const ir_node *e = &ir->nodes[ext];
	int j;
	dn_fuse *fz = e->op == IR_EXTERN ? fusion_of(ir, e->gnode, &j) : NULL;
	if (!fz || fz->is_pool)
		return -1;
	const coil_node *h = &ir->g->nodes[fz->head];
	int at = 0;
	for (int a = 0; a < op_get(h->op)->nargs; a++)
		at += tensor_arg(h, a) >= 0;
	for (int i = 0; i < fz->npost; i++) {
		if (fz->post[i].kind == DN_ADD_SAME)
			return at;
		at += fz->post[i].val >= 0;
	}
	return -1;
}

/* A matmul whose only symbolic size is m (the rows of a and c): one
 * shape-generic rt object (m_runtime) serves the bindings that are not hot
 * yet, so a new binding creates nothing for it (see coil_dn_prepare). */
static int generic_ok(coil_ir *ir, const dn_fuse *fz)
{
	if (fz->is_conv || fz->is_pool || fz->q || !ir->g->syms.n)
		return 0;
	coil_graph *g = ir->g;
	const coil_node *n = &g->nodes[fz->head];
	int base = n->op == OP_ADDMM;
	const coil_value *a = node_in(g, n, base), *b = node_in(g, n, base + 1), *o = node_out(g, n, 0);
	if (dim_is_const(&a->shape[a->rank - 2], NULL) || !dim_is_const(&a->shape[a->rank - 1], NULL) ||
	    !shape_is_const(a->shape, a->rank - 2) || !dim_is_const(&o->shape[o->rank - 1], NULL) ||
	    !shape_is_const(b->shape, b->rank))
		return 0;
	if (base && !shape_is_const(node_in(g, n, 0)->shape, node_in(g, n, 0)->rank))
		return 0;
	for (int i = 0; i < fz->npost; i++) {
		const coil_value *q = fz->post[i].val >= 0 ? &g->vals[fz->post[i].val] : NULL;
		if (q && fz->post[i].kind != DN_ADD_SAME && !shape_is_const(q->shape, q->rank))
			return 0;
	}
	return 1;
}

static int ngeneric(coil_ir *ir)
{
	int k = 0;
	for (int j = 0; j < ir->dn->nf; j++)
		k += generic_ok(ir, &ir->dn->f[j]);
	return k;
}

static char *bufname(coil_ir *ir, int *used, int v)
{
	used[v] = 1;
	return emit_buf_name(ir, v);
}

int dn_emit_extern(coil_ir *ir, FILE *f, int k, int *used, emit_errs *errs)
{
	ir_kernel *K = &ir->ks[k];
	ir_node *e = &ir->nodes[K->ext];
	int j;
	dn_fuse *fz = fusion_of(ir, e->gnode, &j);
	if (!fz)
		return 0;
	nctx c = {ir, f};
	coil_graph *g = ir->g;
	const coil_node *h = &g->nodes[fz->head];
	fz->emitted = 1;
	fz->kernel = k;
	/* xsrc: the head's tensor inputs, then the post-ops' operands */
	int nin = 0;
	for (int a = 0; a < op_get(h->op)->nargs; a++)
		nin += tensor_arg(h, a) >= 0;
	char *ps = "NULL", *dst = bufname(ir, used, K->ext);
	int any = 0;
	for (int i = 0; i < fz->npost; i++)
		any |= fz->post[i].val >= 0;
	if (any) {
		out(&c, "\tconst void *const ps[%d] = {", fz->npost);
		for (int i = 0, at = nin; i < fz->npost; i++) {
			int v = fz->post[i].val >= 0 ? e->xsrc[at++] : -1;
			/* memplan put dst in the residual's slot (the residual's last
			 * reader is this kernel): the sum accumulates in place */
			int same = v >= 0 && fz->post[i].kind == DN_ADD_SAME && ir->nodes[v].inplace == k + 1 &&
				   ir->nodes[v].slot == e->slot;
			out(&c, "%s%s", i ? ", " : "", v < 0 ? "NULL" : same ? dst : bufname(ir, used, v));
		}
		out(&c, "};\n");
		ps = "ps";
	}
	int code = emit_err_code(errs, ir, fz->head, "oneDNN failed to run it");
	out(&c, "\tstruct coil_dn *dn = x->dn;\n");
	if (fz->is_pool) {
		out(&c, "\tif (rt_pool_run((rt_pool *)dn->obj[%d], %s, %s, dn->err, sizeof dn->err))\n", j,
		    bufname(ir, used, e->xsrc[0]), dst);
	} else if (fz->is_conv) {
		out(&c, "\tif (rt_conv_run((rt_conv *)dn->obj[%d], %s, %s, %s, dn->err, sizeof dn->err))\n", j,
		    bufname(ir, used, e->xsrc[0]), dst, ps);
	} else {
		int base = h->op == OP_ADDMM;
		const char *b = fz->b_param >= 0 ? "NULL" : bufname(ir, used, e->xsrc[base + 1]);
		const char *bias = base && !is_const_val(g, tensor_arg(h, 0)) ? bufname(ir, used, e->xsrc[0]) : "NULL";
		const coil_value *a = node_in(g, h, base);
		out(&c, "\tif (rt_matmul_run((rt_matmul *)dn->obj[%d], %s, %s, %s, %s, %s, %s, dn->err, sizeof dn->err))\n",
		    j, dimc(&c, &a->shape[a->rank - 2]), bufname(ir, used, e->xsrc[base]), b, bias, dst, ps);
	}
	out(&c, "\t\tcoil_raise(x->st, %d, 0, 0);\n", code);
	return 1;
}

/* --- model ------------------------------------------------------------------ */

void dn_emit_support(coil_ir *ir, FILE *f, int rt_unit)
{
	if (!dn_used(ir))
		return;
	fprintf(f, "/* oneDNN runtime (codegen/rt), compiled into this artifact; its symbols stay hidden. */\n");
	fprintf(f, "#include \"%s\"\n\n", rt_unit ? "dnnl_rt.h" : "dnnl_rt.c");
	int ns = ir->g->syms.n ? ir->g->syms.n : 1, sets = ir->g->syms.n ? DN_SETS : 1;
	fprintf(f, "/* The rt objects for one binding of the symbols; a model handle keeps the\n"
		   " * %d most recently used bindings (packed weights are shared between them). */\n", sets);
	fprintf(f, "struct coil_dn_set {\n\tint64_t sym[%d];\n\tvoid *obj[%d];\n"
		   "\tunsigned char shared[%d]; /* obj[j] is the handle's generic one */\n\tint nshared;\n\tuint64_t used;\n"
		   "\tint ready;\n};\n\n",
		ns, ir->dn->nf, ir->dn->nf);
	int gen = ngeneric(ir);
	if (gen)
		fprintf(f, "/* Bindings seen lately and how often they ran. */\nstruct coil_dn_seen {\n\tint64_t sym[%d];\n"
			   "\tuint64_t used;\n\tunsigned n;\n};\n\n", ns);
	fprintf(f, "struct coil_dn {\n\trt_ctx *ctx;\n\tuint64_t tick;\n\tvoid **obj; /* the current binding's */\n"
		   "\tstruct coil_dn_set set[%d];\n", sets);
	if (ir->g->syms.n)
		fprintf(f, "\tsize_t set_w; /* the most packed-weight bytes one set has held */\n"
			   "\tsize_t gen_w; /* packed-weight bytes of the generic objects */\n"
			   "\tint wcopies; /* sets' worth of packed weights kept (coil_dn_trim) */\n"
			   "\tint wfixed; /* wcopies from COIL_WEIGHT_COPIES: not adapted */\n"
			   "\tint64_t ghost[%d][%d]; /* bindings whose sets trim released lately */\n"
			   "\tunsigned nghost;\n\tunsigned thrash; /* builds lately (a bit each): 1 where the binding was a ghost */\n",
			DN_GHOST, ns);
	if (gen)
		fprintf(f, "\tvoid *gen[%d]; /* shape-generic objects (m at run time), made at first need */\n"
			   "\tunsigned char gen_no[%d]; /* oneDNN has no fast generic kernel for it */\n"
			   "\tstruct coil_dn_seen seen[%d];\n", ir->dn->nf, ir->dn->nf, DN_SEEN);
	fprintf(f, "\tchar err[256];\n};\n\n");
}

static void post_desc(nctx *c, const char *d, const dn_fuse *fz)
{
	coil_graph *g = c->ir->g;
	out(c, "\t%s.npost = %d;\n", d, fz->npost);
	for (int i = 0; i < fz->npost; i++) {
		const dn_post *q = &fz->post[i];
		out(c, "\t%s.post[%d].kind = (enum rt_post_kind)%d;\n", d, i, (int)q->kind);
		out(c, "\t%s.post[%d].a = %s;\n\t%s.post[%d].b = %s;\n", d, i, flit(c, q->a), d, i, flit(c, q->b));
		if (q->scale != 0)
			out(c, "\t%s.post[%d].scale = %s;\n", d, i, flit(c, q->scale));
		if (q->kind < DN_ADD_BCAST)
			continue;
		const coil_value *v = &g->vals[q->val];
		if (q->last_only) {
			out(c, "\t%s.post[%d].rank = 1;\n\t%s.post[%d].dims[0] = %s;\n", d, i, d, i,
			    dimc(c, &v->shape[v->rank - 1]));
			continue;
		}
		out(c, "\t%s.post[%d].rank = %d;\n", d, i, v->rank ? v->rank : 1);
		if (!v->rank)
			out(c, "\t%s.post[%d].dims[0] = 1;\n", d, i);
		for (int r = 0; r < v->rank; r++)
			out(c, "\t%s.post[%d].dims[%d] = %s;\n", d, i, r, dimc(c, &v->shape[r]));
	}
}

/* Element i of constant p (a C expression over a pointer of type t) as a float. */
static char *ldf(nctx *c, coil_dtype t, const char *p, const char *i)
{
	return t == COIL_BF16 ? arena_printf(c->ir->arena, "rt_bf16_f32(%s[%s])", p, i)
			      : arena_printf(c->ir->arena, "%s[%s]", p, i);
}

/* Element o of constant value v (f32 or bf16; v < 0: NULL) as a float. */
static char *ldv(nctx *c, int v)
{
	if (v < 0)
		return "NULL";
	coil_dtype t = c->ir->g->vals[v].dtype;
	return ldf(c, t, arena_printf(c->ir->arena, "((const %s *)%s)", emit_ctype(t), const_ptr(c, v)), "o");
}

/* Folds into wf [oc][per] (unless NULL) and bf [oc] (convolutions), in f32;
 * each operand f32 or bf16.  Per channel the factor goes to sa [oc] and the
 * runtime scales the weights' rows (create code is built at -O0). */
static void folds(nctx *c, const dn_fuse *fz)
{
	coil_graph *g = c->ir->g;
	for (int i = 0; i < fz->nfold; i++) {
		const dn_fold *q = &fz->fold[i];
		if (q->kind == FOLD_BN) {
			const coil_node *bn = &g->nodes[q->gnode];
			int gw = tensor_arg(bn, 1), gb = tensor_arg(bn, 2), mu = tensor_arg(bn, 3), var = tensor_arg(bn, 4);
			out(c, "\t\t/* batch norm: y = (x - mean) * w / sqrt(var + eps) + b */\n");
			out(c, "\t\tfor (int64_t o = 0; o < oc; o++) {\n");
			out(c, "\t\t\tconst float s = (float)(1.0 / sqrt((double)%s + %.17g)) * %s;\n", ldv(c, var),
			    bn->args[7].f, gw >= 0 ? ldv(c, gw) : "1.0f");
			out(c, "\t\t\tsa[o] = s;\n\t\t\tbf[o] = (bf[o] - %s) * s + %s;\n\t\t}\n", ldv(c, mu),
			    gb >= 0 ? ldv(c, gb) : "0.0f");
			out(c, "\t\tif (wf)\n\t\t\trt_scale_rows(wf, oc, per, sa, 0);\n");
			continue;
		}
		char *s = q->val >= 0 ? ldv(c, q->val) : arena_printf(c->ir->arena, "(float)%.17g", q->s);
		out(c, "\t\tfor (int64_t o = 0; o < oc; o++) {\n\t\t\tconst float s = %s;\n", s);
		switch (q->kind) {
		case FOLD_MUL: out(c, "\t\t\tsa[o] = s;\n\t\t\tbf[o] *= s;\n\t\t}\n"); break;
		case FOLD_DIV: out(c, "\t\t\tsa[o] = s;\n\t\t\tbf[o] /= s;\n\t\t}\n"); break;
		case FOLD_ADD: out(c, "\t\t\tbf[o] += s;\n\t\t}\n"); break;
		default: out(c, "\t\t\tbf[o] -= s;\n\t\t}\n"); break;
		}
		if (q->kind == FOLD_MUL || q->kind == FOLD_DIV)
			out(c, "\t\tif (wf)\n\t\t\trt_scale_rows(wf, oc, per, sa, %d);\n", q->kind == FOLD_DIV);
	}
}

/* int8: the rt_quant of fusion fz (qq, its scales sc[nch] and the bias bq
 * divided into the accumulator's units, from the constant bias b of type f32
 * or NULL), as C statements of create; "goto qfail" frees what they made. */
static void make_quant(nctx *c, const dn_fuse *fz, const char *nch, int has_bias)
{
	coil_graph *g = c->ir->g;
	const coil_node *xq = &g->nodes[fz->q_xdq], *wq = &g->nodes[fz->q_wdq], *yq = &g->nodes[fz->last];
	const double sx = fz->q == 2 ? 0 : (float)xq->args[1].f, sy = fz->q == 2 ? 0 : (float)g->nodes[fz->q_sdiv].args[1].f;
	const int pc = wq->op == OP_DEQUANTIZE_PC;
	out(c, "\tconst int64_t nch = %s;\n", nch);
	out(c, "\tfloat *sc = malloc((size_t)nch * sizeof(float)), *bq = %s;\n",
	    has_bias ? "malloc((size_t)nch * sizeof(float))" : "NULL");
	out(c, "\tif (!sc || (%d && !bq)) {\n\t\tsnprintf(d->err, sizeof d->err, \"out of memory\");\n\t\tgoto qfail;\n\t}\n",
	    has_bias);
	if (pc) {
		int sv = wq->args[1].v[0];
		coil_dtype st = g->vals[sv].dtype;
		out(c, "\tconst %s *sw = (const %s *)%s;\n", emit_ctype(st), emit_ctype(st), const_ptr(c, sv));
	}
	out(c, "\tfor (int64_t o = 0; o < nch; o++) {\n");
	/* ATen dequantizes with f32 scales: s_w as f32, products in double, rounded once */
	if (pc)
		out(c, "\t\tconst double w_s = (double)(float)%s;\n",
		    g->vals[wq->args[1].v[0]].dtype == COIL_BF16 ? "rt_bf16_f32(sw[o])" : "sw[o]");
	else
		out(c, "\t\tconst double w_s = (double)(float)%.17g;\n", wq->args[1].f);
	if (fz->q == 2) { /* dynamic: the rt multiplies in the src's scale at each run */
		const coil_node *cq = &g->nodes[producer_of(g, xq->args[1].v[0])];
		out(c, "\t\tsc[o] = (float)w_s;\n");
		if (has_bias)
			out(c, "\t\tbq[o] = b[o];\n");
		out(c, "\t}\n");
		out(c, "\trt_quant qq;\n\tmemset(&qq, 0, sizeof qq);\n");
		out(c, "\tqq.dst = RT_F32;\n\tqq.scale = sc;\n\tqq.dynamic = 1;\n\tqq.qmin = %lld;\n\tqq.qmax = %lld;\n"
		    "\tqq.eps = %s;\n\tqq.sum_scale = 1;\n", (long long)cq->args[1].i, (long long)cq->args[2].i,
		    flit(c, (float)cq->args[3].f));
		out(c, "\tdd.q = &qq;\n\tdd.dtype = %s;\n", (coil_dtype)cq->args[4].i == COIL_U8 ? "RT_U8" : "RT_S8");
		return;
	}
	out(c, "\t\tsc[o] = (float)(%.17g * w_s / %.17g);\n", sx, sy);
	if (has_bias)
		out(c, "\t\tbq[o] = (float)((double)b[o] / (%.17g * w_s));\n", sx);
	out(c, "\t}\n");
	out(c, "\trt_quant qq;\n\tmemset(&qq, 0, sizeof qq);\n");
	out(c, "\tqq.dst = %s;\n\tqq.scale = sc;\n\tqq.src_zp = %lld;\n\tqq.dst_zp = %lld;\n",
	    (coil_dtype)yq->args[5].i == COIL_U8 ? "RT_U8" : "RT_S8", (long long)xq->args[2].i, (long long)yq->args[2].i);
	if (fz->q_rdq >= 0) {
		const coil_node *rq = &g->nodes[fz->q_rdq];
		out(c, "\tqq.sum_scale = (float)(%.17g / %.17g);\n\tqq.sum_zp = %lld;\n", (double)(float)rq->args[1].f, sy,
		    (long long)rq->args[2].i);
	}
	out(c, "\tdd.q = &qq;\n\tdd.dtype = %s;\n", node_in(g, xq, 0)->dtype == COIL_U8 ? "RT_U8" : "RT_S8");
}

static void make_conv(nctx *c, int j, const dn_fuse *fz)
{
	coil_graph *g = c->ir->g;
	const coil_node *n = &g->nodes[fz->head];
	const coil_value *x = node_in(g, n, 0), *w = node_in(g, n, 1), *o = node_out(g, n, 0);
	int nsp = x->rank - 2, tr = (int)n->args[6].i, bias = tensor_arg(n, 2);
	long long G = n->args[8].i;
	const coil_dtype t = o->dtype;
	const char *T = emit_ctype(t);
	out(c, "\trt_conv_desc dd;\n\tmemset(&dd, 0, sizeof dd);\n\tdd.weight_key = %d;\n", j + 1);
	if (t == COIL_BF16)
		out(c, "\tdd.dtype = RT_BF16;\n");
	if (fz->dst_f32)
		out(c, "\tdd.dst_f32 = 1; /* the chain ends in a cast to f32 */\n");
	out(c, "\tdd.nsp = %d;\n\tdd.n = %s;\n\tdd.ic = %s;\n\tdd.oc = %s;\n\tdd.groups = %lld;\n", nsp,
	    dimc(c, &x->shape[0]), dimc(c, &x->shape[1]), dimc(c, &o->shape[1]), G);
	for (int i = 0; i < nsp; i++) {
#define LV(ai) (long long)(n->args[ai].n == 1 ? n->args[ai].ints[0] : n->args[ai].ints[i])
		out(c, "\tdd.in[%d] = %s;\n\tdd.out[%d] = %s;\n\tdd.k[%d] = %s;\n", i, dimc(c, &x->shape[2 + i]), i,
		    dimc(c, &o->shape[2 + i]), i, dimc(c, &w->shape[2 + i]));
		out(c, "\tdd.stride[%d] = %lld;\n\tdd.pad_l[%d] = dd.pad_r[%d] = %lld;\n\tdd.dil[%d] = %lld;\n", i, LV(3), i,
		    i, LV(4), i, LV(5));
		if (tr)
			out(c, "\tdd.out_pad[%d] = %lld;\n", i, LV(7));
#undef LV
	}
	out(c, "\tdd.transposed = %d;\n", tr);
	if (dn_tune_choices(c->ir, j) > 1)
		out(c, "\tdd.tuned = 1;\n\tdd.path = coil_tune[%d] == %d ? RT_PATH_DIRECT : coil_tune[%d] == %d ? RT_PATH_NHWC : "
		       "RT_PATH_AUTO;\n\tdd.no_wino = coil_tune[%d] != %d;\n\tdd.impl = coil_tune[%d] >= %d ? coil_tune[%d] - %d : 0;\n",
		    j, DN_TUNE_NCHW, j, DN_TUNE_NHWC, j, DN_TUNE_AUTO, j, DN_TUNE_IMPL1, j, DN_TUNE_IMPL1 - 1);
	else
		out(c, "\tdd.path = RT_PATH_AUTO;\n");
	if (fz->src_nhwc && fz->dst_nhwc)
		out(c, "\tdd.channels_last = 1; /* activations kept NHWC between convs */\n");
	else if (fz->src_nhwc || fz->dst_nhwc)
		out(c, "\tdd.src_nhwc = %d;\n\tdd.dst_nhwc = %d; /* an NHWC chain's boundary */\n", fz->src_nhwc,
		    fz->dst_nhwc);
	post_desc(c, "dd", fz);
	if (fz->q) {
		int wv = g->nodes[fz->q_wdq].args[0].v[0];
		out(c, "\tconst int8_t *w = (const int8_t *)%s;\n\tconst float *b = %s;\n", const_ptr(c, wv),
		    bias >= 0 ? const_ptr(c, bias) : "NULL");
		make_quant(c, fz, "dd.oc", bias >= 0);
		out(c, "\tdd.has_bias = b != NULL;\n");
		out(c, "\tconst int rc = rt_conv_create(d->ctx, &dd, w, bq, (rt_conv **)obj, d->err, sizeof d->err);\n");
		out(c, "\tfree(sc);\n\tfree(bq);\n\treturn rc;\nqfail:\n\tfree(sc);\n\tfree(bq);\n\treturn -1;\n");
		return;
	}
	out(c, "\tconst %s *w = %s, *b = %s;\n", T, const_ptr(c, n->args[1].v[0]), bias >= 0 ? const_ptr(c, bias) : "NULL");
	if (!fz->nfold) {
		out(c, "\tdd.has_bias = b != NULL;\n");
		out(c, "\treturn rt_conv_create(d->ctx, &dd, w, b, (rt_conv **)obj, d->err, sizeof d->err);\n");
		return;
	}
	int64_t numel = 1, d;
	for (int i = 0; i < w->rank; i++)
		numel *= dim_is_const(&w->shape[i], &d) ? d : 0;
	/* The weights are folded only when the rt has no packed copy that fits
	 * (pass 0 offers none: RT_EAGAIN asks for them), so a new shape of a
	 * model with symbolic sizes reuses what an earlier one packed. */
	out(c, "\tconst int64_t oc = dd.oc, per = %lld / oc;\n", (long long)numel);
	out(c, "\tfloat *wf = NULL, *bf = malloc((size_t)oc * 2 * sizeof(float)), *sa = NULL;\n\tint rc = RT_EAGAIN;\n");
	out(c, "\tfor (int pass = %d; pass < 2 && rc == RT_EAGAIN; pass++) {\n", c->ir->g->syms.n ? 0 : 1);
	out(c, "\t\tif (!bf || (pass && !(wf = malloc((size_t)%lld * sizeof(float))))) {\n\t\t\tfree(wf);\n\t\t\tfree(bf);\n"
	       "\t\t\tsnprintf(d->err, sizeof d->err, \"out of memory\");\n\t\t\treturn -1;\n\t\t}\n"
	       "\t\tsa = bf + oc; /* the folds' factor per channel */\n\t\t(void)sa;\n", (long long)numel);
	if (t == COIL_BF16) /* folded in f32, given to the bf16 conv in f32 */
		out(c, "\t\tif (wf)\n\t\t\trt_bf16_to_f32(wf, w, %lld);\n\t\tdd.wei_f32 = 1;\n", (long long)numel);
	else
		out(c, "\t\tif (wf)\n\t\t\tmemcpy(wf, w, (size_t)%lld * sizeof(float));\n", (long long)numel);
	out(c, "\t\tfor (int64_t o = 0; o < oc; o++)\n\t\t\tbf[o] = b ? %s : 0.0f;\n", ldf(c, t, "b", "o"));
	folds(c, fz);
	out(c, "\t\tdd.has_bias = 1;\n");
	out(c, "\t\trc = rt_conv_create(d->ctx, &dd, wf, bf, (rt_conv **)obj, d->err, sizeof d->err);\n\t}\n");
	out(c, "\tfree(wf);\n\tfree(bf);\n\treturn rc;\n");
}

static void make_pool(nctx *c, int j, const dn_fuse *fz)
{
	coil_graph *g = c->ir->g;
	const coil_node *n = &g->nodes[fz->head];
	const coil_value *x = node_in(g, n, 0), *o = node_out(g, n, 0);
	dn_pool w;
	dn_pool_window(g, n, &w); /* planned, so representable */
	out(c, "\trt_pool_desc dd;\n\tmemset(&dd, 0, sizeof dd);\n");
	if (x->dtype != COIL_F32)
		out(c, "\tdd.dtype = %s;\n", x->dtype == COIL_BF16 ? "RT_BF16" : x->dtype == COIL_U8 ? "RT_U8" : "RT_S8");
	out(c, "\tdd.kind = (enum rt_pool_kind)%d;\n\tdd.n = %s;\n\tdd.c = %s;\n", w.kind, dimc(c, &x->shape[0]),
	    dimc(c, &x->shape[1]));
	for (int i = 0; i < 2; i++) {
		out(c, "\tdd.in[%d] = %s;\n\tdd.out[%d] = %s;\n", i, dimc(c, &x->shape[2 + i]), i, dimc(c, &o->shape[2 + i]));
		out(c, "\tdd.k[%d] = %lld;\n\tdd.stride[%d] = %lld;\n\tdd.dil[%d] = %lld;\n", i, (long long)w.k[i], i,
		    (long long)w.s[i], i, (long long)w.d[i]);
		out(c, "\tdd.pad_l[%d] = %lld;\n\tdd.pad_r[%d] = %lld;\n", i, (long long)w.pl[i], i, (long long)w.pr[i]);
		if (w.sym && w.ceil) /* the last window's overhang past in + pad, at these sizes */
			out(c, "\tif ((dd.out[%d] - 1) * %lld + %lld - dd.in[%d] - %lld > dd.pad_r[%d])\n"
			       "\t\tdd.pad_r[%d] = (dd.out[%d] - 1) * %lld + %lld - dd.in[%d] - %lld;\n",
			    i, (long long)w.s[i], (long long)(w.d[i] * (w.k[i] - 1) + 1), i, (long long)w.pl[i], i, i, i,
			    (long long)w.s[i], (long long)(w.d[i] * (w.k[i] - 1) + 1), i, (long long)w.pl[i]);
	}
	out(c, "\tdd.src_nhwc = %d;\n\tdd.dst_nhwc = %d;\n", fz->src_nhwc, fz->dst_nhwc);
	(void)j;
	out(c, "\treturn rt_pool_create(d->ctx, &dd, (rt_pool **)obj, d->err, sizeof d->err);\n");
}

static void make_matmul(nctx *c, int j, const dn_fuse *fz)
{
	coil_graph *g = c->ir->g;
	const coil_node *n = &g->nodes[fz->head];
	int base = n->op == OP_ADDMM, bmm = n->op == OP_BMM;
	const coil_value *a = node_in(g, n, base), *o = node_out(g, n, 0);
	int r = a->rank;
	out(c, "\trt_matmul_desc dd;\n\tmemset(&dd, 0, sizeof dd);\n\tdd.weight_key = %d;\n", j + 1);
	if (o->dtype == COIL_BF16)
		out(c, "\tdd.dtype = RT_BF16;\n");
	if (fz->dst_f32)
		out(c, "\tdd.dst_f32 = 1; /* the chain ends in a cast to f32 */\n");
	if (bmm)
		out(c, "\tdd.nbatch = 1;\n\tdd.batch_a[0] = dd.batch_b[0] = %s;\n", dimc(c, &a->shape[0]));
	out(c, "\tdd.m = %s;\n\tdd.k = %s;\n\tdd.n = %s;\n", dimc(c, &a->shape[r - 2]), dimc(c, &a->shape[r - 1]),
	    dimc(c, &o->shape[o->rank - 1]));
	out(c, "\tdd.b_trans = %d;\n\tdd.b_const = %d;\n", fz->b_trans, fz->b_param >= 0);
	char *bias_ptr = "NULL";
	if (base) {
		const coil_value *bv = node_in(g, n, 0);
		double beta = n->args[3].kind == ARG_SCALAR ? n->args[3].f : 1;
		double alpha = n->args[4].kind == ARG_SCALAR ? n->args[4].f : 1;
		int bc = is_const_val(g, tensor_arg(n, 0));
		out(c, "\tdd.alpha = (float)%.17g;\n", alpha);
		if (beta != 0) {
			out(c, "\tdd.beta = (float)%.17g;\n\tdd.has_bias = 1;\n\tdd.bias_full = %d;\n\tdd.bias_const = %d;\n", beta,
			    bv->rank == 2 && !dim_eq_const(&bv->shape[0], 1), bc);
			if (bc)
				bias_ptr = const_ptr(c, tensor_arg(n, 0));
		} else {
			out(c, "\tdd.beta = 1;\n");
		}
	} else {
		out(c, "\tdd.alpha = 1;\n\tdd.beta = 1;\n");
	}
	post_desc(c, "dd", fz);
	if (fz->q) {
		const char *bias = base ? const_ptr(c, tensor_arg(n, 0)) : "NULL";
		out(c, "\tconst float *b = (const float *)%s;\n", bias);
		make_quant(c, fz, "dd.n", base);
		out(c, "\tdd.bias_const = dd.has_bias = b != NULL;\n\tdd.bias_full = 0;\n\tdd.alpha = dd.beta = 1;\n");
		out(c, "\tconst int rc = rt_matmul_create(d->ctx, &dd, %s, bq, (rt_matmul **)obj, d->err, sizeof d->err);\n",
		    const_ptr(c, fz->b_param));
		out(c, "\t(void)gen;\n\tfree(sc);\n\tfree(bq);\n\treturn rc;\nqfail:\n\tfree(sc);\n\tfree(bq);\n\treturn -1;\n");
		return;
	}
	out(c, "\tdd.m_runtime = gen;\n");
	out(c, "\treturn rt_matmul_create(d->ctx, &dd, %s, %s, (rt_matmul **)obj, d->err, sizeof d->err);\n",
	    fz->b_param >= 0 ? const_ptr(c, fz->b_param) : "NULL", bias_ptr);
}

unsigned dn_tune_choices(const coil_ir *ir, int j)
{
	const dn_fuse *fz = ir->dn && j >= 0 && j < ir->dn->nf ? &ir->dn->f[j] : NULL;
	if (!fz || !fz->emitted || !fz->is_conv || fz->q)
		return fz ? 1 : 0;
	const coil_graph *g = ir->g;
	const coil_node *n = &g->nodes[fz->head];
	const coil_value *x = &g->vals[n->args[0].v[0]], *w = &g->vals[n->args[1].v[0]];
	unsigned m = 1;
	int wino = x->rank == 4 && !n->args[6].i && n->args[8].i == 1 && x->dtype == COIL_F32;
	for (int i = 0; i < 2 && wino; i++) /* dense 3x3 stride 1: where the runtime may pick Winograd */
		wino = dim_eq_const(&w->shape[2 + i], 3) &&
		       (n->args[3].n == 1 ? n->args[3].ints[0] : n->args[3].ints[i]) == 1 &&
		       (n->args[5].n == 1 ? n->args[5].ints[0] : n->args[5].ints[i]) == 1;
	if (wino)
		m |= 1u << DN_TUNE_NO_WINO;
	if (!n->args[6].i && !fz->src_nhwc && !fz->dst_nhwc) /* an NCHW conv: either primitive */
		m |= 1u << DN_TUNE_NCHW | 1u << DN_TUNE_NHWC;
	if (!n->args[6].i) /* oneDNN's other implementations of the direct convolution */
		m |= 1u << DN_TUNE_IMPL1 | 1u << DN_TUNE_IMPL2;
	return m;
}

/* The autotuning table (the choices the artifact was built with) and
 * coil_model_tune (docs/abi.md), which autotune.c drives: j < 0 asks for
 * the fusions' count; else fusion j's choice is set to choice when that is
 * one of its own (bit set in *choices), and its kernel and choices told. */
void dn_emit_tune(coil_ir *ir, FILE *f)
{
	int nf = ir->dn ? ir->dn->nf : 0;
	if (nf) {
		const dn_tune *t = ir->tune && !ir->tune->build ? ir->tune : NULL; /* the final build: its choices */
		fprintf(f, "static int coil_tune[%d] = {", nf);
		for (int j = 0; j < nf; j++) {
			int v = t ? t->path[ir->dn->f[j].head] : DN_TUNE_AUTO;
			fprintf(f, "%s%d", j ? ", " : "", dn_tune_choices(ir, j) >> v & 1 ? v : DN_TUNE_AUTO);
		}
		fprintf(f, "};\nstatic const unsigned coil_tune_choices[%d] = {", nf);
		for (int j = 0; j < nf; j++)
			fprintf(f, "%s%uu", j ? ", " : "", dn_tune_choices(ir, j));
		fprintf(f, "};\nstatic const int coil_tune_kernel[%d] = {", nf);
		for (int j = 0; j < nf; j++)
			fprintf(f, "%s%d", j ? ", " : "", ir->dn->f[j].emitted ? ir->dn->f[j].kernel : -1);
		fprintf(f, "};\n\n");
	}
	fprintf(f, "COIL_EXPORT int coil_model_tune(int j, int choice, int *kernel, unsigned *choices)\n{\n");
	if (!nf) {
		fprintf(f, "\t(void)j;\n\t(void)choice;\n\t(void)kernel;\n\t(void)choices;\n\treturn 0;\n}\n\n");
		return;
	}
	fprintf(f, "\tif (j < 0 || j >= %d)\n\t\treturn j < 0 ? %d : -1;\n"
		   "\tif (choice >= 0 && choice < 32 && (coil_tune_choices[j] >> choice & 1))\n\t\tcoil_tune[j] = choice;\n"
		   "\t*kernel = coil_tune_kernel[j];\n\t*choices = coil_tune_choices[j];\n\treturn coil_tune[j];\n}\n\n",
		nf, nf);
}

void dn_emit_model(coil_ir *ir, FILE *f)
{
	if (!dn_used(ir))
		return;
	nctx c = {ir, f};
	dn_plan *p = ir->dn;
	int ns = ir->g->syms.n;
	for (int j = 0; j < p->nf; j++) {
		dn_fuse *fz = &p->f[j];
		if (!fz->emitted)
			continue;
		out(&c, "/* graph nodes %d..%d */\n", fz->head, fz->last);
		out(&c, "static int coil_dn_make%d(coil_model *m, struct coil_dn *d, const int64_t *sym, void **obj, int gen)\n{\n", j);
		out(&c, "\t(void)m;\n\t(void)sym;\n\t(void)gen;\n");
		for (int s = 0; s < ns; s++)
			out(&c, "\tconst int64_t s%d = sym[%d];\n\t(void)s%d;\n", s, s, s);
		if (fz->is_pool)
			make_pool(&c, j, fz);
		else if (fz->is_conv)
			make_conv(&c, j, fz);
		else
			make_matmul(&c, j, fz);
		out(&c, "}\n\n");
	}
	int sets = ir->g->syms.n ? DN_SETS : 1, gen = ngeneric(ir);
	out(&c, "static void coil_dn_release(struct coil_dn_set *s)\n{\n");
	for (int j = 0; j < p->nf; j++) {
		const char *t = p->f[j].is_pool ? "pool" : p->f[j].is_conv ? "conv" : "matmul";
		if (p->f[j].emitted)
			out(&c, "\tif (!s->shared[%d])\n\t\trt_%s_destroy((rt_%s *)s->obj[%d]);\n\ts->obj[%d] = NULL;\n", j, t, t,
			    j, j);
	}
	out(&c, "\tmemset(s->shared, 0, sizeof s->shared);\n\ts->nshared = 0;\n\ts->ready = 0;\n}\n\n");
	out(&c, "static void coil_dn_free(struct coil_dn *d)\n{\n\tif (!d)\n\t\treturn;\n"
		"\tfor (int i = 0; i < %d; i++)\n\t\tcoil_dn_release(&d->set[i]);\n", sets);
	if (gen) {
		for (int j = 0; j < p->nf; j++)
			if (p->f[j].emitted && generic_ok(ir, &p->f[j]))
				out(&c, "\trt_matmul_destroy((rt_matmul *)d->gen[%d]);\n", j);
	}
	out(&c, "\trt_ctx_destroy(d->ctx);\n\tfree(d);\n}\n\n");
	if (ir->g->syms.n) {
		out(&c, "/* Packed-weight bytes of the objects s owns (not the generic ones it\n"
			" * borrows); keeps the largest in d->set_w. */\n"
			"static void coil_dn_weigh(struct coil_dn *d, const struct coil_dn_set *s)\n{\n\tsize_t w = 0;\n");
		for (int j = 0; j < p->nf; j++)
			if (p->f[j].emitted && !p->f[j].is_pool)
				out(&c, "\tif (!s->shared[%d])\n\t\tw += rt_%s_weight_bytes((const rt_%s *)s->obj[%d]);\n", j,
				    p->f[j].is_conv ? "conv" : "matmul", p->f[j].is_conv ? "conv" : "matmul", j);
		out(&c, "\tif (w > d->set_w)\n\t\td->set_w = w;\n}\n\n");
	}
	if (gen) {
		out(&c, "/* Counts a run of the binding sym among the %d bindings seen most\n"
			" * recently: 1 while it has run fewer than %d times (cold: its set borrows\n"
			" * the handle's generic objects for the matrix products whose only\n"
			" * symbolic size is m, nothing is created for them), 0 once it is hot\n"
			" * (coil_dn_upgrade: per-shape objects of its own). */\n", DN_SEEN, DN_HOT);
		out(&c, "static int coil_dn_cold(struct coil_dn *d, const int64_t *sym)\n{\n"
			"\tstruct coil_dn_seen *v = &d->seen[0];\n"
			"\tfor (int i = 0; i < %d; i++) {\n\t\tstruct coil_dn_seen *s = &d->seen[i];\n"
			"\t\tif (s->n && !memcmp(s->sym, sym, sizeof s->sym)) {\n\t\t\ts->used = d->tick;\n"
			"\t\t\treturn ++s->n < %d;\n\t\t}\n"
			"\t\tif (!s->n ? v->n : v->n && s->used < v->used)\n\t\t\tv = s;\n\t}\n"
			"\tmemcpy(v->sym, sym, sizeof v->sym);\n\tv->used = d->tick;\n\tv->n = 1;\n\treturn 1;\n}\n\n",
		    DN_SEEN, DN_HOT);
		out(&c, "/* A hot binding whose set is rebuilt for another starts counting again:\n"
			" * more hot bindings than sets then rebuild once per %d runs, not at each. */\n", DN_HOT);
		out(&c, "static void coil_dn_forget(struct coil_dn *d, const int64_t *sym)\n{\n"
			"\tfor (int i = 0; i < %d; i++)\n"
			"\t\tif (d->seen[i].n && !memcmp(d->seen[i].sym, sym, sizeof d->seen[i].sym))\n"
			"\t\t\td->seen[i].n = 0;\n}\n\n", DN_SEEN);
		out(&c, "/* A set that borrowed generic objects, its binding now hot: per-shape ones. */\n"
			"static int coil_dn_upgrade(coil_model *m, struct coil_dn *d, struct coil_dn_set *s)\n{\n");
		for (int j = 0; j < p->nf; j++)
			if (p->f[j].emitted && generic_ok(ir, &p->f[j]))
				out(&c, "\tif (s->shared[%d]) {\n\t\tvoid *o = NULL;\n"
					"\t\tif (coil_dn_make%d(m, d, s->sym, &o, 0)) {\n"
					"\t\t\tsnprintf(coil_errbuf, sizeof coil_errbuf, \"oneDNN: %%.200s\", d->err);\n"
					"\t\t\treturn -1;\n\t\t}\n\t\ts->obj[%d] = o;\n\t\ts->shared[%d] = 0;\n\t}\n",
				    j, j, j, j);
		out(&c, "\ts->nshared = 0;\n\tcoil_dn_weigh(d, s);\n\treturn 0;\n}\n\n");
	}
	if (ir->g->syms.n) {
		out(&c, "/* Weights are packed once per layout and shared, but a conv's kernel,\n"
			" * and so its weights' layout, can change with the spatial sizes\n"
			" * (Winograd's blocking does; resnet18 over 300 image sizes met four or five\n"
			" * per conv, each up to 4x the f32 weights): sets of different bindings may\n"
			" * each hold a copy of their own.  Before v is rebuilt, the least recently\n"
			" * used other sets go until what stays packed leaves room for one more set\n"
			" * within d->wcopies sets' worth, so memory stays bounded however many\n"
			" * shapes come.  wcopies starts at %d and grows, up to %d, while the handle\n"
			" * thrashes (of the last 8 sets built, %d or more were for bindings trim\n"
			" * had released: a few sizes taking turns); COIL_WEIGHT_COPIES in the\n"
			" * environment (1-%d) fixes it. */\n"
			"static void coil_dn_trim(struct coil_dn *d, const struct coil_dn_set *v)\n{\n"
			"\twhile (d->set_w && rt_ctx_weight_bytes(d->ctx) > d->gen_w + (size_t)(d->wcopies - 1) * d->set_w) {\n"
			"\t\tstruct coil_dn_set *o = NULL;\n"
			"\t\tfor (int i = 0; i < %d; i++)\n"
			"\t\t\tif (&d->set[i] != v && d->set[i].ready && (!o || d->set[i].used < o->used))\n"
			"\t\t\t\to = &d->set[i];\n"
			"\t\tif (!o)\n\t\t\treturn;\n%s"
			"\t\tmemcpy(d->ghost[d->nghost++ %% %d], o->sym, sizeof o->sym);\n"
			"\t\tcoil_dn_release(o);\n\t}\n}\n\n",
		    DN_WCOPIES, DN_WCOPIES_MAX, DN_THRASH, sets, sets, gen ? "\t\tcoil_dn_forget(d, o->sym);\n" : "",
		    DN_GHOST);
		out(&c, "/* Counts a set built for sym (coil_dn_trim's adaptation). */\n"
			"static void coil_dn_built(struct coil_dn *d, const int64_t *sym)\n{\n"
			"\tif (!d->wcopies) {\n\t\tconst char *e = getenv(\"COIL_WEIGHT_COPIES\");\n"
			"\t\tconst int n = e ? atoi(e) : 0;\n\t\td->wfixed = n >= 1 && n <= %d;\n"
			"\t\td->wcopies = d->wfixed ? n : %d;\n\t}\n"
			"\tint ghost = 0;\n"
			"\tfor (unsigned i = 0; i < %du && i < d->nghost; i++)\n"
			"\t\tghost |= !memcmp(d->ghost[i], sym, sizeof d->ghost[i]);\n"
			"\td->thrash = (d->thrash << 1 | (unsigned)ghost) & 0xffu;\n"
			"\tif (!d->wfixed && d->wcopies < %d && __builtin_popcount(d->thrash) >= %d) {\n"
			"\t\td->wcopies++;\n\t\td->thrash = 0;\n\t}\n}\n\n",
		    sets, DN_WCOPIES, DN_GHOST, DN_WCOPIES_MAX, DN_THRASH);
	}
	out(&c, "/* Makes d->obj the rt objects for the binding sym: a kept set, else the\n"
		" * least recently used one rebuilt (primitives for these shapes; the\n"
		" * weights, folded and packed once, shared through the rt context)%s. */\n",
	    gen ? "; a binding not hot yet borrows the generic objects where they exist" : "");
	out(&c, "static int coil_dn_prepare(coil_model *m, const int64_t *sym)\n{\n");
	out(&c, "\tstruct coil_dn *d = m->dn;\n");
	out(&c, "\tif (!d && !(d = m->dn = calloc(1, sizeof *d))) {\n"
		"\t\tsnprintf(coil_errbuf, sizeof coil_errbuf, \"out of memory\");\n\t\treturn -1;\n\t}\n");
	out(&c, "\td->tick++;\n\tstruct coil_dn_set *v = &d->set[0];\n"
		"\tfor (int i = 0; i < %d; i++) {\n\t\tstruct coil_dn_set *s = &d->set[i];\n"
		"\t\tif (s->ready && !memcmp(s->sym, sym, sizeof s->sym)) {\n\t\t\ts->used = d->tick;\n"
		"\t\t\td->obj = s->obj;\n%s\t\t\treturn 0;\n\t\t}\n"
		"\t\tif (!s->ready ? v->ready : v->ready && s->used < v->used)\n\t\t\tv = s;\n\t}\n", sets,
	    gen ? "\t\t\tif (s->nshared && !coil_dn_cold(d, sym))\n\t\t\t\treturn coil_dn_upgrade(m, d, s);\n" : "");
	if (gen)
		out(&c, "\tif (v->ready)\n\t\tcoil_dn_forget(d, v->sym);\n\tconst int cold = coil_dn_cold(d, sym);\n");
	else
		out(&c, "\tconst int cold = 0;\n");
	out(&c, "\tcoil_dn_release(v);\n\td->obj = v->obj;\n");
	out(&c, "\tif (!d->ctx && rt_ctx_create(m->nthreads, &d->ctx, d->err, sizeof d->err))\n\t\tgoto fail;\n");
	if (ir->g->syms.n)
		out(&c, "\tcoil_dn_built(d, sym);\n\tcoil_dn_trim(d, v);\n");
	for (int j = 0; j < p->nf; j++) {
		if (!p->f[j].emitted)
			continue;
		if (generic_ok(ir, &p->f[j])) {
			out(&c, "\tif (cold && !d->gen[%d] && !d->gen_no[%d]) {\n"
				"\t\tconst int rc = coil_dn_make%d(m, d, sym, &d->gen[%d], 1);\n"
				"\t\tif (rc == RT_EUNSUP)\n\t\t\td->gen_no[%d] = 1;\n\t\telse if (rc)\n\t\t\tgoto fail;\n"
				"\t\td->gen_w += rt_matmul_weight_bytes((const rt_matmul *)d->gen[%d]);\n\t}\n",
			    j, j, j, j, j, j);
			out(&c, "\tif (cold && d->gen[%d])\n\t\tv->obj[%d] = d->gen[%d], v->shared[%d] = 1, v->nshared++;\n\telse ",
			    j, j, j, j);
		} else {
			out(&c, "\t");
		}
		out(&c, "if (coil_dn_make%d(m, d, sym, &v->obj[%d], 0))\n\t\tgoto fail;\n", j, j);
	}
	out(&c, "\t(void)cold;\n\tmemcpy(v->sym, sym, sizeof v->sym);\n\tv->used = d->tick;\n\tv->ready = 1;\n");
	if (ir->g->syms.n)
		out(&c, "\tcoil_dn_weigh(d, v);\n");
	out(&c, "\treturn 0;\n");
	out(&c, "fail:\n\tsnprintf(coil_errbuf, sizeof coil_errbuf, \"oneDNN: %%.200s\", d->err);\n"
		"\tcoil_dn_release(v);\n\td->obj = NULL;\n\treturn -1;\n}\n\n");
	out(&c, "/* coil_model_memory's oneDNN part: workspace, packed weights, the most one\n"
		" * binding's objects held, bindings with objects, the bound on packed weights\n"
		" * in those (sets' worth: coil_dn_trim's wcopies). */\n"
		"static void coil_dn_memory(const struct coil_dn *d, int64_t *v)\n{\n"
		"\tif (!d)\n\t\treturn;\n"
		"\tv[1] = (int64_t)rt_ctx_workspace_bytes(d->ctx);\n"
		"\tv[2] = (int64_t)rt_ctx_weight_bytes(d->ctx);\n"
		"\tv[3] = %s;\n"
		"\tfor (int i = 0; i < %d; i++)\n\t\tv[4] += d->set[i].ready;\n"
		"\tv[5] = %s%d;\n}\n\n",
	    ir->g->syms.n ? "(int64_t)d->set_w" : "v[2]", sets, ir->g->syms.n ? "d->wcopies ? d->wcopies : " : "",
	    ir->g->syms.n ? DN_WCOPIES : 1);
}
