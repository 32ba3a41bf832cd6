/* Extern kernels: ops that are not fused loops (convolution, matrix products,
 * pooling, data movement) render as plain typed loops over whole, dense
 * buffers, parallelised with OpenMP over their outer dims when the work is
 * large enough.  This is the seam where library calls (oneDNN) replace the
 * loops: one function per op family, each given its node, its results and
 * the names of its buffers; emit_extern dispatches on the op.
 *
 * The loops follow common/interp.c: same window rules, same NaN rules, and
 * where the interpreter accumulates in double (pooling averages, convolution)
 * so do they, in the same order, so that results match it bit for bit.
 *
 * Names: the generated body may use any local name except the kernel's own
 * (x: the context, nt, s0..s7, in<N>, p<N>, c<N>, o<N>, b<N>, work). */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "codegen/emit.h"
#include "codegen/ir.h"
#include "common/infer.h"

typedef struct xctx {
	coil_ir *ir;
	FILE *f;
	int *used;
	emit_errs *errs;
	const coil_node *n;
	ir_kernel *K;
	coil_err *err;
	int *bad;
} xctx;


static void out(xctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(xctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(c->f, fmt, ap);
	va_end(ap);
}

static char *buf(xctx *c, int v)
{
	c->used[v] = 1;
	return emit_buf_name(c->ir, v);
}

static char *arg(xctx *c, int i) { return buf(c, c->ir->val_node[c->n->args[i].v[0]]); }
static ir_node *argn(xctx *c, int i) { return &c->ir->nodes[c->ir->val_node[c->n->args[i].v[0]]]; }
static int has(xctx *c, int i) { return c->n->args[i].kind == ARG_TENSOR && c->n->args[i].v[0] >= 0; }
static char *dimc(xctx *c, const coil_dim *d) { return arena_printf(c->ir->arena, "(%s)", ir_dim_c(c->ir->arena, d)); }

/* The IR node of result k when something reads it (else -1: not written). */
static int result(xctx *c, int k)
{
	for (int i = 0; i < c->K->nouts; i++)
		if (c->ir->nodes[c->K->outs[i]].index == k)
			return c->K->outs[i];
	return -1;
}

/* Product of dims [from, to) of n, as a C expression. */
static char *prod(xctx *c, const ir_node *n, int from, int to)
{
	char *p = "1";
	for (int i = from; i < to; i++)
		p = arena_printf(c->ir->arena, "%s * %s", p, dimc(c, &n->shape[i]));
	return p;
}

/* A static dim (inference guarantees it for the dims used here). */
static long long sdim(const ir_node *n, int i)
{
	int64_t v = 0;
	dim_is_const(&n->shape[i], &v);
	return (long long)v;
}

#define PAR(collapse) "\t#pragma omp parallel for collapse(" #collapse ") num_threads(nt) if (nt > 1 && work > 32768)\n"

/* --- convolution and matrix products (library seams) ------------------------ */

/* Direct convolution, 1d/2d/3d (missing spatial dims are 1), groups, stride,
 * padding, dilation, transposed.  The fallback where no library call applies:
 * each output row accumulates in double over (input channel, kd, kh, kw) in
 * the interpreter's order, then adds the bias. */
static void conv(xctx *c)
{
	const coil_node *n = c->n;
	int ov = result(c, 0);
	if (ov < 0)
		return;
	ir_node *xn = argn(c, 0), *wn = argn(c, 1), *o = &c->ir->nodes[ov];
	const char *t = emit_ctype(o->dtype);
	int sd = xn->rank - 2, tr = (int)n->args[6].i;
	long long G = n->args[8].i, CI = sdim(xn, 1), CO = sdim(o, 1);
	long long in[3] = {1, 1, 1}, on[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0}, dl[3] = {1, 1, 1};
	for (int i = 0; i < sd; i++) {
		int j = 3 - sd + i;
#define LV(ai) (long long)(n->args[ai].n == 1 ? n->args[ai].ints[0] : n->args[ai].ints[i])
		in[j] = sdim(xn, 2 + i), on[j] = sdim(o, 2 + i), k[j] = sdim(wn, 2 + i);
		s[j] = LV(3), p[j] = LV(4), dl[j] = LV(5);
#undef LV
	}
	long long cig = CI / G, cog = CO / G, ksz = k[0] * k[1] * k[2], isz = in[0] * in[1] * in[2];
	out(c, "\tconst int64_t nb = %s, work = nb * %lld;\n", dimc(c, &xn->shape[0]),
	    CO * on[0] * on[1] * on[2] * cig * ksz);
	if (!tr && cig == 1 && cog == 1 && o->dtype == COIL_F32) {
		/* depthwise (what oneDNN 2.6 runs on gemm when dilated, ~250x slower):
		 * each output row sums its taps in f32, vectors along the row, the
		 * interpreter's tap order, the bias last */
		out(c, "\tconst float *restrict src = %s, *restrict wt = %s;\n\tfloat *restrict dst = %s;\n", arg(c, 0),
		    arg(c, 1), buf(c, ov));
		out(c, PAR(3));
		out(c, "\tfor (int64_t bn = 0; bn < nb; bn++)\n\tfor (int64_t oc = 0; oc < %lld; oc++)\n"
		       "\tfor (int64_t od = 0; od < %lld; od++) {\n", CO, on[0]);
		out(c, "\t\tconst float *restrict px = src + (bn * %lld + oc) * %lld;\n\t\tconst float *restrict pw = wt + oc * %lld;\n",
		    CI, isz, ksz);
		out(c, "\t\tfor (int64_t oh = 0; oh < %lld; oh++) {\n"
		       "\t\t\tfloat *restrict po = dst + ((bn * %lld + oc) * %lld + od) * %lld + oh * %lld;\n"
		       "\t\t\tfor (int64_t ow = 0; ow < %lld; ow++)\n\t\t\t\tpo[ow] = 0;\n",
		    on[1], CO, on[0], on[1] * on[2], on[2], on[2]);
		out(c, "\t\t\tfor (int64_t kd = 0; kd < %lld; kd++) {\n\t\t\t\tconst int64_t id = od * %lld - %lld + kd * %lld;\n"
		       "\t\t\t\tif (id < 0 || id >= %lld)\n\t\t\t\t\tcontinue;\n", k[0], s[0], p[0], dl[0], in[0]);
		out(c, "\t\t\t\tfor (int64_t kh = 0; kh < %lld; kh++) {\n\t\t\t\t\tconst int64_t ih = oh * %lld - %lld + kh * %lld;\n"
		       "\t\t\t\t\tif (ih < 0 || ih >= %lld)\n\t\t\t\t\t\tcontinue;\n", k[1], s[1], p[1], dl[1], in[1]);
		out(c, "\t\t\t\t\tconst float *restrict row = px + (id * %lld + ih) * %lld;\n", in[1], in[2]);
		out(c, "\t\t\t\t\tfor (int64_t kw = 0; kw < %lld; kw++) {\n"
		       "\t\t\t\t\t\tconst float wv = pw[(kd * %lld + kh) * %lld + kw];\n"
		       "\t\t\t\t\t\tconst int64_t off = kw * %lld - %lld;\n"
		       "\t\t\t\t\t\tint64_t lo = -coil_fdiv(off, %lld), hi = coil_fdiv(%lld - 1 - off, %lld);\n"
		       "\t\t\t\t\t\tlo = lo > 0 ? lo : 0;\n\t\t\t\t\t\thi = hi < %lld ? hi : %lld;\n",
		    k[2], k[1], k[2], dl[2], p[2], s[2], in[2], s[2], on[2] - 1, on[2] - 1);
		if (s[2] == 1)
			out(c, "\t\t\t\t\t\tconst float *restrict rs = row + off;\n"
			       "\t\t\t\t\t\t#pragma omp simd\n\t\t\t\t\t\tfor (int64_t ow = lo; ow <= hi; ow++)\n"
			       "\t\t\t\t\t\t\tpo[ow] += wv * rs[ow];\n");
		else
			out(c, "\t\t\t\t\t\tfor (int64_t ow = lo; ow <= hi; ow++)\n\t\t\t\t\t\t\tpo[ow] += wv * row[ow * %lld + off];\n",
			    s[2]);
		out(c, "\t\t\t\t\t}\n\t\t\t\t}\n\t\t\t}\n");
		if (has(c, 2))
			out(c, "\t\t\tconst float bv = %s[oc];\n\t\t\tfor (int64_t ow = 0; ow < %lld; ow++)\n\t\t\t\tpo[ow] += bv;\n",
			    arg(c, 2), on[2]);
		out(c, "\t\t}\n\t}\n");
		return;
	}
	out(c, "\tconst %s *restrict src = %s, *restrict wt = %s;\n", t, arg(c, 0), arg(c, 1));
	if (has(c, 2))
		out(c, "\tconst %s *restrict bias = %s;\n", t, arg(c, 2));
	out(c, "\t%s *restrict dst = %s;\n", t, buf(c, ov));
	out(c, PAR(4));
	out(c, "\tfor (int64_t bn = 0; bn < nb; bn++)\n\tfor (int64_t oc = 0; oc < %lld; oc++)\n", CO);
	out(c, "\tfor (int64_t od = 0; od < %lld; od++)\n\tfor (int64_t oh = 0; oh < %lld; oh++) {\n", on[0], on[1]);
	out(c, "\t\tconst int64_t grp = oc / %lld, ocl = oc %% %lld;\n\t\t(void)ocl;\n", cog, cog);
	out(c, "\t\tfor (int64_t ow0 = 0; ow0 < %lld; ow0 += 256) {\n", on[2]);
	out(c, "\t\t\tconst int64_t nw = %lld - ow0 < 256 ? %lld - ow0 : 256;\n", on[2], on[2]);
	out(c, "\t\t\tdouble acc[256];\n\t\t\tfor (int64_t j = 0; j < nw; j++)\n\t\t\t\tacc[j] = 0;\n");
	out(c, "\t\t\tfor (int64_t ic = 0; ic < %lld; ic++) {\n", cig);
	out(c, "\t\t\t\tconst %s *restrict px = src + ((bn * %lld + grp * %lld + ic) * %lld);\n", t, CI, cig, isz);
	if (!tr)
		out(c, "\t\t\t\tconst %s *restrict pw = wt + (oc * %lld + ic) * %lld;\n", t, cig, ksz);
	else
		out(c, "\t\t\t\tconst %s *restrict pw = wt + ((grp * %lld + ic) * %lld + ocl) * %lld;\n", t, cig, cog, ksz);
	out(c, "\t\t\t\tfor (int64_t kd = 0; kd < %lld; kd++) {\n", k[0]);
	if (!tr) {
		/* input position = output * stride - pad + k * dilation */
		out(c, "\t\t\t\t\tconst int64_t id = od * %lld - %lld + kd * %lld;\n", s[0], p[0], dl[0]);
		out(c, "\t\t\t\t\tif (id < 0 || id >= %lld)\n\t\t\t\t\t\tcontinue;\n", in[0]);
		out(c, "\t\t\t\t\tfor (int64_t kh = 0; kh < %lld; kh++) {\n", k[1]);
		out(c, "\t\t\t\t\t\tconst int64_t ih = oh * %lld - %lld + kh * %lld;\n", s[1], p[1], dl[1]);
		out(c, "\t\t\t\t\t\tif (ih < 0 || ih >= %lld)\n\t\t\t\t\t\t\tcontinue;\n", in[1]);
		out(c, "\t\t\t\t\t\tconst %s *restrict row = px + (id * %lld + ih) * %lld;\n", t, in[1], in[2]);
		out(c, "\t\t\t\t\t\tfor (int64_t kw = 0; kw < %lld; kw++) {\n", k[2]);
		out(c, "\t\t\t\t\t\t\tconst double wv = pw[(kd * %lld + kh) * %lld + kw];\n", k[1], k[2]);
		out(c, "\t\t\t\t\t\t\tconst int64_t off = kw * %lld - %lld;\n", dl[2], p[2]);
		/* ow with 0 <= ow * s + off < in */
		out(c, "\t\t\t\t\t\t\tint64_t lo = -coil_fdiv(off, %lld), hi = coil_fdiv(%lld - 1 - off, %lld);\n", s[2],
		    in[2], s[2]);
		out(c, "\t\t\t\t\t\t\tlo = lo > ow0 ? lo : ow0;\n\t\t\t\t\t\t\thi = hi < ow0 + nw - 1 ? hi : ow0 + nw - 1;\n");
		out(c, "\t\t\t\t\t\t\tfor (int64_t ow = lo; ow <= hi; ow++)\n");
		out(c, "\t\t\t\t\t\t\t\tacc[ow - ow0] += wv * row[ow * %lld + off];\n", s[2]);
	} else {
		/* output position = input * stride - pad + k * dilation */
		out(c, "\t\t\t\t\tconst int64_t td = od + %lld - kd * %lld, id = td / %lld;\n", p[0], dl[0], s[0]);
		out(c, "\t\t\t\t\tif (td < 0 || td %% %lld || id >= %lld)\n\t\t\t\t\t\tcontinue;\n", s[0], in[0]);
		out(c, "\t\t\t\t\tfor (int64_t kh = 0; kh < %lld; kh++) {\n", k[1]);
		out(c, "\t\t\t\t\t\tconst int64_t th = oh + %lld - kh * %lld, ih = th / %lld;\n", p[1], dl[1], s[1]);
		out(c, "\t\t\t\t\t\tif (th < 0 || th %% %lld || ih >= %lld)\n\t\t\t\t\t\t\tcontinue;\n", s[1], in[1]);
		out(c, "\t\t\t\t\t\tconst %s *restrict row = px + (id * %lld + ih) * %lld;\n", t, in[1], in[2]);
		out(c, "\t\t\t\t\t\tfor (int64_t kw = 0; kw < %lld; kw++) {\n", k[2]);
		out(c, "\t\t\t\t\t\t\tconst double wv = pw[(kd * %lld + kh) * %lld + kw];\n", k[1], k[2]);
		out(c, "\t\t\t\t\t\t\tconst int64_t off = kw * %lld - %lld;\n", dl[2], p[2]);
		/* ow = iw * s + off, within [ow0, ow0 + nw) and 0 <= iw < in */
		out(c, "\t\t\t\t\t\t\tint64_t lo = -coil_fdiv(off - ow0, %lld), hi = coil_fdiv(ow0 + nw - 1 - off, %lld);\n",
		    s[2], s[2]);
		out(c, "\t\t\t\t\t\t\tlo = lo > 0 ? lo : 0;\n\t\t\t\t\t\t\thi = hi < %lld ? hi : %lld;\n", in[2] - 1,
		    in[2] - 1);
		out(c, "\t\t\t\t\t\t\tfor (int64_t iw = lo; iw <= hi; iw++)\n");
		out(c, "\t\t\t\t\t\t\t\tacc[iw * %lld + off - ow0] += wv * row[iw];\n", s[2]);
	}
	out(c, "\t\t\t\t\t\t}\n\t\t\t\t\t}\n\t\t\t\t}\n\t\t\t}\n");
	out(c, "\t\t\t%s *restrict po = dst + ((bn * %lld + oc) * %lld + od) * %lld + oh * %lld + ow0;\n", t, CO, on[0],
	    on[1] * on[2], on[2]);
	out(c, "\t\t\tfor (int64_t j = 0; j < nw; j++)\n\t\t\t\tpo[j] = (%s)(acc[j]%s);\n", t,
	    has(c, 2) ? " + (double)bias[oc]" : "");
	out(c, "\t\t}\n\t}\n");
}

/* C = alpha*A@B (+ beta*bias broadcast to [M,N]), batched for bmm. */
static void matmul(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	int base = c->n->op == OP_ADDMM ? 1 : 0;
	ir_node *a = argn(c, base), *o = &c->ir->nodes[outv];
	const char *t = emit_ctype(o->dtype);
	int r = a->rank;
	char *B = c->n->op == OP_BMM ? dimc(c, &a->shape[0]) : "1";
	char *M = dimc(c, &a->shape[r - 2]), *K = dimc(c, &a->shape[r - 1]), *N = dimc(c, &o->shape[o->rank - 1]);
	double alpha = base ? c->n->args[4].f : 1, beta = base ? c->n->args[3].f : 0;
	out(c, "\tconst int64_t B = %s, M = %s, K = %s, N = %s, work = B * M * N * K;\n", B, M, K, N);
	out(c, PAR(2));
	out(c, "\tfor (int64_t bi = 0; bi < B; bi++)\n\tfor (int64_t i = 0; i < M; i++) {\n");
	out(c, "\t\t%s *restrict crow = %s + (bi * M + i) * N;\n", t, buf(c, outv));
	out(c, "\t\tfor (int64_t j = 0; j < N; j++)\n\t\t\tcrow[j] = 0;\n");
	out(c, "\t\tfor (int64_t k = 0; k < K; k++) {\n\t\t\tconst %s av = %s[(bi * M + i) * K + k];\n", t,
	    arg(c, base));
	out(c, "\t\t\tconst %s *restrict brow = %s + (bi * K + k) * N;\n", t, arg(c, base + 1));
	out(c, "\t\t\tfor (int64_t j = 0; j < N; j++)\n\t\t\t\tcrow[j] += av * brow[j];\n\t\t}\n");
	if (base) {
		ir_node *bias = argn(c, 0);
		int rows = bias->rank == 2 && !dim_eq_const(&bias->shape[0], 1);
		char *bj = bias->rank >= 1 && !dim_eq_const(&bias->shape[bias->rank - 1], 1) ? "j" : "0";
		/* the bias's own row stride: [M,N] or [M,1] */
		char *row = rows ? arena_printf(c->ir->arena, "i * %s", dimc(c, &bias->shape[1])) : "0";
		out(c, "\t\tfor (int64_t j = 0; j < N; j++)\n\t\t\tcrow[j] = (%s)%.17g * crow[j]%s;\n", t, alpha,
		    beta != 0 ? arena_printf(c->ir->arena, " + (%s)%.17g * %s[%s + %s]", t, beta, arg(c, 0), row, bj) : "");
	}
	out(c, "\t}\n");
}

/* scaled_dot_product_attention: one call of attn.h's coil_sdpa.  Batch
 * dims index each operand through its own strides (0 where it broadcasts). */
static void sdpa(xctx *c)
{
	int ov = result(c, 0);
	if (ov < 0)
		return;
	ir_node *o = &c->ir->nodes[ov], *q = argn(c, 0), *v = argn(c, 2);
	int r = o->rank, nbd = r - 2;
	coil_dtype t = o->dtype;
	if (t != COIL_F32 && t != COIL_BF16 && t != COIL_F16) {
		*c->bad = 1;
		node_errf(c->err, c->n, "codegen: attention in %s is not supported (f32, bf16, f16)", dtype_name(t));
		c->err->code = COIL_E_UNSUPPORTED;
		return;
	}
	if (nbd > 6) {
		*c->bad = 1;
		node_errf(c->err, c->n, "codegen: attention with %d batch dims (at most 6)", nbd);
		c->err->code = COIL_E_UNSUPPORTED;
		return;
	}
	out(c, "\tcoil_sdpa_args sa = {.dt = %d, .nbd = %d};\n", t == COIL_F32 ? 0 : t == COIL_BF16 ? 1 : 2, nbd);
	static const char *const nm[4] = {"qs", "ks", "vs", "ms"};
	for (int d = 0; d < nbd; d++) {
		out(c, "\tsa.bd[%d] = %s;\n", d, dimc(c, &o->shape[d]));
		for (int a = 0; a < 4; a++) {
			if (a == 3 && !has(c, 3))
				continue;
			ir_node *x = argn(c, a);
			int j = d - (r - x->rank); /* the mask may have fewer dims */
			if (j < 0 || dim_eq_const(&x->shape[j], 1))
				continue;
			out(c, "\tsa.%s[%d] = %s;\n", nm[a], d, prod(c, x, j + 1, x->rank));
		}
	}
	out(c, "\tsa.L = %s;\n\tsa.S = %s;\n\tsa.E = %s;\n\tsa.Ev = %s;\n", dimc(c, &q->shape[r - 2]),
	    dimc(c, &argn(c, 1)->shape[r - 2]), dimc(c, &q->shape[r - 1]), dimc(c, &v->shape[r - 1]));
	out(c, "\tsa.q = %s;\n\tsa.k = %s;\n\tsa.v = %s;\n\tsa.out = %s;\n", arg(c, 0), arg(c, 1), arg(c, 2),
	    buf(c, ov));
	if (has(c, 3)) {
		ir_node *m = argn(c, 3);
		int mr = m->rank;
		out(c, "\tsa.mk = %d;\n\tsa.m = %s;\n", m->dtype == COIL_BOOL ? 1 : 2, arg(c, 3));
		double f = c->n->args[7].kind == ARG_NONE ? -INFINITY : c->n->args[7].f;
		out(c, "\tsa.fill = %s;\n", isnan(f) ? "NAN" : isinf(f) ? (f < 0 ? "-INFINITY" : "INFINITY")
					       : arena_printf(c->ir->arena, "(float)%.17g", f));
		if (mr >= 2 && !dim_eq_const(&m->shape[mr - 2], 1))
			out(c, "\tsa.msl = %s;\n", dimc(c, &m->shape[mr - 1]));
		if (mr >= 1 && !dim_eq_const(&m->shape[mr - 1], 1))
			out(c, "\tsa.mss = 1;\n");
	}
	out(c, "\tsa.causal = %d;\n", (int)c->n->args[5].i);
	if (c->n->args[6].kind == ARG_NONE)
		out(c, "\tsa.scale = 1.0f / sqrtf((float)sa.E);\n");
	else
		out(c, "\tsa.scale = (float)%.17g;\n", c->n->args[6].f);
	out(c, "\tsa.nt = nt;\n\tcoil_sdpa(&sa);\n");
}

/* --- pooling ----------------------------------------------------------------- */

/* The max-pooling update of (m, mi) with value v at plane offset pos, as in
 * ATen and the interpreter: the first maximum wins, but every NaN wins (so
 * the index is the last NaN's; reductions keep the first NaN instead). */
static void max_update(xctx *c, coil_dtype t, const char *ind)
{
	if (dtype_is_float(t))
		out(c, "%sif (mi < 0 || v > m || isnan(v)) {\n", ind);
	else
		out(c, "%sif (mi < 0 || v > m) {\n", ind);
	out(c, "%s\tm = v;\n%s\tmi = pos;\n%s}\n", ind, ind, ind);
}

/* max_pool2d/3d (with indices), avg_pool2d/3d over [..., (D,) H, W]: planes
 * are the leading dims; a 2-d pool is a 3-d one of depth 1 (its loops fold). */
static void pool2d(xctx *c)
{
	const coil_node *n = c->n;
	ir_node *xn = argn(c, 0);
	int ov = result(c, 0), iv = n->nout == 2 ? result(c, 1) : -1;
	ir_node *o = &c->ir->nodes[ov >= 0 ? ov : iv];
	pool_params pp;
	pool_get_params(n, &pp);
	const int r = xn->rank, avg = pool_is_avg(n->op), lead = 3 - pp.nd;
	const char *t = emit_ctype(xn->dtype);
	long long k[3], st[3], pd[3], dl[3];
	char *S[3], *OS[3];
	for (int i = 0; i < 3; i++) {
		const int j = i - lead;
		S[i] = j < 0 ? "1" : dimc(c, &xn->shape[r - pp.nd + j]);
		OS[i] = j < 0 ? "1" : dimc(c, &o->shape[r - pp.nd + j]);
		k[i] = j < 0 ? 1 : pp.k[j], st[i] = j < 0 ? 1 : pp.s[j], pd[i] = j < 0 ? 0 : pp.p[j];
		dl[i] = j < 0 ? 1 : pp.d[j];
	}
	/* sizes as C expressions: symbolic ones too */
	out(c, "\tconst int64_t D = %s, H = %s, W = %s, OD = %s, OH = %s, OW = %s;\n", S[0], S[1], S[2], OS[0], OS[1],
	    OS[2]);
	out(c, "\tconst int64_t planes = %s, work = planes * OD * OH * OW * %lld;\n", prod(c, xn, 0, r - pp.nd),
	    k[0] * k[1] * k[2]);
	out(c, "\tconst %s *restrict src = %s;\n", t, arg(c, 0));
	if (ov >= 0)
		out(c, "\t%s *restrict dst = %s;\n", t, buf(c, ov));
	if (iv >= 0)
		out(c, "\tint64_t *restrict ind = %s;\n", buf(c, iv));
	out(c, PAR(3));
	out(c, "\tfor (int64_t pl = 0; pl < planes; pl++)\n\tfor (int64_t od = 0; od < OD; od++)\n"
	       "\tfor (int64_t oh = 0; oh < OH; oh++) {\n");
	out(c, "\t\tconst %s *restrict px = src + pl * D * H * W;\n", t);
	out(c, "\t\tconst int64_t d0 = od * %lld - %lld, h0 = oh * %lld - %lld;\n", st[0], pd[0], st[1], pd[1]);
	out(c, "\t\tfor (int64_t ow = 0; ow < OW; ow++) {\n");
	out(c, "\t\t\tconst int64_t w0 = ow * %lld - %lld, at = ((pl * OD + od) * OH + oh) * OW + ow;\n", st[2], pd[2]);
	if (avg) {
		/* the window clipped to the padded input gives count_include_pad's
		 * divisor, clipped to the input the other one */
		out(c, "\t\t\tint64_t ds = d0, hs = h0, ws = w0, de = d0 + %lld, he = h0 + %lld, we = w0 + %lld;\n", k[0],
		    k[1], k[2]);
		out(c, "\t\t\tde = de < D + %lld ? de : D + %lld;\n\t\t\the = he < H + %lld ? he : H + %lld;\n"
		       "\t\t\twe = we < W + %lld ? we : W + %lld;\n", pd[0], pd[0], pd[1], pd[1], pd[2], pd[2]);
		out(c, "\t\t\tconst int64_t size = (de - ds) * (he - hs) * (we - ws);\n\t\t\t(void)size;\n");
		out(c, "\t\t\tds = ds < 0 ? 0 : ds;\n\t\t\ths = hs < 0 ? 0 : hs;\n\t\t\tws = ws < 0 ? 0 : ws;\n");
		out(c, "\t\t\tde = de > D ? D : de;\n\t\t\the = he > H ? H : he;\n\t\t\twe = we > W ? W : we;\n");
		out(c, "\t\t\tdouble sum = 0;\n\t\t\tfor (int64_t a = ds; a < de; a++)\n\t\t\tfor (int64_t h = hs; h < he; h++)\n"
		       "\t\t\t\tfor (int64_t w = ws; w < we; w++)\n");
		out(c, "\t\t\t\t\tsum += px[(a * H + h) * W + w];\n");
		char *div = pp.divisor ? arena_printf(c->ir->arena, "%lld", (long long)pp.divisor)
			    : pp.count_pad ? "size" : "(de - ds) * (he - hs) * (we - ws)";
		if (ov >= 0)
			out(c, "\t\t\tdst[at] = (%s)(sum / (double)(%s));\n", t, div);
	} else {
		out(c, "\t\t\t%s m = %s;\n\t\t\tint64_t mi = -1;\n", t, dtype_is_float(xn->dtype) ? "-INFINITY" : "0");
		out(c, "\t\t\tfor (int64_t ka = 0; ka < %lld; ka++) {\n", k[0]);
		out(c, "\t\t\tconst int64_t a = d0 + ka * %lld;\n\t\t\tif (a < 0 || a >= D)\n\t\t\t\tcontinue;\n", dl[0]);
		out(c, "\t\t\tfor (int64_t kh = 0; kh < %lld; kh++) {\n", k[1]);
		out(c, "\t\t\t\tconst int64_t h = h0 + kh * %lld;\n", dl[1]);
		out(c, "\t\t\t\tif (h < 0 || h >= H)\n\t\t\t\t\tcontinue;\n");
		out(c, "\t\t\t\tfor (int64_t kw = 0; kw < %lld; kw++) {\n", k[2]);
		out(c, "\t\t\t\t\tconst int64_t w = w0 + kw * %lld, pos = (a * H + h) * W + w;\n", dl[2]);
		out(c, "\t\t\t\t\tif (w < 0 || w >= W)\n\t\t\t\t\t\tcontinue;\n");
		out(c, "\t\t\t\t\tconst %s v = px[pos];\n", t);
		max_update(c, xn->dtype, "\t\t\t\t\t");
		out(c, "\t\t\t\t}\n\t\t\t}\n\t\t\t}\n");
		if (ov >= 0)
			out(c, "\t\t\tdst[at] = m;\n");
		if (iv >= 0)
			out(c, "\t\t\tind[at] = mi;\n");
	}
	out(c, "\t\t}\n\t}\n");
}

/* adaptive avg/max pooling: output cell (oh, ow) covers rows
 * [oh*H/OH, ceil((oh+1)*H/OH)) and likewise for columns. */
static void adaptive_pool2d(xctx *c)
{
	const coil_node *n = c->n;
	ir_node *xn = argn(c, 0);
	int ov = result(c, 0), iv = n->nout == 2 ? result(c, 1) : -1;
	ir_node *o = &c->ir->nodes[ov >= 0 ? ov : iv];
	int r = xn->rank, mx = n->op == OP_ADAPTIVE_MAX_POOL2D;
	const char *t = emit_ctype(xn->dtype);
	out(c, "\tconst int64_t H = %s, W = %s, OH = %s, OW = %s;\n", dimc(c, &xn->shape[r - 2]),
	    dimc(c, &xn->shape[r - 1]), dimc(c, &o->shape[r - 2]), dimc(c, &o->shape[r - 1]));
	out(c, "\tconst int64_t planes = %s, work = planes * OH * OW * ((H + OH - 1) / OH + 1) * ((W + OW - 1) / OW + 1);\n",
	    prod(c, xn, 0, r - 2));
	out(c, "\tconst %s *restrict src = %s;\n", t, arg(c, 0));
	if (ov >= 0)
		out(c, "\t%s *restrict dst = %s;\n", t, buf(c, ov));
	if (iv >= 0)
		out(c, "\tint64_t *restrict ind = %s;\n", buf(c, iv));
	out(c, PAR(2));
	out(c, "\tfor (int64_t pl = 0; pl < planes; pl++)\n\tfor (int64_t oh = 0; oh < OH; oh++) {\n");
	out(c, "\t\tconst %s *restrict px = src + pl * H * W;\n", t);
	out(c, "\t\tconst int64_t hs = oh * H / OH, he = ((oh + 1) * H + OH - 1) / OH;\n");
	out(c, "\t\tfor (int64_t ow = 0; ow < OW; ow++) {\n");
	out(c, "\t\t\tconst int64_t ws = ow * W / OW, we = ((ow + 1) * W + OW - 1) / OW;\n");
	out(c, "\t\t\tconst int64_t at = (pl * OH + oh) * OW + ow;\n");
	if (mx) {
		out(c, "\t\t\t%s m = -INFINITY;\n\t\t\tint64_t mi = -1;\n", t);
		out(c, "\t\t\tfor (int64_t h = hs; h < he; h++)\n\t\t\t\tfor (int64_t w = ws; w < we; w++) {\n");
		out(c, "\t\t\t\t\tconst int64_t pos = h * W + w;\n\t\t\t\t\tconst %s v = px[pos];\n", t);
		max_update(c, xn->dtype, "\t\t\t\t\t");
		out(c, "\t\t\t\t}\n");
		if (ov >= 0)
			out(c, "\t\t\tdst[at] = m;\n");
		if (iv >= 0)
			out(c, "\t\t\tind[at] = mi;\n");
	} else {
		out(c, "\t\t\tdouble sum = 0;\n\t\t\tfor (int64_t h = hs; h < he; h++)\n\t\t\t\tfor (int64_t w = ws; w < we; w++)\n");
		out(c, "\t\t\t\t\tsum += px[h * W + w];\n");
		if (ov >= 0)
			out(c, "\t\t\tdst[at] = (%s)(sum / (double)((he - hs) * (we - ws)));\n", t);
	}
	out(c, "\t\t}\n\t}\n");
}

/* --- resampling ---------------------------------------------------------------- */

/* A table of n entries, one per output position, as a static array. */
static void table_i(xctx *c, const char *name, const int64_t *v, int64_t n)
{
	out(c, "\tstatic const int32_t %s[%lld] = {", name, (long long)n);
	for (int64_t i = 0; i < n; i++)
		out(c, "%s%lld", i ? (i % 16 ? ", " : ",\n\t\t") : "", (long long)v[i]);
	out(c, "};\n");
}

static void table_f(xctx *c, const char *name, const double *v, int64_t n)
{
	out(c, "\tstatic const double %s[%lld] = {", name, (long long)n);
	for (int64_t i = 0; i < n; i++)
		out(c, "%s%.17g", i ? (i % 8 ? ", " : ",\n\t\t") : "", v[i]);
	out(c, "};\n");
}

/* upsample_bilinear2d / upsample_nearest2d over [N, C, H, W]: the source rows
 * and columns and their weights by the interpreter's rule
 * (common/upsample.h): at static sizes computed here, once, and emitted as
 * tables; at symbolic ones computed at each run into a buffer.  The loop
 * gathers and mixes in double in the interpreter's order. */
static void upsample2d(xctx *c)
{
	int ov = result(c, 0);
	if (ov < 0)
		return;
	ir_node *xn = argn(c, 0), *o = &c->ir->nodes[ov];
	upsample_params up;
	upsample_get_params(c->n, &up);
	const char *t = emit_ctype(o->dtype);
	int sym = 0;
	for (int d = 2; d < 4; d++)
		sym |= !dim_is_const(&xn->shape[d], NULL) || !dim_is_const(&o->shape[d], NULL);
	out(c, "\tconst int64_t H = %s, W = %s, OH = %s, OW = %s;\n", dimc(c, &xn->shape[2]), dimc(c, &xn->shape[3]),
	    dimc(c, &o->shape[2]), dimc(c, &o->shape[3]));
	if (sym) {
		int code = emit_err_code(c->errs, c->ir, c->ir->nodes[ov].gnode, "out of memory");
		out(c, "\tint64_t *h0 = malloc((size_t)(2 * (OH + OW)) * sizeof *h0), *h1 = h0 + OH, *w0 = h1 + OH, "
		       "*w1 = w0 + OW;\n");
		out(c, "\tdouble *hl0 = malloc((size_t)(2 * (OH + OW)) * sizeof *hl0), *hl1 = hl0 + OH, *wl0 = hl1 + OH, "
		       "*wl1 = wl0 + OW;\n");
		out(c, "\tif (!h0 || !hl0) {\n\t\tfree(h0);\n\t\tfree(hl0);\n\t\tcoil_raise(x->st, %d, 0, 0);\n"
		       "\t\treturn;\n\t}\n", code);
		for (int d = 0; d < 2; d++)
			out(c, "\tfor (int64_t i = 0; i < O%c; i++) {\n\t\tint64_t s[2];\n\t\tdouble w[2];\n"
			       "\t\tcoil_upsample_source(%d, %d, %.17g, %d, %c, O%c, i, s, w);\n"
			       "\t\t%c0[i] = s[0], %c1[i] = s[1], %cl0[i] = w[0], %cl1[i] = w[1];\n\t}\n",
			    d ? 'W' : 'H', up.linear, up.align_corners, up.scale[d], o->dtype == COIL_F64, d ? 'W' : 'H',
			    d ? 'W' : 'H', d ? 'w' : 'h', d ? 'w' : 'h', d ? 'w' : 'h', d ? 'w' : 'h');
	} else {
		long long H = sdim(xn, 2), W = sdim(xn, 3), OH = sdim(o, 2), OW = sdim(o, 3);
		long long L = OH > OW ? OH : OW;
		int64_t *ix[4];
		double *wt[4];
		for (int k = 0; k < 4; k++) {
			ix[k] = arena_alloc(c->ir->arena, (size_t)L * sizeof(int64_t));
			wt[k] = arena_alloc(c->ir->arena, (size_t)L * sizeof(double));
			if (!ix[k] || !wt[k]) {
				*c->bad = 1;
				node_errf(c->err, c->n, "out of memory");
				return;
			}
		}
		for (int d = 0; d < 2; d++)
			for (int64_t i = 0; i < (d ? OW : OH); i++) {
				int64_t s[2];
				double w[2];
				upsample_source(&up, d, o->dtype, d ? W : H, d ? OW : OH, i, s, w);
				ix[2 * d][i] = s[0], ix[2 * d + 1][i] = s[1];
				wt[2 * d][i] = w[0], wt[2 * d + 1][i] = w[1];
			}
		table_i(c, "h0", ix[0], OH);
		table_i(c, "w0", ix[2], OW);
		if (up.linear) {
			table_i(c, "h1", ix[1], OH);
			table_i(c, "w1", ix[3], OW);
			table_f(c, "hl0", wt[0], OH);
			table_f(c, "hl1", wt[1], OH);
			table_f(c, "wl0", wt[2], OW);
			table_f(c, "wl1", wt[3], OW);
		}
	}
	out(c, "\tconst int64_t planes = %s, work = planes * OH * OW * %d;\n", prod(c, xn, 0, 2), up.linear ? 4 : 1);
	out(c, "\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n", t, arg(c, 0), t, buf(c, ov));
	out(c, PAR(2));
	out(c, "\tfor (int64_t pl = 0; pl < planes; pl++)\n\tfor (int64_t oh = 0; oh < OH; oh++) {\n");
	out(c, "\t\tconst %s *restrict r0 = src + pl * H * W + h0[oh] * W;\n", t);
	out(c, "\t\t%s *restrict po = dst + (pl * OH + oh) * OW;\n", t);
	if (up.linear) {
		out(c, "\t\tconst %s *restrict r1 = src + pl * H * W + h1[oh] * W;\n", t);
		/* (no local is named like a buffer, b<N>, or a kernel parameter, a<N>:
		 * emit_c renames those in the body) */
		out(c, "\t\tconst double ya = hl0[oh], yb = hl1[oh];\n");
		/* rows up to 4096 wide: the two source rows mixed once (vectors, in double),
		 * then each output a mix of two of those; the same sums in another order,
		 * exact to a double's rounding (1.46 -> 0.4 ms on lraspp's 21x28x28 -> 224x224) */
		out(c, "\t\tif (W <= 4096) {\n\t\t\tdouble vm[W];\n");
		out(c, "\t\t\tfor (int64_t iw = 0; iw < W; iw++)\n\t\t\t\tvm[iw] = (double)r0[iw] * ya + (double)r1[iw] * yb;\n");
		out(c, "\t\t\tfor (int64_t ow = 0; ow < OW; ow++)\n"
		       "\t\t\t\tpo[ow] = (%s)(vm[w0[ow]] * wl0[ow] + vm[w1[ow]] * wl1[ow]);\n\t\t\tcontinue;\n\t\t}\n", t);
		out(c, "\t\tfor (int64_t ow = 0; ow < OW; ow++) {\n");
		out(c, "\t\t\tconst double xa = wl0[ow], xb = wl1[ow];\n");
		out(c, "\t\t\tconst double t0 = (double)r0[w0[ow]] * xa + (double)r0[w1[ow]] * xb;\n");
		out(c, "\t\t\tconst double t1 = (double)r1[w0[ow]] * xa + (double)r1[w1[ow]] * xb;\n");
		out(c, "\t\t\tpo[ow] = (%s)(t0 * ya + t1 * yb);\n\t\t}\n", t);
	} else {
		out(c, "\t\tfor (int64_t ow = 0; ow < OW; ow++)\n\t\t\tpo[ow] = r0[w0[ow]];\n");
	}
	out(c, "\t}\n");
	if (sym)
		out(c, "\tfree(h0);\n\tfree(hl0);\n");
}

/* --- data movement ------------------------------------------------------------ */

/* Copies blocks along dim d: [outer][size_d * inner] (stack: each input a block of 1). */
static void cat(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *o = &c->ir->nodes[outv];
	int d = (int)(c->n->args[1].i < 0 ? c->n->args[1].i + o->rank : c->n->args[1].i);
	const int stack = c->n->op == OP_STACK; /* each input one slice of the new dim */
	if (c->ir->dn && c->ir->dn->cl[o->gnode]) /* NHWC (lower_dnnl.c's layout): the channels are last */
		d = o->rank - 1;
	/* row by row (a row: the inputs' spans of one outer index, side by side),
	 * rows over the threads: an NHWC cat along the channels is one row per
	 * pixel, each input's span a few vectors (densenet121 at batch 8, 2
	 * threads: its 62 cats 38 ms in input-by-input passes on one thread) */
	out(c, "\tconst int64_t outer = %s, inner = %s, od = %s, work = outer * od * inner;\n\t(void)inner, (void)work;\n",
	    prod(c, o, 0, d), prod(c, o, d + 1, o->rank), dimc(c, &o->shape[d]));
	/* inputs of the result's dtype (every one, or the cat converts): their
	 * spans in a table for the prelude's coil_cat, one function a unit
	 * (densenet121's 58 cats of up to 49 inputs, a block of code an input,
	 * were 42% of its kernels' compile) */
	const char *T = emit_ctype(o->dtype);
	int nk = 0, same = 1;
	char *srcs = "", *spans = "";
	for (int k = 0; k < c->n->args[0].n; k++) {
		ir_node *xk = &c->ir->nodes[o->xsrc[k]];
		if (!stack && xk->rank != o->rank)
			continue;
		same &= xk->dtype == o->dtype;
		srcs = arena_printf(c->ir->arena, "%s%s%s", srcs, nk ? ", " : "", buf(c, o->xsrc[k]));
		spans = arena_printf(c->ir->arena, "%s%s%s", spans, nk ? ", " : "", stack ? "1" : dimc(c, &xk->shape[d]));
		nk++;
	}
	if (same && nk) {
		out(c, "\tconst void *const src[%d] = {%s};\n\tconst int64_t span[%d] = {%s};\n", nk, srcs, nk, spans);
		out(c, "\tcoil_cat(%s, src, span, %d, outer, inner, sizeof(%s), nt);\n", buf(c, outv), nk, T);
		return;
	}
	out(c, "\t#pragma omp parallel for num_threads(nt) if (nt > 1 && outer > 1 && work > 32768)\n"
	       "\tfor (int64_t a = 0; a < outer; a++) {\n\t\tint64_t at = 0;\n\t\t(void)at;\n");
	for (int k = 0; k < c->n->args[0].n; k++) {
		int v = o->xsrc[k]; /* (the inputs as decompose saw them: in the frame, [N, H, W, C]) */
		ir_node *xk = &c->ir->nodes[v];
		if (!stack && xk->rank != o->rank)
			continue;
		out(c, "\t\t{\n\t\t\tconst int64_t xd = %s;\n", stack ? "1" : dimc(c, &xk->shape[d]));
		if (xk->dtype == o->dtype)
			out(c, "\t\t\tmemcpy(%s + (a * od + at) * inner, %s + a * xd * inner, (size_t)(xd * inner) * sizeof(%s));\n",
			    buf(c, outv), buf(c, v), emit_ctype(o->dtype));
		else { /* promoted: convert element by element (bool stays 0/1; bf16, f16 through float) */
			char *e = arena_printf(c->ir->arena, "%s[a * xd * inner + e]", buf(c, v));
			if (dtype_is_half(xk->dtype))
				e = arena_printf(c->ir->arena, "coil_%s_f32(%s)", emit_half(xk->dtype), e);
			e = dtype_is_half(o->dtype) ? arena_printf(c->ir->arena, "coil_f32_%s((float)%s)", emit_half(o->dtype), e)
						    : arena_printf(c->ir->arena, "(%s)%s", emit_ctype(o->dtype), e);
			out(c, "\t\t\tfor (int64_t e = 0; e < xd * inner; e++)\n\t\t\t\t%s[(a * od + at) * inner + e] = %s;\n",
			    buf(c, outv), e);
		}
		out(c, "\t\t\tat += xd;\n\t\t}\n");
	}
	out(c, "\t}\n");
}

/* The check of v[e], e < count, against [0, bound): a vector pass (an OR of
 * unsigned compares: 1e6 indices 1.3 -> 0.5 ms), then, when one is out of
 * range, the first found again and raised with the error code. */
static void emit_range_check(xctx *c, const char *v, const char *count, const char *bound, int code)
{
	out(c, "\t{\n\t\tint bad = 0;\n\t\t#pragma omp simd reduction(|:bad)\n\t\tfor (int64_t e = 0; e < %s; e++)\n"
	       "\t\t\tbad |= (uint64_t)(int64_t)%s[e] >= (uint64_t)%s;\n", count, v, bound);
	out(c, "\t\tfor (int64_t e = 0; bad && e < %s; e++)\n\t\t\tif ((int64_t)%s[e] < 0 || (int64_t)%s[e] >= %s) {\n",
	    count, v, v, bound);
	out(c, "\t\t\t\tcoil_raise(x->st, %d, (long long)%s[e], (long long)%s);\n\t\t\t\treturn;\n\t\t\t}\n\t}\n", code, v,
	    bound);
}

/* Checks every idx[e], e < count, against [0, bound) before the kernel writes
 * anything: the first out of range fails the run, named with msg (index, bound). */
static void index_check(xctx *c, int outv, const char *count, const char *bound, const char *msg)
{
	emit_range_check(c, "idx", count, bound, emit_err_code(c->errs, c->ir, c->ir->nodes[outv].gnode, msg));
}

/* The value of the fill a scatter's self is (ir_scatter_fills_self), as C. */
static const char *self_fill(xctx *c, const char *T)
{
	const double f = argn(c, 0)->fill;
	return isnan(f) ? arena_printf(c->ir->arena, "(%s)NAN", T)
		: isinf(f) ? arena_printf(c->ir->arena, "(%s)%sINFINITY", T, f < 0 ? "-" : "")
		: arena_printf(c->ir->arena, "(%s)%.17g", T, f);
}

/* dst = self (arg 0) for a scatter, all of its elements: the fill written
 * when self is one (ir_scatter_fills_self: not an input of the kernel). */
static void self_init(xctx *c, const char *T)
{
	const ir_node *s = argn(c, 0);
	if (!ir_scatter_fills_self(c->ir, c->n))
		out(c, "\tmemcpy(dst, %s, (size_t)all * sizeof(%s));\n", arg(c, 0), T);
	else if (s->fill == 0 && !signbit(s->fill))
		out(c, "\tmemset(dst, 0, (size_t)all * sizeof(%s));\n", T);
	else
		out(c, "\tfor (int64_t e = 0; e < all; e++)\n\t\tdst[e] = %s;\n", self_fill(c, T));
}

/* gather: out has index's shape; along dim it reads self at the index, elsewhere
 * at its own coordinates (self's strides).  Indices are checked first. */
static void gather(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x0 = argn(c, 0), *ix = argn(c, 2), *o = &c->ir->nodes[outv];
	const int R = ix->rank, d = R ? (int)(c->n->args[1].i < 0 ? c->n->args[1].i + R : c->n->args[1].i) : 0;
	out(c, "\tconst int64_t n = %s, X = %s, work = n;\n\t(void)work;\n", prod(c, ix, 0, R),
	    x0->rank ? dimc(c, &x0->shape[d]) : "1");
	out(c, "\tconst int64_t *restrict idx = %s;\n", arg(c, 2));
	index_check(c, outv, "n", "X", "index %lld out of range for a dim of size %lld");
	/* coordinates of e over index's shape; self's offset with dim d from the index */
	out(c, "\tconst int64_t ish[%d] = {", R ? R : 1);
	for (int i = 0; i < R; i++)
		out(c, "%s%s", i ? ", " : "", dimc(c, &ix->shape[i]));
	out(c, "%s};\n\tint64_t xst[%d];\n", R ? "" : "1", R ? R : 1);
	if (R) {
		out(c, "\txst[%d] = 1;\n", R - 1);
		for (int i = R - 2; i >= 0; i--)
			out(c, "\txst[%d] = xst[%d] * %s;\n", i, i + 1, dimc(c, &x0->shape[i + 1]));
	}
	out(c, "\t(void)ish, (void)xst;\n");
	out(c, PAR(1));
	out(c, "\tfor (int64_t e = 0; e < n; e++) {\n\t\tint64_t rest = e, off = 0;\n");
	out(c, "\t\tfor (int i = %d; i >= 0; i--) {\n\t\t\tconst int64_t k = rest %% ish[i];\n"
	       "\t\t\trest /= ish[i];\n\t\t\toff += (i == %d ? idx[e] : k) * xst[i];\n\t\t}\n", R - 1, d);
	out(c, "\t\t%s[e] = %s[off];\n\t}\n", buf(c, outv), arg(c, 0));
	(void)o;
}

/* The identity of a scatter reduction in t, as C (prod 1, amax the lowest value). */
static const char *scatter_ident(coil_dtype t, const char *red)
{
	const int mx = !strcmp(red, "amax");
	if (!strcmp(red, "sum") || !strcmp(red, "mean"))
		return "0";
	if (!strcmp(red, "prod"))
		return "1";
	switch (t) {
	case COIL_I64: return mx ? "INT64_MIN" : "INT64_MAX";
	case COIL_I32: return mx ? "INT32_MIN" : "INT32_MAX";
	case COIL_I8: return mx ? "INT8_MIN" : "INT8_MAX";
	case COIL_U8: return mx ? "0" : "UINT8_MAX";
	default: return mx ? "-INFINITY" : "INFINITY";
	}
}

/* The reduction of the value a at a target with the value v, as C (amax and
 * amin of floats propagate NaN: a NaN a stays, as v > a is false; a NaN v
 * gives a + v.  One compare of v and a max: 1e6 rows of 64 at one thread 55
 * -> ~37 ms against testing a != a too, whose masks gcc moved through
 * general registers). */
static const char *scatter_combine(int fl, const char *red)
{
	if (!strcmp(red, "sum") || !strcmp(red, "mean"))
		return "a + v";
	if (!strcmp(red, "prod"))
		return "a * v";
	if (!strcmp(red, "amax"))
		return fl ? "v != v ? a + v : v > a ? v : a" : "v > a ? v : a";
	return fl ? "v != v ? a + v : v < a ? v : a" : "v < a ? v : a";
}

/* Opens the parallel region of a scatter kernel; for mean, per-thread counts
 * (ctype) of the X targets times `per` columns, as cnt. */
static void scatter_open(xctx *c, int outv, int mean, const char *ctype, int per)
{
	if (mean) {
		int oom = emit_err_code(c->errs, c->ir, c->ir->nodes[outv].gnode, "out of memory (%lld counts, %lld)");
		out(c, "\t%s *cnts = calloc((size_t)(nt > 0 ? nt : 1) * (size_t)(X ? X : 1) * %d, sizeof *cnts);\n"
		       "\tif (!cnts) {\n\t\tcoil_raise(x->st, %d, (long long)X, %d);\n\t\treturn;\n\t}\n",
		    ctype, per, oom, per);
	}
	out(c, "\t#pragma omp parallel num_threads(nt) if (nt > 1 && work > 32768)\n\t{\n");
	if (mean)
		out(c, "\t\t%s *cnt = cnts + (size_t)omp_get_thread_num() * (size_t)(X ? X : 1) * %d;\n", ctype, per);
}

/* index_add / index_reduce along dim 0 of rows of C (GNN aggregation: messages
 * [edges, features] into [nodes, features] by a 1-d target index).  The
 * targets are split into ranges of about equal edge counts (a sample of the
 * index), one task each; a task walks the edges in order and reduces whole
 * rows into its own targets, prefetched a few edges ahead (they are random
 * rows).  Every target is reduced by one task in edge order: the same bits
 * whatever the thread count, no atomics.  (Splitting the columns instead, so
 * that threads share the streaming of src, measured slower: 77-87 ms against
 * 50-58 ms for 1e6 edges x 64 at 2 threads, 47 at 1.)  cnt counts each
 * target's edges: the first starts the row from self (or from the identity,
 * include_self=False), and a last pass writes self where none came and divides
 * a mean; dst is not written beforehand (a memset of 25.6 MB fewer for 1e5
 * targets x 64), a target's first edge combines with self in the loop that
 * reduces the others.  A task lists its edges K at a time and prefetches
 * the target row (and count) D of its edges ahead, and the source row where
 * tasks share the edges (it no longer counts on the hardware prefetcher for
 * a stream it skips rows of; a single task, owning every edge, lists none:
 * 39.5 -> 37.2 ms at one thread on an Intel Xeon, paired): 1e6 edges x 64 into 1e5 power-law targets on
 * an AVX2 EPYC, paired, 1 thread 46-62 -> 37-44 ms, 2 threads 39-43 ->
 * 26-34 ms (the dst rows miss the shared L3 there; a Xeon had measured
 * 24 -> 22 ms at 2 threads without the dst prefetch when the stream was
 * left to the hardware).  Sorting or bucketing the edges by target to keep
 * dst in cache measured slower (src rows then read at random: 40-60 ms).
 *
 * adapt (messages streamed in order, scatter()): whether tasks pay depends on
 * the machine.  Each task streams all of src (the hardware prefetcher reads
 * the rows it skips), so tasks gain where one core cannot draw the memory's
 * bandwidth alone and lose where it can: 1e6 edges x 64 at 2 threads, Intel
 * Xeon (AMX) one task 32-33 ms, two 23-24; AMD EPYC Zen 4 one 23, two 28.
 * The edges can be cut anywhere (each target still reduced in edge order),
 * so the kernel measures in its first call at nt > 1: the first half of the
 * edges with one task, the second with nt, each timed; every later call
 * takes the faster for all (a static of the emitted function, so shared by
 * the kernels that run the same code and by the artifact's models; the same
 * bits either way). */
static void scatter_rows(xctx *c, int outv, const char *red, int self_in, double alpha, const char *row,
			 const char *scale, const char *ahead, int adapt)
{
	ir_node *x0 = argn(c, 0), *sr = argn(c, 3), *o = &c->ir->nodes[outv];
	const char *T = emit_ctype(o->dtype);
	const int fl = dtype_is_float(o->dtype), mean = !strcmp(red, "mean");
	/* self's row k at column q: written at each target's first edge and, at
	 * the end, where none came (no pass of its own over dst) */
	const char *selfq = ir_scatter_fills_self(c->ir, c->n) ? self_fill(c, T)
		: arena_printf(c->ir->arena, "((const %s *)%s)[k * C + q]", T, arg(c, 0));
	out(c, "\tconst int64_t C = %s, m = %s;\n", prod(c, x0, 1, x0->rank), dimc(c, &sr->shape[0]));
	out(c, "\tconst int tall = nt > 1 && m * C > 32768 ? (nt < 64 ? nt : 64) : 1;\n"
	       "\tint tns[2] = {tall, tall}, nseg = 1;\n\tint64_t js[3] = {0, m, m};\n");
	if (adapt) /* pick: 0 not measured, 1 one task, 2 all, 3 being measured */
		out(c, "\tstatic int pick;\n\tint unset = 0;\n"
		       "\tif (tall > 1 && __atomic_compare_exchange_n(&pick, &unset, 3, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))\n"
		       "\t\ttns[0] = 1, js[1] = m / 2, nseg = 2;\n"
		       "\telse if (unset == 1)\n\t\ttns[0] = 1;\n");
	int oom = emit_err_code(c->errs, c->ir, o->gnode, "out of memory (%lld counts, %lld)");
	out(c, "\tint64_t *restrict cnt = calloc((size_t)(X ? X : 1), sizeof *cnt);\n"
	       "\tif (!cnt) {\n\t\tcoil_raise(x->st, %d, (long long)X, 1);\n\t\treturn;\n\t}\n", oom);
	out(c, "\tdouble took[2];\n\tfor (int sg = 0; sg < nseg; sg++) {\n"
	       "\t\tconst int tn = tns[sg];\n\t\tconst int64_t ja = js[sg], jb = js[sg + 1];\n"
	       "\t\tconst double t0 = omp_get_wtime();\n");
	out(c, "\t\tint64_t lo[65];\n\t\tlo[0] = 0, lo[tn] = X;\n"
	       "\t\tif (tn > 1) { /* range bounds at equal shares of a sample of the targets */\n"
	       "\t\t\tenum { B = 1024 };\n\t\t\tint64_t h[B] = {0}, tot = 0, cum = 0;\n"
	       "\t\t\tfor (int64_t j = ja; j < jb; j += (jb - ja) / 8192 + 1)\n\t\t\t\th[(int64_t)idx[j] * B / X]++, tot++;\n"
	       "\t\t\tint t = 1;\n\t\t\tfor (int b = 0; b < B && t < tn; b++) {\n\t\t\t\tcum += h[b];\n"
	       "\t\t\t\twhile (t < tn && cum * tn >= tot * t)\n\t\t\t\t\tlo[t++] = ((int64_t)(b + 1) * X + B - 1) / B;\n"
	       "\t\t\t}\n\t\t\tfor (; t < tn; t++)\n\t\t\t\tlo[t] = X;\n\t\t}\n");
	/* each task: its edges of K at a time listed (own), then reduced with
	 * the target rows (and their counts) prefetched D edges ahead, and the
	 * gathered row (ahead) or, where other tasks share the edges, the
	 * message row too */
	out(c, "\t\t#pragma omp parallel num_threads(tn) if (tn > 1)\n\t\t{\n"
	       "\t\t\tenum { K = 1024, D = 16 };\n\t\t\tint32_t own[K];\n"
	       "\t\t\tfor (int p = omp_get_thread_num(); p < tn; p += omp_get_num_threads()) {\n"
	       "\t\t\t\tconst int64_t k0 = lo[p], k1 = lo[p + 1];\n"
	       "\t\t\t\tfor (int64_t j0 = ja; j0 < jb; j0 += K) {\n"
	       "\t\t\t\t\tconst int64_t j1 = jb - j0 < K ? jb : j0 + K;\n\t\t\t\t\tint no = 0;\n"
	       "\t\t\t\t\tfor (int64_t j = j0; j < j1 && tn > 1; j++) {\n\t\t\t\t\t\tconst int64_t k = (int64_t)idx[j];\n"
	       "\t\t\t\t\t\town[no] = (int32_t)(j - j0);\n\t\t\t\t\t\tno += k >= k0 && k < k1;\n\t\t\t\t\t}\n"
	       "\t\t\t\t\tif (tn == 1) /* one task: every edge its own, none listed */\n"
	       "\t\t\t\t\t\tno = (int)(j1 - j0);\n"
	       "\t\t\t\t\tfor (int i = 0; i < no; i++) {\n"
	       "\t\t\t\t\t\tif (i + D < no) {\n\t\t\t\t\t\t\tconst int64_t jp = j0 + (tn > 1 ? own[i + D] : i + D), kp = (int64_t)idx[jp];\n"
	       "\t\t\t\t\t\t\t__builtin_prefetch(cnt + kp, 1);\n"
	       "\t\t\t\t\t\t\tfor (int64_t b = 0; b < C; b += 64 / (int64_t)sizeof(%s)) {\n"
	       "\t\t\t\t\t\t\t\t__builtin_prefetch(dst + kp * C + b, 1);\n%s\t\t\t\t\t\t\t}\n\t\t\t\t\t\t}\n"
	       "\t\t\t\t\t\tconst int64_t j = j0 + (tn > 1 ? own[i] : i), k = (int64_t)idx[j];\n"
	       "\t\t\t\t\t\t%s *restrict d = dst + k * C;\n\t\t\t\t\t\tconst %s *restrict s = %s;\n", T,
	    ahead ? arena_printf(c->ir->arena, "\t\t\t\t\t\t\t\t__builtin_prefetch(%s + b);\n", ahead)
		  : "\t\t\t\t\t\t\t\tif (tn > 1)\n\t\t\t\t\t\t\t\t\t__builtin_prefetch(src + jp * C + b);\n",
	    T, T, row);
	const char *vmul = alpha != 1 ? arena_printf(c->ir->arena, "(%s)%.17g * ", T, alpha)
		: scale ? arena_printf(c->ir->arena, "%s * ", scale) : "";
	/* a target's first edge starts from self (or the identity) in the same
	 * loop; the rows as vectors (gcc -O2 leaves them scalar, unsure d and s
	 * do not overlap: 40 -> 23 ms for 1e6 edges x 64, one thread) */
	out(c, "\t\t\t\t\t\tif (!cnt[k]) {\n\t\t\t\t\t\t\t#pragma omp simd\n\t\t\t\t\t\t\tfor (int64_t q = 0; q < C; q++) {\n"
	       "\t\t\t\t\t\t\t\tconst %s v = %ss[q], a = %s;\n\t\t\t\t\t\t\t\td[q] = %s;\n\t\t\t\t\t\t\t}\n"
	       "\t\t\t\t\t\t} else {\n\t\t\t\t\t\t\t#pragma omp simd\n\t\t\t\t\t\t\tfor (int64_t q = 0; q < C; q++) {\n"
	       "\t\t\t\t\t\t\t\tconst %s v = %ss[q], a = d[q];\n\t\t\t\t\t\t\t\td[q] = %s;\n\t\t\t\t\t\t\t}\n\t\t\t\t\t\t}\n"
	       "\t\t\t\t\t\tcnt[k]++;\n\t\t\t\t\t}\n\t\t\t\t}\n\t\t\t}\n\t\t}\n",
	    T, vmul, self_in ? selfq : scatter_ident(o->dtype, red), scatter_combine(fl, red), T, vmul,
	    scatter_combine(fl, red));
	out(c, "\t\ttook[sg] = (omp_get_wtime() - t0) / (double)(jb - ja > 0 ? jb - ja : 1);\n\t}\n");
	if (adapt)
		out(c, "\tif (nseg == 2)\n\t\t__atomic_store_n(&pick, took[1] < took[0] ? 2 : 1, __ATOMIC_RELAXED);\n");
	out(c, "\t(void)took;\n");
	/* the targets no edge came to: self; mean divides the others by their count */
	out(c, "\t#pragma omp parallel for num_threads(tall) if (tall > 1)\n"
	       "\tfor (int64_t k = 0; k < X; k++)\n\t\tif (!cnt[k])\n"
	       "\t\t\tfor (int64_t q = 0; q < C; q++)\n\t\t\t\tdst[k * C + q] = %s;\n", selfq);
	if (mean)
		out(c, "\t\telse\n\t\t\tfor (int64_t q = 0; q < C; q++)\n\t\t\t\tdst[k * C + q] = %s;\n",
		    fl ? arena_printf(c->ir->arena, "dst[k * C + q] / (%s)(cnt[k] + %d)", T, self_in)
		       : arena_printf(c->ir->arena, "(%s)coil_fdiv((int64_t)dst[k * C + q], cnt[k] + %d)", T, self_in));
	out(c, "\tfree(cnt);\n");
}

/* coil.gather_scatter: index_add / index_reduce whose rows are gathered as they
 * are read (x[src[j]], times weight[j]): scatter_rows over the edges, no
 * [edges, features] messages in memory.  Both indices are checked first. */
static void gather_scatter(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *self = argn(c, 0), *x = argn(c, 1), *si = argn(c, 2), *di = argn(c, 3), *o = &c->ir->nodes[outv];
	const char *T = emit_ctype(o->dtype);
	out(c, "\tconst int64_t ni = %s, X = %s, NX = %s, all = %s;\n", dimc(c, &di->shape[0]), dimc(c, &self->shape[0]),
	    dimc(c, &x->shape[0]), prod(c, self, 0, self->rank));
	out(c, "\tconst %s *restrict idx = %s;\n\tconst %s *restrict sidx = %s;\n\tconst %s *restrict src = %s;\n"
	       "\t%s *restrict dst = %s;\n", emit_ctype(di->dtype), arg(c, 3), emit_ctype(si->dtype), arg(c, 2), T, arg(c, 1),
	    T, buf(c, outv));
	if (has(c, 4))
		out(c, "\tconst %s *restrict wt = %s;\n", T, arg(c, 4));
	index_check(c, outv, "ni", "X", "index %lld out of range for a dim of size %lld");
	int code = emit_err_code(c->errs, c->ir, o->gnode, "source index %lld out of range for %lld rows");
	emit_range_check(c, "sidx", "ni", "NX", code);
	scatter_rows(c, outv, c->n->args[5].s, (int)c->n->args[6].i, 1, "src + (int64_t)sidx[j] * C",
		     has(c, 4) ? "wt[j]" : NULL, "src + (int64_t)sidx[jp] * C", 0);
}

/* scatter_add / scatter_reduce.two.  out = self, then for each column (the
 * index positions sharing their coordinates off dim, whose targets no other
 * column touches) the rows in order: one thread per column, no atomics, the
 * same bits whatever the thread count.  Indices are checked first. */
static void scatter(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x0 = argn(c, 0), *ix = argn(c, 2), *sr = argn(c, 3), *o = &c->ir->nodes[outv];
	const int ia = c->n->op == OP_INDEX_ADD || c->n->op == OP_INDEX_REDUCE; /* index 1-d along dim; positions over source */
	const ir_node *walk = ia ? sr : ix;
	const int R = x0->rank, d = (int)(c->n->args[1].i < 0 ? c->n->args[1].i + R : c->n->args[1].i);
	const char *red = c->n->op == OP_SCATTER_REDUCE || c->n->op == OP_INDEX_REDUCE ? c->n->args[4].s : "sum";
	const int self_in = (c->n->op != OP_SCATTER_REDUCE && c->n->op != OP_INDEX_REDUCE) || c->n->args[5].i;
	const int mean = !strcmp(red, "mean");
	const char *T = emit_ctype(o->dtype);
	const coil_arg *al = &c->n->args[4];
	const double alpha = c->n->op == OP_INDEX_ADD && al->kind == ARG_SCALAR ? (al->is_int ? (double)al->i : al->f) : 1;
	out(c, "\tconst int64_t n = %s, ni = %s, X = %s, all = %s;\n", prod(c, walk, 0, R), prod(c, ix, 0, ix->rank),
	    dimc(c, &x0->shape[d]), prod(c, x0, 0, R));
	out(c, "\tconst %s *restrict idx = %s;\n\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n",
	    emit_ctype(ix->dtype), arg(c, 2), T, arg(c, 3), T, buf(c, outv));
	index_check(c, outv, "ni", "X", "index %lld out of range for a dim of size %lld");
	/* dim 0 with every other dim the same in index (or source), src and self: rows of
	 * C contiguous columns (GNN messages [edges, features]): tiles of 16 columns, each
	 * task streaming all rows through its tile, its targets those columns alone */
	int fast = d == 0;
	for (int i = 1; fast && i < R; i++)
		fast = dim_eq(&walk->shape[i], &x0->shape[i]) && dim_eq(&sr->shape[i], &x0->shape[i]);
	if (fast && ia) {
		/* the messages streamed in order: one task or nt, measured
		 * (scatter_rows' adapt; the gathered form, whose rows come from x
		 * at random, always gains from tasks) */
		scatter_rows(c, outv, red, self_in, alpha, "src + j * C", NULL, NULL, 1);
		return;
	}
	self_init(c, T);
	if (fast) {
		const char *at = ia ? "idx[j]" : "idx[j * C + q]";
		const char *vmul = alpha != 1 ? arena_printf(c->ir->arena, "(%s)%.17g * ", T, alpha) : "";
		out(c, "\tconst int64_t C = %s, m = %s, ntile = (C + 15) / 16, work = n;\n\t(void)work;\n",
		    prod(c, x0, 1, R), dimc(c, &walk->shape[0]));
		scatter_open(c, outv, mean, "int32_t", 16);
		out(c, "\t\t#pragma omp for schedule(static)\n\t\tfor (int64_t tl = 0; tl < ntile; tl++) {\n"
		       "\t\t\tconst int64_t c0 = tl * 16, c1 = C - c0 < 16 ? C : c0 + 16;\n");
		if (!self_in)
			out(c, "\t\t\tfor (int64_t j = 0; j < m; j++)\n\t\t\t\tfor (int64_t q = c0; q < c1; q++)\n"
			       "\t\t\t\t\tdst[%s * C + q] = %s;\n", at, scatter_ident(o->dtype, red));
		out(c, "\t\t\tfor (int64_t j = 0; j < m; j++)\n\t\t\t\tfor (int64_t q = c0; q < c1; q++) {\n"
		       "\t\t\t\t\tconst int64_t t = %s * C + q;\n"
		       "\t\t\t\t\tconst %s v = %ssrc[j * C + q], a = dst[t];\n", at, T, vmul);
		const int fl = dtype_is_float(o->dtype);
		out(c, "\t\t\t\t\tdst[t] = %s;\n", scatter_combine(fl, red));
		if (mean)
			out(c, "\t\t\t\t\tcnt[%s * 16 + (q - c0)]++;\n", at);
		out(c, "\t\t\t\t}\n");
		if (mean)
			out(c, "\t\t\tfor (int64_t j = 0; j < m; j++)\n\t\t\t\tfor (int64_t q = c0; q < c1; q++) {\n"
			       "\t\t\t\t\tint32_t *k = &cnt[%s * 16 + (q - c0)];\n"
			       "\t\t\t\t\tif (*k) {\n\t\t\t\t\t\tconst int64_t t = %s * C + q;\n"
			       "\t\t\t\t\t\tdst[t] = %s;\n\t\t\t\t\t\t*k = 0;\n\t\t\t\t\t}\n\t\t\t\t}\n",
			    at, at, fl ? arena_printf(c->ir->arena, "dst[t] / (%s)(*k + %d)", T, self_in)
				       : arena_printf(c->ir->arena, "(%s)coil_fdiv((int64_t)dst[t], *k + %d)", T, self_in));
		out(c, "\t\t}\n\t}\n");
		if (mean)
			out(c, "\tfree(cnts);\n");
		return;
	}
	/* shapes and strides of index, src and self (= out) */
	const ir_node *sh[3] = {ix, sr, x0};
	static const char *const nm[3] = {"ist", "sst", "ost"};
	out(c, "\tconst int64_t ish[%d] = {", R);
	for (int i = 0; i < R; i++)
		out(c, "%s%s", i ? ", " : "", dimc(c, &walk->shape[i]));
	out(c, "};\n");
	for (int k = 0; k < 3; k++) {
		out(c, "\tint64_t %s[%d];\n\t%s[%d] = 1;\n", nm[k], R, nm[k], R - 1);
		for (int i = R - 2; i >= 0; i--)
			out(c, "\t%s[%d] = %s[%d] * %s;\n", nm[k], i, nm[k], i + 1, dimc(c, &sh[k]->shape[i + 1]));
	}
	if (ia) /* the 1-d index: position j along dim reads idx[j], whatever the column */
		for (int i = 0; i < R; i++)
			out(c, "\tist[%d] = %d;\n", i, i == d);
	out(c, "\tconst int64_t m = ish[%d], cols = m ? n / m : 0, work = n;\n\t(void)work;\n", d);
	scatter_open(c, outv, mean, "int64_t", 1);
	out(c, "\t\t#pragma omp for schedule(static)\n\t\tfor (int64_t col = 0; col < cols; col++) {\n");
	out(c, "\t\t\tint64_t rest = col, io = 0, so = 0, oo = 0;\n");
	out(c, "\t\t\tfor (int i = %d; i >= 0; i--) {\n\t\t\t\tif (i == %d)\n\t\t\t\t\tcontinue;\n"
	       "\t\t\t\tconst int64_t k = rest %% ish[i];\n\t\t\t\trest /= ish[i];\n"
	       "\t\t\t\tio += k * ist[i], so += k * sst[i], oo += k * ost[i];\n\t\t\t}\n", R - 1, d);
	out(c, "#define COIL_T_(j) (oo + idx[io + (j) * ist[%d]] * ost[%d])\n", d, d);
	if (!self_in)
		out(c, "\t\t\tfor (int64_t j = 0; j < m; j++)\n\t\t\t\tdst[COIL_T_(j)] = %s;\n",
		    scatter_ident(o->dtype, red));
	out(c, "\t\t\tfor (int64_t j = 0; j < m; j++) {\n\t\t\t\tconst int64_t t = COIL_T_(j);\n"
	       "\t\t\t\tconst %s v = %ssrc[so + j * sst[%d]], a = dst[t];\n", T,
	    alpha != 1 ? arena_printf(c->ir->arena, "(%s)%.17g * ", T, alpha) : "", d);
	const int fl = dtype_is_float(o->dtype);
	out(c, "\t\t\t\tdst[t] = %s;\n", scatter_combine(fl, red));
	if (mean)
		out(c, "\t\t\t\tcnt[idx[io + j * ist[%d]]]++;\n", d);
	out(c, "\t\t\t}\n");
	if (mean) /* each target once: its count cleared as it is divided */
		out(c, "\t\t\tfor (int64_t j = 0; j < m; j++) {\n\t\t\t\tconst int64_t k = idx[io + j * ist[%d]];\n"
		       "\t\t\t\tif (cnt[k]) {\n\t\t\t\t\tconst int64_t q = cnt[k] + %d, t = COIL_T_(j);\n"
		       "\t\t\t\t\tdst[t] = %s;\n\t\t\t\t\tcnt[k] = 0;\n\t\t\t\t}\n\t\t\t}\n",
		    d, self_in, fl ? arena_printf(c->ir->arena, "dst[t] / (%s)q", T)
				   : arena_printf(c->ir->arena, "(%s)coil_fdiv((int64_t)dst[t], q)", T));
	out(c, "#undef COIL_T_\n\t\t}\n\t}\n");
	if (mean)
		out(c, "\tfree(cnts);\n");
}

/* index.Tensor: each result element reads self at its own coordinates in the
 * dims left whole and at the index tensors' values (read broadcast over B,
 * negative ones counting from the end) in the indexed dims.  Every index is
 * checked against its dim before anything is written. */
static void index_t(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const coil_arg *ia = &c->n->args[1];
	index_plan p;
	if (index_plan_of(c->ir->g, (coil_node *)c->n, &p, c->err)) {
		*c->bad = 1;
		return;
	}
	const int R = x->rank, Ro = o->rank;
	int code = emit_err_code(c->errs, c->ir, o->gnode, "index %lld out of range for a dim of size %lld");
	out(c, "\tconst int64_t n = %s, work = n;\n\t(void)work;\n", prod(c, o, 0, Ro));
	out(c, "\tconst int64_t osh[%d] = {", Ro ? Ro : 1);
	for (int i = 0; i < Ro; i++)
		out(c, "%s%s", i ? ", " : "", dimc(c, &o->shape[i]));
	out(c, "%s};\n\t(void)osh;\n", Ro ? "" : "1");
	for (int d = 0; d < R; d++) {
		if (p.keep[d] >= 0)
			continue;
		const ir_node *iv = &c->ir->nodes[c->ir->val_node[ia->v[d]]];
		const char *X = dimc(c, &x->shape[d]);
		out(c, "\tconst %s *restrict i%d = %s;\n", emit_ctype(iv->dtype), d, buf(c, c->ir->val_node[ia->v[d]]));
		out(c, "\tfor (int64_t e = 0; e < %s; e++)\n\t\tif ((int64_t)i%d[e] < -%s || (int64_t)i%d[e] >= %s) {\n"
		       "\t\t\tcoil_raise(x->st, %d, (long long)i%d[e], (long long)%s);\n\t\t\treturn;\n\t\t}\n",
		    prod(c, iv, 0, iv->rank), d, X, d, X, code, d, X);
		/* its strides over B: index dims aligned to B's last, 0 where size 1 */
		out(c, "\tint64_t st%d[%d] = {0};\n", d, p.rb ? p.rb : 1);
		for (int i = iv->rank - 1, s = 0; i >= 0; i--) {
			int64_t one;
			const int bi = p.rb - (iv->rank - i);
			if (!(dim_is_const(&iv->shape[i], &one) && one == 1))
				out(c, "\tst%d[%d] = %s;\n", d, bi, s ? arena_printf(c->ir->arena, "%s", prod(c, iv, i + 1, iv->rank)) : "1");
			s = 1;
		}
	}
	out(c, PAR(1));
	out(c, "\tfor (int64_t e = 0; e < n; e++) {\n\t\tint64_t oc[%d], rest = e;\n", Ro ? Ro : 1);
	out(c, "\t\tfor (int i = %d; i >= 0; i--) {\n\t\t\toc[i] = rest %% osh[i];\n\t\t\trest /= osh[i];\n\t\t}\n"
	       "\t\t(void)oc;\n\t\tint64_t off = 0;\n", Ro - 1);
	for (int d = R - 1; d >= 0; d--) {
		const char *st = d == R - 1 ? "1" : prod(c, x, d + 1, R);
		if (p.keep[d] >= 0) {
			out(c, "\t\toff += oc[%d] * %s;\n", p.keep[d], st);
			continue;
		}
		out(c, "\t\t{\n\t\t\tint64_t io = 0;\n");
		for (int i = 0; i < p.rb; i++)
			out(c, "\t\t\tio += oc[%d] * st%d[%d];\n", p.bpos + i, d, i);
		out(c, "\t\t\tconst int64_t v = (int64_t)i%d[io];\n\t\t\toff += (v < 0 ? v + %s : v) * %s;\n\t\t}\n", d,
		    dimc(c, &x->shape[d]), st);
	}
	out(c, "\t\t%s[e] = %s[off];\n\t}\n", buf(c, outv), arg(c, 0));
}

/* dst's rows (a * m + e) copied from src's rows a * X + idx[e], over the
 * outer, m, inner, X and work the caller declared, idx its index; streaming
 * stores where the result is large.  Rows of at most 1 KB (GNN messages,
 * x[src] of 64 floats; embeddings) are random reads the hardware prefetcher
 * cannot see coming: the row PF slices ahead is prefetched (1e6 rows of 64
 * floats out of 1e5 on a Zen 4: 35.6 -> 24.9 ms at one thread, 17.0 -> 11.5
 * at two). */
static void gather_rows(xctx *c, const char *dst, const char *src, coil_dtype t)
{
	const char *T = emit_ctype(t);
	out(c, "\tconst int nts_ = work * (int64_t)sizeof(%s) >= COIL_NT_BYTES;\n", T);
	out(c, "\tconst int64_t rb = inner * (int64_t)sizeof(%s), pf = rb <= 1024 ? 16 : 0;\n", T);
	out(c, PAR(2));
	out(c, "\tfor (int64_t a = 0; a < outer; a++)\n\t\tfor (int64_t e = 0; e < m; e++) {\n");
	out(c, "\t\t\tif (pf && e + pf < m)\n\t\t\t\tfor (int64_t b = 0; b < rb; b += 64)\n"
	       "\t\t\t\t\t__builtin_prefetch((const char *)(%s + (a * X + (int64_t)idx[e + pf]) * inner) + b);\n", src);
	out(c, "\t\t\tcoil_copy_nt(%s + (a * m + e) * inner, %s + (a * X + (int64_t)idx[e]) * inner, (size_t)rb, nts_);\n"
	       "\t\t}\n\tif (nts_)\n\t\tcoil_nt_fence();\n", dst, src);
}

/* Slices of self along dim gathered by index (index_select); an index out of
 * range fails the run before anything is written, naming the first. */
static void index_select(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x0 = argn(c, 0), *ix = argn(c, 2), *o = &c->ir->nodes[outv];
	const int d = (int)(c->n->args[1].i < 0 ? c->n->args[1].i + x0->rank : c->n->args[1].i);
	out(c, "\tconst int64_t outer = %s, inner = %s, X = %s, m = %s, work = outer * m * inner;\n", prod(c, x0, 0, d),
	    prod(c, x0, d + 1, x0->rank), dimc(c, &x0->shape[d]), prod(c, ix, 0, ix->rank));
	out(c, "\tconst %s *restrict idx = %s;\n", emit_ctype(ix->dtype), arg(c, 2));
	index_check(c, outv, "m", "X", "index %lld out of range for a dim of size %lld");
	gather_rows(c, buf(c, outv), arg(c, 0), o->dtype);
}

/* Rows of the weight gathered by index (gather_rows, one outer slice); an
 * index out of range fails the run (checked before anything is written, so
 * the first bad index is named). */
static void embedding(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *w = argn(c, 0), *ix = argn(c, 1), *o = &c->ir->nodes[outv];
	out(c, "\tconst int64_t outer = 1, m = %s, inner = %s, X = %s, work = m * inner;\n", prod(c, ix, 0, ix->rank),
	    dimc(c, &w->shape[1]), dimc(c, &w->shape[0]));
	out(c, "\tconst %s *restrict idx = %s;\n", emit_ctype(ix->dtype), arg(c, 1));
	index_check(c, outv, "m", "X", "index %lld out of range for %lld embeddings");
	gather_rows(c, buf(c, outv), arg(c, 0), o->dtype);
}

static void pad(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *xn = argn(c, 0), *o = &c->ir->nodes[outv];
	const coil_arg *p = &c->n->args[1];
	const int R = xn->rank;
	const char *lo[COIL_MAX_RANK]; /* the low pads as C (size expressions too) */
	int none[COIL_MAX_RANK];
	for (int i = 0; i < R; i++)
		lo[i] = "0", none[i] = 1;
	for (int k = 0; k < p->n / 2; k++) {
		lo[R - 1 - k] = dimc(c, &p->dims[2 * k]);
		none[R - 1 - k] = dim_eq_const(&p->dims[2 * k], 0);
	}
	double v = c->n->args[2].f;
	const char *t = emit_ctype(o->dtype);
	if (o->dtype == COIL_BOOL)
		v = v != 0;
	uint16_t bits = 0; /* bf16, f16: the value's bits */
	if (dtype_is_half(o->dtype))
		dtype_store(o->dtype, &bits, 0, v);
	out(c, "\tfor (int64_t e = 0; e < %s; e++)\n\t\t%s[e] = (%s)%s;\n", prod(c, o, 0, R), buf(c, outv), t,
	    dtype_is_half(o->dtype) ? arena_printf(c->ir->arena, "0x%04x", bits)
	    : isnan(v) ? "NAN" : isinf(v) ? (v > 0 ? "INFINITY" : "-INFINITY")
				       : arena_printf(c->ir->arena, "%.17g", v));
	if (R == 0) {
		out(c, "\t%s[0] = %s[0];\n", buf(c, outv), arg(c, 0));
		return;
	}
	/* dp: the innermost padded dim; the dims after it are whole, one
	 * contiguous block of inner elements per index of dp.  The input row by
	 * row over the dims before dp: where it lands, then the part of dp inside
	 * the result, one memcpy (a negative pad crops) */
	int dp = R - 1;
	while (dp > 0 && none[dp] && dim_eq(&xn->shape[dp], &o->shape[dp]))
		dp--;
	out(c, "\tconst int64_t rows = %s, L = %s, OL = %s, inner = %s, work = rows * L * inner;\n\t(void)work;\n",
	    prod(c, xn, 0, dp), dimc(c, &xn->shape[dp]), dimc(c, &o->shape[dp]), prod(c, xn, dp + 1, R));
	out(c, "\tconst int64_t p0 = %s, c0 = p0 < 0 ? -p0 : 0, c1e = OL - p0, c1 = L < c1e ? L : c1e;\n", lo[dp]);
	out(c, "\tif (c1 <= c0 || inner == 0)\n\t\treturn;\n");
	out(c, PAR(1));
	out(c, "\tfor (int64_t row = 0; row < rows; row++) {\n\t\tint64_t rem = row, orow = 0, st = OL * inner, ok = 1;\n"
	       "\t\t(void)rem;\n");
	for (int i = dp - 1; i >= 0; i--)
		out(c, "\t\t{\n\t\t\tconst int64_t j = rem %% %s + %s;\n\t\t\trem /= %s;\n\t\t\tok &= j >= 0 && j < %s;\n"
		       "\t\t\torow += j * st;\n\t\t\tst *= %s;\n\t\t}\n",
		    dimc(c, &xn->shape[i]), lo[i], dimc(c, &xn->shape[i]), dimc(c, &o->shape[i]),
		    dimc(c, &o->shape[i]));
	out(c, "\t\tif (ok)\n\t\t\tmemcpy(%s + orow + (c0 + p0) * inner, %s + (row * L + c0) * inner, "
	       "(size_t)((c1 - c0) * inner) * sizeof(%s));\n\t}\n",
	    buf(c, outv), arg(c, 0), t);
}

/* roll: element i of each rolled dim moves to (i + shift) mod size.  Without
 * dims the flattened tensor rolls.  Rows (all dims but the last) move as a
 * whole; the last dim rotates with two copies. */
static void roll(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *xn = argn(c, 0);
	const coil_arg *sh = &c->n->args[1], *dm = &c->n->args[2];
	const char *t = emit_ctype(xn->dtype), *src = arg(c, 0), *dst = buf(c, outv);
	int r = xn->rank;
	if (dm->n == 0 || r == 0) {
		out(c, "\tconst int64_t n = %s;\n", prod(c, xn, 0, r));
		out(c, "\tconst int64_t sh = n ? ((%lldLL %% n) + n) %% n : 0;\n", (long long)(sh->n ? sh->ints[0] : 0));
		out(c, "\tmemcpy(%s + sh, %s, (size_t)(n - sh) * sizeof(%s));\n", dst, src, t);
		out(c, "\tmemcpy(%s, %s + (n - sh), (size_t)sh * sizeof(%s));\n", dst, src, t);
		return;
	}
	long long shift[COIL_MAX_RANK] = {0};
	for (int k = 0; k < dm->n && k < sh->n; k++) {
		int d = (int)(dm->ints[k] < 0 ? dm->ints[k] + r : dm->ints[k]);
		shift[d] += sh->ints[k];
	}
	out(c, "\tconst int64_t rows = %s, L = %s, work = rows * L;\n", prod(c, xn, 0, r - 1), dimc(c, &xn->shape[r - 1]));
	out(c, "\tif (rows * L == 0)\n\t\treturn;\n");
	out(c, "\tconst int64_t sl = ((%lldLL %% L) + L) %% L;\n", shift[r - 1]);
	out(c, PAR(1));
	out(c, "\tfor (int64_t row = 0; row < rows; row++) {\n\t\tint64_t rem = row, orow = 0, st = 1;\n\t\t(void)rem;\n");
	for (int i = r - 2; i >= 0; i--) {
		char *D = dimc(c, &xn->shape[i]);
		out(c, "\t\t{\n\t\t\tconst int64_t j = rem %% %s;\n\t\t\trem /= %s;\n", D, D);
		if (shift[i])
			out(c, "\t\t\torow += ((j + %lldLL %% %s) %% %s + %s) %% %s * st;\n", shift[i], D, D, D, D);
		else
			out(c, "\t\t\torow += j * st;\n");
		out(c, "\t\t\tst *= %s;\n\t\t}\n", D);
	}
	out(c, "\t\tconst %s *restrict xr = %s + row * L;\n\t\t%s *restrict yr = %s + orow * L;\n", t, src, t, dst);
	out(c, "\t\tmemcpy(yr + sl, xr, (size_t)(L - sl) * sizeof(%s));\n", t);
	out(c, "\t\tmemcpy(yr, xr + (L - sl), (size_t)sl * sizeof(%s));\n\t}\n", t);
}

/* [outer, L, inner] around dim d of x, as C declarations. */
static void around(xctx *c, const ir_node *x, int d)
{
	out(c, "\tconst int64_t outer = %s, L = %s, inner = %s;\n", prod(c, x, 0, d), x->rank ? dimc(c, &x->shape[d]) : "1",
	    prod(c, x, d + 1, x->rank));
}

static int wrapd(const ir_node *x, int64_t d) { return (int)(d < 0 ? d + (x->rank ? x->rank : 1) : d); }

/* _embedding_bag: parallel over bags, rows reduced in index order in the
 * weight's type; indices and offsets checked before anything is written.
 * offset2bag, bag_size and max_indices as ATen's forward gives them. */
static void embedding_bag(xctx *c)
{
	int outv = result(c, 0), o2b = result(c, 1), bsz = result(c, 2), mxi = result(c, 3);
	const int any = outv >= 0 ? outv : o2b >= 0 ? o2b : bsz >= 0 ? bsz : mxi;
	if (any < 0)
		return;
	ir_node *w = argn(c, 0), *ix = argn(c, 1), *of = argn(c, 2);
	const coil_value *o = node_out(c->ir->g, c->n, 0);
	const int64_t mode = c->n->args[4].i, pad = c->n->args[8].i;
	const char *T = emit_ctype(w->dtype), *I = emit_ctype(ix->dtype);
	out(c, "\tconst int64_t m = %s, V = %s, D = %s, B = %s, nof = %s, work = m * D;\n\t(void)work;\n",
	    dimc(c, &ix->shape[0]), dimc(c, &w->shape[0]), dimc(c, &w->shape[1]), dimc(c, &o->shape[0]),
	    dimc(c, &of->shape[0]));
	out(c, "\tconst %s *restrict idx = %s, *restrict off = %s;\n\tconst %s *restrict wt = %s;\n", I, arg(c, 1),
	    arg(c, 2), T, arg(c, 0));
	out(c, "\t%s y0[1];\n\t%s *restrict yall = %s;\n\t(void)y0;\n", T, T, outv >= 0 ? buf(c, outv) : "NULL");
	if (has(c, 6))
		out(c, "\tconst %s *restrict psw = %s;\n", T, arg(c, 6));
	index_check(c, any, "m", "V", "index %lld out of range for %lld embeddings");
	int code = emit_err_code(c->errs, c->ir, c->ir->nodes[any].gnode, "offsets[%lld] = %lld: offsets must start at 0 "
									 "and not decrease up to the number of indices");
	out(c, "\tfor (int64_t b = 0; b < nof; b++)\n\t\tif (off[b] < (b ? off[b - 1] : 0) || off[b] > m || (b == 0 && off[0] != 0)) {\n"
	       "\t\t\tcoil_raise(x->st, %d, (long long)b, (long long)off[b]);\n\t\t\treturn;\n\t\t}\n", code);
	if (bsz >= 0)
		out(c, "\tmemset(%s, 0, (size_t)nof * sizeof(%s));\n", buf(c, bsz), I);
	if (mxi >= 0 && mode != 2)
		out(c, "\tmemset(%s, 0, (size_t)nof * sizeof(%s));\n", buf(c, mxi), I);
	if (outv < 0 && mxi >= 0 && mode == 2) { /* max_indices read, the bags not: rows of them in a scratch */
		int oom = emit_err_code(c->errs, c->ir, c->ir->nodes[any].gnode, "out of memory (%lld, %lld)");
		out(c, "\tyall = malloc((size_t)(B * D + 1) * sizeof *yall);\n\tif (!yall) {\n"
		       "\t\tcoil_raise(x->st, %d, (long long)B, (long long)D);\n\t\treturn;\n\t}\n", oom);
	}
	out(c, PAR(1));
	out(c, "\tfor (int64_t b = 0; b < B; b++) {\n"
	       "\t\tconst int64_t lo = (int64_t)off[b], hi = b + 1 < nof ? (int64_t)off[b + 1] : m;\n"
	       "\t\tint64_t cnt = 0;\n");
	if (outv >= 0 || mxi >= 0) {
		out(c, "\t\t%s *restrict y = yall ? yall + b * D : y0;\n\t\tconst int64_t Dy = yall ? D : 0;\n", T);
		if (mode == 2 && mxi >= 0)
			out(c, "\t\t%s *restrict mi = %s + b * D;\n", I, buf(c, mxi));
		out(c, "\t\tfor (int64_t j = 0; j < Dy; j++)\n\t\t\ty[j] = 0;\n");
	}
	/* the rows are random: the one 8 indices ahead is prefetched */
	out(c, "\t\tfor (int64_t e = lo; e < hi; e++) {\n\t\t\tconst int64_t k = (int64_t)idx[e];\n"
	       "\t\t\tif (e + 8 < m)\n\t\t\t\tfor (int64_t q = 0; q < D; q += 64 / (int64_t)sizeof(%s))\n"
	       "\t\t\t\t\t__builtin_prefetch(wt + (int64_t)idx[e + 8] * D + q);\n"
	       "\t\t\tif (k == %lldLL)\n\t\t\t\tcontinue;\n", T, (long long)pad);
	if (outv >= 0 || mxi >= 0) {
		out(c, "\t\t\tconst %s *restrict r = wt + k * D;\n", T);
		if (mode == 2)
			out(c, "\t\t\tfor (int64_t j = 0; j < Dy; j++)\n\t\t\t\tif (!cnt || r[j] > y[j] || r[j] != r[j]) {\n"
			       "\t\t\t\t\ty[j] = r[j];\n%s\t\t\t\t}\n", mxi >= 0 ? "\t\t\t\t\tmi[j] = k;\n" : "");
		else
			out(c, "\t\t\t#pragma omp simd\n\t\t\tfor (int64_t j = 0; j < Dy; j++)\n\t\t\t\ty[j] += r[j]%s;\n",
			    has(c, 6) ? " * psw[e]" : ""); /* vectors: gcc -O2 would not, unsure y and r are apart */
	}
	out(c, "\t\t\tcnt++;\n\t\t}\n");
	if (o2b >= 0 && mode)
		out(c, "\t\tfor (int64_t e = lo; e < hi; e++)\n\t\t\t%s[e] = b;\n", buf(c, o2b));
	if (mode == 1 && outv >= 0)
		out(c, "\t\tif (cnt)\n\t\t\tfor (int64_t j = 0; j < Dy; j++)\n\t\t\t\ty[j] /= (%s)cnt;\n", T);
	if (bsz >= 0 && mode)
		out(c, "\t\t%s[b] = cnt;\n", buf(c, bsz));
	if (mxi >= 0 && mode == 1)
		out(c, "\t\t%s[b] = cnt;\n", buf(c, mxi));
	if (mxi >= 0 && mode == 2)
		out(c, "\t\tif (!cnt)\n\t\t\tfor (int64_t j = 0; j < D; j++)\n\t\t\t\tmi[j] = 0;\n");
	out(c, "\t\t(void)cnt;\n\t}\n");
	if (outv < 0 && mxi >= 0 && mode == 2)
		out(c, "\tfree(yall);\n");
}

/* coil.sparse_mm_reduce: rows in parallel (dynamic chunks: power-law rows),
 * each reducing its entries' scaled rows of other in order (the same bits at
 * any thread count); crow and col checked before anything is written. */
static void spmm(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *cr = argn(c, 0), *co = argn(c, 1), *d = argn(c, 3), *o = &c->ir->nodes[outv];
	const char *red = c->n->args[4].s, *T = emit_ctype(o->dtype), *I = emit_ctype(cr->dtype);
	out(c, "\tconst int64_t R = %s, F = %s, X = %s, nnz = %s, work = nnz * F;\n\t(void)work;\n", dimc(c, &o->shape[0]),
	    dimc(c, &o->shape[1]), dimc(c, &d->shape[0]), dimc(c, &co->shape[0]));
	out(c, "\tconst %s *restrict crow = %s, *restrict idx = %s;\n\tconst %s *restrict other = %s;\n", I, arg(c, 0),
	    arg(c, 1), T, arg(c, 3));
	if (has(c, 2))
		out(c, "\tconst %s *restrict val = %s;\n", T, arg(c, 2));
	int code = emit_err_code(c->errs, c->ir, o->gnode, "crow_indices[%lld] = %lld: must start at 0 and not decrease "
							   "up to the number of entries");
	out(c, "\tfor (int64_t i = 0; i <= R; i++)\n\t\tif (crow[i] < (i ? crow[i - 1] : 0) || crow[i] > nnz || (i == 0 && crow[0] != 0)) {\n"
	       "\t\t\tcoil_raise(x->st, %d, (long long)i, (long long)crow[i]);\n\t\t\treturn;\n\t\t}\n", code);
	index_check(c, outv, "nnz", "X", "col_indices %lld out of range for %lld rows of other");
	const char *comb = !strcmp(red, "amax") ? "a != a || v != v ? a + v : v > a ? v : a"
			   : !strcmp(red, "amin") ? "a != a || v != v ? a + v : v < a ? v : a" : "a + v";
	/* a row: its first entry's scaled row, then the others reduced into it,
	 * in vectors (gcc -O2 kept the per-element "first?" test scalar), the
	 * row of the entry 8 ahead prefetched (they are random rows of other) */
	const char *sv = has(c, 2) ? "val[k]" : "1";
	out(c, "\t#pragma omp parallel for schedule(dynamic, 64) num_threads(nt) if (nt > 1 && work > 32768)\n"
	       "\tfor (int64_t i = 0; i < R; i++) {\n\t\t%s *restrict y = %s + i * F;\n"
	       "\t\tconst int64_t lo = (int64_t)crow[i], hi = (int64_t)crow[i + 1];\n"
	       "\t\tif (hi == lo) {\n\t\t\tfor (int64_t j = 0; j < F; j++)\n\t\t\t\ty[j] = 0;\n\t\t\tcontinue;\n\t\t}\n"
	       "\t\tfor (int64_t k = lo; k < hi; k++) {\n"
	       "\t\t\tif (k + 8 < nnz)\n\t\t\t\tfor (int64_t b = 0; b < F; b += 64 / (int64_t)sizeof(%s))\n"
	       "\t\t\t\t\t__builtin_prefetch(other + (int64_t)idx[k + 8] * F + b);\n"
	       "\t\t\tconst %s *restrict r = other + (int64_t)idx[k] * F;\n\t\t\tconst %s s = %s;\n"
	       "\t\t\tif (k == lo) {\n\t\t\t\t#pragma omp simd\n\t\t\t\tfor (int64_t j = 0; j < F; j++)\n"
	       "\t\t\t\t\ty[j] = s * r[j];\n\t\t\t\tcontinue;\n\t\t\t}\n"
	       "\t\t\t#pragma omp simd\n\t\t\tfor (int64_t j = 0; j < F; j++) {\n"
	       "\t\t\t\tconst %s v = s * r[j], a = y[j];\n\t\t\t\ty[j] = %s;\n\t\t\t}\n\t\t}\n",
	    T, buf(c, outv), T, T, T, sv, T, comb);
	if (!strcmp(red, "mean"))
		out(c, "\t\tif (hi > lo)\n\t\t\tfor (int64_t j = 0; j < F; j++)\n\t\t\t\ty[j] /= (%s)(hi - lo);\n", T);
	out(c, "\t}\n");
}

/* coil.lstm / gru / rnn_tanh / rnn_relu: one coil_rnn call (codegen/rnn.h) with the params'
 * pointers in order; the final states go to scratch when unused; lengths,
 * when given, are checked to lie in [1, T] first. */
static void rnn(xctx *c)
{
	const int lstm = c->n->op == OP_LSTM, nres = lstm ? 3 : 2, kind = op_rnn_kind(c->n->op);
	int res[3] = {-1, -1, -1}, any = -1;
	for (int k = 0; k < nres; k++)
		if ((res[k] = result(c, k)) >= 0 && any < 0)
			any = res[k];
	if (any < 0)
		return;
	ir_node *x = argn(c, 0);
	const coil_arg *ps = &c->n->args[2];
	const int L = (int)c->n->args[4].i, D = c->n->args[5].i ? 2 : 1, bf = (int)c->n->args[6].i;
	const int nb = c->n->args[3].i ? 4 : 2, proj = lstm && ps->n == L * D * (nb + 1);
	const coil_value *h0v = lstm ? &c->ir->g->vals[c->n->args[1].v[0]] : node_in(c->ir->g, c->n, 1);
	const coil_value *wih = &c->ir->g->vals[ps->v[0]];
	out(c, "\tconst int64_t T = %s, B = %s, I = %s, H = %s / %d, HO = %s, P = %s, DH = %d * HO;\n",
	    dimc(c, &x->shape[bf ? 1 : 0]), dimc(c, &x->shape[bf ? 0 : 1]), dimc(c, &x->shape[2]), dimc(c, &wih->shape[0]),
	    op_rnn_gates(c->n->op), dimc(c, &h0v->shape[2]), proj ? "HO" : "0", D);
	out(c, "\tconst float *const w[%d] = {", ps->n);
	for (int k = 0; k < ps->n; k++)
		out(c, "%s%s", k ? ", " : "", buf(c, c->ir->val_node[ps->v[k]]));
	out(c, "};\n");
	const char *len = "NULL";
	if (has(c, 7)) {
		len = arg(c, 7);
		int bad = emit_err_code(c->errs, c->ir, c->ir->nodes[any].gnode,
					"lengths[%lld] is %lld, outside [1, the sequence's steps]");
		out(c, "\tfor (int64_t b = 0; b < B; b++)\n\t\tif (%s[b] < 1 || %s[b] > T) {\n"
		       "\t\t\tcoil_raise(x->st, %d, (long long)b, (long long)%s[b]);\n\t\t\treturn;\n\t\t}\n",
		    len, len, bad, len);
	}
	const char *h0 = lstm ? buf(c, c->ir->val_node[c->n->args[1].v[0]]) : arg(c, 1);
	const char *c0 = lstm ? buf(c, c->ir->val_node[c->n->args[1].v[1]]) : "NULL";
	/* results the graph does not read: scratch of their size */
	out(c, "\tfloat *scr = NULL;\n\tconst int64_t ns = (int64_t)%d * B * H, big = ns > T * B * DH ? ns : T * B * DH;\n",
	    L * D);
	if (res[0] < 0 || res[1] < 0 || (lstm && res[2] < 0))
		out(c, "\tscr = malloc((size_t)(%d * big + 1) * sizeof *scr);\n", nres);
	int oom = emit_err_code(c->errs, c->ir, c->ir->nodes[any].gnode, "out of memory (%lld steps x %lld rows)");
	const char *o0 = res[0] >= 0 ? buf(c, res[0]) : "scr", *o1 = res[1] >= 0 ? buf(c, res[1]) : "scr + 1 * big";
	const char *o2 = !lstm ? "NULL" : res[2] >= 0 ? buf(c, res[2]) : "scr + 2 * big";
	out(c, "\tif (((%d) && !scr) || coil_rnn(%d, %s, T, B, I, %d, %s, %s, w, %d, %d, %d, H, P, %s, %s, %s, %s)) {\n"
	       "\t\tfree(scr);\n\t\tcoil_raise(x->st, %d, (long long)T, (long long)B);\n\t\treturn;\n\t}\n\tfree(scr);\n",
	    res[0] < 0 || res[1] < 0 || (lstm && res[2] < 0), kind, arg(c, 0), bf, h0, c0, nb == 4, L, D, len, o0, o1,
	    o2, oom);
}

/* tril / triu over the last two dims. */
static void tri(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0);
	const int r = x->rank;
	out(c, "\tconst int64_t mats = %s, R = %s, C = %s, work = mats * R * C;\n", prod(c, x, 0, r - 2),
	    dimc(c, &x->shape[r - 2]), dimc(c, &x->shape[r - 1]));
	out(c, PAR(2));
	out(c, "\tfor (int64_t m = 0; m < mats; m++)\n\t\tfor (int64_t i = 0; i < R; i++)\n"
	       "\t\t\tfor (int64_t j = 0; j < C; j++) {\n\t\t\t\tconst int64_t e = (m * R + i) * C + j;\n"
	       "\t\t\t\t%s[e] = j - i %s %lldLL ? %s[e] : 0;\n\t\t\t}\n",
	    buf(c, outv), c->n->op == OP_TRIL ? "<=" : ">=", (long long)c->n->args[1].i, arg(c, 0));
}

