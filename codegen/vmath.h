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
 *   gelu     11 ulp  [against 0.5*x*erfc(-x/sqrt2) in double.  |x| < 4: a table of
 *                     polynomials, 2.5 ulp for 1 and 16 lanes (see coil_gelu1), 3
 *                     ulp for 8 (coil_gelu8: 2.59);
 *                     elsewhere coil_gelu_erfc##N: x*s or x*(1 - s),
 *                     s = erfc(|x|/sqrt2)/2 from one exp of an exactly split
 *                     -x^2/2 (see coil_gelu_erfc##N), so the result keeps its relative
 *                     accuracy in the negative tail, where 1 + erf(x/sqrt2)
 *                     cancels; the worst case is at x ~ -13.1, where s is
 *                     subnormal; gelu(-inf) = NaN like the erf form]
 * (measured: exp 0.96 (0.86 with FMA), log 0.75, tanh 1.31, erf 2.41, sigmoid
 * 2.33, gelu 10.4 ulp, for 1, 8 and 16 lanes; gelu's table path 2.12 ulp.)
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
 *   coil_clamp##N(x, lo, hi) x limited to [lo, hi]; NaN stays NaN
 *   coil_fma##N(a, b, c)    a*b + c, fused where the target has FMA
 *   coil_mulerr##N(a, b, p) a*b - p exactly for p = fl(a*b) (FMA, or Veltkamp-Dekker)
 *   coil_rcp##N(d)          1/d (AVX-512: rcp14 and one Newton step, 1 ulp)
 *   coil_scale##N(y, n)     y*2^n for integral n in [-252, 254], rounded once for
 *                           subnormal results (two steps of 2^(n/2), or vscalefps)
 *   coil_max##N(a, b)       a > b ? a : b, NaN if either is NaN (likewise coil_min##N):
 *                           vmaxps plus a blend of a's NaN lanes on AVX2/AVX-512, whose
 *                           chain through b (a reduction's accumulator) is 2 ops long */
#define COIL_VMATH_BASE(N, V, VI)                                                                 \
	static inline V coil_sel##N(VI m, V a, V b) { return (V)(((VI)a & m) | ((VI)b & ~m)); }    \
	static inline V coil_rcp##N(V d) { return 1.0f / d; }                                      \
	static inline V coil_scale##N(V y, V fn)                                                   \
	{                                                                                          \
		VI n = __builtin_convertvector(coil_sel##N(fn != fn, COIL_SPLAT(V, 0), fn), VI);   \
		VI n1 = n >> 1, n2 = n - n1;                                                       \
		return y * (V)((n1 + 127) << 23) * (V)((n2 + 127) << 23);                          \
	}
/* The comparisons as selects (the scalar table; AVX2 and AVX-512 use vminps/vmaxps). */
#define COIL_VMATH_CMP(N, V, VI)                                                                  \
	static inline V coil_fmin##N(V a, V c) { return coil_sel##N(a < c, a, c); }                \
	static inline V coil_clamp##N(V x, float lo, float hi)                                     \
	{                                                                                          \
		return coil_sel##N(x < lo, COIL_SPLAT(V, lo), coil_sel##N(x > hi, COIL_SPLAT(V, hi), x)); \
	}                                                                                          \
	static inline V coil_max##N(V a, V b) { return coil_sel##N((a > b) | (a != a), a, b); }    \
	static inline V coil_min##N(V a, V b) { return coil_sel##N((a < b) | (a != a), a, b); }
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
		V t = coil_clamp##N(x, -103.98f, 88.76f);                                          \
		V fn = coil_mla##N(t, COIL_SPLAT(V, 1.44269504088896341f), 12582912.0f) - 12582912.0f; \
		V r = coil_fma##N(fn, COIL_SPLAT(V, -0.693359375f), t);                            \
		r = coil_fma##N(fn, COIL_SPLAT(V, 2.12194440e-4f), r);                             \
		return coil_scale##N(coil_exp_red##N(r), fn); /* NaN: r is NaN */                  \
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
	static inline V coil_gelu_erfc##N(V x)                                                     \
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
		/* one division: e/(1+e) below 0, 1/(1+e) above (the same bits as two) */         \
		return coil_sel##N(x < 0.0f, e, COIL_SPLAT(V, 1.0f)) / (1.0f + e);                 \
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
COIL_VMATH_CMP(1, coil_v1f, coil_v1i)
COIL_VMATH_FMA(1, coil_v1f, coil_v1i, (coil_v1f){__builtin_fmaf(a[0], b[0], c[0])})
COIL_VMATH_DEF(1, coil_v1f, coil_v1i)

/* gelu for |x| < 4, the common case, without exp or division: Phi(-|x|) from a
 * piecewise polynomial (coil_gelu_tab), then max(x, 0) - |x|*Phi(-|x|) in one fused op (x*Phi(x)
 * for either sign, rounded once).  The lookup
 * is scalar indexing here and vpermt2ps for 16 lanes, with the same arithmetic, so both
 * round alike; AVX2 has no cheap 32-entry lookup: its 8 lanes use coil_gelu_tab8, 8
 * intervals of degree-9 polynomials, one vpermps a coefficient (coil_gelu8; ~3x the speed
 * of coil_gelu_erfc8 on an AVX2 EPYC).  Other inputs (and any vector with one) take
 * coil_gelu_erfc##N. */
/* Phi(-a) on [i/8, (i+1)/8) is the sum over k of coil_gelu_tab[k][i] * u^k, u = 8a - i
 * (made by codegen/tools/gelu_table.py; worst relative error 1.5e-07) */
static const float coil_gelu_tab[6][32] __attribute__((aligned(64))) = {
	{0.5f, 0.450261772f, 0.401293665f, 0.353830248f, 0.308537543f, 0.265985519f,
	 0.22662735f, 0.190786958f, 0.158655256f, 0.130294517f, 0.105649777f, 0.0845657215f,
	 0.066807203f, 0.0520812795f, 0.0400591567f, 0.0303963609f, 0.0227501318f, 0.0167933069f,
	 0.0122244731f, 0.00877447519f, 0.00620966544f, 0.00433244836f, 0.00297976332f, 0.00202013738f,
	 0.00134989806f, 0.000889025279f, 0.000577025057f, 0.000369078451f, 0.000232629085f, 0.000144480728f,
	 8.84172841e-05f, 5.33123493e-05f},
	{-0.0498677865f, -0.0494797118f, -0.0483335145f, -0.046481885f, -0.0440081656f, -0.0410201214f,
	 -0.0376421772f, -0.034006875f, -0.0302463397f, -0.0264845807f, -0.0228311364f, -0.0193765331f,
	 -0.0161897f, -0.0133172832f, -0.0107846651f, -0.0085982848f, -0.00674887095f, -0.0052151233f,
	 -0.00396745652f, -0.00297148759f, -0.00219103764f, -0.0015905227f, -0.00113669527f, -0.000799765054f,
	 -0.000553981052f, -0.000377782213f, -0.000253630977f, -0.000167639824f, -0.000109085311f, -6.98826698e-05f,
	 -4.40744407e-05f, -2.73664391e-05f},
	{-7.49945162e-10f, 0.00038655792f, 0.000755207497f, 0.00108941458f, 0.00137525005f, 0.0016023434f,
	 0.00176447246f, 0.00185974711f, 0.00189039344f, 0.00186219544f, 0.00178368203f, 0.00166517147f,
	 0.00151778571f, 0.00135253859f, 0.00117957499f, 0.00100761384f, 0.000843611022f, 0.000692635425f,
	 0.000557925086f, 0.000441081269f, 0.000342350308f, 0.000260945497f, 0.00019536959f, 0.000143707672f,
	 0.000103871207f, 7.37852824e-05f, 5.15184583e-05f, 3.53612013e-05f, 2.38621178e-05f, 1.58325402e-05f,
	 1.03297398e-05f, 6.62764478e-06f},
	{0.000129866967f, 0.000126849729f, 0.00011801708f, 0.000104043844f, 8.59750362e-05f, 6.51170776e-05f,
	 4.29064094e-05f, 2.07725261e-05f, 1.18733174e-08f, -1.83133488e-05f, -3.34420911e-05f, -4.49431027e-05f,
	 -5.27067241e-05f, -5.69058247e-05f, -5.79349398e-05f, -5.63379836e-05f, -5.27346274e-05f, -4.77537214e-05f,
	 -4.19796852e-05f, -3.59148871e-05f, -2.99585499e-05f, -2.44004295e-05f, -1.94263484e-05f, -1.51318382e-05f,
	 -1.15402872e-05f, -8.62240449e-06f, -6.31461307e-06f, -4.53479424e-06f, -3.1946247e-06f, -2.20836296e-06f,
	 -1.4984023e-06f, -9.98154746e-07f},
	{-4.96404606e-09f, -1.51999427e-06f, -2.91744846e-06f, -4.09292807e-06f, -4.96555231e-06f, -5.48562457e-06f,
	 -5.63819412e-06f, -5.44225441e-06f, -4.94598316e-06f, -4.21897221e-06f, -3.3427682e-06f, -2.40113218e-06f,
	 -1.47133392e-06f, -6.1742503e-07f, 1.1391797e-07f, 6.94895732e-07f, 1.11570773e-06f, 1.3818551e-06f,
	 1.51032577e-06f, 1.52536916e-06f, 1.45446938e-06f, 1.32495529e-06f, 1.16149681e-06f, 9.84550866e-07f,
	 8.09686355e-07f, 6.47611103e-07f, 5.04696231e-07f, 3.83781241e-07f, 2.85079977e-07f, 2.07050391e-07f,
	 1.47142472e-07f, 1.02382231e-07f},
	{-3.0109851e-07f, -2.77829457e-07f, -2.33839572e-07f, -1.73778389e-07f, -1.03817626e-07f, -3.08409902e-08f,
	 3.84195467e-08f, 9.8168357e-08f, 1.44143101e-07f, 1.73953111e-07f, 1.87136962e-07f, 1.84962644e-07f,
	 1.70035818e-07f, 1.45793805e-07f, 1.15978949e-07f, 8.41663095e-08f, 5.34014362e-08f, 2.59765081e-08f,
	 3.34679728e-09f, -1.38321559e-08f, -2.55796309e-08f, -3.24150662e-08f, -3.51695562e-08f, -3.48116913e-08f,
	 -3.23071703e-08f, -2.85196258e-08f, -2.41538718e-08f, -1.97352552e-08f, -1.56162034e-08f, -1.20001236e-08f,
	 -8.97372043e-09f, -6.54077459e-09f},
};
static inline coil_v1f coil_gelu1(coil_v1f x)
{
	float a = fabsf(x[0]);
	if (!(a < 4.0f))
		return coil_gelu_erfc1(x);
	float f = a * 8.0f, fl = floorf(f), u = f - fl;
	int i = (int)fl;
	float p = coil_gelu_tab[5][i];
	for (int k = 4; k >= 0; k--)
		p = coil_fma1((coil_v1f){p}, (coil_v1f){u}, (coil_v1f){coil_gelu_tab[k][i]})[0];
	return coil_fma1((coil_v1f){-a}, (coil_v1f){p}, (coil_v1f){0.0f > x[0] ? 0.0f : x[0]});
}
static inline float coil_expf(float x) { return coil_exp1((coil_v1f){x})[0]; }
static inline float coil_logf(float x) { return coil_log1((coil_v1f){x})[0]; }
static inline float coil_tanhf(float x) { return coil_tanh1((coil_v1f){x})[0]; }
static inline float coil_erff(float x) { return coil_erf1((coil_v1f){x})[0]; }
static inline float coil_sigmoidf(float x) { return coil_sigmoid1((coil_v1f){x})[0]; }
static inline float coil_geluf(float x) { return coil_gelu1((coil_v1f){x})[0]; }

/* bf16 and f16, storage types computed in f32 (a kernel holds such a value
 * as the float it is).  bf16 <- f32 rounds to nearest even exactly as
 * AVX512_BF16's vcvtneps2bf16 does, so every target gives the same bits:
 * zeros and subnormals to a zero of their sign, NaN quietened (bit 6 set),
 * infinities kept.  f16 <- f32 rounds to nearest even as F16C's vcvtps2ph
 * (subnormals kept, overflow to infinity, NaN quietened).  With
 * -mavx512bf16 (the avx512_bf16 target) and F16C the vector forms use the
 * instructions; the scalar forms are the same arithmetic. */
/* u8 / i8 lanes' scalar side (vectorized kernels' invariant loads and stores). */
static inline float coil_u8_f32(uint8_t v) { return (float)v; }
static inline float coil_i8_f32(int8_t v) { return (float)v; }
static inline uint8_t coil_f32_u8(float x) { return (uint8_t)(int32_t)x; }
static inline int8_t coil_f32_i8(float x) { return (int8_t)(int32_t)x; }
static inline float coil_bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline uint16_t coil_f32_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if (!(u & 0x7f800000u))
		return (uint16_t)((u >> 16) & 0x8000u);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float coil_round_bf16(float x) { return coil_bf16_f32(coil_f32_bf16(x)); }
static inline float coil_f16_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
	if (e == 0) {
		float f = (float)m * 5.9604644775390625e-08f; /* m * 2^-24, exact */
		return s ? -f : f;
	}
	u = e == 31 ? s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0) : s | ((e + 112) << 23) | (m << 13);
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline uint16_t coil_f32_f16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* 65520 and up: infinity */
		return (uint16_t)(s | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded half to even */
		float q;
		memcpy(&q, &a, 4);
		q *= 16777216.0f; /* exact */
		uint32_t i = (uint32_t)q;
		float fr = q - (float)i;
		i += fr > 0.5f || (fr == 0.5f && (i & 1));
		return (uint16_t)(s | i);
	}
	uint32_t h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu), rest = a & 0x1fffu;
	h += rest > 0x1000u || (rest == 0x1000u && (h & 1));
	return (uint16_t)(s | h);
}
static inline float coil_round_f16(float x) { return coil_f16_f32(coil_f32_f16(x)); }

#if defined(__AVX2__)
typedef int32_t coil_v8i __attribute__((vector_size(32)));
COIL_VMATH_BASE(8, __m256, coil_v8i)
/* vminps/vmaxps return their second operand when one is NaN */
static inline __m256 coil_fmin8(__m256 a, __m256 c) { return _mm256_min_ps(a, c); }
static inline __m256 coil_clamp8(__m256 x, float lo, float hi)
{
	return _mm256_max_ps(_mm256_set1_ps(lo), _mm256_min_ps(_mm256_set1_ps(hi), x));
}
static inline __m256 coil_max8(__m256 a, __m256 b)
{
	return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static inline __m256 coil_min8(__m256 a, __m256 b)
{
	return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
COIL_VMATH_FMA(8, __m256, coil_v8i, _mm256_fmadd_ps(a, b, c))
COIL_VMATH_DEF(8, __m256, coil_v8i)
/* Phi(-a) on [i*0.5, (i+1)*0.5) is the sum over k of coil_gelu_tab8[k][i] * u^k, u = 2a - i - 0.5
 * (made by codegen/tools/gelu_table.py; worst relative error 2e-07) */
static const float coil_gelu_tab8[10][8] __attribute__((aligned(64))) = {
	{0.401293665f, 0.22662735f, 0.105649777f, 0.0400591567f, 0.0122244731f, 0.00297976332f,
	 0.000577025057f, 8.84172841e-05f},
	{-0.193334058f, -0.150568709f, -0.0913245454f, -0.0431386605f, -0.0158698261f, -0.00454678107f,
	 -0.00101452402f, -0.000176297835f},
	{0.0120833786f, 0.0282316338f, 0.02853892f, 0.0188731626f, 0.00892677717f, 0.00312591204f,
	 0.000824300747f, 0.000165279227f},
	{0.00755211152f, 0.0027447422f, -0.00214041886f, -0.00370722846f, -0.00268629869f, -0.00124326046f,
	 -0.000404224411f, -9.5953772e-05f},
	{-0.000739477342f, -0.00143363746f, -0.000854681362f, 2.45742831e-05f, 0.000383572507f, 0.000297124527f,
	 0.000129870299f, 3.80916863e-05f},
	{-0.000264717033f, 4.59509965e-06f, 0.000187100653f, 0.000134720409f, 1.44324958e-05f, -3.50868759e-05f,
	 -2.70494456e-05f, -1.06861453e-05f},
	{3.01611653e-05f, 4.74978769e-05f, 9.00158011e-06f, -2.04642001e-05f, -1.54924073e-05f, -1.86402235e-06f,
	 2.99690964e-06f, 2.06982054e-06f},
	{7.33844399e-06f, -2.68179474e-06f, -6.37075709e-06f, -1.45070169e-06f, 2.05962965e-06f, 1.40986481e-06f,
	 1.09431582e-07f, -2.36208663e-07f},
	{-9.08705658e-07f, -1.13349438e-06f, 2.48014118e-07f, 6.99061161e-07f, 1.28013582e-07f, -1.89474406e-07f,
	 -1.02646219e-07f, -6.85599022e-10f},
	{-1.61906513e-07f, 1.12435245e-07f, 1.34032391e-07f, -3.38842518e-08f, -6.43380531e-08f, -4.3267363e-09f,
	 1.55723736e-08f, 5.53795765e-09f},
};
static inline __m256 coil_gelu8(__m256 x)
{
	__m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
	if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(4.0f), _CMP_LT_OQ)) != 0xff, 0))
		return coil_gelu_erfc8(x);
	__m256 f = _mm256_mul_ps(a, _mm256_set1_ps(2.0f));
	__m256 fl = _mm256_floor_ps(f);
	__m256 u = _mm256_sub_ps(_mm256_sub_ps(f, fl), _mm256_set1_ps(0.5f));
	__m256i i = _mm256_cvttps_epi32(fl);
