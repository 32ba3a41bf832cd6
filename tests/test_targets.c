/* Target safety: the feature-mask sweep.  One small graph is built for every
 * named target (whether this CPU runs it or not: building needs no CPU
 * feature), then, for each of a set of COIL_CPU_MASK values (features the CPU
 * is made to seem to lack), every artifact is loaded through the CLI's path
 * (artifact_open) and libcoil's (coil_module_open): each load must succeed
 * and run exactly when the CPU (from /proc/cpuinfo, read here independently
 * of codegen/target.c's cpuid) less the mask has every feature the target
 * needs, and otherwise be refused before dlopen with a message naming the
 * first missing feature.  Nothing may crash (an artifact run on a CPU that
 * lacks its features would die of SIGILL).  Also: "native" under each mask,
 * and the cache key's oneDNN version. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ftw.h>

#include <cmocka.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "client/artifact.h"
#include "codegen/codegen.h"
#include "coil/coil.h"

static const char GRAPH[] = "{\"format\": \"coil-graph\", \"version\": 1,"
			    " \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [8]}],"
			    " \"nodes\": [{\"id\": \"n\", \"op\": \"aten.neg\", \"args\": [\"x\"], \"outputs\": [\"y\"]}],"
			    " \"outputs\": [\"y\"]}";

/* This test's own table: each feature as /proc/cpuinfo's flags, in the order
 * refusals name them, and what each target needs. */
static const struct {
	const char *name, *flags[6];
} FEATS[] = {
	{"avx2", {"avx", "avx2", "fma", "bmi1", "bmi2", "movbe"}},
	{"avx512", {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}},
	{"avx512_vnni", {"avx512_vnni"}},
	{"avx512_bf16", {"avx512_bf16"}},
	{"avx512_fp16", {"avx512_fp16"}},
	{"avx_vnni", {"avx_vnni"}},
	{"amx", {"amx_tile", "amx_bf16", "amx_int8"}},
};
#define NF (sizeof FEATS / sizeof *FEATS)

static const struct {
	const char *name;
	const char *needs;   /* feature names, comma-separated */
} TARGETS[] = {
	{"generic", ""},
	{"x86-64-v3", "avx2"},
	{"avx_vnni", "avx2,avx_vnni"},
	{"x86-64-v4", "avx2,avx512"},
	{"avx512_vnni", "avx2,avx512,avx512_vnni"},
	{"avx512_bf16", "avx2,avx512,avx512_vnni,avx512_bf16"},
	{"avx512_fp16", "avx2,avx512,avx512_vnni,avx512_bf16,avx512_fp16,avx_vnni"},
	{"amx", "avx2,avx512,avx512_vnni,avx512_bf16,avx512_fp16,avx_vnni,amx"},
};
#define NT (sizeof TARGETS / sizeof *TARGETS)

static const char *MASKS[] = {
	"", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx",
	"avx512_bf16,avx512_vnni", "avx512_fp16,amx", "avx512_bf16 amx", "not-a-feature",
};
#define NM (sizeof MASKS / sizeof *MASKS)

static char dir[64];
static char paths[NT][CACHE_PATH_MAX], shas[NT][65];
static int cpu[NF]; /* this CPU has feature i (cpuinfo) */

static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		size_t k = strcspn(p, ", ");
		if (k == n && !strncmp(p, name, n))
			return 1;
		p += k;
		p += strspn(p, ", ");
	}
	return 0;
}

static void read_cpuinfo(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	assert_non_null(f);
	static char line[1 << 16];
	char flags[1 << 16] = " ";
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "flags", 5)) {
			snprintf(flags, sizeof flags, " %s", strchr(line, ':') + 1);
			flags[strcspn(flags, "\n")] = ' ';
			break;
		}
	fclose(f);
	for (size_t i = 0; i < NF; i++) {
		cpu[i] = 1;
		for (int j = 0; j < 6 && FEATS[i].flags[j]; j++) {
			char w[40];
			snprintf(w, sizeof w, " %s ", FEATS[i].flags[j]);
			cpu[i] &= strstr(flags, w) != NULL;
		}
	}
}

