/* Reference interpreter.  Every value is held as a dense row-major array of
 * doubles, rounded to its dtype after each op, so each kernel is a plain loop
 * that reads what ATen's documentation says it computes. */
#include "common/interp.h"

#include <tgmath.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/infer.h"

/* Values are held as long double: its 64-bit mantissa holds every i64 exactly
 * as well as every float of the narrower types. */
typedef long double real;

typedef struct itensor {
	coil_dtype dtype;
	int rank;
	int64_t shape[COIL_MAX_RANK];
	int64_t numel;
	real *d;
} itensor;

typedef struct ictx {
	coil_graph *g;
	itensor *t; /* one per value */
	coil_err *err;
	const int64_t *syms; /* the symbols' values (bind_symbols) */
} ictx;

void tensor_free(coil_tensor *t)
{
	if (t) {
		free(t->data);
		t->data = NULL;
	}
}

/* Loads and stores that keep i64 exact; other dtypes go through dtype.c. */
static real ld_load(coil_dtype t, const void *p, size_t i)
{
	return t == COIL_I64 ? (real)((const int64_t *)p)[i] : (real)dtype_load(t, p, i);
}

static int64_t wrap64(real v)
{
	/* modulo 2^64, as integer arithmetic in ATen wraps */
	if (isnan(v))
		return 0;
	v = trunc(v);
	real m = 18446744073709551616.0L;
	v = fmod(v, m);
	if (v < 0)
		v += m;
	uint64_t u = v >= 9223372036854775808.0L ? (uint64_t)(v - 9223372036854775808.0L) + (1ull << 63) : (uint64_t)v;
	return (int64_t)u;
}

static void ld_store(coil_dtype t, void *p, size_t i, real v)
{
	if (t == COIL_I64)
		((int64_t *)p)[i] = wrap64(v);
	else if (t == COIL_I32 || t == COIL_I8 || t == COIL_U8)
		dtype_store(t, p, i, (double)(int64_t)wrap64(v));
	else
		dtype_store(t, p, i, (double)v);
}

/* Rounds v to what dtype t can hold. */
static real rnd(coil_dtype t, real v)
{
	switch (t) {
	case COIL_F64: return (double)v;
	case COIL_F32: return (float)v;
	case COIL_BOOL: return v != 0;
	case COIL_I64: return (real)wrap64(v);
	default: {
		union {
			double d;
			int64_t i;
		} u;
		ld_store(t, &u, 0, v);
		return ld_load(t, &u, 0);
	}
	}
}

#define IN(n, i) (&c->t[(n)->args[i].v[0]])
#define OUT(n, k) (&c->t[(n)->outs[k]])
#define HAS(n, i) ((n)->args[i].kind != ARG_NONE)

