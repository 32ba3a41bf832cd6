/* attn: scaled dot-product attention for generated code, flash-style.
 * codegen/extern.c embeds this file (after vmath.h) into an artifact that
 * has an aten.scaled_dot_product_attention node, and renders each such node
 * as one coil_sdpa call.
 *
 * out[b, i, :] = softmax_j(q[b, i, :] . k[b, j, :] * scale + mask[b, i, j]) @ v[b, j, :]
 *
 * Blocked over query rows (BR at most) and key/value rows (BC at most) with an
 * online softmax: per query block a running max m, sum l and f32 accumulator
 * o, rescaled by exp(m_old - m_new) as each key block comes; the scores
 * never exist beyond one BR x BC tile.  Per thread: q, k^T, v tiles and the
 * score tile in f32 (bf16 and f16 are widened as they are packed), so extra
 * memory is independent of the sequence lengths.  Tasks (batch x query
 * blocks) are shared out dynamically across the team (causal rows differ in
 * cost).
 *
 * Semantics, as the graph writes them (PyTorch's math reference):
 *  - a bool mask keeps where true, else the score is fill (-inf, or the
 *    finite value of a torch.where mask); an additive one is added;
 *    is_causal keeps j <= i (top-left), else -inf;
 *  - a row whose scores are all -inf is NaN (softmax over -inf), as eager
 *    gives for the traced graph; a NaN score makes its row NaN;
 *  - a key block masked everywhere for a query block is skipped (causal and
 *    padding masks, sliding windows), unless skipping it would hide a
 *    non-finite value eager propagates: 0 * inf or NaN in v, or, with an
 *    additive mask, -inf + NaN from k; such blocks are computed.
 * f32 below AVX-512 with 16 to CA_GEMM_S keys, not causal, runs the sgemm path
 * instead (ca_gemm_task: whole score rows, dnnl_sgemm's products).
 * Micro-kernels: q k^T as MR rows x NV vectors of keys over the head dim
 * (broadcast q, k^T packed), P v as MR rows x NV vectors of the value dim
 * over keys; explicit AVX-512 / AVX2 / SSE-free scalar widths below. */
#ifndef COIL_ATTN_H
#define COIL_ATTN_H
#include <oneapi/dnnl/dnnl.h>

#if defined(__AVX512F__)
#define CA_W 16
typedef __m512 ca_v;
#define CA_LD(p) _mm512_loadu_ps(p)
#define CA_ST(p, x) _mm512_storeu_ps(p, x)
#define CA_SET1(x) _mm512_set1_ps(x)
#define CA_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define CA_MUL(a, b) _mm512_mul_ps(a, b)
#define CA_EXP(x) coil_exp16(x)
#define CA_MAX(a, b) coil_max16(a, b)
#define CA_HSUM(x) coil_hsum16(x)
/* NaN if a lane is NaN, else the largest lane */
#define CA_HMAX(x) (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) ? NAN : _mm512_reduce_max_ps(x))
#define CA_NV 4
#define CA_MR 6
#elif defined(__AVX2__)
#define CA_W 8
typedef __m256 ca_v;
#define CA_LD(p) _mm256_loadu_ps(p)
#define CA_ST(p, x) _mm256_storeu_ps(p, x)
#define CA_SET1(x) _mm256_set1_ps(x)
#define CA_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define CA_MUL(a, b) _mm256_mul_ps(a, b)
#define CA_EXP(x) coil_exp8(x)
#define CA_MAX(a, b) coil_max8(a, b)
#define CA_HSUM(x) coil_hsum8(x)
#define CA_HMAX(x) ca_hmax_lanes(x)
#define CA_NV 2
#define CA_MR 4
#else
#define CA_W 1
typedef coil_v1f ca_v;
static inline ca_v ca_ld1(const float *p) { return (ca_v){*p}; }
#define CA_LD(p) ca_ld1(p)
#define CA_ST(p, x) (*(p) = (x)[0])
#define CA_SET1(x) ((ca_v){x})
#define CA_FMA(a, b, c) ((a) * (b) + (c))
#define CA_MUL(a, b) ((a) * (b))
#define CA_EXP(x) coil_exp1(x)
#define CA_MAX(a, b) coil_max1(a, b)
#define CA_HSUM(x) ((x)[0])
#define CA_HMAX(x) ((x)[0])
#define CA_NV 4
#define CA_MR 4
#endif
#define CA_TN (CA_W * CA_NV) /* columns per micro-tile */
/* the micro-tiles' loops, unrolled whole at any -O so the accumulators stay in registers */
#define CA_UNROLL _Pragma("GCC unroll 8")
#define CA_BR 64
#define CA_BC 256
/* k^T's row stride: BC columns and 16 more.  Rows BC floats (1 KB) apart
 * put a micro-tile's E loads of k^T in 4 of L1's 64 sets (8 ways), which
 * thrashed: 24 heads of 197 x 64 at one thread on an AVX2 EPYC, medians of
 * six runs each, 5.5-6.8 -> 5.3-6.0 ms (perf: the k^T loads 9.5% -> 2.5%
 * of the samples) */
#define CA_LDK (CA_BC + 16)

