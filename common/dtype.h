/* Element types.  Every dtype is first-class: the graph, the interpreter and
 * the codegen all go through this table. */
#ifndef COIL_DTYPE_H
#define COIL_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* X(ENUM, name, size, safetensors name, category) ; category: 0 bool, 1 int, 2 float */
#define COIL_DTYPES(X)                      \
	X(F32, "f32", 4, "F32", 2)          \
	X(BF16, "bf16", 2, "BF16", 2)       \
	X(F16, "f16", 2, "F16", 2)          \
	X(F64, "f64", 8, "F64", 2)          \
	X(I64, "i64", 8, "I64", 1)          \
	X(I32, "i32", 4, "I32", 1)          \
	X(I8, "i8", 1, "I8", 1)             \
	X(U8, "u8", 1, "U8", 1)             \
	X(BOOL, "bool", 1, "BOOL", 0)

typedef enum coil_dtype {
#define X(e, n, s, st, c) COIL_##e,
	COIL_DTYPES(X)
#undef X
	COIL_NDTYPES,
	COIL_DTYPE_NONE = -1
} coil_dtype;

const char *dtype_name(coil_dtype t);
const char *dtype_st_name(coil_dtype t);      /* safetensors spelling */
int dtype_parse(const char *s);                /* -1 if unknown */
int dtype_parse_st(const char *s);
size_t dtype_size(coil_dtype t);
int dtype_is_float(coil_dtype t);
int dtype_is_int(coil_dtype t);                /* integral, not bool */
/* bf16 or f16: a storage type, computed in f32 (codegen). */
static inline int dtype_is_half(coil_dtype t) { return t == COIL_BF16 || t == COIL_F16; }
/* v rounded to t where t is narrower than double (f32, bf16, f16). */
double dtype_round(coil_dtype t, double v);

/* ATen's promote_types; returns -1 where ATen would need a dtype coil lacks (int16). */
int dtype_promote(coil_dtype a, coil_dtype b);

/* The element at index i of a buffer of type t, widened to double; and back,
 * with ATen's conversion rules (floats round to nearest even, float to int
 * truncates toward zero, anything non-zero is true). */
double dtype_load(coil_dtype t, const void *p, size_t i);
void dtype_store(coil_dtype t, void *p, size_t i, double v);

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

#endif
