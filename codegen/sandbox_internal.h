/* Inside the compile sandbox (sandbox.h): its cgroup (sandbox_cgroup.c) and
 * its seccomp filter (sandbox_filter.c). */
#ifndef COIL_CODEGEN_SANDBOX_INTERNAL_H
#define COIL_CODEGEN_SANDBOX_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "codegen/sandbox.h"

/* One compile's cgroup: v1, a directory in each of the memory, pids and
 * cpuacct hierarchies; v2, one directory. */
enum { SBX_CG_MEM, SBX_CG_PIDS, SBX_CG_CPU, SBX_CG_N };
typedef struct sbx_cgroup {
	int version;                 /* 0: none, 1 or 2 */
	char dir[SBX_CG_N][PATH_MAX]; /* v1: one per controller, "" where none; v2: dir[0] */
	unsigned have;               /* SANDBOX_CG_* */
} sbx_cgroup;

typedef struct sbx_cg_usage {
	uint64_t oom_kills; /* processes the memory budget killed */
	uint64_t pids_max;  /* forks refused by the process budget */
	uint64_t cpu_ns;    /* CPU time of the whole tree */
} sbx_cg_usage;

/* Makes the cgroup under the caller's own (else at the hierarchy's root)
 * with lim's memory and process budgets.  What it could not make is said
 * in notes (cap bytes, appended); cg->have says what it made. */
void sbx_cg_create(sbx_cgroup *cg, const sandbox_limits *lim, char *notes, size_t cap);
/* In the child: moves the calling process into the cgroup (its children
 * follow).  0, or -1 when any part failed.  Only open/write/close. */
int sbx_cg_join(const sbx_cgroup *cg);
void sbx_cg_usage_read(const sbx_cgroup *cg, sbx_cg_usage *u);
/* SIGKILL to every process in it, until none is left (or it gives up). */
void sbx_cg_kill(const sbx_cgroup *cg);
/* Removes the directories (after sbx_cg_kill); notes what it could not. */
void sbx_cg_destroy(sbx_cgroup *cg, char *notes, size_t cap);

/* Loads the seccomp filter into the calling process (and its future
 * children); no_new_privs must be set.  0, or -1 with why (cap bytes). */
int sbx_filter_load(char *why, size_t cap);

/* Appends "; " (unless notes is empty) and the formatted text to notes. */
void sbx_note(char *notes, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