typedef struct coil_sdpa_args {
	int dt;                 /* element type of q, k, v, out: 0 f32, 1 bf16, 2 f16 */
	int nbd;                /* batch dims (at most 6) */
	int64_t bd[6];          /* their sizes (the output's) */
	int64_t qs[6], ks[6], vs[6], ms[6]; /* element strides per batch dim (0: broadcast) */
	int64_t L, S, E, Ev;
	const void *q, *k, *v;  /* dense [.., L, E], [.., S, E], [.., S, Ev] */
	int mk;                 /* mask: 0 none, 1 bool (keep where nonzero, else fill), 2 additive of dt */
	float fill;             /* a bool mask's masked score: -inf, or a finite value (torch.where masks) */
	const void *m;
	int64_t msl, mss;       /* mask strides of the query and key dims (0: broadcast) */
	int causal;
	float scale;
	void *out;              /* dense [.., L, Ev] */
	int nt;
} coil_sdpa_args;

/* The largest lane, NaN if any lane is NaN (targets without a reduction). */
static inline float ca_hmax_lanes(ca_v x)
{
	float xs[CA_W], m = -INFINITY;
	CA_ST(xs, x);
	for (int l = 0; l < CA_W; l++)
		m = m != m ? m : xs[l] != xs[l] ? xs[l] : xs[l] > m ? xs[l] : m;
	return m;
}

static inline float ca_load1(int dt, const void *p, int64_t i)
{
	return dt == 0 ? ((const float *)p)[i] : dt == 1 ? coil_bf16_f32(((const uint16_t *)p)[i])
							 : coil_f16_f32(((const uint16_t *)p)[i]);
}

/* p[off, off + n) holds no inf or NaN. */
static inline int ca_finite(int dt, const void *p, int64_t off, int64_t n)
{
	if (dt == 0) { /* x * 0 is NaN for inf and NaN, 0 otherwise */
		const float *x = (const float *)p + off;
		ca_v acc = CA_SET1(0.0f), zero = CA_SET1(0.0f);
		int64_t i = 0;
		for (; i + CA_W <= n; i += CA_W)
			acc = acc + CA_MUL(CA_LD(x + i), zero);
		float t = CA_HSUM(acc);
		for (; i < n; i++)
			t += x[i] * 0.0f;
		return t == 0;
	}
	/* bf16 / f16: the exponent all ones */
	const uint16_t *h = (const uint16_t *)p + off, e = dt == 1 ? 0x7f80 : 0x7c00;
	unsigned bad = 0;
	for (int64_t i = 0; i < n; i++)
		bad |= (h[i] & e) == e;
	return !bad;
}

/* 1 + the last key of [j0, j0 + nc) that some row of [i0, i0 + nr) does not
 * mask (relative to j0); each row scanned from the right down to the best
 * so far. */
static int64_t ca_live_cols(const coil_sdpa_args *a, int64_t mo, int64_t i0, int64_t nr, int64_t j0, int64_t nc)
{
	int64_t live = 0;
	for (int64_t r = nr - 1; r >= 0 && live < nc; r--) {
		const int64_t i = i0 + r, mrow = mo + i * a->msl + j0 * a->mss;
		int64_t n = a->causal ? (i - j0 + 1 < nc ? i - j0 + 1 : nc) : nc;
		if (!a->mk) {
			live = n > live ? n : live;
			continue;
		}
		for (int64_t c = n - 1; c >= live; c--)
			if (a->mk == 1 ? ((const uint8_t *)a->m)[mrow + c * a->mss] != 0
				       : ca_load1(a->dt, a->m, mrow + c * a->mss) != -INFINITY) {
				live = c + 1;
				break;
			}
	}
	return live;
}

/* The largest of x[0..n), NaN if one is NaN (-inf for none). */
static inline float ca_rowmax(const float *x, int64_t n)
{
	ca_v mx = CA_SET1(-INFINITY);
	int64_t c = 0;
	for (; c + CA_W <= n; c += CA_W)
		mx = CA_MAX(mx, CA_LD(x + c));
	float t = CA_HMAX(mx);
	for (; c < n; c++)
		t = x[c] > t || x[c] != x[c] ? x[c] : t;
	return t;
}

/* Query rows [i0, i0 + nr) see only masked keys in [j0, j0 + nc): a bool
 * mask false or an additive one -inf wherever causality does not mask
 * already. */
static int ca_all_masked(const coil_sdpa_args *a, int64_t mo, int64_t i0, int64_t nr, int64_t j0, int64_t nc)
{
	if (a->causal && j0 > i0 + nr - 1)
		return 1;
	if (!a->mk)
		return 0;
	for (int64_t r = 0; r < nr; r++) {
		const int64_t i = i0 + r, mrow = mo + i * a->msl + j0 * a->mss;
		int64_t n = a->causal ? (i - j0 + 1 < nc ? i - j0 + 1 : nc) : nc; /* keys causality leaves */
		if (n <= 0)
			continue;
		if (a->mk == 1 && a->mss == 1) {
			const uint8_t *m = (const uint8_t *)a->m + mrow;
			unsigned any = 0;
			for (int64_t c = 0; c < n; c++)
				any |= m[c];
			if (any)
				return 0;
		} else if (a->mk == 2 && a->dt == 0 && a->mss == 1) {
			if (ca_rowmax((const float *)a->m + mrow, n) != -INFINITY)
				return 0;
		} else {
			for (int64_t c = 0; c < n; c++)
				if (a->mk == 1 ? ((const uint8_t *)a->m)[mrow + c * a->mss] != 0
					       : ca_load1(a->dt, a->m, mrow + c * a->mss) != -INFINITY)
					return 0;
		}
	}
	return 1;
}