/* cumsum: each line along dim summed in order, in double (floats: ATen's CPU
 * accumulator) or int64_t, every partial sum stored. */
/* coil.guard_eq: the run fails unless value is expected; then self, copied. */
static void guard(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *v = argn(c, 1);
	int code = emit_err_code(c->errs, c->ir, c->ir->nodes[outv].gnode,
				 "this run has %lld where the graph was exported for %lld: export it again for this input");
	out(c, "\tif ((long long)%s[0] != %lldLL) {\n\t\tcoil_raise(x->st, %d, (long long)%s[0], %lldLL);\n\t\treturn;\n\t}\n",
	    arg(c, 1), (long long)c->n->args[2].i, code, arg(c, 1), (long long)c->n->args[2].i);
	(void)v;
	out(c, "\tmemcpy(%s, %s, (size_t)(%s) * sizeof(%s));\n", buf(c, outv), arg(c, 0), prod(c, x, 0, x->rank),
	    emit_ctype(x->dtype));
}

/* coil.mb_join (microbatch.c): this chunk's images into their place in the batch */
static void mb_join(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	/* its input as decompose saw it (in the channels-last frame, [c, H, W, C]: the same bytes) */
	const int xv = c->ir->nodes[outv].xsrc[0];
	ir_node *x0 = &c->ir->nodes[xv];
	const char *T = emit_ctype(x0->dtype), *n = prod(c, x0, 0, x0->rank);
	out(c, "\tmemcpy(%s + x->mb * (int64_t)(%s), %s, (size_t)(%s) * sizeof(%s));\n", buf(c, outv), n, buf(c, xv), n, T);
}

