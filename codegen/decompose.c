/* decompose: graph -> IR.  Every graph node becomes primitives: pointwise
 * ops and composites (softmax, layer norm, batch norm, gelu, ...) into unary,
 * binary, where and cast; reductions into keepdim reductions followed by a
 * reshape; views into index arithmetic; the rest into extern kernels. */
#include <math.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "codegen/ir.h"
#include "common/infer.h"

typedef struct dctx {
	coil_ir *ir;
	coil_graph *g;
	const coil_node *n;
	int gnode;
	coil_err *err;
	int bad;
	int cl; /* the node is built in the channels-last frame (dn_plan.cl): its NHWC operands
		 * and its result are [N, H, W, C], per-channel operands broadcast along C */
} dctx;

static int add(dctx *c, ir_node *p)
{
	p->gnode = c->gnode;
	int r = ir_add(c->ir, p, c->err);
	if (r < 0)
		c->bad = 1;
	return r < 0 ? 0 : r;
}

static ir_node *N(dctx *c, int i) { return &c->ir->nodes[i]; }

static int fill(dctx *c, double v, coil_dtype t)
{
	ir_node p = {.op = IR_FILL, .dtype = t, .fill = v};
	return add(c, &p);
}

static int fill_dim(dctx *c, coil_dim d, coil_dtype t)
{
	ir_node p = {.op = IR_FILL, .sub = 1, .dtype = t, .start = d};
	return add(c, &p);
}

static int cast(dctx *c, int a, coil_dtype t)
{
	if (N(c, a)->dtype == t)
		return a;
	if (N(c, a)->op == IR_FILL && !N(c, a)->sub && !N(c, a)->rank) {
		double v = N(c, a)->fill;
		if (dtype_is_int(t) || t == COIL_BOOL)
			v = t == COIL_BOOL ? v != 0 : trunc(v);
		return fill(c, dtype_round(t, v), t);
	}
	ir_node p = {.op = IR_CAST, .dtype = t, .nsrc = 1, .src = {a}, .rank = N(c, a)->rank};
	memcpy(p.shape, N(c, a)->shape, sizeof p.shape);
	return add(c, &p);
}

static int pw(dctx *c, int prim, coil_dtype t, int nsrc, int a, int b, int w)
{
	ir_node p = {.op = nsrc == 3 ? IR_WHERE : nsrc == 2 ? IR_BINARY : IR_UNARY, .sub = prim, .dtype = t,
		     .nsrc = nsrc, .src = {a, b, w}};
	p.rank = 0;
	for (int k = 0; k < nsrc; k++) {
		ir_node *s = N(c, p.src[k]);
		coil_dim out[COIL_MAX_RANK];
		int r;
		if (broadcast_shapes(p.shape, p.rank, s->shape, s->rank, out, &r, c->err)) {
			c->bad = 1;
			return 0;
		}
		memcpy(p.shape, out, sizeof out);
		p.rank = r;
	}
	return add(c, &p);
}

/* Shorthands with the result dtype of the first operand. */
static int un(dctx *c, int prim, int a) { return pw(c, prim, N(c, a)->dtype, 1, a, 0, 0); }
static int bin(dctx *c, int prim, int a, int b) { return pw(c, prim, N(c, a)->dtype, 2, a, b, 0); }
static int cmp(dctx *c, int prim, int a, int b) { return pw(c, prim, COIL_BOOL, 2, a, b, 0); }
static int where(dctx *c, int m, int a, int b) { return pw(c, 0, N(c, a)->dtype, 3, m, a, b); }
static int num(dctx *c, double v, int like) { return fill(c, v, N(c, like)->dtype); }

static int reshape(dctx *c, int a, int rank, const coil_dim *shape)
{
	while (N(c, a)->op == IR_VIEW && N(c, a)->sub == V_RESHAPE) /* a reshape of a reshape is one */
		a = N(c, a)->src[0];
	ir_node *s = N(c, a);
	if (s->rank == rank && dims_equal(s->shape, shape, rank))
		return a;
	ir_node p = {.op = IR_VIEW, .sub = V_RESHAPE, .dtype = s->dtype, .nsrc = 1, .src = {a}, .rank = rank};
	memcpy(p.shape, shape, sizeof(coil_dim) * (size_t)rank);
	return add(c, &p);
}

/* A keepdim reduction over mask; reshaped to drop the dims unless keep. */
static int reduce(dctx *c, int kind, int a, unsigned mask, coil_dtype t)
{
	ir_node *s = N(c, a);
	ir_node p = {.op = IR_REDUCE, .sub = kind, .dtype = t, .nsrc = 1, .src = {a}, .rank = s->rank, .mask = mask};
	for (int i = 0; i < s->rank; i++)
		p.shape[i] = mask >> i & 1 ? dim_const(1) : s->shape[i];
	return add(c, &p);
}

static int squeeze_to(dctx *c, int a, const coil_value *out)
{
	return reshape(c, a, out->rank, out->shape);
}

/* Number of elements in the reduced dims, as a dim. */
static coil_dim red_count(dctx *c, int a, unsigned mask)
{
	coil_dim n = dim_const(1);
	for (int i = 0; i < N(c, a)->rank; i++)
		if (mask >> i & 1)
			dim_mul(&n, &n, &N(c, a)->shape[i], c->err);
	return n;
}

static int mean(dctx *c, int a, unsigned mask)
{
	int s = reduce(c, RD_SUM, a, mask, N(c, a)->dtype);
	return bin(c, PR_DIV, s, fill_dim(c, red_count(c, a, mask), N(c, a)->dtype));
}

#define ARG(i) (c->n->args[i])
#define HAS(i) (c->n->args[i].kind != ARG_NONE)
static int in(dctx *c, int i) { return c->ir->val_node[ARG(i).v[0]]; }

/* Operand i of a pointwise node converted to the compute dtype t. */
static int opnd(dctx *c, int i, coil_dtype t)
{
	if (ARG(i).kind == ARG_TENSOR)
		return cast(c, in(c, i), t);
	double v = ARG(i).f;
	if (dtype_is_int(t) || t == COIL_BOOL)
		v = t == COIL_BOOL ? v != 0 : trunc(v);
	else if (t == COIL_F32)
		v = (float)v;
	return fill(c, v, t);
}

static double sarg(dctx *c, int i, double d) { return ARG(i).kind == ARG_SCALAR ? ARG(i).f : d; }