static int rterr(ictx *c, const coil_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rterr(ictx *c, const coil_node *n, const char *fmt, ...)
{
	char msg[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return node_errf(c->err, n, "%s", msg);
}

/* Contiguous strides of a shape. */
static void strides_of(const int64_t *shape, int rank, int64_t *st)
{
	int64_t s = 1;
	for (int i = rank - 1; i >= 0; i--) {
		st[i] = s;
		s *= shape[i];
	}
}

/* Strides of x as seen from an output of rank r under broadcasting. */
static void bcast_strides(const itensor *x, int r, const int64_t *oshape, int64_t *st)
{
	int64_t xs[COIL_MAX_RANK];
	strides_of(x->shape, x->rank, xs);
	for (int i = 0; i < r; i++) {
		int j = i - (r - x->rank);
		st[i] = j < 0 || (x->shape[j] == 1 && oshape[i] != 1) ? 0 : xs[j];
	}
}

/* Walks all indices of an output of shape/rank; offs[k] tracks the offset of
 * operand k with strides st[k]. */
typedef struct walker {
	int rank, nops;
	int64_t shape[COIL_MAX_RANK], idx[COIL_MAX_RANK];
	int64_t st[4][COIL_MAX_RANK];
	int64_t off[4];
} walker;

static void walk_next(walker *w)
{
	for (int i = w->rank - 1; i >= 0; i--) {
		for (int k = 0; k < w->nops; k++)
			w->off[k] += w->st[k][i];
		if (++w->idx[i] < w->shape[i])
			return;
		for (int k = 0; k < w->nops; k++)
			w->off[k] -= w->st[k][i] * w->shape[i];
		w->idx[i] = 0;
	}
}

/* --- pointwise --------------------------------------------------------------- */

static real sigmoid(real x)
{
	return 1 / (1 + exp(-x));
}

static real sarg(const coil_node *n, int i, real dflt)
{
	return n->args[i].kind == ARG_SCALAR ? n->args[i].f : dflt;
}

static real pw1(const coil_node *n, real x, coil_dtype t)
{
	switch (n->op) {
	case OP_RELU: return x > 0 ? x : (isnan(x) ? x : 0);
	case OP_GELU:
		if (!strcmp(n->args[1].s, "tanh"))
			return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
		return 0.5 * x * (1 + erf(x / sqrt(2)));
	case OP_SILU: return x * sigmoid(x);
	case OP_SIGMOID: return sigmoid(x);
	case OP_TANH: return tanh(x);
	case OP_HARDSWISH: return x * fmin(fmax(x + 3, 0), 6) / 6;
	case OP_HARDSIGMOID: return isnan(x) ? x : fmin(fmax(x + 3, 0), 6) / 6;
	case OP_HARDTANH: return isnan(x) ? x : fmin(fmax(x, sarg(n, 1, -1)), sarg(n, 2, 1));
	case OP_LEAKY_RELU: return x > 0 ? x : x * sarg(n, 1, 0.01);
	case OP_ELU: {
		real alpha = sarg(n, 1, 1), scale = sarg(n, 2, 1), is = sarg(n, 3, 1);
		return x > 0 ? x * scale : alpha * scale * (exp(x * is) - 1);
	}
	case OP_SOFTPLUS: { /* ATen: linear above threshold (in beta * x) */
		real beta = sarg(n, 1, 1), th = sarg(n, 2, 20);
		return x * beta > th ? x : log1p(exp(x * beta)) / beta;
	}
	case OP_MISH: return x * tanh(x > 20 ? x : log1p(exp(x)));
	case OP_EXP: return exp(x);
	case OP_LOG: return log(x);
	case OP_LOG1P: return log1p(x);
	case OP_SQRT: return sqrt(x);
	case OP_RSQRT: return 1 / sqrt(x);
	case OP_ERF: return erf(x);
	case OP_SIN: return sin(x);
	case OP_COS: return cos(x);
	case OP_RECIPROCAL: return 1 / x;
	case OP_NEG: return -x;
	case OP_ABS: return fabs(x);
	case OP_FLOOR: return floor(x);
	case OP_ROUND: return dtype_is_float(t) ? (t == COIL_F64 ? nearbyint((double)x) : (real)nearbyintf((float)x)) : x;
	case OP_CEIL: return ceil(x);
	case OP_LOGICAL_NOT: return x == 0;
	case OP_BITWISE_NOT: return t == COIL_BOOL ? x == 0 : (real)~(int64_t)x;
	case OP_CLAMP:
	case OP_CLAMP_MIN:
	case OP_CLAMP_MAX: {
		if (isnan(x))
			return x;
		int has_min = n->op != OP_CLAMP_MAX && n->args[1].kind == ARG_SCALAR;
		int has_max = n->op == OP_CLAMP_MAX ? 1 : n->op == OP_CLAMP && n->args[2].kind == ARG_SCALAR;
		real lo = n->args[1].f, hi = n->op == OP_CLAMP_MAX ? n->args[1].f : n->args[2].f;
		if (has_min)
			x = x < lo ? lo : x;
		if (has_max)
			x = x > hi ? hi : x;
		return x;
	}
	case OP_TO_COPY: return x;
	default: return NAN;
	}
}

static real floordiv(real a, real b)
{
	if (b == 0)
		return a / b;
	real m = fmod(a, b), q = (a - m) / b;
	if (m != 0 && ((b < 0) != (m < 0)))
		q -= 1;
	return q;
}

static real pw2(const coil_node *n, real a, real b, coil_dtype t)
{
	real alpha = 1;
	switch (n->op) {
	case OP_ADD: case OP_SUB: case OP_RSUB: case OP_ADD_S: case OP_SUB_S: case OP_RSUB_S:
		alpha = n->args[2].f;
		break;
	default:
		break;
	}
	switch (n->op) {
	case OP_ADD: case OP_ADD_S: return a + alpha * b;
	case OP_SUB: case OP_SUB_S: return a - alpha * b;
	case OP_RSUB: case OP_RSUB_S: return b - alpha * a;
	case OP_MUL: case OP_MUL_S: return a * b;
	case OP_DIV: case OP_DIV_S: return a / b;
	case OP_DIV_MODE:
		if (n->args[2].kind == ARG_NONE)
			return a / b;
		if (!dtype_is_float(t) && b == 0)
			return NAN; /* reported by the caller */
		if (!strcmp(n->args[2].s, "trunc"))
			return trunc(a / b);
		return dtype_is_float(t) ? floordiv(a, b) : floor(a / b);
	case OP_POW_TS: /* ATen computes x^0.5 and x^-0.5 as sqrt and rsqrt (pow(-inf, 0.5) is nan) */
		return b == 0.5 ? sqrt(a) : b == -0.5 ? 1 / sqrt(a) : pow(a, b);
	case OP_POW_TT: return pow(a, b);
	case OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
	case OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
	case OP_EQ: case OP_EQ_S: return a == b;
	case OP_NE: case OP_NE_S: return a != b;
	case OP_LT: case OP_LT_S: return a < b;
	case OP_LE: case OP_LE_S: return a <= b;
	case OP_GT: case OP_GT_S: return a > b;
	case OP_GE: case OP_GE_S: return a >= b;
	case OP_LOGICAL_AND: return a != 0 && b != 0;
	case OP_LOGICAL_OR: return a != 0 || b != 0;
	case OP_REMAINDER: case OP_REMAINDER_S: { /* ATen: fmod, then + b where the signs differ */
		real m = fmod(a, b);
		return m != 0 && ((b < 0) != (m < 0)) ? m + b : m;
	}
	default: break;
	}
	const int64_t x = (int64_t)a, y = (int64_t)b; /* bitwise ops: integers (bool: 0/1) */
	switch (n->op) {
	case OP_BITWISE_AND: case OP_BITWISE_AND_S: return (real)(x & y);
	case OP_BITWISE_OR: case OP_BITWISE_OR_S: return (real)(x | y);
	case OP_BITWISE_XOR: case OP_BITWISE_XOR_S: return (real)(x ^ y);
	case OP_LSHIFT: case OP_LSHIFT_S: case OP_LEFT_SHIFT: return (real)(y < 0 || y > 63 ? 0 : (int64_t)((uint64_t)x << y));
	case OP_RSHIFT: case OP_RSHIFT_S: case OP_RIGHT_SHIFT: return (real)(y < 0 || y > 63 ? (x < 0 ? -1 : 0) : x >> y);
	default: return NAN;
	}
}

/* The dtype operands are converted to before computing (ATen's common dtype). */
static coil_dtype compute_dtype(ictx *c, const coil_node *n)
{
	coil_dtype o = c->g->vals[n->outs[0]].dtype;
	switch (n->op) {
	case OP_EQ: case OP_EQ_S: case OP_NE: case OP_NE_S: case OP_LT: case OP_LT_S: case OP_LE: case OP_LE_S:
	case OP_GT: case OP_GT_S: case OP_GE: case OP_GE_S: {
		static const int idx[2] = {0, 1};
		int t = infer_result_type(c->g, n, idx, 2, NULL);
		return t < 0 ? COIL_F64 : (coil_dtype)t;
	}
	case OP_LOGICAL_AND: case OP_LOGICAL_OR: case OP_LOGICAL_NOT: return COIL_F64;
	default: return o;
	}
}

static int eval_pointwise(ictx *c, coil_node *n)
{
	itensor *o = OUT(n, 0);
	const op_info *oi = op_get(n->op);
	walker w = {.rank = o->rank};
	memcpy(w.shape, o->shape, sizeof w.shape);
	/* Operands: tensors in schema order; scalars taken from args. */
	int ops[3], nops = 0;
	for (int i = 0; i < oi->nargs && nops < 3; i++)
		if (n->args[i].kind == ARG_TENSOR)
			ops[nops++] = i;
	for (int k = 0; k < nops; k++)
		bcast_strides(IN(n, ops[k]), o->rank, o->shape, w.st[k]);
	w.nops = nops;
	coil_dtype ct = compute_dtype(c, n);
	int where = n->op == OP_WHERE, mfill = n->op == OP_MASKED_FILL || n->op == OP_MASKED_FILL_T;
	int binary = oi->nargs >= 2 && (n->args[1].kind == ARG_TENSOR || n->args[1].kind == ARG_SCALAR) &&
		     !where && !mfill && n->op != OP_CLAMP && n->op != OP_CLAMP_MIN && n->op != OP_CLAMP_MAX &&
		     n->op != OP_HARDTANH && n->op != OP_LEAKY_RELU && n->op != OP_ELU && n->op != OP_SOFTPLUS;
	int int_div = ((n->op == OP_DIV_MODE && HAS(n, 2)) || n->op == OP_REMAINDER || n->op == OP_REMAINDER_S) &&
		      !dtype_is_float(o->dtype);
	real sc = n->args[1].kind == ARG_SCALAR ? rnd(ct, n->args[1].is_int ? (real)n->args[1].i : (real)n->args[1].f) : 0;
	for (int64_t e = 0; e < o->numel; e++, walk_next(&w)) {
		real a = rnd(ct, IN(n, ops[0])->d[w.off[0]]), r;
		if (where) {
			r = a != 0 ? IN(n, 1)->d[w.off[1]] : IN(n, 2)->d[w.off[2]];
		} else if (mfill) {
			real m = IN(n, 1)->d[w.off[1]];
			r = m != 0 ? (n->op == OP_MASKED_FILL ? n->args[2].f : IN(n, 2)->d[w.off[2]]) : a;
		} else if (binary) {
			real b = n->args[1].kind == ARG_TENSOR ? rnd(ct, IN(n, 1)->d[w.off[1]]) : sc;
			if (int_div && b == 0)
				return rterr(c, n, "integer division by zero");
			r = pw2(n, a, b, ct);
		} else {
			r = pw1(n, a, ct);
		}
		o->d[e] = rnd(o->dtype, r);
	}
	return 0;
}

/* --- views and data movement ---------------------------------------------------- */

static int eval_view(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int64_t xs[COIL_MAX_RANK], st[COIL_MAX_RANK] = {0}, off = 0;
	strides_of(x->shape, x->rank, xs);
	switch (op_get(n->op)->kind == VIEW ? n->op : OP_CLONE) {
	case OP_PERMUTE: case OP_TRANSPOSE: case OP_T: {
		int perm[COIL_MAX_RANK];
		view_perm(c->g, n, perm);
		for (int i = 0; i < o->rank; i++)
			st[i] = xs[perm[i]];
		break;
	}
	case OP_EXPAND:
		bcast_strides(x, o->rank, o->shape, st);
		break;
	case OP_SLICE: case OP_SELECT: {
		/* static bounds resolved against the runtime size as Python slicing
		 * does; a size-expression start (taken as non-negative, as inference
		 * does) evaluated for these symbols and clamped to the size */
		int d = (int)(n->args[1].i < 0 ? n->args[1].i + x->rank : n->args[1].i);
		int64_t sz = x->shape[d], s0, step = 1;
		if (n->op == OP_SELECT) {
			s0 = n->args[2].i < 0 ? n->args[2].i + sz : n->args[2].i;
		} else if (n->args[2].kind == ARG_DIMS) {
			if (dim_eval(&n->args[2].dims[0], c->syms, &s0, c->err))
				return -1;
			s0 = s0 < 0 ? 0 : s0 > sz ? sz : s0;
			step = n->args[4].i;
		} else {
			s0 = n->args[2].kind == ARG_INT ? n->args[2].i : 0;
			s0 = s0 < 0 ? s0 + sz : s0;
			s0 = s0 < 0 ? 0 : s0 > sz ? sz : s0;
			step = n->args[4].i;
		}
		off = s0 * xs[d];
		for (int i = 0, r = 0; i < x->rank; i++) {
			if (i == d && n->op == OP_SELECT)
				continue;
			st[r++] = i == d ? xs[i] * step : xs[i];
		}
		break;
	}
	default: /* reshape family, squeeze, identity: same element order */
		memcpy(o->d, x->d, (size_t)o->numel * sizeof(real));
		if (n->nout == 2) /* native_dropout's mask */
			for (int64_t e = 0; e < OUT(n, 1)->numel; e++)
				OUT(n, 1)->d[e] = 1;
		return 0;
	}
	walker w = {.rank = o->rank, .nops = 1};
	memcpy(w.shape, o->shape, sizeof w.shape);
	memcpy(w.st[0], st, sizeof st);
	w.off[0] = off;
	for (int64_t e = 0; e < o->numel; e++, walk_next(&w))
		o->d[e] = x->d[w.off[0]];
	return 0;
}

/* Copies the block [lo, lo+len) of dim d of x into dim d of o at position at. */
static void copy_block(const itensor *x, itensor *o, int d, int64_t lo, int64_t len, int64_t at)
{
	int64_t outer = 1, xin = 1, oin = 1;
	for (int i = 0; i < d; i++)
		outer *= x->shape[i];
	for (int i = d + 1; i < x->rank; i++)
		xin *= x->shape[i];
	oin = xin;
	for (int64_t a = 0; a < outer; a++)
		memcpy(o->d + (a * o->shape[d] + at) * oin, x->d + (a * x->shape[d] + lo) * xin,
		       (size_t)(len * xin) * sizeof(real));
}

static int eval_cat(ictx *c, coil_node *n)
{
	itensor *o = OUT(n, 0);
	int d = (int)(n->args[1].i < 0 ? n->args[1].i + o->rank : n->args[1].i);
	int64_t at = 0;
	for (int k = 0; k < n->args[0].n; k++) {
		itensor *x = &c->t[n->args[0].v[k]];
		if (x->rank != o->rank)
			continue; /* skipped empty 1-D tensor */
		copy_block(x, o, d, 0, x->shape[d], at);
		at += x->shape[d];
	}
	return 0;
}

static int eval_pixel_shuffle(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int R = x->rank, up = n->op == OP_PIXEL_SHUFFLE;
	const int64_t r = n->args[1].i, C = o->shape[R - 3], H = o->shape[R - 2], W = o->shape[R - 1];
	const int64_t XC = x->shape[R - 3], XH = x->shape[R - 2], XW = x->shape[R - 1];
	const int64_t plane = C * H * W, nb = plane > 0 ? o->numel / plane : 0;
	int64_t e = 0;
	for (int64_t b = 0; b < nb; b++)
		for (int64_t ch = 0; ch < C; ch++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t w = 0; w < W; w++, e++) {
					int64_t sc, sh, sw; /* the source's channel, row, column */
					if (up)
						sc = ch * r * r + (h % r) * r + w % r, sh = h / r, sw = w / r;
					else
						sc = ch / (r * r), sh = h * r + ch % (r * r) / r, sw = w * r + ch % r;
					o->d[e] = x->d[((b * XC + sc) * XH + sh) * XW + sw];
				}
	return 0;
}

/* out channel i*g + j = x channel j*(C/g) + i, over [N, C, rest] */
static int eval_channel_shuffle(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int64_t g = n->args[1].i, C = x->shape[1], per = C / g;
	int64_t rest = 1;
	for (int i = 2; i < x->rank; i++)
		rest *= x->shape[i];
	for (int64_t b = 0; b < x->shape[0]; b++)
		for (int64_t ch = 0; ch < C; ch++) {
			const int64_t sc = (ch % g) * per + ch / g;
			for (int64_t e = 0; e < rest; e++)
				o->d[(b * C + ch) * rest + e] = x->d[(b * C + sc) * rest + e];
		}
	return 0;
}

static int eval_repeat(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int R = o->rank, lead = R - x->rank;
	int64_t xs[COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	strides_of(x->shape, x->rank, xs);
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t off = 0;
		for (int i = lead; i < R; i++)
			off += idx[i] % x->shape[i - lead] * xs[i - lead];
		o->d[e] = x->d[off];
		for (int i = R - 1; i >= 0 && ++idx[i] == o->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

static int eval_stack(ictx *c, coil_node *n)
{
	itensor *o = OUT(n, 0);
	const int K = n->args[0].n, d = (int)(n->args[1].i < 0 ? n->args[1].i + o->rank : n->args[1].i);
	int64_t outer = 1, inner = 1;
	for (int i = 0; i < d; i++)
		outer *= o->shape[i];
	for (int i = d + 1; i < o->rank; i++)
		inner *= o->shape[i];
	for (int k = 0; k < K; k++) {
		const itensor *x = &c->t[n->args[0].v[k]];
		for (int64_t a = 0; a < outer; a++)
			memcpy(o->d + (a * K + k) * inner, x->d + a * inner, (size_t)inner * sizeof(real));
	}
	return 0;
}

static int eval_unbind(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0);
	const int d = (int)(n->args[1].i < 0 ? n->args[1].i + x->rank : n->args[1].i);
	int64_t outer = 1, inner = 1;
	for (int i = 0; i < d; i++)
		outer *= x->shape[i];
	for (int i = d + 1; i < x->rank; i++)
		inner *= x->shape[i];
	for (int k = 0; k < n->nout; k++) {
		itensor *o = OUT(n, k);
		for (int64_t a = 0; a < outer; a++)
			memcpy(o->d + a * inner, x->d + (a * x->shape[d] + k) * inner, (size_t)inner * sizeof(real));
	}
	return 0;
}

static int eval_split(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0);
	int d = (int)(n->args[2].i < 0 ? n->args[2].i + x->rank : n->args[2].i);
	int64_t at = 0;
	for (int k = 0; k < n->nout; k++) {
		itensor *o = OUT(n, k);
		copy_block(x, o, d, at, o->shape[d], 0);
		at += o->shape[d];
	}
	return 0;
}

static int eval_pad(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const coil_arg *p = &n->args[1];
	int64_t lo[COIL_MAX_RANK] = {0}, ost[COIL_MAX_RANK];
	for (int k = 0; k < p->n / 2; k++) /* pads may be size expressions */
		if (dim_eval(&p->dims[2 * k], c->syms, &lo[x->rank - 1 - k], c->err))
			return -1;
	real v = rnd(o->dtype, n->args[2].f);
	for (int64_t e = 0; e < o->numel; e++)
		o->d[e] = v;
	strides_of(o->shape, o->rank, ost);
	walker w = {.rank = x->rank, .nops = 0};
	memcpy(w.shape, x->shape, sizeof w.shape);
	for (int64_t e = 0; e < x->numel; e++, walk_next(&w)) {
		int64_t off = 0;
		int inside = 1;
		for (int i = 0; i < x->rank; i++) {
			int64_t j = w.idx[i] + lo[i];
			if (j < 0 || j >= o->shape[i])
				inside = 0;
			off += j * ost[i];
		}
		if (inside)
			o->d[off] = x->d[e];
	}
	return 0;
}

static int eval_gather(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *ix = IN(n, 2), *o = OUT(n, 0);
	const int R = ix->rank, d = R ? (int)(n->args[1].i < 0 ? n->args[1].i + R : n->args[1].i) : 0;
	int64_t xs[COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	const int64_t X = x->rank ? x->shape[d] : 1;
	strides_of(x->shape, x->rank, xs);
	for (int64_t e = 0; e < ix->numel; e++) {
		int64_t k = (int64_t)ix->d[e], off = 0;
		if (k < 0 || k >= X)
			return rterr(c, n, "index %lld out of range for dim %d of size %lld", (long long)k, d, (long long)X);
		for (int i = 0; i < R && x->rank; i++)
			off += (i == d ? k : idx[i]) * xs[i];
		o->d[e] = x->d[off];
		for (int i = R - 1; i >= 0 && ++idx[i] == ix->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

/* coil.gather_scatter: out = self; for each edge e in order, row dst[e] of out
 * reduced with row src[e] of x times weight[e] (mean: divided by the count). */
static int eval_gather_scatter(ictx *c, coil_node *n)
{
	itensor *s = IN(n, 0), *x = IN(n, 1), *si = IN(n, 2), *di = IN(n, 3), *o = OUT(n, 0);
	itensor *w = HAS(n, 4) ? IN(n, 4) : NULL;
	const char *red = n->args[5].s;
	const int self_in = (int)n->args[6].i;
	const int64_t X = s->shape[0], NX = x->shape[0], E = di->numel, C = X ? s->numel / X : 0;
	for (int64_t e = 0; e < E; e++) {
		if (di->d[e] < 0 || di->d[e] >= X)
			return rterr(c, n, "index %lld out of range for dim 0 of size %lld", (long long)di->d[e], (long long)X);
		if (si->d[e] < 0 || si->d[e] >= NX)
			return rterr(c, n, "source index %lld out of range for %lld rows", (long long)si->d[e], (long long)NX);
	}
	memcpy(o->d, s->d, (size_t)o->numel * sizeof(real));
	int64_t *cnt = calloc((size_t)(X ? X : 1), sizeof *cnt);
	if (!cnt)
		return rterr(c, n, "out of memory");
	const int sum = !strcmp(red, "sum") || !strcmp(red, "mean"), prod = !strcmp(red, "prod"), mx = !strcmp(red, "amax");
	for (int64_t e = 0; e < E; e++) {
		const int64_t t = (int64_t)di->d[e], f = (int64_t)si->d[e];
		for (int64_t q = 0; q < C; q++) {
			real *a = &o->d[t * C + q], v = x->d[f * C + q] * (w ? w->d[e] : 1);
			if (!self_in && !cnt[t])
				*a = sum ? 0 : prod ? 1 : mx ? -INFINITY : INFINITY;
			*a = sum ? *a + v : prod ? *a * v : isnan(*a) || isnan(v) ? NAN : mx ? fmax(*a, v) : fmin(*a, v);
		}
		cnt[t]++;
	}
	if (!strcmp(red, "mean"))
		for (int64_t t = 0; t < X; t++)
			for (int64_t q = 0; q < C && cnt[t]; q++)
				o->d[t * C + q] = dtype_is_float(o->dtype) ? o->d[t * C + q] / (real)(cnt[t] + self_in)
									 : floor(o->d[t * C + q] / (real)(cnt[t] + self_in));
	for (int64_t e = 0; e < o->numel; e++)
		o->d[e] = rnd(o->dtype, o->d[e]);
	free(cnt);
	return 0;
}

/* scatter_add / scatter_reduce: index positions in order; for include_self=False
 * the targets hit start from the reduction's identity; mean divides by the
 * count (self counted when included), flooring for integers. */
static int eval_scatter(ictx *c, coil_node *n)
{
	if (n->op == OP_GATHER_SCATTER)
		return eval_gather_scatter(c, n);
	itensor *x = IN(n, 0), *ix = IN(n, 2), *src = IN(n, 3), *o = OUT(n, 0);
	const int ia = n->op == OP_INDEX_ADD || n->op == OP_INDEX_REDUCE; /* index 1-d along dim; positions over source */
	const int R = x->rank, d = (int)(n->args[1].i < 0 ? n->args[1].i + R : n->args[1].i);
	const char *red = n->op == OP_SCATTER_REDUCE || n->op == OP_INDEX_REDUCE ? n->args[4].s : "sum";
	const int self_in = (n->op != OP_SCATTER_REDUCE && n->op != OP_INDEX_REDUCE) || n->args[5].i;
	const real alpha = n->op == OP_INDEX_ADD && n->args[4].kind == ARG_SCALAR ? (n->args[4].is_int ? (real)n->args[4].i : n->args[4].f) : 1;
	const itensor *walk = ia ? src : ix; /* the positions */
	int64_t xs[COIL_MAX_RANK], ss[COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	strides_of(x->shape, R, xs);
	strides_of(src->shape, R, ss);
	for (int64_t e = 0; e < ix->numel; e++)
		if ((int64_t)ix->d[e] < 0 || (int64_t)ix->d[e] >= x->shape[d])
			return rterr(c, n, "index %lld out of range for dim %d of size %lld", (long long)ix->d[e], d,
				     (long long)x->shape[d]);
	memcpy(o->d, x->d, (size_t)o->numel * sizeof(real));
	int64_t *cnt = calloc((size_t)(o->numel ? o->numel : 1), sizeof *cnt);
	if (!cnt)
		return rterr(c, n, "out of memory");
	const int sum = !strcmp(red, "sum") || !strcmp(red, "mean"), prod = !strcmp(red, "prod"), mx = !strcmp(red, "amax");
	for (int pass = self_in; pass < 2; pass++) /* pass 0: identities at the targets hit */
		for (int64_t e = 0; e < walk->numel; e++) {
			int64_t to = 0, from = 0, k = (int64_t)ix->d[ia ? idx[d] : e];
			for (int i = 0; i < R; i++) {
				to += (i == d ? k : idx[i]) * xs[i];
				from += idx[i] * ss[i];
			}
			real v = src->d[from] * alpha;
			if (pass == 0)
				o->d[to] = sum ? 0 : prod ? 1 : mx ? -INFINITY : INFINITY;
			else {
				cnt[to]++;
				o->d[to] = sum ? o->d[to] + v : prod ? o->d[to] * v
					 : isnan(o->d[to]) || isnan(v) ? NAN
					 : mx ? (v > o->d[to] ? v : o->d[to]) : (v < o->d[to] ? v : o->d[to]);
			}
			for (int i = R - 1; i >= 0 && ++idx[i] == walk->shape[i]; i--)
				idx[i] = 0;
		}
	if (!strcmp(red, "mean"))
		for (int64_t e = 0; e < o->numel; e++) {
			int64_t k = cnt[e] + self_in;
			if (cnt[e])
				o->d[e] = dtype_is_float(o->dtype) ? o->d[e] / (real)k : floor(o->d[e] / (real)k);
		}
	for (int64_t e = 0; e < o->numel; e++)
		o->d[e] = rnd(o->dtype, o->d[e]);
	free(cnt);
	return 0;
}

/* index.Tensor: result element at (.., B coordinates, ..) reads self with each
 * indexed dim at its index tensor's value there (broadcast; negative counts
 * from the end), every other dim at its own result coordinate. */
static int eval_index_t(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const coil_arg *ia = &n->args[1];
	index_plan p;
	coil_err e = {0};
	if (index_plan_of(c->g, n, &p, &e))
		return rterr(c, n, "%s", e.msg);
	int64_t xs[COIL_MAX_RANK], ist[COIL_MAX_RANK][COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	strides_of(x->shape, x->rank, xs);
	for (int k = 0; k < ia->n; k++) /* index k's strides over B (0 where broadcast) */
		if (ia->v[k] >= 0)
			bcast_strides(&c->t[ia->v[k]], p.rb, o->shape + p.bpos, ist[k]);
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t off = 0;
		for (int d = 0; d < x->rank; d++) {
			int64_t v;
			if (p.keep[d] >= 0) {
				v = idx[p.keep[d]];
			} else {
				int64_t io = 0;
				for (int i = 0; i < p.rb; i++)
					io += idx[p.bpos + i] * ist[d][i];
				v = (int64_t)c->t[ia->v[d]].d[io];
				if (v < -x->shape[d] || v >= x->shape[d])
					return rterr(c, n, "index %lld out of range for dim %d of size %lld", (long long)v, d,
						     (long long)x->shape[d]);
				v += v < 0 ? x->shape[d] : 0;
			}
			off += v * xs[d];
		}
		o->d[e] = x->d[off];
		for (int i = o->rank - 1; i >= 0 && ++idx[i] == o->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

static int eval_index_select(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *ix = IN(n, 2), *o = OUT(n, 0);
	const int d = (int)(n->args[1].i < 0 ? n->args[1].i + x->rank : n->args[1].i);
	int64_t outer = 1, inner = 1, X = x->shape[d], m = ix->numel;
	for (int i = 0; i < d; i++)
		outer *= x->shape[i];
	for (int i = d + 1; i < x->rank; i++)
		inner *= x->shape[i];
	for (int64_t e = 0; e < m; e++)
		if ((int64_t)ix->d[e] < 0 || (int64_t)ix->d[e] >= X)
			return rterr(c, n, "index %lld out of range for dim %d of size %lld", (long long)ix->d[e], d,
				     (long long)X);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t e = 0; e < m; e++)
			memcpy(o->d + (a * m + e) * inner, x->d + (a * X + (int64_t)ix->d[e]) * inner,
			       (size_t)inner * sizeof(real));
	return 0;
}

static int eval_embedding(ictx *c, coil_node *n)
{
	itensor *w = IN(n, 0), *ix = IN(n, 1), *o = OUT(n, 0);
	int64_t D = w->shape[1];
	for (int64_t e = 0; e < ix->numel; e++) {
		int64_t i = (int64_t)ix->d[e];
		if (i < 0 || i >= w->shape[0])
			return rterr(c, n, "index %lld out of range for %lld embeddings", (long long)i,
				     (long long)w->shape[0]);
		memcpy(o->d + e * D, w->d + i * D, (size_t)D * sizeof(real));
	}
	return 0;
}

/* [outer, L, inner] around dim d of x. */
static void around(const itensor *x, int d, int64_t *outer, int64_t *len, int64_t *inner)
{
	*outer = *inner = 1;
	*len = x->rank ? x->shape[d] : 1;
	for (int i = 0; i < x->rank; i++)
		if (i < d)
			*outer *= x->shape[i];
		else if (i > d)
			*inner *= x->shape[i];
}

static int wrapd(const itensor *x, int64_t d) { return (int)(d < 0 ? d + (x->rank ? x->rank : 1) : d); }

/* _embedding_bag: bag b sums (mean, max) the weight rows of indices
 * [offsets[b], offsets[b+1]) (the last bag to the end, unless the offsets
 * hold it), padding_idx skipped; an empty bag is 0.  offset2bag, bag_size and
 * max_indices as ATen's forward gives them. */
static int eval_embedding_bag(ictx *c, coil_node *n)
{
	itensor *w = IN(n, 0), *ix = IN(n, 1), *of = IN(n, 2), *o = OUT(n, 0);
	itensor *psw = HAS(n, 6) ? IN(n, 6) : NULL;
	const int64_t mode = n->args[4].i, pad = n->args[8].i, V = w->shape[0], D = w->shape[1], m = ix->numel;
	const int64_t B = o->shape[0], nof = of->numel;
	for (int64_t e = 0; e < m; e++)
		if (ix->d[e] < 0 || ix->d[e] >= V)
			return rterr(c, n, "index %lld out of range for %lld embeddings", (long long)ix->d[e], (long long)V);
	for (int64_t b = 0; b < nof; b++)
		if (of->d[b] < (b ? of->d[b - 1] : 0) || of->d[b] > m || (b == 0 && of->d[0] != 0))
			return rterr(c, n, "offsets[%lld] = %lld: offsets must start at 0 and not decrease up to %lld", (long long)b,
				     (long long)of->d[b], (long long)m);
	for (int k = 1; k < n->nout; k++)
		memset(OUT(n, k)->d, 0, (size_t)OUT(n, k)->numel * sizeof(real));
	for (int64_t b = 0; b < B; b++) {
		const int64_t lo = (int64_t)of->d[b], hi = b + 1 < nof ? (int64_t)of->d[b + 1] : m;
		int64_t cnt = 0;
		for (int64_t j = 0; j < D; j++) {
			real acc = mode == 2 ? -INFINITY : 0;
			int64_t arg = -1;
			cnt = 0;
			for (int64_t e = lo; e < hi; e++) {
				const int64_t k = (int64_t)ix->d[e];
				if (k == pad)
					continue;
				real v = w->d[k * D + j] * (psw ? psw->d[e] : 1);
				cnt++;
				if (mode == 2) {
					if (arg < 0 || v > acc || isnan(v))
						acc = v, arg = k;
				} else {
					acc += v;
				}
			}
			if (mode == 1)
				acc = cnt ? acc / (real)cnt : 0;
			if (mode == 2 && arg < 0)
				acc = 0;
			o->d[b * D + j] = rnd(o->dtype, acc);
			if (mode == 2 && n->nout > 3)
				OUT(n, 3)->d[b * D + j] = (real)(arg < 0 ? 0 : arg);
		}
		if (n->nout > 2 && b < OUT(n, 2)->numel)
			OUT(n, 2)->d[b] = mode ? (real)cnt : 0;
		if (mode == 1 && n->nout > 3)
			OUT(n, 3)->d[b] = (real)cnt;
	}
	if (n->nout > 1 && mode)
		for (int64_t b = 0; b < nof; b++)
			for (int64_t e = (int64_t)of->d[b]; e < (b + 1 < nof ? (int64_t)of->d[b + 1] : m); e++)
				OUT(n, 1)->d[e] = (real)b;
	return 0;
}

/* coil.sparse_mm_reduce: row i reduces values[k] * other[col[k]] over
 * k in [crow[i], crow[i+1]) (empty rows 0). */
static int eval_spmm(ictx *c, coil_node *n)
{
	itensor *cr = IN(n, 0), *co = IN(n, 1), *d = IN(n, 3), *o = OUT(n, 0);
	itensor *v = HAS(n, 2) ? IN(n, 2) : NULL;
	const char *red = n->args[4].s;
	const int64_t R = o->shape[0], F = o->shape[1], C = d->shape[0], nnz = co->numel;
	const int mx = !strcmp(red, "amax"), mn = !strcmp(red, "amin");
	for (int64_t i = 0; i <= R; i++)
		if (cr->d[i] < (i ? cr->d[i - 1] : 0) || cr->d[i] > nnz || (i == 0 && cr->d[0] != 0))
			return rterr(c, n, "crow_indices[%lld] = %lld: must start at 0 and not decrease up to %lld", (long long)i,
				     (long long)cr->d[i], (long long)nnz);
	for (int64_t k = 0; k < nnz; k++)
		if (co->d[k] < 0 || co->d[k] >= C)
			return rterr(c, n, "col_indices[%lld] = %lld out of range for %lld rows of other", (long long)k,
				     (long long)co->d[k], (long long)C);
	for (int64_t i = 0; i < R; i++) {
		const int64_t lo = (int64_t)cr->d[i], hi = (int64_t)cr->d[i + 1];
		for (int64_t j = 0; j < F; j++) {
			real acc = 0;
			for (int64_t k = lo; k < hi; k++) {
				real x = (v ? v->d[k] : 1) * d->d[(int64_t)co->d[k] * F + j];
				acc = k == lo ? x : mx ? (isnan(acc) || isnan(x) ? NAN : fmax(acc, x))
					   : mn ? (isnan(acc) || isnan(x) ? NAN : fmin(acc, x)) : acc + x;
			}
			if (!strcmp(red, "mean") && hi > lo)
				acc /= (real)(hi - lo);
			o->d[i * F + j] = rnd(o->dtype, acc);
		}
	}
	return 0;
}

static real isig(real x) { return 1 / (1 + exp(-x)); }

/* coil.lstm / gru / rnn_tanh / rnn_relu, as PyTorch computes them (gate order i, f, g, o; r, z, n). */
static int eval_rnn(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int lstm = n->op == OP_LSTM, L = (int)n->args[4].i, D = n->args[5].i ? 2 : 1, bf = (int)n->args[6].i;
	const int nb = n->args[3].i ? 4 : 2, G = op_rnn_gates(n->op), kind = op_rnn_kind(n->op);
	const coil_arg *ps = &n->args[2];
	const int proj = lstm && ps->n == L * D * (nb + 1), np = nb + proj;
	const itensor *h0 = lstm ? &c->t[n->args[1].v[0]] : IN(n, 1), *c0 = lstm ? &c->t[n->args[1].v[1]] : NULL;
	const itensor *len = n->args[7].kind == ARG_TENSOR ? IN(n, 7) : NULL;
	const int64_t T = x->shape[bf ? 1 : 0], B = x->shape[bf ? 0 : 1], H = c->t[ps->v[0]].shape[0] / G;
	const int64_t HO = h0->shape[2], DH = D * HO;
	for (int64_t b = 0; len && b < B; b++)
		if (len->d[b] < 1 || len->d[b] > T)
			return rterr(c, n, "lengths[%lld] is %lld, outside [1, %lld] (the sequence's steps)", (long long)b,
				     (long long)len->d[b], (long long)T);
	const int64_t wide = x->shape[2] > DH ? x->shape[2] : DH; /* the input's features, then a layer's */
	real *seq = malloc((size_t)(T * B * wide + 1) * sizeof *seq), *nxt = malloc((size_t)(T * B * wide + 1) * sizeof *nxt);
	real *h = malloc((size_t)(B * HO + 1) * sizeof *h), *cs = malloc((size_t)(B * H + 1) * sizeof *cs);
	real *gv = malloc((size_t)(G * H + 1) * sizeof *gv), *hv = malloc((size_t)(G * H + 1) * sizeof *hv);
	real *hf = malloc((size_t)(H + 1) * sizeof *hf);
	if (!seq || !nxt || !h || !cs || !gv || !hv || !hf) {
		free(seq), free(nxt), free(h), free(cs), free(gv), free(hv), free(hf);
		return rterr(c, n, "out of memory");
	}
	int64_t inf = x->shape[2];
	for (int64_t t = 0; t < T; t++) /* seq: the layer's input, [T, B, features] */
		for (int64_t b = 0; b < B; b++)
			for (int64_t i = 0; i < inf; i++)
				seq[(t * B + b) * inf + i] = x->d[((bf ? b * T + t : t * B + b)) * inf + i];
	for (int l = 0; l < L; l++) {
		for (int d = 0; d < D; d++) {
			const int k = l * D + d;
			const real *wih = c->t[ps->v[k * np]].d, *whh = c->t[ps->v[k * np + 1]].d;
			const real *bih = nb == 4 ? c->t[ps->v[k * np + 2]].d : NULL, *bhh = nb == 4 ? c->t[ps->v[k * np + 3]].d : NULL;
			const real *whr = proj ? c->t[ps->v[k * np + np - 1]].d : NULL;
			for (int64_t e = 0; e < B * HO; e++)
				h[e] = h0->d[k * B * HO + e];
			for (int64_t e = 0; e < B * H; e++)
				cs[e] = lstm ? c0->d[k * B * H + e] : 0;
			for (int64_t s = 0; s < T; s++) {
				const int64_t t = d ? T - 1 - s : s;
				for (int64_t b = 0; b < B; b++) {
					real *y = nxt + (t * B + b) * DH + d * HO;
					if (len && t >= (int64_t)len->d[b]) { /* padding: no step, a zero output */
						for (int64_t j = 0; j < HO; j++)
							y[j] = 0;
						continue;
					}
					const real *xt = seq + (t * B + b) * inf;
					for (int64_t q = 0; q < G * H; q++) {
						real a = bih ? bih[q] : 0, e = bhh ? bhh[q] : 0;
						for (int64_t i = 0; i < inf; i++)
							a += wih[q * inf + i] * xt[i];
						for (int64_t i = 0; i < HO; i++)
							e += whh[q * HO + i] * h[b * HO + i];
						gv[q] = a, hv[q] = e;
					}
					for (int64_t j = 0; j < H; j++) {
						real *hb = &h[b * HO + j], *cb = &cs[b * H + j];
						if (lstm) {
							*cb = isig(gv[H + j] + hv[H + j]) * *cb +
							      isig(gv[j] + hv[j]) * tanh(gv[2 * H + j] + hv[2 * H + j]);
							hf[j] = isig(gv[3 * H + j] + hv[3 * H + j]) * tanh(*cb);
							if (!proj)
								*hb = hf[j];
						} else if (kind >= 2) { /* tanh or relu of the sum */
							real a = gv[j] + hv[j];
							*hb = kind == 2 ? tanh(a) : a > 0 ? a : (isnan(a) ? a : 0);
						} else {
							real r = isig(gv[j] + hv[j]), z = isig(gv[H + j] + hv[H + j]);
							real nn = tanh(gv[2 * H + j] + r * hv[2 * H + j]);
							*hb = (1 - z) * nn + z * *hb;
						}
					}
					for (int64_t j = 0; proj && j < HO; j++) { /* h = w_hr (o * tanh c) */
						real a = 0;
						for (int64_t i = 0; i < H; i++)
							a += whr[j * H + i] * hf[i];
						h[b * HO + j] = a;
					}
					for (int64_t j = 0; j < HO; j++)
						y[j] = h[b * HO + j];
				}
			}
			for (int64_t e = 0; e < B * HO; e++)
				OUT(n, 1)->d[k * B * HO + e] = rnd(COIL_F32, h[e]);
			for (int64_t e = 0; lstm && e < B * H; e++)
				OUT(n, 2)->d[k * B * H + e] = rnd(COIL_F32, cs[e]);
		}
		real *tmp = seq;
		seq = nxt, nxt = tmp;
		inf = DH;
	}
	for (int64_t t = 0; t < T; t++)
		for (int64_t b = 0; b < B; b++)
			for (int64_t j = 0; j < DH; j++)
				o->d[(bf ? b * T + t : t * B + b) * DH + j] = rnd(COIL_F32, seq[(t * B + b) * DH + j]);
	free(seq), free(nxt), free(h), free(cs), free(gv), free(hv), free(hf);
	return 0;
}

static int eval_tri(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int64_t R = x->shape[x->rank - 2], C = x->shape[x->rank - 1], dg = n->args[1].i;
	for (int64_t e = 0; e < x->numel; e++) {
		const int64_t j = e % C, i = e / C % R;
		o->d[e] = (n->op == OP_TRIL ? j - i <= dg : j - i >= dg) ? x->d[e] : 0;
	}
	return 0;
}

/* cumsum: in f64 (floats: ATen's CPU accumulator) or i64, each partial sum rounded out. */
static int eval_guard(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *v = IN(n, 1), *o = OUT(n, 0);
	if (v->d[0] != (real)n->args[2].i)
		return rterr(c, n, "the graph was exported for the value %lld here, this run has %lld: export it again "
			     "for this input", (long long)n->args[2].i, (long long)v->d[0]);
	for (int64_t e = 0; e < x->numel; e++)
		o->d[e] = x->d[e];
	return 0;
}

/* coil.mb_join is the compiler's own (a microbatched run's join): never interpreted */
static int eval_mb_join(ictx *c, coil_node *n)
{
	return rterr(c, n, "coil.mb_join is internal to the compiler");
}

static int eval_cumsum(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int64_t outer, L, inner;
	around(x, wrapd(x, n->args[1].i), &outer, &L, &inner);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			real acc = 0;
			for (int64_t j = 0; j < L; j++) {
				const int64_t e = (a * L + j) * inner + b;
				acc = rnd(dtype_is_float(o->dtype) ? COIL_F64 : COIL_I64, acc + rnd(o->dtype, x->d[e]));
				o->d[e] = rnd(o->dtype, acc);
			}
		}
	return 0;
}

static int eval_prod(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int64_t outer = 1, L = x->numel, inner = 1;
	if (n->op == OP_PROD_DIM)
		around(x, wrapd(x, n->args[1].i), &outer, &L, &inner);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			real acc = 1;
			for (int64_t j = 0; j < L; j++)
				acc = dtype_is_float(o->dtype) ? acc * rnd(o->dtype, x->d[(a * L + j) * inner + b])
							: (real)(int64_t)((uint64_t)(int64_t)acc *
									  (uint64_t)(int64_t)x->d[(a * L + j) * inner + b]);
			o->d[a * inner + b] = rnd(o->dtype, acc);
		}
	return 0;
}

/* sort and topk: positions ordered by value (ascending, or descending), NaN
 * above every number, ties by position: one total order, so the result does
 * not depend on the algorithm. */
typedef struct sort_ctx {
	const real *keys;
	int desc;
} sort_ctx;

static int sort_cmp(const void *pa, const void *pb, void *ctx)
{
	const sort_ctx *s = ctx;
	const int64_t i = *(const int64_t *)pa, j = *(const int64_t *)pb;
	const real a = s->keys[i], b = s->keys[j];
	const int na = isnan(a), nb = isnan(b);
	int r = na != nb ? (na ? 1 : -1) : na || a == b ? 0 : a < b ? -1 : 1;
	if (s->desc)
		r = -r;
	return r ? r : i < j ? -1 : i > j;
}

static int eval_sort(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *v = OUT(n, 0), *ix = OUT(n, 1);
	const int topk = n->op == OP_TOPK;
	const int d = wrapd(x, n->args[topk || n->op == OP_SORT_STABLE ? 2 : 1].i);
	const int desc = topk ? (int)n->args[3].i : (int)n->args[n->op == OP_SORT ? 2 : 3].i;
	int64_t outer, L, inner, K;
	around(x, d, &outer, &L, &inner);
	K = topk ? (v->rank ? v->shape[d] : v->numel) : L;
	real *keys = malloc((size_t)(L ? L : 1) * sizeof *keys);
	int64_t *pos = malloc((size_t)(L ? L : 1) * sizeof *pos);
	if (!keys || !pos) {
		free(keys);
		free(pos);
		return rterr(c, n, "out of memory");
	}
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			for (int64_t j = 0; j < L; j++)
				keys[j] = x->d[(a * L + j) * inner + b], pos[j] = j;
			sort_ctx sc = {.keys = keys, .desc = desc};
			qsort_r(pos, (size_t)L, sizeof *pos, sort_cmp, &sc);
			for (int64_t j = 0; j < K; j++) {
				v->d[(a * K + j) * inner + b] = keys[pos[j]];
				ix->d[(a * K + j) * inner + b] = (real)pos[j];
			}
		}
	free(keys);
	free(pos);
	return 0;
}

static int eval_roll(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const coil_arg *sh = &n->args[1], *dm = &n->args[2];
	int64_t shift[COIL_MAX_RANK] = {0}, st[COIL_MAX_RANK];
	if (dm->n == 0) { /* roll the flattened tensor */
		int64_t s = x->numel ? ((sh->ints[0] % x->numel) + x->numel) % x->numel : 0;
		for (int64_t e = 0; e < x->numel; e++)
			o->d[(e + s) % x->numel] = x->d[e];
		return 0;
	}
	for (int k = 0; k < dm->n; k++) {
		int d = (int)(dm->ints[k] < 0 ? dm->ints[k] + x->rank : dm->ints[k]);
		shift[d] += sh->ints[k];
	}
	strides_of(x->shape, x->rank, st);
	walker w = {.rank = x->rank};
	memcpy(w.shape, x->shape, sizeof w.shape);
	for (int64_t e = 0; e < x->numel; e++, walk_next(&w)) {
		int64_t off = 0;
		for (int i = 0; i < x->rank; i++)
			off += (((w.idx[i] + shift[i]) % x->shape[i] + x->shape[i]) % x->shape[i]) * st[i];
		o->d[off] = x->d[e];
	}
	return 0;
}

static int eval_fill(ictx *c, coil_node *n)
{
	itensor *o = OUT(n, 0);
	double f = 0;
	fill_value(n, &f);
	real v = rnd(o->dtype, f);
	for (int64_t e = 0; e < o->numel; e++)
		o->d[e] = v;
	return 0;
}

/* slice_scatter / select_scatter: self, then src (converted) over the region
 * the slice reads. */
static int eval_slice_scatter(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *s = IN(n, 1), *o = OUT(n, 0);
	int d;
	coil_dim start, len;
	int64_t step, s0, outer = 1, inner = 1;
	if (view_slice(c->g, n, &d, &start, &len, &step, c->err) || dim_eval(&start, c->syms, &s0, c->err))
		return -1;
	for (int64_t e = 0; e < o->numel; e++)
		o->d[e] = x->d[e];
	for (int i = 0; i < d; i++)
		outer *= x->shape[i];
	for (int i = d + 1; i < x->rank; i++)
		inner *= x->shape[i];
	const int64_t D = x->shape[d], L = n->op == OP_SLICE_SCATTER ? s->shape[d] : 1;
	for (int64_t a = 0; a < outer; a++)
		for (int64_t j = 0; j < L; j++)
			for (int64_t k = 0; k < inner; k++)
				o->d[(a * D + s0 + j * step) * inner + k] = rnd(o->dtype, s->d[(a * L + j) * inner + k]);
	return 0;
}

/* arange: start + i * step, in int64 for integer dtypes, else in double
 * rounded to the dtype (ATen's accumulation type on CPU). */
static int eval_arange(ictx *c, coil_node *n)
{
	itensor *o = OUT(n, 0);
	const coil_arg *s0, *e0;
	double step;
	int step_int, dt;
	arange_args(n, &s0, &e0, &step, &step_int, &dt);
	(void)e0, (void)step_int, (void)dt;
	int64_t is = 0;
	double fs = 0;
	if (s0 && s0->kind == ARG_DIMS) {
		if (dim_eval(&s0->dims[0], c->syms, &is, c->err))
			return -1;
		fs = (double)is;
	} else if (s0) {
		is = (int64_t)s0->f, fs = s0->f;
	}
	if (dtype_is_int(o->dtype))
		for (int64_t e = 0; e < o->numel; e++)
			o->d[e] = (real)(is + e * (int64_t)step);
	else
		for (int64_t e = 0; e < o->numel; e++)
			o->d[e] = rnd(o->dtype, fs + step * (double)e);
	return 0;
}

/* --- reductions --------------------------------------------------------------- */

static int eval_reduce(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	unsigned mask;
	int keep;
	reduce_dims(c->g, n, &mask, &keep);
	/* Output offset of each input element: strides of the kept dims. */
	int64_t ost[COIL_MAX_RANK], kst[COIL_MAX_RANK], cnt = 1;
	int64_t kshape[COIL_MAX_RANK];
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (!(mask >> i & 1))
			kshape[r++] = x->shape[i];
		else
			cnt *= x->shape[i];
	strides_of(kshape, r, kst);
	for (int i = 0, k = 0; i < x->rank; i++)
		ost[i] = mask >> i & 1 ? 0 : kst[k++];
	int64_t m = o->numel;
	real *acc = calloc((size_t)(m ? m : 1), sizeof(real)), *acc2 = calloc((size_t)(m ? m : 1), sizeof(real));
	int64_t *arg = calloc((size_t)(m ? m : 1), sizeof(int64_t)), *seen = calloc((size_t)(m ? m : 1), sizeof(int64_t));
	if (!acc || !acc2 || !arg || !seen) {
		free(acc), free(acc2), free(arg), free(seen);
		return rterr(c, n, "out of memory");
	}
	const int is_lse = n->op == OP_LOGSUMEXP; /* max first, then sum(exp(x - max)) */
	int is_max = n->op == OP_AMAX || n->op == OP_MAX_ALL || n->op == OP_MAX_DIM || n->op == OP_ARGMAX || is_lse;
	int is_min = n->op == OP_AMIN || n->op == OP_MIN_ALL || n->op == OP_MIN_DIM || n->op == OP_ARGMIN;
	int is_std = n->op == OP_STD_CORR || n->op == OP_STD_DIM;
	int is_var = n->op == OP_VAR_CORR || n->op == OP_VAR_DIM || is_std;
	real p = n->op == OP_NORM && n->args[1].kind == ARG_SCALAR ? n->args[1].f : 2;
	walker w = {.rank = x->rank, .nops = 1};
	memcpy(w.shape, x->shape, sizeof w.shape);
	memcpy(w.st[0], ost, sizeof ost);
	/* pass 1: sums, extremes; pass 2 (var): squared deviations from the mean */
	for (int64_t e = 0; e < x->numel; e++, walk_next(&w)) {
		int64_t oi = w.off[0];
		real v = x->d[e];
		int64_t pos = seen[oi]++; /* position within the reduced elements */
		if (is_max || is_min) {
			if (pos == 0 || isnan(v) || (!isnan(acc[oi]) && (is_max ? v > acc[oi] : v < acc[oi]))) {
				if (!(pos > 0 && isnan(acc[oi]))) {
					acc[oi] = v;
					arg[oi] = pos;
				}
			}
		} else if (n->op == OP_NORM) {
			acc[oi] += p == 1 ? fabs(v) : v * v;
		} else {
			acc[oi] += v;
		}
	}
	if (is_var) {
		for (int64_t i = 0; i < m; i++)
			acc[i] /= (real)cnt;
		walker w2 = {.rank = x->rank, .nops = 1};
		memcpy(w2.shape, x->shape, sizeof w2.shape);
		memcpy(w2.st[0], ost, sizeof ost);
		for (int64_t e = 0; e < x->numel; e++, walk_next(&w2)) {
			real d = x->d[e] - acc[w2.off[0]];
			acc2[w2.off[0]] += d * d;
		}
	}
	if (is_lse) { /* ATen: an infinite max is replaced by 0 before the shift */
		walker w2 = {.rank = x->rank, .nops = 1};
		memcpy(w2.shape, x->shape, sizeof w2.shape);
		memcpy(w2.st[0], ost, sizeof ost);
		for (int64_t i = 0; i < m; i++)
			acc[i] = isinf(acc[i]) ? 0 : acc[i];
		for (int64_t e = 0; e < x->numel; e++, walk_next(&w2))
			acc2[w2.off[0]] += exp(x->d[e] - acc[w2.off[0]]);
	}
	real corr = 1;
	if (n->op == OP_VAR_CORR || n->op == OP_STD_CORR)
		corr = n->args[2].kind == ARG_INT ? (real)n->args[2].i : 1;
	else if (n->op == OP_VAR_DIM || n->op == OP_STD_DIM)
		corr = n->args[2].i ? 1 : 0;
	for (int64_t i = 0; i < m; i++) {
		real v = acc[i];
		switch (n->op) {
		case OP_MEAN: case OP_MEAN_DIM: v = acc[i] / (real)cnt; break;
		case OP_VAR_CORR: case OP_VAR_DIM: v = acc2[i] / fmax((real)cnt - corr, 0); break;
		case OP_STD_CORR: case OP_STD_DIM: v = sqrt(acc2[i] / fmax((real)cnt - corr, 0)); break;
		case OP_LOGSUMEXP: v = log(acc2[i]) + acc[i]; break;
		case OP_NORM: v = p == 1 ? acc[i] : sqrt(acc[i]); break;
		case OP_ARGMAX: case OP_ARGMIN: v = (real)arg[i]; break;
		default: break;
		}
		o->d[i] = rnd(o->dtype, v);
		if (n->op == OP_MAX_DIM || n->op == OP_MIN_DIM)
			OUT(n, 1)->d[i] = (real)arg[i];
	}
	free(acc), free(acc2), free(arg), free(seen);
	return 0;
}

/* --- normalization and softmax ---------------------------------------------------- */

static int eval_batch_norm(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	itensor *w = HAS(n, 1) ? IN(n, 1) : NULL, *b = HAS(n, 2) ? IN(n, 2) : NULL;
	real eps = n->args[7].f;
	int64_t C = x->shape[1], inner = 1, outer = x->shape[0];
	for (int i = 2; i < x->rank; i++)
		inner *= x->shape[i];
	real *mean = NULL, *var = NULL, *stats = NULL;
	if (n->args[5].i) { /* the batch's statistics (biased variance) */
		stats = calloc((size_t)(2 * C + 1), sizeof *stats);
		if (!stats)
			return rterr(c, n, "out of memory");
		mean = stats, var = stats + C;
		const real cnt = (real)(outer * inner);
		for (int pass = 0; pass < 2; pass++)
			for (int64_t a = 0; a < outer; a++)
				for (int64_t ch = 0; ch < C; ch++)
					for (int64_t i = 0; i < inner; i++) {
						real v = x->d[(a * C + ch) * inner + i];
						if (pass)
							var[ch] += (v - mean[ch]) * (v - mean[ch]) / cnt;
						else
							mean[ch] += v / cnt;
					}
		for (int64_t ch = 0; ch < C && n->nout == 3; ch++) {
			OUT(n, 1)->d[ch] = rnd(o->dtype, mean[ch]);
			OUT(n, 2)->d[ch] = rnd(o->dtype, 1 / sqrt(var[ch] + eps));
		}
	} else {
		mean = IN(n, 3)->d, var = IN(n, 4)->d;
	}
	for (int64_t a = 0; a < outer; a++)
		for (int64_t ch = 0; ch < C; ch++) {
			real s = 1 / sqrt(var[ch] + eps) * (w ? w->d[ch] : 1);
			real t = (b ? b->d[ch] : 0) - mean[ch] * s;
			real *px = x->d + (a * C + ch) * inner, *po = o->d + (a * C + ch) * inner;
			for (int64_t i = 0; i < inner; i++)
				po[i] = rnd(o->dtype, px[i] * s + t);
		}
	free(stats);
	return 0;
}

static int eval_group_norm(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	itensor *w = HAS(n, 1) ? IN(n, 1) : NULL, *b = HAS(n, 2) ? IN(n, 2) : NULL;
	real eps = n->args[7].f;
	int64_t N = x->shape[0], C = x->shape[1], G = n->args[6].i, inner = 1;
	for (int i = 2; i < x->rank; i++)
		inner *= x->shape[i];
	const int64_t cg = C / G, len = cg * inner;
	for (int64_t a = 0; a < N; a++)
		for (int64_t k = 0; k < G; k++) {
			const real *px = x->d + (a * C + k * cg) * inner;
			real *po = o->d + (a * C + k * cg) * inner, mu = 0, var = 0;
			for (int64_t i = 0; i < len; i++)
				mu += px[i];
			mu = len ? mu / (real)len : 0;
			for (int64_t i = 0; i < len; i++)
				var += (px[i] - mu) * (px[i] - mu);
			var = len ? var / (real)len : 0;
			real rstd = 1 / sqrt(var + eps);
			for (int64_t i = 0; i < len; i++) {
				int64_t ch = k * cg + i / (inner ? inner : 1);
				po[i] = rnd(o->dtype, (px[i] - mu) * rstd * (w ? w->d[ch] : 1) + (b ? b->d[ch] : 0));
			}
			if (n->nout == 3) {
				OUT(n, 1)->d[a * G + k] = rnd(o->dtype, mu);
				OUT(n, 2)->d[a * G + k] = rnd(o->dtype, rstd);
			}
		}
	return 0;
}

static int eval_glu(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int64_t outer, L, inner;
	around(x, wrapd(x, n->args[1].i), &outer, &L, &inner);
	const int64_t h = L / 2;
	for (int64_t a = 0; a < outer; a++)
		for (int64_t j = 0; j < h; j++)
			for (int64_t b = 0; b < inner; b++) {
				real u = x->d[(a * L + j) * inner + b], v = x->d[(a * L + j + h) * inner + b];
				o->d[(a * h + j) * inner + b] = rnd(o->dtype, u / (1 + exp(-v)));
			}
	return 0;
}

static int eval_prelu(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *w = IN(n, 1), *o = OUT(n, 0);
	int64_t C = w->numel > 1 ? x->shape[1] : 1, inner = 1;
	for (int i = 2; w->numel > 1 && i < x->rank; i++)
		inner *= x->shape[i];
	for (int64_t e = 0; e < x->numel; e++) {
		real v = x->d[e];
		o->d[e] = rnd(o->dtype, v > 0 ? v : w->d[(e / inner) % C] * v);
	}
	return 0;
}

/* As ATen's CPU kernels, in f32: q = clamp(rint(x * (1.0f / scale)) + zp), dq = (q - zp) * scale. */
static int eval_quant(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int dq = op_is_dequant(n->op), pc = op_quant_pc(n->op), lo = op_quant_min_arg(n->op);
	const real qmin = (real)n->args[lo].i, qmax = (real)n->args[lo + 1].i;
	int64_t C = 1, inner = 1;
	if (pc) {
		int a = (int)(n->args[3].i < 0 ? n->args[3].i + x->rank : n->args[3].i);
		C = x->shape[a];
		for (int i = a + 1; i < x->rank; i++)
			inner *= x->shape[i];
	}
	for (int64_t e = 0; e < x->numel; e++) {
		int64_t ch = pc ? (e / inner) % C : 0;
		float s = op_quant_tensor(n->op) ? (float)IN(n, 1)->d[ch] : (float)n->args[1].f;
		real zp = op_quant_tensor(n->op) ? IN(n, 2)->d[ch] : (real)n->args[2].i;
		if (dq) {
			o->d[e] = (real)((float)(x->d[e] - zp) * s);
			continue;
		}
		real q = (real)rintf((float)x->d[e] * (1.0f / s)) + zp;
		o->d[e] = isnan(q) ? qmin : q < qmin ? qmin : q > qmax ? qmax : q;
	}
	return 0;
}

/* As PyTorch's observers, in f32 (an empty input's range is [0, 0]). */
static int eval_choose_qparams(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0);
	const int64_t qmin = n->args[1].i, qmax = n->args[2].i;
	float lo = 0, hi = 0;
	for (int64_t e = 0; e < x->numel; e++) {
		float v = (float)x->d[e];
		lo = v < lo ? v : lo; /* a NaN is passed over */
		hi = v > hi ? v : hi;
	}
	float s = (hi - lo) / (float)(qmax - qmin), eps = (float)n->args[3].f;
	s = s > eps ? s : eps;
	real z = (real)qmin - (real)rintf(lo / s);
	OUT(n, 0)->d[0] = s;
	OUT(n, 1)->d[0] = z < (real)qmin ? (real)qmin : z > (real)qmax ? (real)qmax : z;
	return 0;
}

static int eval_layer_norm(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	itensor *w = HAS(n, 2) ? IN(n, 2) : NULL, *b = HAS(n, 3) ? IN(n, 3) : NULL;
	real eps = n->args[4].f;
	int64_t inner = 1;
	for (int i = x->rank - n->args[1].n; i < x->rank; i++)
		inner *= x->shape[i];
	int64_t rows = inner ? x->numel / inner : 0;
	for (int64_t r = 0; r < rows; r++) {
		real *px = x->d + r * inner, *po = o->d + r * inner, mu = 0, var = 0;
		for (int64_t i = 0; i < inner; i++)
			mu += px[i];
		mu /= (real)inner;
		for (int64_t i = 0; i < inner; i++)
			var += (px[i] - mu) * (px[i] - mu);
		var /= (real)inner;
		real rstd = 1 / sqrt(var + eps);
		for (int64_t i = 0; i < inner; i++)
			po[i] = rnd(o->dtype, (px[i] - mu) * rstd * (w ? w->d[i] : 1) + (b ? b->d[i] : 0));
		if (n->nout == 3) {
			OUT(n, 1)->d[r] = rnd(o->dtype, mu);
			OUT(n, 2)->d[r] = rnd(o->dtype, rstd);
		}
	}
	return 0;
}

static int eval_softmax(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int r = x->rank ? x->rank : 1;
	int d = (int)(n->args[1].i < 0 ? n->args[1].i + r : n->args[1].i);
	int64_t len = x->rank ? x->shape[d] : 1, inner = 1, outer = 1;
	for (int i = 0; i < x->rank; i++)
		if (i < d)
			outer *= x->shape[i];
		else if (i > d)
			inner *= x->shape[i];
	int lg = n->op == OP_LOG_SOFTMAX || n->op == OP_LOG_SOFTMAX_;
	for (int64_t a = 0; a < outer; a++)
		for (int64_t i = 0; i < inner; i++) {
			real *px = x->d + a * len * inner + i, *po = o->d + a * len * inner + i, mx = -INFINITY, s = 0;
			for (int64_t k = 0; k < len; k++)
				mx = fmax(mx, px[k * inner]);
			for (int64_t k = 0; k < len; k++)
				s += exp(px[k * inner] - mx);
			for (int64_t k = 0; k < len; k++)
				po[k * inner] = rnd(o->dtype, lg ? px[k * inner] - mx - log(s) : exp(px[k * inner] - mx) / s);
		}
	return 0;
}

/* --- pooling ------------------------------------------------------------------ */

/* max and avg pooling over the last 2 or 3 dims: as 3-d, a 2-d pool with a
 * depth of 1 (window 1, stride 1, no padding). */
static int eval_pool2d(ictx *c, coil_node *n)
{
	(void)c;
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	pool_params pp;
	pool_get_params(n, &pp);
	const int r = x->rank, lead = 3 - pp.nd, avg = pool_is_avg(n->op);
	int64_t S[3], OS[3], k[3], st[3], pd[3], dl[3];
	for (int i = 0; i < 3; i++) {
		const int j = i - lead;
		S[i] = j < 0 ? 1 : x->shape[r - pp.nd + j], OS[i] = j < 0 ? 1 : o->shape[r - pp.nd + j];
		k[i] = j < 0 ? 1 : pp.k[j], st[i] = j < 0 ? 1 : pp.s[j], pd[i] = j < 0 ? 0 : pp.p[j];
		dl[i] = j < 0 ? 1 : pp.d[j];
	}
	const int64_t vol = S[0] * S[1] * S[2], ovol = OS[0] * OS[1] * OS[2], planes = vol ? x->numel / vol : 0;
	for (int64_t pl = 0; pl < planes; pl++)
		for (int64_t oi = 0; oi < ovol; oi++) {
			const int64_t oc[3] = {oi / (OS[1] * OS[2]), oi / OS[2] % OS[1], oi % OS[2]};
			const real *px = x->d + pl * vol;
			int64_t b0[3], b1[3], size = 1, in = 1;
			for (int i = 0; i < 3; i++) {
				b0[i] = oc[i] * st[i] - pd[i];
				if (avg) { /* the window clipped to the padded input (count_include_pad), then to the input */
					b1[i] = b0[i] + k[i] < S[i] + pd[i] ? b0[i] + k[i] : S[i] + pd[i];
					size *= b1[i] - b0[i];
					b0[i] = b0[i] < 0 ? 0 : b0[i], b1[i] = b1[i] > S[i] ? S[i] : b1[i];
					in *= b1[i] - b0[i];
				}
			}
			real res;
			if (avg) {
				real s = 0;
				for (int64_t a = b0[0]; a < b1[0]; a++)
					for (int64_t h = b0[1]; h < b1[1]; h++)
						for (int64_t w = b0[2]; w < b1[2]; w++)
							s += px[(a * S[1] + h) * S[2] + w];
				res = s / (real)(pp.divisor ? pp.divisor : pp.count_pad ? size : in);
			} else {
				real m = -INFINITY;
				int64_t mi = -1;
				for (int64_t ka = 0; ka < k[0]; ka++)
					for (int64_t kh = 0; kh < k[1]; kh++)
						for (int64_t kw = 0; kw < k[2]; kw++) {
							const int64_t a = b0[0] + ka * dl[0], h = b0[1] + kh * dl[1], w = b0[2] + kw * dl[2];
							if (a < 0 || a >= S[0] || h < 0 || h >= S[1] || w < 0 || w >= S[2])
								continue;
							const int64_t pos = (a * S[1] + h) * S[2] + w;
							/* ATen's rule: every NaN wins (the index is the last NaN's) */
							if (mi < 0 || px[pos] > m || isnan(px[pos])) {
								m = px[pos];
								mi = pos;
							}
						}
				res = m;
				if (n->nout == 2)
					OUT(n, 1)->d[pl * ovol + oi] = (real)mi;
			}
			o->d[pl * ovol + oi] = rnd(o->dtype, res);
		}
	return 0;
}

static int eval_adaptive_pool2d(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int r = x->rank, mx = n->op == OP_ADAPTIVE_MAX_POOL2D;
	int64_t H = x->shape[r - 2], W = x->shape[r - 1], OH = o->shape[r - 2], OW = o->shape[r - 1];
	int64_t planes = x->numel / (H * W);
	for (int64_t pl = 0; pl < planes; pl++)
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
				int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
				real *px = x->d + pl * H * W, s = 0, m = -INFINITY;
				int64_t mi = -1;
				for (int64_t h = h0; h < h1; h++)
					for (int64_t w = w0; w < w1; w++) {
						real v = px[h * W + w];
						s += v;
						if (mi < 0 || v > m || isnan(v)) /* as max pooling */
							m = v, mi = h * W + w;
					}
				int64_t oidx = (pl * OH + oh) * OW + ow;
				o->d[oidx] = rnd(o->dtype, mx ? m : s / (real)((h1 - h0) * (w1 - w0)));
				if (mx)
					OUT(n, 1)->d[oidx] = (real)mi;
			}
	return 0;
}

/* --- resampling --------------------------------------------------------------- */

/* Bilinear: the two source rows, each interpolated along W, then mixed along H
 * (ATen's order); nearest: a gather. */
static int eval_upsample2d(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	upsample_params up;
	upsample_get_params(n, &up);
	int64_t H = x->shape[2], W = x->shape[3], OH = o->shape[2], OW = o->shape[3];
	int64_t planes = x->shape[0] * x->shape[1];
	for (int64_t oh = 0; oh < OH; oh++) {
		int64_t hs[2], ws[2];
		double hw[2], ww[2];
		upsample_source(&up, 0, o->dtype, H, OH, oh, hs, hw);
		for (int64_t ow = 0; ow < OW; ow++) {
			upsample_source(&up, 1, o->dtype, W, OW, ow, ws, ww);
			for (int64_t pl = 0; pl < planes; pl++) {
				const real *p = x->d + pl * H * W;
				real v;
				if (up.linear) {
					real r0 = p[hs[0] * W + ws[0]] * ww[0] + p[hs[0] * W + ws[1]] * ww[1];
					real r1 = p[hs[1] * W + ws[0]] * ww[0] + p[hs[1] * W + ws[1]] * ww[1];
					v = r0 * hw[0] + r1 * hw[1];
				} else {
					v = p[hs[0] * W + ws[0]];
				}
				o->d[(pl * OH + oh) * OW + ow] = rnd(o->dtype, v);
			}
		}
	}
	return 0;
}

/* --- convolution and matrix products ------------------------------------------- */

static double *to_double(const itensor *t)
{
	double *d = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(double));
	for (int64_t e = 0; d && e < t->numel; e++)
		d[e] = (double)t->d[e];
	return d;
}

static int eval_conv(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *wt = IN(n, 1), *o = OUT(n, 0), *b = HAS(n, 2) ? IN(n, 2) : NULL;
	int sd = x->rank - 2, tr = (int)n->args[6].i;
	int64_t G = n->args[8].i, N = x->shape[0], Ci = x->shape[1], Co = o->shape[1];
	/* Spatial dims padded to 3: missing ones have size 1 and unit parameters. */
	int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0}, dl[3] = {1, 1, 1};
	for (int i = 0; i < sd; i++) {
		int j = 3 - sd + i;
#define LV(ai) (n->args[ai].n == 1 ? n->args[ai].ints[0] : n->args[ai].ints[i])
		in[j] = x->shape[2 + i], out[j] = o->shape[2 + i], k[j] = wt->shape[2 + i];
		s[j] = LV(3), p[j] = LV(4), dl[j] = LV(5);
#undef LV
	}
	int64_t cig = Ci / G, cog = Co / G, ksz = k[0] * k[1] * k[2], isz = in[0] * in[1] * in[2];
	int64_t osz = out[0] * out[1] * out[2];
	/* Convolution is float-only: doubles hold every operand exactly and are
	 * much faster than long double in these loops. */
	double *acc = calloc((size_t)(N * Co * osz + 1), sizeof(double));
	double *xd = to_double(x), *wd = to_double(wt);
	if (!acc || !xd || !wd) {
		free(acc), free(xd), free(wd);
		return rterr(c, n, "out of memory");
	}
	for (int64_t bn = 0; bn < N; bn++)
		for (int64_t gi = 0; gi < G; gi++)
			for (int64_t oc = 0; oc < cog; oc++)
				for (int64_t ic = 0; ic < cig; ic++) {
					/* non-transposed weight: [Co][cig][k]; transposed: [Ci][cog][k] */
					const double *wk = tr ? wd + ((gi * cig + ic) * cog + oc) * ksz
							      : wd + ((gi * cog + oc) * cig + ic) * ksz;
					const double *px = xd + (bn * Ci + gi * cig + ic) * isz;
					double *po = acc + (bn * Co + gi * cog + oc) * osz;
					for (int64_t kd = 0; kd < k[0]; kd++)
						for (int64_t kh = 0; kh < k[1]; kh++)
							for (int64_t kw = 0; kw < k[2]; kw++) {
								double wv = wk[(kd * k[1] + kh) * k[2] + kw];
								if (!tr) {
									for (int64_t od = 0; od < out[0]; od++) {
										int64_t id = od * s[0] - p[0] + kd * dl[0];
										if (id < 0 || id >= in[0])
											continue;
										for (int64_t oh = 0; oh < out[1]; oh++) {
											int64_t ih = oh * s[1] - p[1] + kh * dl[1];
											if (ih < 0 || ih >= in[1])
												continue;
											const double *row = px + (id * in[1] + ih) * in[2];
											double *orow = po + (od * out[1] + oh) * out[2];
											for (int64_t ow = 0; ow < out[2]; ow++) {
												int64_t iw = ow * s[2] - p[2] + kw * dl[2];
												if (iw >= 0 && iw < in[2])
													orow[ow] += wv * row[iw];
											}
										}
									}
								} else {
									for (int64_t id = 0; id < in[0]; id++) {
										int64_t od = id * s[0] - p[0] + kd * dl[0];
										if (od < 0 || od >= out[0])
											continue;
										for (int64_t ih = 0; ih < in[1]; ih++) {
											int64_t oh = ih * s[1] - p[1] + kh * dl[1];
											if (oh < 0 || oh >= out[1])
												continue;
											for (int64_t iw = 0; iw < in[2]; iw++) {
												int64_t ow = iw * s[2] - p[2] + kw * dl[2];
												if (ow >= 0 && ow < out[2])
													po[(od * out[1] + oh) * out[2] + ow] +=
														wv * px[(id * in[1] + ih) * in[2] + iw];
											}
										}
									}
								}
							}
				}
	for (int64_t e = 0; e < o->numel; e++)
		o->d[e] = rnd(o->dtype, acc[e] + (b ? b->d[(e / osz) % Co] : 0));
	free(acc);
	free(xd);
	free(wd);
	return 0;
}

static int eval_matmul(ictx *c, coil_node *n)
{
	int add = n->op == OP_ADDMM || n->op == OP_BADDBMM, base = add ? 1 : 0;
	int batched = n->op == OP_BMM || n->op == OP_BADDBMM;
	itensor *a = IN(n, base), *b = IN(n, base + 1), *o = OUT(n, 0);
	int64_t B = batched ? a->shape[0] : 1, M = a->shape[a->rank - 2], K = a->shape[a->rank - 1],
		N = b->shape[b->rank - 1];
	real alpha = add ? n->args[4].f : 1, beta = add ? n->args[3].f : 0;
	int64_t bst[COIL_MAX_RANK] = {0};
	if (add)
		bcast_strides(IN(n, 0), o->rank, o->shape, bst);
	for (int64_t bi = 0; bi < B; bi++)
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				real s = 0;
				const real *pa = a->d + (bi * M + i) * K, *pb = b->d + bi * K * N + j;
				for (int64_t k = 0; k < K; k++)
					s += pa[k] * pb[k * N];
				real v = alpha * s;
				/* ATen ignores self when beta is 0 (its NaNs too) */
				if (add && beta != 0)
					v += beta * IN(n, 0)->d[batched ? bi * bst[0] + i * bst[1] + j * bst[2]
									: i * bst[0] + j * bst[1]];
				o->d[(bi * M + i) * N + j] = rnd(o->dtype, v);
			}
	return 0;
}

/* softmax(q @ k^T * scale + mask) @ v as written (PyTorch's math reference):
 * a bool mask keeps where true and puts -inf elsewhere, is_causal keeps j <= i
 * (top-left aligned) the same way; a row masked everywhere is NaN, as
 * softmax over -inf is.  The scores are rounded to the dtype, as eager's
 * matmul output is, only in f32 and wider (bf16/f16 compute in f32). */
static int eval_sdpa(ictx *c, coil_node *n)
{
	itensor *q = IN(n, 0), *k = IN(n, 1), *v = IN(n, 2), *m = n->args[3].kind == ARG_TENSOR ? IN(n, 3) : NULL,
		*o = OUT(n, 0);
	int r = o->rank, causal = n->args[5].i != 0;
	int64_t L = q->shape[r - 2], E = q->shape[r - 1], S = k->shape[r - 2], Ev = v->shape[r - 1];
	real scale = n->args[6].kind == ARG_NONE ? 1 / sqrtl((real)E) : (real)n->args[6].f;
	real fill = n->args[7].kind == ARG_NONE ? -INFINITY : rnd(o->dtype, (real)n->args[7].f);
	int64_t sh[COIL_MAX_RANK], qs[COIL_MAX_RANK], ks[COIL_MAX_RANK], vs[COIL_MAX_RANK], ms[COIL_MAX_RANK] = {0};
	memcpy(sh, o->shape, sizeof sh);
	sh[r - 1] = S; /* the scores' shape */
	bcast_strides(q, r, o->shape, qs);
	bcast_strides(k, r, sh, ks);
	bcast_strides(v, r, o->shape, vs);
	if (m)
		bcast_strides(m, r, sh, ms);
	int64_t nb = 1;
	for (int i = 0; i < r - 2; i++)
		nb *= o->shape[i];
	real *p = malloc((size_t)(S ? S : 1) * sizeof *p);
	if (!p)
		return coil_err_oom(c->err);
	for (int64_t bi = 0; bi < nb; bi++) {
		int64_t qo = 0, ko = 0, vo = 0, mo = 0, rem = bi;
		for (int d = r - 3; d >= 0; d--) {
			int64_t x = rem % o->shape[d];
			rem /= o->shape[d];
			qo += x * qs[d], ko += x * ks[d], vo += x * vs[d], mo += x * ms[d];
		}
		for (int64_t i = 0; i < L; i++) {
			real mx = -INFINITY, sum = 0;
			int nan = 0;
			for (int64_t j = 0; j < S; j++) {
				real s = 0;
				for (int64_t e = 0; e < E; e++)
					s += q->d[qo + i * qs[r - 2] + e * qs[r - 1]] * k->d[ko + j * ks[r - 2] + e * ks[r - 1]];
				if (!dtype_is_half(o->dtype))
					s = rnd(o->dtype, s);
				s *= scale;
				if (m) {
					real mv = m->d[mo + i * ms[r - 2] + j * ms[r - 1]];
					s = m->dtype == COIL_BOOL ? (mv != 0 ? s : fill) : s + mv;
				}
				if (causal && j > i)
					s = -INFINITY;
				p[j] = s;
				nan |= isnan(s);
				mx = s > mx ? s : mx;
			}
			for (int64_t j = 0; j < S; j++)
				sum += p[j] = expl(p[j] - mx);
			for (int64_t ev = 0; ev < Ev; ev++) {
				real acc = 0;
				for (int64_t j = 0; j < S; j++)
					acc += p[j] * v->d[vo + j * vs[r - 2] + ev * vs[r - 1]];
				/* all -inf gives exp(nan), a NaN score NaN everywhere */
				o->d[(bi * L + i) * Ev + ev] = rnd(o->dtype, nan || mx == -INFINITY ? NAN : acc / sum);
			}
		}
	}
	free(p);
	return 0;
}

/* flip: element e of out reads self at its coordinates, the flipped dims' mirrored. */
static int eval_flip(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	int64_t xs[COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	int fl[COIL_MAX_RANK] = {0};
	(void)c;
	for (int i = 0; i < n->args[1].n; i++)
		fl[n->args[1].ints[i] < 0 ? n->args[1].ints[i] + x->rank : n->args[1].ints[i]] = 1;
	strides_of(x->shape, x->rank, xs);
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t at = 0;
		for (int i = 0; i < x->rank; i++)
			at += (fl[i] ? x->shape[i] - 1 - idx[i] : idx[i]) * xs[i];
		o->d[e] = x->d[at];
		for (int i = o->rank - 1; i >= 0 && ++idx[i] == o->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

/* unfold: out[..., i, ..., j] = self[..., i * step + j, ...]. */
static int eval_unfold(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int d = (int)(n->args[1].i < 0 ? n->args[1].i + x->rank : n->args[1].i);
	const int64_t step = n->args[3].i;
	int64_t xs[COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	(void)c;
	strides_of(x->shape, x->rank, xs);
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t at = idx[x->rank] * xs[d];
		for (int i = 0; i < x->rank; i++)
			at += idx[i] * (i == d ? step : 1) * xs[i];
		o->d[e] = x->d[at];
		for (int i = o->rank - 1; i >= 0 && ++idx[i] == o->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

/* as_strided: element e of out reads self's row-major element offset + sum(i_k * stride_k). */
static int eval_as_strided(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const coil_arg *st = &n->args[2];
	const int64_t off = n->args[3].kind == ARG_INT ? n->args[3].i : 0;
	int64_t idx[COIL_MAX_RANK] = {0};
	(void)c;
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t at = off;
		for (int i = 0; i < o->rank; i++)
			at += idx[i] * st->ints[i];
		o->d[e] = x->d[at];
		for (int i = o->rank - 1; i >= 0 && ++idx[i] == o->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

/* col2im sums each block's values into the image (zeros first); im2col
 * copies them out (0 where a block overhangs the padding). */
static int eval_col2im(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const int fold = n->op == OP_COL2IM, a0 = fold ? 2 : 1;
	const int64_t *k = n->args[a0].ints, *dl = n->args[a0 + 1].ints, *pd = n->args[a0 + 2].ints,
		      *sd = n->args[a0 + 3].ints;
	const itensor *img = fold ? o : x;
	const int R = img->rank;
	const int64_t H = img->shape[R - 2], W = img->shape[R - 1], C = img->shape[R - 3];
	const int64_t N = R == 4 ? img->shape[0] : 1;
	const int64_t nh = (H + 2 * pd[0] - dl[0] * (k[0] - 1) - 1) / sd[0] + 1;
	const int64_t nw = (W + 2 * pd[1] - dl[1] * (k[1] - 1) - 1) / sd[1] + 1;
	(void)c;
	if (fold)
		for (int64_t e = 0; e < o->numel; e++)
			o->d[e] = 0;
	for (int64_t b = 0; b < N; b++)
		for (int64_t ch = 0; ch < C; ch++)
			for (int64_t i = 0; i < k[0]; i++)
				for (int64_t j = 0; j < k[1]; j++)
					for (int64_t bh = 0; bh < nh; bh++)
						for (int64_t bw = 0; bw < nw; bw++) {
							const int64_t y = bh * sd[0] - pd[0] + i * dl[0], xx = bw * sd[1] - pd[1] + j * dl[1];
							const int64_t ce = ((b * C + ch) * k[0] * k[1] + i * k[1] + j) * nh * nw + bh * nw + bw;
							const int in = y >= 0 && y < H && xx >= 0 && xx < W;
							const int64_t ie = ((b * C + ch) * H + y) * W + xx;
							if (fold && in)
								o->d[ie] = rnd(o->dtype, o->d[ie] + x->d[ce]);
							else if (!fold)
								o->d[ce] = in ? x->d[ie] : 0;
						}
	return 0;
}

/* reflection / replication padding: each output element reads the input at
 * its mirrored (clamped) coordinates. */
static int eval_pad_mode(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const coil_arg *p = &n->args[1];
	const int refl = n->op == OP_REFLECTION_PAD1D || n->op == OP_REFLECTION_PAD2D || n->op == OP_REFLECTION_PAD3D;
	int64_t lo[COIL_MAX_RANK] = {0}, xs[COIL_MAX_RANK], idx[COIL_MAX_RANK] = {0};
	(void)c;
	for (int j = 0; j < p->n / 2; j++)
		lo[x->rank - 1 - j] = p->ints[2 * j];
	strides_of(x->shape, x->rank, xs);
	for (int64_t e = 0; e < o->numel; e++) {
		int64_t at = 0;
		for (int i = 0; i < o->rank; i++) {
			int64_t j = idx[i] - lo[i];
			const int64_t m = x->shape[i];
			if (refl)
				j = j < 0 ? -j : j >= m ? 2 * (m - 1) - j : j;
			else
				j = j < 0 ? 0 : j >= m ? m - 1 : j;
			at += j * xs[i];
		}
		o->d[e] = x->d[at];
		for (int i = o->rank - 1; i >= 0 && ++idx[i] == o->shape[i]; i--)
			idx[i] = 0;
	}
	return 0;
}

/* One discrete Fourier transform along dim d of a complex tensor held as
 * (re, im) pairs in re[] / im[] of shape sh (rank R): the definition, sum
 * over j of x[j] exp(sign 2 pi i j k / n), in long double. */
static void dft_dim(real *re, real *im, const int64_t *sh, int R, int d, int sign, real *tr, real *ti)
{
	int64_t outer = 1, inner = 1, n = sh[d];
	for (int i = 0; i < d; i++)
		outer *= sh[i];
	for (int i = d + 1; i < R; i++)
		inner *= sh[i];
	const real pi = 3.14159265358979323846264338327950288L;
	for (int64_t a = 0; a < outer; a++)
		for (int64_t b = 0; b < inner; b++) {
			for (int64_t k = 0; k < n; k++) {
				real sr = 0, si = 0;
				for (int64_t j = 0; j < n; j++) {
					const real ang = sign * 2 * pi * (real)((j * k) % n) / (real)n;
					const real cr = cosl(ang), ci = sinl(ang), xr = re[(a * n + j) * inner + b],
						   xi = im[(a * n + j) * inner + b];
					sr += xr * cr - xi * ci, si += xr * ci + xi * cr;
				}
				tr[k] = sr, ti[k] = si;
			}
			for (int64_t k = 0; k < n; k++)
				re[(a * n + k) * inner + b] = tr[k], im[(a * n + k) * inner + b] = ti[k];
		}
}

/* coil.fft_r2c / c2r / c2c as ATen defines them: r2c the full transform of
 * the real input over every dim, then the last dim's onesided half; c2c over
 * every dim; c2r the inverse over every dim but the last, then each line
 * along the last dim as the Hermitian spectrum its first n/2 + 1 points stand
 * for (X[n - k] = conj X[k]), transformed, its real part.  Then scaled. */
static int eval_fft(ictx *c, coil_node *n)
{
	itensor *x = IN(n, 0), *o = OUT(n, 0);
	const coil_arg *dm = &n->args[1];
	const int r2c = n->op == OP_FFT_R2C, c2r = n->op == OP_FFT_C2R;
	const int R = r2c ? x->rank : x->rank - 1, sign = c2r || (n->op == OP_FFT_C2C && !n->args[3].i) ? 1 : -1;
	int dims[COIL_MAX_RANK], last = 0;
	int64_t sh[COIL_MAX_RANK], total = 1, N = 1, maxn = 1;
	for (int i = 0; i < dm->n; i++)
		dims[i] = (int)(dm->ints[i] < 0 ? dm->ints[i] + R : dm->ints[i]), last = dims[i];
	for (int i = 0; i < R; i++) /* c2r: the last dim as long as the output's */
		sh[i] = c2r && i == last ? o->shape[i] : x->shape[i];
	for (int i = 0; i < R; i++)
		total *= sh[i], maxn = sh[i] > maxn ? sh[i] : maxn;
	for (int i = 0; i < dm->n; i++)
		N *= sh[dims[i]];
	real *re = calloc((size_t)(total ? total : 1), sizeof(real)), *im = calloc((size_t)(total ? total : 1), sizeof(real));
	real *tr = malloc((size_t)maxn * sizeof(real)), *ti = malloc((size_t)maxn * sizeof(real));
	if (!re || !im || !tr || !ti) {
		free(re), free(im), free(tr), free(ti);
		coil_err_oom(c->err);
		return -1;
	}
	/* the input into sh's layout (c2r: the first n/2 + 1 points of the last dim) */
	int64_t idx[COIL_MAX_RANK] = {0}, xs[COIL_MAX_RANK];
	strides_of(x->shape, R, xs);
	for (int64_t e = 0; e < total; e++) {
		int64_t at = 0, ok = 1;
		for (int i = 0; i < R; i++) {
			ok &= !(c2r && i == last && idx[i] > sh[i] / 2);
			at += idx[i] * xs[i];
		}
		if (r2c)
			re[e] = x->d[at];
		else if (ok)
			re[e] = x->d[2 * at], im[e] = x->d[2 * at + 1];
		for (int i = R - 1; i >= 0 && ++idx[i] == sh[i]; i--)
			idx[i] = 0;
	}
	for (int i = 0; i < dm->n - c2r; i++)
		dft_dim(re, im, sh, R, dims[i], sign, tr, ti);
	if (c2r) { /* each line's Hermitian completion, then its transform */
		int64_t inner = 1, L = sh[last];
		for (int i = last + 1; i < R; i++)
			inner *= sh[i];
		for (int64_t l = 0; l < total / (L ? L : 1); l++) {
			const int64_t a = l / inner, b = l % inner;
			for (int64_t k = L / 2 + 1; k < L; k++)
				re[(a * L + k) * inner + b] = re[(a * L + L - k) * inner + b],
				im[(a * L + k) * inner + b] = -im[(a * L + L - k) * inner + b];
		}
		dft_dim(re, im, sh, R, last, sign, tr, ti);
	}
	const int64_t norm = n->args[2].i;
	const real scale = norm == 0 ? 1 : norm == 1 ? 1 / sqrtl((real)N) : 1 / (real)N;
	int64_t ss[COIL_MAX_RANK], oidx[COIL_MAX_RANK] = {0};
	strides_of(sh, R, ss);
	const int64_t on = c2r ? o->numel : o->numel / 2;
	for (int64_t e = 0; e < on; e++) {
		int64_t at = 0;
		for (int i = 0; i < R; i++)
			at += oidx[i] * ss[i];
		if (c2r)
			o->d[e] = rnd(COIL_F32, re[at] * scale);
		else
			o->d[2 * e] = rnd(COIL_F32, re[at] * scale), o->d[2 * e + 1] = rnd(COIL_F32, im[at] * scale);
		for (int i = R - 1; i >= 0 && ++oidx[i] == o->shape[i]; i--)
			oidx[i] = 0;
	}
	free(re), free(im), free(tr), free(ti);
	return 0;
}

/* --- driver ------------------------------------------------------------------- */

typedef int (*eval_fn)(ictx *, coil_node *);
static const eval_fn kernels[COIL_NOPS] = {
#define X(e, name, schema, nres, kind, rule, kern) [OP_##e] = eval_##kern,
	COIL_OPS(X)
#undef X
};

static int alloc_value(ictx *c, int v, const int64_t *syms)
{
	coil_value *val = &c->g->vals[v];
	itensor *t = &c->t[v];
	t->dtype = val->dtype;
	t->rank = val->rank;
	t->numel = 1;
	for (int i = 0; i < val->rank; i++) {
		if (dim_eval(&val->shape[i], syms, &t->shape[i], c->err))
			return -1;
		if (t->shape[i] < 0)
			return coil_err_input(c->err, "value '%s': size %lld is negative for these inputs",
					 val->name ? val->name : "?", (long long)t->shape[i]);
		if (__builtin_mul_overflow(t->numel, t->shape[i], &t->numel) || t->numel > ((int64_t)1 << 34))
			return coil_err_input(c->err, "value '%s': too large for the interpreter", val->name ? val->name : "?");
	}
	t->d = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(real));
	return t->d ? 0 : coil_err_oom(c->err);
}

int bind_symbols(const coil_graph *g, const coil_tensor *inputs, int64_t *vals, coil_err *err)
{
	int bound[COIL_MAX_SYMS] = {0};
	for (int i = 0; i < COIL_MAX_SYMS; i++)
		vals[i] = 1;
	for (int i = 0; i < g->ninputs; i++) {
		const coil_value *v = &g->vals[g->inputs[i]];
		const coil_tensor *t = &inputs[i];
		if (t->dtype != v->dtype)
			return coil_err_input(err, "input '%s': dtype %s, expected %s", v->name, dtype_name(t->dtype),
					 dtype_name(v->dtype));
		if (t->rank != v->rank)
			return coil_err_input(err, "input '%s': rank %d, expected %d", v->name, t->rank, v->rank);
		for (int d = 0; d < v->rank; d++) {
			int64_t cst;
			if (dim_is_const(&v->shape[d], &cst)) {
				if (cst != t->shape[d])
					return coil_err_input(err, "input '%s': dim %d is %lld, expected %lld", v->name, d,
							 (long long)t->shape[d], (long long)cst);
				continue;
			}
			int s = 0; /* declared dims are single symbols */
			while (!v->shape[d].t[0].pow[s])
				s++;
			if (bound[s] && vals[s] != t->shape[d])
				return coil_err_input(err, "input '%s': dim %d is %lld, but '%s' is %lld", v->name, d,
						 (long long)t->shape[d], g->syms.name[s], (long long)vals[s]);
			bound[s] = 1;
			vals[s] = t->shape[d];
		}
	}
	return graph_check_syms(g, vals, err);
}

static int load_value(ictx *c, int v, const coil_tensor *src, const char *what, const int64_t *syms)
{
	coil_value *val = &c->g->vals[v];
	if (alloc_value(c, v, syms))
		return -1;
	itensor *t = &c->t[v];
	if (src) {
		if (src->dtype != val->dtype || src->rank != val->rank)
			return coil_err_input(c->err, "%s '%s': dtype/rank %s/%d, expected %s/%d", what, val->name,
					 dtype_name(src->dtype), src->rank, dtype_name(val->dtype), val->rank);
		for (int i = 0; i < t->rank; i++)
			if (src->shape[i] != t->shape[i])
				return coil_err_input(c->err, "%s '%s': dim %d is %lld, expected %lld", what, val->name, i,
						 (long long)src->shape[i], (long long)t->shape[i]);
	}
	const void *data = src ? src->data : val->data;
	for (int64_t e = 0; e < t->numel; e++)
		t->d[e] = ld_load(val->dtype, data, (size_t)e);
	return 0;
}

int interp_run(coil_graph *g, const coil_tensor *inputs, const coil_tensor *params, coil_tensor *outputs,
	       coil_err *err)
{
	ictx c = {.g = g, .err = err};
	int64_t syms[COIL_MAX_SYMS];
	int rc = -1;
	c.t = calloc((size_t)g->nvals + 1, sizeof(itensor));
	int *last = malloc(((size_t)g->nvals + 1) * sizeof(int));
	for (int i = 0; i < g->noutputs; i++)
		outputs[i].data = NULL;
	if (!c.t || !last) {
		coil_err_oom(err);
		goto out;
	}
	if (bind_symbols(g, inputs, syms, err))
		goto out;
	c.syms = syms;
	for (int i = 0; i < g->ninputs; i++)
		if (load_value(&c, g->inputs[i], &inputs[i], "input", syms))
			goto out;
	for (int i = 0; i < g->nparams; i++)
		if (load_value(&c, g->params[i], &params[i], "param", syms))
			goto out;
	for (int i = 0; i < g->nconsts; i++)
		if (load_value(&c, g->consts[i], NULL, "constant", syms))
			goto out;
	/* Free each intermediate after its last reader. */
	for (int v = 0; v < g->nvals; v++)
		last[v] = g->vals[v].kind == VAL_NODE ? g->vals[v].index : -1;
	for (int i = 0; i < g->nnodes; i++) {
		coil_node *n = &g->nodes[i];
		const op_info *oi = op_get(n->op);
		for (int a = 0; a < oi->nargs; a++)
			if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
				for (int k = 0; k < n->args[a].n; k++)
					if (n->args[a].v[k] >= 0)
						last[n->args[a].v[k]] = i;
	}
	for (int i = 0; i < g->noutputs; i++)
		last[g->outputs[i]] = g->nnodes;
	for (int i = 0; i < g->nnodes; i++) {
		coil_node *n = &g->nodes[i];
		for (int k = 0; k < n->nout; k++)
			if (alloc_value(&c, n->outs[k], syms))
				goto out;
		if (kernels[n->op](&c, n))
			goto out;
		const op_info *oi = op_get(n->op);
		for (int a = 0; a < oi->nargs; a++)
			if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
				for (int k = 0; k < n->args[a].n; k++) {
					int v = n->args[a].v[k];
					if (v >= 0 && last[v] == i && g->vals[v].kind == VAL_NODE) {
						free(c.t[v].d);
						c.t[v].d = NULL;
					}
				}
		for (int k = 0; k < n->nout; k++)
			if (last[n->outs[k]] == i) { /* unused result */
				free(c.t[n->outs[k]].d);
				c.t[n->outs[k]].d = NULL;
			}
	}
	for (int i = 0; i < g->noutputs; i++) {
		itensor *t = &c.t[g->outputs[i]];
		coil_tensor *o = &outputs[i];
		o->dtype = t->dtype;
		o->rank = t->rank;
		memcpy(o->shape, t->shape, sizeof o->shape);
		o->data = malloc((size_t)(t->numel ? t->numel : 1) * dtype_size(t->dtype));
		if (!o->data) {
			coil_err_oom(err);
			goto out;
		}
		for (int64_t e = 0; e < t->numel; e++)
			ld_store(t->dtype, o->data, (size_t)e, t->d[e]);
	}
	rc = 0;
out:
	if (rc)
		for (int i = 0; i < g->noutputs; i++)
			tensor_free(&outputs[i]);
	if (c.t)
		for (int v = 0; v < g->nvals; v++)
			free(c.t[v].d);
	free(c.t);
	free(last);
	return rc;
}
