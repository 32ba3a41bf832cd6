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

/* out[k + s*m] for s < p from the p transforms of length m already in
 * out[q*m .. q*m + m): the radix-p butterflies of one stage (fs: the twiddle
 * stride, n / (p*m)). */
static inline void coil_fft_bfly(const coil_fft_plan *pl, float *out, int64_t fs, int64_t p, int64_t m, float *scr)
{
	const float *w = pl->w;
	const int64_t n = pl->n;
	if (p == 2) {
		for (int64_t k = 0; k < m; k++) {
			float *a = out + 2 * k, *b = out + 2 * (k + m);
			const float *t = w + 2 * k * fs;
			const float tr = b[0] * t[0] - b[1] * t[1], ti = b[0] * t[1] + b[1] * t[0];
			b[0] = a[0] - tr, b[1] = a[1] - ti;
			a[0] += tr, a[1] += ti;
		}
		return;
	}
	if (p == 4) {
		/* the sign of the transform: w[n/4] is (0, sign) */
		const float sg = w[2 * (n / 4) + 1];
		for (int64_t k = 0; k < m; k++) {
			float *x0 = out + 2 * k, *x1 = out + 2 * (k + m), *x2 = out + 2 * (k + 2 * m), *x3 = out + 2 * (k + 3 * m);
			const float *t1 = w + 2 * (k * fs), *t2 = w + 2 * (2 * k * fs), *t3 = w + 2 * (3 * k * fs);
			const float ar = x0[0], ai = x0[1];
			const float br = x1[0] * t1[0] - x1[1] * t1[1], bi = x1[0] * t1[1] + x1[1] * t1[0];
			const float cr = x2[0] * t2[0] - x2[1] * t2[1], ci = x2[0] * t2[1] + x2[1] * t2[0];
			const float dr = x3[0] * t3[0] - x3[1] * t3[1], di = x3[0] * t3[1] + x3[1] * t3[0];
			const float s0r = ar + cr, s0i = ai + ci, s1r = ar - cr, s1i = ai - ci;
			const float s2r = br + dr, s2i = bi + di, s3r = br - dr, s3i = bi - di;
			/* (b - d) times w^(n/4) = i * sign */
			const float jr = -sg * s3i, ji = sg * s3r;
			x0[0] = s0r + s2r, x0[1] = s0i + s2i;
			x2[0] = s0r - s2r, x2[1] = s0i - s2i;
			x1[0] = s1r + jr, x1[1] = s1i + ji;
			x3[0] = s1r - jr, x3[1] = s1i - ji;
		}
		return;
	}
	for (int64_t k = 0; k < m; k++) {
		for (int64_t q = 0; q < p; q++)
			scr[2 * q] = out[2 * (k + q * m)], scr[2 * q + 1] = out[2 * (k + q * m) + 1];
		for (int64_t s = 0; s < p; s++) {
			const int64_t kk = k + s * m;
			float re = scr[0], im = scr[1];
			int64_t tw = 0;
			for (int64_t q = 1; q < p; q++) {
				tw += fs * kk;
				tw %= n;
				const float *t = w + 2 * tw;
				re += scr[2 * q] * t[0] - scr[2 * q + 1] * t[1];
				im += scr[2 * q] * t[1] + scr[2 * q + 1] * t[0];
			}
			out[2 * kk] = re, out[2 * kk + 1] = im;
		}
	}
}

/* out[0..N) = the transform of the N complex points in[0], in[is], ...
 * (N = p * m of fac; fs = n / N). */
static void coil_fft_rec(const coil_fft_plan *pl, float *out, const float *in, int64_t fs, int64_t is,
			 const int64_t *fac, float *scr)
{
	const int64_t p = fac[0], m = fac[1];
	if (m == 1)
		for (int64_t q = 0; q < p; q++)
			out[2 * q] = in[2 * q * fs * is], out[2 * q + 1] = in[2 * q * fs * is + 1];
	else
		for (int64_t q = 0; q < p; q++)
			coil_fft_rec(pl, out + 2 * q * m, in + 2 * q * fs * is, fs * p, is, fac + 2, scr);
	coil_fft_bfly(pl, out, fs, p, m, scr);
}

