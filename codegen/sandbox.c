/* The compile sandbox (sandbox.h): three processes.
 *
 *   caller   (coild's worker thread, the CLI) makes the work directory and
 *            the cgroup, writes the job (the graph's canonical text and
 *            the options) into a sealed memfd, forks and at once executes
 *            its own program again as the supervisor, then only watches: it
 *            reads the supervisor's and worker's reports from a pipe, polls
 *            the cgroup's counters, and kills the whole tree at the deadline
 *            or over a budget.  Then it gives its verdict, moves the shared
 *            object out and removes the rest.
 *   supervisor  a fresh image of the caller's program, entered from a
 *            constructor before main (sbx_exec_entry): joins the cgroup,
 *            drops every descriptor but the pipe and the job, unshares the
 *            namespaces and forks the worker (pid 1 of the new pid
 *            namespace), waits for it and reports how it ended.
 *   worker   makes mounts private, mounts its /proc, makes everything but
 *            its work directory read-only, becomes nobody,
 *            sets no_new_privs, rlimits (where no cgroup stands in) and the
 *            seccomp filter, then parses the job's graph and runs
 *            codegen_compile, which forks the compilers (build.c), and
 *            reports its result.
 *
 * Why exec and not a bare fork: a child forked from a threaded process
 * inherits every lock another thread held at that instant (an allocator's
 * under ASan, the dynamic loader's, a library's), and the first it takes
 * can hang it for good; it did, now and then, in coild.  Between fork and
 * exec the child makes only system calls.  The program executed is the
 * caller's own (/proc/self/exe, opened before the fork, so an upgrade that
 * replaced the file on disk changes nothing): every program that can call
 * sandbox_compile links this file and so this entry, and there is no
 * helper binary to install and find.  The worker compiles the canonical
 * graph, the one the cache key names, so the artifact depends on the key
 * alone.  Each report is one write of one fixed-size struct, smaller than
 * PIPE_BUF, so it arrives whole or not at all.
 *
 * The work directory (.coil-sbx-XXXXXX beside out_so) is given to the
 * sandbox's uid; the supervisor enters it while it still may, so the tree
 * needs no search permission on the directories above it.  Afterwards the
 * caller takes it back before looking at what the tree left there, and
 * moves out only a plain file with one link: never a symbolic or hard link
 * planted to make it read something else. */
#include "codegen/sandbox.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/sandbox_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define SBX_ASAN 1 /* ASan cannot run under RLIMIT_AS (its shadow memory) */
#else
#define SBX_ASAN 0
#endif

/* The compilers' own deadline (build.c) is the sandbox's plus this, so
 * that the sandbox's verdict is the one given. */
#define SBX_BUILD_SLACK_S 5
/* How often the caller reads the cgroup's counters. */
#define SBX_TICK_MS 50

/* A report from the tree. */
typedef struct sbx_msg {
	char type;      /* 'I' set-up done, 'R' the compile's result, 'S' how the worker ended, 'E' set-up
	                 * failed, 'X' the supervisor could not be executed */
	int rc;         /* 'R'; 'X': errno */
	int status;     /* 'S': the worker's wait status */
	unsigned have;  /* 'I': SANDBOX_* had */
	char notes[256]; /* 'I': what could not be had */
	coil_err err;   /* 'R', 'E' */
	codegen_result res; /* 'R' */
} sbx_msg;
_Static_assert(sizeof(sbx_msg) <= PIPE_BUF, "a report is one atomic write");

/* Why the caller killed the tree. */
enum { KILL_NONE, KILL_DEADLINE, KILL_PIDS, KILL_CPU, KILL_READ };

/* How the caller executes its own program as the supervisor: argv is
 * exactly { SBX_ARGV0 }, the report pipe is descriptor SBX_PIPE_FD and the
 * job SBX_JOB_FD. */
#define SBX_ARGV0 "coil-sandbox-supervisor"
#define SBX_PIPE_FD 3
#define SBX_JOB_FD 4
#define SBX_MAGIC 0x31786273206c696fULL /* "oil sbx1" */

/* The job: what the tree gets, in a sealed memfd, the canonical graph's
 * text (graph_len bytes) right after it. */