#define COIL_GELU_C8(k) _mm256_permutevar8x32_ps(_mm256_load_ps(coil_gelu_tab8[k]), i)
	__m256 p = COIL_GELU_C8(9);
	for (int k = 8; k >= 0; k--)
		p = _mm256_fmadd_ps(p, u, COIL_GELU_C8(k));
#undef COIL_GELU_C8
	return _mm256_fnmadd_ps(a, p, _mm256_max_ps(_mm256_setzero_ps(), x));
}
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
/* lane l = p[(l % g) * s + l / g], g of 2 or 4: g runs of 8 / g floats, s
 * apart, interleaved (vec.c's ilv_of: a channel shuffle read in NHWC). */
static inline __m256 coil_ilv8(const float *p, int64_t s, int g)
{
	if (g == 2) {
		const __m128 a = _mm_loadu_ps(p), b = _mm_loadu_ps(p + s);
		return _mm256_set_m128(_mm_unpackhi_ps(a, b), _mm_unpacklo_ps(a, b));
	}
	return _mm256_setr_ps(p[0], p[s], p[2 * s], p[3 * s], p[1], p[s + 1], p[2 * s + 1], p[3 * s + 1]);
}
/* A vector store, streaming (non-temporal) where nt and p is aligned. */
static inline void coil_st8(float *p, __m256 v, int nt)
{
	if (nt && !((uintptr_t)p & 31))
		_mm256_stream_ps(p, v);
	else
		_mm256_storeu_ps(p, v);
}
/* t[r][l] = s[l*ld + r] for l < ln, r < rn; 0 elsewhere (an 8x8 block of a
 * transpose, through registers: vec.c's tiled permutes). */
