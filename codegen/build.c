/* build: the system C compiler turns the generated C into a shared object.
 *
 * Each run of the compiler is confined here, because its input derives from
 * a request (and codegen/sandbox.c puts the whole compile, code generation
 * and these runs, in a sandboxed process tree of its own on top of this):
 *   - a private temporary directory (mode 0700, beside the output) holds
 *     model.c and the compiler's log; it is the child's working directory,
 *     TMPDIR and HOME, and is removed with everything in it afterwards;
 *     every path on the command line is relative to it;
 *   - a clean environment: PATH, LC_ALL, TMPDIR and HOME, nothing inherited;
 *   - stdin is /dev/null, no other descriptor of the caller stays open;
 *   - resource limits (never raised above the caller's): CPU time, address
 *     space, file size, processes, no core files;
 *   - its own process group, killed as a whole when the wall-clock limit
 *     passes and, to reap stragglers, after it exits; it also dies with the
 *     thread that started it (PR_SET_PDEATHSIG).
 * A compiler that runs away is reported as an error; the caller goes on.
 * The command line holds only fixed flags, the target's flags and paths
 * made here: nothing from the graph.
 *
 * Several translation units (emit_c's split layout) compile to objects in
 * parallel, each run of the compiler sandboxed as above, then one more run
 * links them; the wall-clock limit is the whole build's.  The shared object
 * is made inside the private directory and renamed to its place only when
 * everything succeeded: a failed or killed build leaves nothing. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "common/clock.h"
#include "codegen/dnnl.h"

/* codegen/rt's source, embedded by the Makefile (build/gen/rt_source.c). */
extern const char coil_rt_dnnl_h[], coil_rt_dnnl_c[];
const char *vec_vmath_source(void); /* codegen/vec.c: vmath.h, which the runtime includes */

/* The child's PATH: the compiler's own helpers (cc1, as, ld) are found here. */
#define BUILD_PATH "/usr/local/bin:/usr/bin:/bin"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

/* rm -rf dir (whatever a killed compiler left there too). */
void build_rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The directory part of path into buf: "." when it has none.  Relative
 * stays relative: a sandboxed caller (sandbox.c) may sit in a directory
 * whose ancestors it cannot search. */
int build_dir_of(const char *path, char *buf, size_t cap)
{
	const char *slash = strrchr(path, '/');
	int n;
	if (slash == path)
		n = snprintf(buf, cap, "/");
	else if (slash)
		n = snprintf(buf, cap, "%.*s", (int)(slash - path), path);
	else
		n = snprintf(buf, cap, ".");
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
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		want = rl.rlim_cur; /* nor the soft one (the compile sandbox's, sandbox.c) */
	rl.rlim_cur = want;
	if (resource == RLIMIT_CPU) {
		if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want + 5)
			rl.rlim_max = want + 5; /* SIGXCPU at the soft limit, SIGKILL 5 s later */
	} else if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want) {
		rl.rlim_max = want;
	}
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

int build_cpus(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return 1;
	int n = CPU_COUNT(&set);
	return n < 1 ? 1 : n;
}

/* One run of the compiler. */
typedef struct job {
	const char *unit;             /* the file it compiles, NULL: the link */
	const char *argv[48];
	char log_path[PATH_MAX + 32];
	char obj[PATH_MAX + 32];
	size_t cost;                  /* for the order of starting */
	int light;                    /* 1: -Og, 2: -O0 (codegen_src) */
	pid_t pid;                    /* 0: not started, -1: finished */
	int status;
} job;

static int start(job *j, const char *exe, char *const *envp, const char *dir, int limit_s)
{
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		child(exe, (char *const *)j->argv, envp, dir, j->log_path, limit_s, parent);
	setpgid(pid, pid); /* also here: no killpg may miss the group */
	j->pid = pid;
	return 0;
}

static void kill_job(job *j)
{
	if (j->pid <= 0)
		return;
	kill(-j->pid, SIGKILL);
	kill(j->pid, SIGKILL);
	while (waitpid(j->pid, &j->status, 0) < 0 && errno == EINTR)
		;
	j->pid = -1;
}

