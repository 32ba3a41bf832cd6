/* Tests for the oneDNN runtime (codegen/rt/dnnl_rt.h): every convolution,
 * matmul and pooling is compared with naive reference loops (double
 * accumulation). */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <oneapi/dnnl/dnnl.h>

#include "codegen/rt/dnnl_rt.h"

#define TOL 1e-4
#if defined(__FMA__) && defined(__AVX2__) /* the runtime's cw_wanted: built with the same flags */
#define BUILT_AVX2 1
#else
#define BUILT_AVX2 0
#endif

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *rnd(size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof *p);
	assert_non_null(p);
	for (size_t i = 0; i < n; ++i)
		p[i] = frand();
	return p;
}

static rt_ctx *new_ctx(int nthreads)
{
	char err[256] = "";
	rt_ctx *c = NULL;
	int rc = rt_ctx_create(nthreads, &c, err, sizeof err);
	if (rc)
		fail_msg("rt_ctx_create: %s", err);
	return c;
}

static int setup(void **state)
{
	*state = new_ctx(1);
	return 0;
}

static int teardown(void **state)
{
	rt_ctx_destroy(*state);
	return 0;
}

/* Whether oneDNN runs kernels of ISA `isa` (a dnnl_cpu_isa_t: bit masks, each
 * containing the ones below it) here: its Winograd convs and the brdgmm
 * depthwise ones are AVX-512 only in 2.6. */
static int has_isa(dnnl_cpu_isa_t isa)
{
	return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)isa) == (unsigned)isa;
}

/* An environment switch set for one test and put back after it */
typedef struct env_saved {
	const char *name;
	int had;
	char old[64];
} env_saved;

static env_saved env_force(const char *name, const char *val)
{
	env_saved e = {.name = name};
	const char *was = getenv(name);
	if (was)
		e.had = 1, snprintf(e.old, sizeof e.old, "%s", was);
	setenv(name, val, 1);
	return e;
}

static void env_restore(const env_saved *e)
{
	if (e->had)
		setenv(e->name, e->old, 1);
	else
		unsetenv(e->name);
}

/* |got - want| <= TOL * (|want| + rms(want)) everywhere. */
static void check_close(const char *what, const float *got, const double *want, size_t n)
{
	double ss = 0;
	for (size_t i = 0; i < n; ++i)
		ss += want[i] * want[i];
	double rms = n ? sqrt(ss / (double)n) : 0;
	if (rms < 1e-3)
		rms = 1e-3;
	for (size_t i = 0; i < n; ++i) {
		double d = fabs((double)got[i] - want[i]);
		if (!(d <= TOL * (fabs(want[i]) + rms)))
			fail_msg("%s: element %zu of %zu: got %.8g, want %.8g (rms %.3g)", what, i,
				 n, (double)got[i], want[i], rms);
	}
}

static double eltwise(const rt_post *p, double x)
{
	switch (p->kind) {
	case RT_RELU: return x > 0 ? x : 0;
	case RT_LEAKY_RELU: return x > 0 ? x : p->a * x;
	case RT_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
	case RT_GELU_TANH:
		return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case RT_SILU: return x / (1 + exp(-x));
	case RT_SIGMOID: return 1 / (1 + exp(-x));
	case RT_TANH: return tanh(x);
	case RT_HARDSWISH: return x * fmin(fmax(x + 3, 0), 6) / 6;
	case RT_HARDSIGMOID: return fmin(fmax(x + 3, 0), 6) / 6;
	case RT_CLAMP: return fmin(fmax(x, p->a), p->b);
	case RT_ELU: return x > 0 ? x : p->a * (exp(x) - 1);
	case RT_LINEAR: return p->a * x + p->b;
	case RT_ROUND: return nearbyintf(x);
	default: fail_msg("eltwise: kind %d", p->kind);
	}
	return 0;
}

static int is_tensor_post(enum rt_post_kind k)
{
	return k == RT_ADD_SAME || k == RT_ADD_BCAST || k == RT_MUL_BCAST || k == RT_SUB_BCAST ||
	       k == RT_DIV_BCAST;
}

/* Post-op operands: logical (row-major over the dst's logical dims, with
 * broadcast dims of size 1); owned arrays. */
typedef struct {
	int npost;
	float *logical[RT_MAX_POST];
	size_t count[RT_MAX_POST];
	int64_t bdims[RT_MAX_POST][8]; /* operand dims padded to dst rank */
} post_data;

static void make_posts(post_data *pd, int npost, const rt_post *post, int nd,
		       const int64_t *ddims)
{
	memset(pd, 0, sizeof *pd);
	pd->npost = npost;
	for (int i = 0; i < npost; ++i) {
		if (!is_tensor_post(post[i].kind))
			continue;
		size_t cnt = 1;
		for (int j = 0; j < nd; ++j) {
			int64_t v = ddims[j];
			if (post[i].kind != RT_ADD_SAME) {
				int sj = j - (nd - post[i].rank);
				v = sj < 0 ? 1 : post[i].dims[sj];
			}
			pd->bdims[i][j] = v;
			cnt *= (size_t)v;
		}
		pd->count[i] = cnt;
		pd->logical[i] = rnd(cnt);
		if (post[i].kind == RT_DIV_BCAST) /* keep away from 0 */
			for (size_t e = 0; e < cnt; ++e)
				pd->logical[i][e] = pd->logical[i][e] >= 0 ? 0.5f + pd->logical[i][e]
									    : -0.5f + pd->logical[i][e];
	}
}

static void free_posts(post_data *pd)
{
	for (int i = 0; i < pd->npost; ++i)
		free(pd->logical[i]);
}

/* Applies the chain to a logical dst tensor (row-major, dims ddims). */
static void apply_posts(double *y, int nd, const int64_t *ddims, int npost, const rt_post *post,
			const post_data *pd)
{
	size_t total = 1;
	for (int j = 0; j < nd; ++j)
		total *= (size_t)ddims[j];
	for (size_t e = 0; e < total; ++e) {
		double x = y[e];
		for (int i = 0; i < npost; ++i) {
			const rt_post *p = &post[i];
			if (!is_tensor_post(p->kind)) {
				x = eltwise(p, x) * (p->scale != 0 ? p->scale : 1);
				continue;
			}
			/* index into the (broadcast) operand */
			size_t rem = e, off = 0, mul = 1;
			for (int j = nd - 1; j >= 0; --j) {
				size_t c = rem % (size_t)ddims[j];
				rem /= (size_t)ddims[j];
				if (pd->bdims[i][j] != 1)
					off += c * mul;
				mul *= (size_t)pd->bdims[i][j];
			}
			double s = pd->logical[i][off];
			switch (p->kind) {
			case RT_ADD_SAME:
			case RT_ADD_BCAST: x += s; break;
			case RT_MUL_BCAST: x *= s; break;
			case RT_SUB_BCAST: x -= s; break;
			case RT_DIV_BCAST: x /= s; break;
			default: break;
			}
		}
		y[e] = x;
	}
}

/* Logical [n, c, s...] (row-major) -> channels-last [n, s..., c]; nd = 2 + nsp. */
static void to_cl(const float *in, float *out, int nd, const int64_t *dims)
{
	size_t n = (size_t)dims[0], c = (size_t)dims[1], sp = 1;
	for (int j = 2; j < nd; ++j)
		sp *= (size_t)dims[j];
	for (size_t a = 0; a < n; ++a)
		for (size_t ch = 0; ch < c; ++ch)
			for (size_t s = 0; s < sp; ++s)
				out[(a * sp + s) * c + ch] = in[(a * c + ch) * sp + s];
}

static void from_cl(const float *in, float *out, int nd, const int64_t *dims)
{
	size_t n = (size_t)dims[0], c = (size_t)dims[1], sp = 1;
	for (int j = 2; j < nd; ++j)
		sp *= (size_t)dims[j];
	for (size_t a = 0; a < n; ++a)
		for (size_t ch = 0; ch < c; ++ch)
			for (size_t s = 0; s < sp; ++s)
				out[(a * c + ch) * sp + s] = in[(a * sp + s) * c + ch];
}

/* ------------------------------------------------------------------ */
/* convolution                                                         */

/* Fills out[] from the other fields. */
static void conv_out(rt_conv_desc *d)
{
	for (int i = 0; i < d->nsp; ++i) {
		int64_t s = d->stride[i] ? d->stride[i] : 1, dl = d->dil[i] ? d->dil[i] : 1;
		int64_t kr = dl * (d->k[i] - 1) + 1;
		d->out[i] = d->transposed
				    ? (d->in[i] - 1) * s - d->pad_l[i] - d->pad_r[i] + kr + d->out_pad[i]
				    : (d->in[i] + d->pad_l[i] + d->pad_r[i] - kr) / s + 1;
	}
}

/* A desc with n, ic, oc, groups, nsp and per-dim in/k/stride/pad/dil given
 * as the same value for every spatial dim. */
static rt_conv_desc cdesc(int nsp, int64_t n, int64_t ic, int64_t oc, int64_t g, int64_t in,
			  int64_t k, int64_t s, int64_t p, int64_t dil)
{
	rt_conv_desc d;
	memset(&d, 0, sizeof d);
	d.dtype = RT_F32;
	d.nsp = nsp, d.n = n, d.ic = ic, d.oc = oc, d.groups = g;
	for (int i = 0; i < nsp; ++i) {
		d.in[i] = in, d.k[i] = k, d.stride[i] = s, d.pad_l[i] = d.pad_r[i] = p;
		d.dil[i] = dil;
	}
	conv_out(&d);
	return d;
}

/* Reference, logical NCHW-style layouts; result in double. */
static void ref_conv(const rt_conv_desc *d, const float *x, const float *w, const float *b,
		     double *y)
{
	int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
		pl[3] = {0, 0, 0}, dl[3] = {1, 1, 1};
	int off = 3 - d->nsp;
	for (int i = 0; i < d->nsp; ++i) {
		in[off + i] = d->in[i], out[off + i] = d->out[i], k[off + i] = d->k[i];
		s[off + i] = d->stride[i] ? d->stride[i] : 1, pl[off + i] = d->pad_l[i];
		dl[off + i] = d->dil[i] ? d->dil[i] : 1;
	}
	const int64_t g = d->groups ? d->groups : 1, icg = d->ic / g, ocg = d->oc / g;
	const int64_t isz = in[0] * in[1] * in[2], osz = out[0] * out[1] * out[2],
		      ksz = k[0] * k[1] * k[2];
	for (int64_t e = 0; e < d->n * d->oc * osz; ++e)
		y[e] = d->has_bias ? b[(e / osz) % d->oc] : 0;
	for (int64_t n = 0; n < d->n; ++n)
		for (int64_t gi = 0; gi < g; ++gi)
			for (int64_t ci = 0; ci < icg; ++ci)
				for (int64_t co = 0; co < ocg; ++co)
					for (int64_t kd = 0; kd < k[0]; ++kd)
						for (int64_t kh = 0; kh < k[1]; ++kh)
							for (int64_t kw = 0; kw < k[2]; ++kw) {
		const int64_t icx = gi * icg + ci, ocx = gi * ocg + co,
			      kk = (kd * k[1] + kh) * k[2] + kw;
		/* conv: w[oc][ic/g][k]; transposed: w[ic][oc/g][k] */
		const double wv = d->transposed ? w[(icx * ocg + co) * ksz + kk]
						: w[(ocx * icg + ci) * ksz + kk];
		const float *xp = x + (n * d->ic + icx) * isz;
		double *yp = y + (n * d->oc + ocx) * osz;
		if (!d->transposed) {
			for (int64_t od = 0; od < out[0]; ++od) {
				int64_t id = od * s[0] - pl[0] + kd * dl[0];
				if (id < 0 || id >= in[0]) continue;
				for (int64_t oh = 0; oh < out[1]; ++oh) {
					int64_t ih = oh * s[1] - pl[1] + kh * dl[1];
					if (ih < 0 || ih >= in[1]) continue;
					for (int64_t ow = 0; ow < out[2]; ++ow) {
						int64_t iw = ow * s[2] - pl[2] + kw * dl[2];
						if (iw < 0 || iw >= in[2]) continue;
						yp[(od * out[1] + oh) * out[2] + ow] +=
							wv * xp[(id * in[1] + ih) * in[2] + iw];
					}
				}
			}
		} else {
			for (int64_t id = 0; id < in[0]; ++id) {
				int64_t od = id * s[0] - pl[0] + kd * dl[0];
				if (od < 0 || od >= out[0]) continue;
				for (int64_t ih = 0; ih < in[1]; ++ih) {
					int64_t oh = ih * s[1] - pl[1] + kh * dl[1];
					if (oh < 0 || oh >= out[1]) continue;
					for (int64_t iw = 0; iw < in[2]; ++iw) {
						int64_t ow = iw * s[2] - pl[2] + kw * dl[2];
						if (ow < 0 || ow >= out[2]) continue;
						yp[(od * out[1] + oh) * out[2] + ow] +=
							wv * xp[(id * in[1] + ih) * in[2] + iw];
					}
				}
			}
		}
							}
}

typedef struct {
	size_t ysize;
	float *y;  /* logical result of the last run_conv */
} conv_result;

/* Runs desc d through rt (on ctx) and through the reference; compares.  If
 * res is given, keeps the (logical) output there.  inplace_sum: pass dst as
 * the RT_ADD_SAME operand, pre-filled. */
static void run_conv_ex(rt_ctx *ctx, const rt_conv_desc *d, const char *name, int inplace_sum,
			conv_result *res)
{
	const int nd = d->nsp + 2;
	int64_t sdims[5], ddims[5];
	size_t ssz = (size_t)d->n * (size_t)d->ic, dsz = (size_t)d->n * (size_t)d->oc, ksz = 1;
	sdims[0] = ddims[0] = d->n, sdims[1] = d->ic, ddims[1] = d->oc;
	for (int i = 0; i < d->nsp; ++i) {
		sdims[2 + i] = d->in[i], ddims[2 + i] = d->out[i];
		ssz *= (size_t)d->in[i], dsz *= (size_t)d->out[i], ksz *= (size_t)d->k[i];
	}
	const int64_t g = d->groups ? d->groups : 1;
	size_t wsz = (size_t)(d->transposed ? d->ic * (d->oc / g) : d->oc * (d->ic / g)) * ksz;
	float *x = rnd(ssz), *w = rnd(wsz), *b = rnd((size_t)d->oc);
	post_data pd;
	make_posts(&pd, d->npost, d->post, nd, ddims);

	double *want = malloc(dsz * sizeof *want);
	assert_non_null(want);
	ref_conv(d, x, w, d->has_bias ? b : NULL, want);
	apply_posts(want, nd, ddims, d->npost, d->post, &pd);

	char err[512] = "";
	rt_conv *c = NULL;
	if (rt_conv_create(ctx, d, w, d->has_bias ? b : NULL, &c, err, sizeof err))
		fail_msg("%s: rt_conv_create: %s", name, err);
	/* the runtime must not keep pointers to weight/bias */
	for (size_t i = 0; i < wsz; ++i)
		w[i] = NAN;
	b[0] = NAN;

	float *xin = x, *dst = malloc(dsz * sizeof *dst), *got = malloc(dsz * sizeof *got);
	float *phys[RT_MAX_POST] = {0};
	const void *post_src[RT_MAX_POST] = {0};
	assert_non_null(dst);
	assert_non_null(got);
	if (d->channels_last || d->src_nhwc) { /* src_nhwc: an NHWC chain's boundary */
		xin = malloc(ssz * sizeof *xin);
		assert_non_null(xin);
		to_cl(x, xin, nd, sdims);
	}
	for (int i = 0; i < d->npost; ++i) {
		if (!pd.logical[i])
			continue;
		phys[i] = malloc(pd.count[i] * sizeof(float));
		assert_non_null(phys[i]);
		if (d->channels_last)
			to_cl(pd.logical[i], phys[i], nd, pd.bdims[i]);
		else
			memcpy(phys[i], pd.logical[i], pd.count[i] * sizeof(float));
		post_src[i] = phys[i];
		if (d->post[i].kind == RT_ADD_SAME && inplace_sum) {
			memcpy(dst, phys[i], dsz * sizeof *dst);
			post_src[i] = dst;
		}
	}
	for (size_t i = 0; !inplace_sum && i < dsz; ++i)
		dst[i] = NAN; /* must be overwritten */
	if (rt_conv_run(c, xin, dst, post_src, err, sizeof err))
		fail_msg("%s: rt_conv_run: %s", name, err);
	if (d->channels_last || d->dst_nhwc)
		from_cl(dst, got, nd, ddims);
	else
		memcpy(got, dst, dsz * sizeof *got);
	check_close(name, got, want, dsz);

	rt_conv_destroy(c);
	if (res) {
		res->ysize = dsz;
		res->y = got;
	} else {
		free(got);
	}
	for (int i = 0; i < d->npost; ++i)
		free(phys[i]);
	if (xin != x)
		free(xin);
	free(dst);
	free(want);
	free(x);
	free(w);
	free(b);
	free_posts(&pd);
}

/* Runs d in the three ways a conv can run: NCHW direct (GEMM), NCHW via an
 * NHWC primitive, NHWC. */
static void run_conv(rt_ctx *ctx, rt_conv_desc d, const char *name)
{
	static const struct {
		int cl;
		enum rt_conv_path path;
		const char *name;
	} ways[] = {{0, RT_PATH_DIRECT, "nchw"}, {0, RT_PATH_NHWC, "nchw-via-nhwc"}, {1, 0, "nhwc"}};
	char nm[128];
	for (size_t i = 0; i < sizeof ways / sizeof *ways; ++i) {
		d.channels_last = ways[i].cl;
		d.path = ways[i].path;
		snprintf(nm, sizeof nm, "%s/%s", name, ways[i].name);
		uint64_t seed = rng_state;
		run_conv_ex(ctx, &d, nm, 0, NULL);
		rng_state = seed; /* same data every way */
	}
	frand();
}

