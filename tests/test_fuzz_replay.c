/* Replays the fuzzers' corpus (tests/fuzz/corpus/NAME) and every crash they
 * ever found (tests/fuzz/regress/NAME) through the same targets, built with
 * gcc: each input must pass the target's invariants without crashing.  Run
 * from the repository root (as tests/run.sh does).  Finding new inputs is
 * `make fuzz`'s job (libFuzzer, clang); see tests/fuzz/README.md. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tests/fuzz/fuzz.h"

#define FUZZ_DIR "tests/fuzz"

typedef int (*target_fn)(const uint8_t *, size_t);

/* Feed every file under dir to fn; returns how many. */
static int replay_dir(const char *dir, target_fn fn, int verbose)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			fail_msg("%s: %s", path, strerror(errno));
		struct stat st;
		assert_int_equal(fstat(fileno(f), &st), 0);
		uint8_t *buf = malloc((size_t)st.st_size + 1);
		assert_non_null(buf);
		assert_int_equal(fread(buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
		fclose(f);
		if (verbose)
			print_message("# replaying %s\n", path);
		fn(buf, (size_t)st.st_size);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

static void replay(const char *name, target_fn fn)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/corpus/%s", FUZZ_DIR, name);
	int corpus = replay_dir(dir, fn, 0);
	snprintf(dir, sizeof dir, "%s/regress/%s", FUZZ_DIR, name);
	int regress = replay_dir(dir, fn, 1);
	print_message("# %s: %d corpus inputs, %d regressions replayed\n", name, corpus, regress);
	if (corpus == 0)
		fail_msg("no corpus for %s under %s/corpus (run from the repository root)", name, FUZZ_DIR);
}

static void test_graph_corpus(void **state)
{
	(void)state;
	replay("graph", fuzz_graph);
	/* The validator's own malformed corpus goes through the same target. */
	int n = replay_dir("tests/malformed", fuzz_graph, 0);
	assert_true(n > 100);
}

static void test_http_corpus(void **state)
{
	(void)state;
	replay("http", fuzz_http);
}

static void test_safetensors_corpus(void **state)
{
	(void)state;
	replay("safetensors", fuzz_safetensors);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_graph_corpus),
		cmocka_unit_test(test_http_corpus),
		cmocka_unit_test(test_safetensors_corpus),
	};
	return cmocka_run_group_tests_name("fuzz corpus", tests, NULL, NULL);
}
