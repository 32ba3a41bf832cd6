/* vmath: the f32 math emitted into artifacts (codegen/vmath.h), checked
 * against libm over the whole float range.  For each target that runs here
 * (generic: 1 lane, x86-64-v3: 8, x86-64-v4: 16) a small shared object built
 * from the embedded vmath source maps every function over every 257th bit
 * pattern (16.7M floats: all signs, exponents, subnormals) plus special
 * values; the error in ulps against double libm must stay within the bounds
 * documented in vmath.h. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "codegen/emit.h"

static double ref_exp(double x) { return exp(x); }
static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_gelu(double x) { return 0.5 * x * erfc(-x * M_SQRT1_2); }

static const struct {
	const char *name;
	double (*ref)(double);
	double bound; /* ulp, as documented in vmath.h */
	double below; /* only inputs with |x| < below count (0: all) */
	double bound8; /* 8 lanes, where not bound */
} funcs[] = {
	{"exp", ref_exp, 1, 0, 0},	 {"log", log, 1, 0, 0},		{"tanh", tanh, 1.5, 0, 0},
	{"erf", erf, 3, 0, 0},		 {"sigmoid", ref_sigmoid, 2.5, 0, 0}, {"gelu", ref_gelu, 11, 0, 0},
	{"gelu", ref_gelu, 2.5, 4, 3}, /* the table paths (1 and 16 lanes: coil_gelu_tab; 8: coil_gelu_tab8) */
};

static const char *const targets[] = {"generic", "x86-64-v3", "x86-64-v4"};

static const char harness[] =
	"#if defined(__AVX512F__)\n#define W 16\n#define F(n) coil_##n##16\ntypedef __m512 V;\n"
	"#elif defined(__AVX2__)\n#define W 8\n#define F(n) coil_##n##8\ntypedef __m256 V;\n"
	"#else\n#define W 1\n#define F(n) coil_##n##1\ntypedef coil_v1f V;\n#endif\n"
	"#define E __attribute__((visibility(\"default\")))\n#define T(n) E void t_##n(const float *x, float *y, long cnt) { for (long i = 0; i < cnt; i += W) "
	"{ V v; memcpy(&v, x + i, sizeof v); v = F(n)(v); memcpy(y + i, &v, sizeof v); } }\n"
	"T(exp) T(log) T(tanh) T(erf) T(sigmoid) T(gelu)\nE int t_width(void) { return W; }\n"
	"#define T2(n) E void t_##n(const float *a, const float *b, float *y, long cnt) { for (long i = 0; i < cnt; "
	"i += W) { V u, v; memcpy(&u, a + i, sizeof u); memcpy(&v, b + i, sizeof v); u = F(n)(u, v); "
	"memcpy(y + i, &u, sizeof u); } }\nT2(max) T2(min)\n";

/* Builds src for targets[t] into dir (once: an existing .so is reused) and loads it. */
static void *load_target(const char *dir, const char *tag, size_t t, const char *src)
{
	coil_err err;
	const coil_target *tg = target_get(targets[t], &err);
	char so[64];
	snprintf(so, sizeof so, "%s/%s%zu.so", dir, tag, t);
	if (access(so, F_OK) != 0) {
		double secs;
		assert_int_equal(build_so(src, NULL, "-O2", tg->flags, 1, 0, so, &secs, &err), 0);
	}
	void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	return h;
}

/* Error of got in ulps of the correctly rounded ref (2^-149 below 2^-126). */
static double ulp_err(float got, double ref)
{
	float rf = (float)ref;
	if (isnan(ref) || isnan(got))
		return isnan(ref) && isnan(got) ? 0 : INFINITY;
	if (got == rf)
		return 0;
	if (isinf(rf) || isinf(got))
		return INFINITY;
	int e;
	frexp(rf == 0 ? ref : rf, &e);
	return fabs((double)got - ref) / ldexp(1, e - 24 < -149 ? -149 : e - 24);
}