static void cumsum(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const char *acc = dtype_is_float(o->dtype) ? "double" : "int64_t", *T = emit_ctype(o->dtype);
	around(c, x, wrapd(x, c->n->args[1].i));
	out(c, "\tconst int64_t work = outer * L * inner;\n\t(void)work;\n");
	out(c, PAR(2));
	out(c, "\tfor (int64_t a = 0; a < outer; a++)\n\t\tfor (int64_t b = 0; b < inner; b++) {\n\t\t\t%s s = 0;\n"
	       "\t\t\tfor (int64_t j = 0; j < L; j++) {\n\t\t\t\tconst int64_t e = (a * L + j) * inner + b;\n"
	       "\t\t\t\ts = (%s)(s + (%s)(%s)%s[e]);\n\t\t\t\t%s[e] = (%s)s;\n\t\t\t}\n\t\t}\n",
	    acc, acc, acc, T, arg(c, 0), buf(c, outv), T);
}

/* prod and prod.dim_int: in double for floats, int64_t (wrapping) for integers. */
static void prod_(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const int fl = dtype_is_float(o->dtype);
	const char *T = emit_ctype(o->dtype);
	if (c->n->op == OP_PROD)
		out(c, "\tconst int64_t outer = 1, L = %s, inner = 1;\n", prod(c, x, 0, x->rank));
	else
		around(c, x, wrapd(x, c->n->args[1].i));
	out(c, "\tconst int64_t work = outer * L * inner;\n\t(void)work;\n");
	out(c, PAR(2));
	out(c, "\tfor (int64_t a = 0; a < outer; a++)\n\t\tfor (int64_t b = 0; b < inner; b++) {\n\t\t\t%s p = 1;\n"
	       "\t\t\tfor (int64_t j = 0; j < L; j++)\n\t\t\t\tp %s (%s)(%s)%s[(a * L + j) * inner + b];\n"
	       "\t\t\t%s[a * inner + b] = (%s)p;\n\t\t}\n",
	    fl ? "double" : "uint64_t", fl ? "*=" : "*=", fl ? "double" : "uint64_t", fl ? T : "int64_t", arg(c, 0),
	    buf(c, outv), T);
}