static int sigmoid(dctx *c, int x)
{
	return un(c, PR_RECIP, bin(c, PR_ADD, num(c, 1, x), un(c, PR_EXP, un(c, PR_NEG, x))));
}

/* The dtype an op whose result is t computes in: bf16 and f16 are storage
 * types, computed in f32 and rounded once, at the op's result (as eager's
 * kernels do; the result's cast in ir_decompose). */
static coil_dtype compute_t(coil_dtype t)
{
	return dtype_is_half(t) ? COIL_F32 : t;
}

static int pointwise(dctx *c, coil_dtype ot)
{
	const coil_node *n = c->n;
	coil_dtype t = compute_t(ot);
	switch (n->op) {
	case OP_EQ: case OP_EQ_S: case OP_NE: case OP_NE_S: case OP_LT: case OP_LT_S: case OP_LE: case OP_LE_S:
	case OP_GT: case OP_GT_S: case OP_GE: case OP_GE_S: {
		static const int idx[2] = {0, 1};
		int r = infer_result_type(c->g, n, idx, 2, c->err);
		if (r < 0)
			return c->bad = 1, 0;
		t = compute_t((coil_dtype)r);
		break;
	}
	case OP_LOGICAL_AND: case OP_LOGICAL_OR: case OP_LOGICAL_NOT: t = COIL_BOOL; break;
	default: break;
	}
	int x = n->op == OP_WHERE ? 0 : opnd(c, 0, t), r;
	switch (n->op) {
	case OP_RELU: return bin(c, PR_MAX, x, num(c, 0, x));
	case OP_GELU:
		if (!strcmp(ARG(1).s, "tanh")) {
			int x3 = bin(c, PR_MUL, bin(c, PR_MUL, x, x), x);
			int in_ = bin(c, PR_MUL, num(c, sqrt(2 / M_PI), x), bin(c, PR_ADD, x, bin(c, PR_MUL, num(c, 0.044715, x), x3)));
			r = un(c, PR_TANH, in_);
		} else {
			r = un(c, PR_ERF, bin(c, PR_MUL, x, num(c, M_SQRT1_2, x)));
		}
		return bin(c, PR_MUL, bin(c, PR_MUL, num(c, 0.5, x), x), bin(c, PR_ADD, num(c, 1, x), r));
	case OP_SILU: return bin(c, PR_MUL, x, sigmoid(c, x));
	case OP_SIGMOID: return sigmoid(c, x);
	case OP_HARDSWISH: case OP_HARDSIGMOID:
		r = bin(c, PR_MIN, bin(c, PR_MAX, bin(c, PR_ADD, x, num(c, 3, x)), num(c, 0, x)), num(c, 6, x));
		if (n->op == OP_HARDSWISH)
			r = bin(c, PR_MUL, x, r);
		return bin(c, PR_DIV, r, num(c, 6, x));
	case OP_HARDTANH:
		return bin(c, PR_MIN, bin(c, PR_MAX, x, num(c, sarg(c, 1, -1), x)), num(c, sarg(c, 2, 1), x));
	case OP_LEAKY_RELU:
		return where(c, cmp(c, PR_GT, x, num(c, 0, x)), x, bin(c, PR_MUL, x, num(c, sarg(c, 1, 0.01), x)));
	case OP_ELU: {
		double alpha = sarg(c, 1, 1), scale = sarg(c, 2, 1), is = sarg(c, 3, 1);
		int neg = bin(c, PR_MUL, num(c, alpha * scale, x),
			      bin(c, PR_SUB, un(c, PR_EXP, bin(c, PR_MUL, x, num(c, is, x))), num(c, 1, x)));
		return where(c, cmp(c, PR_GT, x, num(c, 0, x)), bin(c, PR_MUL, x, num(c, scale, x)), neg);
	}
	case OP_SOFTPLUS: case OP_MISH: { /* ATen: linear where beta * x > threshold */
		double beta = n->op == OP_MISH ? 1 : sarg(c, 1, 1), th = n->op == OP_MISH ? 20 : sarg(c, 2, 20);
		int bx = beta == 1 ? x : bin(c, PR_MUL, x, num(c, beta, x));
		r = un(c, PR_LOG1P, un(c, PR_EXP, bx));
		if (beta != 1)
			r = bin(c, PR_DIV, r, num(c, beta, x));
		r = where(c, cmp(c, PR_GT, bx, num(c, th, x)), x, r);
		return n->op == OP_MISH ? bin(c, PR_MUL, x, un(c, PR_TANH, r)) : r;
	}
	case OP_EXP: return un(c, PR_EXP, x);
	case OP_LOG: return un(c, PR_LOG, x);
	case OP_LOG1P: return un(c, PR_LOG1P, x);
	case OP_SQRT: return un(c, PR_SQRT, x);
	case OP_RSQRT: return un(c, PR_RECIP, un(c, PR_SQRT, x));
	case OP_ERF: return un(c, PR_ERF, x);
	case OP_SIN: return un(c, PR_SIN, x);
	case OP_COS: return un(c, PR_COS, x);
	case OP_TANH: return un(c, PR_TANH, x);
	case OP_RECIPROCAL: return un(c, PR_RECIP, x);
	case OP_NEG: return un(c, PR_NEG, x);
	case OP_ABS: return un(c, PR_ABS, x);
	case OP_FLOOR: return dtype_is_float(t) ? un(c, PR_FLOOR, x) : x;
	case OP_CEIL: return dtype_is_float(t) ? un(c, PR_CEIL, x) : x;
	case OP_ROUND: return dtype_is_float(t) ? un(c, PR_ROUND, x) : x;
	case OP_LOGICAL_NOT: return cast(c, un(c, PR_NOT, x), ot);
	case OP_BITWISE_NOT: return t == COIL_BOOL ? un(c, PR_NOT, x) : un(c, PR_BNOT, x);
	case OP_TO_COPY: return cast(c, in(c, 0), ot);
	case OP_CLAMP: case OP_CLAMP_MIN: case OP_CLAMP_MAX:
		if (n->op != OP_CLAMP_MAX && ARG(1).kind == ARG_SCALAR)
			x = bin(c, PR_MAX, x, opnd(c, 1, t));
		if (n->op == OP_CLAMP_MAX)
			x = bin(c, PR_MIN, x, opnd(c, 1, t));
		if (n->op == OP_CLAMP && ARG(2).kind == ARG_SCALAR)
			x = bin(c, PR_MIN, x, opnd(c, 2, t));
		return x;
	case OP_WHERE:
		return where(c, cast(c, in(c, 0), COIL_BOOL), opnd(c, 1, t), opnd(c, 2, t));
	case OP_MASKED_FILL: case OP_MASKED_FILL_T:
		return where(c, cast(c, in(c, 1), COIL_BOOL), opnd(c, 2, t), x);
	default: break;
	}
	int y = opnd(c, 1, t);
	switch (n->op) {
	case OP_ADD: case OP_ADD_S: case OP_SUB: case OP_SUB_S: case OP_RSUB: case OP_RSUB_S: {
		double alpha = ARG(2).f;
		int rs = n->op == OP_RSUB || n->op == OP_RSUB_S;
		int a = rs ? y : x, b = rs ? x : y;
		if (alpha != 1)
			b = bin(c, PR_MUL, num(c, alpha, b), b);
		return bin(c, n->op == OP_ADD || n->op == OP_ADD_S ? PR_ADD : PR_SUB, a, b);
	}
	case OP_MUL: case OP_MUL_S: return bin(c, PR_MUL, x, y);
	case OP_DIV: case OP_DIV_S: return bin(c, PR_DIV, x, y);
	case OP_DIV_MODE:
		if (!HAS(2))
			return bin(c, PR_DIV, x, y);
		if (!strcmp(ARG(2).s, "trunc"))
			return dtype_is_float(t) ? un(c, PR_TRUNC, bin(c, PR_DIV, x, y)) : bin(c, PR_DIV, x, y);
		return bin(c, PR_FLOORDIV, x, y);
	case OP_POW_TS: /* as ATen: x^0.5 and x^-0.5 are sqrt and rsqrt (pow(-inf, 0.5) is nan) */
		if (dtype_is_float(t) && (ARG(1).f == 0.5 || ARG(1).f == -0.5)) {
			int r = un(c, PR_SQRT, x);
			return ARG(1).f > 0 ? r : un(c, PR_RECIP, r);
		}
		return bin(c, PR_POW, x, y);
	case OP_POW_TT: return bin(c, PR_POW, x, y);
	case OP_MAXIMUM: return bin(c, PR_MAX, x, y);
	case OP_MINIMUM: return bin(c, PR_MIN, x, y);
	case OP_EQ: case OP_EQ_S: return cmp(c, PR_EQ, x, y);
	case OP_NE: case OP_NE_S: return cmp(c, PR_NE, x, y);
	case OP_LT: case OP_LT_S: return cmp(c, PR_LT, x, y);
	case OP_LE: case OP_LE_S: return cmp(c, PR_LE, x, y);
	case OP_GT: case OP_GT_S: return cmp(c, PR_GT, x, y);
	case OP_GE: case OP_GE_S: return cmp(c, PR_GE, x, y);
	case OP_LOGICAL_AND: return cmp(c, PR_AND, x, y);
	case OP_LOGICAL_OR: return cmp(c, PR_OR, x, y);
	case OP_BITWISE_AND: case OP_BITWISE_AND_S: return t == COIL_BOOL ? cmp(c, PR_AND, x, y) : bin(c, PR_BAND, x, y);
	case OP_BITWISE_OR: case OP_BITWISE_OR_S: return t == COIL_BOOL ? cmp(c, PR_OR, x, y) : bin(c, PR_BOR, x, y);
	case OP_BITWISE_XOR: case OP_BITWISE_XOR_S: return t == COIL_BOOL ? cmp(c, PR_NE, x, y) : bin(c, PR_BXOR, x, y);
	case OP_LSHIFT: case OP_LSHIFT_S: case OP_LEFT_SHIFT: return bin(c, PR_SHL, x, y);
	case OP_RSHIFT: case OP_RSHIFT_S: case OP_RIGHT_SHIFT: return bin(c, PR_SHR, x, y);
	case OP_REMAINDER: case OP_REMAINDER_S: return bin(c, PR_REM, x, y);
	default:
		c->bad = 1;
		return node_errf(c->err, n, "no pointwise lowering"), 0;
	}
}

