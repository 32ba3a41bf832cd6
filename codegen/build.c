/* build: the system C compiler turns the generated C into a shared object.
 *
 * The compiler runs sandboxed, because its input derives from a request:
 *   - a private temporary directory (mode 0700, beside the output) holds
 *     model.c and the compiler's log; it is the child's working directory,
 *     TMPDIR and HOME, and is removed with everything in it afterwards;
 *   - a clean environment: PATH, LC_ALL, TMPDIR and HOME, nothing inherited;
 *   - stdin is /dev/null, no other descriptor of the caller stays open;
 *   - resource limits (never raised above the caller's): CPU time, address
 *     space, file size, processes, no core files;
 *   - its own process group, killed as a whole when the wall-clock limit
 *     passes and, to reap stragglers, after it exits; it also dies with the
 *     thread that started it (PR_SET_PDEATHSIG).
 * A compiler that runs away is reported as an error; the caller goes on.
 * The command line holds only fixed flags, the target's flags and paths
 * made here: nothing from the graph. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/dnnl.h"

/* The child's PATH: the compiler's own helpers (cc1, as, ld) are found here. */
#define BUILD_PATH "/usr/local/bin:/usr/bin:/bin"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

/* rm -rf dir (whatever a killed compiler left there too). */
static void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The directory part of path, made absolute, into buf. */
static int dir_of(const char *path, char *buf, size_t cap)
{
	const char *slash = strrchr(path, '/');
	char cwd[PATH_MAX];
	int n;
	if (slash == path)
		n = snprintf(buf, cap, "/");
	else if (slash && path[0] == '/')
		n = snprintf(buf, cap, "%.*s", (int)(slash - path), path);
	else if (!getcwd(cwd, sizeof cwd))
		return -1;
	else if (slash)
		n = snprintf(buf, cap, "%s/%.*s", cwd, (int)(slash - path), path);
	else
		n = snprintf(buf, cap, "%s", cwd);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* cc as a path to execute: as given if it has a slash, else searched in the
 * caller's PATH (then BUILD_PATH).  Resolved before fork: the child only
 * makes system calls. */
static int resolve_cc(const char *cc, char *buf, size_t cap)
{
	if (strchr(cc, '/'))
		return snprintf(buf, cap, "%s", cc) < (int)cap ? 0 : -1;
	const char *env = getenv("PATH");
	for (int pass = 0; pass < 2; pass++) {
		const char *p = pass ? BUILD_PATH : env;
		while (p && *p) {
			size_t n = strcspn(p, ":");
			if (n && (size_t)snprintf(buf, cap, "%.*s/%s", (int)n, p, cc) < cap && access(buf, X_OK) == 0)
				return 0;
			p += n + (p[n] == ':');
		}
	}
	return -1;
}

static void limit(int resource, rlim_t want)
{
	struct rlimit rl;
	if (getrlimit(resource, &rl) != 0)
		return;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		want = rl.rlim_max;
	rl.rlim_cur = want;
	if (resource == RLIMIT_CPU && (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want + 5))
		rl.rlim_max = want + 5; /* SIGXCPU at the soft limit, SIGKILL 5 s later */
	else if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want)
		rl.rlim_max = want;
	setrlimit(resource, &rl);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(const char *path, char *const *argv, char *const *envp, const char *dir, const char *log_path,
		  int limit_s, pid_t parent)
{
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(126);
	int in = open("/dev/null", O_RDONLY);
	int out = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
		_exit(126);
	if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
		for (int fd = 3; fd < 4096; fd++)
			close(fd);
	if (chdir(dir) != 0)
		_exit(126);
	limit(RLIMIT_CPU, (rlim_t)limit_s + BUILD_CPU_SLACK_S);
	limit(RLIMIT_AS, (rlim_t)BUILD_AS_BYTES);
	limit(RLIMIT_FSIZE, (rlim_t)BUILD_FSIZE_BYTES);
	limit(RLIMIT_NPROC, (rlim_t)BUILD_NPROC);
	limit(RLIMIT_CORE, 0);
	umask(077);
	execve(path, argv, envp);
	_exit(127);
}

/* The first line or so of the compiler's output, on one line. */
static void read_log(const char *log_path, char *log, size_t cap)
{
	log[0] = 0;
	FILE *lf = fopen(log_path, "r");
	if (lf) {
		size_t k = fread(log, 1, cap - 1, lf);
		log[k] = 0;
		fclose(lf);
	}
	for (char *p = log; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (!log[0])
		snprintf(log, cap, "(no output)");
}

int build_so(const char *src, const char *cc, const char *opt, const char *tflags, int werror, int timeout_s,
	     const char *out_so, double *secs, coil_err *err)
{
	char dir[PATH_MAX], c_path[PATH_MAX + 16], log_path[PATH_MAX + 16], out_abs[PATH_MAX + 8], tf[256];
	char exe[PATH_MAX], env_tmp[PATH_MAX + 16], env_home[PATH_MAX + 16];
	const char *name = cc ? cc : "cc";
	*secs = 0;
	if (!out_so || !*out_so)
		return coil_errf(err, "build: no output path");
	if (resolve_cc(name, exe, sizeof exe) != 0)
		return coil_errf(err, "build: compiler '%s' not found", name);
	/* The private directory sits beside the output (inside the cache's tmp/
	 * when building for the cache, so a crash leaves nothing elsewhere). */
	if (dir_of(out_so, dir, sizeof dir - 20) != 0)
		return coil_errf(err, "build: output path %s is too long", out_so);
	const char *base = strrchr(out_so, '/') ? strrchr(out_so, '/') + 1 : out_so;
	if (snprintf(out_abs, sizeof out_abs, "%s/%s", dir, base) >= (int)sizeof out_abs)
		return coil_errf(err, "build: output path %s is too long", out_so);
	strcat(dir, "/.coil-cc-XXXXXX");
	if (!mkdtemp(dir))
		return coil_errf(err, "build: cannot make a private directory beside %s: %s", out_so, strerror(errno));
	snprintf(c_path, sizeof c_path, "%s/model.c", dir);
	snprintf(log_path, sizeof log_path, "%s/cc.log", dir);
	snprintf(env_tmp, sizeof env_tmp, "TMPDIR=%s", dir);
	snprintf(env_home, sizeof env_home, "HOME=%s", dir);
	char *const envp[] = {"PATH=" BUILD_PATH, "LC_ALL=C", env_tmp, env_home, NULL};
	FILE *f = fopen(c_path, "w");
	int bad = !f || fputs(src, f) < 0;
	if (f && fclose(f) != 0)
		bad = 1;
	if (bad) {
		rm_tree(dir);
		return coil_errf(err, "build: cannot write %s", c_path);
	}
	/* the oneDNN runtime's source, which model.c includes when it uses it */
	if (dn_write_rt_source(dir) != 0) {
		rm_tree(dir);
		return coil_errf(err, "build: cannot write the oneDNN runtime's source into %s", dir);
	}
	/* argv: cc opt -std=c11 -fPIC -shared -fopenmp ... <target flags> [-W...] -o out model.c -lm */
	const char *argv[40];
	int n = 0;
	argv[n++] = name;
	argv[n++] = opt ? opt : "-O3";
	argv[n++] = "-std=c11";
	argv[n++] = "-fPIC";
	argv[n++] = "-shared";
	argv[n++] = "-fopenmp";
	argv[n++] = "-fno-math-errno";
	argv[n++] = "-fvisibility=hidden";
	snprintf(tf, sizeof tf, "%s", tflags ? tflags : "");
	for (char *save = NULL, *t = strtok_r(tf, " ", &save); t && n < 24; t = strtok_r(NULL, " ", &save))
		argv[n++] = t;
	if (werror) {
		argv[n++] = "-Wall";
		argv[n++] = "-Wextra";
		argv[n++] = "-Werror";
		argv[n++] = "-Wno-unused-variable";
		argv[n++] = "-Wno-unused-parameter";
	}
	argv[n++] = "-o";
	argv[n++] = out_abs;
	argv[n++] = c_path;
	argv[n++] = "-lm";
	argv[n++] = "-Wl,--as-needed"; /* libdnnl only where the rt is used */
	argv[n++] = "-ldnnl";
	argv[n] = NULL;
	int limit_s = timeout_s > 0 ? timeout_s : BUILD_DEFAULT_TIMEOUT_S;
	pid_t parent = getpid();
	double t0 = now();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		rm_tree(dir);
		return coil_errf(err, "build: cannot start %s: fork: %s", name, strerror(e));
	}
	if (pid == 0)
		child(exe, (char *const *)argv, envp, dir, log_path, limit_s, parent);
	setpgid(pid, pid); /* also here: no killpg may miss the group */

	int status = 0, done = 0, timed_out = 0;
	long nap_us = 1000;
	while (!done) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid) {
			done = 1;
		} else if (r < 0 && errno != EINTR) {
			break;
		} else if (now() - t0 > limit_s) {
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			timed_out = 1;
			break;
		} else {
			struct timespec ts = {0, nap_us * 1000};
			nanosleep(&ts, NULL);
			if (nap_us < 20000)
				nap_us += nap_us / 2;
		}
	}
	kill(-pid, SIGKILL); /* whatever the compiler left running in its group */
	*secs = now() - t0;
	if (timed_out) {
		rm_tree(dir);
		return coil_errf(err, "build: %s ran longer than the limit of %d s and was killed", name, limit_s);
	}
	if (!done || !WIFEXITED(status) || WEXITSTATUS(status)) {
		char log[300];
		read_log(log_path, log, sizeof log);
		rm_tree(dir);
		if (done && WIFSIGNALED(status)) {
			int sig = WTERMSIG(status);
			const char *why = sig == SIGXCPU  ? " (CPU time limit)"
					  : sig == SIGXFSZ ? " (file size limit)"
					  : sig == SIGKILL ? " (killed; CPU time or memory limit?)"
							   : "";
			return coil_errf(err, "build: %s died of signal %d%s: %s", name, sig, why, log);
		}
		if (done && WEXITSTATUS(status) == 126)
			return coil_errf(err, "build: cannot set up the sandbox for %s", name);
		if (done && WEXITSTATUS(status) == 127)
			return coil_errf(err, "build: cannot run %s (%s)", name, exe);
		return coil_errf(err, "build: %s failed (status %d): %s", name, done ? WEXITSTATUS(status) : -1, log);
	}
	rm_tree(dir);
	return 0;
}