/* The error for a job that did not succeed. */
static int job_error(const job *j, const char *name, const char *exe, int many, coil_err *err)
{
	char log[300], on[PATH_MAX + 16] = "";
	read_log(j->log_path, log, sizeof log);
	if (many)
		snprintf(on, sizeof on, " on %s", j->unit ? j->unit : "the link");
	int status = j->status;
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		const char *why = sig == SIGXCPU  ? " (CPU time limit)"
				  : sig == SIGXFSZ ? " (file size limit)"
				  : sig == SIGKILL ? " (killed; CPU time or memory limit?)"
						   : "";
		coil_code code = sig == SIGXCPU || sig == SIGXFSZ ? COIL_E_RESOURCE : COIL_E_COMPILER;
		return coil_errc(err, code, "build: %s died of signal %d%s%s: %s", name, sig, why, on, log);
	}
	if (WEXITSTATUS(status) == 126)
		return coil_errf(err, "build: cannot set up the sandbox for %s", name);
	if (WEXITSTATUS(status) == 127)
		return coil_errc(err, COIL_E_COMPILER, "build: cannot run %s (%s)", name, exe);
	return coil_errc(err, COIL_E_COMPILER, "build: %s failed (status %d)%s: %s", name, WEXITSTATUS(status), on,
			 log);
}

/* Runs jobs[0..n) (at most par at once, by cost, largest first), then
 * link when given; stops at the first failure, killing the rest. */
static int run_jobs(job *jobs, int n, job *link, int par, const char *name, const char *exe, char *const *envp,
		    const char *dir, int limit_s, double t0, coil_err *err)
{
	int running = 0, left = n, failed = -1, timed_out = 0, linking = 0;
	long nap_us = 1000;
	for (;;) {
		/* start what may start */
		while (failed < 0 && !linking && running < par) {
			int best = -1;
			for (int i = 0; i < n; i++)
				if (jobs[i].pid == 0 && (best < 0 || jobs[i].cost > jobs[best].cost))
					best = i;
			if (best < 0)
				break;
			if (start(&jobs[best], exe, envp, dir, limit_s) != 0) {
				int e = errno;
				for (int i = 0; i < n; i++)
					kill_job(&jobs[i]);
				return coil_errc(err, COIL_E_RESOURCE, "build: cannot start %s: fork: %s", name,
						 strerror(e));
			}
			running++;
		}
		if (failed < 0 && !left && link && !linking) {
			if (start(link, exe, envp, dir, limit_s) != 0) {
				int e = errno;
				return coil_errc(err, COIL_E_RESOURCE, "build: cannot start %s: fork: %s", name,
						 strerror(e));
			}
			linking = 1;
			running++;
		}
		if (!running)
			break;
		/* reap */
		int any = 0;
		for (int i = 0; i < n + 1; i++) {
			job *j = i < n ? &jobs[i] : link;
			if (!j || j->pid <= 0)
				continue;
			int st;
			pid_t r = waitpid(j->pid, &st, WNOHANG);
			if (r == j->pid || (r < 0 && errno != EINTR)) {
				kill(-j->pid, SIGKILL); /* whatever the compiler left running in its group */
				j->status = r == j->pid ? st : (1 << 8);
				j->pid = -1;
				running--;
				any = 1;
				if (i < n)
					left--;
				if (failed < 0 && (!WIFEXITED(j->status) || WEXITSTATUS(j->status)))
					failed = i;
			}
		}
		if (failed >= 0) {
			for (int i = 0; i < n; i++)
				kill_job(&jobs[i]);
			break;
		}
		if (clock_s() - t0 > limit_s) {
			for (int i = 0; i < n; i++)
				kill_job(&jobs[i]);
			if (link)
				kill_job(link);
			timed_out = 1;
			break;
		}
		if (any) {
			nap_us = 1000;
		} else {
			struct timespec ts = {0, nap_us * 1000};
			nanosleep(&ts, NULL);
			if (nap_us < 20000)
				nap_us += nap_us / 2;
		}
	}
	if (timed_out)
		return coil_errc(err, COIL_E_TIMEOUT, "build: %s ran longer than the limit of %d s and was killed", name,
				 limit_s);
	if (failed >= 0)
		return job_error(failed < n ? &jobs[failed] : link, name, exe, n > 1 || link != NULL, err);
	return 0;
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	int bad = !f || fputs(text, f) < 0;
	if (f && fclose(f) != 0)
		bad = 1;
	return bad ? -1 : 0;
}

/* A file name emit_c made: letters, digits, '.', '_' and '-', no slash. */
static int plain_name(const char *s)
{
	if (!s || !*s || *s == '.' || strlen(s) > 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
		      *s == '_' || *s == '-'))
			return 0;
	return 1;
}