/* A channel norm's result (group norm, batch statistics): y, the normalized
 * [N, C, ...] value, times the weight (args[w]) and plus the bias (args[w + 1])
 * per channel where given; the mean and rstd as results 1 and 2 when asked. */
static void norm_affine(dctx *c, int *res, int y, int mu, int rstd, int w)
{
	const coil_node *n = c->n;
	const coil_value *o = node_out(c->g, n, 0);
	const int r = N(c, y)->rank;
	coil_dim cs[COIL_MAX_RANK];
	cs[0] = N(c, y)->shape[1];
	for (int i = 1; i < r - 1; i++)
		cs[i] = dim_const(1);
	if (HAS(w))
		y = bin(c, PR_MUL, y, reshape(c, cast(c, in(c, w), o->dtype), r - 1, cs));
	if (HAS(w + 1))
		y = bin(c, PR_ADD, y, reshape(c, cast(c, in(c, w + 1), o->dtype), r - 1, cs));
	res[0] = y;
	if (n->nout == 3) {
		res[1] = squeeze_to(c, mu, node_out(c->g, n, 1));
		res[2] = squeeze_to(c, rstd, node_out(c->g, n, 2));
	}
}

/* Reductions; writes the IR node of each result into res. */
static void reduction(dctx *c, int *res)
{
	const coil_node *n = c->n;
	const coil_value *o = node_out(c->g, n, 0);
	unsigned mask;
	int keep;
	reduce_dims(c->g, n, &mask, &keep);
	if (c->cl) /* over H and W of an NHWC input: dims 1 and 2 of the channels-last frame */
		mask = 1u << 1 | 1u << 2;
	int x = in(c, 0), r;
	const coil_dtype t = compute_t(o->dtype); /* accumulators of bf16 and f16 are f32 */
	if (dtype_is_half(N(c, x)->dtype))
		x = cast(c, x, COIL_F32);
	switch (n->op) {
	case OP_SUM: case OP_SUM_DIM:
		r = reduce(c, RD_SUM, cast(c, x, t), mask, t);
		break;
	case OP_MEAN: case OP_MEAN_DIM:
		r = mean(c, cast(c, x, t), mask);
		break;
	case OP_AMAX: case OP_AMIN: case OP_MAX_ALL: case OP_MIN_ALL:
		r = reduce(c, n->op == OP_AMAX || n->op == OP_MAX_ALL ? RD_MAX : RD_MIN, x, mask, t);
		break;
	case OP_VAR_CORR: case OP_VAR_DIM: case OP_STD_CORR: case OP_STD_DIM: {
		const int cor = n->op == OP_VAR_CORR || n->op == OP_STD_CORR;
		x = cast(c, x, t);
		int s = reduce(c, RD_WM2, x, mask, t);
		double corr = cor ? (ARG(2).kind == ARG_INT ? (double)ARG(2).i : 1) : (ARG(2).i ? 1 : 0);
		int den = bin(c, PR_MAX, bin(c, PR_SUB, fill_dim(c, red_count(c, x, mask), t), num(c, corr, s)),
			      num(c, 0, s));
		r = bin(c, PR_DIV, s, den);
		if (n->op == OP_STD_CORR || n->op == OP_STD_DIM)
			r = un(c, PR_SQRT, r);
		break;
	}
	case OP_LOGSUMEXP: { /* as ATen: log(sum(exp(x - m))) + m, an infinite max m taken as 0 */
		x = cast(c, x, t);
		int mx = reduce(c, RD_MAX, x, mask, t);
		mx = where(c, cmp(c, PR_EQ, un(c, PR_ABS, mx), num(c, INFINITY, mx)), num(c, 0, mx), mx);
		r = bin(c, PR_ADD, un(c, PR_LOG, reduce(c, RD_SUM, un(c, PR_EXP, bin(c, PR_SUB, x, mx)), mask, t)), mx);
		break;
	}
	case OP_NORM: {
		double p = ARG(1).kind == ARG_SCALAR ? ARG(1).f : 2;
		x = cast(c, x, t);
		if (p == 1)
			r = reduce(c, RD_SUM, un(c, PR_ABS, x), mask, t);
		else
			r = un(c, PR_SQRT, reduce(c, RD_SUM, bin(c, PR_MUL, x, x), mask, t));
		break;
	}
	case OP_MAX_DIM:
		res[0] = squeeze_to(c, reduce(c, RD_MAX, x, mask, t), o);
		res[1] = squeeze_to(c, reduce(c, RD_ARGMAX, x, mask, COIL_I64), node_out(c->g, n, 1));
		return;
	case OP_ARGMAX:
		r = reduce(c, RD_ARGMAX, x, mask, COIL_I64);
		break;
	case OP_MIN_DIM: case OP_ARGMIN: {
		/* the first minimum of x is the first maximum of -x (NaN first as well); integers
		 * negated in i64, so that u8 and the most negative values of narrower types do not wrap */
		int nx = un(c, PR_NEG, dtype_is_float(N(c, x)->dtype) ? x : cast(c, x, COIL_I64));
		int am = reduce(c, RD_ARGMAX, nx, mask, COIL_I64);
		if (n->op == OP_ARGMIN) {
			r = am;
			break;
		}
		res[0] = squeeze_to(c, reduce(c, RD_MIN, x, mask, t), o);
		res[1] = squeeze_to(c, am, node_out(c->g, n, 1));
		return;
	}
	default:
		c->bad = 1;
		node_errf(c->err, n, "no reduction lowering");
		return;
	}
	res[0] = squeeze_to(c, r, o);
}