static void test_vmath_bounds(void **state)
{
	(void)state;
	const long step = 257;
	long n = (long)((1ull << 32) / step) + 64, k = 0;
	float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
	double *ref = malloc((size_t)n * 8);
	assert_non_null(x);
	assert_non_null(y);
	assert_non_null(ref);
	for (uint64_t u = 0; u < (1ull << 32); u += step) {
		uint32_t b = (uint32_t)u;
		memcpy(&x[k++], &b, 4);
	}
	static const float special[] = {0, -0.0f, INFINITY, -INFINITY, NAN, 1, -1, 88.72f, 88.73f, -103.97f, -87.5f,
					0.625f, -0.625f, 1.0f, 3.92f, -3.92f, 1e-40f, -1e-40f, 1.17549435e-38f,
					-13.1209393f, 14.85f, -14.85f, -20.0f, 1e30f, -1e30f};
	for (size_t i = 0; i < sizeof special / sizeof *special; i++)
		x[k++] = special[i];
	while (k % 16)
		x[k++] = 0.5f;
	char dir[] = "/tmp/coil-vmath-XXXXXX";
	assert_non_null(mkdtemp(dir));
	size_t len = strlen(vec_vmath_source()) + sizeof harness + 1;
	char *src = malloc(len);
	snprintf(src, len, "%s%s", vec_vmath_source(), harness);
	int bad = 0;
	for (size_t f = 0; f < sizeof funcs / sizeof *funcs; f++) {
		for (long i = 0; i < k; i++)
			ref[i] = funcs[f].ref((double)x[i]);
		for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
			if (!target_runs_here(targets[t]))
				continue;
			void *h = load_target(dir, "v", t, src);
			char sym[32];
			snprintf(sym, sizeof sym, "t_%s", funcs[f].name);
			void (*fn)(const float *, float *, long);
			*(void **)&fn = dlsym(h, sym);
			int (*width)(void);
			*(void **)&width = dlsym(h, "t_width");
			assert_non_null(fn);
			fn(x, y, k);
			double mx = 0;
			float at = 0;
			for (long i = 0; i < k; i++) {
				if (funcs[f].below && !(fabsf(x[i]) < funcs[f].below))
					continue;
				double e = ulp_err(y[i], ref[i]);
				if (e > mx)
					mx = e, at = x[i];
			}
			const double bound = width() == 8 && funcs[f].bound8 ? funcs[f].bound8 : funcs[f].bound;
			print_message("# %-8s %-10s %2d lanes: max %.3f ulp (at %.9g), bound %.1f%s\n", funcs[f].name,
				      targets[t], width(), mx, at, bound, funcs[f].below ? " for |x| < 4" : "");
			if (mx > bound)
				bad++;
			dlclose(h);
		}
	}
	for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
		char so[64];
		snprintf(so, sizeof so, "%s/v%zu.so", dir, t);
		unlink(so);
	}
	rmdir(dir);
	free(src);
	free(x);
	free(y);
	free(ref);
	assert_int_equal(bad, 0);
}

/* coil_max##N / coil_min##N on every pair of special values, for each width: a > b ? a : b
 * (a < b for min) bit for bit, and NaN when either is NaN, whichever side, as the
 * interpreter computes maximum/minimum and amax/amin (a reduction feeds its accumulator as b). */
static void test_vmath_minmax(void **state)
{
	(void)state;
	static const float v[] = {0, -0.0f, 1, -1, 2.5f, -2.5f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f, -1e-40f, 3e38f};
	enum { NV = sizeof v / sizeof *v, N = (NV * NV + 15) / 16 * 16 };
	float a[N], b[N], y[N];
	for (int i = 0; i < N; i++)
		a[i] = v[i % (NV * NV) / NV], b[i] = v[i % NV];
	char dir[] = "/tmp/coil-vmath-XXXXXX";
	assert_non_null(mkdtemp(dir));
	size_t len = strlen(vec_vmath_source()) + sizeof harness + 1;
	char *src = malloc(len);
	assert_non_null(src);
	snprintf(src, len, "%s%s", vec_vmath_source(), harness);
	int bad = 0, ran = 0;
	for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
		if (!target_runs_here(targets[t]))
			continue;
		void *h = load_target(dir, "m", t, src);
		for (int m = 0; m < 2; m++) {
			void (*fn)(const float *, const float *, float *, long);
			*(void **)&fn = dlsym(h, m ? "t_min" : "t_max");
			assert_non_null(fn);
			fn(a, b, y, N);
			for (int i = 0; i < N; i++) {
				float want = isnan(a[i]) || isnan(b[i]) ? NAN : (m ? a[i] < b[i] : a[i] > b[i]) ? a[i] : b[i];
				int ok = isnan(want) ? isnan(y[i]) : !memcmp(&want, &y[i], 4);
				if (!ok && bad++ < 8)
					print_message("# %s %s(%g, %g) = %g, expected %g\n", targets[t], m ? "min" : "max",
						      a[i], b[i], y[i], want);
			}
		}
		ran++;
		dlclose(h);
		char so[64];
		snprintf(so, sizeof so, "%s/m%zu.so", dir, t);
		unlink(so);
	}
	rmdir(dir);
	free(src);
	assert_true(ran > 0);
	assert_int_equal(bad, 0);
}