static inline __attribute__((always_inline)) void coil_tr8(const float *s, int64_t ld, int ln, int rn,
							  float t[8][8])
{
	__m256i m = _mm256_castps_si256(coil_tail8(rn));
	__m256 r[8], u[8];
	_Pragma("GCC unroll 16")
	for (int l = 0; l < 8; l++)
		r[l] = l < ln ? _mm256_maskload_ps(s + l * ld, m) : _mm256_setzero_ps();
	_Pragma("GCC unroll 16")
	for (int k = 0; k < 8; k += 2) {
		u[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
		u[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
	}
	_Pragma("GCC unroll 16")
	for (int k = 0; k < 8; k += 4) {
		r[k] = _mm256_shuffle_ps(u[k], u[k + 2], 0x44);
		r[k + 1] = _mm256_shuffle_ps(u[k], u[k + 2], 0xee);
		r[k + 2] = _mm256_shuffle_ps(u[k + 1], u[k + 3], 0x44);
		r[k + 3] = _mm256_shuffle_ps(u[k + 1], u[k + 3], 0xee);
	}
	_Pragma("GCC unroll 16")
	for (int j = 0; j < 4; j++) {
		_mm256_storeu_ps(t[j], _mm256_permute2f128_ps(r[j], r[4 + j], 0x20));
		_mm256_storeu_ps(t[4 + j], _mm256_permute2f128_ps(r[j], r[4 + j], 0x31));
	}
}
/* bf16 and f16 in 8 lanes: load (widen), masked load, store (round),
 * masked store, round in place.  m: coil_tail8's mask. */
static inline __m256 coil_ld_bf16_8(const uint16_t *p)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256i coil_bf16_bits8(__m256 x) /* 8 x (bf16 in the low half) */
{
	__m256i u = _mm256_castps_si256(x), ex = _mm256_and_si256(u, _mm256_set1_epi32(0x7f800000));
	__m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
						       _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))), 16);
	__m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
	__m256i zero = _mm256_cmpeq_epi32(ex, _mm256_setzero_si256());
	r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
	return _mm256_blendv_epi8(r, _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)), zero);
}
static inline __m128i coil_pack16_8(__m256i r) /* the low halves of 8 lanes */
{
	__m256i p = _mm256_packus_epi32(r, r);
	return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}
