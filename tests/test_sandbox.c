/* The compiler's sandbox (codegen/build.c): build_so() is pointed at a fake
 * compiler ($B/tests/fake_cc, run under the name fake_cc-MODE) that reports
 * what it sees, sleeps, spins, allocates without end, forks or fails.  Each
 * runaway is killed and reported as an error while this process, the
 * caller, goes on; nothing is left running or on disk.  And no string from a
 * graph (names, ids, attributes) reaches the generated C or the compiler's
 * command line. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/compile.h"
#include "codegen/codegen.h"
#include "codegen/sandbox.h"

static char fake_cc[PATH_MAX];   /* $B/tests/fake_cc */
static char coil_cli[PATH_MAX];  /* $B/coil */
static char dir[PATH_MAX];       /* this run's temp dir */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* dir/fake_cc-MODE, a copy of the fake compiler (not a link: the sandbox's
 * user may not reach the build tree, e.g. a clone under /root), put in place
 * by a rename so that a caller never runs half a copy. */
static const char *cc(const char *mode)
{
	static char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/fake_cc-%s", dir, mode);
	if (access(path, F_OK) == 0)
		return path;
	char tmp[PATH_MAX + 96];
	snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)gettid());
	FILE *in = fopen(fake_cc, "rb"), *out = fopen(tmp, "wb");
	assert_non_null(in);
	assert_non_null(out);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
	assert_int_equal(chmod(tmp, 0755), 0);
	assert_int_equal(rename(tmp, path), 0);
	return path;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *p = calloc(1, (size_t)n + 1);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return p;
}

/* Entries of dir named .coil-cc-* or .coil-sbx-*: a build's private
 * directory or a sandbox's work directory left behind. */
static int leftovers(void)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, ".coil-cc-", 9) || !strncmp(e->d_name, ".coil-sbx-", 10);
	closedir(d);
	return n;
}