/* S[r][0..nv W) for MR rows: q rows (f32, row stride E) against k^T (stride ldk). */
static inline __attribute__((always_inline)) void ca_qk_tile(int mr, int nv, const float *q, int64_t E,
							     const float *kt, int64_t ldk, float *s, int64_t lds)
{
	ca_v acc[CA_MR][CA_NV];
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			acc[r][j] = CA_SET1(0.0f);
	for (int64_t e = 0; e < E; e++) {
		ca_v b[CA_NV];
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			b[j] = CA_LD(kt + e * ldk + j * CA_W);
		CA_UNROLL
		for (int r = 0; r < mr; r++) {
			ca_v a = CA_SET1(q[r * E + e]);
			CA_UNROLL
			for (int j = 0; j < nv; j++)
				acc[r][j] = CA_FMA(a, b[j], acc[r][j]);
		}
	}
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			CA_ST(s + r * lds + j * CA_W, acc[r][j]);
}

/* o[r][0..nv W) += sum_j p[r][j] * v[j][0..nv W) for MR rows, nc keys. */
static inline __attribute__((always_inline)) void ca_pv_tile(int mr, int nv, const float *p, int64_t ldp, int64_t nc,
							     const float *v, int64_t ldv, float *o, int64_t ldo)
{
	ca_v acc[CA_MR][CA_NV];
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			acc[r][j] = CA_LD(o + r * ldo + j * CA_W);
	for (int64_t c = 0; c < nc; c++) {
		ca_v b[CA_NV];
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			b[j] = CA_LD(v + c * ldv + j * CA_W);
		CA_UNROLL
		for (int r = 0; r < mr; r++) {
			ca_v a = CA_SET1(p[r * ldp + c]);
			CA_UNROLL
			for (int j = 0; j < nv; j++)
				acc[r][j] = CA_FMA(a, b[j], acc[r][j]);
		}
	}
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			CA_ST(o + r * ldo + j * CA_W, acc[r][j]);
}

/* fn(MR, NV, ...) with both compile-time constants: mr rows (1..CA_MR) by nv
 * vectors (1..CA_NV), so tails cost what they compute */
#define CA_NVC(x) ((x) < CA_NV ? (x) : CA_NV)
#define CA_NVSW(fn, MR, nv, ...)                                              \
	switch (nv) {                                                         \
	case 1: fn(MR, 1, __VA_ARGS__); break;                                \
	case 2: fn(MR, CA_NVC(2), __VA_ARGS__); break;                        \
	case 3: fn(MR, CA_NVC(3), __VA_ARGS__); break;                        \
	default: fn(MR, CA_NV, __VA_ARGS__); break;                           \
	}
#define CA_DISPATCH(fn, mr, nv, ...)                                          \
	switch (mr) {                                                         \
	case 1: CA_NVSW(fn, 1, nv, __VA_ARGS__); break;                       \
	case 2: CA_NVSW(fn, 2, nv, __VA_ARGS__); break;                       \
	case 3: CA_NVSW(fn, 3, nv, __VA_ARGS__); break;                       \
	case 4: CA_NVSW(fn, 4, nv, __VA_ARGS__); break;                       \
	case 5: CA_NVSW(fn, 5 < CA_MR ? 5 : CA_MR, nv, __VA_ARGS__); break;  \
	default: CA_NVSW(fn, CA_MR, nv, __VA_ARGS__); break;                  \
	}

#if defined(__AVX512BF16__) && CA_W == 16
/* bf16 inputs on targets with AVX512_BF16: both products as vdpbf16ps (pairs
 * of bf16 products summed into f32 lanes, twice the f32 FMA's work), P
 * rounded to bf16 for P v as eager's softmax output is.  Operands as pairs:
 * q2 [rows][E2] (q[2e], q[2e+1]) per uint32, kt2 [E2][BC] (k[c][2e],
 * k[c][2e+1]) per key c, v2 [S2][ldv] (v[2c][e], v[2c+1][e]), zero padded. */
#define CA_BFDP 1
static inline __m512bh ca_bh(__m512i x) { return (__m512bh)x; }

static inline __attribute__((always_inline)) void ca_qk_tile_bf(int mr, int nv, const uint32_t *q2, int64_t E2,
								const uint32_t *kt2, int64_t ldk, float *s, int64_t lds,
								float sc)
{
	__m512 acc[CA_MR][CA_NV];
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			acc[r][j] = _mm512_setzero_ps();
	for (int64_t e = 0; e < E2; e++) {
		__m512bh b[CA_NV];
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			b[j] = ca_bh(_mm512_loadu_si512(kt2 + e * ldk + j * 16));
		CA_UNROLL
		for (int r = 0; r < mr; r++) {
			__m512bh x = ca_bh(_mm512_set1_epi32((int)q2[r * E2 + e]));
			CA_UNROLL
			for (int j = 0; j < nv; j++)
				acc[r][j] = _mm512_dpbf16_ps(acc[r][j], x, b[j]);
		}
	}
	const __m512 vsc = _mm512_set1_ps(sc);
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			_mm512_storeu_ps(s + r * lds + j * 16, _mm512_mul_ps(acc[r][j], vsc));
}