typedef struct sbx_job {
	uint64_t magic;
	uint64_t size;         /* the whole job, text included */
	pid_t caller;
	sandbox_limits lim;
	char work[PATH_MAX];   /* the work directory */
	int drop;              /* become SANDBOX_UID (coil runs as root) */
	sbx_cgroup cg;
	/* codegen_opts, by value ("" for NULL) */
	char target[64], graph_hash[72], cc[PATH_MAX], opt[16];
	int werror, units, jobs, autotune, tune_threads;
	int rt_in;             /* codegen_opts.rt_in given: a copy is SANDBOX_RT_IN in the work directory */
	uint64_t max_c_bytes;
	uint64_t graph_len;
} sbx_job;

typedef struct sbx_run {
	sbx_job job;           /* what the tree gets */
	/* what the caller learns */
	int got_result, got_status, got_setup_err, got_exec_err, rc, status, killed, read_errno;
	coil_err err;
	codegen_result res;
	unsigned have;
	char notes[512];
	sbx_cg_usage use;
} sbx_run;

int sandbox_enabled(void)
{
	const char *e = getenv("COIL_SANDBOX");
	return !(e && (!strcmp(e, "0") || !strcmp(e, "off")));
}

/* ---- in the tree ---- */

static void send_msg(int fd, const sbx_msg *m)
{
	ssize_t n;
	do
		n = write(fd, m, sizeof *m);
	while (n < 0 && errno == EINTR);
}

static int put_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Every signal to its default action, none blocked: a handler of the
 * caller's (a crash reporter, a test framework's) must not run in the
 * tree, and a fault there must end the process that made it. */
static void default_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &sa, NULL); /* fails harmlessly for SIGKILL, SIGSTOP and glibc's own */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In a new user namespace: this uid and gid, mapped to themselves. */
static int map_self(uid_t uid, gid_t gid)
{
	char m[64];
	if (put_file("/proc/self/setgroups", "deny"))
		return -1;
	snprintf(m, sizeof m, "%u %u 1", (unsigned)uid, (unsigned)uid);
	if (put_file("/proc/self/uid_map", m))
		return -1;
	snprintf(m, sizeof m, "%u %u 1", (unsigned)gid, (unsigned)gid);
	return put_file("/proc/self/gid_map", m);
}

static int become_nobody(void)
{
	return setgroups(0, NULL) || setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID) ||
	       setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID) ? -1 : 0;
}

/* Closes every descriptor from fd on. */
static void close_from(unsigned fd)
{
	if (syscall(SYS_close_range, fd, ~0u, 0u) != 0)
		for (int k = (int)fd; k < 65536; k++)
			close(k);
}

/* Every descriptor but the pipe (SBX_PIPE_FD, made close-on-exec) and
 * stderr: stdin and stdout are /dev/null; anything of the caller's that
 * was not close-on-exec (sockets, database, locks) goes. */
static int keep_only_pipe(void)
{
	int null = open("/dev/null", O_RDWR);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || fcntl(SBX_PIPE_FD, F_SETFD, FD_CLOEXEC) != 0)
		return -1;
	close_from(SBX_PIPE_FD + 1);
	return 0;
}

#define NS_FLAGS (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)

/* The namespaces.  Root unshares them as root (the worker drops to nobody
 * later, after mounting its /proc); where root may not (no CAP_SYS_ADMIN,
 * in some containers), and for any other user, through a user namespace
 * of its own uid, after becoming nobody first when root.  m->have and
 * m->notes say what it got; j->drop is cleared when the drop happened.
 * -1 when it is left in a user namespace without its ids mapped (where it
 * could create no file). */
static int unshare_all(sbx_job *j, sbx_msg *m)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	int e = 0;
	if (uid == 0) {
		if (unshare(NS_FLAGS) == 0) {
			m->have |= SANDBOX_MNTNS | SANDBOX_PIDNS | SANDBOX_NETNS;
			return 0;
		}
		e = errno;
	}
	if (uid == 0 && j->drop) {
		if (become_nobody() != 0) {
			sbx_note(m->notes, sizeof m->notes, "cannot become uid %d: %s", SANDBOX_UID, strerror(errno));
			return 0;
		}
		j->drop = 0;
		m->have |= SANDBOX_UID_DROP;
		uid = SANDBOX_UID, gid = SANDBOX_GID;
	}
	if (unshare(CLONE_NEWUSER | NS_FLAGS) != 0) {
		sbx_note(m->notes, sizeof m->notes, "no namespaces (unshare: %s)", strerror(e ? e : errno));
		return 0;
	}
	/* a uid change made this process undumpable, and so its /proc/self
	 * root's: the maps are written there */
	int dumpable = prctl(PR_GET_DUMPABLE);
	prctl(PR_SET_DUMPABLE, 1);
	int rc = map_self(uid, gid);
	prctl(PR_SET_DUMPABLE, dumpable);
	if (rc == 0)
		m->have |= SANDBOX_USERNS | SANDBOX_MNTNS | SANDBOX_PIDNS | SANDBOX_NETNS;
	return rc;
}

