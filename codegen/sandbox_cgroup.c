/* The compile sandbox's cgroup (sandbox_internal.h): one per compile, made
 * beside nothing else of coil's, under the caller's own cgroup so that its
 * budgets nest inside whatever bounds the caller.
 *
 *   v2 (/sys/fs/cgroup/cgroup.controllers exists): one directory; memory.max
 *      and pids.max where the parent lets those controllers down (it is
 *      asked, "+memory +pids" in its cgroup.subtree_control, which fails
 *      when the parent holds processes itself: then only CPU accounting
 *      and killing), memory.swap.max 0; memory.events oom_kill, pids.events
 *      max and cpu.stat usage_usec say what happened; cgroup.kill kills.
 *   v1: a directory in each of the memory, pids and cpuacct hierarchies
 *      found in /proc/self/mountinfo; memory.limit_in_bytes (and
 *      memory.memsw.limit_in_bytes where swap is accounted), pids.max;
 *      memory.oom_control oom_kill, pids.events max, cpuacct.usage.
 * Making directories there takes root (or a delegated v2 subtree); where it
 * fails the sandbox falls back to per-process rlimits and says so.  The
 * directories are named coil-PID-N; the first compile of a process removes
 * those of processes that are gone (killed in the middle of a compile). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/sandbox_internal.h"

#define CG_ROOT "/sys/fs/cgroup"

static atomic_uint cg_seq; /* names: coil-<pid>-<seq> */

void sbx_note(char *notes, size_t cap, const char *fmt, ...)
{
	size_t n = strlen(notes);
	if (n && n + 2 < cap)
		n += (size_t)snprintf(notes + n, cap - n, "; ");
	if (n + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(notes + n, cap - n, fmt, ap);
	va_end(ap);
}

static void nap_ms(long ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* dir/file := val.  0 or -1 (errno set). */
static int put(const char *dir, const char *file, const char *val)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = strlen(val);
	ssize_t n = write(fd, val, len);
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)len ? 0 : -1;
}

/* dir/file's text into buf (cap bytes, NUL-terminated); length or -1. */
static ssize_t get(const char *dir, const char *file, char *buf, size_t cap)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, cap - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n;
}

/* The number after "key " on a line of dir/file; 0 when there is none. */
static uint64_t get_num(const char *dir, const char *file, const char *key)
{
	char buf[4096];
	if (!dir[0] || get(dir, file, buf, sizeof buf) <= 0)
		return 0;
	size_t k = strlen(key);
	for (const char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, key, k) && (l[k] == ' ' || l[k] == '\n' || !key[0]))
			return strtoull(l + k, NULL, 10);
	return 0;
}

/* Is w one of the comma-separated words of list? */
static int has_word(const char *list, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, w, n) && (p[n] == ',' || p[n] == 0 || p[n] == ' ' || p[n] == '\n'))
			return 1;
	return 0;
}

/* The caller's cgroup path for controller ctl ("" for v2's unified line)
 * from /proc/self/cgroup, into buf. */
static int own_path(const char *ctl, char *buf, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	if (!f)
		return -1;
	char line[PATH_MAX + 64];
	int rc = -1;
	errno = ENOENT;
	while (rc && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		*b = 0;
		if ((!ctl[0] && a[1] == 0) || (ctl[0] && has_word(a + 1, ctl)))
			rc = snprintf(buf, cap, "%s", b + 1) < (int)cap ? 0 : -1;
	}
	fclose(f);
	return rc;
}