static void test_conv2d_basic(void **state)
{
	rt_conv_desc d = cdesc(2, 2, 3, 5, 1, 7, 3, 1, 1, 1);
	d.has_bias = 1;
	run_conv(*state, d, "3x3 s1 p1 bias");
	d = cdesc(2, 1, 4, 7, 1, 13, 3, 1, 0, 1);
	run_conv(*state, d, "3x3 p0 no bias");
	d = cdesc(2, 1, 16, 32, 1, 9, 5, 1, 2, 1);
	d.has_bias = 1;
	run_conv(*state, d, "5x5 16->32");
}

static void test_conv2d_stride_pad_dil_groups(void **state)
{
	rt_conv_desc d = cdesc(2, 2, 4, 6, 2, 13, 3, 2, 1, 1);
	d.in[1] = 7;
	d.pad_l[0] = 1, d.pad_r[0] = 2, d.pad_l[1] = 0, d.pad_r[1] = 1; /* asymmetric */
	d.dil[0] = 2;
	d.stride[1] = 1;
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "s2 asym-pad dil2 g2");

	d = cdesc(2, 1, 6, 9, 3, 13, 3, 2, 0, 1); /* floor: last row unused */
	d.in[1] = 8;
	conv_out(&d);
	run_conv(*state, d, "g3 s2 p0 floor");

	d = cdesc(2, 1, 8, 8, 1, 13, 3, 1, 2, 2);
	d.k[1] = 1, d.pad_l[1] = d.pad_r[1] = 0;
	conv_out(&d);
	run_conv(*state, d, "3x1 dil2");
}

/* Taps that only ever read padding are dropped (conv_trim): the same results
 * as the reference, the packed weights that much smaller; one shape of a
 * weight_key trimmed, another not, each with its own weights. */
static void test_conv_trim(void **state)
{
	rt_conv_desc d = cdesc(2, 2, 8, 16, 1, 9, 3, 1, 1, 1);
	d.in[0] = 1; /* one row: only the middle row of the kernel reads the image */
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "3x3 p1 over 1x9");
	d.channels_last = 1;
	run_conv(*state, d, "3x3 p1 over 1x9 NHWC");
	d = cdesc(3, 1, 4, 8, 1, 6, 3, 1, 1, 1);
	d.in[0] = d.in[1] = 1;
	conv_out(&d);
	run_conv(*state, d, "3x3x3 p1 over 1x1x6");
	d = cdesc(2, 1, 4, 8, 2, 2, 5, 2, 2, 1); /* 5x5 stride 2 over 2x2: taps 1..3 */
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "5x5 s2 p2 over 2x2 g2");
	d = cdesc(2, 1, 4, 8, 1, 1, 3, 1, 2, 2); /* dilated: the pad would go negative, kept whole */
	d.in[1] = 6;
	conv_out(&d);
	run_conv(*state, d, "3x3 dil2 p2 over 1x6");

	/* the packed weights: 3 of 9 taps */
	char err[256];
	rt_conv_desc a = cdesc(2, 1, 16, 32, 1, 12, 3, 1, 1, 1), b = a;
	a.in[0] = 1, a.weight_key = b.weight_key = 7;
	conv_out(&a);
	float *w = rnd(32 * 16 * 9);
	rt_conv *ca = NULL, *cb = NULL;
	if (rt_conv_create(*state, &a, w, NULL, &ca, err, sizeof err) ||
	    rt_conv_create(*state, &b, w, NULL, &cb, err, sizeof err))
		fail_msg("create: %s", err);
	assert_true(rt_conv_weight_bytes(ca) * 3 <= rt_conv_weight_bytes(cb) + 64 * 16);
	assert_true(rt_conv_weight_bytes(ca) >= 32 * 16 * 3 * sizeof(float));
	rt_conv_destroy(ca);
	rt_conv_destroy(cb);
	free(w);
}

static void test_conv2d_depthwise_1x1(void **state)
{
	rt_conv_desc d = cdesc(2, 2, 16, 16, 16, 13, 3, 2, 1, 1);
	d.has_bias = 1;
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_CLAMP, .a = 0, .b = 6};
	run_conv(*state, d, "depthwise relu6");

	d = cdesc(2, 1, 7, 7, 7, 7, 5, 1, 2, 1);
	run_conv(*state, d, "depthwise 7ch 5x5");

	d = cdesc(2, 3, 32, 16, 1, 7, 1, 1, 0, 1);
	d.has_bias = 1;
	run_conv(*state, d, "1x1");

	d = cdesc(2, 1, 13, 7, 1, 13, 1, 2, 0, 1);
	run_conv(*state, d, "1x1 s2 odd");

	d = cdesc(2, 1, 1, 1, 1, 1, 1, 1, 0, 1);
	d.has_bias = 1;
	run_conv(*state, d, "1x1x1x1");

	/* f32 depthwise: jit_dw, not oneDNN's first pick (brdgmm_dw), unless RT_DW_JIT=0 */
	d = cdesc(2, 1, 32, 32, 32, 28, 3, 1, 1, 1);
	d.channels_last = 1, d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_RELU};
	run_conv(*state, d, "depthwise nhwc relu");
	char err[256];
	float *w = rnd(32 * 9);
	rt_conv *c = NULL;
	assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
	if (strncmp(rt_conv_impl(c), "jit_dw", 6))
		fail_msg("depthwise nhwc relu runs %s, not jit_dw", rt_conv_impl(c));
	rt_conv_destroy(c);
	setenv("RT_DW_JIT", "0", 1); /* oneDNN's pick: brdgmm_dw with AVX-512, jit_dw too below */
	assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
	if (has_isa(dnnl_cpu_isa_avx512_core))
		assert_int_not_equal(strncmp(rt_conv_impl(c), "jit_dw", 6), 0);
	rt_conv_destroy(c);
	unsetenv("RT_DW_JIT");
	free(w);
}

/* squeeze-excite's convs: 1x1 over one pixel of one image run the gemv */
/* A strided 1-d conv runs as a 1x1 conv over its windows (conv_col): the
 * windows copied out into the workspace, the weights repacked.  Windows
 * that overlap (k 3, stride 2), that meet (k 2, stride 2) and with a gap
 * (k 2, stride 3), with a bias, an eltwise and a residual sum, batches, an
 * NCW caller, NWC, and one NWC side; each against the reference, each
 * reporting the path (coil:windows+, its windows in the workspace); not
 * taken with padding, nor with few channels in, nor with RT_CONV_COL=0. */
static void test_conv_col(void **state)
{
	static const struct {
		int64_t n, ic, oc, in, k, s;
		int bias;
		enum rt_post_kind post;
	} cases[] = {
		{1, 64, 32, 50, 3, 2, 1, RT_GELU_ERF}, {3, 64, 24, 33, 2, 2, 0, RT_ADD_SAME}, {2, 80, 16, 41, 2, 3, 1, RT_RELU},
		{1, 96, 40, 29, 5, 2, 0, 0},
	};
	char nm[96], err[256];
	for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i)
		for (int way = 0; way < 4; ++way) {
			rt_conv_desc d = cdesc(1, cases[i].n, cases[i].ic, cases[i].oc, 1, cases[i].in, cases[i].k,
					       cases[i].s, 0, 1);
			d.has_bias = cases[i].bias;
			if (cases[i].post)
				d.npost = 1, d.post[0].kind = cases[i].post;
			if (way == 3 && cases[i].post == RT_ADD_SAME)
				continue; /* (an NWC dst's residual would be NWC too) */
			d.channels_last = way == 1, d.src_nhwc = way == 2, d.dst_nhwc = way == 3;
			snprintf(nm, sizeof nm, "conv_col case %zu way %d", i, way);
			run_conv_ex(*state, &d, nm, 0, NULL);
			float *w = rnd((size_t)(d.oc * d.ic * d.k[0])), *b = rnd((size_t)d.oc);
			rt_conv *c = NULL;
			assert_int_equal(rt_conv_create(*state, &d, w, b, &c, err, sizeof err), RT_OK);
			free(b);
			const size_t windows = (size_t)(d.n * d.out[0] * d.k[0] * d.ic) * sizeof(float);
			if (strncmp(rt_conv_impl(c), "coil:windows+", 13) || rt_conv_scratch_bytes(c) < windows)
				fail_msg("%s: %s, %zu bytes of workspace (the windows: %zu)", nm, rt_conv_impl(c),
					 rt_conv_scratch_bytes(c), windows);
			rt_conv_destroy(c);
			free(w);
		}
	/* not taken: padding, 16 channels in, RT_CONV_COL=0 */
	rt_conv_desc off[3] = {cdesc(1, 1, 64, 32, 1, 50, 3, 2, 1, 1), cdesc(1, 1, 16, 32, 1, 50, 3, 2, 0, 1),
			       cdesc(1, 1, 64, 32, 1, 50, 3, 2, 0, 1)};
	for (int i = 0; i < 3; ++i) {
		if (i == 2)
			setenv("RT_CONV_COL", "0", 1);
		float *w = rnd((size_t)(off[i].oc * off[i].ic * 3));
		rt_conv *c = NULL;
		assert_int_equal(rt_conv_create(*state, &off[i], w, NULL, &c, err, sizeof err), RT_OK);
		assert_null(strstr(rt_conv_impl(c), "coil:windows"));
		rt_conv_destroy(c);
		free(w);
		snprintf(nm, sizeof nm, "conv_col off %d", i);
		run_conv(*state, off[i], nm);
	}
	unsetenv("RT_CONV_COL");
}

static void test_conv_gemv(void **state)
{
	static const rt_post posts[] = {
		{.kind = RT_RELU}, {.kind = RT_HARDSIGMOID}, {.kind = RT_ADD_SAME},
		{.kind = RT_ADD_BCAST, .rank = 3, .dims = {24, 1, 1}},
		{.kind = RT_MUL_BCAST, .rank = 4, .dims = {1, 24, 1, 1}},
		{.kind = RT_SUB_BCAST, .rank = 1, .dims = {1}},
		{.kind = RT_DIV_BCAST, .rank = 4, .dims = {1, 24, 1, 1}},
	};
	for (size_t i = 0; i < sizeof posts / sizeof *posts; ++i)
		for (int cl = 0; cl < 2; ++cl) {
			rt_conv_desc d = cdesc(2, 1, 100, 24, 1, 1, 1, 1, 0, 1);
			d.has_bias = 1, d.channels_last = cl;
			d.npost = 1;
			d.post[0] = posts[i];
			char nm[64];
			snprintf(nm, sizeof nm, "1x1 of one pixel, post %zu cl %d", i, cl);
			run_conv(*state, d, nm);
		}
	rt_conv_desc d = cdesc(1, 1, 33, 7, 1, 1, 1, 1, 0, 1);
	run_conv(*state, d, "conv1d of one step, no bias");
	char err[256];
	float *w = rnd(100 * 24);
	rt_conv *c = NULL;
	d = cdesc(2, 1, 100, 24, 1, 1, 1, 1, 0, 1);
	assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
	assert_string_equal(rt_conv_impl(c), "coil:gemv");
	assert_int_equal(rt_conv_weight_bytes(c), 100 * 32 * sizeof(float)); /* panels: oc rounded up to 16 */
	rt_conv_destroy(c);
	d = cdesc(2, 2, 100, 24, 1, 1, 1, 1, 0, 1); /* two images: oneDNN's */
	assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
	assert_string_not_equal(rt_conv_impl(c), "coil:gemv");
	rt_conv_destroy(c);
	free(w);
}

/* dilated depthwise convs run oneDNN's jit_dw kernel (its NHWC one takes no dilation) */
static void test_conv_dw_dilated(void **state)
{
	for (int cl = 0; cl < 2; ++cl) {
		rt_conv_desc d = cdesc(2, 1, 32, 32, 32, 14, 5, 1, 4, 2);
		d.has_bias = 1, d.channels_last = cl;
		d.npost = 1;
		d.post[0] = (rt_post){.kind = RT_HARDSWISH};
		run_conv(*state, d, cl ? "dw 5x5 dil 2 nhwc" : "dw 5x5 dil 2 nchw");
		d = cdesc(1, 2, 16, 16, 16, 100, 3, 1, 8, 8);
		d.channels_last = cl;
		run_conv(*state, d, cl ? "dw 1-d k3 dil 8 nwc" : "dw 1-d k3 dil 8 ncw");
	}
	rt_conv_desc d = cdesc(2, 1, 48, 48, 48, 9, 3, 2, 3, 3);
	run_conv(*state, d, "dw 3x3 s2 dil 3");
	char err[256];
	float *w = rnd(32 * 25);
	rt_conv *c = NULL;
	d = cdesc(2, 1, 32, 32, 32, 14, 5, 1, 4, 2);
	d.channels_last = 1;
	assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
	if (strncmp(rt_conv_impl(c), "jit", 3))
		fail_msg("dilated depthwise runs %s, not a jit kernel", rt_conv_impl(c));
	rt_conv_destroy(c);
	free(w);
}

/* Grouped convs over NHWC rows of a multiple of 128 channels and at least
 * 56 kB, at most 32 channels a group, run in oneDNN's blocked layout (its
 * NHWC kernel is 2-8x slower there): right in every layout and with a
 * residual sum (staged through the blocked layout); narrower rows, 64
 * channels a group, other widths and RT_GRP_BLOCKED=0 stay NHWC. */
static void test_conv_grouped_blocked(void **state)
{
	rt_conv_desc d = cdesc(2, 2, 128, 128, 32, 112, 3, 1, 1, 1); /* 4 a group */
	d.in[0] = 5;
	d.has_bias = 1, d.npost = 1, d.post[0] = (rt_post){.kind = RT_RELU};
	conv_out(&d);
	run_conv(*state, d, "g32 128->128 3x3 relu");
	d = cdesc(2, 1, 256, 512, 16, 57, 3, 2, 1, 1); /* 16 in, 32 out a group, stride 2 */
	d.in[0] = 6;
	conv_out(&d);
	run_conv(*state, d, "g16 256->512 s2");
	d = cdesc(2, 1, 128, 128, 8, 112, 3, 1, 1, 1);
	d.in[0] = 3;
	d.npost = 1, d.post[0] = (rt_post){.kind = RT_ADD_SAME};
	conv_out(&d);
	run_conv(*state, d, "g8 128 residual");

	/* below AVX-512's rule: one image at a time, blocked, with a batch */
	env_saved env = env_force("RT_GRP_IMAGES", "1");
	d = cdesc(2, 3, 64, 64, 4, 24, 3, 2, 1, 1); /* 16 a group, stride 2, 56+ columns */
	d.in[1] = 57, d.has_bias = 1, d.npost = 1, d.post[0] = (rt_post){.kind = RT_RELU};
	conv_out(&d);
	run_conv(*state, d, "g4 64 s2, one image at a time");
	d = cdesc(2, 2, 128, 128, 16, 9, 3, 1, 1, 1); /* 8 a group */
	d.npost = 2, d.post[0] = (rt_post){.kind = RT_ADD_SAME}, d.post[1] = (rt_post){.kind = RT_RELU};
	conv_out(&d);
	run_conv(*state, d, "g16 128 residual relu, one image at a time");
	d = cdesc(2, 3, 16, 24, 1, 13, 3, 2, 1, 1); /* dense, stride 2 */
	d.in[1] = 10, d.has_bias = 1, d.npost = 2;
	d.post[0] = (rt_post){.kind = RT_ADD_SAME}, d.post[1] = (rt_post){.kind = RT_RELU};
	conv_out(&d);
	run_conv(*state, d, "dense 3x3 s2 residual relu, one image at a time");
	env_restore(&env);

	char err[256];
	float *w = rnd(1024 * 32 * 9); /* the largest case */
	struct {
		int64_t n, ic, g, width;
		int cl, images, blocked;
	} cases[] = {/* AVX-512's rule (RT_GRP_IMAGES=0) */
		     {1, 256, 32, 56, 1, 0, 1}, {1, 256, 32, 56, 0, 0, 1}, {1, 1024, 64, 14, 1, 0, 1},
		     {1, 1024, 32, 14, 1, 0, 1} /* oneDNN lists its NHWC brgconv first */,
		     {1, 256, 32, 28, 1, 0, 0} /* 28 kB rows */, {1, 256, 4, 56, 1, 0, 0} /* 64 a group */,
		     {1, 96, 12, 200, 1, 0, 0} /* 96 channels */,
		     /* below AVX-512's (RT_GRP_IMAGES=1) */
		     {1, 256, 32, 56, 1, 1, 0} /* no batch */, {2, 256, 32, 56, 1, 1, 1}, {2, 256, 32, 28, 1, 1, 1},
		     {2, 256, 32, 28, 0, 1, 1}, {2, 64, 4, 56, 1, 1, 1}, {2, 48, 2, 56, 1, 1, 1},
		     {2, 320, 20, 28, 1, 1, 0} /* 16 a group, 28 columns */, {2, 72, 6, 56, 1, 1, 0} /* 12 a group */,
		     {2, 1024, 32, 14, 1, 1, 0}};
	const env_saved nowino = env_force("RT_CWINO", "0"); /* (it comes first for some, below AVX-512) */
	for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
		rt_conv *c = NULL;
		d = cdesc(2, cases[i].n, cases[i].ic, cases[i].ic, cases[i].g, cases[i].width, 3, 1, 1, 1);
		d.channels_last = cases[i].cl;
		env = env_force("RT_GRP_IMAGES", cases[i].images ? "1" : "0");
		assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
		env_restore(&env);
		if (rt_conv_blocked(c) != cases[i].blocked)
			fail_msg("RT_GRP_IMAGES=%d n%d g%d %dx%dx%d: blocked %d, want %d (%s)", cases[i].images,
				 (int)cases[i].n, (int)cases[i].g, (int)cases[i].ic, (int)cases[i].width,
				 (int)cases[i].width, rt_conv_blocked(c), cases[i].blocked, rt_conv_impl(c));
		rt_conv_destroy(c);
	}
	env_restore(&nowino);
	struct {
		int64_t n, k, s;
		int blocked;
	} dense[] = {{2, 3, 2, 1}, {1, 3, 2, 0} /* no batch */, {2, 1, 2, 0} /* 1x1 */, {2, 3, 1, 0} /* stride 1 */};
	for (size_t i = 0; i < sizeof dense / sizeof *dense; ++i) {
		rt_conv *c = NULL;
		d = cdesc(2, dense[i].n, 64, 128, 1, 28, dense[i].k, dense[i].s, dense[i].k / 2, 1);
		d.channels_last = 1;
		env = env_force("RT_GRP_IMAGES", "1");
		const env_saved env2 = env_force("RT_WINOGRAD", "0"); /* (Winograd would take the stride-1 one) */
		assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
		env_restore(&env2);
		env_restore(&env);
		if (rt_conv_blocked(c) != dense[i].blocked)
			fail_msg("dense n%d %dx%d stride %d: blocked %d, want %d (%s)", (int)dense[i].n, (int)dense[i].k,
				 (int)dense[i].k, (int)dense[i].s, rt_conv_blocked(c), dense[i].blocked, rt_conv_impl(c));
		rt_conv_destroy(c);
	}
	rt_conv *c = NULL;
	d = cdesc(2, 1, 256, 256, 32, 56, 3, 1, 1, 1);
	d.channels_last = 1;
	setenv("RT_GRP_BLOCKED", "0", 1);
	env = env_force("RT_GRP_IMAGES", "0");
	assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err), RT_OK);
	env_restore(&env);
	unsetenv("RT_GRP_BLOCKED");
	assert_int_equal(rt_conv_blocked(c), 0);
	rt_conv_destroy(c);
	free(w);
}

