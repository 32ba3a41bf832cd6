/* A stand-in for the C compiler, for tests/test_sandbox.c.  build_so() runs
 * it with a clean environment, so what it does is chosen by the name it is
 * run under (a symlink): fake_cc-MODE.
 *
 *   report   write what it sees (argv, environment, cwd, limits, open
 *            descriptors, process group) into the -o file and exit 0
 *   sleep    sleep for ever (the wall-clock limit must kill it)
 *   spin     burn CPU for ever
 *   alloc    reserve 1 GiB at a time until the address-space limit says no;
 *            print how far it got and exit 3
 *   fork     start two children that sleep for ever, write their pids into
 *            the -o file, then sleep for ever itself
 *   orphan   start a child that sleeps for ever, write its pid, exit 0
 *            (with an empty -o file)
 *   fail     print an error like a compiler's and exit 1
 *   M@FILE   mode M when FILE is on the command line, else report (one
 *            translation unit of several misbehaves)
 *
 * report run with -c (compiling one unit to an object) writes its report
 * into the object; a link appends the objects' reports to its own, so the
 * shared object holds every run's.  fork and orphan write their children's
 * pids into ARGV0.pids (beside the symlink): the build removes what it made.
 *
 * Built without sanitizers (ASan could not start under RLIMIT_AS). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

extern char **environ;

static const char *out_path(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "-o"))
			return argv[i + 1];
	return NULL;
}

static void lim(FILE *f, const char *name, int res)
{
	struct rlimit rl;
	getrlimit(res, &rl);
	if (rl.rlim_cur == RLIM_INFINITY)
		fprintf(f, "limit %s unlimited\n", name);
	else
		fprintf(f, "limit %s %llu\n", name, (unsigned long long)rl.rlim_cur);
}

static void sleep_forever(void)
{
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const char *mode = strchr(base, '-') ? strchr(base, '-') + 1 : "report";
	const char *out = out_path(argc, argv);
	char mbuf[256];
	const char *at = strchr(mode, '@');
	if (at) {
		int hit = 0;
		for (int i = 1; i < argc; i++)
			hit |= !strcmp(argv[i], at + 1);
		snprintf(mbuf, sizeof mbuf, "%.*s", hit ? (int)(at - mode) : 6, hit ? mode : "report");
		mode = mbuf;
	}
	if (!strcmp(mode, "report")) {
		FILE *f = out ? fopen(out, "w") : NULL;
		if (!f)
			return 2;
		for (int i = 0; i < argc; i++)
			fprintf(f, "argv %s\n", argv[i]);
		for (char **e = environ; *e; e++)
			fprintf(f, "env %s\n", *e);
		char cwd[4096];
		fprintf(f, "cwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
		lim(f, "cpu", RLIMIT_CPU);
		lim(f, "as", RLIMIT_AS);
		lim(f, "fsize", RLIMIT_FSIZE);
		lim(f, "nproc", RLIMIT_NPROC);
		lim(f, "core", RLIMIT_CORE);
		fprintf(f, "pgid %d pid %d\n", (int)getpgid(0), (int)getpid());
		char target[4096];
		ssize_t n = readlink("/proc/self/fd/0", target, sizeof target - 1);
		target[n > 0 ? n : 0] = 0;
		fprintf(f, "stdin %s\n", target);
		DIR *d = opendir("/proc/self/fd");
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (de->d_name[0] != '.' && atoi(de->d_name) != dirfd(d) && atoi(de->d_name) != fileno(f))
				fprintf(f, "fd %s\n", de->d_name);
		if (d)
			closedir(d);
		for (int i = 1; i < argc; i++) { /* a link: the units' reports */
			size_t n = strlen(argv[i]);
			FILE *o = n > 2 && !strcmp(argv[i] + n - 2, ".o") ? fopen(argv[i], "r") : NULL;
			char buf[4096];
			size_t k;
			while (o && (k = fread(buf, 1, sizeof buf, o)) > 0)
				fwrite(buf, 1, k, f);
			if (o)
				fclose(o);
		}
		return fclose(f) ? 2 : 0;
	}
	if (!strcmp(mode, "sleep"))
		sleep_forever();
	if (!strcmp(mode, "spin")) {
		volatile unsigned long x = 0;
		for (;;)
			x++;
	}
	if (!strcmp(mode, "alloc")) {
		int gib = 0;
		while (gib < 1024 && mmap(NULL, (size_t)1 << 30, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
					  -1, 0) != MAP_FAILED)
			gib++;
		fprintf(stderr, "fake_cc: out of memory after %d GiB\n", gib);
		return 3;
	}
	if (!strcmp(mode, "fork") || !strcmp(mode, "orphan")) {
		char pids[4096];
		snprintf(pids, sizeof pids, "%s.pids", argv[0]);
		FILE *f = fopen(pids, "w");
		if (!f)
			return 2;
		int kids = !strcmp(mode, "fork") ? 2 : 1;
		for (int i = 0; i < kids; i++) {
			pid_t p = fork();
			if (p == 0)
				sleep_forever();
			fprintf(f, "%d\n", (int)p);
		}
		fclose(f);
		if (!strcmp(mode, "orphan")) { /* a success, with an output */
			FILE *o = out ? fopen(out, "w") : NULL;
			return o && !fclose(o) ? 0 : 2;
		}
		sleep_forever();
	}
	if (!strcmp(mode, "fail")) {
		fprintf(stderr, "model.c:1:1: error: fake failure\n");
		return 1;
	}
	fprintf(stderr, "fake_cc: unknown mode %s\n", mode);
	return 5;
}