static inline __attribute__((always_inline)) void ca_pv_tile_bf(int mr, int nv, const uint16_t *p16, int64_t ldp,
								int64_t nc2, const uint32_t *v2, int64_t ldv, float *o,
								int64_t ldo)
{
	__m512 acc[CA_MR][CA_NV];
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			acc[r][j] = _mm512_loadu_ps(o + r * ldo + j * 16);
	for (int64_t c = 0; c < nc2; c++) {
		__m512bh b[CA_NV];
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			b[j] = ca_bh(_mm512_loadu_si512(v2 + c * ldv + j * 16));
		CA_UNROLL
		for (int r = 0; r < mr; r++) {
			uint32_t pp;
			memcpy(&pp, p16 + r * ldp + 2 * c, sizeof pp);
			__m512bh x = ca_bh(_mm512_set1_epi32((int)pp));
			CA_UNROLL
			for (int j = 0; j < nv; j++)
				acc[r][j] = _mm512_dpbf16_ps(acc[r][j], x, b[j]);
		}
	}
	CA_UNROLL
	for (int r = 0; r < mr; r++)
		CA_UNROLL
		for (int j = 0; j < nv; j++)
			_mm512_storeu_ps(o + r * ldo + j * 16, acc[r][j]);
}
#else
#define CA_BFDP 0
#endif

typedef struct ca_buf {
	float *q, *kt, *v, *s, *o, *m, *l;
	uint16_t *p16; /* bf16 products: P rounded to bf16, [BR][BC] */
	uint8_t *kfin, *vfin; /* per key block of the packed batch element: k, v hold no inf or NaN */
} ca_buf;

/* Few query rows (decoding): scores and P v straight from k and v rows
 * (f32), as packing them would cost more than the products. */
static inline float ca_dot(const float *x, const float *y, int64_t n)
{
	ca_v acc = CA_SET1(0.0f);
	int64_t e = 0;
	for (; e + CA_W <= n; e += CA_W)
		acc = CA_FMA(CA_LD(x + e), CA_LD(y + e), acc);
	float t = CA_HSUM(acc);
	for (; e < n; e++)
		t += x[e] * y[e];
	return t;
}

static inline void ca_axpy(float a, const float *x, float *y, int64_t n)
{
	ca_v va = CA_SET1(a);
	int64_t e = 0;
	for (; e + CA_W <= n; e += CA_W)
		CA_ST(y + e, CA_FMA(va, CA_LD(x + e), CA_LD(y + e)));
	for (; e < n; e++)
		y[e] += a * x[e];
}

/* Batch element b's offsets into q, k, v and the mask. */
static inline void ca_offsets(const coil_sdpa_args *a, int64_t b, int64_t *qo, int64_t *ko, int64_t *vo, int64_t *mo)
{
	int64_t rem = b;
	*qo = *ko = *vo = *mo = 0;
	for (int d = a->nbd - 1; d >= 0; d--) {
		int64_t x = rem % a->bd[d];
		rem /= a->bd[d];
		*qo += x * a->qs[d], *ko += x * a->ks[d], *vo += x * a->vs[d], *mo += x * a->ms[d];
	}
}