static int view(dctx *c, int k)
{
	const coil_node *n = c->n;
	const coil_value *o = node_out(c->g, n, k);
	int x = in(c, 0);
	ir_node p = {.op = IR_VIEW, .dtype = o->dtype, .nsrc = 1, .src = {x}, .rank = o->rank};
	memcpy(p.shape, o->shape, sizeof p.shape);
	switch (n->op) {
	case OP_PERMUTE: case OP_TRANSPOSE: case OP_T:
		p.sub = V_PERMUTE;
		view_perm(c->g, n, p.perm);
		return add(c, &p);
	case OP_EXPAND:
		p.sub = V_EXPAND;
		return add(c, &p);
	case OP_SLICE: case OP_SELECT: {
		coil_dim len;
		p.sub = V_SLICE;
		if (view_slice(c->g, n, &p.vdim, &p.start, &len, &p.step, c->err))
			return c->bad = 1, 0;
		p.rank = N(c, x)->rank;
		memcpy(p.shape, N(c, x)->shape, sizeof p.shape);
		p.shape[p.vdim] = len;
		int s = add(c, &p);
		return reshape(c, s, o->rank, o->shape);
	}
	case OP_PIXEL_SHUFFLE: case OP_PIXEL_UNSHUFFLE: {
		/* shuffle: [*, C, r, r, H, W] -> [*, C, H, r, W, r]; unshuffle the reverse */
		const int R = N(c, x)->rank, b = R - 3, up = n->op == OP_PIXEL_SHUFFLE;
		const int64_t rf = ARG(1).i;
		const coil_value *xv = &c->g->vals[ARG(0).v[0]];
		const coil_value *cs = up ? o : xv, *hw = up ? xv : o; /* the sides with C, and with H and W */
		coil_dim s6[COIL_MAX_RANK], t6[COIL_MAX_RANK];
		int perm[COIL_MAX_RANK];
		for (int i = 0; i < b; i++)
			s6[i] = t6[i] = xv->shape[i], perm[i] = i;
		const coil_dim C = cs->shape[R - 3], H = hw->shape[R - 2], W = hw->shape[R - 1], r = dim_const(rf);
		const coil_dim in6[5] = {C, r, r, H, W}, mid6[5] = {C, H, r, W, r};
		static const int fwd[5] = {0, 3, 1, 4, 2}, back[5] = {0, 2, 4, 1, 3};
		for (int i = 0; i < 5; i++) {
			s6[b + i] = up ? in6[i] : mid6[i];
			t6[b + i] = up ? mid6[i] : in6[i];
			perm[b + i] = b + (up ? fwd[i] : back[i]);
		}
		int v = reshape(c, x, b + 5, s6);
		ir_node q = {.op = IR_VIEW, .sub = V_PERMUTE, .dtype = o->dtype, .nsrc = 1, .src = {v}, .rank = b + 5};
		memcpy(q.shape, t6, sizeof(coil_dim) * (size_t)(b + 5));
		memcpy(q.perm, perm, sizeof(int) * (size_t)(b + 5));
		return reshape(c, add(c, &q), o->rank, o->shape);
	}
	case OP_CHANNEL_SHUFFLE: {
		/* [N, g, C/g, *] -> [N, C/g, g, *]; in the channels-last frame (c->cl: x is
		 * [N, H, W, C]) [N, H, W, g, C/g] -> [N, H, W, C/g, g] */
		const int R = N(c, x)->rank, cd = c->cl ? R - 1 : 1;
		coil_dim xs[COIL_MAX_RANK]; /* (add may move the nodes) */
		memcpy(xs, N(c, x)->shape, sizeof xs);
		int64_t ch = 0;
		dim_is_const(&xs[cd], &ch);
		const int64_t gr = ARG(1).i;
		coil_dim s5[COIL_MAX_RANK], t5[COIL_MAX_RANK];
		int perm[COIL_MAX_RANK];
		for (int i = 0, j = 0; i < R; i++, j++) {
			if (i == cd) {
				s5[j] = dim_const(gr), s5[j + 1] = dim_const(ch / gr);
				t5[j] = s5[j + 1], t5[j + 1] = s5[j];
				perm[j] = j + 1, perm[j + 1] = j;
				j++;
			} else {
				s5[j] = t5[j] = xs[i], perm[j] = j;
			}
		}
		int v = reshape(c, x, R + 1, s5);
		ir_node q = {.op = IR_VIEW, .sub = V_PERMUTE, .dtype = o->dtype, .nsrc = 1, .src = {v}, .rank = R + 1};
		memcpy(q.shape, t5, sizeof(coil_dim) * (size_t)(R + 1));
		memcpy(q.perm, perm, sizeof(int) * (size_t)(R + 1));
		int r = reshape(c, add(c, &q), R, xs);
		if (!c->cl)
			return r;
		/* a node of the frame's shape, so that a buffer of the result (a
		 * convolution's src, through reshapes: dense_src) is written along
		 * C, not along the permute's last dim of g */
		ir_node e = {.op = IR_VIEW, .sub = V_EXPAND, .dtype = o->dtype, .nsrc = 1, .src = {r}, .rank = R};
		memcpy(e.shape, xs, sizeof(coil_dim) * (size_t)R);
		return add(c, &e);
	}
	case OP_REPEAT: { /* [1, s0, 1, s1, ...] expanded to [k0, s0, k1, s1, ...], then merged */
		const int R = o->rank, lead = R - N(c, x)->rank;
		coil_dim s2[COIL_MAX_RANK], t2[COIL_MAX_RANK];
		for (int i = 0; i < R; i++) {
			s2[2 * i] = dim_const(1);
			s2[2 * i + 1] = t2[2 * i + 1] = i < lead ? dim_const(1) : N(c, x)->shape[i - lead];
			t2[2 * i] = ARG(1).dims[i];
		}
		int v = reshape(c, x, 2 * R, s2);
		ir_node q = {.op = IR_VIEW, .sub = V_EXPAND, .dtype = o->dtype, .nsrc = 1, .src = {v}, .rank = 2 * R};
		memcpy(q.shape, t2, sizeof(coil_dim) * (size_t)(2 * R));
		return reshape(c, add(c, &q), R, o->shape);
	}
	case OP_UNBIND: { /* result k: a slice of length 1 at k, the dim dropped */
		const int r = N(c, x)->rank, d = (int)(ARG(1).i < 0 ? ARG(1).i + r : ARG(1).i);
		p.sub = V_SLICE, p.vdim = d, p.start = dim_const(k), p.step = 1, p.rank = r;
		memcpy(p.shape, N(c, x)->shape, sizeof p.shape);
		p.shape[d] = dim_const(1);
		return reshape(c, add(c, &p), o->rank, o->shape);
	}
	case OP_SPLIT: case OP_UNSAFE_SPLIT: case OP_SPLIT_WITH_SIZES: {
		int d = (int)(ARG(2).i < 0 ? ARG(2).i + N(c, x)->rank : ARG(2).i);
		coil_dim at = dim_const(0);
		for (int j = 0; j < k; j++)
			dim_add(&at, &at, &node_out(c->g, n, j)->shape[d], c->err);
		p.sub = V_SLICE, p.vdim = d, p.start = at, p.step = 1;
		if (c->cl) /* along the channels: the frame's last dim (lower_dnnl.c's transparent) */
			p.vdim = 3, p.shape[1] = o->shape[2], p.shape[2] = o->shape[3], p.shape[3] = o->shape[1];
		return add(c, &p);
	}
	case OP_ALIAS: case OP_DETACH: case OP_CLONE: case OP_CONTIGUOUS: case OP_LIFT_FRESH_COPY:
	case OP_DROPOUT: case OP_NATIVE_DROPOUT:
		if (k == 1) { /* native_dropout's mask: all true */
			p.op = IR_FILL, p.nsrc = 0, p.fill = 1;
			return add(c, &p);
		}
		return x;
	default: /* reshape family, squeeze, unsqueeze */
		return reshape(c, x, o->rank, o->shape);
	}
}