/* Is pid gone (or a zombie waiting for its new parent to reap it)? */
static int dead(pid_t pid)
{
	for (int i = 0; i < 200; i++) {
		char path[64], buf[512] = "";
		snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
		FILE *f = fopen(path, "r");
		if (!f)
			return 1;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = 0;
		const char *rp = strrchr(buf, ')');
		if (rp && (rp[2] == 'Z' || rp[2] == 'X'))
			return 1;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static const char SRC[] = "int coil_fake;\n";

/* build_so with the fake compiler in mode; the output at dir/out.so. */
static int build(const char *mode, int timeout_s, coil_err *err, double *secs)
{
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/out.so", dir);
	unlink(out);
	double s = 0;
	int rc = build_so(SRC, cc(mode), "-O2", "-march=x86-64 -mtune=generic", 0, timeout_s, out, &s, err);
	if (secs)
		*secs = s;
	return rc;
}

/* The pids a fork or orphan compiler wrote beside its symlink. */
static char *pids(const char *mode)
{
	char path[PATH_MAX + 80];
	snprintf(path, sizeof path, "%s.pids", cc(mode));
	char *r = slurp(path);
	assert_non_null(r);
	unlink(path);
	return r;
}

static char *report(void)
{
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/out.so", dir);
	char *r = slurp(out);
	assert_non_null(r);
	return r;
}

/* The compiler sees a clean environment, a private directory, limits, its
 * own process group, /dev/null for stdin and no descriptor of ours. */
static void test_environment_and_limits(void **state)
{
	(void)state;
	coil_err err = {0};
	if (build("report", 30, &err, NULL))
		fail_msg("%s", err.msg);
	char *r = report();
	int nenv = 0;
	char tmpdir[PATH_MAX] = "", home[PATH_MAX] = "", cwd[PATH_MAX] = "";
	for (char *line = strtok(r, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strncmp(line, "env ", 4)) {
			nenv++;
			const char *kv = line + 4;
			if (!strncmp(kv, "TMPDIR=", 7))
				snprintf(tmpdir, sizeof tmpdir, "%s", kv + 7);
			else if (!strncmp(kv, "HOME=", 5))
				snprintf(home, sizeof home, "%s", kv + 5);
			else if (strcmp(kv, "LC_ALL=C") && strncmp(kv, "PATH=", 5))
				fail_msg("unexpected variable in the compiler's environment: %s", kv);
		} else if (!strncmp(line, "cwd ", 4)) {
			snprintf(cwd, sizeof cwd, "%s", line + 4);
		} else if (!strncmp(line, "limit ", 6)) {
			char name[16];
			char val[32];
			assert_int_equal(sscanf(line, "limit %15s %31s", name, val), 2);
			if (!strcmp(val, "unlimited"))
				fail_msg("no %s limit on the compiler", name);
			unsigned long long v = strtoull(val, NULL, 10);
			if (!strcmp(name, "cpu"))
				assert_int_equal(v, 30 + BUILD_CPU_SLACK_S);
			else if (!strcmp(name, "as"))
				assert_true(v <= BUILD_AS_BYTES);
			else if (!strcmp(name, "fsize"))
				assert_true(v <= BUILD_FSIZE_BYTES);
			else if (!strcmp(name, "nproc"))
				assert_true(v <= BUILD_NPROC);
			else if (!strcmp(name, "core"))
				assert_int_equal(v, 0);
		} else if (!strncmp(line, "pgid ", 5)) {
			int pgid, pid;
			assert_int_equal(sscanf(line, "pgid %d pid %d", &pgid, &pid), 2);
			assert_int_equal(pgid, pid);
		} else if (!strncmp(line, "stdin ", 6)) {
			assert_string_equal(line + 6, "/dev/null");
		} else if (!strncmp(line, "fd ", 3)) {
			int fd = atoi(line + 3);
			if (fd > 2)
				fail_msg("descriptor %d of the caller is open in the compiler", fd);
		}
	}
	assert_int_equal(nenv, 4);
	/* TMPDIR = HOME = cwd = a private directory beside the output, now gone. */
	char want[PATH_MAX + 16];
	snprintf(want, sizeof want, "%s/.coil-cc-", dir);
	assert_memory_equal(tmpdir, want, strlen(want));
	assert_string_equal(home, tmpdir);
	assert_string_equal(cwd, tmpdir);
	assert_int_not_equal(access(tmpdir, F_OK), 0);
	assert_int_equal(leftovers(), 0);
	free(r);
}

/* A compiler that never ends is killed at the wall-clock limit. */
static void test_timeout(void **state)
{
	(void)state;
	static const char *const modes[] = {"sleep", "spin"};
	for (size_t i = 0; i < 2; i++) {
		coil_err err = {0};
		double t0 = now();
		assert_int_equal(build(modes[i], 1, &err, NULL), -1);
		double took = now() - t0;
		if (!strstr(err.msg, "ran longer than the limit of 1 s and was killed"))
			fail_msg("%s: %s", modes[i], err.msg);
		assert_true(took >= 1.0 && took < 60.0); /* killed, not left to run: well under a minute */
		assert_int_equal(leftovers(), 0);
	}
}

/* Memory: the address-space limit stops a compiler that keeps allocating. */
static void test_memory_limit(void **state)
{
	(void)state;
	coil_err err = {0};
	assert_int_equal(build("alloc", 30, &err, NULL), -1);
	int gib = -1;
	const char *p = strstr(err.msg, "out of memory after ");
	if (!p || sscanf(p, "out of memory after %d GiB", &gib) != 1)
		fail_msg("%s", err.msg);
	assert_non_null(strstr(err.msg, "failed (status 3)"));
	assert_true(gib >= 0 && (unsigned long long)gib <= BUILD_AS_BYTES >> 30);
	assert_int_equal(leftovers(), 0);
}

/* The whole process group goes: children of a runaway compiler, and those a
 * compiler that succeeded left behind. */
static void test_process_group_killed(void **state)
{
	(void)state;
	coil_err err = {0};
	assert_int_equal(build("fork", 1, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "was killed"));
	char *r = pids("fork");
	int n = 0;
	for (char *line = strtok(r, "\n"); line; line = strtok(NULL, "\n"), n++)
		if (!dead((pid_t)atoi(line)))
			fail_msg("the compiler's child %s survived the timeout", line);
	assert_int_equal(n, 2);
	free(r);

	assert_int_equal(build("orphan", 30, &err, NULL), 0);
	r = pids("orphan");
	if (!dead((pid_t)atoi(r)))
		fail_msg("the compiler's child %s outlived the build", r);
	free(r);
	assert_int_equal(leftovers(), 0);
}

/* Failures read as errors, with the compiler's own words. */
static void test_failures_reported(void **state)
{
	(void)state;
	coil_err err = {0};
	assert_int_equal(build("fail", 30, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "failed (status 1)"));
	assert_non_null(strstr(err.msg, "error: fake failure"));
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/out.so", dir);
	double secs;
	assert_int_equal(build_so(SRC, "/nonexistent/cc", NULL, NULL, 0, 5, out, &secs, &err), -1);
	assert_non_null(strstr(err.msg, "cannot run /nonexistent/cc"));
	assert_int_equal(build_so(SRC, "no-such-compiler-coil", NULL, NULL, 0, 5, out, &secs, &err), -1);
	assert_non_null(strstr(err.msg, "not found"));
	assert_int_equal(leftovers(), 0);
}

/* Runaway compiles on several threads at once: each is killed, each caller
 * gets its error, and a real compile beside them still works.  Nothing
 * here depends on timing: the runaways sleep (only the limit can end them,
 * however loaded the machine), and the compiler's name (a symlink) is made
 * before any thread starts. */
static char runaway_cc[PATH_MAX + 64];

static void *runaway(void *arg)
{
	coil_err *err = arg;
	char out[PATH_MAX + 32];
	snprintf(out, sizeof out, "%s/t%p.so", dir, arg);
	double secs;
	build_so(SRC, runaway_cc, NULL, NULL, 0, 1, out, &secs, err);
	return NULL;
}

static void test_threads_survive(void **state)
{
	(void)state;
	pthread_t th[4];
	coil_err errs[4];
	memset(errs, 0, sizeof errs);
	snprintf(runaway_cc, sizeof runaway_cc, "%s", cc("sleep"));
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, runaway, &errs[i]), 0);
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/real.so", dir);
	coil_err err = {0};
	double secs;
	if (build_so("int coil_real(void) { return 42; }\n", NULL, "-O1", NULL, 1, 60, out, &secs, &err))
		fail_msg("a real compile beside runaways: %s", err.msg);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		if (!strstr(errs[i].msg, "ran longer than the limit of 1 s and was killed"))
			fail_msg("runaway %d: %s", i, errs[i].msg);
		assert_int_equal(errs[i].code, COIL_E_TIMEOUT);
	}
	struct stat st;
	assert_int_equal(stat(out, &st), 0);
	assert_true(st.st_size > 0);
	unlink(out);
	assert_int_equal(leftovers(), 0);
}

/* ---- several translation units ---- */