#if CA_W == 16
/* dst[e * ldd + c] = src[c * lds + e] for a 16 x 16 block, in registers */
static inline void ca_tr16(const float *src, int64_t lds, float *dst, int64_t ldd)
{
	__m512 r[16], t[16];
	for (int i = 0; i < 16; i++)
		r[i] = _mm512_loadu_ps(src + i * lds);
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		__m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
		__m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
		r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
		r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
		r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
		r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
	}
	for (int i = 0; i < 16; i += 8)
		for (int j = 0; j < 4; j++) {
			t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
			t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
		}
	for (int j = 0; j < 8; j++) {
		_mm512_storeu_ps(dst + j * ldd, _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
		_mm512_storeu_ps(dst + (j + 8) * ldd, _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
	}
}
#endif

/* k^T in blocks of BC keys ([E][LDK] each, zero padded) and v rows widened
 * to ldv, for batch element b: once per thread and batch element. */
static void ca_pack(const coil_sdpa_args *a, const ca_buf *w, int64_t ko, int64_t vo, int64_t ldv)
{
	const int64_t S = a->S, E = a->E, Ev = a->Ev;
	if (a->mk || a->causal) /* what skipping a masked block must not hide */
		for (int64_t j0 = 0; j0 < S; j0 += CA_BC) {
			const int64_t nc = S - j0 < CA_BC ? S - j0 : CA_BC;
			w->kfin[j0 / CA_BC] = a->mk == 2 ? (uint8_t)ca_finite(a->dt, a->k, ko + j0 * E, nc * E) : 1;
			w->vfin[j0 / CA_BC] = (uint8_t)ca_finite(a->dt, a->v, vo + j0 * Ev, nc * Ev);
		}
	if (CA_BFDP && a->dt == 1) { /* pairs of bf16, as they are */
		const uint16_t *k = (const uint16_t *)a->k + ko, *v = (const uint16_t *)a->v + vo;
		const int64_t E2 = (E + 1) / 2;
		for (int64_t j0 = 0; j0 < S; j0 += CA_BC) {
			const int64_t nc = S - j0 < CA_BC ? S - j0 : CA_BC, ncp = (nc + CA_W - 1) / CA_W * CA_W;
			uint32_t *kt2 = (uint32_t *)(w->kt + j0 / CA_BC * E * CA_LDK);
			for (int64_t e = 0; e < E2; e++) {
				uint32_t *row = kt2 + e * CA_LDK;
				for (int64_t c = 0; c < nc; c++) {
					const uint16_t *kr = k + (j0 + c) * E;
					row[c] = kr[2 * e] | (2 * e + 1 < E ? (uint32_t)kr[2 * e + 1] << 16 : 0);
				}
				for (int64_t c = nc; c < ncp; c++)
					row[c] = 0;
			}
		}
		uint32_t *v2 = (uint32_t *)w->v;
		for (int64_t c = 0; c < S; c += 2) {
			uint32_t *row = v2 + c / 2 * ldv;
			const uint16_t *v0 = v + c * Ev, *v1 = c + 1 < S ? v0 + Ev : NULL;
			for (int64_t e = 0; e < Ev; e++)
				row[e] = v0[e] | (v1 ? (uint32_t)v1[e] << 16 : 0);
			for (int64_t e = Ev; e < ldv; e++)
				row[e] = 0;
		}
		return;
	}
	for (int64_t j0 = 0; j0 < S; j0 += CA_BC) {
		const int64_t nc = S - j0 < CA_BC ? S - j0 : CA_BC;
		const int64_t ncp = (nc + CA_W - 1) / CA_W * CA_W; /* the columns the products read */
		float *kt = w->kt + j0 / CA_BC * E * CA_LDK;
		int64_t c0 = 0; /* keys [0, c0) transposed in 16 x 16 blocks */
#if CA_W == 16
		if (a->dt == 0 && E % 16 == 0) {
			const float *kb = (const float *)a->k + ko + j0 * E;
			for (; c0 + 16 <= nc; c0 += 16)
				for (int64_t e0 = 0; e0 < E; e0 += 16)
					ca_tr16(kb + c0 * E + e0, E, kt + e0 * CA_LDK + c0, CA_LDK);
		}
#endif
		/* the rest row by row of k^T: contiguous stores, strided loads */
		for (int64_t e = 0; e < E; e++) {
			float *row = kt + e * CA_LDK;
			if (a->dt == 0) {
				const float *src = (const float *)a->k + ko + j0 * E + e;
				for (int64_t c = c0; c < nc; c++)
					row[c] = src[c * E];
			} else {
				for (int64_t c = 0; c < nc; c++)
					row[c] = ca_load1(a->dt, a->k, ko + (j0 + c) * E + e);
			}
			for (int64_t c = nc; c < ncp; c++)
				row[c] = 0;
		}
	}
	for (int64_t c = 0; c < S; c++) {
		float *dst = w->v + c * ldv;
		if (a->dt == 0)
			memcpy(dst, (const float *)a->v + vo + c * Ev, (size_t)Ev * sizeof(float));
		else
			for (int64_t e = 0; e < Ev; e++)
				dst[e] = ca_load1(a->dt, a->v, vo + c * Ev + e);
		for (int64_t e = Ev; e < ldv; e++)
			dst[e] = 0;
	}
}

/* One task: query rows [i0, i0 + nr) of batch element b. */
static void ca_task(const coil_sdpa_args *a, const ca_buf *w, int64_t b, int64_t i0, int64_t nr, int64_t ldv,
		    int direct)
{
	int64_t qo, ko, vo, mo;
	ca_offsets(a, b, &qo, &ko, &vo, &mo);
	const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
	const int dt = a->dt;
	/* q rows, widened and scaled (q k^T * scale as (q * scale) k^T: the
	 * scores need no pass of their own) */
	const float sc = a->scale;
	if (dt == 0) {
		const float *qs = (const float *)a->q + qo + i0 * E;
		const ca_v vsc = CA_SET1(sc);
		int64_t e = 0;
		for (; e + CA_W <= nr * E; e += CA_W)
			CA_ST(w->q + e, CA_MUL(CA_LD(qs + e), vsc));
		for (; e < nr * E; e++)
			w->q[e] = qs[e] * sc;
	} else if (CA_BFDP && dt == 1) { /* pairs as they are (the f32 scores are scaled: q * scale is not a bf16) */
		const int64_t E2 = (E + 1) / 2;
		const uint16_t *qb = (const uint16_t *)a->q + qo + i0 * E;
		uint32_t *q2 = (uint32_t *)w->q;
		for (int64_t r = 0; r < nr; r++)
			for (int64_t e = 0; e < E2; e++)
				q2[r * E2 + e] = qb[r * E + 2 * e] | (2 * e + 1 < E ? (uint32_t)qb[r * E + 2 * e + 1] << 16 : 0);
	} else {
		for (int64_t e = 0; e < nr * E; e++)
			w->q[e] = ca_load1(dt, a->q, qo + i0 * E + e) * sc;
	}
	for (int64_t r = 0; r < nr; r++) {
		w->m[r] = -INFINITY;
		w->l[r] = 0;
		for (int64_t e = 0; e < ldv; e++)
			w->o[r * ldv + e] = 0;
	}
	for (int64_t j0 = 0; j0 < S; j0 += CA_BC) {
		int64_t nc = S - j0 < CA_BC ? S - j0 : CA_BC;
		int all_masked = ca_all_masked(a, mo, i0, nr, j0, nc);
		/* a finite fill adds exp(fill - m) = 0 exactly (below -104) once
		 * every row has a score that far above it */
		for (int64_t r = 0; r < nr && all_masked && a->mk == 1 && a->fill != -INFINITY; r++)
			all_masked = a->fill == a->fill && w->m[r] != -INFINITY && a->fill < w->m[r] - 128.0f;
		if (all_masked && (direct ? ca_finite(dt, a->v, vo + j0 * Ev, nc * Ev) : w->vfin[j0 / CA_BC]) &&
		    (a->mk != 2 || (direct ? ca_finite(dt, a->k, ko + j0 * E, nc * E) : w->kfin[j0 / CA_BC])))
			continue;
		/* keys past the last one any row sees (the diagonal block of a
		 * causal mask, written as is_causal or as a -inf mask) weigh
		 * exactly 0: not computed, unless that would hide a non-finite
		 * value as above */
		if (!all_masked && !direct && (a->mk || a->causal) && (a->mk != 1 || a->fill == -INFINITY) &&
		    w->vfin[j0 / CA_BC] && (a->mk != 2 || w->kfin[j0 / CA_BC]))
			nc = ca_live_cols(a, mo, i0, nr, j0, nc);
		const int64_t ncp = (nc + CA_W - 1) / CA_W * CA_W;
		/* scores */
		if (direct) {
			const float *kb = (const float *)a->k + ko + j0 * E;
			for (int64_t r = 0; r < nr; r++)
				for (int64_t c = 0; c < nc; c++)
					w->s[r * ncp + c] = ca_dot(w->q + r * E, kb + c * E, E);
		}
		for (int64_t c = 0; c < ncp && !direct; c += CA_TN)
			for (int64_t r = 0; r < nr; r += CA_MR) {
				int mr = nr - r < CA_MR ? (int)(nr - r) : CA_MR, nv = (int)CA_NVC((ncp - c) / CA_W);
#define CA_QK(MR, NV, ...) ca_qk_tile(MR, NV, __VA_ARGS__)
#if CA_BFDP
				if (dt == 1) {
					const int64_t E2 = (E + 1) / 2;
#define CA_QKB(MR, NV, ...) ca_qk_tile_bf(MR, NV, __VA_ARGS__)
					CA_DISPATCH(CA_QKB, mr, nv, (const uint32_t *)w->q + r * E2, E2,
						    (const uint32_t *)(w->kt + j0 / CA_BC * E * CA_LDK) + c, CA_LDK, w->s + r * ncp + c, ncp, sc);
#undef CA_QKB
					continue;
				}
#endif
				CA_DISPATCH(CA_QK, mr, nv, w->q + r * E, E, w->kt + j0 / CA_BC * E * CA_LDK + c, CA_LDK, w->s + r * ncp + c,
					    ncp);
#undef CA_QK
			}
		/* mask, online softmax per row */
		for (int64_t r = 0; r < nr; r++) {
			float *s = w->s + r * ncp;
			const int64_t i = i0 + r, mrow = mo + i * a->msl + j0 * a->mss;
			if (a->mk == 1) {
				const uint8_t *mb = (const uint8_t *)a->m + mrow;
				const float fill = a->fill;
				for (int64_t c = 0; c < nc; c++)
					s[c] = mb[c * a->mss] ? s[c] : fill;
			} else if (a->mk == 2 && dt == 0 && a->mss == 1) {
				const float *mf = (const float *)a->m + mrow;
				int64_t c = 0;
				for (; c + CA_W <= nc; c += CA_W)
					CA_ST(s + c, CA_LD(s + c) + CA_LD(mf + c));
				for (; c < nc; c++)
					s[c] += mf[c];
			} else if (a->mk == 2) {
				for (int64_t c = 0; c < nc; c++)
					s[c] += ca_load1(dt, a->m, mrow + c * a->mss);
			}
			if (a->causal)
				for (int64_t c = i - j0 + 1 < 0 ? 0 : i - j0 + 1; c < nc; c++)
					s[c] = -INFINITY;
			for (int64_t c = nc; c < ncp; c++)
				s[c] = -INFINITY;
			/* the row's max, NaN-propagating */
			ca_v mx = CA_SET1(-INFINITY);
			for (int64_t c = 0; c < ncp; c += CA_W)
				mx = CA_MAX(mx, CA_LD(s + c));
			const float bm = CA_HMAX(mx);
			float mo_ = w->m[r], mn = mo_ != mo_ ? mo_ : bm != bm ? bm : bm > mo_ ? bm : mo_;
			if (mn == -INFINITY) { /* masked everywhere so far: p = 0 */
				for (int64_t c = 0; c < ncp; c++)
					s[c] = 0;
				if (CA_BFDP && dt == 1)
					memset(w->p16 + r * CA_BC, 0, (size_t)ncp * sizeof(uint16_t));
				continue;
			}
			const float alpha = mo_ == -INFINITY ? 0.0f : CA_EXP(CA_SET1(mo_ - mn))[0];
			ca_v sum = CA_SET1(0.0f), vm = CA_SET1(mn);
#if CA_BFDP
			if (dt == 1)
				for (int64_t c = 0; c < ncp; c += CA_W) {
					ca_v p = CA_EXP(CA_LD(s + c) - vm);
					_mm256_storeu_si256((__m256i *)(w->p16 + r * CA_BC + c), (__m256i)_mm512_cvtneps_pbh(p));
					sum = sum + p;
				}
			else
#endif
			for (int64_t c = 0; c < ncp; c += CA_W) {
				ca_v p = CA_EXP(CA_LD(s + c) - vm);
				CA_ST(s + c, p);
				sum = sum + p;
			}
			w->l[r] = w->l[r] * alpha + CA_HSUM(sum);
			w->m[r] = mn;
			if (alpha != 1.0f) {
				ca_v va = CA_SET1(alpha);
				for (int64_t e = 0; e < ldv; e += CA_W)
					CA_ST(w->o + r * ldv + e, CA_MUL(CA_LD(w->o + r * ldv + e), va));
			}
		}
		/* o += p v */
		if (direct) {
			const float *vb = (const float *)a->v + vo + j0 * Ev;
			for (int64_t r = 0; r < nr; r++)
				for (int64_t c = 0; c < nc; c++)
					ca_axpy(w->s[r * ncp + c], vb + c * Ev, w->o + r * ldv, Ev);
		}
		for (int64_t e = 0; e < ldv && !direct; e += CA_TN)
			for (int64_t r = 0; r < nr; r += CA_MR) {
				int mr = nr - r < CA_MR ? (int)(nr - r) : CA_MR, nv = (int)CA_NVC((ldv - e) / CA_W);
#if CA_BFDP
				if (dt == 1) {
#define CA_PVB(MR, NV, ...) ca_pv_tile_bf(MR, NV, __VA_ARGS__)
					CA_DISPATCH(CA_PVB, mr, nv, w->p16 + r * CA_BC, CA_BC, (nc + 1) / 2,
						    (const uint32_t *)w->v + j0 / 2 * ldv + e, ldv, w->o + r * ldv + e, ldv);
#undef CA_PVB
					continue;
				}
#endif
#define CA_PV(MR, NV, ...) ca_pv_tile(MR, NV, __VA_ARGS__)
				CA_DISPATCH(CA_PV, mr, nv, w->s + r * ncp, ncp, nc, w->v + j0 * ldv + e, ldv, w->o + r * ldv + e,
					    ldv);
#undef CA_PV
			}
	}
	/* out = o / l; a row with no score above -inf is NaN */
	for (int64_t r = 0; r < nr; r++) {
		const float l = w->l[r], inv = 1.0f / l;
		const int none = w->m[r] == -INFINITY;
		const int64_t ob = (b * L + i0 + r) * Ev;
		if (dt == 0 && !none) {
			float *dst = (float *)a->out + ob;
			const float *src = w->o + r * ldv;
			const ca_v vi = CA_SET1(inv);
			int64_t e = 0;
			for (; e + CA_W <= Ev; e += CA_W)
				CA_ST(dst + e, CA_MUL(CA_LD(src + e), vi));
			for (; e < Ev; e++)
				dst[e] = src[e] * inv;
			continue;
		}
#if CA_BFDP
		if (dt == 1 && !none) {
			uint16_t *dst = (uint16_t *)a->out + ob;
			const float *src = w->o + r * ldv;
			int64_t e = 0;
			for (; e + 16 <= Ev; e += 16)
				_mm256_storeu_si256((__m256i *)(dst + e),
						    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + e), _mm512_set1_ps(inv))));
			for (; e < Ev; e++)
				dst[e] = coil_f32_bf16(src[e] * inv);
			continue;
		}
