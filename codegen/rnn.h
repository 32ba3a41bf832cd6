/* rnn: LSTM, GRU and Elman RNN (tanh, relu) inference for generated code
 * (f32).  codegen/emit_abi.c embeds this file into an artifact that has a
 * coil.lstm, coil.gru, coil.rnn_tanh or coil.rnn_relu node; codegen/extern.c
 * renders each as one coil_rnn call.
 *
 * As PyTorch computes them (gate order i, f, g, o; r, z, n), per layer and
 * direction: the input projection of every step at once, x W_ih^T + b_ih
 * (one GEMM, oneDNN's sgemm), then step by step h W_hh^T + b_hh (a GEMM of
 * the batch's rows) and the gates:
 *   LSTM  c = sigmoid(f) c + sigmoid(i) tanh(g),  h = sigmoid(o) tanh(c)
 *   GRU   n = tanh(x_n + sigmoid(r) (h W_hn^T + b_hn)),  h = (1 - z) n + z h
 *   RNN   h = tanh (or relu) of the sum
 * The reverse direction walks the steps backwards; a layer's output (both
 * directions side by side) is the next layer's input.  Scratch: the gates of
 * every step and two layer outputs, freed before return. */
#ifndef COIL_RNN_H
#define COIL_RNN_H

#include <oneapi/dnnl/dnnl.h>

/* p[0..n) = sigmoid(p) (or tanh), vmath's vector functions where the target has them. */
static inline void coil_rnn_act(float *p, int64_t n, int tanh_)
{
	int64_t i = 0;
#if defined(__AVX512F__)
	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_loadu_ps(p + i);
		_mm512_storeu_ps(p + i, tanh_ ? coil_tanh16(v) : coil_sigmoid16(v));
	}
#elif defined(__AVX2__)
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(p + i);
		_mm256_storeu_ps(p + i, tanh_ ? coil_tanh8(v) : coil_sigmoid8(v));
	}
#endif
	for (; i < n; i++)
		p[i] = tanh_ ? coil_tanhf(p[i]) : coil_sigmoidf(p[i]);
}

/* kind: 0 LSTM, 1 GRU, 2 RNN tanh, 3 RNN relu.  0, or -1 when out of memory.
 * x: [T, B, I] ([B, T, I] when batch_first); h0: [L*D, B, HO] (HO = P with an
 * LSTM projection, else H), c0 (LSTM): [L*D, B, H]; w: per layer and
 * direction w_ih, w_hh (and b_ih, b_hh when bias; w_hr [P, H] last when P);
 * len: NULL, or each sequence's steps (1..T): later steps are padding, their
 * output 0 and the state left as it was (the reverse direction starts at the
 * sequence's last step); out: like x with D*HO features; hn (cn): like h0 (c0). */