/* sort, sort.stable, topk: per line along dim, positions merge-sorted by
 * (value, position), NaN above every number (one total order: the result
 * does not depend on the algorithm); the first K taken. */
static void sort(xctx *c)
{
	int vo = result(c, 0), io = result(c, 1);
	if (vo < 0 && io < 0)
		return;
	ir_node *x = argn(c, 0);
	const int topk = c->n->op == OP_TOPK;
	const int d = wrapd(x, c->n->args[topk || c->n->op == OP_SORT_STABLE ? 2 : 1].i);
	const int desc = (int)(topk ? c->n->args[3].i : c->n->args[c->n->op == OP_SORT ? 2 : 3].i);
	const coil_value *ov = node_out(c->ir->g, c->n, 0);
	const char *T = emit_ctype(x->dtype);
	around(c, x, d);
	out(c, "\tconst int64_t K = %s, work = outer * L * inner;\n\t(void)work;\n",
	    topk ? (ov->rank ? dimc(c, &ov->shape[d]) : "1") : "L");
	int oom = emit_err_code(c->errs, c->ir, c->ir->nodes[vo >= 0 ? vo : io].gnode, "out of memory (%lld, %lld)");
	out(c, "#define COIL_BEFORE(i, j) ((kv[i] != kv[i]) != (kv[j] != kv[j]) ? %s : (kv[i] != kv[i] || kv[i] == kv[j]) "
	       "? (i) < (j) : kv[i] %s kv[j])\n", desc ? "kv[i] != kv[i]" : "kv[j] != kv[j]", desc ? ">" : "<");
	out(c, "\t#pragma omp parallel num_threads(nt) if (nt > 1 && work > 32768)\n\t{\n"
	       "\t\tint64_t *pos = malloc((size_t)(2 * L + 1) * sizeof *pos), *tmp = pos + L;\n"
	       "\t\t%s *kv = malloc((size_t)(L + 1) * sizeof *kv);\n"
	       "\t\tif (!pos || !kv)\n\t\t\tcoil_raise(x->st, %d, (long long)L, 0);\n"
	       "\t\t#pragma omp for schedule(static) collapse(2)\n"
	       "\t\tfor (int64_t a = 0; a < outer; a++)\n\t\t\tfor (int64_t b = 0; b < inner; b++) {\n"
	       "\t\t\t\tif (!pos || !kv)\n\t\t\t\t\tcontinue;\n"
	       "\t\t\t\tfor (int64_t j = 0; j < L; j++)\n\t\t\t\t\tkv[j] = %s[(a * L + j) * inner + b], pos[j] = j;\n"
	       "\t\t\t\tint64_t *s = pos, *t = tmp;\n"
	       "\t\t\t\tfor (int64_t w = 1; w < L; w *= 2) { /* bottom-up merge sort */\n"
	       "\t\t\t\t\tfor (int64_t lo = 0; lo < L; lo += 2 * w) {\n"
	       "\t\t\t\t\t\tint64_t m = lo + w < L ? lo + w : L, hi = lo + 2 * w < L ? lo + 2 * w : L, p = lo, q = m, k = lo;\n"
	       "\t\t\t\t\t\twhile (p < m && q < hi)\n\t\t\t\t\t\t\tt[k++] = COIL_BEFORE(s[q], s[p]) ? s[q++] : s[p++];\n"
	       "\t\t\t\t\t\twhile (p < m)\n\t\t\t\t\t\t\tt[k++] = s[p++];\n"
	       "\t\t\t\t\t\twhile (q < hi)\n\t\t\t\t\t\t\tt[k++] = s[q++];\n\t\t\t\t\t}\n"
	       "\t\t\t\t\tint64_t *u = s;\n\t\t\t\t\ts = t, t = u;\n\t\t\t\t}\n"
	       "\t\t\t\tfor (int64_t j = 0; j < K; j++) {\n", T, oom, arg(c, 0));
	if (vo >= 0)
		out(c, "\t\t\t\t\t%s[(a * K + j) * inner + b] = kv[s[j]];\n", buf(c, vo));
	if (io >= 0)
		out(c, "\t\t\t\t\t%s[(a * K + j) * inner + b] = s[j];\n", buf(c, io));
	out(c, "\t\t\t\t}\n\t\t\t}\n\t\tfree(pos);\n\t\tfree(kv);\n\t}\n#undef COIL_BEFORE\n");
}

