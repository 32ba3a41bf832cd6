/* oneDNN's f32 GEMM rate through codegen/rt (rt_matmul), for the roofline
 * line of bench/conv_models.py.  Built by that script:
 *
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -I. -o sgemm_rate bench/sgemm_rate.c codegen/rt/dnnl_rt.c -ldnnl -lm
 *   ./sgemm_rate THREADS [M K N]   -> "GFLOPS <rate>"
 *
 * Best of 5 batches of ~0.3 s, a constant (prepacked) B as a linear layer
 * has; default 1024 x 1024 x 1024. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "codegen/rt/dnnl_rt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int nt = argc > 1 ? atoi(argv[1]) : 1;
	int64_t m = argc > 4 ? atoll(argv[2]) : 1024, k = argc > 4 ? atoll(argv[3]) : 1024, n = argc > 4 ? atoll(argv[4]) : 1024;
	char err[256];
	rt_ctx *ctx;
	rt_matmul *mm;
	float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b),
	      *c = malloc((size_t)(m * n) * sizeof *c);
	if (!a || !b || !c)
		return 1;
	for (int64_t i = 0; i < m * k; i++)
		a[i] = (float)(i % 13) * 0.1f;
	for (int64_t i = 0; i < k * n; i++)
		b[i] = (float)(i % 7) * 0.1f;
	rt_matmul_desc d = {.m = m, .k = k, .n = n, .b_const = 1};
	if (rt_ctx_create(nt, &ctx, err, sizeof err) || rt_matmul_create(ctx, &d, b, NULL, &mm, err, sizeof err)) {
		fprintf(stderr, "sgemm_rate: %s\n", err);
		return 1;
	}
	for (int i = 0; i < 3; i++)
		rt_matmul_run(mm, 0, a, NULL, NULL, c, NULL, err, sizeof err);
	double t0 = now();
	rt_matmul_run(mm, 0, a, NULL, NULL, c, NULL, err, sizeof err);
	int reps = (int)(0.3 / (now() - t0 + 1e-9)) + 1;
	double best = 1e30;
	for (int r = 0; r < 5; r++) {
		t0 = now();
		for (int i = 0; i < reps; i++)
			rt_matmul_run(mm, 0, a, NULL, NULL, c, NULL, err, sizeof err);
		double t = (now() - t0) / reps;
		best = t < best ? t : best;
	}
	printf("GFLOPS %.1f\n", 2.0 * (double)m * (double)k * (double)n / best / 1e9);
	rt_matmul_destroy(mm);
	rt_ctx_destroy(ctx);
	free(a);
	free(b);
	free(c);
	return 0;
}
