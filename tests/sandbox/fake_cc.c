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
 *   eat      allocate and touch 16 MiB at a time without end; when an
 *            allocation fails (RLIMIT_AS) print how far it got and exit 3
 *   forkbomb every process forks again and again, for ever (retrying
 *            when a fork is refused)
 *   net.PORT try to connect to 127.0.0.1:PORT, then report (with a line
 *            "connect ok" or "connect failed: REASON")
 *   M@FILE   mode M when FILE is on the command line, else report (one
 *            translation unit of several misbehaves)
 *
 * report also says who it runs as and where: "uid U gid G", "ns KIND
 * ID" for the net, pid, mnt and user namespaces, "seccomp N" and
 * "nonewprivs N" (from /proc/self/status), the program it was started
 * by ("parent ARGV0", from /proc/PPID/cmdline), and whether it can create
 * a file in /tmp: "tmpwrite ok" or "tmpwrite failed: REASON".
 *
 * report run with -c (compiling one unit to an object) writes its report
 * into the object; a link appends the objects' reports to its own, so the
 * shared object holds every run's.  fork and orphan write their children's
 * pids into ARGV0.pids (beside the symlink): the build removes what it made.
 *
 * Built without sanitizers (ASan could not start under RLIMIT_AS). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
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

/* "connect ok" or "connect failed: REASON" for 127.0.0.1:port, into buf. */
static void try_connect(int port, char *buf, size_t cap)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0) {
		snprintf(buf, cap, "connect failed: socket: %s", strerror(errno));
		return;
	}
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
		snprintf(buf, cap, "connect ok");
	else
		snprintf(buf, cap, "connect failed: %s", strerror(errno));
	close(s);
}

/* Who and where: uid, namespaces, seccomp. */
static void identity(FILE *f)
{
	fprintf(f, "uid %d gid %d\n", (int)getuid(), (int)getgid());
	static const char *const ns[] = {"net", "pid", "mnt", "user"};
	for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
		char path[64], id[128];
		snprintf(path, sizeof path, "/proc/self/ns/%s", ns[i]);
		ssize_t n = readlink(path, id, sizeof id - 1);
		id[n > 0 ? n : 0] = 0;
		fprintf(f, "ns %s %s\n", ns[i], n > 0 ? id : "?");
	}
	FILE *st = fopen("/proc/self/status", "r");
	char line[256];
	while (st && fgets(line, sizeof line, st)) {
		if (!strncmp(line, "Seccomp:", 8))
			fprintf(f, "seccomp %d\n", atoi(line + 8));
		else if (!strncmp(line, "NoNewPrivs:", 11))
			fprintf(f, "nonewprivs %d\n", atoi(line + 11));
	}
	if (st)
		fclose(st);
	char path[64], parent[256] = "?";
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
	FILE *pc = fopen(path, "r");
	if (pc && fgets(parent, sizeof parent, pc) == NULL)
		snprintf(parent, sizeof parent, "?");
	if (pc)
		fclose(pc);
	fprintf(f, "parent %s\n", parent);
	char tmp[] = "/tmp/coil-fake-cc-XXXXXX";
	int fd = mkstemp(tmp);
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
		fprintf(f, "tmpwrite ok\n");
	} else {
		fprintf(f, "tmpwrite failed: %s\n", strerror(errno));
	}
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const char *mode = strchr(base, '-') ? strchr(base, '-') + 1 : "report";
	const char *out = out_path(argc, argv);
	char mbuf[256];
	char net[256] = "";
	if (!strncmp(mode, "net.", 4)) {
		try_connect(atoi(mode + 4), net, sizeof net);
		mode = "report";
	}
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
		identity(f);
		if (net[0])
			fprintf(f, "%s\n", net);
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
	if (!strcmp(mode, "eat")) {
		size_t chunk = (size_t)16 << 20, mib = 0;
		for (char *p; (p = malloc(chunk)); mib += 16)
			memset(p, 1, chunk);
		fprintf(stderr, "fake_cc: out of memory after %zu MiB\n", mib);
		return 3;
	}
	if (!strcmp(mode, "forkbomb"))
		for (;;)
			if (fork() < 0) {
				struct timespec ts = {0, 10 * 1000 * 1000};
				nanosleep(&ts, NULL);
			}
	if (!strcmp(mode, "fail")) {
		fprintf(stderr, "model.c:1:1: error: fake failure\n");
		return 1;
	}
	fprintf(stderr, "fake_cc: unknown mode %s\n", mode);
	return 5;
}