/* out = the transform of the pl->n contiguous complex points of in (in != out). */
static inline void coil_fft_run(const coil_fft_plan *pl, const float *in, float *out, float *scr)
{
	if (pl->n <= 1) {
		if (pl->n == 1)
			out[0] = in[0], out[1] = in[1];
		return;
	}
	coil_fft_rec(pl, out, in, 1, 1, pl->fac, scr);
}

enum { COIL_FFT_R2C, COIL_FFT_C2R, COIL_FFT_C2C };

/* One transform of length n along the middle dim of [outer, L, inner]
 * lines: src has lin points per line, dst lout (complex points are float
 * pairs; kind says which side is real).  R2C: lin = n, lout = n/2 + 1
 * (onesided) or n; C2R: lin >= n/2 + 1 (the first n/2 + 1 are read), lout
 * = n; C2C: lin = lout = n.  sign -1 forward, +1 backward; every result
 * times scale.  src may equal dst only for C2C.  0, or -1 out of memory. */
static int coil_fft_lines(int kind, const float *src, float *dst, int64_t outer, int64_t lin, int64_t lout,
			  int64_t inner, int64_t n, int sign, float scale, int nt)
{
	coil_fft_plan pl;
	if (outer * inner == 0 || lout == 0)
		return 0;
	if (coil_fft_plan_init(&pl, n, sign))
		return -1;
	const int cin = kind != COIL_FFT_R2C, cout = kind != COIL_FFT_C2R;
	const int64_t lines = outer * inner;
	int bad = 0;
	if (nt < 1)
		nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1 && lines > 1 && lines * n > 4096) reduction(| : bad)
	{
		/* a line's input, its transform, the generic butterfly's p points */
		float *buf = (float *)malloc((size_t)(6 * (n ? n : 1)) * sizeof(float));
		if (!buf)
			bad = 1;
#pragma omp for schedule(static)
		for (int64_t l = 0; l < lines; l++) {
			if (!buf)
				continue;
			const int64_t a = l / inner, b = l % inner;
			float *x = buf, *y = buf + 2 * n, *scr = buf + 4 * n;
			if (kind == COIL_FFT_C2R) { /* the Hermitian spectrum of the first n/2 + 1 points */
				const float *s = src + 2 * (a * lin * inner + b);
				for (int64_t k = 0; k <= n / 2; k++)
					x[2 * k] = s[2 * k * inner], x[2 * k + 1] = s[2 * k * inner + 1];
				for (int64_t k = n / 2 + 1; k < n; k++)
					x[2 * k] = x[2 * (n - k)], x[2 * k + 1] = -x[2 * (n - k) + 1];
			} else if (cin) {
				const float *s = src + 2 * (a * lin * inner + b);
				for (int64_t k = 0; k < n; k++)
					x[2 * k] = s[2 * k * inner], x[2 * k + 1] = s[2 * k * inner + 1];
			} else {
				const float *s = src + a * lin * inner + b;
				for (int64_t k = 0; k < n; k++)
					x[2 * k] = s[k * inner], x[2 * k + 1] = 0;
			}
			coil_fft_run(&pl, x, y, scr);
			if (cout) {
				float *d = dst + 2 * (a * lout * inner + b);
				for (int64_t k = 0; k < lout; k++)
					d[2 * k * inner] = y[2 * k] * scale, d[2 * k * inner + 1] = y[2 * k + 1] * scale;
			} else {
				float *d = dst + a * lout * inner + b;
				for (int64_t k = 0; k < lout; k++)
					d[k * inner] = y[2 * k] * scale;
			}
		}
		free(buf);
	}
	coil_fft_plan_free(&pl);
	(void)cin;
	return bad ? -1 : 0;
}

#endif