static void test_conv1d_3d(void **state)
{
	rt_conv_desc d = cdesc(1, 2, 5, 7, 1, 13, 3, 2, 1, 1);
	d.has_bias = 1;
	run_conv(*state, d, "1d s2");
	d = cdesc(1, 1, 6, 4, 2, 13, 3, 1, 2, 2);
	run_conv(*state, d, "1d g2 dil2");
	/* 1-d runs as 2-d of height 1 (conv_as_2d): depthwise on oneDNN's depthwise kernel,
	 * both layouts, with an eltwise and a residual post-op; a broadcast one stays 1-d */
	d = cdesc(1, 2, 32, 32, 32, 50, 3, 1, 4, 4);
	d.has_bias = 1;
	d.npost = 2, d.post[0].kind = RT_RELU, d.post[1].kind = RT_ADD_SAME;
	run_conv(*state, d, "1d depthwise dil4 relu sum");
	d.channels_last = 1;
	run_conv(*state, d, "1d depthwise dil4 relu sum NWC");
	d.channels_last = 0, d.npost = 1, d.post[0].kind = RT_MUL_BCAST, d.post[0].rank = 3;
	d.post[0].dims[0] = 1, d.post[0].dims[1] = 32, d.post[0].dims[2] = 1;
	run_conv(*state, d, "1d depthwise, a per-channel scale post-op (1-d)");
	d = cdesc(3, 2, 3, 4, 1, 5, 3, 1, 1, 1);
	d.in[1] = 6, d.in[2] = 7, d.stride[1] = 2;
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "3d");
	d = cdesc(3, 1, 4, 8, 2, 5, 1, 1, 0, 1);
	run_conv(*state, d, "3d 1x1x1 g2");
}

static void test_conv_transposed(void **state)
{
	rt_conv_desc d = cdesc(2, 2, 6, 4, 2, 5, 3, 2, 1, 1);
	d.transposed = 1;
	d.out_pad[0] = d.out_pad[1] = 1;
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv 3x3 s2 p1 op1 g2");

	d = cdesc(2, 1, 8, 5, 1, 7, 4, 2, 1, 1);
	d.transposed = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv 4x4 s2 p1");

	d = cdesc(2, 2, 3, 4, 1, 5, 3, 2, 0, 1); /* out_pad > pad */
	d.transposed = 1;
	d.out_pad[0] = 1;
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv p0 op1");

	d = cdesc(2, 1, 4, 6, 2, 6, 3, 1, 2, 2);
	d.transposed = 1;
	d.pad_r[1] = 1; /* asymmetric */
	conv_out(&d);
	run_conv(*state, d, "deconv dil2 asym");

	d = cdesc(1, 2, 5, 3, 1, 13, 3, 3, 1, 1);
	d.transposed = 1;
	d.out_pad[0] = 2;
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv 1d s3 op2");

	d = cdesc(3, 1, 4, 4, 4, 4, 2, 2, 0, 1);
	d.transposed = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv 3d depthwise");

	/* one group, no post-op: the GEMM path (conv_gemm_ok), both layouts */
	d = cdesc(2, 2, 6, 5, 1, 5, 3, 2, 1, 2);
	d.transposed = 1;
	d.out_pad[1] = 1;
	d.pad_r[0] = 2; /* asymmetric */
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv gemm dil2 s2 asym op1");
	d.src_nhwc = 1;
	run_conv(*state, d, "deconv gemm dil2 s2 asym op1 NHWC src");
	d.src_nhwc = 0;
	d = cdesc(2, 1, 12, 4, 1, 9, 8, 4, 0, 1); /* hdemucs: k 8x1, stride 4x1 */
	d.transposed = 1;
	d.k[1] = 1, d.stride[1] = 1, d.in[1] = 11;
	d.has_bias = 1;
	conv_out(&d);
	run_conv(*state, d, "deconv gemm 8x1 s4x1");
	d.src_nhwc = 1;
	run_conv(*state, d, "deconv gemm 8x1 s4x1 NHWC src, NCHW dst");
	d.src_nhwc = 0, d.dst_nhwc = 1;
	run_conv(*state, d, "deconv 8x1 s4x1 NCHW src, NHWC dst (oneDNN's)");
	d.dst_nhwc = 0, d.channels_last = 1;
	run_conv(*state, d, "deconv 8x1 s4x1 NHWC (oneDNN's)");
	d.npost = 1, d.post[0].kind = RT_RELU; /* a post-op: oneDNN's */
	run_conv(*state, d, "deconv 8x1 s4x1 NHWC relu");
}

static void test_conv_post_each(void **state)
{
	static const rt_post posts[] = {
		{.kind = RT_RELU},
		{.kind = RT_LEAKY_RELU, .a = 0.1f},
		{.kind = RT_GELU_ERF},
		{.kind = RT_GELU_TANH},
		{.kind = RT_SILU},
		{.kind = RT_SIGMOID},
		{.kind = RT_TANH},
		{.kind = RT_HARDSWISH},
		{.kind = RT_HARDSIGMOID},
		{.kind = RT_CLAMP, .a = -0.5f, .b = 0.75f},
		{.kind = RT_CLAMP, .a = -INFINITY, .b = 0.25f},
		{.kind = RT_ELU, .a = 0.7f},
		{.kind = RT_LINEAR, .a = -1.5f, .b = 0.25f},
		{.kind = RT_ADD_SAME},
		{.kind = RT_ADD_BCAST, .rank = 3, .dims = {8, 1, 1}},
		{.kind = RT_MUL_BCAST, .rank = 4, .dims = {1, 8, 1, 1}},
		{.kind = RT_SUB_BCAST, .rank = 3, .dims = {8, 1, 1}},
		{.kind = RT_DIV_BCAST, .rank = 3, .dims = {8, 1, 1}},
		{.kind = RT_ADD_BCAST, .rank = 4, .dims = {2, 8, 5, 5}}, /* no broadcast */
		{.kind = RT_ADD_BCAST, .rank = 1, .dims = {1}},          /* scalar */
	};
	for (size_t i = 0; i < sizeof posts / sizeof *posts; ++i) {
		rt_conv_desc d = cdesc(2, 2, 6, 8, 1, 5, 3, 1, 1, 1);
		d.has_bias = 1;
		d.npost = 1;
		d.post[0] = posts[i];
		char nm[64];
		snprintf(nm, sizeof nm, "post %zu (kind %d)", i, (int)posts[i].kind);
		run_conv(*state, d, nm);
	}
}

static void test_conv_post_chains(void **state)
{
	/* resnet block tail: bias + residual + relu */
	rt_conv_desc d = cdesc(2, 2, 16, 16, 1, 7, 3, 1, 1, 1);
	d.has_bias = 1;
	d.npost = 2;
	d.post[0] = (rt_post){.kind = RT_ADD_SAME};
	d.post[1] = (rt_post){.kind = RT_RELU};
	run_conv(*state, d, "bias+residual+relu");
	d.channels_last = 1;
	run_conv_ex(*state, &d, "bias+residual(in place)+relu", 1, NULL);
	d.channels_last = 0, d.path = RT_PATH_NHWC;
	run_conv_ex(*state, &d, "bias+residual(in place)+relu/nchw-via-nhwc", 1, NULL);
	d.path = RT_PATH_DIRECT;
	run_conv_ex(*state, &d, "bias+residual(in place)+relu/nchw", 1, NULL);
	d.path = RT_PATH_AUTO;

	/* per-channel scale/shift (folded batchnorm) then gelu, then residual */
	d = cdesc(2, 1, 8, 13, 1, 7, 3, 2, 1, 1);
	d.npost = 4;
	d.post[0] = (rt_post){.kind = RT_MUL_BCAST, .rank = 3, .dims = {13, 1, 1}};
	d.post[1] = (rt_post){.kind = RT_ADD_BCAST, .rank = 3, .dims = {13, 1, 1}};
	d.post[2] = (rt_post){.kind = RT_GELU_TANH};
	d.post[3] = (rt_post){.kind = RT_ADD_SAME};
	run_conv(*state, d, "bn+gelu_tanh+residual");

	/* hardswish then hardsigmoid-gated multiply-ish chain */
	d = cdesc(2, 1, 16, 16, 16, 7, 3, 1, 1, 1);
	d.has_bias = 1;
	d.npost = 3;
	d.post[0] = (rt_post){.kind = RT_HARDSWISH};
	d.post[1] = (rt_post){.kind = RT_HARDSIGMOID};
	d.post[2] = (rt_post){.kind = RT_CLAMP, .a = 0, .b = 6};
	run_conv(*state, d, "dw hardswish+hardsigmoid+relu6");

	/* n = 1: a rank-3 {c, h, w} operand is dst-shaped */
	d = cdesc(2, 1, 8, 8, 1, 6, 3, 1, 1, 1);
	d.npost = 2;
	d.post[0] = (rt_post){.kind = RT_ADD_BCAST, .rank = 3, .dims = {8, 6, 6}};
	d.post[1] = (rt_post){.kind = RT_SIGMOID};
	run_conv(*state, d, "n1 rank-3 full operand+sigmoid");

	d = cdesc(1, 2, 4, 6, 1, 13, 3, 1, 1, 1);
	d.has_bias = 1;
	d.npost = 3;
	d.post[0] = (rt_post){.kind = RT_GELU_ERF};
	d.post[1] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {1, 13}}; /* spatial */
	d.post[2] = (rt_post){.kind = RT_SILU};
	run_conv_ex(*state, &d, "1d gelu_erf+add(spatial)+silu", 0, NULL); /* NCHW (auto) only */

	d = cdesc(2, 1, 6, 4, 2, 5, 3, 2, 1, 1);
	d.transposed = 1;
	d.out_pad[0] = d.out_pad[1] = 1;
	d.has_bias = 1;
	conv_out(&d);
	d.npost = 3;
	d.post[0] = (rt_post){.kind = RT_ADD_SAME};
	d.post[1] = (rt_post){.kind = RT_LEAKY_RELU, .a = 0.2f};
	d.post[2] = (rt_post){.kind = RT_TANH};
	run_conv(*state, d, "deconv residual+leaky+tanh");
}

/* Binary operands of every broadcast pattern: NCHW takes them all;
 * channels-last takes scalar, per-channel and full, and refuses the rest
 * with RT_EUNSUP (oneDNN 2.6 computes them wrongly). */
static void test_conv_bcast_patterns(void **state)
{
	for (int nsp = 1; nsp <= 2; ++nsp) {
		rt_conv_desc d = cdesc(nsp, 2, 6, 8, 1, 5, 3, 1, 1, 1);
		d.in[nsp - 1] = 6;
		conv_out(&d);
		const int nd = nsp + 2;
		const int64_t dd[4] = {d.n, d.oc, d.out[0], d.out[1]};
		for (int mask = 0; mask < 1 << nd; ++mask) {
			int ok_cl = mask == 0 || mask == 2 || mask == (1 << nd) - 1;
			d.npost = 2;
			d.post[0] = (rt_post){.kind = RT_MUL_BCAST, .rank = nd};
			d.post[1] = (rt_post){.kind = RT_RELU};
			for (int j = 0; j < nd; ++j)
				d.post[0].dims[j] = (mask >> j & 1) ? dd[j] : 1;
			char nm[64];
			snprintf(nm, sizeof nm, "%dd bcast mask %x", nsp, mask);
			/* NCHW: direct and auto take every pattern (auto goes via
			 * NHWC where it can); NHWC and forced via-NHWC refuse some */
			for (int way = 0; way < 4; ++way) {
				d.channels_last = way == 3;
				d.path = way == 0 ? RT_PATH_DIRECT : way == 1 ? RT_PATH_AUTO
							       : RT_PATH_NHWC;
				if (way < 2 || ok_cl) {
					run_conv_ex(*state, &d, nm, 0, NULL);
					continue;
				}
				float w[8 * 6 * 9] = {0};
				char err[256] = "";
				rt_conv *c = NULL;
				assert_int_equal(rt_conv_create(*state, &d, w, NULL, &c, err, sizeof err),
						 RT_EUNSUP);
				assert_null(c);
			}
		}
	}
}

/* RT_PATH_AUTO: GEMM for plain dense 1x1s, NHWC otherwise; the context's
 * workspace is shared and run() works after later creates grow it. */
static void test_conv_auto_path(void **state)
{
	rt_ctx *ctx = *state;
	float w[64 * 64 * 9] = {0};
	char err[256] = "";
	rt_conv *c1, *c3, *c1post;
	rt_conv_desc d = cdesc(2, 1, 16, 16, 1, 8, 1, 1, 0, 1);
	assert_int_equal(rt_conv_create(ctx, &d, w, NULL, &c1, err, sizeof err), 0);
	assert_int_equal(rt_conv_via_nhwc(c1), 0);
	d.npost = 1, d.post[0].kind = RT_RELU;
	assert_int_equal(rt_conv_create(ctx, &d, w, NULL, &c1post, err, sizeof err), 0);
	assert_int_equal(rt_conv_via_nhwc(c1post), 1);
	d = cdesc(2, 1, 16, 16, 1, 8, 3, 1, 1, 1);
	assert_int_equal(rt_conv_create(ctx, &d, w, NULL, &c3, err, sizeof err), 0);
	assert_int_equal(rt_conv_via_nhwc(c3), 1);
	assert_true(rt_conv_scratch_bytes(c3) >= 2 * 16 * 64 * sizeof(float));
	rt_conv_destroy(c1);
	rt_conv_destroy(c1post);
	rt_conv_destroy(c3);
	/* a via-NHWC conv made before a bigger one grew the workspace still
	 * runs right (and, under ASan, touches no freed memory) */
	d = cdesc(2, 1, 4, 4, 1, 5, 3, 1, 1, 1);
	d.path = RT_PATH_NHWC;
	float *x = rnd(4 * 25), *wt = rnd(4 * 4 * 9), y1[4 * 25], y2[4 * 25];
	assert_int_equal(rt_conv_create(ctx, &d, wt, NULL, &c1, err, sizeof err), 0);
	assert_int_equal(rt_conv_run(c1, x, y1, NULL, err, sizeof err), 0);
	rt_conv_desc big = cdesc(2, 2, 64, 64, 1, 64, 3, 1, 1, 1);
	big.path = RT_PATH_NHWC;
	size_t before = rt_conv_scratch_bytes(c1);
	assert_int_equal(rt_conv_create(ctx, &big, w, NULL, &c3, err, sizeof err), 0);
	assert_true(rt_conv_scratch_bytes(c3) > before);
	assert_int_equal(rt_conv_run(c1, x, y2, NULL, err, sizeof err), 0);
	assert_memory_equal(y1, y2, sizeof y1);
	rt_conv_destroy(c1);
	rt_conv_destroy(c3);
	free(x);
	free(wt);
}

/* ------------------------------------------------------------------ */
/* matmul                                                              */

static void ref_matmul(const rt_matmul_desc *d, const float *a, const float *b,
		       const float *bias, double *c)
{
	const int nb = d->nbatch;
	int64_t cb[RT_MAX_BATCH], nbt = 1;
	for (int i = 0; i < nb; ++i) {
		cb[i] = d->batch_a[i] > d->batch_b[i] ? d->batch_a[i] : d->batch_b[i];
		nbt *= cb[i];
	}
	const float alpha = d->alpha == 0 && d->beta == 0 ? 1 : d->alpha;
	const float beta = d->alpha == 0 && d->beta == 0 ? 1 : d->beta;
	for (int64_t t = 0; t < nbt; ++t) {
		int64_t rem = t, ia = 0, ib = 0, ma = 1, mb = 1;
		for (int i = nb - 1; i >= 0; --i) {
			int64_t ci = rem % cb[i];
			rem /= cb[i];
			if (d->batch_a[i] != 1) ia += ci * ma;
			if (d->batch_b[i] != 1) ib += ci * mb;
			ma *= d->batch_a[i], mb *= d->batch_b[i];
		}
		const float *A = a + ia * d->m * d->k, *B = b + ib * d->k * d->n;
		double *C = c + t * d->m * d->n;
		for (int64_t i = 0; i < d->m; ++i)
			for (int64_t j = 0; j < d->n; ++j) {
				double s = 0;
				for (int64_t p = 0; p < d->k; ++p) {
					double av = d->a_trans ? A[p * d->m + i] : A[i * d->k + p];
					double bv = d->b_trans ? B[j * d->k + p] : B[p * d->n + j];
					s += av * bv;
				}
				s *= alpha;
				if (d->has_bias)
					s += beta * (double)bias[d->bias_full ? i * d->n + j : j];
				C[i * d->n + j] = s;
			}
	}
}

/* run_mm passes a residual sum's operand in c itself */
static int mm_inplace_sum;

