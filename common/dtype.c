#include "common/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
	const char *name, *st;
	size_t size;
	int cat;
} info[] = {
#define X(e, n, s, st, c) {n, st, s, c},
	COIL_DTYPES(X)
#undef X
};

const char *dtype_name(coil_dtype t)
{
	return (unsigned)t < COIL_NDTYPES ? info[t].name : "?";
}

const char *dtype_st_name(coil_dtype t)
{
	return (unsigned)t < COIL_NDTYPES ? info[t].st : "?";
}

int dtype_parse(const char *s)
{
	for (int i = 0; i < COIL_NDTYPES; i++)
		if (!strcmp(s, info[i].name))
			return i;
	return -1;
}

int dtype_parse_st(const char *s)
{
	for (int i = 0; i < COIL_NDTYPES; i++)
		if (!strcmp(s, info[i].st))
			return i;
	return -1;
}

size_t dtype_size(coil_dtype t)
{
	return info[t].size;
}

int dtype_is_float(coil_dtype t)
{
	return info[t].cat == 2;
}

int dtype_is_int(coil_dtype t)
{
	return info[t].cat == 1;
}

int dtype_promote(coil_dtype a, coil_dtype b)
{
	if (a == b)
		return a;
	if (a == COIL_BOOL)
		return b;
	if (b == COIL_BOOL)
		return a;
	int fa = dtype_is_float(a), fb = dtype_is_float(b);
	if (fa && !fb)
		return a;
	if (fb && !fa)
		return b;
	if (fa) { /* both float */
		if (a == COIL_F64 || b == COIL_F64)
			return COIL_F64;
		return COIL_F32; /* f32 with a half type, or bf16 with f16 */
	}
	/* both integral */
	if ((a == COIL_U8 && b == COIL_I8) || (a == COIL_I8 && b == COIL_U8))
		return -1; /* int16 */
	static const int rank[COIL_NDTYPES] = {[COIL_U8] = 1, [COIL_I8] = 1, [COIL_I32] = 3,
					       [COIL_I64] = 4};
	return rank[a] >= rank[b] ? a : b;
}

double dtype_round(coil_dtype t, double v)
{
	switch (t) {
	case COIL_F32: return (float)v;
	case COIL_BF16: return bf16_to_f32(f32_to_bf16((float)v));
	case COIL_F16: return f16_to_f32(f32_to_f16((float)v));
	default: return v;
	}
}

float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (isnan(f))
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float f;
	if (e == 0) {
		f = ldexpf((float)m, -24);
		return s ? -f : f;
	}
	uint32_t u = e == 31 ? s | 0x7f800000 | (m << 13) : s | ((e + 112) << 23) | (m << 13);
	memcpy(&f, &u, 4);
	return f;
}

uint16_t f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t s = (uint16_t)((u >> 16) & 0x8000);
	float a = fabsf(f);
	if (isnan(f))
		return s | 0x7e00;
	if (a >= 65520.0f)
		return s | 0x7c00; /* rounds to infinity */
	if (a < 6.103515625e-05f) {  /* subnormal: multiples of 2^-24, round half even */
		float q = a * 16777216.0f;
		return s | (uint16_t)nearbyintf(q);
	}
	uint32_t e = ((u >> 23) & 0xff) - 112, m = u & 0x7fffff;
	uint32_t h = (e << 10) | (m >> 13), rest = m & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++;
	return s | (uint16_t)h;
}

static int64_t to_int(double v, double lo, double hi)
{
	if (isnan(v))
		return 0;
	v = trunc(v);
	return (int64_t)(v < lo ? lo : v > hi ? hi : v);
}

double dtype_load(coil_dtype t, const void *p, size_t i)
{
	switch (t) {
	case COIL_F32: return ((const float *)p)[i];
	case COIL_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
	case COIL_F16: return f16_to_f32(((const uint16_t *)p)[i]);
	case COIL_F64: return ((const double *)p)[i];
	case COIL_I64: return (double)((const int64_t *)p)[i];
	case COIL_I32: return ((const int32_t *)p)[i];
	case COIL_I8: return ((const int8_t *)p)[i];
	case COIL_U8: return ((const uint8_t *)p)[i];
	case COIL_BOOL: return ((const uint8_t *)p)[i] != 0;
	default: return 0;
	}
}

void dtype_store(coil_dtype t, void *p, size_t i, double v)
{
	switch (t) {
	case COIL_F32: ((float *)p)[i] = (float)v; break;
	case COIL_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
	case COIL_F16: ((uint16_t *)p)[i] = f32_to_f16((float)v); break;
	case COIL_F64: ((double *)p)[i] = v; break;
	case COIL_I64: ((int64_t *)p)[i] = to_int(v, -9.2233720368547758e18, 9.2233720368547748e18); break;
	/* Like ATen, integer results wrap modulo 2^bits (i64 saturates: a double
	 * cannot hold it exactly anyway). */
	case COIL_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)to_int(v, -9.2233720368547758e18, 9.2233720368547748e18); break;
	case COIL_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)to_int(v, -9e18, 9e18); break;
	case COIL_U8: ((uint8_t *)p)[i] = (uint8_t)to_int(v, -9e18, 9e18); break;
	case COIL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
	default: break;
	}
}