/* Four files, three units: model.c and k1.c include model.h. */
static const codegen_src UNITS = {
	.n = 4,
	.name = {"model.h", "model.c", "k1.c", "k2.c"},
	.text = {"int coil_k1(void);\nint coil_k2(void);\n", "#include \"model.h\"\nint coil_real(void) { return coil_k1() + coil_k2(); }\n",
		 "#include \"model.h\"\nint coil_k1(void) { return 40; }\n", "#include \"model.h\"\nint coil_k2(void) { return 2; }\n"},
};

static int build_units(const char *mode, int timeout_s, coil_err *err)
{
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/out.so", dir);
	unlink(out);
	double s;
	return build_files(&UNITS, cc(mode), "-O2", "-march=x86-64", 0, timeout_s, 2, NULL, NULL, out, &s, err);
}

/* Each unit compiles in the sandbox (its own process group, clean
 * environment, limits, the private directory), then one link; a real
 * compiler makes a working shared object of them. */
static void test_units_sandboxed(void **state)
{
	(void)state;
	coil_err err = {0};
	if (build_units("report", 30, &err))
		fail_msg("%s", err.msg);
	char *r = report();
	int runs = 0, objs = 0, links = 0, nenv = 0, compiled[3] = {0};
	for (char *line = strtok(r, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strncmp(line, "pgid ", 5)) {
			int pgid, pid;
			assert_int_equal(sscanf(line, "pgid %d pid %d", &pgid, &pid), 2);
			assert_int_equal(pgid, pid);
			runs++;
		} else if (!strncmp(line, "env ", 4)) {
			nenv++;
			if (strncmp(line + 4, "PATH=", 5) && strcmp(line + 4, "LC_ALL=C") && strncmp(line + 4, "TMPDIR=", 7) &&
			    strncmp(line + 4, "HOME=", 5))
				fail_msg("unexpected variable in the compiler's environment: %s", line + 4);
		} else if (!strcmp(line, "argv -c")) {
			objs++;
		} else if (!strcmp(line, "argv -shared")) {
			links++;
		} else if (!strncmp(line, "limit cpu ", 10)) {
			assert_int_equal(strtoull(line + 10, NULL, 10), 30 + BUILD_CPU_SLACK_S);
		} else if (!strncmp(line, "argv ", 5)) {
			for (int i = 0; i < 3; i++)
				compiled[i] += !strcmp(line + 5, UNITS.name[i + 1]);
		}
	}
	free(r);
	assert_int_equal(runs, 4);
	assert_int_equal(objs, 3);
	assert_int_equal(links, 1);
	assert_int_equal(nenv, 16);
	for (int i = 0; i < 3; i++)
		assert_int_equal(compiled[i], 1);
	assert_int_equal(leftovers(), 0);

	/* the real compiler: the units link into one working object */
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/real.so", dir);
	double secs;
	if (build_files(&UNITS, NULL, "-O1", NULL, 1, 60, 0, NULL, NULL, out, &secs, &err))
		fail_msg("%s", err.msg);
	void *h = dlopen(out, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	int (*fn)(void);
	*(void **)&fn = dlsym(h, "coil_real");
	assert_null(fn); /* hidden: -fvisibility=hidden holds for every unit */
	dlclose(h);
	unlink(out);
	assert_int_equal(leftovers(), 0);
}

/* One unit that fails, dies or runs away fails the build, named; the other
 * runs are killed, no shared object appears and nothing is left. */
static void test_unit_failures(void **state)
{
	(void)state;
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/out.so", dir);
	coil_err err = {0};
	assert_int_equal(build_units("fail@k1.c", 30, &err), -1);
	if (!strstr(err.msg, "failed (status 1) on k1.c") || !strstr(err.msg, "error: fake failure"))
		fail_msg("%s", err.msg);
	assert_int_not_equal(access(out, F_OK), 0);
	assert_int_equal(leftovers(), 0);

	assert_int_equal(build_units("alloc@model.c", 30, &err), -1);
	if (!strstr(err.msg, "failed (status 3) on model.c"))
		fail_msg("%s", err.msg);
	assert_int_not_equal(access(out, F_OK), 0);

	static const char *const runaways[] = {"sleep@k2.c", "spin@k1.c"};
	for (size_t i = 0; i < 2; i++) {
		double t0 = now();
		assert_int_equal(build_units(runaways[i], 1, &err), -1);
		double took = now() - t0;
		if (!strstr(err.msg, "ran longer than the limit of 1 s and was killed"))
			fail_msg("%s: %s", runaways[i], err.msg);
		assert_true(took >= 1.0 && took < 60.0);
		assert_int_not_equal(access(out, F_OK), 0);
		assert_int_equal(leftovers(), 0);
	}
	/* the timeout is the whole build's: a fork that leaves children */
	assert_int_equal(build_units("fork@k1.c", 1, &err), -1);
	assert_non_null(strstr(err.msg, "was killed"));
	char *r = pids("fork@k1.c");
	for (char *line = strtok(r, "\n"); line; line = strtok(NULL, "\n"))
		if (!dead((pid_t)atoi(line)))
			fail_msg("the compiler's child %s survived the timeout", line);
	free(r);
	assert_int_not_equal(access(out, F_OK), 0);
	assert_int_equal(leftovers(), 0);
}

/* ---- no string from the request reaches the C or the command line ---- */

/* Each payload carries a marker "PWN<n>"; none may appear downstream. */
static const char HOSTILE[] =
	"{\"format\": \"coil-graph\", \"version\": 1,"
	" \"inputs\": [{\"name\": \"x*/ system(\\\"rm -rf /\\\"); /*PWN1\", \"dtype\": \"f32\", \"shape\": [\"n\", 4]}],"
	" \"params\": [{\"name\": \"w\\\"); exec(\\\"sh\\\\\\\\PWN2\", \"dtype\": \"f32\", \"shape\": [4]}],"
	" \"constants\": [{\"name\": \"\\\\n#include </etc/passwd> PWN3\", \"dtype\": \"f32\", \"shape\": [1],"
	"   \"data\": [0.5]}],"
	" \"nodes\": ["
	"  {\"id\": \"n1 */ #define PWN4 `id` $(id) \\\\\", \"op\": \"aten.add.Tensor\","
	"   \"args\": [\"x*/ system(\\\"rm -rf /\\\"); /*PWN1\", \"w\\\"); exec(\\\"sh\\\\\\\\PWN2\"],"
	"   \"outputs\": [\"s */ __asm__(\\\"int3\\\"); PWN5\"]},"
	"  {\"id\": \"n2\\n#include \\\"/etc/passwd\\\" PWN6\", \"op\": \"aten.mul.Tensor\","
	"   \"args\": [\"s */ __asm__(\\\"int3\\\"); PWN5\", \"\\\\n#include </etc/passwd> PWN3\"],"
	"   \"outputs\": [\"g\"]},"
	"  {\"id\": \"n3 -fplugin=/tmp/evil.so PWN7\", \"op\": \"aten.gelu.default\", \"args\": [\"g\"],"
	"   \"kwargs\": {\"approximate\": \"tanh\"}, \"outputs\": [\"y'; DROP TABLE entries; -- PWN8\"]}"
	" ],"
	" \"outputs\": [\"y'; DROP TABLE entries; -- PWN8\"]}";

static void assert_clean(const char *what, const char *text)
{
	static const char *const bad[] = {"PWN", "system(", "rm -rf", "/etc/passwd", "exec(", "$(id)", "`id`",
					  "-fplugin", "DROP TABLE", "__asm__"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (strstr(text, bad[i]))
			fail_msg("%s contains '%s' from the request", what, bad[i]);
}

static void test_no_user_strings(void **state)
{
	(void)state;
	coil_err err = {0};
	coil_graph *g = graph_parse(HOSTILE, strlen(HOSTILE), &err);
	if (!g)
		fail_msg("the hostile graph should be valid: %s", err.msg);
	char c_path[PATH_MAX + 16], out[PATH_MAX + 16];
	snprintf(c_path, sizeof c_path, "%s/hostile.c", dir);
	snprintf(out, sizeof out, "%s/out.so", dir);
	/* one file, then split: every unit's C and every run's command line */
	for (int units = -1; units <= 3; units += 4) {
		codegen_opts o = {.cc = cc("report"), .keep_c = c_path, .target = "generic", .timeout_s = 30, .units = units};
		codegen_result res;
		if (codegen_compile(g, &o, out, &res, &err))
			fail_msg("%s", err.msg);
		if (units < 0)
			assert_int_equal(res.nunits, 1);
		else
			assert_true(res.nunits >= 2);
		char *src = slurp(c_path), *argv_report = report();
		assert_non_null(src);
		assert_true(strlen(src) > 100);
		assert_clean("the generated C", src);
		/* The command lines, one argument per "argv " line. */
		int nargs = 0, nruns = 0;
		for (char *line = strtok(argv_report, "\n"); line; line = strtok(NULL, "\n")) {
			if (!strncmp(line, "argv ", 5)) {
				nargs++;
				assert_clean("the compiler's command line", line);
			}
			nruns += !strncmp(line, "pgid ", 5);
		}
		assert_true(nargs > 5);
		assert_int_equal(nruns, units < 0 ? 1 : res.nunits + 1); /* split: each unit, then the link */
		free(src);
		free(argv_report);
	}

	/* The same graph through the cache's planning: the key and the canonical
	 * text are the graph's; the target cannot smuggle flags in. */
	compile_plan *p = NULL;
	compile_opts co = {.target = "generic -fplugin=/tmp/evil.so"};
	assert_int_equal(compile_plan_make(HOSTILE, strlen(HOSTILE), &co, &p, &err), -1);
	assert_null(p);
	co.target = "generic";
	assert_int_equal(compile_plan_make(HOSTILE, strlen(HOSTILE), &co, &p, &err), 0);
	for (const char *k = p->key; *k; k++)
		assert_non_null(strchr("0123456789abcdef", *k));
	assert_clean("the target", p->target);
	compile_plan_free(p);
	graph_free(g);

	/* A string attribute outside its closed set is refused by the validator. */
	static const char bad_attr[] =
		"{\"format\": \"coil-graph\", \"version\": 1,"
		" \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4]}],"
		" \"nodes\": [{\"id\": \"n\", \"op\": \"aten.gelu.default\", \"args\": [\"x\"],"
		"   \"kwargs\": {\"approximate\": \"tanh\\\"); system(\\\"id\"}, \"outputs\": [\"y\"]}],"
		" \"outputs\": [\"y\"]}";
	assert_null(graph_parse(bad_attr, strlen(bad_attr), &err));
	assert_non_null(strstr(err.msg, "approximate"));
}

/* ---- the compile's sandbox (codegen/sandbox.c) ----
 *
 * sandbox_compile() runs code generation and the compiler (the stand-in,
 * or the real one) in a process tree of their own.  What the tree can have
 * depends on the machine (root or not, cgroups, user namespaces): each test
 * asserts what it had (sandbox_info), and that whatever it lacked is said
 * in the notes.  Verdicts are asserted by code and message, never by how
 * long anything took (but "well under a minute" where a kill is due). */

#ifdef __SANITIZE_ADDRESS__
#define ASAN_BUILD 1
#else
#define ASAN_BUILD 0
#endif

static const char TINY[] = "{\"format\": \"coil-graph\", \"version\": 1,"
			   " \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"n\", 8]}],"
			   " \"nodes\": [{\"id\": \"a\", \"op\": \"aten.relu\", \"args\": [\"x\"], \"outputs\": [\"r\"]},"
			   "  {\"id\": \"b\", \"op\": \"aten.neg\", \"args\": [\"r\"], \"outputs\": [\"y\"]}],"
			   " \"outputs\": [\"y\"]}";
static coil_graph *tiny;

/* sandbox_compile of TINY with the stand-in in mode (NULL: the real
 * compiler) into dir/out.so. */
static int sbx(const char *mode, sandbox_limits lim, sandbox_info *info, coil_err *err)
{
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/out.so", dir);
	unlink(out);
	codegen_opts o = {.cc = mode ? cc(mode) : NULL, .target = "generic", .opt = "-O1"};
	codegen_result res;
	memset(err, 0, sizeof *err);
	return sandbox_compile(tiny, &o, &lim, out, &res, info, err);
}

/* What the sandbox can have on this machine (one compile, asked once). */
static unsigned have(void)
{
	static unsigned h;
	if (!h) {
		sandbox_info info;
		coil_err err;
		if (sbx("report", (sandbox_limits){0}, &info, &err))
			fail_msg("%s", err.msg);
		h = info.have;
		print_message("# sandbox here (uid %d): have 0x%x; notes: %s\n", (int)geteuid(), h,
			      info.notes[0] ? info.notes : "none");
	}
	return h;
}

static int cg_walk_hits, cg_walk_busy;
static char cg_walk_name[64];
static int cg_walk(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	if (flag != FTW_D || strncmp(path + ftw->base, cg_walk_name, strlen(cg_walk_name)))
		return 0;
	cg_walk_hits++;
	char procs[PATH_MAX + 16];
	snprintf(procs, sizeof procs, "%s/cgroup.procs", path);
	FILE *f = fopen(procs, "r");
	cg_walk_busy += f && fgetc(f) != EOF;
	if (f)
		fclose(f);
	return 0;
}

/* cgroups of pid's compiles still there (each is removed once no process
 * is left in it); *busy (may be NULL): how many still hold a process. */
static int cgroups_of(pid_t pid, int *busy)
{
	snprintf(cg_walk_name, sizeof cg_walk_name, "coil-%d-", (int)pid);
	cg_walk_hits = cg_walk_busy = 0;
	nftw("/sys/fs/cgroup", cg_walk, 16, FTW_PHYS);
	if (busy)
		*busy = cg_walk_busy;
	return cg_walk_hits;
}

static int cgroups_left(void)
{
	return cgroups_of(getpid(), NULL);
}

static void assert_cleaned_up(void)
{
	assert_int_equal(leftovers(), 0);
	assert_int_equal(cgroups_left(), 0);
}

/* A socket of ours listening on 127.0.0.1 (its port into *port). */
static int listen_local(int *port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(s >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t n = sizeof a;
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(s, 4), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&a, &n), 0);
	*port = ntohs(a.sin_port);
	return s;
}

typedef struct who {
	int uid, seccomp, nonewprivs, fds;
	char net[128], pid[128], connect[256], tmpwrite[256], parent[256];
} who;

static void read_who(who *w)
{
	memset(w, 0, sizeof *w);
	w->uid = w->seccomp = w->nonewprivs = -1;
	char *r = report();
	for (char *line = strtok(r, "\n"); line; line = strtok(NULL, "\n")) {
		int gid;
		if (sscanf(line, "uid %d gid %d", &w->uid, &gid) == 2)
			continue;
		sscanf(line, "ns net %127s", w->net);
		sscanf(line, "ns pid %127s", w->pid);
		sscanf(line, "parent %255s", w->parent);
		sscanf(line, "seccomp %d", &w->seccomp);
		sscanf(line, "nonewprivs %d", &w->nonewprivs);
		if (!strncmp(line, "connect ", 8))
			snprintf(w->connect, sizeof w->connect, "%s", line);
		if (!strncmp(line, "tmpwrite ", 9))
			snprintf(w->tmpwrite, sizeof w->tmpwrite, "%s", line);
		if (!strncmp(line, "fd ", 3) && atoi(line + 3) > 2)
			w->fds++;
	}
	free(r);
}

static void own_ns(const char *kind, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/ns/%s", kind);
	ssize_t n = readlink(path, buf, cap - 1);
	assert_true(n > 0);
	buf[n] = 0;
}

/* The tree runs as nobody (coil as root) or as the caller's own uid, with
 * no_new_privs and the seccomp filter, in its own network and pid
 * namespaces, with no descriptor of ours and a read-only file system but
 * for its work directory: a compiler can neither reach a socket listening
 * on our loopback nor write in /tmp.  The same compiler run without the
 * sandbox can, which shows the test sees what it means to. */
static void test_sandbox_isolation(void **state)
{
	(void)state;
	int port, ls = listen_local(&port);
	char mode[32], net[128], pid[128];
	snprintf(mode, sizeof mode, "net.%d", port);
	own_ns("net", net, sizeof net);
	own_ns("pid", pid, sizeof pid);
	sandbox_info info;
	coil_err err;
	if (sbx(mode, (sandbox_limits){0}, &info, &err))
		fail_msg("%s", err.msg);
	who w;
	read_who(&w);
	print_message("# sandboxed: uid %d, seccomp %d, net %s, %s; have 0x%x; notes: %s\n", w.uid, w.seccomp,
		      w.net, w.connect, info.have, info.notes[0] ? info.notes : "none");
	assert_true(info.have & SANDBOX_PROCESS);
	assert_int_equal(w.uid, geteuid() == 0 ? SANDBOX_UID : (int)getuid());
	assert_int_equal(!!(info.have & SANDBOX_UID_DROP), geteuid() == 0);
	assert_int_equal(w.nonewprivs, 1);
	assert_int_equal(w.fds, 0); /* our listening socket among them */
	/* a fresh image, not a bare fork of ours (unless there is no /proc/self/exe to execute) */
	if (strstr(info.notes, "forked without exec"))
		assert_string_not_equal(w.parent, "coil-sandbox-supervisor");
	else
		assert_string_equal(w.parent, "coil-sandbox-supervisor");
	assert_int_equal(w.seccomp, info.have & SANDBOX_SECCOMP ? 2 : 0);
	if (geteuid() == 0)
		assert_true(info.have & SANDBOX_SECCOMP);
	/* a namespace it had is a new one; one it lacked, the notes say why */
	assert_int_equal(!strcmp(w.net, net), !(info.have & SANDBOX_NETNS));
	assert_int_equal(!strcmp(w.pid, pid), !(info.have & SANDBOX_PIDNS));
	if (!(info.have & SANDBOX_NETNS))
		assert_non_null(strstr(info.notes, "namespaces"));
	if ((info.have & (SANDBOX_CG_MEM | SANDBOX_CG_PIDS)) != (SANDBOX_CG_MEM | SANDBOX_CG_PIDS))
		assert_non_null(strstr(info.notes, "cgroup"));
	if ((info.have & SANDBOX_NETNS) || (info.have & SANDBOX_SECCOMP))
		assert_memory_equal(w.connect, "connect failed", 14);
	if (info.have & SANDBOX_RO)
		assert_string_equal(w.tmpwrite, "tmpwrite failed: Read-only file system");
	else
		assert_true(strstr(info.notes, "read-only") || !(info.have & SANDBOX_MNTNS));
	struct sockaddr_in peer;
	socklen_t n = sizeof peer;
	int c = accept(ls, (struct sockaddr *)&peer, &n);
	assert_int_equal(c, -1); /* nobody got through */
	assert_cleaned_up();

	/* without the sandbox: the caller's uid and namespaces, and the socket */
	setenv("COIL_SANDBOX", "0", 1);
	int rc = sbx(mode, (sandbox_limits){0}, &info, &err);
	unsetenv("COIL_SANDBOX");
	if (rc)
		fail_msg("%s", err.msg);
	read_who(&w);
	assert_int_equal(info.have, 0);
	assert_string_not_equal(w.parent, "coil-sandbox-supervisor");
	assert_int_equal(w.uid, (int)geteuid());
	assert_string_equal(w.net, net);
	assert_string_equal(w.connect, "connect ok");
	assert_string_equal(w.tmpwrite, "tmpwrite ok");
	close(ls);
	assert_cleaned_up();
}

/* A compiler, or code generation, that allocates without end is stopped by
 * the memory budget of the whole tree (cgroup) and reported as out of
 * resources; without a memory cgroup RLIMIT_AS stops each process. */
static void test_sandbox_memory_budget(void **state)
{
	(void)state;
	unsigned h = have();
	sandbox_limits lim = {.mem_bytes = (uint64_t)256 << 20};
	coil_err err;
	assert_int_equal(sbx("eat", lim, NULL, &err), -1);
	if (h & SANDBOX_CG_MEM) {
		if (err.code != COIL_E_RESOURCE || !strstr(err.msg, "memory budget of 256 MiB"))
			fail_msg("%s", err.msg);
	} else {
		print_message("# no memory cgroup: RLIMIT_AS stops the compiler\n");
		if (err.code != COIL_E_COMPILER || !strstr(err.msg, "out of memory after"))
			fail_msg("%s", err.msg);
	}
	assert_cleaned_up();
	if (!(h & SANDBOX_CG_MEM) && ASAN_BUILD) {
		print_message("# no memory cgroup and ASan (no RLIMIT_AS): code generation not run out of memory\n");
		return;
	}
	setenv("COIL_SANDBOX_TEST", "alloc", 1);
	int rc = sbx("report", lim, NULL, &err);
	unsetenv("COIL_SANDBOX_TEST");
	assert_int_equal(rc, -1);
	if (err.code != COIL_E_RESOURCE ||
	    !strstr(err.msg, h & SANDBOX_CG_MEM ? "memory budget of 256 MiB" : "out of memory"))
		fail_msg("code generation allocating without end: %s", err.msg);
	assert_cleaned_up();
}

/* A compiler that forks without end is stopped by the process budget
 * (cgroup): the first fork refused ends the compile.  Without a pids
 * cgroup RLIMIT_NPROC bounds the forks and the deadline ends it. */
static void test_sandbox_process_budget(void **state)
{
	(void)state;
	unsigned h = have();
	sandbox_limits lim = {.pids = 32, .deadline_s = h & SANDBOX_CG_PIDS ? 120 : 3};
	coil_err err;
	double t0 = now();
	assert_int_equal(sbx("forkbomb", lim, NULL, &err), -1);
	if (h & SANDBOX_CG_PIDS) {
		if (err.code != COIL_E_RESOURCE || !strstr(err.msg, "budget of 32 processes"))
			fail_msg("%s", err.msg);
		assert_true(now() - t0 < 60); /* stopped at the budget, not at the deadline */
	} else {
		print_message("# no pids cgroup: RLIMIT_NPROC bounds the forks, the deadline ends them\n");
		if (err.code != COIL_E_TIMEOUT)
			fail_msg("%s", err.msg);
	}
	assert_cleaned_up();
}

/* CPU time: the budget of the whole tree (cgroup accounting, else
 * RLIMIT_CPU per process) stops a compiler that spins. */
static void test_sandbox_cpu_budget(void **state)
{
	(void)state;
	sandbox_limits lim = {.cpu_s = 1};
	coil_err err;
	assert_int_equal(sbx("spin", lim, NULL, &err), -1);
	if (err.code != COIL_E_RESOURCE || !strstr(err.msg, "CPU time"))
		fail_msg("%s", err.msg);
	assert_cleaned_up();
}

/* One deadline for the whole compile, code generation included: at it the
 * whole tree is killed and the compile reported as timed out. */
static void test_sandbox_deadline(void **state)
{
	(void)state;
	sandbox_limits lim = {.deadline_s = 2};
	coil_err err;
	double t0 = now();
	assert_int_equal(sbx("sleep", lim, NULL, &err), -1);
	double took = now() - t0;
	if (err.code != COIL_E_TIMEOUT || !strstr(err.msg, "deadline of 2 s"))
		fail_msg("%s", err.msg);
	assert_true(took >= 2.0 && took < 60.0);
	assert_cleaned_up();
	/* code generation that never ends */
	setenv("COIL_SANDBOX_TEST", "spin", 1);
	int rc = sbx("report", lim, NULL, &err);
	unsetenv("COIL_SANDBOX_TEST");
	assert_int_equal(rc, -1);
	if (err.code != COIL_E_TIMEOUT || !strstr(err.msg, "deadline of 2 s"))
		fail_msg("code generation that never ends: %s", err.msg);
	assert_cleaned_up();
}

/* Code generation that crashes: the caller survives, says so, and goes on. */
static void test_sandbox_codegen_crash(void **state)
{
	(void)state;
	coil_err err;
	setenv("COIL_SANDBOX_TEST", "crash", 1);
	int rc = sbx("report", (sandbox_limits){0}, NULL, &err);
	unsetenv("COIL_SANDBOX_TEST");
	assert_int_equal(rc, -1);
	assert_int_equal(err.code, COIL_E_INTERNAL);
	if (!strstr(err.msg, "code generation crashed (signal 11"))
		fail_msg("%s", err.msg);
	assert_cleaned_up();
	if (sbx("report", (sandbox_limits){0}, NULL, &err))
		fail_msg("a compile after a crash: %s", err.msg);
	assert_cleaned_up();
}

/* Through the cache: compile_opts' deadline and budgets reach the sandbox,
 * and a real compile works in it. */
static void test_sandbox_through_cache(void **state)
{
	(void)state;
	char cdir[PATH_MAX + 16];
	snprintf(cdir, sizeof cdir, "%s/cache", dir);
	coil_cache *c = NULL;
	coil_err err = {0};
	if (cache_open(cdir, 0, &c, &err))
		fail_msg("%s", err.msg);
	compile_result res;
	compile_opts o = {.target = "generic", .opt_level = 1, .timeout_s = 2};
	setenv("COIL_SANDBOX_TEST", "spin", 1);
	int rc = cache_compile(c, TINY, strlen(TINY), &o, &res, &err);
	unsetenv("COIL_SANDBOX_TEST");
	assert_int_equal(rc, -1);
	if (err.code != COIL_E_TIMEOUT || !strstr(err.msg, "deadline of 2 s"))
		fail_msg("%s", err.msg);
	if ((have() & SANDBOX_CG_MEM) || !ASAN_BUILD) {
		o.timeout_s = 120;
		o.sandbox_mem_bytes = (uint64_t)256 << 20;
		setenv("COIL_SANDBOX_TEST", "alloc", 1);
		rc = cache_compile(c, TINY, strlen(TINY), &o, &res, &err);
		unsetenv("COIL_SANDBOX_TEST");
		assert_int_equal(rc, -1);
		assert_int_equal(err.code, COIL_E_RESOURCE);
	}
	compile_opts real = {.target = "generic", .opt_level = 1};
	if (cache_compile(c, TINY, strlen(TINY), &real, &res, &err))
		fail_msg("a real compile in the sandbox: %s", err.msg);
	assert_false(res.hit);
	void *h = dlopen(res.path, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	assert_non_null(dlsym(h, "coil_artifact_describe"));
	dlclose(h);
	cache_close(c);
	assert_int_equal(cgroups_left(), 0);
}

static atomic_int churning;

/* Allocates and frees, of every size class, until told to stop. */
static void *churn(void *arg)
{
	(void)arg;
	void *keep[64] = {0};
	for (unsigned i = 0; atomic_load(&churning); i++) {
		unsigned k = i % 64;
		free(keep[k]);
		keep[k] = malloc(16u << (i % 13));
		if (keep[k])
			memset(keep[k], 1, 16);
	}
	for (int k = 0; k < 64; k++)
		free(keep[k]);
	return NULL;
}

/* Compiles while other threads of the caller allocate without pause (as
 * coild's other workers do): a child forked from a threaded process
 * inherits whatever lock another thread held at that instant (an ASan
 * build's allocator takes locks glibc's fork does not reset) and could
 * hang on it until the deadline; the tree is executed afresh instead, so
 * each compile ends at once. */
static void test_sandbox_busy_caller(void **state)
{
	(void)state;
	pthread_t th[3];
	atomic_store(&churning, 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, churn, NULL), 0);
	coil_err err;
	int failed = 0;
	for (int i = 0; i < 20 && !failed; i++)
		if (sbx("report", (sandbox_limits){.deadline_s = 30}, NULL, &err))
			failed = i + 1;
	atomic_store(&churning, 0);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	if (failed)
		fail_msg("compile %d beside allocating threads: %s", failed, err.msg);
	assert_cleaned_up();
}

/* Where /proc is not mounted (a bare chroot) the tree cannot execute the
 * program afresh: it is forked without exec, still confined, and the
 * notes say so.  Run in a child of ours with /proc unmounted in a mount
 * namespace of its own. */
static void test_sandbox_without_proc(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		print_message("# not root: cannot unmount /proc in a namespace of our own\n");
		skip();
	}
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		char msg[1024] = "ok";
		sandbox_info info;
		coil_err err;
		if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    umount2("/proc", MNT_DETACH) != 0)
			snprintf(msg, sizeof msg, "skip: cannot unmount /proc here: %s", strerror(errno));
		else if (sbx("report", (sandbox_limits){0}, &info, &err))
			snprintf(msg, sizeof msg, "compile failed: %s", err.msg);
		else if (!strstr(info.notes, "forked without exec") || !(info.have & SANDBOX_PROCESS))
			snprintf(msg, sizeof msg, "have 0x%x, notes: %s", info.have, info.notes);
		ssize_t n = write(fds[1], msg, strlen(msg));
		_exit(n > 0 ? 0 : 1);
	}
	close(fds[1]);
	char msg[1024] = "";
	ssize_t n = read(fds[0], msg, sizeof msg - 1);
	close(fds[0]);
	msg[n > 0 ? n : 0] = 0;
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!strncmp(msg, "skip: ", 6)) {
		print_message("# %s\n", msg + 6);
		skip();
	}
	if (strcmp(msg, "ok"))
		fail_msg("without /proc: %s", msg[0] ? msg : "no answer");
	assert_cleaned_up();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);

