/* fft: discrete Fourier transforms for generated code (f32), the kernels of
 * coil.fft_r2c, coil.fft_c2r and coil.fft_c2c (torch.stft, torch.istft,
 * torch.fft.*).  codegen/emit_abi.c embeds this file into an artifact that
 * has one of them; codegen/extern.c renders each transformed dim as one
 * coil_fft_lines call.
 *
 * Complex values are (re, im) pairs of floats, as torch.view_as_real lays
 * them out.  The transform of one line is a mixed-radix Cooley-Tukey FFT
 * (decimation in time, recursive): radix 4 and 2 butterflies, a generic
 * O(p^2) one for any other prime factor p, so every length works (a large
 * prime length costs O(n^2)).  Twiddles are computed in double once per call
 * of coil_fft_lines; lines run in parallel, each thread with its own
 * scratch.  A real input runs as a complex one with zero imaginary parts; a
 * complex-to-real transform rebuilds the Hermitian spectrum and keeps the
 * real part (the imaginary parts of the DC and Nyquist bins are ignored, as
 * pocketfft's c2r does). */
#ifndef COIL_FFT_H
#define COIL_FFT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct coil_fft_plan {
	int64_t n;
	int64_t fac[128]; /* (p, m) pairs: radix p, then m points left; ends at m == 1 */
	float *w;         /* n twiddles exp(sign * 2 pi i k / n), interleaved */
} coil_fft_plan;

static inline int coil_fft_plan_init(coil_fft_plan *pl, int64_t n, int sign)
{
	pl->n = n;
	pl->w = (float *)malloc((size_t)(2 * (n ? n : 1)) * sizeof(float));
	if (!pl->w)
		return -1;
	for (int64_t k = 0; k < n; k++) {
		const double a = sign * 2.0 * 3.14159265358979323846 * (double)k / (double)n;
		pl->w[2 * k] = (float)cos(a), pl->w[2 * k + 1] = (float)sin(a);
	}
	int64_t m = n, p = 4, *f = pl->fac;
	while (m > 1) {
		while (m % p) {
			p = p == 4 ? 2 : p == 2 ? 3 : p + 2;
			if (p * p > m)
				p = m;
		}
		m /= p;
		*f++ = p, *f++ = m;
	}
	if (n <= 1)
		f[0] = 1, f[1] = 1;
	return 0;
}

static inline void coil_fft_plan_free(coil_fft_plan *pl) { free(pl->w); }

/* Lines are transformed COIL_FFT_V at a time, one per vector lane: every
 * butterfly is the same for all of them, so the transform runs on vectors
 * of V floats (real and imaginary parts apart) with scalar twiddles, on any
 * target (GCC's vector extension: one AVX-512 register, two AVX2 ones). */
#define COIL_FFT_V 16
typedef float coil_fv __attribute__((vector_size(4 * COIL_FFT_V)));
typedef int32_t coil_fvi __attribute__((vector_size(4 * COIL_FFT_V)));
/* (re, im) pairs in lo, hi <-> the 16 real parts, the 16 imaginary ones */
#if defined(__clang__)
#define COIL_FFT_EVEN(lo, hi) __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define COIL_FFT_ODD(lo, hi) __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
#define COIL_FFT_LO(r, i) __builtin_shufflevector(r, i, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)
#define COIL_FFT_HI(r, i) __builtin_shufflevector(r, i, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
#else
#define COIL_FFT_EVEN(lo, hi) \
	__builtin_shuffle(lo, hi, (coil_fvi){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30})
#define COIL_FFT_ODD(lo, hi) \
	__builtin_shuffle(lo, hi, (coil_fvi){1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31})
#define COIL_FFT_LO(r, i) __builtin_shuffle(r, i, (coil_fvi){0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23})
#define COIL_FFT_HI(r, i) \
	__builtin_shuffle(r, i, (coil_fvi){8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31})
#endif

/* out[k + s*m] for s < p from the p transforms of length m already in
 * out[q*m .. q*m + m): the radix-p butterflies of one stage (fs: the twiddle
 * stride, n / (p*m)). */