#endif
		for (int64_t e = 0; e < Ev; e++) {
			float x = none ? NAN : w->o[r * ldv + e] * inv;
			if (dt == 0)
				((float *)a->out)[ob + e] = x;
			else if (dt == 1)
				((uint16_t *)a->out)[ob + e] = coil_f32_bf16(x);
			else
				((uint16_t *)a->out)[ob + e] = coil_f32_f16(x);
		}
	}
}

/* AVX2, f32, 16 to CA_GEMM_S keys, not causal (the flash path skips the
 * blocks past the diagonal): each query block's scores in full, as
 * dnnl_sgemm products (q k^T * scale, then P v) around an exact softmax of
 * whole rows, the row's 1 / sum applied to its output.  On an AVX2 EPYC (Zen 3)
 * against the flash kernel (its 4 x 16 micro-tiles and rescaling), paired
 * medians: 8 x 3 heads of 197 x 64 5.0-6.4 -> 4.3-5.4 ms at one thread,
 * 4.5 -> 2.8 at two; 64 x 3 heads of 49 x 32 (Swin's windows) 3.4 -> 2.8;
 * 2 x 3 heads of 1024 x 64 34 -> 26.  Semantics as the flash path: masks as
 * there; a row with no score above -inf is NaN (-inf - -inf), a NaN score makes
 * its row NaN, and every key is in the product (0 * inf is NaN as in eager's). */
