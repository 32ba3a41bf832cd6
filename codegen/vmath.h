/* vmath: f32 math for generated kernels, written once over GCC vector types
 * and instantiated for 1 lane (the scalar table), 8 lanes (AVX2) and 16 lanes
 * (AVX-512).  codegen/vec.c embeds this file verbatim at the top of every
 * artifact, so it must stay self-contained C11 + GCC vector extensions.
 *
 * Functions (N = 1, 8 or 16 lanes; V the vector type, VI its int32 twin):
 *   coil_exp##N, coil_log##N, coil_tanh##N, coil_erf##N, coil_sigmoid##N,
 *   coil_gelu##N (x*Phi(x): vec.c renders decompose's (0.5*x)*(1 + erf(x/sqrt2))
 *   as one call),
 *   coil_max##N / coil_min##N (NaN-propagating like the interpreter),
 *   coil_sel##N (bitwise select), coil_lanes1_##N / coil_lanes2_##N (apply a
 *   scalar libm function lane by lane: sin, cos, log1p, pow, ...).
 * Scalar wrappers: coil_expf, coil_logf, coil_tanhf, coil_erff, coil_sigmoidf,
 * coil_geluf.  Polynomials use FMA where the target has it (x86-64-v3/v4).
 *
 * Maximum error against the correctly rounded result (double libm rounded to
 * float), over every float sampled densely across the whole range,
 * subnormals, zeros, infinities and NaN included (tests/test_vmath.c checks
 * these bounds for all three widths):
 *   exp      1 ulp   [Cody-Waite reduction, Cephes degree-5 polynomial,
 *                     scaling by 2^n rounded once for subnormal results;
 *                     overflow to inf above 88.72, 0 below -103.97]
 *   log      1 ulp   [Cephes logf on [sqrt(1/2), sqrt(2)); subnormal inputs
 *                     normalized; log(0) = -inf, log(x<0) = NaN]
 *   tanh     1.5 ulp [|x| < 0.625: odd minimax polynomial (degree 13);
 *                     else 1 - 2/(exp(2|x|)+1)]
 *   erf      3 ulp   [|x| < 1: x*P(x^2) (degree 13 in x); 1 <= |x| < 3.92:
 *                     1 - exp(-x^2)*erfcx(|x|), erfcx a degree-10 minimax fit;
 *                     else +-1]
 *   sigmoid  2.5 ulp [e = exp(-|x|): 1/(1+e) for x >= 0, e/(1+e) below;
 *                     kernels get sigmoid as recip(1 + exp(-x)) from decompose]
 *   gelu     11 ulp  [against 0.5*x*erfc(-x/sqrt2) in double: x*s or x*(1 - s),
 *                     s = erfc(|x|/sqrt2)/2 from one exp of an exactly split
 *                     -x^2/2 (see coil_gelu##N), so the result keeps its relative
 *                     accuracy in the negative tail, where 1 + erf(x/sqrt2)
 *                     cancels; the worst case is at x ~ -13.1, where s is
 *                     subnormal; gelu(-inf) = NaN like the erf form]
 * (measured: exp 0.96 (0.86 with FMA), log 0.75, tanh 1.31, erf 2.41, sigmoid
 * 2.33, gelu 10.4 ulp, for 1, 8 and 16 lanes.)
 * (ulp: of the float result; results below 2^-126 are compared in units of
 * 2^-149.)  NaN in gives NaN out; signs of zero are kept by tanh and erf. */
#ifndef COIL_VMATH_H
#define COIL_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#define COIL_SPLAT(V, c) ((V){0} + (c))

/* Per width N, before COIL_VMATH_DEF(N), the primitives that differ by
 * instruction set:
 *   coil_sel##N(m, a, b)    m ? a : b lane by lane (m: lanes of -1 or 0)
 *   coil_fmin##N(a, c)      a < c ? a : c (a NaN gives c)
 *   coil_fma##N(a, b, c)    a*b + c, fused where the target has FMA
 *   coil_mulerr##N(a, b, p) a*b - p exactly for p = fl(a*b) (FMA, or Veltkamp-Dekker)
 *   coil_rcp##N(d)          1/d (AVX-512: rcp14 and one Newton step, 1 ulp)
 *   coil_scale##N(y, n)     y*2^n for integral n in [-252, 254], rounded once for
 *                           subnormal results (two steps of 2^(n/2), or vscalefps) */