static inline void coil_fft_bfly(const coil_fft_plan *pl, coil_fv *ore, coil_fv *oim, int64_t fs, int64_t p, int64_t m,
				 coil_fv *scr)
{
	const float *w = pl->w;
	const int64_t n = pl->n;
	if (p == 2) {
		for (int64_t k = 0; k < m; k++) {
			const float *t = w + 2 * k * fs;
			const coil_fv br = ore[k + m], bi = oim[k + m];
			const coil_fv tr = br * t[0] - bi * t[1], ti = br * t[1] + bi * t[0];
			ore[k + m] = ore[k] - tr, oim[k + m] = oim[k] - ti;
			ore[k] += tr, oim[k] += ti;
		}
		return;
	}
	if (p == 4) {
		const float sg = w[2 * (n / 4) + 1]; /* w^(n/4) = (0, sign) */
		for (int64_t k = 0; k < m; k++) {
			const float *t1 = w + 2 * (k * fs), *t2 = w + 2 * (2 * k * fs), *t3 = w + 2 * (3 * k * fs);
			const coil_fv ar = ore[k], ai = oim[k];
			const coil_fv x1r = ore[k + m], x1i = oim[k + m], x2r = ore[k + 2 * m], x2i = oim[k + 2 * m];
			const coil_fv x3r = ore[k + 3 * m], x3i = oim[k + 3 * m];
			const coil_fv br = x1r * t1[0] - x1i * t1[1], bi = x1r * t1[1] + x1i * t1[0];
			const coil_fv cr = x2r * t2[0] - x2i * t2[1], ci = x2r * t2[1] + x2i * t2[0];
			const coil_fv dr = x3r * t3[0] - x3i * t3[1], di = x3r * t3[1] + x3i * t3[0];
			const coil_fv s0r = ar + cr, s0i = ai + ci, s1r = ar - cr, s1i = ai - ci;
			const coil_fv s2r = br + dr, s2i = bi + di, s3r = br - dr, s3i = bi - di;
			const coil_fv jr = s3i * -sg, ji = s3r * sg; /* (b - d) times i * sign */
			ore[k] = s0r + s2r, oim[k] = s0i + s2i;
			ore[k + 2 * m] = s0r - s2r, oim[k + 2 * m] = s0i - s2i;
			ore[k + m] = s1r + jr, oim[k + m] = s1i + ji;
			ore[k + 3 * m] = s1r - jr, oim[k + 3 * m] = s1i - ji;
		}
		return;
	}
	coil_fv *sr = scr, *si = scr + p;
	for (int64_t k = 0; k < m; k++) {
		for (int64_t q = 0; q < p; q++)
			sr[q] = ore[k + q * m], si[q] = oim[k + q * m];
		for (int64_t s = 0; s < p; s++) {
			const int64_t kk = k + s * m;
			coil_fv re = sr[0], im = si[0];
			int64_t tw = 0;
			for (int64_t q = 1; q < p; q++) {
				tw += fs * kk;
				tw %= n;
				const float *t = w + 2 * tw;
				re += sr[q] * t[0] - si[q] * t[1];
				im += sr[q] * t[1] + si[q] * t[0];
			}
			ore[kk] = re, oim[kk] = im;
		}
	}
}

/* out[0..N) = the transform of the N points in[0], in[is], ... (N = p * m
 * of fac; fs = n / N). */
static void coil_fft_rec(const coil_fft_plan *pl, coil_fv *ore, coil_fv *oim, const coil_fv *ire, const coil_fv *iim,
			 int64_t fs, int64_t is, const int64_t *fac, coil_fv *scr)
{
	const int64_t p = fac[0], m = fac[1];
	if (m == 1)
		for (int64_t q = 0; q < p; q++)
			ore[q] = ire[q * fs * is], oim[q] = iim[q * fs * is];
	else
		for (int64_t q = 0; q < p; q++)
			coil_fft_rec(pl, ore + q * m, oim + q * m, ire + q * fs * is, iim + q * fs * is, fs * p, is, fac + 2, scr);
	coil_fft_bfly(pl, ore, oim, fs, p, m, scr);
}

enum { COIL_FFT_R2C, COIL_FFT_C2R, COIL_FFT_C2C };

/* One transform of length n along the middle dim of [outer, L, inner]
 * lines: src has lin points per line, dst lout (complex points are float
 * pairs; kind says which side is real).  R2C: lin = n, lout = n/2 + 1
 * (onesided) or n; C2R: lin >= n/2 + 1 (the first n/2 + 1 are read), lout
 * = n; C2C: lin = lout = n.  sign -1 forward, +1 backward; every result
 * times scale.  src may equal dst only for C2C (a group is read whole
 * before it is written).  0, or -1 out of memory.  Lines go COIL_FFT_V at
 * a time, neighbours in (outer, inner) order: along a strided dim (inner >=
 * V, istft's frequency axis) each point of a group is one contiguous run. */