/* Composites: normalization and softmax. */
static void composite(dctx *c, int *res)
{
	const coil_node *n = c->n;
	const coil_value *o0 = node_out(c->g, n, 0);
	const coil_value ot = {.dtype = compute_t(o0->dtype)}, *o = &ot; /* computed in o->dtype */
	int x = cast(c, in(c, 0), o->dtype), r = N(c, x)->rank;
	switch (n->op) {
	case OP_SOFTMAX_: case OP_SOFTMAX: case OP_LOG_SOFTMAX_: case OP_LOG_SOFTMAX: {
		int rr = r ? r : 1;
		int d = (int)(ARG(1).i < 0 ? ARG(1).i + rr : ARG(1).i);
		unsigned mask = r ? 1u << d : 0;
		int m = reduce(c, RD_MAX, x, mask, o->dtype);
		int sh = bin(c, PR_SUB, x, m), e = un(c, PR_EXP, sh);
		int s = reduce(c, RD_SUM, e, mask, o->dtype);
		if (n->op == OP_LOG_SOFTMAX || n->op == OP_LOG_SOFTMAX_)
			res[0] = bin(c, PR_SUB, sh, un(c, PR_LOG, s));
		else
			res[0] = bin(c, PR_DIV, e, s);
		return;
	}
	case OP_NATIVE_GROUP_NORM: {
		/* [N, C, ...] -> [N, G, C/G * ...], statistics over the last dim */
		const int64_t G = ARG(6).i;
		int64_t ch = 0;
		dim_is_const(&N(c, x)->shape[1], &ch);
		coil_dim gs[3] = {N(c, x)->shape[0], dim_const(G), dim_const(ch / G)}, xs[COIL_MAX_RANK];
		for (int i = 2; i < r; i++)
			dim_mul(&gs[2], &gs[2], &N(c, x)->shape[i], c->err);
		memcpy(xs, N(c, x)->shape, sizeof(coil_dim) * (size_t)r);
		int xg = reshape(c, x, 3, gs);
		int mu = reduce(c, RD_WMEAN, xg, 1u << 2, o->dtype), d = bin(c, PR_SUB, xg, mu);
		int var = bin(c, PR_DIV, reduce(c, RD_WM2, xg, 1u << 2, o->dtype), fill_dim(c, gs[2], o->dtype));
		int rstd = un(c, PR_RECIP, un(c, PR_SQRT, bin(c, PR_ADD, var, num(c, ARG(7).f, var))));
		norm_affine(c, res, reshape(c, bin(c, PR_MUL, d, rstd), r, xs), mu, rstd, 1);
		return;
	}
	case OP_QUANTIZE_PT: case OP_QUANTIZE_PT_T: case OP_QUANTIZE_PC:
	case OP_DEQUANTIZE_PT: case OP_DEQUANTIZE_PT_T: case OP_DEQUANTIZE_PC: {
		/* f32 math, as ATen: q = clamp(rint(x * (1.0f / s)) + zp), dq = (q - zp) * s */
		const int lo = op_quant_min_arg(n->op), dq = op_is_dequant(n->op);
		int s, z;
		if (!op_quant_tensor(n->op)) {
			const float sf = (float)ARG(1).f;
			s = fill(c, dq ? sf : 1.0f / sf, COIL_F32);
			z = fill(c, (double)ARG(2).i, COIL_F32);
		} else {
			coil_dim cs[COIL_MAX_RANK];
			int rk = 0;
			if (op_quant_pc(n->op)) { /* [C] -> [C, 1, ...] against dim axis */
				int a = (int)(ARG(3).i < 0 ? ARG(3).i + r : ARG(3).i);
				cs[0] = N(c, x)->shape[a];
				for (rk = 1; rk < r - a; rk++)
					cs[rk] = dim_const(1);
			}
			s = reshape(c, cast(c, in(c, 1), COIL_F32), rk, cs);
			z = reshape(c, cast(c, in(c, 2), COIL_F32), rk, cs);
			if (!dq)
				s = un(c, PR_RECIP, s);
		}
		if (dq) {
			res[0] = bin(c, PR_MUL, bin(c, PR_SUB, cast(c, in(c, 0), COIL_F32), z), s);
			return;
		}
		int q = bin(c, PR_ADD, un(c, PR_ROUND, bin(c, PR_MUL, cast(c, in(c, 0), COIL_F32), s)), z);
		q = bin(c, PR_MIN, bin(c, PR_MAX, q, fill(c, (double)ARG(lo).i, COIL_F32)), fill(c, (double)ARG(lo + 1).i, COIL_F32));
		res[0] = cast(c, q, (coil_dtype)ARG(lo + 2).i);
		return;
	}
	case OP_CHOOSE_QPARAMS: {
		/* f32 math, as PyTorch's observers (see ops.h) */
		const unsigned all = r ? (1u << r) - 1 : 0;
		const double qmin = (double)ARG(1).i, qmax = (double)ARG(2).i;
		int zero = fill(c, 0, COIL_F32);
		int lo = bin(c, PR_MIN, reduce(c, RD_MIN, x, all, COIL_F32), zero);
		int hi = bin(c, PR_MAX, reduce(c, RD_MAX, x, all, COIL_F32), zero);
		int s = bin(c, PR_DIV, bin(c, PR_SUB, hi, lo), fill(c, qmax - qmin, COIL_F32));
		s = bin(c, PR_MAX, s, fill(c, (float)ARG(3).f, COIL_F32));
		int z = bin(c, PR_SUB, fill(c, qmin, COIL_F32), un(c, PR_ROUND, bin(c, PR_DIV, lo, s)));
		z = bin(c, PR_MIN, bin(c, PR_MAX, z, fill(c, qmin, COIL_F32)), fill(c, qmax, COIL_F32));
		res[0] = squeeze_to(c, s, o0);
		res[1] = squeeze_to(c, cast(c, z, COIL_I64), node_out(c->g, n, 1));
		return;
	}
	case OP_GLU: {
		const int d = (int)(ARG(1).i < 0 ? ARG(1).i + r : ARG(1).i);
		coil_dim h = node_out(c->g, n, 0)->shape[d];
		ir_node p = {.op = IR_VIEW, .sub = V_SLICE, .dtype = o->dtype, .nsrc = 1, .src = {x}, .rank = r, .vdim = d,
			     .step = 1, .start = dim_const(0)};
		memcpy(p.shape, N(c, x)->shape, sizeof p.shape);
		p.shape[d] = h;
		int a = add(c, &p);
		p.start = h;
		int b = add(c, &p);
		res[0] = bin(c, PR_MUL, a, sigmoid(c, b));
		return;
	}
	case OP_PRELU: {
		int w = cast(c, in(c, 1), o->dtype);
		int64_t k;
		coil_dim cs[COIL_MAX_RANK];
		if (!N(c, w)->rank || (dim_is_const(&N(c, w)->shape[0], &k) && k == 1)) {
			w = reshape(c, w, 0, cs); /* one value for all */
		} else { /* one per channel: [C] -> [C, 1, ...] against dim 1 */
			cs[0] = N(c, x)->shape[1];
			for (int i = 1; i < r - 1; i++)
				cs[i] = dim_const(1);
			w = reshape(c, w, r - 1, cs);
		}
		res[0] = where(c, cmp(c, PR_GT, x, num(c, 0, x)), x, bin(c, PR_MUL, x, w));
		return;
	}
	case OP_LAYER_NORM: case OP_NATIVE_LAYER_NORM: {
		unsigned mask = 0;
		for (int i = r - ARG(1).n; i < r; i++)
			mask |= 1u << i;
		int mu = reduce(c, RD_WMEAN, x, mask, o->dtype), d = bin(c, PR_SUB, x, mu);
		int var = bin(c, PR_DIV, reduce(c, RD_WM2, x, mask, o->dtype), fill_dim(c, red_count(c, x, mask), o->dtype));
		int rstd = un(c, PR_RECIP, un(c, PR_SQRT, bin(c, PR_ADD, var, num(c, ARG(4).f, var))));
		int y = bin(c, PR_MUL, d, rstd);
		if (HAS(2))
			y = bin(c, PR_MUL, y, cast(c, in(c, 2), o->dtype));
		if (HAS(3))
			y = bin(c, PR_ADD, y, cast(c, in(c, 3), o->dtype));
		res[0] = y;
		if (n->nout == 3) {
			res[1] = squeeze_to(c, mu, node_out(c->g, n, 1)); /* cast to their dtype by the caller */
			res[2] = squeeze_to(c, rstd, node_out(c->g, n, 2));
		}
		return;
	}
	case OP_BATCH_NORM: case OP_NATIVE_BATCH_NORM: if (ARG(5).i) { /* the batch's statistics (instance norm) */
		unsigned mask = 0;
		for (int i = 0; i < r; i++)
			mask |= i == 1 ? 0 : 1u << i;
		int mu = reduce(c, RD_WMEAN, x, mask, o->dtype), d = bin(c, PR_SUB, x, mu);
		int var = bin(c, PR_DIV, reduce(c, RD_WM2, x, mask, o->dtype), fill_dim(c, red_count(c, x, mask), o->dtype));
		int rstd = un(c, PR_RECIP, un(c, PR_SQRT, bin(c, PR_ADD, var, num(c, ARG(7).f, var))));
		norm_affine(c, res, bin(c, PR_MUL, d, rstd), mu, rstd, 1);
		return;
	} else {
		coil_dim cs[COIL_MAX_RANK];
		cs[0] = N(c, x)->shape[c->cl ? r - 1 : 1];
		for (int i = 1; i < r - 1; i++)
			cs[i] = dim_const(1);
#define VEC(i) reshape(c, cast(c, in(c, i), o->dtype), c->cl ? 1 : r - 1, cs)
		int s = un(c, PR_RECIP, un(c, PR_SQRT, bin(c, PR_ADD, VEC(4), num(c, ARG(7).f, x))));
		if (HAS(1))
			s = bin(c, PR_MUL, s, VEC(1));
		int t = bin(c, PR_SUB, HAS(2) ? VEC(2) : num(c, 0, x), bin(c, PR_MUL, VEC(3), s));
#undef VEC
		res[0] = bin(c, PR_ADD, bin(c, PR_MUL, x, s), t);
		for (int k = 1; k < n->nout; k++) {
			const coil_value *ov = node_out(c->g, n, k);
			ir_node p = {.op = IR_FILL, .dtype = ov->dtype, .rank = ov->rank};
			memcpy(p.shape, ov->shape, sizeof p.shape);
			res[k] = add(c, &p);
		}
		return;
	}
	default:
		c->bad = 1;
		node_errf(c->err, n, "no composite lowering");
	}
}