/* bf16 and f16 conversions, as every artifact has them (vmath.h): over
 * all 2^32 float bit patterns, each width's store (f32 -> half bits) and
 * in-register rounding must give the bits of the instruction: AVX512_BF16's
 * vcvtneps2bf16 (the avx512_bf16 build of the same source) and F16C's
 * vcvtps2ph (the 8- and 16-lane f16 forms use it); the scalar forms are the
 * emulation every target falls back on.  The widening loads are checked
 * over all 2^16 half patterns. */
static const char half_harness[] =
	"#if defined(__AVX512F__)\n#define W 16\ntypedef __m512 V;\n#define H(f, h) coil_##f##_##h##_16\n"
	"#elif defined(__AVX2__)\n#define W 8\ntypedef __m256 V;\n#define H(f, h) coil_##f##_##h##_8\n#endif\n"
	"#define E __attribute__((visibility(\"default\")))\n"
	"#ifdef W\n#define T(h) E void t_st_##h(const float *x, uint16_t *y, long n) { for (long i = 0; i < n; i += W) "
	"{ V v; memcpy(&v, x + i, sizeof v); H(st, h)(y + i, v); } } \\\n"
	"E void t_rnd_##h(const float *x, float *y, long n) { for (long i = 0; i < n; i += W) "
	"{ V v; memcpy(&v, x + i, sizeof v); v = H(rnd, h)(v); memcpy(y + i, &v, sizeof v); } } \\\n"
	"E void t_ld_##h(const uint16_t *x, float *y, long n) { for (long i = 0; i < n; i += W) "
	"{ V v = H(ld, h)(x + i); memcpy(y + i, &v, sizeof v); } }\n"
	"#else\n#define T(h) E void t_st_##h(const float *x, uint16_t *y, long n) { for (long i = 0; i < n; i++) "
	"y[i] = coil_f32_##h(x[i]); } \\\n"
	"E void t_rnd_##h(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = coil_round_##h(x[i]); } \\\n"
	"E void t_ld_##h(const uint16_t *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = coil_##h##_f32(x[i]); }\n"
	"#endif\nT(bf16) T(f16)\n";