/* The file system read-only but for the work directory: the worker's
 * working directory moves to a detached bind mount of it (a clone of the
 * mount, attached nowhere, so that ".." leads nowhere above it either),
 * then every mount is made read-only. */
static void read_only(sbx_msg *m)
{
	struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
	int t = open_tree(AT_FDCWD, ".", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (t < 0 || fchdir(t) != 0 || mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro) != 0)
		sbx_note(m->notes, sizeof m->notes, "file system not made read-only (%s)", strerror(errno));
	else
		m->have |= SANDBOX_RO;
	if (t >= 0)
		close(t);
}

/* The worker's mounts: private (nothing propagates out or in), a /proc
 * that shows its own pid namespace only, and all read-only but the work
 * directory. */
static void mounts(sbx_msg *m)
{
	if (!(m->have & SANDBOX_MNTNS))
		return;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		/* e.g. in a chroot, where / is no mount point: mount nothing */
		sbx_note(m->notes, sizeof m->notes, "mounts not made private (%s): no /proc of its own, not read-only",
			 strerror(errno));
		m->have &= ~(unsigned)SANDBOX_MNTNS;
		return;
	}
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0)
		m->have |= SANDBOX_PROC;
	else
		sbx_note(m->notes, sizeof m->notes, "no /proc of its own (%s)", strerror(errno));
	read_only(m);
}

static void drop_caps(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	syscall(SYS_capset, &h, d);
}

static void set_limit(int resource, rlim_t soft, rlim_t hard)
{
	struct rlimit rl = {soft, hard};
	setrlimit(resource, &rl);
}

/* Per-process limits where no cgroup bounds the tree. */
static void rlimits(const sbx_job *j, sbx_msg *m)
{
	set_limit(RLIMIT_CORE, 0, 0);
	if (!(j->cg.have & SANDBOX_CG_MEM) && !SBX_ASAN)
		set_limit(RLIMIT_AS, j->lim.mem_bytes, j->lim.mem_bytes);
	if (!(j->cg.have & SANDBOX_CG_PIDS))
		set_limit(RLIMIT_NPROC, (rlim_t)j->lim.pids, (rlim_t)j->lim.pids);
	if (!(j->cg.have & SANDBOX_CG_CPU))
		set_limit(RLIMIT_CPU, (rlim_t)j->lim.cpu_s, (rlim_t)j->lim.cpu_s + 5);
	if (j->cg.have != (SANDBOX_CG_MEM | SANDBOX_CG_PIDS | SANDBOX_CG_CPU))
		sbx_note(m->notes, sizeof m->notes, "per-process rlimits stand in for the missing cgroup budgets%s",
			 SBX_ASAN && !(j->cg.have & SANDBOX_CG_MEM) ? " (no memory limit: ASan build)" : "");
}

/* TEST ONLY (tests/test_sandbox.c): COIL_SANDBOX_TEST=crash, alloc or spin
 * makes code generation crash, allocate without end or never finish.  Read
 * in the worker only, after the sandbox is in place.  -1 with err when the
 * allocation ran out without being killed. */
static int test_hook(coil_err *err)
{
	const char *t = getenv("COIL_SANDBOX_TEST");
	if (!t)
		return 0;
	if (!strcmp(t, "crash")) {
		/* a real fault (pid 1 of a namespace ignores a raise()d SIGSEGV),
		 * and not a null pointer, which UBSan would catch first */
		volatile char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED)
			p[0] = 1;
	}
	if (!strcmp(t, "spin"))
		for (volatile unsigned long x = 0;; x++)
			;
	if (!strcmp(t, "alloc"))
		for (;;) {
			char *p = malloc((size_t)64 << 20);
			if (!p)
				return coil_err_oom(err);
			memset(p, 1, (size_t)64 << 20);
		}
	return 0;
}

/* The worker's confinement, in order: mounts (while it may), its uid,
 * capabilities, death with its parent, rlimits, no_new_privs, seccomp. */