static inline __m256 coil_rnd_bf16_8(__m256 x)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(coil_bf16_bits8(x), 16));
}
static inline void coil_st_bf16_8(uint16_t *p, __m256 x)
{
	_mm_storeu_si128((__m128i *)p, coil_pack16_8(coil_bf16_bits8(x)));
}
static inline __m256 coil_ld_f16_8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 coil_rnd_f16_8(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
static inline void coil_st_f16_8(uint16_t *p, __m256 x)
{
	_mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
/* the masked forms through a copy of the lanes */
#define COIL_HALF_MASKED8(h)                                                  \
	static inline __m256 coil_ldm_##h##_8(__m256 m, const uint16_t *p)    \
	{                                                                     \
		uint16_t t[8] = {0};                                          \
		int b = _mm256_movemask_ps(m);                                \
		for (int l = 0; l < 8; l++)                                   \
			if (b >> l & 1)                                       \
				t[l] = p[l];                                  \
		return coil_ld_##h##_8(t);                                    \
	}                                                                     \
	static inline void coil_stm_##h##_8(uint16_t *p, __m256 m, __m256 x)  \
	{                                                                     \
		uint16_t t[8];                                                \
		int b = _mm256_movemask_ps(m);                                \
		coil_st_##h##_8(t, x);                                        \
		for (int l = 0; l < 8; l++)                                   \
			if (b >> l & 1)                                       \
				p[l] = t[l];                                  \
	}
COIL_HALF_MASKED8(bf16)
COIL_HALF_MASKED8(f16)
#endif

#if defined(__AVX512F__)
typedef int32_t coil_v16i __attribute__((vector_size(64)));
static inline __m512 coil_sel16(coil_v16i m, __m512 a, __m512 b) { return (__m512)(((coil_v16i)a & m) | ((coil_v16i)b & ~m)); }
static inline __m512 coil_fmin16(__m512 a, __m512 c) { return _mm512_min_ps(a, c); }
/* lane l = p[(l % g) * s + l / g], g of 2 or 4 (coil_ilv8's): the runs by
 * masked loads (nothing read past them), interleaved by two-source permutes. */
static inline __m512 coil_ilv16(const float *p, int64_t s, int g)
{
	if (g == 2)
		return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(0xff, p),
					      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
					      _mm512_maskz_loadu_ps(0xff, p + s));
	const __m512i i = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 0, 16, 1, 17, 2, 18, 3, 19);
	const __m512 ab = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(0xf, p), i, _mm512_maskz_loadu_ps(0xf, p + s));
	const __m512 cd = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(0xf, p + 2 * s), i,
						 _mm512_maskz_loadu_ps(0xf, p + 3 * s));
	return _mm512_permutex2var_ps(ab, _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23), cd);
}
/* vminps/vmaxps return their second operand when one is NaN */
static inline __m512 coil_clamp16(__m512 x, float lo, float hi)
{
	return _mm512_max_ps(_mm512_set1_ps(lo), _mm512_min_ps(_mm512_set1_ps(hi), x));
}
static inline __m512 coil_rcp16(__m512 d)
{
	__m512 r = _mm512_rcp14_ps(d);
	return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}
