/* ATen's UpSample.h source index and weights, shared by the interpreter
 * (common/infer.c's upsample_source) and, embedded verbatim, by artifacts
 * that compute them at run time (symbolic sizes: codegen/extern.c).  Plain
 * C with <math.h> and <stdint.h> only.
 *
 * area_pixel_compute_scale, area_pixel_compute_source_index,
 * compute_source_index_and_lambda and nearest_idx: each step rounds to the
 * opmath type (float unless dbl, an f64 tensor) where ATen's expression has
 * that type (double arithmetic then rounding to float is exact for one +,
 * -, * or /).  given: the scale factor given for this dim (> 0), else 0.
 * Output row or column i of out reads source src[0], src[1] with weights
 * w[0], w[1] (nearest: src[0] = src[1], w = {1, 0}). */
#ifndef COIL_UPSAMPLE_H
#define COIL_UPSAMPLE_H

#include <math.h>
#include <stdint.h>

static inline double coil_up_opm(int dbl, double x) { return dbl ? x : (double)(float)x; }

static inline void coil_upsample_source(int linear, int align_corners, double given, int dbl, int64_t in,
					int64_t out, int64_t i, int64_t src[2], double w[2])
{
	if (!linear) {
		/* always float: floorf(dst_index * scale), clamped */
		double s = given > 0 ? coil_up_opm(0, 1.0 / given)
				     : coil_up_opm(0, coil_up_opm(0, (double)in) / coil_up_opm(0, (double)out));
		int64_t k = (int64_t)floor(coil_up_opm(0, coil_up_opm(0, (double)i) * s));
		src[0] = src[1] = k < in - 1 ? k : in - 1;
		w[0] = 1, w[1] = 0;
		return;
	}
	if (out == in) { /* a plain copy, whatever the scale */
		src[0] = src[1] = i;
		w[0] = 1, w[1] = 0;
		return;
	}
	double s, x;
	if (align_corners)
		s = out > 1 ? coil_up_opm(dbl, coil_up_opm(dbl, (double)(in - 1)) / coil_up_opm(dbl, (double)(out - 1))) : 0;
	else
		s = given > 0 ? coil_up_opm(dbl, 1.0 / given)
			      : coil_up_opm(dbl, coil_up_opm(dbl, (double)in) / coil_up_opm(dbl, (double)out));
	if (align_corners) {
		x = coil_up_opm(dbl, s * coil_up_opm(dbl, (double)i));
	} else {
		x = coil_up_opm(dbl, s * ((double)i + 0.5) - 0.5); /* computed in double, as in ATen */
		x = x < 0 ? 0 : x;
	}
	int64_t k = (int64_t)x;
	k = k < in - 1 ? k : in - 1;
	src[0] = k;
	src[1] = k + (k < in - 1);
	/* With align_corners, ATen's compiled kernel fuses scale * i - k into one
	 * fused multiply-add: the weight sees the unrounded product. */
	double l1 = !align_corners ? coil_up_opm(dbl, x - (double)k)
		    : dbl ? fma(s, (double)i, -(double)k) : (double)fmaf((float)s, (float)i, -(float)k);
	l1 = l1 < 0 ? 0 : l1 > 1 ? 1 : l1;
	w[0] = coil_up_opm(dbl, 1 - l1);
	w[1] = l1;
}

#endif