int ir_scatter_fills_self(const coil_ir *ir, const coil_node *n)
{
	if (n->op != OP_SCATTER_ADD && n->op != OP_SCATTER_REDUCE && n->op != OP_INDEX_ADD && n->op != OP_INDEX_REDUCE &&
	    n->op != OP_GATHER_SCATTER)
		return 0;
	const ir_node *s = &ir->nodes[ir->val_node[n->args[0].v[0]]];
	const coil_value *o = node_out(ir->g, n, 0);
	return s->op == IR_FILL && !s->sub && s->dtype == o->dtype && !dtype_is_half(o->dtype) &&
	       s->rank == o->rank && dims_equal(s->shape, o->shape, o->rank);
}

/* Extern kernels: one IR node per result; inputs in xsrc (graph order), a
 * fill the kernel writes itself left out (ir_scatter_fills_self). */
static void extern_op(dctx *c, int *res)
{
	const coil_node *n = c->n;
	const op_info *oi = op_get(n->op);
	int cnt = 0, nx = 0;
	const int skip0 = ir_scatter_fills_self(c->ir, n);
	for (int a = 0; a < oi->nargs; a++)
		if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
			cnt += n->args[a].n;
	/* every tensor read (a cat of any number): the scheduler orders the kernel after them all */
	int *xs = arena_alloc(c->ir->arena, (size_t)(cnt ? cnt : 1) * sizeof(int));
	for (int a = 0; a < oi->nargs; a++)
		if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
			for (int k = 0; k < n->args[a].n; k++)
				if (n->args[a].v[k] >= 0 && !(a == 0 && skip0))
					xs[nx++] = c->ir->val_node[n->args[a].v[k]];
	for (int k = 0; k < n->nout; k++) {
		const coil_value *o = node_out(c->g, n, k);
		ir_node p = {.op = IR_EXTERN, .dtype = o->dtype, .rank = o->rank, .index = k, .nx = nx, .xsrc = xs};
		memcpy(p.shape, o->shape, sizeof p.shape);
		if (c->cl) /* (a cat along the channels) the frame's [N, H, W, C] */
			p.shape[1] = o->shape[2], p.shape[2] = o->shape[3], p.shape[3] = o->shape[1];
		res[k] = add(c, &p);
	}
}