static void run_mm(rt_ctx *ctx, const rt_matmul_desc *d, const char *name, float **keep)
{
	const int nb = d->nbatch, nd = nb + 2;
	size_t na = 1, nbb = 1, nc = 1;
	int64_t cdims[RT_MAX_BATCH + 2];
	for (int i = 0; i < nb; ++i) {
		na *= (size_t)d->batch_a[i], nbb *= (size_t)d->batch_b[i];
		cdims[i] = d->batch_a[i] > d->batch_b[i] ? d->batch_a[i] : d->batch_b[i];
		nc *= (size_t)cdims[i];
	}
	cdims[nb] = d->m, cdims[nb + 1] = d->n;
	na *= (size_t)(d->m * d->k), nbb *= (size_t)(d->k * d->n), nc *= (size_t)(d->m * d->n);
	size_t nbias = (size_t)(d->bias_full ? d->m * d->n : d->n);
	float *a = rnd(na), *b = rnd(nbb), *bias = rnd(nbias);
	post_data pd;
	make_posts(&pd, d->npost, d->post, nd, cdims);
	double *want = malloc(nc * sizeof *want);
	float *c = malloc(nc * sizeof *c);
	assert_non_null(want);
	assert_non_null(c);
	ref_matmul(d, a, b, bias, want);
	apply_posts(want, nd, cdims, d->npost, d->post, &pd);

	char err[512] = "";
	rt_matmul *mm = NULL;
	if (rt_matmul_create(ctx, d, d->b_const ? b : NULL,
			     d->has_bias && d->bias_const ? bias : NULL, &mm, err, sizeof err))
		fail_msg("%s: rt_matmul_create: %s", name, err);
	float *b_copy = NULL;
	if (d->b_const) { /* the runtime must have copied it */
		b_copy = b;
		b = rnd(nbb);
		for (size_t i = 0; i < nbb; ++i)
			b[i] = NAN;
	}
	const void *post_src[RT_MAX_POST] = {0};
	int in_c = -1;
	for (int i = 0; i < d->npost; ++i) {
		post_src[i] = pd.logical[i];
		if (mm_inplace_sum && d->post[i].kind == RT_ADD_SAME)
			post_src[i] = c, in_c = i;
	}
	for (size_t i = 0; i < nc; ++i)
		c[i] = NAN;
	if (in_c >= 0)
		memcpy(c, pd.logical[in_c], nc * sizeof *c);
	if (rt_matmul_run(mm, d->m, a, d->b_const ? NULL : b,
			  d->has_bias && !d->bias_const ? bias : NULL, c, post_src, err,
			  sizeof err))
		fail_msg("%s: rt_matmul_run: %s", name, err);
	check_close(name, c, want, nc);
	/* a second run gives the same */
	if (in_c >= 0)
		memcpy(c, pd.logical[in_c], nc * sizeof *c);
	if (rt_matmul_run(mm, d->m, a, d->b_const ? NULL : b,
			  d->has_bias && !d->bias_const ? bias : NULL, c, post_src, err,
			  sizeof err))
		fail_msg("%s: rt_matmul_run (2): %s", name, err);
	check_close(name, c, want, nc);
	rt_matmul_destroy(mm);
	if (keep)
		*keep = c;
	else
		free(c);
	free(want);
	free(a);
	free(b);
	free(b_copy);
	free(bias);
	free_posts(&pd);
}

static rt_matmul_desc mdesc(int64_t m, int64_t k, int64_t n)
{
	rt_matmul_desc d;
	memset(&d, 0, sizeof d);
	d.m = m, d.k = k, d.n = n;
	d.alpha = d.beta = 1;
	return d;
}

static void test_mm(void **state)
{
	static const int64_t sz[][3] = {{7, 13, 1}, {1, 1, 1}, {13, 7, 13}, {1, 64, 33},
					{64, 48, 80}, {37, 129, 17}};
	for (size_t i = 0; i < sizeof sz / sizeof *sz; ++i)
		for (int t = 0; t < 4; ++t) {
			rt_matmul_desc d = mdesc(sz[i][0], sz[i][1], sz[i][2]);
			d.a_trans = t & 1, d.b_trans = t >> 1 & 1;
			char nm[96];
			snprintf(nm, sizeof nm, "mm %lldx%lldx%lld ta%d tb%d", (long long)d.m,
				 (long long)d.k, (long long)d.n, d.a_trans, d.b_trans);
			run_mm(*state, &d, nm, NULL);
			d.b_const = 1;
			run_mm(*state, &d, nm, NULL);
		}
	rt_matmul_desc d = mdesc(5, 6, 7);
	d.alpha = d.beta = 0; /* zeroed: plain mm */
	run_mm(*state, &d, "mm zero alpha/beta", NULL);
}

static void test_addmm(void **state)
{
	/* nn.Linear: addmm(bias, x, W.t()), W [n, k] prepacked */
	rt_matmul_desc d = mdesc(13, 96, 40);
	d.b_trans = 1, d.b_const = 1, d.has_bias = 1, d.bias_const = 1;
	run_mm(*state, &d, "linear", NULL);
	d.alpha = 0.5f, d.beta = 2;
	run_mm(*state, &d, "linear alpha/beta", NULL);
	d.bias_const = 0;
	run_mm(*state, &d, "linear alpha/beta runtime bias", NULL);
	d.alpha = 1, d.beta = 0.25f;
	run_mm(*state, &d, "linear beta runtime bias", NULL);
	d.b_const = 0, d.alpha = -1.5f, d.beta = 1;
	run_mm(*state, &d, "addmm runtime b", NULL);
	d = mdesc(7, 13, 9);
	d.has_bias = 1, d.bias_full = 1, d.alpha = 3, d.beta = 0.5f, d.bias_const = 1;
	run_mm(*state, &d, "addmm full bias", NULL);
	d.bias_const = 0, d.a_trans = 1;
	run_mm(*state, &d, "addmm full runtime bias a_trans", NULL);
}

static void test_bmm(void **state)
{
	rt_matmul_desc d = mdesc(7, 13, 5);
	d.nbatch = 1, d.batch_a[0] = d.batch_b[0] = 3;
	run_mm(*state, &d, "bmm", NULL);
	d.batch_b[0] = 1;
	run_mm(*state, &d, "bmm b broadcast", NULL);
	d.b_const = 1;
	run_mm(*state, &d, "bmm b broadcast const", NULL);
	d.b_const = 0, d.batch_a[0] = 1, d.batch_b[0] = 4;
	run_mm(*state, &d, "bmm a broadcast", NULL);
	d.a_trans = 1, d.b_trans = 1, d.batch_a[0] = 4;
	run_mm(*state, &d, "bmm both transposed", NULL);
	/* attention-shaped: [2, 3, m, k] @ [2, 3, k, n] and [2,1]x[1,3] */
	d = mdesc(9, 16, 9);
	d.nbatch = 2, d.batch_a[0] = d.batch_b[0] = 2, d.batch_a[1] = d.batch_b[1] = 3;
	d.b_trans = 1;
	d.alpha = 0.25f;
	run_mm(*state, &d, "4-d scaled", NULL);
	d.batch_a[1] = 1, d.batch_b[0] = 1;
	run_mm(*state, &d, "4-d cross broadcast", NULL);
	d.batch_a[1] = 3, d.batch_b[0] = 2, d.has_bias = 1, d.bias_full = 1, d.beta = 1;
	run_mm(*state, &d, "4-d with [m,n] bias (mask)", NULL);
}

static void test_matmul_post(void **state)
{
	rt_matmul_desc d = mdesc(13, 32, 24);
	d.b_trans = 1, d.b_const = 1, d.has_bias = 1, d.bias_const = 1;
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_GELU_ERF};
	run_mm(*state, &d, "linear+gelu", NULL);
	d.post[0] = (rt_post){.kind = RT_RELU};
	run_mm(*state, &d, "linear+relu", NULL);
	d.npost = 3;
	d.post[0] = (rt_post){.kind = RT_GELU_TANH};
	d.post[1] = (rt_post){.kind = RT_ADD_SAME};
	d.post[2] = (rt_post){.kind = RT_MUL_BCAST, .rank = 1, .dims = {24}};
	run_mm(*state, &d, "linear+gelu+residual+scale", NULL);
	d.alpha = 2;
	d.post[2] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {13, 1}};
	run_mm(*state, &d, "alpha+gelu+residual+rowbias", NULL);
	d = mdesc(7, 13, 7);
	d.nbatch = 1, d.batch_a[0] = 3, d.batch_b[0] = 1;
	d.npost = 3;
	d.post[0] = (rt_post){.kind = RT_DIV_BCAST, .rank = 1, .dims = {1}};
	d.post[1] = (rt_post){.kind = RT_ADD_BCAST, .rank = 3, .dims = {3, 1, 7}};
	d.post[2] = (rt_post){.kind = RT_SIGMOID};
	run_mm(*state, &d, "bmm div+add+sigmoid", NULL);
	/* a residual sum after an eltwise or a product, and eltwise ops after it: the runtime
	 * applies them where oneDNN would take its reference kernel (mm_tail_at); the residual
	 * given apart and in c, rows for coil's product and for sgemm, a batch */
	static const int rows[] = {13, 150};
	for (int r = 0; r < 2; ++r)
		for (int v = 0; v < 3; ++v) {
			char nm[96];
			d = mdesc(rows[r], 40, 24);
			d.b_trans = 1, d.b_const = 1, d.has_bias = 1, d.bias_const = 1;
			if (v == 2)
				d.nbatch = 1, d.batch_a[0] = 2, d.batch_b[0] = 1, d.b_const = 0, d.b_trans = 0, d.has_bias = 0;
			d.npost = 0;
			d.post[d.npost++] = v == 1 ? (rt_post){.kind = RT_MUL_BCAST, .rank = 1, .dims = {24}}
						    : (rt_post){.kind = RT_SILU};
			d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
			if (v != 2)
				d.post[d.npost++] = (rt_post){.kind = RT_TANH};
			for (int in = 0; in < 2; ++in) {
				snprintf(nm, sizeof nm, "%d rows, %s, residual%s", rows[r],
					 v == 1 ? "scale+residual+tanh" : v ? "bmm silu+residual" : "silu+residual+tanh",
					 in ? " in c" : "");
				mm_inplace_sum = in;
				run_mm(*state, &d, nm, NULL);
			}
			mm_inplace_sum = 0;
		}
}

/* Below AVX-512, where oneDNN's matmul is its gemm:jit, a constant b, a fixed m
 * > 1 and no residual sum run as dnnl_sgemm plus one binary pass carrying the
 * bias and post-ops (rt_matmul_impl "coil:sgemm"): alpha and beta, b either way
 * round, eltwise and binary post-ops, a residual sum after additions (sgemm's
 * beta; given apart or in c), against the reference; a sum after another
 * post-op or RT_SGEMM=0 keeps oneDNN's kernel; with AVX-512 (brgemm) it is
 * never taken. */
static void test_matmul_sgemm(void **state)
{
	const int below = !has_isa(dnnl_cpu_isa_avx512_core);
	setenv("RT_CGEMM", "0", 1); /* (37 rows: coil's own product, test_matmul_cgemm) */
	rt_matmul_desc d = mdesc(37, 129, 70);
	d.b_const = 1, d.has_bias = 1, d.bias_const = 1, d.alpha = 0.5f, d.beta = 3;
	d.npost = 3;
	d.post[0] = (rt_post){.kind = RT_GELU_ERF};
	d.post[1] = (rt_post){.kind = RT_MUL_BCAST, .rank = 1, .dims = {70}};
	d.post[2] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {37, 70}};
	for (int bt = 0; bt < 2; ++bt) {
		d.b_trans = bt;
		run_mm(*state, &d, bt ? "sgemm path, b transposed" : "sgemm path", NULL);
	}
	d.npost = 3; /* bias, a row add, the residual, relu (swin's projection, with an activation) */
	d.post[0] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {37, 1}};
	d.post[1] = (rt_post){.kind = RT_ADD_SAME};
	d.post[2] = (rt_post){.kind = RT_RELU};
	run_mm(*state, &d, "sgemm path, residual sum", NULL);
	d.has_bias = 0, d.npost = 0;
	run_mm(*state, &d, "sgemm path, no bias or post-op", NULL);
	/* b's rows 2 KB apart (n 512, or k 512 transposed): copied with longer rows (sg_pad) */
	rt_matmul_desc p = mdesc(37, 512, 512);
	p.b_const = 1, p.has_bias = 1, p.bias_const = 1, p.alpha = 1, p.beta = 1;
	p.npost = 2;
	p.post[0] = (rt_post){.kind = RT_ADD_SAME};
	p.post[1] = (rt_post){.kind = RT_RELU};
	for (int bt = 0; bt < 2; ++bt) {
		p.b_trans = bt;
		run_mm(*state, &p, bt ? "sgemm path, 512 columns, b transposed" : "sgemm path, 512 columns", NULL);
	}
	char err[256];
	float *w = rnd(129 * 70), *bias = rnd(70);
	rt_matmul *mm = NULL;
	d.has_bias = 1, d.npost = 1, d.post[0] = (rt_post){.kind = RT_HARDSIGMOID};
	assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_OK);
	if (below)
		assert_string_equal(rt_matmul_impl(mm), "coil:sgemm");
	else
		assert_string_not_equal(rt_matmul_impl(mm), "coil:sgemm");
	rt_matmul_destroy(mm);
	d.post[0] = (rt_post){.kind = RT_ADD_SAME};
	assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_OK);
	const char *im = rt_matmul_impl(mm); /* (alpha's linear, then the sum: oneDNN's reference kernel on AVX2) */
	if (below ? strcmp(im, "coil:sgemm") != 0 : strncmp(im, "ref", 3) == 0)
		fail_msg("alpha, bias, residual: %s", im);
	rt_matmul_destroy(mm);
	d.npost = 2; /* a sum after an activation: not sgemm's beta; never oneDNN's reference kernel (mm_tail_at) */
	d.post[0] = (rt_post){.kind = RT_GELU_TANH};
	d.post[1] = (rt_post){.kind = RT_ADD_SAME};
	assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_OK);
	if (!strncmp(rt_matmul_impl(mm), "ref", 3))
		fail_msg("activation, residual: %s", rt_matmul_impl(mm));
	rt_matmul_destroy(mm);
	d.npost = 0;
	setenv("RT_SGEMM", "0", 1);
	assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_OK);
	assert_string_not_equal(rt_matmul_impl(mm), "coil:sgemm");
	rt_matmul_destroy(mm);
	unsetenv("RT_SGEMM");
	unsetenv("RT_CGEMM");
	free(w), free(bias);
}

/* coil's own product for few rows (RT_CGEMM=1 takes it on any machine where
 * the sgemm path runs: oneDNN's gemm:jit, below AVX-512; at AVX-512 oneDNN 2.6
 * picks brgemm, which keeps its own layout of b):
 * rows off the 6-row tiles, columns off the 16-column blocks, b either way
 * round, alpha and beta, every eltwise kind, binary operands of every
 * broadcast, a residual, one and two threads; 97 rows and
 * run-time rows left to the other paths. */
static void test_matmul_cgemm(void **state)
{
	if (has_isa(dnnl_cpu_isa_avx512_core)) {
		print_message("# oneDNN runs these products on brgemm here: no sgemm path, no coil:gemm in it\n");
		skip();
	}
	setenv("RT_CGEMM", "1", 1);
	rt_ctx *ctx2 = new_ctx(2);
	static const int64_t sz[][3] = {{2, 5, 3}, {7, 33, 16}, {37, 129, 70}, {96, 64, 200}, {13, 300, 8}};
	static const rt_post posts[] = {
		{.kind = RT_RELU}, {.kind = RT_LEAKY_RELU, .a = 0.1f}, {.kind = RT_GELU_ERF},
		{.kind = RT_GELU_TANH}, {.kind = RT_SILU}, {.kind = RT_SIGMOID}, {.kind = RT_TANH},
		{.kind = RT_HARDSWISH}, {.kind = RT_HARDSIGMOID, .scale = 2},
		{.kind = RT_CLAMP, .a = -0.5f, .b = 0.75f}, {.kind = RT_ELU, .a = 0.5f}, {.kind = RT_LINEAR, .a = 2, .b = -1},
		{.kind = RT_ROUND},
	};
	char nm[128], err[256];
	for (size_t i = 0; i < sizeof sz / sizeof *sz; ++i)
		for (int v = 0; v < 4; ++v) {
			rt_matmul_desc d = mdesc(sz[i][0], sz[i][1], sz[i][2]);
			const int64_t m = d.m, n = d.n;
			d.b_const = 1, d.b_trans = v & 1, d.has_bias = v != 2, d.bias_const = 1;
			d.alpha = v == 1 ? 0.5f : 1, d.beta = v == 1 ? 3 : 1;
			if (v == 1) {
				d.post[d.npost++] = (rt_post){.kind = RT_GELU_ERF};
				d.post[d.npost++] = (rt_post){.kind = RT_MUL_BCAST, .rank = 1, .dims = {n}};
				d.post[d.npost++] = (rt_post){.kind = RT_SUB_BCAST, .rank = 2, .dims = {m, 1}};
				d.post[d.npost++] = (rt_post){.kind = RT_DIV_BCAST, .rank = 2, .dims = {1, 1}};
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {m, n}};
			} else if (v == 3) { /* the residual as sgemm's beta would take it, then relu */
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {m, 1}};
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
				d.post[d.npost++] = (rt_post){.kind = RT_RELU};
			}
			float *w = rnd((size_t)(d.k * n)), *bias = rnd((size_t)n);
			rt_matmul *mm = NULL;
			if (rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err))
				fail_msg("rt_matmul_create: %s", err);
			if (strcmp(rt_matmul_impl(mm), "coil:gemm"))
				fail_msg("%lldx%lldx%lld v%d runs %s", (long long)m, (long long)d.k, (long long)n, v, rt_matmul_impl(mm));
			rt_matmul_destroy(mm);
			free(w), free(bias);
			snprintf(nm, sizeof nm, "cgemm %lldx%lldx%lld v%d", (long long)m, (long long)d.k, (long long)n, v);
			run_mm(i % 2 ? ctx2 : *state, &d, nm, NULL);
		}
	for (size_t i = 0; i < sizeof posts / sizeof *posts; ++i) {
		rt_matmul_desc d = mdesc(11, 40, 21);
		d.b_const = 1, d.has_bias = 1, d.bias_const = 1, d.alpha = d.beta = 1;
		d.post[d.npost++] = posts[i];
		snprintf(nm, sizeof nm, "cgemm post kind %d", (int)posts[i].kind);
		run_mm(*state, &d, nm, NULL);
	}
	rt_matmul_desc d = mdesc(97, 16, 16), d2 = mdesc(8, 16, 16);
	d.b_const = d2.b_const = 1, d.alpha = d.beta = d2.alpha = d2.beta = 1;
	d2.m_runtime = 1;
	float *w = rnd(256);
	rt_matmul *mm = NULL;
	for (int i = 0; i < 2; ++i) {
		if (rt_matmul_create(*state, i ? &d2 : &d, w, NULL, &mm, err, sizeof err))
			fail_msg("rt_matmul_create: %s", err);
		if (!strcmp(rt_matmul_impl(mm), "coil:gemm"))
			fail_msg("%s runs coil's product", i ? "run-time m" : "97 rows");
		rt_matmul_destroy(mm);
	}
	free(w);
	rt_ctx_destroy(ctx2);
	unsetenv("RT_CGEMM");
}