#define CA_GEMM_S 1024
static int ca_gemm_ok(const coil_sdpa_args *a)
{
	return CA_W == 8 && a->dt == 0 && !a->causal && a->L > 2 && a->S >= 16 && a->S <= CA_GEMM_S;
}

static void ca_gemm_task(const coil_sdpa_args *a, float *sbuf, int64_t lds, int64_t b, int64_t i0, int64_t nr)
{
	int64_t qo, ko, vo, mo;
	ca_offsets(a, b, &qo, &ko, &vo, &mo);
	const int64_t L = a->L, E = a->E, Ev = a->Ev, nc = a->S;
	float *out = (float *)a->out + (b * L + i0) * Ev, *inv = sbuf + nr * lds;
	dnnl_sgemm('N', 'T', nr, nc, E, a->scale, (const float *)a->q + qo + i0 * E, E, (const float *)a->k + ko, E,
		   0.0f, sbuf, lds);
	for (int64_t r = 0; r < nr; r++) {
		float *s = sbuf + r * lds;
		const int64_t i = i0 + r, mrow = mo + i * a->msl;
		if (a->mk == 1) {
			const uint8_t *mb = (const uint8_t *)a->m + mrow;
			for (int64_t c = 0; c < nc; c++)
				s[c] = mb[c * a->mss] ? s[c] : a->fill;
		} else if (a->mk == 2) {
			const float *mf = (const float *)a->m + mrow;
			for (int64_t c = 0; c < nc; c++)
				s[c] += mf[c * a->mss];
		}
		const float m = ca_rowmax(s, nc);
		ca_v sum = CA_SET1(0.0f), vm = CA_SET1(m);
		int64_t c = 0;
		for (; c + CA_W <= nc; c += CA_W) {
			ca_v p = CA_EXP(CA_LD(s + c) - vm);
			CA_ST(s + c, p);
			sum = sum + p;
		}
		float t = CA_HSUM(sum);
		for (; c < nc; c++)
			t += s[c] = CA_EXP(CA_SET1(s[c] - m))[0];
		inv[r] = 1.0f / t;
	}
	dnnl_sgemm('N', 'N', nr, Ev, nc, 1.0f, sbuf, lds, (const float *)a->v + vo, Ev, 0.0f, out, Ev);
	for (int64_t r = 0; r < nr; r++) {
		const ca_v vi = CA_SET1(inv[r]);
		float *o = out + r * Ev;
		int64_t e = 0;
		for (; e + CA_W <= Ev; e += CA_W)
			CA_ST(o + e, CA_MUL(CA_LD(o + e), vi));
		for (; e < Ev; e++)
			o[e] *= inv[r];
	}
}

