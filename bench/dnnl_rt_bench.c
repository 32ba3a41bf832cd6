/* Single-thread throughput of codegen/rt/dnnl_rt on resnet50-shaped convs and
 * a transformer-shaped linear.  Not part of the build; from the repo root:
 *
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -I. -o /tmp/dnnl_rt_bench \
 *       bench/dnnl_rt_bench.c codegen/rt/dnnl_rt.c -ldnnl -lm && /tmp/dnnl_rt_bench [threads]
 *
 * Prints GFLOP/s (2*MACs / best-of-5 mean time of a timed batch) and the
 * oneDNN implementation picked.  Convs run three ways: NCHW activations on
 * oneDNN's NCHW kernel (RT_PATH_DIRECT), NCHW activations reordered to and
 * from NHWC around the NHWC kernel (RT_PATH_NHWC, reorders included in the
 * time), NHWC activations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/rt/dnnl_rt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *buf(size_t n)
{
	float *p = malloc(n * sizeof *p);
	if (!p)
		exit(1);
	for (size_t i = 0; i < n; ++i)
		p[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
	return p;
}

/* Best-of-5 seconds per call of fn(arg), each timing a batch of ~0.2 s. */
static double timeit(int (*fn)(void *), void *arg)
{
	for (int i = 0; i < 3; ++i)
		if (fn(arg))
			exit(1);
	double t0 = now();
	int reps = 1;
	fn(arg);
	double one = now() - t0;
	if (one > 0)
		reps = (int)(0.2 / one) + 1;
	double best = 1e30;
	for (int r = 0; r < 5; ++r) {
		t0 = now();
		for (int i = 0; i < reps; ++i)
			fn(arg);
		double t = (now() - t0) / reps;
		if (t < best)
			best = t;
	}
	return best;
}

typedef struct {
	rt_conv *c;
	float *x, *y;
	const float *const *post;
} conv_arg;

static int conv_call(void *p)
{
	conv_arg *a = p;
	char err[256];
	int rc = rt_conv_run(a->c, a->x, a->y, a->post, err, sizeof err);
	if (rc)
		fprintf(stderr, "run: %s\n", err);
	return rc;
}

static void bench_conv(rt_ctx *ctx, const char *name, int64_t ic, int64_t oc, int64_t hw,
		       int64_t k, int fused)
{
	static const struct {
		int cl;
		enum rt_conv_path path;
		const char *name;
	} ways[] = {{0, RT_PATH_DIRECT, "NCHW"}, {0, RT_PATH_NHWC, "NCHW>NHWC"}, {1, 0, "NHWC"}};
	for (int wi = 0; wi < 3; ++wi) {
		const int cl = ways[wi].cl;
		rt_conv_desc d;
		memset(&d, 0, sizeof d);
		d.nsp = 2, d.n = 1, d.ic = ic, d.oc = oc, d.groups = 1;
		for (int i = 0; i < 2; ++i) {
			d.in[i] = d.out[i] = hw, d.k[i] = k, d.stride[i] = 1, d.dil[i] = 1;
			d.pad_l[i] = d.pad_r[i] = k / 2;
		}
		d.channels_last = cl;
		d.path = ways[wi].path;
		d.has_bias = 1;
		float *res = NULL;
		const float *post[2] = {NULL, NULL};
		if (fused) { /* resnet block tail: bias + residual + relu */
			d.npost = 2;
			d.post[0].kind = RT_ADD_SAME;
			d.post[1].kind = RT_RELU;
		}
		float *w = buf((size_t)(oc * ic * k * k)), *b = buf((size_t)oc);
		float *x = buf((size_t)(ic * hw * hw)), *y = buf((size_t)(oc * hw * hw));
		char err[256];
		rt_conv *c;
		if (rt_conv_create(ctx, &d, w, b, &c, err, sizeof err)) {
			fprintf(stderr, "%s: %s\n", name, err);
			exit(1);
		}
		if (fused) { /* residual passed in place (dst pre-filled): no copy */
			res = y;
			post[0] = res;
		}
		conv_arg a = {c, x, y, fused ? post : NULL};
		double t = timeit(conv_call, &a);
		double gflop = 2.0 * (double)(oc * ic * k * k * hw * hw) * 1e-9;
		printf("%-36s %-9s %7.3f ms %6.1f GFLOP/s  %s\n", name, ways[wi].name, t * 1e3,
		       gflop / t, rt_conv_impl(c));
		rt_conv_destroy(c);
		free(w), free(b), free(x), free(y);
	}
}

typedef struct {
	rt_matmul *m;
	float *a, *c;
} mm_arg;

static int mm_call(void *p)
{
	mm_arg *a = p;
	char err[256];
	int rc = rt_matmul_run(a->m, 0, a->a, NULL, NULL, a->c, NULL, err, sizeof err);
	if (rc)
		fprintf(stderr, "run: %s\n", err);
	return rc;
}

static void bench_linear(rt_ctx *ctx, int64_t m, int64_t k, int64_t n, int gelu)
{
	rt_matmul_desc d;
	memset(&d, 0, sizeof d);
	d.m = m, d.k = k, d.n = n, d.alpha = d.beta = 1;
	d.b_trans = d.b_const = d.has_bias = d.bias_const = 1; /* nn.Linear */
	if (gelu) {
		d.npost = 1;
		d.post[0].kind = RT_GELU_ERF;
	}
	float *w = buf((size_t)(n * k)), *b = buf((size_t)n), *a = buf((size_t)(m * k)),
	      *c = buf((size_t)(m * n));
	char err[256];
	rt_matmul *mm;
	if (rt_matmul_create(ctx, &d, w, b, &mm, err, sizeof err)) {
		fprintf(stderr, "linear: %s\n", err);
		exit(1);
	}
	mm_arg arg = {mm, a, c};
	double t = timeit(mm_call, &arg);
	double gflop = 2.0 * (double)(m * k * n) * 1e-9;
	char name[64];
	snprintf(name, sizeof name, "linear %lldx%lld @ %lldx%lld%s", (long long)m, (long long)k,
		 (long long)k, (long long)n, gelu ? " +gelu" : "");
	printf("%-46s %7.3f ms %6.1f GFLOP/s  %s\n", name, t * 1e3, gflop / t, rt_matmul_impl(mm));
	rt_matmul_destroy(mm);
	free(w), free(b), free(a), free(c);
}

int main(int argc, char **argv)
{
	int nthreads = argc > 1 ? atoi(argv[1]) : 1;
	char err[256];
	rt_ctx *ctx;
	if (rt_ctx_create(nthreads, &ctx, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("threads: %d\n", nthreads);
	bench_conv(ctx, "conv3x3 64->64 56x56 +bias", 64, 64, 56, 3, 0);
	bench_conv(ctx, "conv3x3 64->64 56x56 +bias+res+relu", 64, 64, 56, 3, 1);
	bench_conv(ctx, "conv1x1 256->64 56x56 +bias", 256, 64, 56, 1, 0);
	bench_conv(ctx, "conv1x1 64->256 56x56 +bias+res+relu", 64, 256, 56, 1, 1);
	bench_linear(ctx, 128, 768, 768, 0);
	bench_linear(ctx, 128, 768, 3072, 1);
	rt_ctx_destroy(ctx);
	return 0;
}