/* m = 1 with a constant b runs coil's own gemv (rt_matmul_impl "coil:gemv"):
 * every post-op kind, b either way round, sizes off the 4-row blocks, and
 * RT_GEMV=0 giving oneDNN's kernel the same results. */
static void test_matmul_gemv(void **state)
{
	/* k under 2048: panels of 64 (n = 1, 5, 33, 64, 257: full, partial and padded panels); from
	 * 2048: rows, four at a time (n = 7, 9) */
	static const int64_t sz[][2] = {{1, 1}, {37, 5}, {64, 33}, {300, 64}, {1029, 257}, {2048, 7}, {3001, 9}};
	char err[256];
	for (size_t i = 0; i < sizeof sz / sizeof *sz; ++i)
		for (int t = 0; t < 2; ++t) {
			rt_matmul_desc d = mdesc(1, sz[i][0], sz[i][1]);
			d.b_const = 1, d.b_trans = t;
			d.has_bias = t, d.bias_const = t;
			if (t)
				d.alpha = 0.5f, d.beta = -2;
			char nm[96];
			snprintf(nm, sizeof nm, "gemv k%lld n%lld tb%d", (long long)d.k, (long long)d.n, t);
			run_mm(*state, &d, nm, NULL);
		}
	static const rt_post posts[] = {
		{.kind = RT_RELU}, {.kind = RT_LEAKY_RELU, .a = 0.1f}, {.kind = RT_GELU_ERF},
		{.kind = RT_GELU_TANH}, {.kind = RT_SILU}, {.kind = RT_SIGMOID}, {.kind = RT_TANH},
		{.kind = RT_HARDSWISH}, {.kind = RT_HARDSIGMOID},
		{.kind = RT_CLAMP, .a = -0.5f, .b = 0.75f}, {.kind = RT_CLAMP, .a = -INFINITY, .b = 0.25f},
		{.kind = RT_ELU, .a = 0.7f}, {.kind = RT_LINEAR, .a = -1.5f, .b = 0.25f},
		{.kind = RT_RELU, .scale = 3}, {.kind = RT_ADD_SAME},
		{.kind = RT_ADD_BCAST, .rank = 1, .dims = {11}}, {.kind = RT_MUL_BCAST, .rank = 2, .dims = {1, 11}},
		{.kind = RT_SUB_BCAST, .rank = 1, .dims = {1}}, {.kind = RT_DIV_BCAST, .rank = 2, .dims = {1, 1}},
	};
	for (size_t i = 0; i < sizeof posts / sizeof *posts; ++i) {
		rt_matmul_desc d = mdesc(1, 70, 11);
		d.b_const = d.b_trans = d.has_bias = d.bias_const = 1;
		d.npost = 2;
		d.post[0] = posts[i];
		d.post[1] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {1, 11}};
		char nm[64];
		snprintf(nm, sizeof nm, "gemv post %zu (kind %d)", i, (int)posts[i].kind);
		run_mm(*state, &d, nm, NULL);
	}
	/* which kernel: ours at m = 1, oneDNN's past it or with RT_GEMV=0 */
	rt_matmul_desc d = mdesc(1, 64, 40);
	d.b_const = d.b_trans = 1;
	float *w = rnd(64 * 40);
	rt_matmul *mm = NULL;
	assert_int_equal(rt_matmul_create(*state, &d, w, NULL, &mm, err, sizeof err), RT_OK);
	assert_string_equal(rt_matmul_impl(mm), "coil:gemv");
	assert_int_equal(rt_matmul_weight_bytes(mm), 64 * 48 * sizeof(float)); /* panels: n rounded up to 16 */
	rt_matmul_destroy(mm);
	d.m = 2;
	assert_int_equal(rt_matmul_create(*state, &d, w, NULL, &mm, err, sizeof err), RT_OK);
	assert_string_not_equal(rt_matmul_impl(mm), "coil:gemv");
	rt_matmul_destroy(mm);
	d.m = 1;
	setenv("RT_GEMV", "0", 1);
	assert_int_equal(rt_matmul_create(*state, &d, w, NULL, &mm, err, sizeof err), RT_OK);
	assert_string_not_equal(rt_matmul_impl(mm), "coil:gemv");
	rt_matmul_destroy(mm);
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_RELU, .scale = 3};
	run_mm(*state, &d, "oneDNN m=1 scaled relu", NULL);
	unsetenv("RT_GEMV");
	free(w);
}

/* ------------------------------------------------------------------ */
/* threads, errors                                                     */

/* One m_runtime object run at several m (new, repeated, larger and smaller
 * than before), each against the reference. */
static void run_mm_runtime(rt_ctx *ctx, const rt_matmul_desc *d0, const char *name)
{
	static const int64_t ms[] = {7, 1, 300, 7, 64, 129, 2};
	const size_t nbb = (size_t)(d0->k * d0->n);
	float *b = rnd(nbb), *bias = rnd((size_t)d0->n);
	char err[512] = "", nm[128];
	rt_matmul *mm = NULL;
	rt_matmul_desc d = *d0;
	d.m_runtime = 1;
	d.m = 5; /* ignored */
	if (rt_matmul_create(ctx, &d, d.b_const ? b : NULL, d.has_bias && d.bias_const ? bias : NULL,
			     &mm, err, sizeof err))
		fail_msg("%s: rt_matmul_create: %s", name, err);
	assert_string_equal(rt_matmul_impl(mm), "gemm:jit");
	for (size_t t = 0; t < sizeof ms / sizeof *ms; ++t) {
		d.m = ms[t];
		snprintf(nm, sizeof nm, "%s m=%lld", name, (long long)d.m);
		int64_t cdims[2] = {d.m, d.n};
		size_t na = (size_t)(d.m * d.k), nc = (size_t)(d.m * d.n);
		float *a = rnd(na), *c = malloc(nc * sizeof *c);
		double *want = malloc(nc * sizeof *want);
		assert_non_null(c);
		assert_non_null(want);
		post_data pd;
		make_posts(&pd, d.npost, d.post, 2, cdims);
		ref_matmul(&d, a, b, bias, want);
		apply_posts(want, 2, cdims, d.npost, d.post, &pd);
		const void *post_src[RT_MAX_POST] = {0};
		for (int i = 0; i < d.npost; ++i)
			post_src[i] = pd.logical[i];
		for (size_t i = 0; i < nc; ++i)
			c[i] = NAN;
		if (rt_matmul_run(mm, d.m, a, d.b_const ? NULL : b, d.has_bias && !d.bias_const ? bias : NULL,
				  c, post_src, err, sizeof err))
			fail_msg("%s: rt_matmul_run: %s", nm, err);
		check_close(nm, c, want, nc);
		free_posts(&pd);
		free(a);
		free(c);
		free(want);
	}
	/* m < 1 is refused, never run */
	assert_int_equal(rt_matmul_run(mm, 0, b, NULL, NULL, bias, NULL, err, sizeof err), RT_EINVAL);
	rt_matmul_destroy(mm);
	free(b);
	free(bias);
}

static void test_matmul_runtime_m(void **state)
{
	rt_matmul_desc d = mdesc(0, 48, 40);
	d.b_trans = 1, d.b_const = 1, d.has_bias = 1, d.bias_const = 1;
	run_mm_runtime(*state, &d, "linear");
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_GELU_ERF};
	run_mm_runtime(*state, &d, "linear+gelu");
	d.post[0] = (rt_post){.kind = RT_ADD_SAME};
	run_mm_runtime(*state, &d, "linear+residual");
	d.post[0] = (rt_post){.kind = RT_MUL_BCAST, .rank = 1, .dims = {40}};
	run_mm_runtime(*state, &d, "linear*per-column");
	d.npost = 0, d.b_trans = 0, d.a_trans = 1, d.alpha = 0.5f, d.beta = 2;
	run_mm_runtime(*state, &d, "a transposed, alpha/beta");
	d.a_trans = 0, d.b_const = 0, d.bias_const = 0, d.alpha = d.beta = 1;
	run_mm_runtime(*state, &d, "run-time b and bias");
	/* m = 1 runs the gemv over oneDNN's plain copy of b: more than one tile of 1024 columns */
	d = mdesc(0, 33, 1100);
	d.b_const = 1, d.has_bias = 1, d.bias_const = 1, d.alpha = 1.5f, d.beta = -1;
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_HARDSWISH};
	run_mm_runtime(*state, &d, "wide, hardswish");
	d.b_trans = 1;
	run_mm_runtime(*state, &d, "wide, b transposed, hardswish");

	/* what oneDNN runs only on its reference kernel, or what depends on m:
	 * refused, so the caller makes a per-shape object instead */
	char err[256] = "";
	rt_matmul *mm = NULL;
	float *w = rnd(48 * 40);
	d = mdesc(1, 48, 40);
	d.m_runtime = 1, d.b_const = 1, d.npost = 2;
	d.post[0] = (rt_post){.kind = RT_GELU_ERF};
	d.post[1] = (rt_post){.kind = RT_ADD_SAME};
	assert_int_equal(rt_matmul_create(*state, &d, w, NULL, &mm, err, sizeof err), RT_EUNSUP);
	assert_null(mm);
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_ADD_BCAST, .rank = 2, .dims = {1, 40}};
	d.post[0].dims[0] = 3; /* over m */
	assert_int_equal(rt_matmul_create(*state, &d, w, NULL, &mm, err, sizeof err), RT_EUNSUP);
	d.npost = 0, d.has_bias = 1, d.bias_full = 1;
	assert_int_equal(rt_matmul_create(*state, &d, w, w, &mm, err, sizeof err), RT_EUNSUP);
	/* a per-shape object refuses another m */
	d = mdesc(4, 48, 40);
	d.b_const = 1;
	assert_int_equal(rt_matmul_create(*state, &d, w, NULL, &mm, err, sizeof err), RT_OK);
	float *a = rnd(5 * 48), *c = rnd(5 * 40);
	assert_int_equal(rt_matmul_run(mm, 5, a, NULL, NULL, c, NULL, err, sizeof err), RT_EINVAL);
	assert_int_equal(rt_matmul_run(mm, 4, a, NULL, NULL, c, NULL, err, sizeof err), RT_OK);
	rt_matmul_destroy(mm);
	free(a);
	free(c);
	free(w);
}

/* int8 dynamic (rt_quant.dynamic): a in f32, quantized by the rt at each run from its own
 * range; against the same math written out here (qparams in f32, integer products). */
static void dyn_ref(const float *a, const int8_t *w, const float *ws, const float *bias, int64_t m, int64_t k,
		    int64_t n, double *want)
{
	float lo = 0, hi = 0;
	for (int64_t i = 0; i < m * k; ++i)
		lo = a[i] < lo ? a[i] : lo, hi = a[i] > hi ? a[i] : hi;
	float s = (hi - lo) / 255.0f;
	s = s > 1e-7f ? s : 1e-7f;
	float z = fminf(fmaxf(0.0f - rintf(lo / s), 0), 255);
	for (int64_t r = 0; r < m; ++r)
		for (int64_t o = 0; o < n; ++o) {
			int64_t acc = 0;
			for (int64_t j = 0; j < k; ++j) {
				float q = fminf(fmaxf(rintf(a[r * k + j] * (1.0f / s)) + z, 0), 255);
				acc += ((int64_t)q - (int64_t)z) * w[o * k + j]; /* W [n, k] */
			}
			want[r * n + o] = (double)s * ws[o] * (double)acc + bias[o];
		}
}

static void test_matmul_int8_dynamic(void **state)
{
	const int64_t m = 6, k = 37, n = 11;
	float *a = rnd((size_t)(m * k)), *ws = rnd((size_t)n), *bias = rnd((size_t)n);
	float *c = malloc((size_t)(m * n) * sizeof *c);
	double *want = malloc((size_t)(m * n) * sizeof *want);
	int8_t *w = malloc((size_t)(n * k));
	assert_non_null(c), assert_non_null(want), assert_non_null(w);
	for (int64_t i = 0; i < n * k; ++i)
		w[i] = (int8_t)(frand() * 127);
	for (int64_t o = 0; o < n; ++o)
		ws[o] = 0.01f + fabsf(ws[o]) * 0.01f;
	rt_quant q = {.dst = RT_F32, .scale = ws, .dynamic = 1, .qmin = 0, .qmax = 255, .eps = 1e-7f};
	rt_matmul_desc d = mdesc(m, k, n);
	d.dtype = RT_U8, d.q = &q, d.b_trans = 1, d.b_const = 1, d.has_bias = 1, d.bias_const = 1;
	rt_matmul *mm = NULL;
	char err[256];
	if (!has_isa(dnnl_cpu_isa_avx512_core_vnni)) { /* refused: u8 x s8 would saturate */
		assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_EUNSUP);
		assert_null(mm);
		assert_non_null(strstr(err, "VNNI"));
		free(a), free(ws), free(bias), free(c), free(want), free(w);
		return;
	}
	if (rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err))
		fail_msg("int8 dynamic: rt_matmul_create: %s", err);
	/* one object, inputs of very different ranges: each run's own scale and zero point */
	static const float gain[] = {1, 100, 0.001f, -3};
	for (size_t g = 0; g < sizeof gain / sizeof *gain; ++g) {
		float *x = malloc((size_t)(m * k) * sizeof *x);
		assert_non_null(x);
		for (int64_t i = 0; i < m * k; ++i)
			x[i] = (a[i] + (g == 3 ? 1.0f : 0.0f)) * gain[g]; /* the last: all <= 0 */
		if (rt_matmul_run(mm, 0, x, NULL, NULL, c, NULL, err, sizeof err))
			fail_msg("int8 dynamic: rt_matmul_run: %s", err);
		dyn_ref(x, w, ws, bias, m, k, n, want);
		char nm[64];
		snprintf(nm, sizeof nm, "int8 dynamic, input x %g", (double)gain[g]);
		check_close(nm, c, want, (size_t)(m * n));
		free(x);
	}
	rt_matmul_destroy(mm);
	q.dst = RT_U8; /* dynamic gives real values only */
	assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_EINVAL);
	assert_null(mm);
	q.dst = RT_F32, q.qmax = 300;
	assert_int_equal(rt_matmul_create(*state, &d, w, bias, &mm, err, sizeof err), RT_EINVAL);
	free(a), free(ws), free(bias), free(c), free(want), free(w);
}

static void test_threads_same_result(void **state)
{
	(void)state;
	rt_ctx *c1 = new_ctx(1), *c2 = new_ctx(2);
	int (*get)(void) = NULL;
	*(void **)&get = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
	int before = get ? get() : -1;

	/* grouped, so not Winograd: which Winograd variant oneDNN picks depends
	 * on the thread count, and so does its rounding (both are checked
	 * against the reference in test_conv_winograd) */
	rt_conv_desc d = cdesc(2, 2, 32, 64, 2, 14, 3, 1, 1, 1);
	d.has_bias = 1, d.channels_last = 1;
	d.npost = 1;
	d.post[0] = (rt_post){.kind = RT_RELU};
	conv_result r1, r2;
	uint64_t seed = rng_state;
	run_conv_ex(c1, &d, "1 thread", 0, &r1);
	rng_state = seed;
	run_conv_ex(c2, &d, "2 threads", 0, &r2);
	assert_int_equal(r1.ysize, r2.ysize);
	for (size_t i = 0; i < r1.ysize; ++i)
		if (fabsf(r1.y[i] - r2.y[i]) > 1e-6f * (1 + fabsf(r1.y[i])))
			fail_msg("conv: 1 vs 2 threads differ at %zu: %g vs %g", i, (double)r1.y[i],
				 (double)r2.y[i]);
	free(r1.y);
	free(r2.y);

	rt_matmul_desc m = mdesc(64, 256, 96);
	m.b_trans = m.b_const = m.has_bias = m.bias_const = 1;
	float *y1, *y2;
	seed = rng_state;
	run_mm(c1, &m, "mm 1 thread", &y1);
	rng_state = seed;
	run_mm(c2, &m, "mm 2 threads", &y2);
	for (size_t i = 0; i < 64 * 96; ++i)
		if (fabsf(y1[i] - y2[i]) > 1e-6f * (1 + fabsf(y1[i])))
			fail_msg("matmul: 1 vs 2 threads differ at %zu", i);
	free(y1);
	free(y2);
	if (get)
		assert_int_equal(get(), before); /* calling thread's setting restored */
	rt_ctx_destroy(c1);
	rt_ctx_destroy(c2);
}

static void expect_conv_error(rt_ctx *ctx, const rt_conv_desc *d, const char *why)
{
	float w[4096] = {0}, b[64] = {0};
	char err[256] = "";
	rt_conv *c = (rt_conv *)(uintptr_t)1;
	int rc = rt_conv_create(ctx, d, w, b, &c, err, sizeof err);
	if (rc == 0)
		fail_msg("conv create accepted an invalid desc (%s)", why);
	assert_null(c);
	assert_true(err[0] != 0);
}