/* Loops that still take spatial sizes as numbers: a symbolic one is
 * unsupported there (f32 convolutions with constant weights run on oneDNN
 * at any size; 2-d pooling and resampling render with size expressions). */
static int spatial_symbolic(xctx *c)
{
	switch (c->n->op) {
	case OP_CONVOLUTION:
		break;
	default:
		return 0;
	}
	const coil_value *x = node_in(c->ir->g, c->n, 0), *o = node_out(c->ir->g, c->n, 0);
	for (int i = 2; i < x->rank; i++)
		if (!dim_is_const(&x->shape[i], NULL) || !dim_is_const(&o->shape[i], NULL)) {
			*c->bad = 1;
			node_errf(c->err, c->n, "codegen: symbolic spatial sizes are not supported here (only f32 "
				  "convolutions with constant weights, on oneDNN, pooling and resampling)");
			c->err->code = COIL_E_UNSUPPORTED;
			return 1;
		}
	return 0;
}

/* --- strided views, folding, mode padding, Fourier transforms -------------- */

/* flip: each output row (all dims but the last) copies its source row, the
 * flipped dims mirrored, the last dim reversed when it is flipped. */
static void flip(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0);
	const int R = x->rank;
	int fl[COIL_MAX_RANK] = {0};
	for (int i = 0; i < c->n->args[1].n; i++)
		fl[c->n->args[1].ints[i] < 0 ? c->n->args[1].ints[i] + R : c->n->args[1].ints[i]] = 1;
	const char *T = emit_ctype(x->dtype);
	out(c, "\tconst int64_t rows = %s, L = %s, work = rows * L;\n\t(void)work;\n", prod(c, x, 0, R ? R - 1 : 0),
	    R ? dimc(c, &x->shape[R - 1]) : "1");
	out(c, "\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n", T, arg(c, 0), T, buf(c, outv));
	out(c, PAR(1));
	out(c, "\tfor (int64_t row = 0; row < rows; row++) {\n\t\tint64_t rem = row, at = 0, st = L;\n\t\t(void)rem;\n");
	for (int i = R - 2; i >= 0; i--) {
		const char *D = dimc(c, &x->shape[i]);
		out(c, "\t\t{\n\t\t\tconst int64_t j = rem %% %s;\n\t\t\trem /= %s;\n\t\t\tat += %s * st;\n\t\t\tst *= %s;\n\t\t}\n",
		    D, D, fl[i] ? arena_printf(c->ir->arena, "(%s - 1 - j)", D) : "j", D);
	}
	out(c, "\t\tfor (int64_t q = 0; q < L; q++)\n\t\t\tdst[row * L + q] = src[at + %s];\n\t}\n",
	    R && fl[R - 1] ? "L - 1 - q" : "q");
}