/* A caller killed in the middle of a compile: its sandbox dies with it
 * (each process of the tree dies with its parent), and the cgroup it
 * leaves is removed by the next coil's first compile. */
static void test_sandbox_killed_caller(void **state)
{
	(void)state;
	if (!(have() & SANDBOX_CG_PIDS)) {
		print_message("# no cgroup here: nothing left behind to remove\n");
		skip();
	}
	pid_t a = fork();
	if (a == 0) {
		coil_err err;
		sbx("sleep", (sandbox_limits){.deadline_s = 600}, NULL, &err);
		_exit(1);
	}
	assert_true(a > 0);
	int busy = 0;
	for (int i = 0; i < 3000 && !busy; i++) { /* until its compile runs (at most a minute) */
		cgroups_of(a, &busy);
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	assert_true(busy > 0);
	kill(a, SIGKILL);
	assert_int_equal(waitpid(a, NULL, 0), a);
	for (int i = 0; i < 3000 && busy; i++) { /* its tree follows it */
		cgroups_of(a, &busy);
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	assert_int_equal(busy, 0);
	assert_true(cgroups_of(a, NULL) > 0); /* left behind, empty */
	char cmd[3 * PATH_MAX + 128], graph[PATH_MAX + 16];
	snprintf(graph, sizeof graph, "%s/tiny.json", dir);
	FILE *f = fopen(graph, "w");
	assert_non_null(f);
	fputs(TINY, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "COIL_CACHE_DIR=%s/cli-cache %s compile --target generic %s/tiny.json >/dev/null",
		 dir, coil_cli, dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(cgroups_of(a, NULL), 0);
	/* its work directory stays (in the cache's tmp/, a reconcile removes it) */
	assert_int_equal(leftovers(), 1);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, ".coil-sbx-", 10)) {
			char p[PATH_MAX + 300];
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		}
	if (d)
		closedir(d);
	assert_cleaned_up();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/coil-sandbox-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir) || chmod(dir, 0755) != 0) /* the sandbox's nobody runs the stand-ins in it */
		return -1;
	coil_err err = {0};
	tiny = graph_parse(TINY, strlen(TINY), &err);
	return tiny ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	graph_free(tiny);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