static void test_invalid(void **state)
{
	rt_ctx *ctx = *state;
	rt_conv_desc good = cdesc(2, 1, 4, 4, 1, 8, 3, 1, 1, 1), d;
	char err[256] = "";

	d = good, d.nsp = 4;
	expect_conv_error(ctx, &d, "nsp 4");
	d = good, d.nsp = 0;
	expect_conv_error(ctx, &d, "nsp 0");
	d = good, d.groups = 3;
	expect_conv_error(ctx, &d, "groups");
	d = good, d.out[0] = 9;
	expect_conv_error(ctx, &d, "out");
	d = good, d.pad_l[0] = -1;
	expect_conv_error(ctx, &d, "pad");
	d = good, d.k[0] = 20;
	expect_conv_error(ctx, &d, "kernel too big");
	d = good, d.ic = 0;
	expect_conv_error(ctx, &d, "ic 0");
	d = good, d.dtype = (enum rt_dtype)7;
	expect_conv_error(ctx, &d, "unknown dtype");
	d = good, d.npost = 9;
	expect_conv_error(ctx, &d, "npost");
	d = good, d.npost = 1, d.post[0].kind = (enum rt_post_kind)99;
	expect_conv_error(ctx, &d, "post kind");
	d = good, d.npost = 1, d.post[0] = (rt_post){.kind = RT_ADD_BCAST, .rank = 3, .dims = {3, 1, 1}};
	expect_conv_error(ctx, &d, "bcast dims");
	d = good, d.npost = 2, d.post[0].kind = d.post[1].kind = RT_ADD_SAME;
	expect_conv_error(ctx, &d, "two sums");
	d = good, d.transposed = 1, d.out_pad[0] = 1;
	expect_conv_error(ctx, &d, "output padding >= stride");

	/* NULL arguments */
	rt_conv *c = NULL;
	assert_true(rt_conv_create(ctx, &good, NULL, NULL, &c, err, sizeof err) != 0);
	assert_true(rt_conv_create(NULL, &good, NULL, NULL, &c, NULL, 0) != 0);
	float w[4 * 4 * 9] = {0};
	assert_int_equal(rt_conv_create(ctx, &good, w, NULL, &c, err, sizeof err), 0);
	assert_true(rt_conv_run(c, NULL, NULL, NULL, err, sizeof err) != 0);
	rt_conv_destroy(c);
	d = good, d.npost = 1, d.post[0] = (rt_post){.kind = RT_ADD_BCAST, .rank = 1, .dims = {1}};
	assert_int_equal(rt_conv_create(ctx, &d, w, NULL, &c, err, sizeof err), 0);
	float x[4 * 64], y[4 * 64];
	assert_true(rt_conv_run(c, x, y, NULL, err, sizeof err) != 0); /* missing operand */
	assert_non_null(strstr(err, "post_src"));
	rt_conv_destroy(c);
	rt_conv_destroy(NULL);

	/* matmul */
	rt_matmul *mm = (rt_matmul *)(uintptr_t)1;
	rt_matmul_desc m = mdesc(4, 4, 4);
	m.nbatch = 1, m.batch_a[0] = 2, m.batch_b[0] = 3;
	assert_true(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err) != 0);
	assert_null(mm);
	m = mdesc(0, 4, 4);
	assert_true(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err) != 0);
	m = mdesc(4, 4, 4), m.b_const = 1;
	assert_true(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err) != 0);
	m = mdesc(4, 4, 4), m.nbatch = 5;
	assert_true(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err) != 0);
	m = mdesc(4, 4, 4), m.has_bias = 1, m.alpha = 0, m.beta = 1;
	assert_true(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err) != 0);
	m = mdesc(4, 4, 4), m.npost = 1;
	m.post[0] = (rt_post){.kind = RT_MUL_BCAST, .rank = 3, .dims = {2, 4, 4}}; /* rank 3 > 2 */
	assert_true(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err) != 0);
	m = mdesc(4, 4, 4);
	assert_int_equal(rt_matmul_create(ctx, &m, NULL, NULL, &mm, err, sizeof err), 0);
	float a[16] = {0}, cc[16];
	assert_true(rt_matmul_run(mm, 0, a, NULL, NULL, cc, NULL, err, sizeof err) != 0);
	rt_matmul_destroy(mm);
	rt_matmul_destroy(NULL);
	assert_true(rt_ctx_create(1, NULL, err, sizeof err) != 0);
}

/* Dense 3x3 stride-1 convs run oneDNN's Winograd kernels (blocked layout,
 * reordered from and to the caller's): same results as the reference, with
 * bias, activations and a residual sum, from NCHW and NHWC callers. */