/* Where the v1 hierarchy holding controller ctl is mounted, into buf. */
static int v1_mount(const char *ctl, char *buf, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return -1;
	char line[4096], mp[PATH_MAX], type[32], opts[1024];
	int rc = -1;
	errno = ENOENT;
	while (rc && fgets(line, sizeof line, f)) {
		const char *sep = strstr(line, " - ");
		if (!sep || sscanf(sep + 3, "%31s %*s %1023s", type, opts) != 2 || strcmp(type, "cgroup") ||
		    !has_word(opts, ctl) || sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		rc = snprintf(buf, cap, "%s", mp) < (int)cap ? 0 : -1;
	}
	fclose(f);
	return rc;
}

/* Removes the directories coil-PID-N in dir whose process is gone (a coil
 * killed in the middle of a compile); one still holding a process stays. */
static void sweep(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		int pid;
		char p[PATH_MAX + 300];
		if (sscanf(e->d_name, "coil-%d-", &pid) != 1 || pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		rmdir(p);
	}
	if (d)
		closedir(d);
}

/* mkdir base/own/name, else base/name: the new directory into out.  With
 * tidy, the parent is swept first. */
static int make_dir(const char *base, const char *own, const char *name, int tidy, char *out, size_t cap)
{
	for (int at_root = 0; at_root < 2; at_root++) {
		const char *mid = at_root || !strcmp(own, "/") ? "" : own;
		if (snprintf(out, cap, "%s%s", base, mid) >= (int)cap)
			return -1;
		if (tidy)
			sweep(out);
		if (snprintf(out, cap, "%s%s/%s", base, mid, name) >= (int)cap)
			return -1;
		if (mkdir(out, 0755) == 0)
			return 0;
		if (errno != ENOENT)
			break;
	}
	out[0] = 0;
	return -1;
}

static void v1_create(sbx_cgroup *cg, const sandbox_limits *lim, const char *name, int tidy, char *notes,
		      size_t cap)
{
	static const char *const ctl[SBX_CG_N] = {"memory", "pids", "cpuacct"};
	static const unsigned bit[SBX_CG_N] = {SANDBOX_CG_MEM, SANDBOX_CG_PIDS, SANDBOX_CG_CPU};
	char mem[32], pids[32];
	snprintf(mem, sizeof mem, "%llu", (unsigned long long)lim->mem_bytes);
	snprintf(pids, sizeof pids, "%d", lim->pids);
	for (int i = 0; i < SBX_CG_N; i++) {
		char base[PATH_MAX], own[PATH_MAX];
		if (v1_mount(ctl[i], base, sizeof base) || own_path(ctl[i], own, sizeof own)) {
			sbx_note(notes, cap, "no %s cgroup (finding its hierarchy: %s)", ctl[i], strerror(errno));
			continue;
		}
		if (make_dir(base, own, name, tidy, cg->dir[i], sizeof cg->dir[i])) {
			sbx_note(notes, cap, "no %s cgroup (mkdir in %s: %s)", ctl[i], base, strerror(errno));
			continue;
		}
		int bad = i == SBX_CG_MEM ? put(cg->dir[i], "memory.limit_in_bytes", mem)
			  : i == SBX_CG_PIDS ? put(cg->dir[i], "pids.max", pids)
					     : 0;
		if (bad) {
			sbx_note(notes, cap, "no %s cgroup (setting its limit: %s)", ctl[i], strerror(errno));
			rmdir(cg->dir[i]);
			cg->dir[i][0] = 0;
			continue;
		}
		if (i == SBX_CG_MEM)
			put(cg->dir[i], "memory.memsw.limit_in_bytes", mem); /* where swap is accounted */
		cg->have |= bit[i];
	}
	cg->version = cg->have ? 1 : 0;
}

/* The controllers enabled below dir, as "memory,pids,..." for has_word. */
static void subtree(const char *dir, char *buf, size_t cap)
{
	if (get(dir, "cgroup.subtree_control", buf, cap) < 0)
		buf[0] = 0;
	for (char *p = buf; *p; p++)
		*p = *p == ' ' || *p == '\n' ? ',' : *p;
}

static void v2_create(sbx_cgroup *cg, const sandbox_limits *lim, const char *name, int tidy, char *notes,
		      size_t cap)
{
	char own[PATH_MAX], parent[PATH_MAX + 32], ctl[256] = "";
	if (own_path("", own, sizeof own)) {
		sbx_note(notes, cap, "no cgroup (cannot read /proc/self/cgroup)");
		return;
	}
	snprintf(parent, sizeof parent, "%s%s", CG_ROOT, strcmp(own, "/") ? own : "");
	subtree(parent, ctl, sizeof ctl);
	if ((!has_word(ctl, "memory") || !has_word(ctl, "pids")) &&
	    put(parent, "cgroup.subtree_control", "+memory +pids") == 0)
		subtree(parent, ctl, sizeof ctl);
	if (make_dir(CG_ROOT, own, name, tidy, cg->dir[0], sizeof cg->dir[0])) {
		sbx_note(notes, cap, "no cgroup (mkdir in %s: %s)", parent, strerror(errno));
		return;
	}
	char mem[32], pids[32];
	snprintf(mem, sizeof mem, "%llu", (unsigned long long)lim->mem_bytes);
	snprintf(pids, sizeof pids, "%d", lim->pids);
	cg->version = 2;
	cg->have = SANDBOX_CG_CPU;
	if (has_word(ctl, "memory") && put(cg->dir[0], "memory.max", mem) == 0) {
		put(cg->dir[0], "memory.swap.max", "0");
		cg->have |= SANDBOX_CG_MEM;
	} else {
		sbx_note(notes, cap, "no memory controller in %s", parent);
	}
	if (has_word(ctl, "pids") && put(cg->dir[0], "pids.max", pids) == 0)
		cg->have |= SANDBOX_CG_PIDS;
	else
		sbx_note(notes, cap, "no pids controller in %s", parent);
}

void sbx_cg_create(sbx_cgroup *cg, const sandbox_limits *lim, char *notes, size_t cap)
{
	memset(cg, 0, sizeof *cg);
	char name[64];
	unsigned seq = atomic_fetch_add(&cg_seq, 1);
	snprintf(name, sizeof name, "coil-%d-%u", (int)getpid(), seq);
	/* the first compile of a process clears what killed ones left */
	if (access(CG_ROOT "/cgroup.controllers", F_OK) == 0)
		v2_create(cg, lim, name, seq == 0, notes, cap);
	else
		v1_create(cg, lim, name, seq == 0, notes, cap);
}

int sbx_cg_join(const sbx_cgroup *cg)
{
	char pid[32];
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	int rc = 0;
	for (int i = 0; i < SBX_CG_N; i++)
		if (cg->dir[i][0] && put(cg->dir[i], "cgroup.procs", pid) != 0)
			rc = -1;
	return rc;
}

void sbx_cg_usage_read(const sbx_cgroup *cg, sbx_cg_usage *u)
{
	memset(u, 0, sizeof *u);
	if (cg->version == 2) {
		u->oom_kills = get_num(cg->dir[0], "memory.events", "oom_kill");
		u->pids_max = get_num(cg->dir[0], "pids.events", "max");
		u->cpu_ns = get_num(cg->dir[0], "cpu.stat", "usage_usec") * 1000;
	} else if (cg->version == 1) {
		u->oom_kills = get_num(cg->dir[SBX_CG_MEM], "memory.oom_control", "oom_kill");
		u->pids_max = get_num(cg->dir[SBX_CG_PIDS], "pids.events", "max");
		u->cpu_ns = get_num(cg->dir[SBX_CG_CPU], "cpuacct.usage", "");
	}
}

/* SIGKILL to each process listed in dir/cgroup.procs; how many there were. */
static int kill_listed(const char *dir)
{
	char buf[8192];
	if (get(dir, "cgroup.procs", buf, sizeof buf) <= 0)
		return 0;
	int n = 0;
	for (char *p = buf, *end; *p; p = end) {
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
			n++;
	}
	return n;
}

void sbx_cg_kill(const sbx_cgroup *cg)
{
	if (!cg->version)
		return;
	if (cg->version == 2)
		put(cg->dir[0], "cgroup.kill", "1"); /* Linux 5.14 on; else the loop below */
	for (int round = 0; round < 200; round++) {
		int n = 0;
		for (int i = 0; i < SBX_CG_N; i++)
			if (cg->dir[i][0])
				n += kill_listed(cg->dir[i]);
		if (!n)
			return;
		nap_ms(5);
	}
}

void sbx_cg_destroy(sbx_cgroup *cg, char *notes, size_t cap)
{
	for (int i = 0; i < SBX_CG_N; i++) {
		if (!cg->dir[i][0])
			continue;
		/* the last processes may still be on their way out */
		int round = 0;
		while (rmdir(cg->dir[i]) != 0 && errno == EBUSY && round++ < 200)
			nap_ms(5);
		if (access(cg->dir[i], F_OK) == 0)
			sbx_note(notes, cap, "cgroup %s left behind: %s", cg->dir[i], strerror(errno));
		cg->dir[i][0] = 0;
	}
	cg->version = 0;
}