int main(int argc, char **argv)
{
	(void)argc;
	char self[PATH_MAX];
	snprintf(self, sizeof self, "%s", argv[0]);
	char *d = realpath(dirname(self), NULL);
	snprintf(fake_cc, sizeof fake_cc, "%s/fake_cc", d ? d : ".");
	snprintf(coil_cli, sizeof coil_cli, "%s/../coil", d ? d : ".");
	free(d);
	if (access(fake_cc, X_OK) != 0) {
		fprintf(stderr, "test_sandbox: no fake compiler at %s\n", fake_cc);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_environment_and_limits),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_memory_limit),
		cmocka_unit_test(test_process_group_killed),
		cmocka_unit_test(test_failures_reported),
		cmocka_unit_test(test_threads_survive),
		cmocka_unit_test(test_units_sandboxed),
		cmocka_unit_test(test_unit_failures),
		cmocka_unit_test(test_no_user_strings),
		cmocka_unit_test(test_sandbox_isolation),
		cmocka_unit_test(test_sandbox_memory_budget),
		cmocka_unit_test(test_sandbox_process_budget),
		cmocka_unit_test(test_sandbox_cpu_budget),
		cmocka_unit_test(test_sandbox_deadline),
		cmocka_unit_test(test_sandbox_codegen_crash),
		cmocka_unit_test(test_sandbox_through_cache),
		cmocka_unit_test(test_sandbox_killed_caller),
		cmocka_unit_test(test_sandbox_busy_caller),
		cmocka_unit_test(test_sandbox_without_proc),
	};
	return cmocka_run_group_tests_name("sandbox", tests, setup, teardown);
}