coil_ir *ir_create(coil_graph *g, coil_err *err)
{
	coil_arena *a = arena_create();
	coil_ir *ir = a ? arena_alloc(a, sizeof *ir) : NULL;
	if (!ir) {
		arena_destroy(a);
		coil_err_oom(err);
		return NULL;
	}
	ir->arena = a;
	ir->g = g;
	ir->mb_join = -1;
	ir->val_node = arena_alloc(a, (size_t)(g->nvals + 1) * sizeof(int));
	ir->outs = arena_alloc(a, (size_t)(g->noutputs + 1) * sizeof(int));
	if (!ir->val_node || !ir->outs) {
		arena_destroy(a);
		coil_err_oom(err);
		return NULL;
	}
	return ir;
}

int ir_plan_dnnl(coil_ir *ir, coil_err *err)
{
	coil_err e = {0};
	ir->dn = dn_plan_graph(ir->g, ir->tune ? ir->tune->unfuse : NULL, ir->features, ir->arena, &e);
	if (!ir->dn && e.code != COIL_OK) {
		if (err)
			*err = e;
		return -1;
	}
	return 0;
}

/* The channels-last frame of node c->n (lower_dnnl.c's layout put it in NHWC): an NHWC
 * value's IR node is an [N, C, H, W] reshape of its [N, H, W, C] bytes, so reshaping it
 * back reaches them (a reshape of a reshape is one); a per-channel operand [N|1, C|1, 1, 1]
 * or [C|1, 1, 1] becomes [N|1, 1, 1, C|1] (resp. [1, 1, C|1]), the same bytes,
 * broadcasting along C.  (lower_dnnl.c's transparent() admits no other operand ranks.)
 * The operands' IR nodes are replaced in val_node (saved: value, node pairs) until
 * cl_leave. */