/* The first feature target t needs that the CPU less mask lacks, or NULL. */
static const char *expected_missing(size_t t, const char *mask)
{
	for (size_t i = 0; i < NF; i++)
		if (in_list(TARGETS[t].needs, FEATS[i].name) && (!cpu[i] || in_list(mask, FEATS[i].name)))
			return FEATS[i].name;
	return NULL;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	(void)state;
	unsetenv("COIL_CPU_MASK");
	unsetenv("COIL_TRUSTED_KEYS");
	unsetenv("COIL_TRUSTED_KEYS_FILE");
	read_cpuinfo();
	snprintf(dir, sizeof dir, "/tmp/coil-targets-XXXXXX");
	assert_non_null(mkdtemp(dir));
	coil_cache *c;
	coil_err err = {0};
	if (cache_open(dir, 0, &c, &err))
		fail_msg("cache: %s", err.msg);
	assert_int_equal(target_count(), (int)NT);
	for (size_t t = 0; t < NT; t++) {
		assert_string_equal(target_at((int)t)->name, TARGETS[t].name);
		compile_opts o = {.target = TARGETS[t].name, .opt_level = 0};
		compile_result r;
		if (cache_compile(c, GRAPH, strlen(GRAPH), &o, &r, &err))
			fail_msg("compile for %s: %s", TARGETS[t].name, err.msg);
		assert_string_equal(r.target, TARGETS[t].name);
		snprintf(paths[t], sizeof paths[t], "%s", r.path);
		memcpy(shas[t], r.sha256, 65);
	}
	cache_close(c);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("COIL_CPU_MASK");
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* Runs a loaded artifact of GRAPH: y = -x. */
static void run_neg(coil_artifact *a)
{
	coil_model *m;
	if (a->create(NULL, 0, 1, &m))
		fail_msg("create: %s", a->last_error());
	float x[8], y[8];
	for (int i = 0; i < 8; i++)
		x[i] = (float)i - 3.5f;
	int64_t shape[1] = {8};
	const int64_t *shapes[1] = {shape};
	const void *in[1] = {x};
	void *out[1] = {y};
	assert_int_equal(a->run(m, in, shapes, out), 0);
	for (int i = 0; i < 8; i++)
		assert_true(y[i] == -x[i]);
	a->destroy(m);
}

static void test_mask_sweep(void **state)
{
	(void)state;
	int loads = 0, refusals = 0;
	for (size_t k = 0; k < NM; k++) {
		setenv("COIL_CPU_MASK", MASKS[k], 1);
		/* native: the last target with everything it needs */
		size_t best = 0;
		for (size_t t = 0; t < NT; t++)
			if (!expected_missing(t, MASKS[k]))
				best = t;
		coil_err err = {0};
		const coil_target *nat = target_get("native", &err);
		if (strcmp(nat->name, TARGETS[best].name))
			fail_msg("mask '%s': native is %s, expected %s", MASKS[k], nat->name, TARGETS[best].name);
		for (size_t t = 0; t < NT; t++) {
			const char *lack = expected_missing(t, MASKS[k]);
			assert_int_equal(target_runs_here(TARGETS[t].name), lack == NULL);
			assert_int_equal(coil_target_supported(TARGETS[t].name), lack == NULL);
			/* the CLI's path */
			coil_artifact *a = NULL;
			int rc = artifact_open(paths[t], &a, &err);
			/* libcoil's */
			coil_module *m = NULL;
			int rc2 = coil_module_open(paths[t], shas[t], TARGETS[t].name, &m);
			if (!lack) {
				if (rc)
					fail_msg("mask '%s': %s refused: %s", MASKS[k], TARGETS[t].name, err.msg);
				if (rc2)
					fail_msg("mask '%s': libcoil refused %s: %s", MASKS[k], TARGETS[t].name,
						 coil_last_error());
				run_neg(a);
				artifact_close(a);
				coil_module_close(m);
				loads++;
				continue;
			}
			char want[96];
			snprintf(want, sizeof want, "which needs %s: this CPU lacks it", lack);
			if (rc == 0 || !strstr(err.msg, want) || !strstr(err.msg, TARGETS[t].name))
				fail_msg("mask '%s': %s: expected a refusal naming %s, got rc %d '%s'", MASKS[k],
					 TARGETS[t].name, lack, rc, rc ? err.msg : "");
			if (rc2 == 0 || !strstr(coil_last_error(), want))
				fail_msg("mask '%s': libcoil, %s: expected a refusal naming %s, got rc %d '%s'", MASKS[k],
					 TARGETS[t].name, lack, rc2, rc2 ? coil_last_error() : "");
			/* a mask hiding what the CPU has says so */
			int masked = 0;
			for (size_t i = 0; i < NF; i++)
				masked |= !strcmp(FEATS[i].name, lack) && cpu[i];
			assert_int_equal(strstr(err.msg, "(COIL_CPU_MASK)") != NULL, masked);
			refusals++;
		}
	}
	unsetenv("COIL_CPU_MASK");
	print_message("# %zu masks x %zu targets: %d loaded and run, %d refused before dlopen\n", NM, NT, loads,
		      refusals);
	assert_true(loads > 0 && refusals > 0);
}

/* The key names oneDNN's version: another oneDNN, another key. */
static void test_key_has_dnnl(void **state)
{
	(void)state;
	coil_err err = {0};
	compile_plan *p;
	compile_opts o = {.target = "generic", .opt_level = 2};
	assert_int_equal(compile_plan_make(GRAPH, strlen(GRAPH), &o, &p, &err), 0);
	char k1[65], k2[65];
	assert_int_equal(compile_key(p->graph_hash, "generic", compile_compiler_identity(), compile_codegen_version(),
				     compile_dnnl_version(), 2, COIL_F32, 0, 0, k1, &err), 0);
	assert_string_equal(k1, p->key);
	assert_int_equal(compile_key(p->graph_hash, "generic", compile_compiler_identity(), compile_codegen_version(),
				     "0.0.0+other", 2, COIL_F32, 0, 0, k2, &err), 0);
	assert_string_not_equal(k1, k2);
	assert_non_null(strchr(compile_dnnl_version(), '.'));
	/* native is never a key's target */
	assert_int_equal(compile_key(p->graph_hash, "native", "cc", "cg", "d", 2, COIL_F32, 0, 0, k2, &err), -1);
	compile_plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mask_sweep),
		cmocka_unit_test(test_key_has_dnnl),
	};
	return cmocka_run_group_tests_name("targets", tests, setup, teardown);
}