static int coil_fft_lines(int kind, const float *src, float *dst, int64_t outer, int64_t lin, int64_t lout,
			  int64_t inner, int64_t n, int sign, float scale, int nt)
{
	coil_fft_plan pl;
	if (outer * inner == 0 || lout == 0)
		return 0;
	if (coil_fft_plan_init(&pl, n, sign))
		return -1;
	const int V = COIL_FFT_V, cin = kind != COIL_FFT_R2C, cout = kind != COIL_FFT_C2R;
	const int64_t lines = outer * inner, groups = (lines + V - 1) / V, nn = n ? n : 1;
	const int64_t rd = kind == COIL_FFT_C2R ? n / 2 + 1 : n; /* the points read */
	int bad = 0;
	if (nt < 1)
		nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1 && groups > 1 && lines * n > 4096) reduction(| : bad)
	{
		/* the group's points, their transform, the generic butterfly's */
		void *mem = NULL;
		if (posix_memalign(&mem, 64, (size_t)(6 * nn) * sizeof(coil_fv)))
			mem = NULL, bad = 1;
		coil_fv *buf = (coil_fv *)mem;
#pragma omp for schedule(static)
		for (int64_t gi = 0; gi < groups; gi++) {
			if (!buf)
				continue;
			coil_fv *xr = buf, *xi = buf + nn, *yr = buf + 2 * nn, *yi = buf + 3 * nn, *scr = buf + 4 * nn;
			const int64_t l0 = gi * V, gn = lines - l0 < V ? lines - l0 : V;
			int64_t ib[COIL_FFT_V], ob[COIL_FFT_V]; /* each lane's first point in src and dst */
			for (int j = 0; j < gn; j++) {
				const int64_t a = (l0 + j) / inner, b = (l0 + j) % inner;
				ib[j] = a * lin * inner + b, ob[j] = a * lout * inner + b;
			}
			/* lanes of one run (a strided dim: the same outer index, inner ones in a row):
			 * whole vectors, complex pairs split by shuffles */
			const int run = gn == V && ib[V - 1] == ib[0] + V - 1;
			for (int64_t k = 0; k < n; k++) {
				if (k >= rd) {
					xr[k] = xi[k] = (coil_fv){0};
				} else if (run) {
					const float *s = src + (cin ? 2 : 1) * (ib[0] + k * inner);
					coil_fv lo, hi;
					memcpy(&lo, s, sizeof lo);
					if (cin) {
						memcpy(&hi, s + V, sizeof hi);
						xr[k] = COIL_FFT_EVEN(lo, hi), xi[k] = COIL_FFT_ODD(lo, hi);
					} else {
						xr[k] = lo, xi[k] = (coil_fv){0};
					}
				} else {
					float *pr = (float *)&xr[k], *pi = (float *)&xi[k];
					for (int j = 0; j < V; j++) {
						const int on = j < gn;
						const int64_t e = on ? ib[j] + k * inner : 0;
						pr[j] = !on ? 0.0f : cin ? src[2 * e] : src[e];
						pi[j] = on && cin ? src[2 * e + 1] : 0.0f;
					}
				}
			}
			if (kind == COIL_FFT_C2R) /* the Hermitian spectrum of the first n/2 + 1 points */
				for (int64_t k = n / 2 + 1; k < n; k++)
					xr[k] = xr[n - k], xi[k] = -xi[n - k];
			if (n > 1)
				coil_fft_rec(&pl, yr, yi, xr, xi, 1, 1, pl.fac, scr);
			else
				yr[0] = xr[0], yi[0] = xi[0];
			const int orun = gn == V && ob[V - 1] == ob[0] + V - 1;
			for (int64_t k = 0; orun && k < lout; k++) {
				float *d = dst + (cout ? 2 : 1) * (ob[0] + k * inner);
				const coil_fv r = yr[k] * scale, i = yi[k] * scale;
				if (cout) {
					const coil_fv lo = COIL_FFT_LO(r, i), hi = COIL_FFT_HI(r, i);
					memcpy(d, &lo, sizeof lo);
					memcpy(d + V, &hi, sizeof hi);
				} else {
					memcpy(d, &r, sizeof r);
				}
			}
			for (int64_t k = 0; !orun && k < lout; k++) {
				const float *pr = (const float *)&yr[k], *pi = (const float *)&yi[k];
				for (int j = 0; j < gn; j++) {
					const int64_t e = ob[j] + k * inner;
					if (cout)
						dst[2 * e] = pr[j] * scale, dst[2 * e + 1] = pi[j] * scale;
					else
						dst[e] = pr[j] * scale;
				}
			}
		}
		free(mem);
	}
	coil_fft_plan_free(&pl);
	return bad ? -1 : 0;
}

#endif