static int cl_enter(dctx *c, int **saved)
{
	const coil_node *n = c->n;
	const op_info *oi = op_get(n->op);
	const int bn = n->op == OP_NATIVE_BATCH_NORM || n->op == OP_BATCH_NORM;
	int ns = 0, cnt = 0;
	for (int a = 0; a < oi->nargs; a++)
		cnt += ARG(a).kind == ARG_TENSOR || ARG(a).kind == ARG_TENSORS ? ARG(a).n : 0;
	int *sv = *saved = arena_alloc(c->ir->arena, (size_t)(2 * cnt + 2) * sizeof(int));
	if (!sv)
		return c->bad = 1, coil_err_oom(c->err), 0;
	for (int a = 0; a < oi->nargs; a++) {
		if ((ARG(a).kind != ARG_TENSOR && ARG(a).kind != ARG_TENSORS) || (bn && a > 0) ||
		    (op_get(n->op)->kind == RED && a > 0))
			continue;
		for (int j = 0; j < ARG(a).n; j++) {
			const int v = ARG(a).v[j];
			if (v < 0 || !c->g->vals[v].rank)
				continue;
			int k;
			for (k = 0; k < ns && sv[2 * k] != v; k++)
				;
			if (k < ns)
				continue; /* (read twice) */
			const coil_value *val = &c->g->vals[v];
			const int r = val->rank;
			const coil_dim *d = val->shape;
			coil_dim s[4];
			if (r == 4) /* [n, c, h, w] -> [n, h, w, c] */
				s[0] = d[0], s[1] = d[2], s[2] = d[3], s[3] = d[1];
			else /* [c, h, w] -> [h, w, c] */
				s[0] = d[1], s[1] = d[2], s[2] = d[0];
			sv[2 * ns] = v, sv[2 * ns + 1] = c->ir->val_node[v];
			ns++;
			c->ir->val_node[v] = reshape(c, c->ir->val_node[v], r, s);
		}
	}
	return ns;
}

static void cl_leave(dctx *c, const int *saved, int ns)
{
	for (int k = 0; k < ns; k++)
		c->ir->val_node[saved[2 * k]] = saved[2 * k + 1];
}

int ir_decompose(coil_ir *ir, coil_err *err)
{
	coil_graph *g = ir->g;
	dctx c = {.ir = ir, .g = g, .err = err, .gnode = -1};
	for (int v = 0; v < g->nvals; v++) {
		coil_value *val = &g->vals[v];
		if (val->kind == VAL_NODE)
			continue;
		ir_node p = {.op = val->kind == VAL_INPUT ? IR_INPUT : val->kind == VAL_PARAM ? IR_PARAM : IR_CONST,
			     .dtype = val->dtype, .rank = val->rank, .index = val->index};
		memcpy(p.shape, val->shape, sizeof p.shape);
		ir->val_node[v] = add(&c, &p);
	}
	for (int i = 0; i < g->nnodes && !c.bad; i++) {
		coil_node *n = &g->nodes[i];
		/* one IR node per result: split and unbind may name hundreds */
		int *res = arena_alloc(ir->arena, (size_t)(n->nout > 64 ? n->nout : 64) * sizeof(int));
		c.n = n;
		c.gnode = i;
		const coil_value *o = node_out(g, n, 0);
		int *saved = NULL, nsaved = 0;
		c.cl = ir->dn && ir->dn->cl[i];
		/* a permute between the layouts (lower_dnnl.c's nhwc_permute): the same bytes */
		const int relabel = c.cl && n->op == OP_PERMUTE;
		c.cl &= !relabel;
		if (c.cl) /* the channels-last frame: operands reinterpreted, restored below */
			nsaved = cl_enter(&c, &saved);
		int dz = dn_decompose_node(ir, i, res, err); /* a oneDNN fusion ends or goes on here */
		if (dz < 0)
			goto fail;
		if (dz == 2)
			continue;
		switch (dz ? -1 : relabel ? -2 : (int)op_get(n->op)->kind) {
		case -1: break;
		case -2: res[0] = reshape(&c, in(&c, 0), o->rank, o->shape); break;
		case PW: res[0] = pointwise(&c, o->dtype); break;
		case RED: reduction(&c, res); break;
		case VIEW:
			for (int k = 0; k < n->nout; k++)
				res[k] = view(&c, k);
			break;
		case COMP: composite(&c, res); break;
		default: {
			double v;
			if (fill_value(n, &v)) {
				ir_node p = {.op = IR_FILL, .dtype = o->dtype, .rank = o->rank};
				p.fill = o->dtype == COIL_BOOL ? v != 0 : dtype_is_int(o->dtype) ? trunc(v)
					: dtype_round(o->dtype, v);
				memcpy(p.shape, o->shape, sizeof p.shape);
				res[0] = add(&c, &p);
			} else {
				extern_op(&c, res);
			}
		}
		}
		if (c.bad)
			goto fail;
		if (c.cl) { /* the result, as every NHWC value: NCHW-shaped over NHWC bytes (a split's each) */
			cl_leave(&c, saved, nsaved);
			const int nr = op_get(n->op)->nres < 0 ? n->nout : 1;
			for (int k = 0; k < nr; k++)
				if (n->outs[k] >= 0)
					res[k] = reshape(&c, res[k], node_out(g, n, k)->rank, node_out(g, n, k)->shape);
		}
		for (int k = 0; k < n->nout; k++) {
			const coil_value *ov = node_out(g, n, k);
			int r = cast(&c, res[k], ov->dtype);
			ir_node *rn = N(&c, r);
			/* results keep their declared shape (broadcast fills, etc.) */
			if (rn->rank != ov->rank || !dims_equal(rn->shape, ov->shape, ov->rank)) {
				ir_node p = {.op = IR_VIEW, .sub = V_EXPAND, .dtype = ov->dtype, .nsrc = 1, .src = {r},
					     .rank = ov->rank};
				memcpy(p.shape, ov->shape, sizeof p.shape);
				if (rn->op == IR_FILL && !rn->sub)
					p.op = IR_FILL, p.nsrc = 0, p.fill = rn->fill;
				r = add(&c, &p);
			}
			ir->val_node[n->outs[k]] = r;
		}
		if (c.bad)
			goto fail;
	}
	if (c.bad)
		goto fail;
	ir->nout = g->noutputs;
	for (int i = 0; i < g->noutputs; i++)
		ir->outs[i] = ir->val_node[g->outputs[i]];
	return 0;
fail:
	return err && !err->msg[0] ? coil_errf(err, "decompose failed") : -1;
}