static void confine(const sbx_job *j, sbx_msg *m)
{
	mounts(m);
	if (j->drop) {
		if (become_nobody() == 0)
			m->have |= SANDBOX_UID_DROP;
		else
			sbx_note(m->notes, sizeof m->notes, "cannot become uid %d: %s", SANDBOX_UID, strerror(errno));
	}
	if (m->have & SANDBOX_USERNS)
		drop_caps();
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* after the uid change, which clears it */
	rlimits(j, m);
	char why[128] = "";
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		snprintf(why, sizeof why, "no_new_privs: %s", strerror(errno));
	if (!why[0] && sbx_filter_load(why, sizeof why) == 0)
		m->have |= SANDBOX_SECCOMP;
	else
		sbx_note(m->notes, sizeof m->notes, "no seccomp filter (%s)", why);
}

static const char *or_null(const char *s)
{
	return s[0] ? s : NULL;
}

/* The worker: pid 1 of the new pid namespace where there is one.  Reports
 * what confinement it has, then parses the graph and compiles it. */
static __attribute__((noreturn)) void worker(const sbx_job *j, const char *text, sbx_msg *m)
{
	confine(j, m);
	m->type = 'I';
	send_msg(SBX_PIPE_FD, m);
	sbx_msg out;
	memset(&out, 0, sizeof out);
	out.type = 'R';
	codegen_opts o = {.target = or_null(j->target), .graph_hash = or_null(j->graph_hash), .cc = or_null(j->cc),
			  .opt = or_null(j->opt), .werror = j->werror, .units = j->units, .jobs = j->jobs,
			  .autotune = j->autotune, .tune_threads = j->tune_threads,
			  .max_c_bytes = (size_t)j->max_c_bytes, .rt_in = j->rt_in ? SANDBOX_RT_IN : NULL};
	o.timeout_s = j->lim.deadline_s + SBX_BUILD_SLACK_S;
	out.rc = test_hook(&out.err);
	coil_graph *g = NULL;
	if (!out.rc && !(g = graph_parse(text, (size_t)j->graph_len, &out.err))) {
		coil_err_prefix(&out.err, "sandbox: the graph does not parse again");
		out.rc = -1;
	}
	if (!out.rc)
		out.rc = codegen_compile(g, &o, "model.so", &out.res, &out.err);
	send_msg(SBX_PIPE_FD, &out);
	_exit(0);
}

/* The job from SBX_JOB_FD, mapped (and the descriptor closed): *text is
 * the graph.  -1 when there is none, or it is not whole. */
static int read_job(sbx_job *j, const char **text)
{
	struct stat st;
	if (fstat(SBX_JOB_FD, &st) != 0 || (size_t)st.st_size < sizeof *j)
		return -1;
	const char *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, SBX_JOB_FD, 0);
	close(SBX_JOB_FD);
	if (p == MAP_FAILED)
		return -1;
	memcpy(j, p, sizeof *j);
	*text = p + sizeof *j;
	return j->magic == SBX_MAGIC && j->size == (uint64_t)st.st_size && j->graph_len == j->size - sizeof *j &&
	       memchr(j->work, 0, sizeof j->work) && memchr(j->target, 0, sizeof j->target) &&
	       memchr(j->graph_hash, 0, sizeof j->graph_hash) && memchr(j->cc, 0, sizeof j->cc) &&
	       memchr(j->opt, 0, sizeof j->opt) ? 0 : -1;
}

/* The supervisor: the caller's child (executed afresh, or where that
 * cannot be, forked only), the worker's parent.  The report pipe is
 * SBX_PIPE_FD. */