static void test_conv_winograd(void **state)
{
	if (!has_isa(dnnl_cpu_isa_avx512_core)) /* oneDNN 2.6 has no Winograd below AVX-512 */
		skip();
	rt_ctx *ctx = *state;
	char err[512] = "";
	rt_conv_desc d = cdesc(2, 1, 64, 64, 1, 14, 3, 1, 1, 1);
	d.has_bias = 1;
	float *w = rnd(64 * 64 * 9), *b = rnd(64);
	rt_conv *c = NULL;
	if (rt_conv_create(ctx, &d, w, b, &c, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	if (!strstr(rt_conv_impl(c), "wino"))
		fail_msg("64->64 3x3 s1 runs %s, not Winograd", rt_conv_impl(c));
	rt_conv_destroy(c);
	/* not for strided, dilated, grouped convs or with binary operands */
	rt_conv_desc s2 = cdesc(2, 1, 64, 64, 1, 14, 3, 2, 1, 1);
	if (rt_conv_create(ctx, &s2, w, b, &c, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	assert_null(strstr(rt_conv_impl(c), "wino"));
	rt_conv_destroy(c);
	/* nor with 32 channels out or fewer over 56x56 outputs or more; at 28x28, and
	 * with 48 out at 56x56, Winograd */
	static const struct { int ic, oc, hw, wino; } few[] = {{64, 32, 56, 0}, {16, 16, 112, 0}, {64, 32, 28, 1}, {32, 48, 56, 1}};
	for (size_t i = 0; i < sizeof few / sizeof *few; ++i) {
		rt_conv_desc f = cdesc(2, 1, few[i].ic, few[i].oc, 1, few[i].hw, 3, 1, 1, 1);
		f.has_bias = 1, f.channels_last = 1;
		if (rt_conv_create(ctx, &f, w, b, &c, err, sizeof err))
			fail_msg("rt_conv_create: %s", err);
		if ((strstr(rt_conv_impl(c), "wino") != NULL) != few[i].wino)
			fail_msg("%d->%d 3x3 at %dx%d runs %s", few[i].ic, few[i].oc, few[i].hw, few[i].hw, rt_conv_impl(c));
		rt_conv_destroy(c);
	}
	free(w);
	free(b);

	static const struct { int n, ic, oc, hw; } shapes[] = {{1, 64, 64, 14}, {2, 32, 48, 9}, {1, 16, 16, 28}, {1, 128, 128, 7}};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; ++i)
		for (int cl = 0; cl < 2; ++cl)
			for (int v = 0; v < 3; ++v) {
				char nm[128];
				d = cdesc(2, shapes[i].n, shapes[i].ic, shapes[i].oc, 1, shapes[i].hw, 3, 1, 1, 1);
				d.has_bias = 1, d.channels_last = cl;
				if (v >= 1) /* batch-norm-like activation, then a residual and relu */
					d.post[d.npost++] = (rt_post){.kind = RT_LINEAR, .a = 0.5f, .b = 0.1f};
				if (v == 2) {
					d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
					d.post[d.npost++] = (rt_post){.kind = RT_RELU};
				}
				snprintf(nm, sizeof nm, "wino %dx%d->%d %dx%d %s v%d", shapes[i].n, shapes[i].ic,
					 shapes[i].oc, shapes[i].hw, shapes[i].hw, cl ? "nhwc" : "nchw", v);
				run_conv_ex(ctx, &d, nm, 0, NULL);
				if (v == 2) /* the residual given in dst itself */
					run_conv_ex(ctx, &d, nm, 1, NULL);
			}
}

/* The impl a conv of desc d gets (copied into buf). */
static const char *conv_impl_of(rt_ctx *ctx, const rt_conv_desc *d, char *buf, size_t len)
{
	char err[512] = "";
	size_t ksz = (size_t)d->oc * (size_t)d->ic * 9; /* 3x3 and smaller, or the desc's kernel */
	for (int i = 0, big = 0; i < d->nsp && !big; ++i)
		if (d->k[i] > 3) {
			ksz = (size_t)d->oc * (size_t)d->ic;
			for (int j = 0; j < d->nsp; ++j)
				ksz *= (size_t)d->k[j];
			big = 1;
		}
	float *w = rnd(ksz), *b = rnd((size_t)d->oc);
	rt_conv *c = NULL;
	if (rt_conv_create(ctx, d, w, d->has_bias ? b : NULL, &c, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	snprintf(buf, len, "%s", rt_conv_impl(c));
	rt_conv_destroy(c);
	free(w), free(b);
	return buf;
}

/* coil's own Winograd F(4x4,3x3) (RT_CWINO=1 takes it on any machine):
 * NHWC 3x3 stride-1 convs against the reference, at sizes that are not
 * multiples of the 4x4 tiles, asymmetric and zero padding, oc not a multiple
 * of 16, several blocks of tiles (256 channels), batches, grouped (16 or 24
 * channels a group in, 8, 16, 24 or 32 out), every post-op it fuses (a
 * residual in dst itself too), one and two threads; and the convs it leaves
 * to oneDNN. */
static void test_conv_cwino(void **state)
{
	const env_saved env = env_force("RT_CWINO", "1"),
			env8 = env_force("RT_CGRP8", "0"); /* (it comes first for some grouped shapes) */
	rt_ctx *ctx = *state, *ctx2 = new_ctx(2);
	char buf[128];
	rt_conv_desc d = cdesc(2, 1, 64, 64, 1, 14, 3, 1, 1, 1);
	d.channels_last = 1, d.has_bias = 1;
	if (strcmp(conv_impl_of(ctx, &d, buf, sizeof buf), "coil:wino_4x4"))
		fail_msg("64->64 3x3 s1 NHWC runs %s", buf);
	/* left to oneDNN: stride 2, NCHW, 12 channels, a GELU, a broadcast operand, autotuned impl, low memory,
	 * 8 channels a group */
	rt_conv_desc no[8];
	for (int i = 0; i < 8; ++i)
		no[i] = d;
	no[0] = cdesc(2, 1, 64, 64, 1, 14, 3, 2, 1, 1), no[0].channels_last = 1;
	no[1].channels_last = 0;
	no[2].ic = 12;
	no[3].post[no[3].npost++] = (rt_post){.kind = RT_GELU_ERF};
	no[4].post[no[4].npost++] = (rt_post){.kind = RT_MUL_BCAST, .rank = 3, .dims = {64, 1, 1}};
	no[5].impl = 1;
	no[6].no_wino = 1;
	no[7].groups = 8;
	for (int i = 0; i < 8; ++i)
		if (!strcmp(conv_impl_of(ctx, &no[i], buf, sizeof buf), "coil:wino_4x4"))
			fail_msg("case %d runs coil's Winograd", i);
	setenv("RT_WINOGRAD", "0", 1); /* direct convolutions only */
	conv_impl_of(ctx, &d, buf, sizeof buf);
	unsetenv("RT_WINOGRAD");
	if (!strcmp(buf, "coil:wino_4x4"))
		fail_msg("RT_WINOGRAD=0 runs coil's Winograd");
	/* by default (where it is taken by default, below AVX-512): grouped convs
	 * with 64 tiles or more, of 24 channels a group or few channels in all */
	unsetenv("RT_CWINO");
	if (!strcmp(conv_impl_of(ctx, &d, buf, sizeof buf), "coil:wino_4x4")) {
		static const struct { int n, c, g, h, want; } gd[] = {
			{1, 48, 2, 36, 1}, {1, 48, 2, 28, 0}, {2, 320, 20, 28, 1}, {2, 512, 32, 28, 0}, {1, 1024, 32, 36, 1},
		};
		for (size_t i = 0; i < sizeof gd / sizeof *gd; ++i) {
			rt_conv_desc e = cdesc(2, gd[i].n, gd[i].c, gd[i].c, gd[i].g, gd[i].h, 3, 1, 1, 1);
			e.channels_last = 1;
			if ((strcmp(conv_impl_of(ctx, &e, buf, sizeof buf), "coil:wino_4x4") == 0) != gd[i].want)
				fail_msg("grouped case %zu runs %s by default", i, buf);
		}
	}
	setenv("RT_CWINO", "1", 1);

	static const struct { int n, ic, oc, h, w, pl, pr, g; } sh[] = {
		{1, 8, 8, 5, 5, 1, 1, 1},     {2, 16, 24, 9, 13, 1, 1, 1}, {1, 32, 40, 6, 7, 0, 0, 1},
		{1, 24, 16, 11, 11, 2, 2, 1}, {1, 16, 16, 8, 8, 1, 0, 1},  {3, 256, 256, 10, 10, 1, 1, 1},
		{2, 48, 48, 9, 13, 1, 1, 3},  {1, 32, 16, 7, 6, 1, 1, 2},  {1, 48, 48, 10, 9, 0, 0, 2},
		{1, 32, 64, 6, 11, 2, 2, 2},  {3, 320, 320, 7, 7, 1, 1, 20},
	};
	for (size_t i = 0; i < sizeof sh / sizeof *sh; ++i)
		for (int v = 0; v < 6; ++v) {
			char nm[160];
			/* (a bounded output (clamp, hardsigmoid) is checked against its own rms, ~3 or
			 * ~0.7 where 2304-term sums are ~16 and F(4x4,3x3)'s rounding ~3e-5 of that) */
			if ((v == 3 || v == 5) && sh[i].ic > 32)
				continue;
			d = cdesc(2, sh[i].n, sh[i].ic, sh[i].oc, sh[i].g, sh[i].h, 3, 1, sh[i].pl, 1);
			d.in[1] = sh[i].w, d.pad_r[0] = d.pad_r[1] = sh[i].pr;
			conv_out(&d);
			d.channels_last = 1, d.has_bias = v != 1;
			switch (v) {
			case 1: d.post[d.npost++] = (rt_post){.kind = RT_RELU}; break;
			case 2:
				d.post[d.npost++] = (rt_post){.kind = RT_LINEAR, .a = 0.5f, .b = 0.1f};
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
				d.post[d.npost++] = (rt_post){.kind = RT_RELU};
				break;
			case 3: d.post[d.npost++] = (rt_post){.kind = RT_CLAMP, .a = -3, .b = 3}; break;
			case 4:
				d.post[d.npost++] = (rt_post){.kind = RT_LEAKY_RELU, .a = 0.1f, .scale = 2};
				d.post[d.npost++] = (rt_post){.kind = RT_HARDSWISH};
				break;
			case 5:
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
				d.post[d.npost++] = (rt_post){.kind = RT_HARDSIGMOID};
				break;
			}
			if (strcmp(conv_impl_of(ctx, &d, buf, sizeof buf), "coil:wino_4x4"))
				fail_msg("shape %zu v%d runs %s", i, v, buf);
			snprintf(nm, sizeof nm, "cwino %dx%d->%d g%d %dx%d pad %d/%d v%d", sh[i].n, sh[i].ic, sh[i].oc, sh[i].g,
				 sh[i].h, sh[i].w, sh[i].pl, sh[i].pr, v);
			run_conv_ex(v % 2 ? ctx2 : ctx, &d, nm, 0, NULL);
			if (v == 2 || v == 5) /* the residual given in dst itself */
				run_conv_ex(v == 5 ? ctx2 : ctx, &d, nm, 1, NULL);
		}
	rt_ctx_destroy(ctx2);
	env_restore(&env8);
	env_restore(&env);
}

/* y = silu(x) over n floats through a 1x1 conv of one channel with weight 1
 * (it passes x through) and a SiLU post-op */
static void silu_by_conv(rt_ctx *ctx, const float *x, int64_t n, float *y)
{
	rt_conv_desc d = cdesc(2, 1, 1, 1, 1, 1, 1, 1, 0, 1);
	d.in[1] = d.out[1] = n, d.channels_last = 1;
	d.post[d.npost++] = (rt_post){.kind = RT_SILU};
	const float one = 1.f;
	rt_conv *c = NULL;
	char err[512] = "";
	if (rt_conv_create(ctx, &d, &one, NULL, &c, err, sizeof err) || rt_conv_run(c, x, y, NULL, err, sizeof err))
		fail_msg("silu over %lld floats: %s", (long long)n, err);
	rt_conv_destroy(c);
}

/* A SiLU and the post-ops after it applied by the runtime after the conv
 * (RT_FAST_SILU=1 takes it on any machine): against the reference over 1x1,
 * 3x3 (then coil's Winograd), depthwise, grouped, strided and 1-d convs,
 * NCHW and NHWC, sizes that are not multiples of 8, a SiLU alone or last, a
 * residual sum after it (given apart and in dst itself), eltwise post-ops
 * before and after it, one and two threads; a residual sum after a relu, a
 * GELU, a product or a broadcast add (and a tanh after the GELU); SiLU's edge values against
 * x / (1 + exp(-x)), and floats across the whole range within 3 ulp (the vector code is
 * the x86-64-v3 build's: test_dnnl_rt_v3); a sum after another post-op never runs oneDNN's
 * reference kernel; the convs it leaves alone. */
static void test_conv_silu_tail(void **state)
{
	const env_saved env = env_force("RT_FAST_SILU", "1");
	char buf[128];
	rt_ctx *ctx = *state, *ctx2 = new_ctx(2);
	static const struct { int nsp, n, ic, oc, g, h, k, s, p, cl; } sh[] = {
		{2, 1, 16, 24, 1, 13, 1, 1, 0, 1}, {2, 2, 8, 16, 1, 9, 3, 1, 1, 1}, {2, 1, 24, 24, 24, 11, 3, 2, 1, 1},
		{2, 1, 32, 32, 2, 7, 3, 1, 1, 1},  {1, 2, 12, 20, 1, 17, 3, 1, 1, 0}, {2, 1, 6, 10, 1, 5, 3, 1, 1, 0},
	};
	for (size_t i = 0; i < sizeof sh / sizeof *sh; ++i)
		for (int v = 0; v < 4; ++v) {
			char nm[160];
			rt_conv_desc d = cdesc(sh[i].nsp, sh[i].n, sh[i].ic, sh[i].oc, sh[i].g, sh[i].h, sh[i].k, sh[i].s,
					       sh[i].p, 1);
			d.channels_last = sh[i].cl, d.has_bias = v != 2;
			if (v == 1 || v == 3)
				d.post[d.npost++] = (rt_post){.kind = RT_LINEAR, .a = 0.5f, .b = 0.25f};
			d.post[d.npost++] = (rt_post){.kind = RT_SILU, .scale = v == 3 ? 2.f : 0.f};
			if (v >= 2)
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
			if (v == 3)
				d.post[d.npost++] = (rt_post){.kind = RT_RELU};
			snprintf(nm, sizeof nm, "silu tail shape %zu v%d", i, v);
			run_conv_ex(i % 2 ? ctx2 : ctx, &d, nm, 0, NULL);
			if (v >= 2)
				run_conv_ex(i % 2 ? ctx : ctx2, &d, nm, 1, NULL);
			if (v == 2 && strstr(conv_impl_of(ctx, &d, buf, sizeof buf), "ref"))
				fail_msg("%s runs %s", nm, buf);
		}
	/* a sum after another post-op, the rest after it (oneDNN's reference kernel below
	 * AVX-512: made again and the tail applied by the runtime, sum_tail_at) */
	static const enum rt_post_kind before[] = {RT_RELU, RT_GELU_ERF, RT_MUL_BCAST, RT_ADD_BCAST};
	setenv("RT_FAST_SILU", "0", 1);
	for (size_t i = 0; i < 4; ++i)
		for (int v = 0; v < 4; ++v) {
			char nm[160];
			rt_conv_desc d = cdesc(2, sh[i].n, sh[i].ic, sh[i].oc, sh[i].g, sh[i].h, sh[i].k, sh[i].s, sh[i].p, 1);
			d.channels_last = (int)(i + v) % 2, d.has_bias = 1;
			d.post[d.npost++] = (rt_post){.kind = before[v], .rank = 4, .dims = {1, sh[i].oc, 1, 1}};
			d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
			if (v == 1)
				d.post[d.npost++] = (rt_post){.kind = RT_TANH};
			snprintf(nm, sizeof nm, "sum tail shape %zu v%d", i, v);
			run_conv_ex(v % 2 ? ctx2 : ctx, &d, nm, 0, NULL);
			run_conv_ex(v % 2 ? ctx : ctx2, &d, nm, 1, NULL);
			if (!strncmp(conv_impl_of(ctx, &d, buf, sizeof buf), "ref", 3))
				fail_msg("%s runs %s", nm, buf);
		}
	setenv("RT_FAST_SILU", "1", 1);
	/* SiLU's edges */
	{
		static const float xs[] = {0.f, -0.f, 1.f, -1.f, 10.f, -10.f, 50.f, -50.f, 87.5f, -87.5f, 88.5f, -88.5f,
					   -100.f, 100.f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 3.3f, -17.f};
		const int64_t nx = sizeof xs / sizeof *xs;
		float y[32];
		silu_by_conv(ctx, xs, nx, y);
		for (int64_t i = 0; i < nx; i++) {
			const double x = xs[i], want = x / (1 + exp(-x));
			if (isnan(want) ? !isnan(y[i])
			    : fabs(want) < 1e-30 ? fabs(y[i] - want) > 1e-36
						: fabs(y[i] - want) > 3e-7 * fabs(want))
				fail_msg("silu(%g) = %.9g, want %.9g", x, (double)y[i], want);
		}
	}
	/* floats across the whole range (one bit pattern in 4093, both signs, the
	 * vector loop for all but the last few): within 3 ulp of x / (1 + exp(-x))
	 * rounded once where that is 1e-35 or more in size (silu8 measured 2),
	 * within 1.1e-36 below, NaN where it is */
	{
		enum { NX = 1 << 20 };
		float *xs = malloc(NX * sizeof *xs), *y = malloc(NX * sizeof *y);
		assert_non_null(xs);
		assert_non_null(y);
		for (uint32_t k = 0; k < NX; k++) {
			const uint32_t u = k * 4093u;
			memcpy(&xs[k], &u, sizeof u);
		}
		silu_by_conv(ctx, xs, NX, y);
		int64_t worst = 0;
		float at = 0;
		for (int64_t i = 0; i < NX; i++) {
			const double x = xs[i];
			const float want = (float)(x / (1 + exp(-x)));
			int64_t e = 0;
			if (isnan(want) || isnan(y[i]))
				e = isnan(want) != isnan(y[i]) ? INT64_MAX : 0;
			else if (fabsf(want) < 1e-35f)
				e = fabsf(y[i] - want) > 1.1e-36f ? INT64_MAX : 0;
			else if (y[i] != want) {
				int32_t a, b;
				memcpy(&a, &y[i], sizeof a);
				memcpy(&b, &want, sizeof b);
				e = (a < 0) != (b < 0) ? INT64_MAX : llabs((long long)a - b);
			}
			if (e > worst)
				worst = e, at = xs[i];
		}
		free(xs);
		free(y);
		if (worst > 3)
			fail_msg("silu(%.9g) is %lld ulp off", (double)at, (long long)worst);
	}
	/* left as they were: RT_FAST_SILU=0, a broadcast operand after the SiLU, one pixel (the gemv) */
	rt_conv_desc no[3];
	for (int i = 0; i < 3; ++i) {
		no[i] = cdesc(2, 1, 16, 24, 1, 6, 1, 1, 0, 1), no[i].channels_last = 1;
		no[i].post[no[i].npost++] = (rt_post){.kind = RT_SILU};
	}
	no[1].post[no[1].npost++] = (rt_post){.kind = RT_MUL_BCAST, .rank = 4, .dims = {1, 24, 1, 1}};
	no[2] = cdesc(2, 1, 16, 24, 1, 1, 1, 1, 0, 1), no[2].channels_last = 1;
	no[2].post[no[2].npost++] = (rt_post){.kind = RT_SILU};
	for (int i = 0; i < 3; ++i) {
		setenv("RT_FAST_SILU", i ? "1" : "0", 1);
		char nm[64];
		snprintf(nm, sizeof nm, "silu left alone %d", i);
		run_conv_ex(ctx, &no[i], nm, 0, NULL);
	}
	rt_ctx_destroy(ctx2);
	env_restore(&env);
}

/* coil's grouped conv for 2 or 4 channels a group (RT_CGRP=1 takes it on
 * any machine): NHWC against the reference over kernel sizes, strides,
 * dilations, paddings, widths where the four-pixel interior path runs and
 * where it cannot, batches, post-ops, one and two threads; the convs it
 * leaves to oneDNN. */
static void test_conv_cgrp(void **state)
{
	const env_saved env = env_force("RT_CGRP", "1");
	char buf[128];
	rt_ctx *ctx = *state, *ctx2 = new_ctx(2);
	static const struct { int n, c, g, h, w, k, s, p, dil; } sh[] = {
		{1, 128, 32, 9, 13, 3, 1, 1, 1}, {2, 16, 8, 7, 13, 3, 2, 1, 1}, {1, 32, 8, 12, 12, 5, 1, 2, 1},
		{1, 64, 16, 10, 17, 3, 1, 2, 2}, {1, 8, 2, 3, 3, 3, 1, 1, 1},   {1, 24, 12, 6, 9, 1, 1, 0, 1},
		{1, 32, 8, 11, 10, 3, 2, 0, 1},
	};
	for (size_t i = 0; i < sizeof sh / sizeof *sh; ++i)
		for (int v = 0; v < 3; ++v) {
			char nm[160];
			rt_conv_desc d = cdesc(2, sh[i].n, sh[i].c, sh[i].c, sh[i].g, sh[i].h, sh[i].k, sh[i].s, sh[i].p,
					       sh[i].dil);
			d.in[1] = sh[i].w;
			conv_out(&d);
			d.channels_last = 1, d.has_bias = v != 1;
			if (v == 1)
				d.post[d.npost++] = (rt_post){.kind = RT_CLAMP, .a = 0, .b = 6};
			if (v == 2) {
				d.post[d.npost++] = (rt_post){.kind = RT_LINEAR, .a = 0.5f, .b = 0.1f};
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
				d.post[d.npost++] = (rt_post){.kind = RT_RELU};
			}
			if (strcmp(conv_impl_of(ctx, &d, buf, sizeof buf), "coil:group_nhwc"))
				fail_msg("shape %zu runs %s", i, buf);
			snprintf(nm, sizeof nm, "cgrp %d %dx%dx%d g%d k%d s%d p%d d%d v%d", sh[i].n, sh[i].c, sh[i].h,
				 sh[i].w, sh[i].g, sh[i].k, sh[i].s, sh[i].p, sh[i].dil, v);
			run_conv_ex(i % 2 ? ctx2 : ctx, &d, nm, 0, NULL);
			if (v == 2)
				run_conv_ex(ctx2, &d, nm, 1, NULL);
		}
	/* left to oneDNN: 8 channels a group, NCHW, ic != oc, a GELU */
	rt_conv_desc no[4];
	for (int i = 0; i < 4; ++i)
		no[i] = cdesc(2, 1, 64, 64, 16, 8, 3, 1, 1, 1), no[i].channels_last = 1;
	no[0] = cdesc(2, 1, 64, 64, 8, 8, 3, 1, 1, 1), no[0].channels_last = 1;
	no[1].channels_last = 0;
	no[2].oc = 32;
	no[3].post[no[3].npost++] = (rt_post){.kind = RT_GELU_ERF};
	for (int i = 0; i < 4; ++i) {
		const int64_t g = no[i].groups;
		float *w = rnd((size_t)(no[i].oc * (no[i].ic / g) * 9));
		rt_conv *c = NULL;
		char err[512] = "";
		if (rt_conv_create(ctx, &no[i], w, NULL, &c, err, sizeof err))
			fail_msg("rt_conv_create: %s", err);
		snprintf(buf, sizeof buf, "%s", rt_conv_impl(c));
		rt_conv_destroy(c);
		free(w);
		if (!strcmp(buf, "coil:group_nhwc"))
			fail_msg("case %d runs coil's grouped conv", i);
	}
	rt_ctx_destroy(ctx2);
	env_restore(&env);
}

/* coil's grouped conv for channels a group multiples of 8 (RT_CGRP8=1 takes
 * it on any machine): NHWC against the reference over 16- and 8-channel
 * panels (40 a group: two 16s and an 8), 24-wide panels (24 and 72 a
 * group; 48 runs as three 16s), in and out channels a group unequal,
 * strides, paddings, dilation, kernel sizes, images smaller than a tile
 * (every tile gathered) and wider (strided tiles), batches (tiles never
 * cross an image), post-ops with a residual, one and two threads.  By
 * default (no RT_CGRP8) only below AVX-512, and only the shapes
 * conv_cgrp_ok names (24 a group: stride 2 over 56 columns or more at one
 * or two images, stride 1 at 7x7 with a batch). */
static void test_conv_cgrp8(void **state)
{
	const env_saved env = env_force("RT_CGRP8", "1");
	char buf[128];
	rt_ctx *ctx = *state, *ctx2 = new_ctx(2);
	static const struct { int n, ic, oc, g, h, w, k, s, p, dil; } sh[] = {
		{1, 32, 32, 2, 9, 13, 3, 1, 1, 1},  {2, 48, 48, 2, 7, 11, 3, 2, 1, 1}, {1, 16, 32, 2, 6, 6, 3, 1, 1, 1},
		{1, 64, 64, 4, 10, 17, 3, 1, 2, 2}, {1, 32, 32, 2, 5, 8, 5, 1, 2, 1},  {1, 16, 16, 2, 3, 3, 3, 1, 1, 1},
		{3, 48, 48, 3, 11, 10, 3, 2, 0, 1}, {1, 64, 64, 4, 7, 9, 1, 1, 0, 1},  {2, 32, 16, 2, 4, 30, 3, 1, 1, 1},
		{1, 80, 80, 2, 6, 7, 3, 1, 1, 1},   {1, 144, 144, 2, 6, 9, 3, 1, 1, 1}, {2, 72, 72, 3, 9, 14, 3, 2, 1, 1},
		{1, 16, 48, 2, 5, 7, 3, 1, 1, 1},   {1, 96, 96, 2, 8, 8, 3, 1, 1, 1},  {1, 48, 48, 2, 3, 30, 1, 1, 0, 1},
	};
	for (size_t i = 0; i < sizeof sh / sizeof *sh; ++i)
		for (int v = 0; v < 2; ++v) {
			char nm[160];
			rt_conv_desc d = cdesc(2, sh[i].n, sh[i].ic, sh[i].oc, sh[i].g, sh[i].h, sh[i].k, sh[i].s, sh[i].p,
					       sh[i].dil);
			d.in[1] = sh[i].w;
			conv_out(&d);
			d.channels_last = 1, d.has_bias = v == 0;
			if (v == 1) {
				d.post[d.npost++] = (rt_post){.kind = RT_LINEAR, .a = 0.5f, .b = 0.1f};
				d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
				d.post[d.npost++] = (rt_post){.kind = RT_RELU};
			}
			if (strcmp(conv_impl_of(ctx, &d, buf, sizeof buf), "coil:group_nhwc"))
				fail_msg("shape %zu runs %s", i, buf);
			snprintf(nm, sizeof nm, "cgrp8 %d %d->%d %dx%d g%d k%d s%d p%d d%d v%d", sh[i].n, sh[i].ic, sh[i].oc,
				 sh[i].h, sh[i].w, sh[i].g, sh[i].k, sh[i].s, sh[i].p, sh[i].dil, v);
			run_conv_ex(ctx, &d, nm, 0, NULL);
			run_conv_ex(ctx2, &d, nm, v, NULL);
		}
	unsetenv("RT_CGRP8");
	static const struct { int n, c, g, h, s, want; } dflt[] = {
		{1, 48, 2, 112, 2, 1}, {2, 72, 3, 56, 2, 1}, {8, 72, 3, 7, 1, 1}, {1, 72, 3, 7, 1, 0},
		{8, 72, 3, 14, 1, 0},  {1, 72, 3, 28, 2, 0}, {8, 64, 4, 14, 1, 1}, {2, 96, 3, 56, 2, 0},
	};
	/* taken by default only where the runtime is built for AVX2 and FMA and
	 * oneDNN runs below AVX-512 (a generic build takes none) */
	const int on = BUILT_AVX2 && !has_isa(dnnl_cpu_isa_avx512_core);
	for (size_t i = 0; i < sizeof dflt / sizeof *dflt; ++i) {
		rt_conv_desc d = cdesc(2, dflt[i].n, dflt[i].c, dflt[i].c, dflt[i].g, dflt[i].h, 3, dflt[i].s, 1, 1);
		d.channels_last = 1;
		if (!strcmp(conv_impl_of(ctx, &d, buf, sizeof buf), "coil:group_nhwc") != (on && dflt[i].want))
			fail_msg("default case %zu runs %s", i, buf);
	}
	rt_ctx_destroy(ctx2);
	env_restore(&env);
}

/* The runtime packs Winograd weights itself (oneDNN 2.6's reorder into the
 * wino formats takes ~45 ns a weight): the same outputs as with oneDNN's
 * reorder (RT_WINO_PACK=0), at shapes where oneDNN picks each f32 format
 * (F(2x2,3x3) aaOBiOo and aaOio, F(4x4,3x3) OBaaIBOIio with several
 * blockings) and with channel counts that leave padded blocks. */
static void test_conv_wino_pack(void **state)
{
	if (!has_isa(dnnl_cpu_isa_avx512_core)) /* oneDNN 2.6 has no Winograd below AVX-512 */
		skip();
	rt_ctx *ctx = *state;
	char err[512] = "";
	static const struct { int n, ic, oc, hw; const char *impl; } shapes[] = {
		{1, 64, 64, 56, "2x3"}, {1, 256, 256, 14, "2x3"}, {8, 64, 64, 64, "4x3"},
		{32, 256, 256, 20, "4x3"}, {4, 128, 128, 23, "4x3"}, {2, 40, 24, 17, NULL},
		{1, 3, 20, 30, NULL},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; ++i) {
		rt_conv_desc d = cdesc(2, shapes[i].n, shapes[i].ic, shapes[i].oc, 1, shapes[i].hw, 3, 1, 1, 1);
		d.has_bias = 1;
		const size_t nx = (size_t)d.n * d.ic * d.in[0] * d.in[1], ny = (size_t)d.n * d.oc * d.out[0] * d.out[1];
		float *w = rnd((size_t)d.oc * d.ic * 9), *b = rnd((size_t)d.oc), *x = rnd(nx);
		float *y[2] = {malloc(ny * sizeof(float)), malloc(ny * sizeof(float))};
		char impl[2][64];
		for (int k = 0; k < 2; ++k) {
			rt_conv *c = NULL;
			if (k)
				setenv("RT_WINO_PACK", "0", 1);
			const int rc = rt_conv_create(ctx, &d, w, b, &c, err, sizeof err);
			unsetenv("RT_WINO_PACK");
			if (rc)
				fail_msg("rt_conv_create: %s", err);
			snprintf(impl[k], sizeof impl[k], "%s", rt_conv_impl(c));
			if (rt_conv_run(c, x, y[k], NULL, err, sizeof err))
				fail_msg("rt_conv_run: %s", err);
			rt_conv_destroy(c);
		}
		assert_string_equal(impl[0], impl[1]);
		if (shapes[i].impl && !(strstr(impl[0], "wino") && strstr(impl[0], shapes[i].impl)))
			fail_msg("%dx%d->%d at %d: %s, not Winograd %s", shapes[i].n, shapes[i].ic, shapes[i].oc,
				 shapes[i].hw, impl[0], shapes[i].impl);
		double md = 0, mx = 0;
		for (size_t j = 0; j < ny; ++j) {
			md = fmax(md, fabs((double)y[0][j] - y[1][j]));
			mx = fmax(mx, fabs((double)y[1][j]));
		}
		if (!(md <= 1e-5 * mx))
			fail_msg("%dx%d->%d at %d (%s): max |coil pack - oneDNN reorder| %g of %g", shapes[i].n,
				 shapes[i].ic, shapes[i].oc, shapes[i].hw, impl[0], md, mx);
		free(w), free(b), free(x), free(y[0]), free(y[1]);
	}
}

/* rt_conv_create without weights takes the copy the context packed under
 * the key in the layout the primitive wants (same results as with them),
 * and says RT_EAGAIN where there is none: another layout, another key,
 * or a conv whose kernel packs its own. */
static void test_conv_shared_only(void **state)
{
	(void)state;
	char err[512] = "";
	rt_ctx *ctx = new_ctx(1);
	rt_conv_desc a = cdesc(2, 2, 32, 48, 1, 12, 3, 1, 1, 1);
	a.weight_key = 7, a.has_bias = 1;
	a.post[a.npost++] = (rt_post){.kind = RT_RELU};
	float *w = rnd(48 * 32 * 9), *b = rnd(48), *x = rnd(2 * 32 * 12 * 12);
	float *y0 = malloc(2 * 48 * 12 * 12 * sizeof(float)), *y1 = malloc(2 * 48 * 12 * 12 * sizeof(float));
	rt_conv *c0 = NULL, *c1 = NULL, *c2 = NULL;
	if (rt_conv_create(ctx, &a, w, b, &c0, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	const size_t wb = rt_ctx_weight_bytes(ctx);
	if (rt_conv_create(ctx, &a, NULL, b, &c1, err, sizeof err))
		fail_msg("rt_conv_create without weights: %s", err);
	assert_int_equal(rt_ctx_weight_bytes(ctx), wb); /* no second copy */
	assert_int_equal(rt_conv_run(c0, x, y0, NULL, err, sizeof err), 0);
	assert_int_equal(rt_conv_run(c1, x, y1, NULL, err, sizeof err), 0);
	assert_memory_equal(y0, y1, 2 * 48 * 12 * 12 * sizeof(float));
	rt_conv_desc k = a;
	k.weight_key = 8; /* nothing packed under it */
	assert_int_equal(rt_conv_create(ctx, &k, NULL, b, &c2, err, sizeof err), RT_EAGAIN);
	assert_null(c2);
	k.weight_key = 0; /* no key: weights are required */
	assert_int_equal(rt_conv_create(ctx, &k, NULL, b, &c2, err, sizeof err), RT_EINVAL);
	/* a 1x1 conv of one pixel of one image runs coil's gemv, which packs its own */
	rt_conv_desc p = cdesc(2, 1, 32, 48, 1, 1, 1, 1, 0, 1);
	p.weight_key = 9;
	float *wp = rnd(48 * 32);
	rt_conv *c3 = NULL;
	if (rt_conv_create(ctx, &p, wp, NULL, &c3, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	assert_int_equal(rt_conv_create(ctx, &p, NULL, NULL, &c2, err, sizeof err), RT_EAGAIN);
	rt_conv_destroy(c0);
	rt_conv_destroy(c1);
	rt_conv_destroy(c3);
	assert_int_equal(rt_ctx_weight_bytes(ctx), 0);
	rt_ctx_destroy(ctx);
	free(w), free(b), free(x), free(y0), free(y1), free(wp);
}

/* A Winograd conv whose oneDNN scratchpad would pass 32 MiB (the
 * whole-batch schedule: 9 x 64 x 78x78 wants 96 MB) runs in chunks of
 * images that divide the batch: the same outputs as whole
 * (RT_WINO_CHUNK=0), its residual operand (given apart, or in dst) offset
 * per chunk, in a fraction of the workspace. */
static void test_conv_wino_chunk(void **state)
{
	if (!has_isa(dnnl_cpu_isa_avx512_core)) /* oneDNN 2.6 has no Winograd below AVX-512 */
		skip();
	(void)state;
	char err[512] = "";
	rt_conv_desc d = cdesc(2, 9, 64, 64, 1, 78, 3, 1, 1, 1);
	d.has_bias = 1;
	d.post[d.npost++] = (rt_post){.kind = RT_ADD_SAME};
	d.post[d.npost++] = (rt_post){.kind = RT_RELU};
	const size_t nx = (size_t)9 * 64 * 78 * 78;
	float *w = rnd(64 * 64 * 9), *b = rnd(64), *x = rnd(nx), *r = rnd(nx);
	float *y[3] = {malloc(nx * sizeof(float)), malloc(nx * sizeof(float)), malloc(nx * sizeof(float))};
	double *want = malloc(nx * sizeof *want);
	assert_true(y[0] && y[1] && y[2] && want);
	size_t ws[2];
	for (int k = 0; k < 2; ++k) {
		setenv("RT_WINO_CHUNK", k ? "1" : "0", 1);
		rt_ctx *ctx = new_ctx(1);
		rt_conv *c = NULL;
		if (rt_conv_create(ctx, &d, w, b, &c, err, sizeof err))
			fail_msg("rt_conv_create: %s", err);
		if (!strstr(rt_conv_impl(c), "wino"))
			fail_msg("9x64x78x78 runs %s, not Winograd", rt_conv_impl(c));
		const void *ps[RT_MAX_POST] = {r};
		if (rt_conv_run(c, x, y[k], ps, err, sizeof err))
			fail_msg("rt_conv_run: %s", err);
		if (k) { /* the residual in dst */
			memcpy(y[2], r, nx * sizeof(float));
			ps[0] = y[2];
			if (rt_conv_run(c, x, y[2], ps, err, sizeof err))
				fail_msg("rt_conv_run: %s", err);
		}
		ws[k] = rt_ctx_workspace_bytes(ctx);
		rt_conv_destroy(c);
		rt_ctx_destroy(ctx);
	}
	unsetenv("RT_WINO_CHUNK");
	if (!(ws[0] > ((size_t)32 << 20) && ws[1] <= ((size_t)40 << 20)))
		fail_msg("workspace whole %zu bytes, in chunks %zu", ws[0], ws[1]);
	for (size_t i = 0; i < nx; ++i)
		want[i] = y[0][i];
	check_close("wino in chunks", y[1], want, nx);
	assert_memory_equal(y[1], y[2], nx * sizeof(float));
	free(w), free(b), free(x), free(r), free(want);
	for (int k = 0; k < 3; ++k)
		free(y[k]);
}

/* Weights shared by key go back to the context's pool when the last object
 * using them goes, and the next pack of that size takes them (a Winograd
 * layout of another blocking, as a new batch size picks); the pool never
 * holds more than the most ever in use less what is in use. */
static void test_weight_pool(void **state)
{
	(void)state;
	char err[512] = "";
	rt_ctx *ctx = new_ctx(1);
	rt_conv_desc a = cdesc(2, 8, 64, 64, 1, 64, 3, 1, 1, 1), b = cdesc(2, 32, 64, 64, 1, 80, 3, 1, 1, 1);
	a.weight_key = b.weight_key = 0x5eed;
	float *w = rnd(64 * 64 * 9);
	rt_conv *c = NULL;
	if (rt_conv_create(ctx, &a, w, NULL, &c, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	const size_t wb = rt_ctx_weight_bytes(ctx);
	assert_true(wb >= 64 * 64 * 9 * sizeof(float));
	assert_int_equal(rt_ctx_weight_pool_bytes(ctx), 0);
	rt_conv_destroy(c);
	assert_int_equal(rt_ctx_weight_bytes(ctx), 0);
	assert_true(rt_ctx_weight_pool_bytes(ctx) >= wb);
	if (rt_conv_create(ctx, &b, w, NULL, &c, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	assert_int_equal(rt_ctx_weight_pool_bytes(ctx), 0); /* reused */
	assert_true(rt_ctx_weight_bytes(ctx) >= wb);
	/* a smaller conv's weights in use with b's: no buffer fits, a new one */
	rt_conv_desc s = cdesc(2, 1, 16, 16, 1, 8, 3, 1, 1, 1);
	s.weight_key = 0x5eee;
	rt_conv *c2 = NULL;
	if (rt_conv_create(ctx, &s, w, NULL, &c2, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	const size_t peak = rt_ctx_weight_bytes(ctx);
	rt_conv_destroy(c);
	assert_true(rt_ctx_weight_bytes(ctx) + rt_ctx_weight_pool_bytes(ctx) <= peak);
	/* the small one again: too small for the pooled buffer, so a new one,
	 * and the pool shrinks to stay within the peak */
	rt_conv_destroy(c2);
	assert_true(rt_ctx_weight_pool_bytes(ctx) <= peak);
	if (rt_conv_create(ctx, &s, w, NULL, &c2, err, sizeof err))
		fail_msg("rt_conv_create: %s", err);
	assert_true(rt_ctx_weight_bytes(ctx) + rt_ctx_weight_pool_bytes(ctx) <= peak);
	rt_conv_destroy(c2);
	rt_ctx_destroy(ctx);
	free(w);
}

/* ------------------------------------------------------------------ */
/* pooling                                                             */

static void ref_pool(const rt_pool_desc *d, const float *x, double *y)
{
	for (int64_t nc = 0; nc < d->n * d->c; ++nc)
		for (int64_t oh = 0; oh < d->out[0]; ++oh)
			for (int64_t ow = 0; ow < d->out[1]; ++ow) {
				double m = -INFINITY, sum = 0;
				int64_t cnt = 0;
				for (int64_t kh = 0; kh < d->k[0]; ++kh)
					for (int64_t kw = 0; kw < d->k[1]; ++kw) {
						int64_t h = oh * d->stride[0] - d->pad_l[0] + kh * (d->dil[0] ? d->dil[0] : 1);
						int64_t ww = ow * d->stride[1] - d->pad_l[1] + kw * (d->dil[1] ? d->dil[1] : 1);
						if (h < 0 || h >= d->in[0] || ww < 0 || ww >= d->in[1])
							continue;
						double v = x[(nc * d->in[0] + h) * d->in[1] + ww];
						m = v > m || isnan(v) ? v : m; /* NaN wins, as in eager */
						sum += v;
						cnt++;
					}
				y[(nc * d->out[0] + oh) * d->out[1] + ow] =
					d->kind == RT_POOL_MAX ? m
					: d->kind == RT_POOL_AVG_INCL ? sum / (double)(d->k[0] * d->k[1]) : sum / (double)cnt;
			}
}

/* Every layout pair; with nans, a NaN every 37th input (only coil's own
 * NHWC loop, RT_OWN_POOL=1, promises eager's NaN rule), which the result
 * holds exactly where the reference's does. */
static void run_pool(rt_ctx *ctx, rt_pool_desc d, const char *name, int nans)
{
	const size_t ssz = (size_t)(d.n * d.c * d.in[0] * d.in[1]), dsz = (size_t)(d.n * d.c * d.out[0] * d.out[1]);
	const int64_t sdims[4] = {d.n, d.c, d.in[0], d.in[1]}, ddims[4] = {d.n, d.c, d.out[0], d.out[1]};
	float *x = rnd(ssz), *xin = malloc(ssz * sizeof(float)), *dst = malloc(dsz * sizeof(float));
	float *got = malloc(dsz * sizeof(float));
	double *want = malloc(dsz * sizeof(double));
	assert_true(xin && dst && got && want);
	const char *own = getenv("RT_OWN_POOL");
	for (size_t i = 5; nans && i < ssz; i += 37)
		x[i] = NAN;
	ref_pool(&d, x, want);
	for (int lay = nans ? 3 : 0; lay < 4; ++lay) {
		char err[512] = "", nm[160];
		d.src_nhwc = lay & 1, d.dst_nhwc = lay >> 1;
		snprintf(nm, sizeof nm, "%s src %s dst %s (RT_OWN_POOL=%s)", name, d.src_nhwc ? "nhwc" : "nchw",
			 d.dst_nhwc ? "nhwc" : "nchw", own ? own : "unset");
		rt_pool *p = NULL;
		if (rt_pool_create(ctx, &d, &p, err, sizeof err))
			fail_msg("%s: rt_pool_create: %s", nm, err);
		if (own && d.dtype == RT_F32 && lay == 3 && !!strcmp(own, "0") != !strcmp(rt_pool_impl(p), "coil:pool"))
			fail_msg("%s: ran %s", nm, rt_pool_impl(p));
		if (d.src_nhwc)
			to_cl(x, xin, 4, sdims);
		else
			memcpy(xin, x, ssz * sizeof(float));
		for (size_t i = 0; i < dsz; ++i)
			dst[i] = NAN;
		if (rt_pool_run(p, xin, dst, err, sizeof err))
			fail_msg("%s: rt_pool_run: %s", nm, err);
		if (d.dst_nhwc)
			from_cl(dst, got, 4, ddims);
		else
			memcpy(got, dst, dsz * sizeof(float));
		for (size_t i = 0; nans && i < dsz; ++i) {
			if (isnan(want[i]) != isnan(got[i]))
				fail_msg("%s: element %zu: got %g, want %g", nm, i, (double)got[i], want[i]);
			if (isnan(want[i]))
				want[i] = got[i] = 0;
		}
		check_close(nm, got, want, dsz);
		rt_pool_destroy(p);
	}
	free(x);
	free(xin);
	free(dst);
	free(got);
	free(want);
}

static rt_pool_desc pdesc(enum rt_pool_kind kind, int64_t n, int64_t c, int64_t in, int64_t k, int64_t s, int64_t pl,
			  int64_t pr, int64_t dil)
{
	rt_pool_desc d;
	memset(&d, 0, sizeof d);
	d.kind = kind, d.n = n, d.c = c;
	for (int i = 0; i < 2; ++i) {
		d.in[i] = in, d.k[i] = k, d.stride[i] = s, d.pad_l[i] = pl, d.pad_r[i] = pr, d.dil[i] = dil;
		d.out[i] = (in + pl + pr - dil * (k - 1) - 1) / s + 1;
	}
	return d;
}

static void test_pool(void **state)
{
	rt_ctx *ctx = *state;
	/* oneDNN's primitive and coil's NHWC loop (channels 32 at a time, then 8, then one) */
	for (int own = 0; own < 2; ++own) {
		const env_saved env = env_force("RT_OWN_POOL", own ? "1" : "0");
		run_pool(ctx, pdesc(RT_POOL_MAX, 2, 16, 13, 3, 2, 1, 1, 1), "max 3x3 s2 p1", 0);
		run_pool(ctx, pdesc(RT_POOL_MAX, 1, 24, 14, 3, 2, 1, 2, 1), "max ceil overhang", 0);
		run_pool(ctx, pdesc(RT_POOL_MAX, 1, 8, 11, 2, 1, 1, 1, 2), "max dilated", 0);
		run_pool(ctx, pdesc(RT_POOL_MAX, 1, 45, 12, 3, 1, 1, 1, 1), "max 45 channels s1", 0);
		run_pool(ctx, pdesc(RT_POOL_MAX, 1, 5, 9, 3, 3, 1, 2, 2), "max 5 channels dilated s3", 0);
		run_pool(ctx, pdesc(RT_POOL_AVG_INCL, 2, 16, 9, 3, 2, 1, 1, 1), "avg incl pad", 0);
		run_pool(ctx, pdesc(RT_POOL_AVG_INCL, 1, 77, 10, 3, 1, 1, 1, 1), "avg incl 77 channels s1", 0);
		run_pool(ctx, pdesc(RT_POOL_AVG_EXCL, 1, 16, 14, 3, 2, 1, 2, 1), "avg excl ceil", 0);
		run_pool(ctx, pdesc(RT_POOL_AVG_EXCL, 1, 32, 8, 2, 2, 0, 0, 1), "avg 2x2", 0);
		run_pool(ctx, pdesc(RT_POOL_AVG_EXCL, 3, 40, 7, 7, 7, 0, 0, 1), "global avg", 0);
		env_restore(&env);
	}
	const env_saved env = env_force("RT_OWN_POOL", "1");
	run_pool(ctx, pdesc(RT_POOL_MAX, 2, 44, 13, 3, 2, 1, 1, 1), "max NaNs", 1);
	run_pool(ctx, pdesc(RT_POOL_AVG_EXCL, 1, 44, 13, 3, 2, 1, 2, 1), "avg NaNs", 1);
	env_restore(&env);
	/* bad windows are refused with a message, never crash */
	char err[256] = "";
	rt_pool *p = NULL;
	rt_pool_desc d = pdesc(RT_POOL_MAX, 1, 4, 8, 3, 2, 1, 1, 1);
	d.out[0] = 9;
	assert_int_equal(rt_pool_create(ctx, &d, &p, err, sizeof err), RT_EINVAL);
	assert_non_null(strstr(err, "out is 9"));
	d = pdesc(RT_POOL_MAX, 1, 4, 8, 3, 2, 3, 3, 1);
	assert_int_equal(rt_pool_create(ctx, &d, &p, err, sizeof err), RT_EINVAL);
	assert_null(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conv2d_basic),
		cmocka_unit_test(test_conv_trim),
		cmocka_unit_test(test_conv2d_stride_pad_dil_groups),
		cmocka_unit_test(test_conv_grouped_blocked),
		cmocka_unit_test(test_conv2d_depthwise_1x1),
		cmocka_unit_test(test_conv_gemv),
		cmocka_unit_test(test_conv_dw_dilated),
		cmocka_unit_test(test_conv1d_3d),
		cmocka_unit_test(test_conv_col),
		cmocka_unit_test(test_conv_transposed),
		cmocka_unit_test(test_conv_post_each),
		cmocka_unit_test(test_conv_post_chains),
		cmocka_unit_test(test_conv_bcast_patterns),
		cmocka_unit_test(test_conv_auto_path),
		cmocka_unit_test(test_mm),
		cmocka_unit_test(test_addmm),
		cmocka_unit_test(test_bmm),
		cmocka_unit_test(test_matmul_post),
		cmocka_unit_test(test_matmul_gemv),
		cmocka_unit_test(test_matmul_runtime_m),
		cmocka_unit_test(test_matmul_int8_dynamic),
		cmocka_unit_test(test_matmul_sgemm),
		cmocka_unit_test(test_matmul_cgemm),
		cmocka_unit_test(test_threads_same_result),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_conv_winograd),
		cmocka_unit_test(test_conv_wino_pack),
		cmocka_unit_test(test_conv_wino_chunk),
		cmocka_unit_test(test_conv_cwino),
		cmocka_unit_test(test_conv_silu_tail),
		cmocka_unit_test(test_conv_cgrp),
		cmocka_unit_test(test_conv_cgrp8),
		cmocka_unit_test(test_weight_pool),
		cmocka_unit_test(test_conv_shared_only),
		cmocka_unit_test(test_pool),
	};
	return cmocka_run_group_tests_name("dnnl_rt", tests, setup, teardown);
}
