/* Targets: named CPU feature sets and the compiler flags they mean.  A cached
 * artifact is always built for a named set, never -march=native.
 *
 * Each target needs a set of features (the ones that change what coil's C or
 * oneDNN's code may use: the x86-64-v3 and -v4 levels, AVX-512 VNNI, BF16 and
 * FP16, AVX-VNNI, AMX tiles); code built for it runs on a CPU that has all of
 * them.  COIL_CPU_MASK (environment, read at every check) names features to
 * pretend this CPU lacks, comma-separated: "avx512_bf16,amx" (tests sweep it;
 * oneDNN's own dispatch inside a loaded artifact is not affected). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"


static const struct feature {
	unsigned bit;
	const char *name;
} features[] = {
	{F_AVX2, "avx2"},           {F_AVX512, "avx512"},     {F_AVX512_VNNI, "avx512_vnni"},
	{F_AVX512_BF16, "avx512_bf16"}, {F_AVX512_FP16, "avx512_fp16"}, {F_AVX_VNNI, "avx_vnni"},
	{F_AMX, "amx"},
};
#define NFEATURES (sizeof features / sizeof *features)

#define V4 (F_AVX2 | F_AVX512)
#define SPR (V4 | F_AVX512_VNNI | F_AVX512_BF16 | F_AVX512_FP16 | F_AVX_VNNI)
#define SPR_FLAGS "-march=x86-64-v4 -mavx512vnni -mavx512bf16 -mavx512fp16 -mavxvnni"

/* Most portable first; "native" is the last one this CPU runs. */
static const coil_target targets[] = {
	{"generic", "-march=x86-64", 0},
	{"x86-64-v3", "-march=x86-64-v3", F_AVX2},
	{"avx_vnni", "-march=x86-64-v3 -mavxvnni", F_AVX2 | F_AVX_VNNI},
	{"x86-64-v4", "-march=x86-64-v4", V4},
	{"avx512_vnni", "-march=x86-64-v4 -mavx512vnni", V4 | F_AVX512_VNNI},
	{"avx512_bf16", "-march=x86-64-v4 -mavx512vnni -mavx512bf16", V4 | F_AVX512_VNNI | F_AVX512_BF16},
	{"avx512_fp16", SPR_FLAGS, SPR},
	{"amx", SPR_FLAGS " -mamx-tile -mamx-bf16 -mamx-int8", SPR | F_AMX},
};
#define NTARGETS ((int)(sizeof targets / sizeof *targets))

#if defined(__x86_64__)
#include <cpuid.h>
/* This CPU's features (cpuid and the OS's xsave state), unmasked. */
static unsigned detect(void)
{
	unsigned a, b, c, d, b7 = 0, c7 = 0, d7 = 0, a71 = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	int osxsave = c >> 27 & 1, avx = c >> 28 & 1, fma = c >> 12 & 1, movbe = c >> 22 & 1;
	unsigned long long xcr0 = 0;
	if (osxsave) {
		unsigned lo, hi;
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		xcr0 = ((unsigned long long)hi << 32) | lo;
	}
	if (__get_cpuid_max(0, NULL) >= 7) {
		__cpuid_count(7, 0, a, b7, c7, d7);
		__cpuid_count(7, 1, a71, b, c, d);
	}
	int ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6, tiles = (xcr0 & 0x60000) == 0x60000;
	int avx2 = b7 >> 5 & 1, bmi1 = b7 >> 3 & 1, bmi2 = b7 >> 8 & 1;
	unsigned f = 0;
	if (avx && ymm && avx2 && fma && bmi1 && bmi2 && movbe)
		f |= F_AVX2;
	if ((f & F_AVX2) && zmm && (b7 >> 16 & 1) && (b7 >> 17 & 1) && (b7 >> 28 & 1) && (b7 >> 30 & 1) &&
	    (b7 >> 31 & 1))
		f |= F_AVX512;
	if ((f & F_AVX512) && (c7 >> 11 & 1))
		f |= F_AVX512_VNNI;
	if ((f & F_AVX512) && (a71 >> 5 & 1))
		f |= F_AVX512_BF16;
	if ((f & F_AVX512) && (d7 >> 23 & 1))
		f |= F_AVX512_FP16;
	if ((f & F_AVX2) && (a71 >> 4 & 1))
		f |= F_AVX_VNNI;
	if (tiles && (d7 >> 24 & 1) && (d7 >> 22 & 1) && (d7 >> 25 & 1))
		f |= F_AMX;
	return f;
}
#else
static unsigned detect(void) { return 0; }
#endif

/* The features COIL_CPU_MASK names (unknown names are ignored). */
static unsigned env_mask(void)
{
	const char *m = getenv("COIL_CPU_MASK");
	unsigned mask = 0;
	while (m && *m) {
		size_t n = strcspn(m, ", ");
		for (size_t i = 0; i < NFEATURES; i++)
			if (strlen(features[i].name) == n && !strncmp(m, features[i].name, n))
				mask |= features[i].bit;
		m += n;
		m += strspn(m, ", ");
	}
	return mask;
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static unsigned cpu;
static void detect_once(void)
{
	cpu = detect();
}

unsigned target_cpu_features(void)
{
	pthread_once(&cpu_once, detect_once);
	return cpu & ~env_mask();
}

int target_feature_masked(const char *feature)
{
	pthread_once(&cpu_once, detect_once);
	for (size_t i = 0; i < NFEATURES; i++)
		if (!strcmp(features[i].name, feature))
			return (cpu & env_mask() & features[i].bit) != 0;
	return 0;
}

static const coil_target *native(void)
{
	unsigned have = target_cpu_features();
	for (int i = NTARGETS - 1; i > 0; i--)
		if (!(targets[i].features & ~have))
			return &targets[i];
	return &targets[0];
}

const coil_target *target_get(const char *name, coil_err *err)
{
	if (!strcmp(name, "native"))
		return native();
	for (int i = 0; i < NTARGETS; i++)
		if (!strcmp(targets[i].name, name))
			return &targets[i];
	coil_err_input(err, "unknown target '%.64s' (native, generic, x86-64-v3, avx_vnni, x86-64-v4, avx512_vnni, "
			    "avx512_bf16, avx512_fp16, amx)", name);
	return NULL;
}

int target_runs_here(const char *name)
{
	coil_err err;
	const coil_target *t = target_get(name, &err);
	return t && !(t->features & ~target_cpu_features());
}

const char *target_missing(const char *name)
{
	coil_err err;
	const coil_target *t = target_get(name, &err);
	unsigned lack = t ? t->features & ~target_cpu_features() : 0;
	for (size_t i = 0; i < NFEATURES; i++)
		if (lack & features[i].bit)
			return features[i].name;
	return NULL;
}

void target_feature_list(const coil_target *t, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; i < NFEATURES; i++)
		if (t->features & features[i].bit) {
			int n = snprintf(buf + used, cap - used, "%s%s", used ? "," : "", features[i].name);
			if (n < 0 || (size_t)n >= cap - used)
				return;
			used += (size_t)n;
		}
}

int target_count(void)
{
	return NTARGETS;
}

const coil_target *target_at(int i)
{
	return i >= 0 && i < target_count() ? &targets[i] : NULL;
}