/* slice_scatter / select_scatter: self copied, then src (converted) over the
 * region the slice reads: outer x L rows of inner elements. */
static void slice_scatter(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *s = argn(c, 1);
	int d;
	coil_dim start, len;
	int64_t step;
	if (view_slice(c->ir->g, c->n, &d, &start, &len, &step, c->err)) {
		*c->bad = 1;
		return;
	}
	const char *T = emit_ctype(x->dtype), *S = emit_ctype(s->dtype);
	out(c, "\tconst int64_t numel = %s, outer = %s, D = %s, L = %s, inner = %s, first = %s, work = numel;\n"
	       "\t(void)work;\n\tconst %s *restrict src = %s;\n\tconst %s *restrict x0 = %s;\n\t%s *restrict dst = %s;\n",
	    prod(c, x, 0, x->rank), prod(c, x, 0, d), dimc(c, &x->shape[d]),
	    c->n->op == OP_SLICE_SCATTER ? dimc(c, &s->shape[d]) : "1", prod(c, x, d + 1, x->rank), dimc(c, &start),
	    S, arg(c, 1), T, arg(c, 0), T, buf(c, outv));
	out(c, "\tif (dst != x0)\n\t\tmemcpy(dst, x0, (size_t)numel * sizeof *dst);\n");
	out(c, PAR(2));
	out(c, "\tfor (int64_t a = 0; a < outer; a++)\n\t\tfor (int64_t j = 0; j < L; j++)\n"
	       "\t\t\tfor (int64_t k = 0; k < inner; k++)\n"
	       "\t\t\t\tdst[(a * D + first + j * %lldLL) * inner + k] = (%s)src[(a * L + j) * inner + k];\n",
	    (long long)step, T);
}