#define COIL_VMATH_BASE(N, V, VI)                                                                 \
	static inline V coil_sel##N(VI m, V a, V b) { return (V)(((VI)a & m) | ((VI)b & ~m)); }    \
	static inline V coil_fmin##N(V a, V c) { return coil_sel##N(a < c, a, c); }                \
	static inline V coil_rcp##N(V d) { return 1.0f / d; }                                      \
	static inline V coil_scale##N(V y, V fn)                                                   \
	{                                                                                          \
		VI n = __builtin_convertvector(coil_sel##N(fn != fn, COIL_SPLAT(V, 0), fn), VI);   \
		VI n1 = n >> 1, n2 = n - n1;                                                       \
		return y * (V)((n1 + 127) << 23) * (V)((n2 + 127) << 23);                          \
	}
#if defined(__FMA__)
#define COIL_FMA_HW 1
#define COIL_VMATH_FMA(N, V, VI, fma)                                                             \
	static inline V coil_fma##N(V a, V b, V c) { return fma; }                                 \
	static inline V coil_mulerr##N(V a, V b, V p) { return coil_fma##N(a, b, -p); }
#else
#define COIL_FMA_HW 0
#define COIL_VMATH_FMA(N, V, VI, fma)                                                             \
	static inline V coil_fma##N(V a, V b, V c) { return a * b + c; }                           \
	static inline V coil_mulerr##N(V a, V b, V p)                                              \
	{                                                                                          \
		V ca = a * 4097.0f, cb = b * 4097.0f;                                              \
		V ah = ca - (ca - a), bh = cb - (cb - b), al = a - ah, bl = b - bh;                \
		return ((ah * bh - p) + ah * bl + al * bh) + al * bl;                              \
	}
#endif

#define COIL_VMATH_DEF(N, V, VI)                                                                  \
	static inline V coil_max##N(V a, V b) { return coil_sel##N((a > b) | (a != a), a, b); }    \
	static inline V coil_min##N(V a, V b) { return coil_sel##N((a < b) | (a != a), a, b); }    \
	static inline V coil_mla##N(V a, V b, float c) { return coil_fma##N(a, b, COIL_SPLAT(V, c)); } \
	static inline V coil_copysign##N(V mag, V sgn)                                             \
	{                                                                                          \
		return (V)(((VI)mag & 0x7fffffff) | ((VI)sgn & (int32_t)0x80000000));              \
	}                                                                                          \
	/* exp(r) for |r| <= 0.35 (Cephes degree-5 polynomial) */                                  \
	static inline V coil_exp_red##N(V r)                                                       \
	{                                                                                          \
		V y = coil_mla##N(COIL_SPLAT(V, 1.9875691500e-4f), r, 1.3981999507e-3f);           \
		y = coil_mla##N(y, r, 8.3334519073e-3f);                                           \
		y = coil_mla##N(y, r, 4.1665795894e-2f);                                           \
		y = coil_mla##N(y, r, 1.6666665459e-1f);                                           \
		y = coil_mla##N(y, r, 5.0000001201e-1f);                                           \
		if (COIL_FMA_HW) /* Horner to the end: 0.86 ulp fused, 1.12 unfused */             \
			return coil_mla##N(coil_mla##N(y, r, 1.0f), r, 1.0f);                      \
		return (y * (r * r) + r) + 1.0f;                                                   \
	}                                                                                          \
	static inline V coil_exp##N(V x)                                                           \
	{                                                                                          \
		V t = coil_sel##N(x > 88.76f, COIL_SPLAT(V, 88.76f), x);                           \
		t = coil_sel##N(t < -103.98f, COIL_SPLAT(V, -103.98f), t);                         \
		V fn = coil_mla##N(t, COIL_SPLAT(V, 1.44269504088896341f), 12582912.0f) - 12582912.0f; \
		V r = coil_fma##N(fn, COIL_SPLAT(V, -0.693359375f), t);                            \
		r = coil_fma##N(fn, COIL_SPLAT(V, 2.12194440e-4f), r);                             \
		return coil_sel##N(x != x, x, coil_scale##N(coil_exp_red##N(r), fn));              \
	}                                                                                          \
	static inline V coil_log##N(V x)                                                           \
	{                                                                                          \
		VI sub = x < 1.17549435e-38f;                                                      \
		V xs = coil_sel##N(sub, x * 8388608.0f, x);                                        \
		VI bits = (VI)xs;                                                                  \
		VI e = ((bits >> 23) & 0xff) - 126 - (sub & 23);                                   \
		V m = (V)((bits & 0x007fffff) | 0x3f000000);                                       \
		VI small = m < 0.707106781186547524f;                                              \
		e = e + small;                                                                     \
		m = m + coil_sel##N(small, m, COIL_SPLAT(V, 0)) - 1.0f;                            \
		V fe = __builtin_convertvector(e, V);                                              \
		V z = m * m;                                                                       \
		V y = coil_mla##N(COIL_SPLAT(V, 7.0376836292e-2f), m, -1.1514610310e-1f);          \
		y = coil_mla##N(y, m, 1.1676998740e-1f);                                           \
		y = coil_mla##N(y, m, -1.2420140846e-1f);                                          \
		y = coil_mla##N(y, m, 1.4249322787e-1f);                                           \
		y = coil_mla##N(y, m, -1.6668057665e-1f);                                          \
		y = coil_mla##N(y, m, 2.0000714765e-1f);                                           \
		y = coil_mla##N(y, m, -2.4999993993e-1f);                                          \
		y = coil_mla##N(y, m, 3.3333331174e-1f);                                           \
		y = y * m * z;                                                                     \
		y = y + fe * -2.12194440e-4f;                                                      \
		y = y - 0.5f * z;                                                                  \
		V r = (m + y) + fe * 0.693359375f;                                                 \
		r = coil_sel##N(x == 0.0f, COIL_SPLAT(V, -INFINITY), r);                           \
		r = coil_sel##N(x < 0.0f, COIL_SPLAT(V, NAN), r);                                  \
		r = coil_sel##N(x == INFINITY, x, r);                                              \
		return coil_sel##N(x != x, x, r);                                                  \
	}                                                                                          \
	static inline V coil_tanh##N(V x)                                                          \
	{                                                                                          \
		V a = (V)((VI)x & 0x7fffffff), z = x * x;                                          \
		V p = coil_mla##N(COIL_SPLAT(V, 2.2928686241194436e-3f), z, -8.344070608585689e-3f); \
		p = coil_mla##N(p, z, 2.1768963622789315e-2f);                                     \
		p = coil_mla##N(p, z, -5.3959266397520154e-2f);                                    \
		p = coil_mla##N(p, z, 1.3333303596307444e-1f);                                     \
		p = coil_mla##N(p, z, -3.333333317267979e-1f);                                     \
		V small = x + x * z * p;                                                           \
		V e = coil_exp##N(a + a);                                                          \
		V big = coil_copysign##N(1.0f - 2.0f / (e + 1.0f), x);                             \
		return coil_sel##N(a < 0.625f, small, big);                                        \
	}                                                                                          \
	static inline V coil_erf##N(V x)                                                           \
	{                                                                                          \
		V a = (V)((VI)x & 0x7fffffff), z = x * x;                                          \
		V p = coil_mla##N(COIL_SPLAT(V, 7.853907479284106e-05f), z, -8.010208754870574e-4f); \
		p = coil_mla##N(p, z, 5.188329597827029e-3f);                                      \
		p = coil_mla##N(p, z, -2.6853813097964502e-2f);                                    \
		p = coil_mla##N(p, z, 1.128358518309232e-1f);                                      \
		p = coil_mla##N(p, z, -3.761262582863486e-1f);                                     \
		p = coil_mla##N(p, z, 1.1283791657283222f);                                        \
		V small = x * p;                                                                   \
		V u = coil_sel##N(a < 3.92f, a, COIL_SPLAT(V, 3.92f)) - 2.46f;                     \
		V q = coil_mla##N(COIL_SPLAT(V, 1.7109652369687312e-06f), u, -6.936392348815684e-06f); \
		q = coil_mla##N(q, u, 1.6606449385329902e-05f);                                    \
		q = coil_mla##N(q, u, -5.910016819152264e-05f);                                    \
		q = coil_mla##N(q, u, 2.288779342356946e-4f);                                      \
		q = coil_mla##N(q, u, -7.911515432534886e-4f);                                     \
		q = coil_mla##N(q, u, 2.618918550627616e-3f);                                      \
		q = coil_mla##N(q, u, -8.4064509898929e-3f);                                       \
		q = coil_mla##N(q, u, 2.5922284840392475e-2f);                                     \
		q = coil_mla##N(q, u, -7.638163001858812e-2f);                                     \
		q = coil_mla##N(q, u, 2.1382068176926455e-1f);                                     \
		V big = 1.0f - coil_exp##N(-z) * q;                                                \
		big = coil_sel##N(a >= 3.92f, COIL_SPLAT(V, 1.0f), big);                           \
		big = coil_copysign##N(big, x);                                                    \
		return coil_sel##N(a < 1.0f, small, big);                                          \
	}                                                                                          \
	/* gelu(x) = x*Phi(x) = x*erfc(-x/sqrt2)/2: for a = |x|/sqrt2 (clamped at 10.5, where      \
	 * erfc(a)/2 < 2^-160), erfc(a) = t*exp(-a^2 + P(t)), t = 1/(1 + a/2) (Numerical Recipes'  \
	 * erfcc, relative error 1.2e-7); -a^2 = g + gl exactly, and the Cody-Waite reduction of   \
	 * g + P(t) keeps g exact, so erfc keeps its relative accuracy in the tails. */            \
	static inline V coil_gelu##N(V x)                                                          \
	{                                                                                          \
		V ax = coil_fmin##N((V)((VI)x & 0x7fffffff), COIL_SPLAT(V, 14.85f));               \
		V t = coil_rcp##N(coil_mla##N(ax, COIL_SPLAT(V, 0.35355339059327376f), 1.0f));     \
		/* P(t), Estrin's scheme (a short dependency chain) */                             \
		V t2 = t * t, t4 = t2 * t2;                                                        \
		V p01 = coil_mla##N(t, COIL_SPLAT(V, 1.00002368f), -1.26551223f);                  \
		V p23 = coil_mla##N(t, COIL_SPLAT(V, 0.09678418f), 0.37409196f);                   \
		V p45 = coil_mla##N(t, COIL_SPLAT(V, 0.27886807f), -0.18628806f);                  \
		V p67 = coil_mla##N(t, COIL_SPLAT(V, 1.48851587f), -1.13520398f);                  \
		V p89 = coil_mla##N(t, COIL_SPLAT(V, 0.17087277f), -0.82215223f);                  \
		V p03 = coil_fma##N(p23, t2, p01), p47 = coil_fma##N(p67, t2, p45);                \
		V p = coil_fma##N(coil_fma##N(p89, t4, p47), t4, p03);                             \
		/* h + hl = -x*x exactly; exp(h/2 + hl/2 + p) reduced with h exact */              \
		V nx = -ax, h = nx * ax, hl = coil_mulerr##N(nx, ax, h);                           \
		V fn = coil_fma##N(h, COIL_SPLAT(V, 0.72134752044448170f), coil_mla##N(p, COIL_SPLAT(V, 1.44269504088896341f), 12582912.0f)) - 12582912.0f; \
		V r = coil_fma##N(coil_fma##N(fn, COIL_SPLAT(V, -1.38671875f), h) + hl, COIL_SPLAT(V, 0.5f), p); \
		r = coil_fma##N(fn, COIL_SPLAT(V, 2.12194440e-4f), r);                             \
		/* Phi = s or 1 - s, s = erfc/2; x*Phi is NaN at x = -inf (s = 0), like            \
		 * 0.5*x*(1 + erf(x/sqrt2)).  s is subnormal below x = -13.2: the result then has  \
		 * up to |x|/2 units of 2^-149 of error. */                                        \
		V s = coil_scale##N(coil_exp_red##N(r) * t, fn - 1.0f);                            \
		return x * coil_sel##N(x < 0.0f, s, 1.0f - s);                                     \
	}                                                                                          \
	static inline V coil_sigmoid##N(V x)                                                       \
	{                                                                                          \
		V e = coil_exp##N(-(V)((VI)x & 0x7fffffff));                                       \
		V d = 1.0f + e;                                                                    \
		return coil_sel##N(x < 0.0f, e / d, 1.0f / d);                                     \
	}                                                                                          \
	static inline V coil_lanes1_##N(V x, float (*f)(float))                                    \
	{                                                                                          \
		float a[sizeof(V) / 4];                                                            \
		memcpy(a, &x, sizeof a);                                                           \
		for (unsigned i = 0; i < sizeof(V) / 4; i++)                                       \
			a[i] = f(a[i]);                                                            \
		memcpy(&x, a, sizeof a);                                                           \
		return x;                                                                          \
	}                                                                                          \
	static inline V coil_lanes2_##N(V x, V y, float (*f)(float, float))                        \
	{                                                                                          \
		float a[sizeof(V) / 4], b[sizeof(V) / 4];                                          \
		memcpy(a, &x, sizeof a);                                                           \
		memcpy(b, &y, sizeof b);                                                           \
		for (unsigned i = 0; i < sizeof(V) / 4; i++)                                       \
			a[i] = f(a[i], b[i]);                                                      \
		memcpy(&x, a, sizeof a);                                                           \
		return x;                                                                          \
	}

typedef float coil_v1f __attribute__((vector_size(4)));
typedef int32_t coil_v1i __attribute__((vector_size(4)));
COIL_VMATH_BASE(1, coil_v1f, coil_v1i)
COIL_VMATH_FMA(1, coil_v1f, coil_v1i, (coil_v1f){__builtin_fmaf(a[0], b[0], c[0])})
COIL_VMATH_DEF(1, coil_v1f, coil_v1i)
static inline float coil_expf(float x) { return coil_exp1((coil_v1f){x})[0]; }
static inline float coil_logf(float x) { return coil_log1((coil_v1f){x})[0]; }
static inline float coil_tanhf(float x) { return coil_tanh1((coil_v1f){x})[0]; }
static inline float coil_erff(float x) { return coil_erf1((coil_v1f){x})[0]; }
static inline float coil_sigmoidf(float x) { return coil_sigmoid1((coil_v1f){x})[0]; }
static inline float coil_geluf(float x) { return coil_gelu1((coil_v1f){x})[0]; }

#if defined(__AVX2__)
typedef int32_t coil_v8i __attribute__((vector_size(32)));
COIL_VMATH_BASE(8, __m256, coil_v8i)
COIL_VMATH_FMA(8, __m256, coil_v8i, _mm256_fmadd_ps(a, b, c))
COIL_VMATH_DEF(8, __m256, coil_v8i)
/* Horizontal reductions and tail masks (AVX2 masks are vectors of -1/0). */
static inline float coil_hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float coil_hmax8(__m256 v)
{
	float a[8], r;
	memcpy(a, &v, sizeof a);
	r = a[0];
	for (int i = 1; i < 8; i++)
		r = (a[i] > r || a[i] != a[i]) && r == r ? a[i] : r;
	return r;
}
static inline float coil_hmin8(__m256 v)
{
	float a[8], r;
	memcpy(a, &v, sizeof a);
	r = a[0];
	for (int i = 1; i < 8; i++)
		r = (a[i] < r || a[i] != a[i]) && r == r ? a[i] : r;
	return r;
}
static inline __m256 coil_tail8(int64_t n)
{
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lane));
}
#endif

#if defined(__AVX512F__)
typedef int32_t coil_v16i __attribute__((vector_size(64)));
static inline __m512 coil_sel16(coil_v16i m, __m512 a, __m512 b) { return (__m512)(((coil_v16i)a & m) | ((coil_v16i)b & ~m)); }
static inline __m512 coil_fmin16(__m512 a, __m512 c) { return _mm512_min_ps(a, c); }
static inline __m512 coil_rcp16(__m512 d)
{
	__m512 r = _mm512_rcp14_ps(d);
	return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}
static inline __m512 coil_scale16(__m512 y, __m512 fn) { return _mm512_scalef_ps(y, fn); }
COIL_VMATH_FMA(16, __m512, coil_v16i, _mm512_fmadd_ps(a, b, c))
COIL_VMATH_DEF(16, __m512, coil_v16i)
static inline float coil_hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }
static inline float coil_hmax16(__m512 v)
{
	__mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
	return nan ? NAN : _mm512_reduce_max_ps(v);
}
static inline float coil_hmin16(__m512 v)
{
	__mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
	return nan ? NAN : _mm512_reduce_min_ps(v);
}
static inline __mmask16 coil_tail16(int64_t n) { return (__mmask16)((1u << n) - 1); }
#endif

#endif