int build_copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, bad = in < 0;
	if (!bad)
		bad = (out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0;
	/* in the kernel where it can (a precompiled header is 30 MB), else through a buffer */
	ssize_t n = 0;
	int kernel = 1;
	while (!bad && (n = copy_file_range(in, NULL, out, NULL, (size_t)1 << 30, 0)) > 0)
		;
	if (!bad && n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
		kernel = 0; /* the rest through the buffer, from where the offsets are */
		n = 0;
	}
	char buf[65536];
	while (!bad && !kernel && (n = read(in, buf, sizeof buf)) > 0)
		bad = write(out, buf, (size_t)n) != n;
	bad |= n < 0;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) != 0)
		bad = 1;
	return bad ? -1 : 0;
}

int pch_path(const char *rt_o, char *out, size_t cap)
{
	size_t n = strlen(rt_o);
	if (n < 2 || strcmp(rt_o + n - 2, ".o") || n + 3 > cap)
		return -1;
	snprintf(out, cap, "%.*s.gch", (int)(n - 2), rt_o);
	return 0;
}

int build_files(const codegen_src *src, const char *cc, const char *opt, const char *tflags, int werror,
		int timeout_s, int jobs, const char *rt_in, const char *rt_out, const char *out_so, double *secs,
		coil_err *err)
{
	char dir[PATH_MAX], tmp_so[PATH_MAX + 16], tf[256];
	char exe[PATH_MAX], env_tmp[PATH_MAX + 16], env_home[PATH_MAX + 16];
	const char *name = cc ? cc : "cc";
	*secs = 0;
	if (!out_so || !*out_so)
		return coil_errf(err, "build: no output path");
	/* no files but the runtime: its object alone, into rt_out */
	int rt_only = src && src->n == 0 && src->rt_unit && rt_out;    /* build_rt_object */
	int pch_only = src && src->n == 0 && !src->rt_unit && rt_out;  /* build_kernels_pch */
	if (!src || (src->n < 1 && !rt_only && !pch_only) || src->n > CODEGEN_MAX_FILES)
		return coil_errf(err, "build: no source");
	for (int i = 0; i < src->n; i++)
		if (!plain_name(src->name[i]) || !src->text[i] || !strcmp(src->name[i], "dnnl_rt.c") ||
		    !strcmp(src->name[i], "dnnl_rt.h") || !strcmp(src->name[i], "dnnl_rt_vmath.h"))
			return coil_errf(err, "build: bad source file name");
	if (resolve_cc(name, exe, sizeof exe) != 0)
		return coil_errc(err, COIL_E_COMPILER, "build: compiler '%s' not found", name);
	/* The private directory sits beside the output (inside the cache's tmp/
	 * when building for the cache, so a crash leaves nothing elsewhere).
	 * The compiler runs in it and every path it is given is relative to it;
	 * TMPDIR and HOME are the directory, "." when it is relative. */
	if (build_dir_of(out_so, dir, sizeof dir - 20) != 0)
		return coil_errc(err, COIL_E_LIMIT, "build: output path %s is too long", out_so);
	strcat(dir, "/.coil-cc-XXXXXX");
	if (!mkdtemp(dir))
		return coil_errc(err, COIL_E_IO, "build: cannot make a private directory beside %s: %s", out_so,
				 strerror(errno));
	snprintf(tmp_so, sizeof tmp_so, "%s/model.so", dir);
	snprintf(env_tmp, sizeof env_tmp, "TMPDIR=%s", dir[0] == '/' ? dir : ".");
	snprintf(env_home, sizeof env_home, "HOME=%s", dir[0] == '/' ? dir : ".");
	char *const envp[] = {"PATH=" BUILD_PATH, "LC_ALL=C", env_tmp, env_home, NULL};
	for (int i = 0; i < src->n; i++)
		if (write_text(dir, src->name[i], src->text[i]) != 0) {
			build_rm_tree(dir);
			return coil_errc(err, COIL_E_IO, "build: cannot write %s/%s", dir, src->name[i]);
		}
	/* the oneDNN runtime's source (embedded in libcoil from codegen/rt):
	 * model.c includes it, or it is a unit; not written for a graph whose C
	 * names none of it (its 230 kB would only fill the build's disk) */
	int uses_rt = rt_only || src->rt_unit;
	for (int i = 0; i < src->n && !uses_rt; i++)
		uses_rt = src->text[i] && strstr(src->text[i], "dnnl_rt") != NULL;
	if (uses_rt && (write_text(dir, "dnnl_rt.h", coil_rt_dnnl_h) != 0 || write_text(dir, "dnnl_rt.c", coil_rt_dnnl_c) != 0 ||
			write_text(dir, "dnnl_rt_vmath.h", vec_vmath_source()) != 0)) {
		build_rm_tree(dir);
		return coil_errc(err, COIL_E_IO, "build: cannot write the oneDNN runtime's source into %s", dir);
	}
	/* the units: every .c, and the runtime */
	int nu = 0;
	job *J = calloc(CODEGEN_MAX_FILES + 2, sizeof *J), *L = NULL;
	if (!J) {
		build_rm_tree(dir);
		return coil_err_oom(err);
	}
	/* the runtime built before for these flags: linked as it is; the kernels'
	 * header precompiled with it, when there is one, beside the header (the
	 * compiler takes it where its flags match, else reads the text) */
	int rt_given = src->rt_unit && rt_in && !rt_only;
	if (rt_given) {
		char p[PATH_MAX + 32], g[PATH_MAX + 32];
		snprintf(p, sizeof p, "%s/dnnl_rt.o", dir);
		if (build_copy_file(rt_in, p) != 0)
			rt_given = 0;
		if (rt_given && pch_path(rt_in, g, sizeof g) == 0 && access(g, R_OK) == 0) {
			snprintf(p, sizeof p, "%s/" CODEGEN_KERNELS_H ".gch", dir);
			if (build_copy_file(g, p) != 0)
				unlink(p);
		}
	}
	/* the kernels' header to precompile for the cache */
	char *kh = pch_only ? codegen_kernels_header() : NULL;
	if (pch_only && (!kh || write_text(dir, CODEGEN_KERNELS_H, kh) != 0)) {
		free(kh);
		build_rm_tree(dir);
		return coil_errc(err, COIL_E_IO, "build: cannot write %s into %s", CODEGEN_KERNELS_H, dir);
	}
	free(kh);
	for (int i = 0; i <= src->n + pch_only; i++) {
		const char *u = i < src->n ? src->name[i] : i == src->n ? (src->rt_unit && !rt_given ? "dnnl_rt.c" : NULL)
									  : CODEGEN_KERNELS_H;
		size_t len = u ? strlen(u) : 0;
		if (!u || len < 3 || (strcmp(u + len - 2, ".c") && i <= src->n))
			continue;
		J[nu].unit = u;
		J[nu].light = i < src->n ? src->light[i] : 0;
		J[nu].cost = i < src->n ? strlen(src->text[i]) : (size_t)-1; /* the runtime: the longest */
		nu++;
	}
	if (!nu) {
		free(J);
		build_rm_tree(dir);
		return coil_errf(err, "build: no translation unit");
	}
	snprintf(tf, sizeof tf, "%s", tflags ? tflags : "");
	const char *tv[24];
	int ntv = 0;
	for (char *save = NULL, *t = strtok_r(tf, " ", &save); t && ntv < 16; t = strtok_r(NULL, " ", &save))
		tv[ntv++] = t;
	/* argv: cc opt -std=c11 -fPIC [-shared | -c] -fopenmp ... <target flags> [-W...] -o out unit.c [-lm ...] */
	for (int u = 0; u < nu; u++) {
		job *j = &J[u];
		int n = 0;
		j->argv[n++] = name;
		j->argv[n++] = j->light == 2 || (opt && !strcmp(opt, "-O0")) ? "-O0" : j->light ? "-Og" : opt ? opt : "-O3";
		j->argv[n++] = "-std=c11";
		j->argv[n++] = "-fPIC";
		int whole = nu == 1 && !rt_given && !rt_only && !pch_only; /* compiled and linked in one run */
		const int header = !strcmp(j->unit, CODEGEN_KERNELS_H);
		if (header) {
			j->argv[n++] = "-x";
			j->argv[n++] = "c-header";
		} else {
			j->argv[n++] = whole ? "-shared" : "-c";
		}
		j->argv[n++] = "-fopenmp";
		j->argv[n++] = "-fno-math-errno";
		/* no kernel reads the FP exception flags: without this gcc will not
		 * if-convert a select whose arms may raise one (scatter amax's NaN
		 * test), and below AVX-512 leaves such loops scalar (1e6 x 64
		 * messages into 1e5 targets at one thread, AVX2: 152 -> 39 ms) */
		j->argv[n++] = "-fno-trapping-math";
		j->argv[n++] = "-fvisibility=hidden";
		j->argv[n++] = "-frecord-gcc-switches"; /* the flags, in the artifact's .GCC.command.line */
		for (int t = 0; t < ntv; t++)
			j->argv[n++] = tv[t];
		if (werror) {
			j->argv[n++] = "-Wall";
			j->argv[n++] = "-Wextra";
			j->argv[n++] = "-Werror";
			j->argv[n++] = "-Wno-unused-variable";
			j->argv[n++] = "-Wno-unused-parameter";
		}
		if (header)
			snprintf(j->obj, sizeof j->obj, "%s.gch", j->unit);
		else
			snprintf(j->obj, sizeof j->obj, "%.*s.o", (int)strlen(j->unit) - 2, j->unit);
		snprintf(j->log_path, sizeof j->log_path, "%s/%s.log", dir, j->unit);
		j->argv[n++] = "-o";
		j->argv[n++] = whole ? "model.so" : j->obj;
		j->argv[n++] = j->unit;
		if (whole) {
			j->argv[n++] = "-lm";
			j->argv[n++] = "-Wl,--as-needed"; /* libdnnl only where the rt is used */
			j->argv[n++] = "-ldnnl";
		}
		j->argv[n] = NULL;
	}
	if ((nu > 1 || rt_given) && !rt_only && !pch_only) {
		/* the link: cc opt -shared -fopenmp -fPIC -o model.so *.o -lm -Wl,--as-needed -ldnnl */
		L = &J[nu];
		int n = 0;
		L->argv[n++] = name;
		L->argv[n++] = opt ? opt : "-O3";
		L->argv[n++] = "-shared";
		L->argv[n++] = "-fPIC";
		L->argv[n++] = "-fopenmp";
		L->argv[n++] = "-o";
		L->argv[n++] = "model.so";
		for (int u = 0; u < nu; u++)
			L->argv[n++] = J[u].obj;
		if (rt_given)
			L->argv[n++] = "dnnl_rt.o";
		L->argv[n++] = "-lm";
		L->argv[n++] = "-Wl,--as-needed";
		L->argv[n++] = "-ldnnl";
		L->argv[n] = NULL;
		snprintf(L->log_path, sizeof L->log_path, "%s/link.log", dir);
	}
	int limit_s = timeout_s > 0 ? timeout_s : BUILD_DEFAULT_TIMEOUT_S;
	int par = jobs > 0 ? jobs : build_cpus();
	if (par > BUILD_MAX_JOBS)
		par = BUILD_MAX_JOBS;
	double t0 = clock_s();
	int rc = run_jobs(J, nu, L, par, name, exe, envp, dir, limit_s, t0, err);
	*secs = clock_s() - t0;
	if (!rc && (rt_only || pch_only)) {
		char p[PATH_MAX + 32];
		snprintf(p, sizeof p, "%s/%s", dir, rt_only ? "dnnl_rt.o" : CODEGEN_KERNELS_H ".gch");
		if (rename(p, rt_out) != 0)
			rc = coil_errc(err, COIL_E_COMPILER, "build: %s made no runtime object (%s)", name, strerror(errno));
	} else if (!rc && rename(tmp_so, out_so) != 0) {
		rc = coil_errc(err, COIL_E_COMPILER, "build: %s made no shared object (%s)", name, strerror(errno));
	}
	free(J);
	build_rm_tree(dir);
	return rc;
}

int build_rt_object(const char *cc, const char *opt, const char *tflags, int werror, int timeout_s, const char *out_o,
		    coil_err *err)
{
	codegen_src none = {.n = 0, .rt_unit = 1};
	double secs;
	return build_files(&none, cc, opt, tflags, werror, timeout_s, 1, NULL, out_o, out_o, &secs, err);
}

int build_kernels_pch(const char *cc, const char *opt, const char *tflags, int werror, int timeout_s,
		      const char *out_gch, coil_err *err)
{
	codegen_src none = {.n = 0, .rt_unit = 0};
	double secs;
	return build_files(&none, cc, opt, tflags, werror, timeout_s, 1, NULL, out_gch, out_gch, &secs, err);
}

int build_so(const char *src, const char *cc, const char *opt, const char *tflags, int werror, int timeout_s,
	     const char *out_so, double *secs, coil_err *err)
{
	codegen_src one = {.n = 1, .name = {"model.c"}, .text = {(char *)src}};
	return build_files(&one, cc, opt, tflags, werror, timeout_s, 1, NULL, NULL, out_so, secs, err);
}