/* arange: start + i * step, in int64 for integer dtypes, else in double
 * rounded to the dtype (the interpreter's, ATen's); a size-expression start
 * is the symbols' C expression. */
static void arange(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *o = &c->ir->nodes[outv];
	const coil_arg *s0, *e0;
	double step;
	int step_int, dt;
	arange_args(c->n, &s0, &e0, &step, &step_int, &dt);
	(void)e0, (void)step_int, (void)dt;
	const int in = dtype_is_int(o->dtype);
	const char *start = !s0 ? "0" : s0->kind == ARG_DIMS ? dimc(c, &s0->dims[0])
		: in ? arena_printf(c->ir->arena, "%lldLL", (long long)(int64_t)s0->f)
		: arena_printf(c->ir->arena, "%.17g", s0->f);
	const char *T = emit_ctype(o->dtype);
	const char *val = in ? arena_printf(c->ir->arena, "(%s)(%s + i * %lldLL)", T, start, (long long)(int64_t)step)
		: o->dtype == COIL_BF16 ? arena_printf(c->ir->arena, "coil_f32_bf16((float)((double)%s + %.17g * (double)i))", start, step)
		: o->dtype == COIL_F16 ? arena_printf(c->ir->arena, "coil_f32_f16((float)((double)%s + %.17g * (double)i))", start, step)
		: arena_printf(c->ir->arena, "(%s)((double)%s + %.17g * (double)i)", T, start, step);
	out(c, "\tconst int64_t n = %s, work = n;\n\t(void)work;\n\t%s *restrict dst = %s;\n", dimc(c, &o->shape[0]), T,
	    buf(c, outv));
	out(c, PAR(1));
	out(c, "\tfor (int64_t i = 0; i < n; i++)\n\t\tdst[i] = %s;\n", val);
}

/* unfold: each output row (every dim but the window's) starts at its
 * coordinates in self (the window index times step along dim), the window
 * strided by dim's stride. */
static void unfold(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const int R = x->rank, d = wrapd(x, c->n->args[1].i);
	const char *T = emit_ctype(x->dtype);
	out(c, "\tconst int64_t rows = %s, L = %lldLL, work = rows * L;\n\t(void)work;\n", prod(c, o, 0, R),
	    (long long)c->n->args[2].i);
	out(c, "\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n", T, arg(c, 0), T, buf(c, outv));
	out(c, "\tconst int64_t ds = %s;\n", prod(c, x, d + 1, R));
	out(c, PAR(1));
	out(c, "\tfor (int64_t row = 0; row < rows; row++) {\n\t\tint64_t rem = row, at = 0, st = 1;\n\t\t(void)rem;\n");
	for (int i = R - 1; i >= 0; i--)
		out(c, "\t\t{\n\t\t\tconst int64_t j = rem %% %s;\n\t\t\trem /= %s;\n\t\t\tat += j%s * st;\n"
		       "\t\t\tst *= %s;\n\t\t}\n",
		    dimc(c, &o->shape[i]), dimc(c, &o->shape[i]),
		    i == d ? arena_printf(c->ir->arena, " * %lldLL", (long long)c->n->args[3].i) : "", dimc(c, &x->shape[i]));
	out(c, "\t\tfor (int64_t q = 0; q < L; q++)\n\t\t\tdst[row * L + q] = src[at + q * ds];\n\t}\n");
}

/* as_strided: each output row (all dims but the last) starts at its offset in
 * self's elements, its last dim strided. */
static void as_strided(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *o = &c->ir->nodes[outv];
	const coil_arg *st = &c->n->args[2];
	const int R = o->rank;
	const long long off = c->n->args[3].kind == ARG_INT ? (long long)c->n->args[3].i : 0;
	const char *T = emit_ctype(o->dtype);
	out(c, "\tconst int64_t rows = %s, L = %s, work = rows * L;\n\t(void)work;\n", prod(c, o, 0, R ? R - 1 : 0),
	    R ? dimc(c, &o->shape[R - 1]) : "1");
	out(c, "\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n", T, arg(c, 0), T, buf(c, outv));
	out(c, PAR(1));
	out(c, "\tfor (int64_t row = 0; row < rows; row++) {\n\t\tint64_t rem = row, at = %lldLL;\n\t\t(void)rem;\n", off);
	for (int i = R - 2; i >= 0; i--)
		out(c, "\t\tat += rem %% %s * %lldLL;\n\t\trem /= %s;\n", dimc(c, &o->shape[i]), (long long)st->ints[i],
		    dimc(c, &o->shape[i]));
	out(c, "\t\tfor (int64_t j = 0; j < L; j++)\n\t\t\tdst[row * L + j] = src[at + j * %lldLL];\n\t}\n",
	    R ? (long long)st->ints[R - 1] : 0LL);
}

/* col2im: per image plane (parallel), zeros, then every block's values
 * added where they land, in the interpreter's order (the same bits at any
 * thread count); im2col: per (plane, kernel offset) row, the values each
 * block reads, 0 in the padding. */