static void test_half_conversions(void **state)
{
	(void)state;
	static const char *const ht[] = {"generic", "x86-64-v3", "x86-64-v4", "avx512_bf16"};
	enum { NT = 4, CH = 1 << 20 };
	char dir[] = "/tmp/coil-vmath-XXXXXX";
	assert_non_null(mkdtemp(dir));
	size_t len = strlen(vec_vmath_source()) + sizeof half_harness + 1;
	char *src = malloc(len);
	assert_non_null(src);
	snprintf(src, len, "%s%s", vec_vmath_source(), half_harness);
	void *h[NT] = {0};
	typedef void (*st_fn)(const float *, uint16_t *, long);
	typedef void (*rnd_fn)(const float *, float *, long);
	typedef void (*ld_fn)(const uint16_t *, float *, long);
	st_fn st[NT][2] = {{0}};
	rnd_fn rnd[NT][2] = {{0}};
	ld_fn ld[NT][2] = {{0}};
	static const char *const hn[2] = {"bf16", "f16"};
	for (int t = 0; t < NT; t++) {
		coil_err err;
		const coil_target *tg = target_get(ht[t], &err);
		assert_non_null(tg);
		if (!target_runs_here(ht[t])) {
			print_message("# %s does not run here: its conversions are not checked\n", ht[t]);
			continue;
		}
		char so[64];
		double secs;
		snprintf(so, sizeof so, "%s/h%d.so", dir, t);
		if (build_so(src, NULL, "-O2", tg->flags, 1, 0, so, &secs, &err))
			fail_msg("%s: %s", ht[t], err.msg);
		h[t] = dlopen(so, RTLD_NOW | RTLD_LOCAL);
		assert_non_null(h[t]);
		unlink(so);
		for (int k = 0; k < 2; k++) {
			char name[32];
			snprintf(name, sizeof name, "t_st_%s", hn[k]);
			*(void **)&st[t][k] = dlsym(h[t], name);
			snprintf(name, sizeof name, "t_rnd_%s", hn[k]);
			*(void **)&rnd[t][k] = dlsym(h[t], name);
			snprintf(name, sizeof name, "t_ld_%s", hn[k]);
			*(void **)&ld[t][k] = dlsym(h[t], name);
			assert_true(st[t][k] && rnd[t][k] && ld[t][k]);
		}
	}
	rmdir(dir);
	free(src);
	/* the instruction's bits: bf16 from the avx512_bf16 build, f16 from F16C (x86-64-v3's) */
	int ref[2] = {h[3] ? 3 : -1, h[1] ? 1 : h[2] ? 2 : -1};
	if (ref[0] < 0 || ref[1] < 0)
		print_message("# no %s here: the emulation is compared with the other widths only\n",
			      ref[0] < 0 ? "AVX512_BF16" : "F16C");
	float *x = malloc(CH * sizeof *x), *r = malloc(CH * sizeof *r), *rr = malloc(CH * sizeof *rr);
	uint16_t *y = malloc(CH * sizeof *y), *yr = malloc(CH * sizeof *yr);
	assert_true(x && r && rr && y && yr);
	long bad = 0, checked = 0;
	for (int k = 0; k < 2; k++) {
		int R = ref[k] >= 0 ? ref[k] : 0;
		for (uint64_t base = 0; base < ((uint64_t)1 << 32); base += CH) {
			for (uint32_t i = 0; i < CH; i++) {
				uint32_t u = (uint32_t)(base + i);
				memcpy(&x[i], &u, 4);
			}
			st[R][k](x, yr, CH);
			rnd[R][k](x, rr, CH);
			for (int t = 0; t < NT; t++) {
				if (!h[t] || t == R)
					continue;
				st[t][k](x, y, CH);
				rnd[t][k](x, r, CH);
				checked += CH;
				for (uint32_t i = 0; i < CH; i++)
					if (y[i] != yr[i] || memcmp(&r[i], &rr[i], 4)) {
						if (bad++ < 8)
							print_message("# %s %s(0x%08x): 0x%04x (round 0x%08x), the reference "
								      "0x%04x (0x%08x)\n", ht[t], hn[k],
								      (unsigned)(base + i), y[i], *(uint32_t *)&r[i], yr[i],
								      *(uint32_t *)&rr[i]);
					}
			}
		}
		/* widening: every half pattern */
		for (uint32_t i = 0; i < 65536; i++)
			y[i] = (uint16_t)i;
		ld[R][k](y, rr, 65536);
		for (int t = 0; t < NT; t++) {
			if (!h[t] || t == R)
				continue;
			ld[t][k](y, r, 65536);
			for (uint32_t i = 0; i < 65536; i++)
				if (memcmp(&r[i], &rr[i], 4) && bad++ < 8)
					print_message("# %s %s load(0x%04x) = 0x%08x, the reference 0x%08x\n", ht[t], hn[k],
						      (unsigned)i, *(uint32_t *)&r[i], *(uint32_t *)&rr[i]);
		}
	}
	print_message("# half conversions: %ld compared, %ld differ\n", checked, bad);
	for (int t = 0; t < NT; t++)
		if (h[t])
			dlclose(h[t]);
	free(x), free(r), free(rr), free(y), free(yr);
	assert_true(checked > 0);
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vmath_bounds),
		cmocka_unit_test(test_vmath_minmax),
		cmocka_unit_test(test_half_conversions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