static inline __m512 coil_scale16(__m512 y, __m512 fn) { return _mm512_scalef_ps(y, fn); }
static inline __m512 coil_max16(__m512 a, __m512 b)
{
	return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512 coil_min16(__m512 a, __m512 b)
{
	return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
COIL_VMATH_FMA(16, __m512, coil_v16i, _mm512_fmadd_ps(a, b, c))
COIL_VMATH_DEF(16, __m512, coil_v16i)
static inline __m512 coil_gelu16(__m512 x)
{
	__m512 a = _mm512_abs_ps(x);
	if (__builtin_expect(_mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_LT_OQ) != 0xffff, 0))
		return coil_gelu_erfc16(x);
	__m512 f = _mm512_mul_ps(a, _mm512_set1_ps(8.0f));
	__m512 fl = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
	__m512 u = _mm512_sub_ps(f, fl);
	__m512i i = _mm512_cvttps_epi32(fl);
#define COIL_GELU_C(k) _mm512_permutex2var_ps(_mm512_load_ps(coil_gelu_tab[k]), i, _mm512_load_ps(coil_gelu_tab[k] + 16))
	__m512 p = COIL_GELU_C(5);
	for (int k = 4; k >= 0; k--)
		p = _mm512_fmadd_ps(p, u, COIL_GELU_C(k));
#undef COIL_GELU_C
	return _mm512_fnmadd_ps(a, p, _mm512_max_ps(_mm512_setzero_ps(), x));
}
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
static inline void coil_st16(float *p, __m512 v, int nt)
{
	if (nt && !((uintptr_t)p & 63))
		_mm512_stream_ps(p, v);
	else
		_mm512_storeu_ps(p, v);
}
/* t[r][l] = s[l*ld + r] for l < ln, r < rn; 0 elsewhere (a 16x16 block of a
 * transpose, through registers: vec.c's tiled permutes). */
static inline __attribute__((always_inline)) void coil_tr16(const float *s, int64_t ld, int ln, int rn,
							  float t[16][16])
{
	__mmask16 m = coil_tail16(rn);
	__m512 r[16], u[16];
	_Pragma("GCC unroll 16")
	for (int l = 0; l < 16; l++)
		r[l] = l < ln ? _mm512_maskz_loadu_ps(m, s + l * ld) : _mm512_setzero_ps();
	_Pragma("GCC unroll 16")
	for (int k = 0; k < 16; k += 2) {
		u[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
		u[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
	}
	_Pragma("GCC unroll 16")
	for (int k = 0; k < 16; k += 4) { /* r[k + j]: column 4m + j of rows k..k+3 in 128-bit lane m */
		r[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u[k]), _mm512_castps_pd(u[k + 2])));
		r[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u[k]), _mm512_castps_pd(u[k + 2])));
		r[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u[k + 1]), _mm512_castps_pd(u[k + 3])));
		r[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u[k + 1]), _mm512_castps_pd(u[k + 3])));
	}
	_Pragma("GCC unroll 16")
	for (int j = 0; j < 4; j++) {
		__m512 x0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44), x1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xee);
		__m512 y0 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44), y1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xee);
		_mm512_storeu_ps(t[j], _mm512_shuffle_f32x4(x0, y0, 0x88));
		_mm512_storeu_ps(t[4 + j], _mm512_shuffle_f32x4(x0, y0, 0xdd));
		_mm512_storeu_ps(t[8 + j], _mm512_shuffle_f32x4(x1, y1, 0x88));
		_mm512_storeu_ps(t[12 + j], _mm512_shuffle_f32x4(x1, y1, 0xdd));
	}
}
/* bf16 and f16 in 16 lanes (AVX-512 BW for 16-bit masked moves). */
static inline __m512 coil_h2f_bf16_16(__m256i h)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m256i coil_f2h_bf16_16(__m512 x)
{
#if defined(__AVX512BF16__)
	return (__m256i)_mm512_cvtneps_pbh(x);
#else
	__m512i u = _mm512_castps_si512(x);
	__mmask16 zero = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
	__mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
						_mm512_set1_epi32(0x7f800000));
	__m512i hi = _mm512_srli_epi32(u, 16);
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
						       _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
	r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
	r = _mm512_mask_and_epi32(r, zero, hi, _mm512_set1_epi32(0x8000));
	return _mm512_cvtepi32_epi16(r);