static void col2im(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const int fold = c->n->op == OP_COL2IM, a0 = fold ? 2 : 1;
	const int64_t *k = c->n->args[a0].ints, *dl = c->n->args[a0 + 1].ints, *pd = c->n->args[a0 + 2].ints,
		      *sd = c->n->args[a0 + 3].ints;
	const ir_node *img = fold ? o : x;
	const int R = img->rank;
	const long long H = sdim(img, R - 2), W = sdim(img, R - 1);
	const long long nh = (H + 2 * pd[0] - dl[0] * (k[0] - 1) - 1) / sd[0] + 1;
	const long long nw = (W + 2 * pd[1] - dl[1] * (k[1] - 1) - 1) / sd[1] + 1;
	const char *T = emit_ctype(o->dtype);
	out(c, "\tconst int64_t planes = %s, work = planes * %lldLL;\n\t(void)work;\n", prod(c, img, 0, R - 2),
	    (long long)(k[0] * k[1] * nh * nw));
	out(c, "\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n", T, arg(c, 0), T, buf(c, outv));
	out(c, PAR(1));
	out(c, "\tfor (int64_t pl = 0; pl < planes; pl++) {\n");
	if (fold)
		out(c, "\t\t%s *restrict im = dst + pl * %lldLL;\n\t\tconst %s *restrict cl = src + pl * %lldLL;\n"
		       "\t\tfor (int64_t e = 0; e < %lldLL; e++)\n\t\t\tim[e] = 0;\n",
		    T, H * W, T, (long long)(k[0] * k[1] * nh * nw), H * W);
	else
		out(c, "\t\tconst %s *restrict im = src + pl * %lldLL;\n\t\t%s *restrict cl = dst + pl * %lldLL;\n", T, H * W, T,
		    (long long)(k[0] * k[1] * nh * nw));
	if (fold) {
		/* tiles of 16 blocks along the row, the kernel's columns inside: the
		 * tile's 16 output runs stay in cache while its values (16 in a row
		 * of col per column) are added (istft's overlap-add: 1024 columns at
		 * a stride of 256) */
		out(c, "\t\tfor (int64_t i = 0; i < %lldLL; i++)\n\t\t\tfor (int64_t bh = 0; bh < %lldLL; bh++) {\n"
		       "\t\t\t\tconst int64_t y0 = bh * %lldLL - %lldLL + i * %lldLL;\n"
		       "\t\t\t\tif (y0 < 0 || y0 >= %lldLL)\n\t\t\t\t\tcontinue;\n"
		       "\t\t\t\tfor (int64_t b0 = 0; b0 < %lldLL; b0 += 16) {\n"
		       "\t\t\t\t\tconst int64_t b1 = b0 + 16 < %lldLL ? b0 + 16 : %lldLL;\n"
		       "\t\t\t\t\tfor (int64_t j = 0; j < %lldLL; j++) {\n"
		       "\t\t\t\t\t\tconst %s *restrict cr = cl + ((i * %lldLL + j) * %lldLL + bh) * %lldLL;\n"
		       "\t\t\t\t\t\tfor (int64_t bw = b0; bw < b1; bw++) {\n"
		       "\t\t\t\t\t\t\tconst int64_t xx = bw * %lldLL - %lldLL + j * %lldLL;\n"
		       "\t\t\t\t\t\t\tif (xx >= 0 && xx < %lldLL)\n\t\t\t\t\t\t\t\tim[y0 * %lldLL + xx] += cr[bw];\n"
		       "\t\t\t\t\t\t}\n\t\t\t\t\t}\n\t\t\t\t}\n\t\t\t}\n\t}\n",
		    (long long)k[0], nh, (long long)sd[0], (long long)pd[0], (long long)dl[0], H, nw, nw, nw, (long long)k[1],
		    T, (long long)k[1], nh, nw, (long long)sd[1], (long long)pd[1], (long long)dl[1], W, W);
		return;
	}
	out(c, "\t\tfor (int64_t i = 0; i < %lldLL; i++)\n\t\t\tfor (int64_t j = 0; j < %lldLL; j++)\n"
	       "\t\t\t\tfor (int64_t bh = 0; bh < %lldLL; bh++) {\n"
	       "\t\t\t\t\tconst int64_t y = bh * %lldLL - %lldLL + i * %lldLL;\n"
	       "\t\t\t\t\t%s *restrict cr = cl + ((i * %lldLL + j) * %lldLL + bh) * %lldLL;\n",
	    (long long)k[0], (long long)k[1], nh, (long long)sd[0], (long long)pd[0], (long long)dl[0], T, (long long)k[1],
	    nh, nw);
	out(c, "\t\t\t\t\tfor (int64_t bw = 0; bw < %lldLL; bw++) {\n"
	       "\t\t\t\t\t\tconst int64_t xx = bw * %lldLL - %lldLL + j * %lldLL;\n"
	       "\t\t\t\t\t\tconst int in = y >= 0 && y < %lldLL && xx >= 0 && xx < %lldLL;\n"
	       "\t\t\t\t\t\tcr[bw] = in ? im[y * %lldLL + xx] : 0;\n\t\t\t\t\t}\n\t\t\t\t}\n\t}\n",
	    nw, (long long)sd[1], (long long)pd[1], (long long)dl[1], H, W, W);
}

/* reflection / replication padding: each output row (all dims but the last)
 * reads its source row at the mirrored (clamped) coordinates, then the last
 * dim likewise. */
static void pad_mode(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const coil_arg *p = &c->n->args[1];
	const int refl = c->n->op == OP_REFLECTION_PAD1D || c->n->op == OP_REFLECTION_PAD2D ||
			 c->n->op == OP_REFLECTION_PAD3D;
	const int R = x->rank;
	long long lo[COIL_MAX_RANK] = {0};
	for (int j = 0; j < p->n / 2; j++)
		lo[R - 1 - j] = (long long)p->ints[2 * j];
	const char *T = emit_ctype(o->dtype);
	/* j: the coordinate in the padded dim less its low pad; m the input size */
	const char *map = refl ? "(j < 0 ? -j : j >= m ? 2 * (m - 1) - j : j)" : "(j < 0 ? 0 : j >= m ? m - 1 : j)";
	out(c, "\tconst int64_t rows = %s, L = %s, XL = %s, work = rows * L;\n\t(void)work;\n", prod(c, o, 0, R - 1),
	    dimc(c, &o->shape[R - 1]), dimc(c, &x->shape[R - 1]));
	out(c, "\tconst %s *restrict src = %s;\n\t%s *restrict dst = %s;\n", T, arg(c, 0), T, buf(c, outv));
	out(c, PAR(1));
	out(c, "\tfor (int64_t row = 0; row < rows; row++) {\n\t\tint64_t rem = row, at = 0, st = XL;\n\t\t(void)rem;\n");
	for (int i = R - 2; i >= 0; i--)
		out(c, "\t\t{\n\t\t\tconst int64_t m = %s, j = rem %% %s - %lldLL;\n\t\t\trem /= %s;\n"
		       "\t\t\tat += %s * st;\n\t\t\tst *= m;\n\t\t}\n",
		    dimc(c, &x->shape[i]), dimc(c, &o->shape[i]), lo[i], dimc(c, &o->shape[i]), map);
	out(c, "\t\tconst %s *restrict s = src + at;\n\t\t%s *restrict d = dst + row * L;\n\t\tconst int64_t m = XL;\n"
	       "\t\tfor (int64_t q = 0; q < L; q++) {\n\t\t\tconst int64_t j = q - %lldLL;\n\t\t\td[q] = s[%s];\n\t\t}\n\t}\n",
	    T, T, lo[R - 1], map);
}

/* coil.fft_r2c / c2r / c2c: one coil_fft_lines call (codegen/fft.h) per
 * transformed dim, in ATen's order: r2c the last dim first (real to
 * complex), then the others in place; c2r the others first (on a copy of the
 * input), the last dim last; c2c each dim in place on the result.  The scale
 * goes with the last call. */
static void fft(xctx *c)
{
	int outv = result(c, 0);
	if (outv < 0)
		return;
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const coil_arg *dm = &c->n->args[1];
	const int r2c = c->n->op == OP_FFT_R2C, c2r = c->n->op == OP_FFT_C2R;
	const int R = r2c ? x->rank : x->rank - 1;
	const int sign = c2r || (c->n->op == OP_FFT_C2C && !c->n->args[3].i) ? 1 : -1;
	const ir_node *cx = r2c ? o : x; /* a complex shape: the result's for r2c, else the input's */
	int dims[COIL_MAX_RANK], last = 0;
	for (int i = 0; i < dm->n; i++)
		dims[i] = (int)(dm->ints[i] < 0 ? dm->ints[i] + R : dm->ints[i]), last = dims[i];
	/* n of each transformed dim: the real side's size */
	const ir_node *real = r2c ? x : c2r ? o : x;
	char *N = "1";
	for (int i = 0; i < dm->n; i++)
		N = arena_printf(c->ir->arena, "%s * %s", N, dimc(c, &real->shape[dims[i]]));
	const int64_t norm = c->n->args[2].i;
	out(c, "\tconst double nn = (double)(%s);\n\tconst float scale = %s;\n\tconst float *src = %s;\n"
	       "\tfloat *dst = %s, *tmp = NULL;\n\tint rc = 0;\n",
	    N, norm == 0 ? "1.0f" : norm == 1 ? "nn > 0 ? (float)(1.0 / sqrt(nn)) : 1.0f" : "nn > 0 ? (float)(1.0 / nn) : 1.0f",
	    arg(c, 0), buf(c, outv));
	int oom = emit_err_code(c->errs, c->ir, o->gnode, "out of memory (a transform of %lld points, %lld)");
	/* the complex dims other than the last transformed one, in order */
	int rest[COIL_MAX_RANK], nr = 0;
	for (int i = 0; i < dm->n; i++)
		if (dims[i] != last || i != dm->n - 1)
			rest[nr++] = dims[i];
	if (c2r && nr) {
		out(c, "\ttmp = malloc((size_t)(%s) * sizeof(float));\n\tif (!tmp)\n\t\trc = -1;\n\telse\n"
		       "\t\tmemcpy(tmp, src, (size_t)(%s) * sizeof(float));\n",
		    prod(c, x, 0, x->rank), prod(c, x, 0, x->rank));
	}
	if (c->n->op == OP_FFT_C2C)
		out(c, "\tif (dst != src)\n\t\tmemcpy(dst, src, (size_t)(%s) * sizeof(float));\n", prod(c, x, 0, x->rank));
	/* a call along dim d of a complex (or real) shape sh */
#define LINES(kind, s, d_, sh, lin, lout, n_, sc)                                                             \
	out(c, "\tif (!rc)\n\t\trc = coil_fft_lines(%s, %s, %s, %s, %s, %s, %s, %s, %d, %s, nt);\n", kind, s, d_,     \
	    prod(c, sh, 0, dims_at), lin, lout, prod(c, sh, dims_at + 1, R), n_, sign, sc)
	int dims_at;
	if (r2c) {
		dims_at = last;
		LINES("COIL_FFT_R2C", "src", "dst", x, dimc(c, &x->shape[last]), dimc(c, &o->shape[last]),
		      dimc(c, &x->shape[last]), nr ? "1.0f" : "scale");
		for (int i = 0; i < nr; i++) {
			dims_at = rest[i];
			LINES("COIL_FFT_C2C", "dst", "dst", cx, dimc(c, &cx->shape[rest[i]]), dimc(c, &cx->shape[rest[i]]),
			      dimc(c, &cx->shape[rest[i]]), i == nr - 1 ? "scale" : "1.0f");
		}
	} else if (c2r) {
		for (int i = 0; i < nr; i++) {
			dims_at = rest[i];
			LINES("COIL_FFT_C2C", "tmp", "tmp", x, dimc(c, &x->shape[rest[i]]), dimc(c, &x->shape[rest[i]]),
			      dimc(c, &x->shape[rest[i]]), "1.0f");
		}
		dims_at = last;
		LINES("COIL_FFT_C2R", nr ? "tmp" : "src", "dst", x, dimc(c, &x->shape[last]), dimc(c, &o->shape[last]),
		      dimc(c, &o->shape[last]), "scale");
	} else {
		for (int i = 0; i < dm->n; i++) {
			dims_at = dims[i];
			LINES("COIL_FFT_C2C", "dst", "dst", x, dimc(c, &x->shape[dims[i]]), dimc(c, &x->shape[dims[i]]),
			      dimc(c, &x->shape[dims[i]]), i == dm->n - 1 ? "scale" : "1.0f");
		}
	}
#undef LINES
	out(c, "\tfree(tmp);\n\tif (rc) {\n\t\tcoil_raise(x->st, %d, (long long)nn, 0LL);\n\t\treturn;\n\t}\n", oom);
}

/* The loops here compute in their buffers' element type: bf16 and f16
 * (uint16_t bits) only move; their convolutions, products and pooling are
 * oneDNN's (lower_dnnl.c); cat converts what it promotes. */
static int half_refused(xctx *c)
{
	const op_info *oi = op_get(c->n->op);
	int half = dtype_is_half(node_out(c->ir->g, c->n, 0)->dtype), same = 1;
	coil_dtype t0 = node_out(c->ir->g, c->n, 0)->dtype;
	for (int a = 0; a < oi->nargs; a++)
		if (c->n->args[a].kind == ARG_TENSOR || c->n->args[a].kind == ARG_TENSORS)
			for (int k = 0; k < c->n->args[a].n; k++)
				if (c->n->args[a].v[k] >= 0) {
					coil_dtype t = c->ir->g->vals[c->n->args[a].v[k]].dtype;
					half |= dtype_is_half(t);
					same &= t == t0 || (c->n->op == OP_EMBEDDING && a == 1) || ((c->n->op == OP_INDEX_ADD || c->n->op == OP_INDEX_REDUCE) && a == 2) ||
						((c->n->op == OP_INDEX_SELECT || c->n->op == OP_GATHER) && a == 2) ||
						(c->n->op == OP_INDEX_T && a == 1);
				}
	if (!half)
		return 0;
	switch (c->n->op) {
	case OP_CAT: case OP_STACK: case OP_SDPA: /* converts what it promotes; widens as it packs */
		return 0;
	case OP_EMBEDDING: case OP_INDEX_SELECT: case OP_GATHER: case OP_CONSTANT_PAD_ND: case OP_ROLL: case OP_TRIL:
	case OP_INDEX_T: case OP_FLIP: case OP_AS_STRIDED: case OP_UNFOLD: case OP_REFLECTION_PAD1D: case OP_REFLECTION_PAD2D:
	case OP_REFLECTION_PAD3D: case OP_REPLICATION_PAD1D: case OP_REPLICATION_PAD2D: case OP_REPLICATION_PAD3D:
	case OP_TRIU: case OP_ARANGE: case OP_ARANGE_START: case OP_ARANGE_STEP: case OP_SLICE_SCATTER:
	case OP_SELECT_SCATTER:
		if (same)
			return 0;
		break;
	default:
		break;
	}
	*c->bad = 1;
	node_errf(c->err, c->n, "codegen: %s in bf16 or f16 runs on oneDNN only (bf16 convolutions with constant "
		  "weights, matrix products, 2-d pooling); as a loop it needs f32", op_get(c->n->op)->name);
	c->err->code = COIL_E_UNSUPPORTED;
	return 1;
}

void emit_extern(coil_ir *ir, FILE *f, int k, int *used, emit_errs *errs, coil_err *err, int *bad)
{
	ir_kernel *K = &ir->ks[k];
	ir_node *e = &ir->nodes[K->ext];
	xctx c = {.ir = ir, .f = f, .used = used, .errs = errs, .n = &ir->g->nodes[e->gnode], .K = K, .err = err,
		  .bad = bad};
	if (dn_emit_extern(ir, f, k, used, errs)) /* a oneDNN fusion */
		return;
	if (spatial_symbolic(&c) || half_refused(&c))
		return;
	switch (c.n->op) {
	/* library seams: oneDNN calls replace these loops */
	case OP_CONVOLUTION: conv(&c); return;
	case OP_MM: case OP_BMM: case OP_ADDMM: matmul(&c); return;
	case OP_SDPA: sdpa(&c); return;
	/* pooling */
	case OP_MAX_POOL2D_WI: case OP_MAX_POOL2D: case OP_AVG_POOL2D: case OP_MAX_POOL3D_WI: case OP_MAX_POOL3D:
	case OP_AVG_POOL3D:
		pool2d(&c);
		return;
	case OP_ADAPTIVE_AVG_POOL2D_: case OP_ADAPTIVE_AVG_POOL2D: case OP_ADAPTIVE_MAX_POOL2D:
		adaptive_pool2d(&c);
		return;
	/* resampling */
	case OP_UPSAMPLE_BILINEAR2D_VEC: case OP_UPSAMPLE_BILINEAR2D: case OP_UPSAMPLE_NEAREST2D_VEC:
	case OP_UPSAMPLE_NEAREST2D:
		upsample2d(&c);
		return;
	/* data movement */
	case OP_CAT: case OP_STACK: cat(&c); return;
	case OP_EMBEDDING: embedding(&c); return;
	case OP_INDEX_SELECT: index_select(&c); return;
	case OP_INDEX_T: index_t(&c); return;
	case OP_GATHER: gather(&c); return;
	case OP_SCATTER_ADD: case OP_SCATTER_REDUCE: case OP_INDEX_ADD: case OP_INDEX_REDUCE: scatter(&c); return;
	case OP_GATHER_SCATTER: gather_scatter(&c); return;
	case OP_CONSTANT_PAD_ND: pad(&c); return;
	case OP_ROLL: roll(&c); return;
	case OP_TRIL: case OP_TRIU: tri(&c); return;
	case OP_LSTM: case OP_GRU: case OP_RNN_TANH: case OP_RNN_RELU: rnn(&c); return;
	case OP_SPARSE_MM_REDUCE: spmm(&c); return;
	case OP_EMBEDDING_BAG_FO: case OP_EMBEDDING_BAG: embedding_bag(&c); return;
	case OP_CUMSUM: cumsum(&c); return;
	case OP_GUARD_EQ: guard(&c); return;
	case OP_MB_JOIN: mb_join(&c); return;
	case OP_PROD: case OP_PROD_DIM: prod_(&c); return;
	case OP_SORT: case OP_SORT_STABLE: case OP_TOPK: sort(&c); return;
	case OP_AS_STRIDED: as_strided(&c); return;
	case OP_FLIP: flip(&c); return;
	case OP_UNFOLD: unfold(&c); return;
	case OP_ARANGE: case OP_ARANGE_START: case OP_ARANGE_STEP: arange(&c); return;
	case OP_SLICE_SCATTER: case OP_SELECT_SCATTER: slice_scatter(&c); return;
	case OP_COL2IM: case OP_IM2COL: col2im(&c); return;
	case OP_REFLECTION_PAD1D: case OP_REFLECTION_PAD2D: case OP_REFLECTION_PAD3D: case OP_REPLICATION_PAD1D:
	case OP_REPLICATION_PAD2D: case OP_REPLICATION_PAD3D:
		pad_mode(&c);
		return;
	case OP_FFT_R2C: case OP_FFT_C2R: case OP_FFT_C2C: fft(&c); return;
	default:
		*bad = 1;
		node_errf(err, c.n, "codegen: no extern kernel for this op yet");
	}
}