static int coil_rnn(int kind, const float *x, int64_t T, int64_t B, int64_t I, int batch_first, const float *h0,
		    const float *c0, const float *const *w, int bias, int L, int D, int64_t H, int64_t P,
		    const int64_t *len, float *out, float *hn, float *cn)
{
	const int gru = kind == 1, elman = kind >= 2;
	const int64_t G = kind == 0 ? 4 : gru ? 3 : 1, GH = G * H, HO = P ? P : H, DH = D * HO, rows = T * B;
	float *gx = malloc((size_t)(rows * GH + 1) * sizeof *gx);
	float *gh = malloc((size_t)(B * GH + 1) * sizeof *gh);
	/* h [B, HO], c [B, H], and with a projection o * tanh(c) [B, H] and its product [B, P] */
	float *hc = calloc((size_t)(B * HO + B * H + (P ? B * H + B * P : 0) + 1), sizeof *hc);
	float *buf[2] = {L > 1 ? malloc((size_t)(rows * DH + 1) * sizeof(float)) : NULL,
			 L > 2 ? malloc((size_t)(rows * DH + 1) * sizeof(float)) : NULL};
	if (!gx || !gh || !hc || (L > 1 && !buf[0]) || (L > 2 && !buf[1])) {
		free(gx), free(gh), free(hc), free(buf[0]), free(buf[1]);
		return -1;
	}
	const float *in = x;
	int64_t in_f = I;
	for (int l = 0; l < L; l++) {
		float *y = l == L - 1 ? out : buf[l % 2];
		for (int d = 0; d < D; d++) {
			const int k = l * D + d, np = (bias ? 4 : 2) + (P ? 1 : 0);
			const float *wih = w[k * np], *whh = w[k * np + 1], *bih = bias ? w[k * np + 2] : NULL,
				    *bhh = bias ? w[k * np + 3] : NULL, *whr = P ? w[k * np + np - 1] : NULL;
			float *h = hc, *c = hc + B * HO, *hf = c + B * H, *hp = hf + B * H;
			memcpy(h, h0 + k * B * HO, (size_t)(B * HO) * sizeof *h);
			if (kind == 0)
				memcpy(c, c0 + k * B * H, (size_t)(B * H) * sizeof *c);
			/* every step's input projection: rows in x's order */
			dnnl_sgemm('N', 'T', rows, GH, in_f, 1.0f, in, in_f, wih, in_f, 0.0f, gx, GH);
			for (int64_t s = 0; s < T; s++) {
				const int64_t t = d ? T - 1 - s : s;
				dnnl_sgemm('N', 'T', B, GH, HO, 1.0f, h, HO, whh, HO, 0.0f, gh, GH);
				for (int64_t b = 0; b < B; b++) {
					if (len && t >= len[b])
						continue;
					const int64_t r = batch_first ? b * T + t : t * B + b;
					const float *a = gx + r * GH;
					float *e = gh + b * GH, *hb = (P ? hf : h) + b * H, *cb = c + b * H;
					if (elman) {
						for (int64_t j = 0; j < H; j++) {
							const float v = e[j] + a[j] + (bih ? bih[j] : 0.0f) + (bhh ? bhh[j] : 0.0f);
							hb[j] = kind == 2 ? v : v > 0.0f || v != v ? v : 0.0f;
						}
						if (kind == 2)
							coil_rnn_act(hb, H, 1);
					} else if (gru) { /* r, z: x + h parts; n: x part + r * h part */
						for (int64_t q = 0; q < 2 * H; q++)
							e[q] += a[q] + (bih ? bih[q] : 0.0f) + (bhh ? bhh[q] : 0.0f);
						coil_rnn_act(e, 2 * H, 0);
						for (int64_t j = 0; j < H; j++)
							e[2 * H + j] = a[2 * H + j] + (bih ? bih[2 * H + j] : 0.0f) +
								       e[j] * (e[2 * H + j] + (bhh ? bhh[2 * H + j] : 0.0f));
						coil_rnn_act(e + 2 * H, H, 1);
						for (int64_t j = 0; j < H; j++)
							hb[j] = (1.0f - e[H + j]) * e[2 * H + j] + e[H + j] * hb[j];
					} else { /* i, f, o: sigmoid; g: tanh */
						for (int64_t q = 0; q < GH; q++)
							e[q] += a[q] + (bih ? bih[q] : 0.0f) + (bhh ? bhh[q] : 0.0f);
						coil_rnn_act(e, 2 * H, 0);
						coil_rnn_act(e + 2 * H, H, 1);
						coil_rnn_act(e + 3 * H, H, 0);
						for (int64_t j = 0; j < H; j++)
							cb[j] = e[H + j] * cb[j] + e[j] * e[2 * H + j];
						memcpy(hb, cb, (size_t)H * sizeof *hb);
						coil_rnn_act(hb, H, 1);
						for (int64_t j = 0; j < H; j++)
							hb[j] *= e[3 * H + j];
					}
				}
				if (P) { /* h = (o * tanh c) w_hr^T for the rows that stepped */
					dnnl_sgemm('N', 'T', B, P, H, 1.0f, hf, H, whr, H, 0.0f, hp, P);
					for (int64_t b = 0; b < B; b++)
						if (!len || t < len[b])
							memcpy(h + b * P, hp + b * P, (size_t)P * sizeof *h);
				}
				for (int64_t b = 0; b < B; b++) {
					const int64_t r = batch_first ? b * T + t : t * B + b;
					if (len && t >= len[b])
						memset(y + r * DH + d * HO, 0, (size_t)HO * sizeof *y);
					else
						memcpy(y + r * DH + d * HO, h + b * HO, (size_t)HO * sizeof *h);
				}
			}
			memcpy(hn + k * B * HO, h, (size_t)(B * HO) * sizeof *h);
			if (kind == 0)
				memcpy(cn + k * B * H, c, (size_t)(B * H) * sizeof *c);
		}
		in = y;
		in_f = DH;
	}
	free(gx), free(gh), free(hc), free(buf[0]), free(buf[1]);
	return 0;
}

#endif
