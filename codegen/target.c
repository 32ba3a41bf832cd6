/* Targets: named CPU feature sets and the compiler flags they mean.  A cached
 * artifact is always built for a named set, never -march=native. */
#include <string.h>

#include "codegen/codegen.h"

static const coil_target targets[] = {
	{"generic", "-march=x86-64"},
	{"x86-64-v3", "-march=x86-64-v3"},
	{"x86-64-v4", "-march=x86-64-v4"},
	{"avx512_vnni", "-march=x86-64-v4 -mavx512vnni"},
	{"avx512_bf16", "-march=x86-64-v4 -mavx512vnni -mavx512bf16"},
};

#if defined(__x86_64__)
#include <cpuid.h>
/* The best named target this CPU runs (cpuid and the OS's xsave state). */
static const coil_target *detect(void)
{
	unsigned a, b, c, d, b7 = 0, c7 = 0, a71 = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return &targets[0];
	int osxsave = c >> 27 & 1, avx = c >> 28 & 1, fma = c >> 12 & 1, movbe = c >> 22 & 1;
	unsigned long long xcr0 = 0;
	if (osxsave) {
		unsigned lo, hi;
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		xcr0 = ((unsigned long long)hi << 32) | lo;
	}
	if (__get_cpuid_max(0, NULL) >= 7) {
		__cpuid_count(7, 0, a, b7, c7, d);
		__cpuid_count(7, 1, a71, b, c, d);
	}
	int ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
	int avx2 = b7 >> 5 & 1, bmi1 = b7 >> 3 & 1, bmi2 = b7 >> 8 & 1;
	int v3 = avx && ymm && avx2 && fma && bmi1 && bmi2 && movbe;
	int v4 = v3 && zmm && (b7 >> 16 & 1) && (b7 >> 17 & 1) && (b7 >> 28 & 1) && (b7 >> 30 & 1) && (b7 >> 31 & 1);
	int vnni = v4 && (c7 >> 11 & 1), bf16 = vnni && (a71 >> 5 & 1);
	return bf16 ? &targets[4] : vnni ? &targets[3] : v4 ? &targets[2] : v3 ? &targets[1] : &targets[0];
}
#else
static const coil_target *detect(void) { return &targets[0]; }
#endif

const coil_target *target_get(const char *name, coil_err *err)
{
	if (!strcmp(name, "native"))
		return detect();
	for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
		if (!strcmp(targets[i].name, name))
			return &targets[i];
	coil_err_input(err, "unknown target '%.64s' (native, generic, x86-64-v3, x86-64-v4, avx512_vnni, avx512_bf16)", name);
	return NULL;
}

/* Targets form a chain, each adding features to the one before it: code built
 * for a target runs on any CPU whose best target comes at or after it. */
static int target_index(const coil_target *t)
{
	return (int)(t - targets);
}

int target_runs_here(const char *name)
{
	coil_err err;
	const coil_target *t = target_get(name, &err);
	return t && target_index(t) <= target_index(detect());
}

int target_count(void)
{
	return (int)(sizeof targets / sizeof *targets);
}

const coil_target *target_at(int i)
{
	return i >= 0 && i < target_count() ? &targets[i] : NULL;
}