static void coil_sdpa(const coil_sdpa_args *a)
{
	int64_t nb = 1;
	for (int d = 0; d < a->nbd; d++)
		nb *= a->bd[d];
	if (nb == 0 || a->L == 0 || a->Ev == 0)
		return;
	const int nt = a->nt < 1 ? 1 : a->nt;
	/* query blocks: BR rows, fewer when there are not enough tasks for the team */
	int64_t br = CA_BR;
	while (br > CA_MR && nb * ((a->L + br - 1) / br) < 4 * nt)
		br /= 2;
	int64_t nqb = (a->L + br - 1) / br, ntask = nb * nqb;
	const int64_t sp = (a->S + CA_BC - 1) / CA_BC * CA_BC, ldv = (a->Ev + CA_W - 1) / CA_W * CA_W;
	/* the sgemm path: blocks of up to 256 rows (as few as keep the team busy), of equal size */
	int64_t gbr = a->L < 256 ? a->L : 256;
	while (gbr > 16 && nb * ((a->L + gbr - 1) / gbr) < 2 * nt)
		gbr = (gbr + 1) / 2;
	const int64_t gnqb = (a->L + gbr - 1) / gbr, gemm = ca_gemm_ok(a);
	gbr = (a->L + gnqb - 1) / gnqb;
	if (gemm)
		br = gbr, nqb = gnqb, ntask = nb * gnqb;
	const int team = ntask < nt ? (int)ntask : nt;
	const int direct = a->dt == 0 && a->L <= 2;
	int failed = 0;
	/* round robin over (batch element, query block), batch-major: a thread
	 * packs each batch element's k and v once, and causal blocks of every
	 * cost spread over the team */
#pragma omp parallel num_threads(team) if (team > 1)
	{
		const int th = team > 1 ? omp_get_thread_num() : 0;
		ca_buf w;
		if (gemm) { /* sgemm one thread each (this region's setting only) */
			const int64_t lds = (a->S + 7) / 8 * 8 + 16;
			float *sb = malloc((size_t)(br * lds + br) * sizeof(float));
			omp_set_num_threads(1);
			for (int64_t t = th; sb && t < ntask; t += team) {
				const int64_t b = t / nqb, i0 = t % nqb * br, nr = a->L - i0 < br ? a->L - i0 : br;
				ca_gemm_task(a, sb, lds, b, i0, nr);
			}
			if (!sb) {
#pragma omp atomic write
				failed = 1;
			}
			free(sb);
			goto done;
		}
		const int64_t kv = direct ? 0 : sp; /* decoding reads k and v in place */
		size_t fl = (size_t)(br * a->E + a->E * (kv / CA_BC) * CA_LDK + kv * ldv + br * CA_BC + br * ldv + 2 * br) + 64 +
			    (CA_BFDP && a->dt == 1 ? (size_t)(br * CA_BC / 2) : 0) + (size_t)(sp / CA_BC) / 2 + 1;
		float *mem = malloc(fl * sizeof(float));
		if (mem) {
			w.q = mem;
			w.kt = w.q + br * a->E;
			w.v = w.kt + a->E * (kv / CA_BC) * CA_LDK;
			w.s = w.v + kv * ldv;
			w.o = w.s + br * CA_BC;
			w.m = w.o + br * ldv;
			w.l = w.m + br;
			w.p16 = (uint16_t *)(w.l + br);
			w.kfin = (uint8_t *)(w.p16 + (CA_BFDP && a->dt == 1 ? br * CA_BC : 0));
			w.vfin = w.kfin + sp / CA_BC;
			int64_t packed = -1;
			for (int64_t t = th; t < ntask; t += team) {
				const int64_t b = t / nqb, qb = t % nqb;
				const int64_t i0 = qb * br, nr = a->L - i0 < br ? a->L - i0 : br;
				if (b != packed && !direct) {
					int64_t qo, ko, vo, mo;
					ca_offsets(a, b, &qo, &ko, &vo, &mo);
					ca_pack(a, &w, ko, vo, ldv);
					packed = b;
				}
				ca_task(a, &w, b, i0, nr, ldv, direct);
			}
			free(mem);
		} else {
#pragma omp atomic write
			failed = 1;
		}
	done:;
	}
	if (failed) { /* out of memory: NaN rather than stale bytes */
		int64_t n = nb * a->L * a->Ev;
		for (int64_t i = 0; i < n; i++)
			if (a->dt == 0)
				((float *)a->out)[i] = NAN;
			else
				((uint16_t *)a->out)[i] = 0x7fc0;
	}
}

#endif