static __attribute__((noreturn)) void supervisor(sbx_job *j, const char *text)
{
	sbx_msg m;
	memset(&m, 0, sizeof m);
	default_signals();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != j->caller)
		_exit(1);
	setpgid(0, 0); /* the caller kills the group */
	if (chdir(j->work) != 0 || keep_only_pipe() != 0) {
		coil_errf(&m.err, "sandbox: cannot set up: %s", strerror(errno));
		m.type = 'E';
		send_msg(SBX_PIPE_FD, &m);
		_exit(1);
	}
	if (j->cg.have && sbx_cg_join(&j->cg) != 0)
		sbx_note(m.notes, sizeof m.notes, "cannot join the cgroup: %s", strerror(errno));
	m.have = SANDBOX_PROCESS;
	if (unshare_all(j, &m) != 0) {
		coil_errf(&m.err, "sandbox: cannot map ids in its user namespace: %s", strerror(errno));
		m.type = 'E';
		send_msg(SBX_PIPE_FD, &m);
		_exit(1);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* again: a uid change clears it */
	pid_t pid = fork();
	if (pid == 0)
		worker(j, text, &m);
	if (pid < 0) {
		int e = errno;
		coil_errc(&m.err, COIL_E_RESOURCE, "sandbox: cannot start code generation: fork: %s", strerror(e));
		m.type = 'E';
		send_msg(SBX_PIPE_FD, &m);
		_exit(1);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	memset(&m, 0, sizeof m);
	m.type = 'S';
	m.status = st;
	send_msg(SBX_PIPE_FD, &m);
	_exit(0);
}

/* A program that links this file becomes the supervisor when executed as
 * run_tree does, before its main (glibc passes main's arguments to
 * constructors). */
__attribute__((constructor)) static void sbx_exec_entry(int argc, char **argv)
{
	if (argc != 1 || !argv || !argv[0] || strcmp(argv[0], SBX_ARGV0))
		return;
	static sbx_job job;
	const char *text = NULL;
	if (read_job(&job, &text) != 0) {
		fprintf(stderr, "%s: no job: this program is run by coil's compile sandbox only\n", SBX_ARGV0);
		_exit(2);
	}
	supervisor(&job, text);
}

/* ---- in the caller ---- */

static void resolve_limits(const sandbox_limits *in, sandbox_limits *out)
{
	sandbox_limits d = {0};
	*out = in ? *in : d;
	if (out->deadline_s <= 0)
		out->deadline_s = BUILD_DEFAULT_TIMEOUT_S;
	if (!out->mem_bytes)
		out->mem_bytes = SANDBOX_DEFAULT_MEM;
	if (out->pids <= 0)
		out->pids = SANDBOX_DEFAULT_PIDS;
	if (out->cpu_s <= 0)
		out->cpu_s = SANDBOX_CPU_PER_DEADLINE * out->deadline_s;
}

/* .coil-sbx-XXXXXX beside out_so, the sandbox's uid's when coil is root. */
static int make_work(sbx_run *r, const char *out_so, coil_err *err)
{
	if (build_dir_of(out_so, r->job.work, sizeof r->job.work - 20) != 0)
		return coil_errc(err, COIL_E_LIMIT, "sandbox: output path %s is too long", out_so);
	strcat(r->job.work, "/.coil-sbx-XXXXXX");
	if (!mkdtemp(r->job.work))
		return coil_errc(err, COIL_E_IO, "sandbox: cannot make a work directory beside %s: %s", out_so,
				 strerror(errno));
	r->job.drop = geteuid() == 0;
	if (r->job.drop && chown(r->job.work, SANDBOX_UID, SANDBOX_GID) != 0) {
		sbx_note(r->notes, sizeof r->notes, "runs as root: cannot hand %s to uid %d (%s)", r->job.work,
			 SANDBOX_UID, strerror(errno));
		r->job.drop = 0;
	}
	return 0;
}

/* One report, whole: 1, 0 at the end, -1 on error. */
static int read_msg(int fd, sbx_msg *m)
{
	size_t got = 0;
	while (got < sizeof *m) {
		ssize_t n = read(fd, (char *)m + got, sizeof *m - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return got ? (errno = EPIPE, -1) : 0;
		got += (size_t)n;
	}
	return 1;
}

static void take(sbx_run *r, const sbx_msg *m)
{
	if (m->type == 'I') {
		r->have |= m->have;
		if (m->notes[0])
			sbx_note(r->notes, sizeof r->notes, "%s", m->notes);
	} else if (m->type == 'R') {
		r->got_result = 1;
		r->rc = m->rc;
		r->err = m->err;
		r->res = m->res;
	} else if (m->type == 'S') {
		r->got_status = 1;
		r->status = m->status;
	} else if (m->type == 'E') {
		r->got_setup_err = 1;
		r->err = m->err;
	} else if (m->type == 'X') {
		r->got_exec_err = 1;
		r->rc = m->rc;
	}
}

/* Over the process or CPU budget (the memory budget kills by itself)? */
static int over_budget(sbx_run *r)
{
	sbx_cg_usage_read(&r->job.cg, &r->use);
	if ((r->job.cg.have & SANDBOX_CG_PIDS) && r->use.pids_max)
		return KILL_PIDS;
	if ((r->job.cg.have & SANDBOX_CG_CPU) && r->use.cpu_ns > (uint64_t)r->job.lim.cpu_s * 1000000000u)
		return KILL_CPU;
	return KILL_NONE;
}

/* Reads the reports until the tree is done, or kills it. */
static void watch(sbx_run *r, pid_t sup, int rfd)
{
	double end = clock_s() + r->job.lim.deadline_s;
	for (;;) {
		double left = end - clock_s();
		if (left <= 0) {
			r->killed = KILL_DEADLINE;
			break;
		}
		int ms = r->job.cg.have ? SBX_TICK_MS : left > 1 ? 1000 : (int)(left * 1000) + 1;
		struct pollfd p = {rfd, POLLIN, 0};
		int n = poll(&p, 1, ms);
		if (n < 0 && errno != EINTR) {
			r->read_errno = errno, r->killed = KILL_READ;
			break;
		}
		if (n > 0) {
			sbx_msg m;
			int k = read_msg(rfd, &m);
			if (k == 0)
				return; /* everyone in the tree closed the pipe: done */
			if (k < 0) {
				r->read_errno = errno, r->killed = KILL_READ;
				break;
			}
			take(r, &m);
			continue;
		}
		if ((r->killed = over_budget(r)) != KILL_NONE)
			break;
	}
	sbx_cg_kill(&r->job.cg);
	kill(-sup, SIGKILL); /* the supervisor and the worker; the compilers die with the worker */
}

static const char *signame(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGILL: return "SIGILL";
	case SIGFPE: return "SIGFPE";
	case SIGABRT: return "SIGABRT";
	case SIGKILL: return "SIGKILL";
	case SIGXCPU: return "SIGXCPU";
	case SIGSYS: return "SIGSYS";
	default: return "signal";
	}
}

/* The worker's end, when it reported no result. */
static int worker_verdict(const sbx_run *r, coil_err *err)
{
	int st = r->status, sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
	if (sig == SIGKILL || sig == SIGXCPU)
		return coil_errc(err, COIL_E_RESOURCE, "code generation was killed (signal %d, %s: over a limit)", sig,
				 signame(sig));
	if (sig)
		return coil_errc(err, COIL_E_INTERNAL, "code generation crashed (signal %d, %s)", sig, signame(sig));
	return coil_errc(err, COIL_E_INTERNAL, "code generation ended without a result (exit status %d)",
			 WEXITSTATUS(st));
}

/* The error for the compile, from what the caller saw; 0 on success. */
static int verdict(const sbx_run *r, int sup_status, coil_err *err)
{
	int dl = r->job.lim.deadline_s;
	switch (r->killed) {
	case KILL_DEADLINE:
		return coil_errc(err, COIL_E_TIMEOUT, "compile ran longer than its deadline of %d s and was killed", dl);
	case KILL_PIDS:
		return coil_errc(err, COIL_E_RESOURCE,
				 "compile reached its budget of %d processes (a fork refused) and was killed", r->job.lim.pids);
	case KILL_CPU:
		return coil_errc(err, COIL_E_RESOURCE, "compile used more than its budget of %d s of CPU time and was killed",
				 r->job.lim.cpu_s);
	case KILL_READ:
		return coil_errc(err, COIL_E_IO, "sandbox: reading the compile's report: %s", strerror(r->read_errno));
	}
	if (r->got_exec_err)
		return coil_errc(err, COIL_E_RESOURCE, "sandbox: cannot start: executing /proc/self/exe: %s",
				 strerror(r->rc));
	if (r->got_result && r->rc == 0)
		return 0;
	if (r->use.oom_kills)
		return coil_errc(err, COIL_E_RESOURCE, "compile exceeded its memory budget of %llu MiB (%s)",
				 (unsigned long long)(r->job.lim.mem_bytes >> 20),
				 r->got_result ? r->err.msg : "code generation was killed");
	if (r->use.pids_max)
		return coil_errc(err, COIL_E_RESOURCE, "compile reached its budget of %d processes (%s)", r->job.lim.pids,
				 r->got_result ? r->err.msg : "code generation was killed");
	if (r->got_result || r->got_setup_err) {
		if (err)
			*err = r->err;
		return -1;
	}
	if (r->got_status)
		return worker_verdict(r, err);
	if (WIFSIGNALED(sup_status))
		return coil_errf(err, "sandbox: the supervisor died of signal %d", WTERMSIG(sup_status));
	return coil_errf(err, "sandbox: the supervisor exited (status %d) before code generation ended",
			 WEXITSTATUS(sup_status));
}

/* Takes the work directory back, then moves its model.so to out_so: a
 * plain file with one link only. */
static int take_output(const sbx_run *r, const char *out_so, coil_err *err)
{
	char so[PATH_MAX + 16];
	snprintf(so, sizeof so, "%s/model.so", r->job.work);
	if ((r->have & SANDBOX_UID_DROP) &&
	    (chown(r->job.work, geteuid(), getegid()) != 0 || chmod(r->job.work, 0700) != 0))
		return coil_errc(err, COIL_E_IO, "sandbox: cannot take %s back: %s", r->job.work, strerror(errno));
	struct stat st;
	if (lstat(so, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
		return coil_errc(err, COIL_E_COMPILER, "sandbox: the compile left no plain file %s", so);
	if (rename(so, out_so) != 0)
		return coil_errc(err, COIL_E_IO, "sandbox: cannot move %s to %s: %s", so, out_so, strerror(errno));
	return 0;
}

/* What could not be had, once per process on stderr. */
static void log_notes(const char *notes)
{
	static atomic_int said;
	if (notes[0] && !atomic_exchange(&said, 1))
		fprintf(stderr, "coil: sandbox: %s\n", notes);
}

/* The job in a sealed memfd (close-on-exec), or -1 with err. */
static int write_job(sbx_job *job, const char *text, coil_err *err)
{
	int fd = memfd_create("coil-sandbox-job", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return coil_errc(err, COIL_E_RESOURCE, "sandbox: memfd_create: %s", strerror(errno));
	const char *part[2] = {(const char *)job, text};
	size_t left[2] = {sizeof *job, (size_t)job->graph_len};
	for (int k = 0; k < 2; k++)
		while (left[k]) {
			ssize_t n = write(fd, part[k], left[k]);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				int e = n < 0 ? errno : EIO;
				close(fd);
				return coil_errc(err, COIL_E_RESOURCE, "sandbox: writing the job: %s", strerror(e));
			}
			part[k] += n, left[k] -= (size_t)n;
		}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
		int e = errno;
		close(fd);
		return coil_errc(err, COIL_E_RESOURCE, "sandbox: sealing the job: %s", strerror(e));
	}
	return fd;
}

/* In the child, between fork and exec: only system calls.  The pipe and
 * the job go to their numbers (through numbers above them, in case they
 * sit on each other's), everything else is closed, and the program runs
 * again as the supervisor.  A failed exec is reported as 'X'.  Without
 * the program (exe -1) the child goes on as the supervisor, in r's copy. */
static __attribute__((noreturn)) void start_supervisor(int exe, int wfd, int job, sbx_msg *fail, sbx_run *r,
							const char *text)
{
	extern char **environ;
	static char *const argv[] = {SBX_ARGV0, NULL};
	if (exe < 0) {
		if (wfd == SBX_PIPE_FD || dup2(wfd, SBX_PIPE_FD) == SBX_PIPE_FD)
			supervisor(&r->job, text);
		_exit(127);
	}
	int e = fcntl(exe, F_DUPFD_CLOEXEC, 16), p = fcntl(wfd, F_DUPFD, 16), q = fcntl(job, F_DUPFD, 16);
	if (e >= 0 && p >= 0 && q >= 0 && dup2(p, SBX_PIPE_FD) >= 0 && dup2(q, SBX_JOB_FD) >= 0 &&
	    dup3(e, SBX_JOB_FD + 1, O_CLOEXEC) >= 0) {
		close_from(SBX_JOB_FD + 2);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		syscall(SYS_execveat, SBX_JOB_FD + 1, "", argv, environ, AT_EMPTY_PATH);
	}
	fail->rc = errno;
	ssize_t n = write(p >= 0 ? SBX_PIPE_FD : wfd, fail, sizeof *fail);
	(void)n;
	_exit(127);
}

/* Starts the supervisor, watches, reaps.  -1 with err when it cannot
 * start. */
static int run_tree(sbx_run *r, const char *text, coil_err *err)
{
	int exe = open("/proc/self/exe", O_PATH | O_CLOEXEC), job = -1;
	if (exe < 0)
		sbx_note(r->notes, sizeof r->notes,
			 "cannot open /proc/self/exe (%s): the tree is forked without exec, where a lock another "
			 "thread held can hang it until the deadline", strerror(errno));
	else if ((job = write_job(&r->job, text, err)) < 0) {
		close(exe);
		return -1;
	}
	static const sbx_msg fail0 = {.type = 'X'};
	sbx_msg *fail = malloc(sizeof *fail);
	int fds[2] = {-1, -1};
	if (!fail || pipe2(fds, O_CLOEXEC) != 0) {
		int e = fail ? errno : ENOMEM;
		free(fail);
		if (exe >= 0)
			close(exe), close(job);
		return coil_errc(err, COIL_E_RESOURCE, "sandbox: pipe: %s", strerror(e));
	}
	*fail = fail0;
	pid_t sup = fork();
	if (sup == 0)
		start_supervisor(exe, fds[1], job, fail, r, text);
	int e = errno;
	free(fail);
	close(fds[1]);
	if (exe >= 0)
		close(exe), close(job);
	if (sup < 0) {
		close(fds[0]);
		return coil_errc(err, COIL_E_RESOURCE, "sandbox: cannot start: fork: %s", strerror(e));
	}
	watch(r, sup, fds[0]);
	close(fds[0]);
	int st = 0;
	while (waitpid(sup, &st, 0) < 0 && errno == EINTR)
		;
	sbx_cg_usage_read(&r->job.cg, &r->use);
	sbx_cg_kill(&r->job.cg); /* stragglers outside a pid namespace */
	return verdict(r, st, err);
}

/* codegen_opts into the job; -1 with err when a string does not fit. */
static int job_opts(sbx_job *j, const codegen_opts *o, coil_err *err)
{
	struct {
		char *to;
		size_t cap;
		const char *from, *what;
	} s[] = {{j->target, sizeof j->target, o->target, "target"},
		 {j->graph_hash, sizeof j->graph_hash, o->graph_hash, "graph hash"},
		 {j->cc, sizeof j->cc, o->cc, "compiler path"},
		 {j->opt, sizeof j->opt, o->opt, "optimization flag"}};
	for (size_t k = 0; k < sizeof s / sizeof *s; k++)
		if (s[k].from && (size_t)snprintf(s[k].to, s[k].cap, "%s", s[k].from) >= s[k].cap)
			return coil_errc(err, COIL_E_LIMIT, "sandbox: the %s is too long (%zu bytes at most)", s[k].what,
					 s[k].cap - 1);
	j->werror = o->werror, j->units = o->units, j->jobs = o->jobs;
	j->autotune = o->autotune, j->tune_threads = o->tune_threads;
	j->rt_in = o->rt_in != NULL;
	j->max_c_bytes = o->max_c_bytes;
	return 0;
}

int sandbox_compile(coil_graph *g, const codegen_opts *o, const sandbox_limits *lim, const char *out_so,
		    codegen_result *res, sandbox_info *info, coil_err *err)
{
	codegen_opts dflt = {0};
	o = o ? o : &dflt;
	if (info)
		memset(info, 0, sizeof *info);
	if (!sandbox_enabled())
		return codegen_compile(g, o, out_so, res, err);
	if (!out_so || o->dump_after || o->keep_c)
		return coil_errc(err, COIL_E_UNSUPPORTED, "sandbox: needs an output and no IR dump or kept C");
	sbx_run *r = calloc(1, sizeof *r);
	if (!r)
		return coil_err_oom(err);
	size_t len = 0;
	const char *text = graph_canonical(g, &len, err);
	r->job.magic = SBX_MAGIC;
	r->job.caller = getpid();
	r->job.graph_len = len;
	r->job.size = sizeof r->job + len;
	resolve_limits(lim, &r->job.lim);
	int rc = text ? job_opts(&r->job, o, err) : -1;
	if (rc == 0)
		rc = make_work(r, out_so, err);
	/* the runtime's object: a copy the tree may read (and spoil only for
	 * itself), never the caller's file */
	if (rc == 0 && r->job.rt_in) {
		char in[PATH_MAX + 16], g[PATH_MAX + 16], gi[PATH_MAX + 16];
		snprintf(in, sizeof in, "%s/" SANDBOX_RT_IN, r->job.work);
		r->job.rt_in = build_copy_file(o->rt_in, in) == 0;
		/* and its precompiled header, when it has one (pch_path) */
		if (r->job.rt_in && pch_path(o->rt_in, g, sizeof g) == 0 && pch_path(in, gi, sizeof gi) == 0 &&
		    access(g, R_OK) == 0 && build_copy_file(g, gi) != 0)
			unlink(gi);
	}
	if (rc == 0) {
		sbx_cg_create(&r->job.cg, &r->job.lim, r->notes, sizeof r->notes);
		rc = run_tree(r, text, err);
		sbx_cg_destroy(&r->job.cg, r->notes, sizeof r->notes);
		if (rc == 0)
			rc = take_output(r, out_so, err);
		if (rc == 0 && res)
			*res = r->res;
		build_rm_tree(r->job.work);
	}
	r->have |= r->job.cg.have;
	log_notes(r->notes);
	if (info) {
		info->have = r->have;
		snprintf(info->notes, sizeof info->notes, "%s", r->notes);
	}
	free(r);
	return rc;
}