#endif
}
static inline __m512 coil_ld_bf16_16(const uint16_t *p) { return coil_h2f_bf16_16(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 coil_ldm_bf16_16(__mmask16 m, const uint16_t *p) { return coil_h2f_bf16_16(_mm256_maskz_loadu_epi16(m, p)); }
static inline __m512 coil_rnd_bf16_16(__m512 x) { return coil_h2f_bf16_16(coil_f2h_bf16_16(x)); }
static inline void coil_st_bf16_16(uint16_t *p, __m512 x) { _mm256_storeu_si256((__m256i *)p, coil_f2h_bf16_16(x)); }
static inline void coil_stm_bf16_16(uint16_t *p, __mmask16 m, __m512 x) { _mm256_mask_storeu_epi16(p, m, coil_f2h_bf16_16(x)); }
/* u8 / i8 (quantized values) as f32 lanes.  A cast to them is C's (uint8_t)f,
 * (int8_t)f for |f| < 2^31: truncated, then the low byte (wrapping) kept. */
static inline __m512 coil_ld_u8_16(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p))); }
static inline __m512 coil_ldm_u8_16(__mmask16 m, const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p))); }
static inline __m512 coil_ld_i8_16(const int8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))); }
static inline __m512 coil_ldm_i8_16(__mmask16 m, const int8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p))); }
static inline __m512 coil_rnd_u8_16(__m512 x) { return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_cvttps_epi32(x), _mm512_set1_epi32(255))); }
static inline __m512 coil_rnd_i8_16(__m512 x) { return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(_mm512_cvttps_epi32(x), 24), 24)); }
static inline void coil_st_u8_16(uint8_t *p, __m512 x) { _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(x))); }
static inline void coil_stm_u8_16(uint8_t *p, __mmask16 m, __m512 x) { _mm512_mask_cvtepi32_storeu_epi8(p, m, _mm512_cvttps_epi32(x)); }
static inline void coil_st_i8_16(int8_t *p, __m512 x) { _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(x))); }
static inline void coil_stm_i8_16(int8_t *p, __mmask16 m, __m512 x) { _mm512_mask_cvtepi32_storeu_epi8(p, m, _mm512_cvttps_epi32(x)); }
static inline __m512 coil_ld_f16_16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 coil_ldm_f16_16(__mmask16 m, const uint16_t *p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
static inline __m512 coil_rnd_f16_16(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
static inline void coil_st_f16_16(uint16_t *p, __m512 x)
{
	_mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void coil_stm_f16_16(uint16_t *p, __mmask16 m, __m512 x)
{
	_mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

/* n bytes from s to d (a gathered row), with streaming (non-temporal) stores
 * where nt and d and n are whole vectors: into a large output that leaves the
 * cache before it is read, the stores skip reading each line first (1e6 rows
 * of 256 B gathered into written pages at one thread: 42 -> 20 ms). */
static inline void coil_copy_nt(void *d, const void *s, size_t n, int nt)
{
#if defined(__AVX512F__)
	if (nt && !((uintptr_t)d & 63) && !(n & 63)) {
		for (size_t b = 0; b < n; b += 64)
			_mm512_stream_si512((__m512i *)((char *)d + b), _mm512_loadu_si512((const char *)s + b));
		return;
	}
#elif defined(__AVX2__)
	if (nt && !((uintptr_t)d & 31) && !(n & 31)) {
		for (size_t b = 0; b < n; b += 32)
			_mm256_stream_si256((__m256i *)((char *)d + b), _mm256_loadu_si256((const __m256i *)((const char *)s + b)));
		return;
	}
#endif
	(void)nt;
	memcpy(d, s, n);
}
/* After coil_copy_nt's streaming stores: ordered before what follows. */
static inline void coil_nt_fence(void)
{
#if defined(__AVX2__) || defined(__AVX512F__)
	_mm_sfence();
#endif
}

#endif
