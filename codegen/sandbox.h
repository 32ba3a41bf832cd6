/* The compile sandbox: code generation and the C compiler, for one compile,
 * run in a process tree of their own, so that nothing that happens in
 * there (a crash in codegen, a compiler that allocates or forks without end
 * or never finishes, hostile code exploiting either) reaches the caller
 * (coild's worker thread, or the CLI in embedded mode).  The caller stays
 * outside, watches, and reports what happened as one error with its code.
 *
 * The tree, where the system allows it (see docs/security.md):
 *   - runs as uid/gid SANDBOX_UID (nobody) when coil runs as root, as the
 *     caller's own unprivileged uid otherwise, without capabilities and
 *     with no_new_privs;
 *   - in new mount, pid, network, IPC, UTS and cgroup namespaces (a user
 *     namespace too when coil is not root): no network, no view of other
 *     processes, its own /proc; when its first process (the code
 *     generator, pid 1 there) dies, everything in it dies;
 *   - under a seccomp filter (sandbox_filter.c) that refuses the system
 *     calls a compiler never needs (ptrace, mount, bpf, keyctl, unshare,
 *     sockets other than AF_UNIX, ...);
 *   - in a cgroup of its own (v1 or v2, sandbox_cgroup.c) that bounds the
 *     memory and the number of processes of the whole tree and counts its
 *     CPU time; without one, per-process rlimits stand in;
 *   - under one wall-clock deadline for the whole compile, code generation
 *     included, at which the whole tree is killed;
 *   - with only its private work directory writable (handed to the
 *     sandbox's uid; every mount read-only in its mount namespace), and no
 *     descriptor of the caller but stderr.
 * Whatever cannot be had is said once on stderr ("coil: sandbox: ...") and
 * in sandbox_info.notes; the compile goes on with the rest.  COIL_SANDBOX=0
 * in the environment turns it off (for debugging): codegen then runs in
 * the caller, as before. */
#ifndef COIL_CODEGEN_SANDBOX_H
#define COIL_CODEGEN_SANDBOX_H

#include <stdint.h>

#include "codegen/codegen.h"

#define SANDBOX_DEFAULT_MEM ((uint64_t)4 << 30) /* bytes, the whole tree */
#define SANDBOX_DEFAULT_PIDS 256                /* processes and threads at once */
#define SANDBOX_CPU_PER_DEADLINE 4              /* default CPU seconds: this times the deadline */
#define SANDBOX_UID 65534                       /* nobody: the tree's user when coil runs as root */
#define SANDBOX_GID 65534                       /* nogroup */

typedef struct sandbox_limits {
	uint64_t mem_bytes; /* memory of the whole tree; 0: SANDBOX_DEFAULT_MEM */
	int pids;           /* processes of the whole tree at once; 0: SANDBOX_DEFAULT_PIDS */
	int cpu_s;          /* CPU seconds of the whole tree; 0: SANDBOX_CPU_PER_DEADLINE x deadline_s */
	int deadline_s;     /* wall clock of the whole compile; 0: BUILD_DEFAULT_TIMEOUT_S */
} sandbox_limits;

/* What a compile had (sandbox_info.have). */
enum {
	SANDBOX_PROCESS = 1 << 0, /* a process tree of its own (0: off, codegen ran in the caller) */
	SANDBOX_UID_DROP = 1 << 1, /* ran as SANDBOX_UID (coil runs as root) */
	SANDBOX_USERNS = 1 << 2,  /* in a user namespace (coil not root) */
	SANDBOX_MNTNS = 1 << 3,   /* mount namespace, mounts private */
	SANDBOX_PIDNS = 1 << 4,   /* pid namespace */
	SANDBOX_NETNS = 1 << 5,   /* network namespace (with IPC, UTS and cgroup ones) */
	SANDBOX_PROC = 1 << 6,    /* a /proc of its own pid namespace */
	SANDBOX_SECCOMP = 1 << 7, /* the seccomp filter */
	SANDBOX_CG_MEM = 1 << 8,  /* cgroup memory budget */
	SANDBOX_CG_PIDS = 1 << 9, /* cgroup process budget */
	SANDBOX_CG_CPU = 1 << 10, /* cgroup CPU accounting */
	SANDBOX_RO = 1 << 11,     /* every mount read-only but the work directory */
};

typedef struct sandbox_info {
	unsigned have;   /* SANDBOX_* */
	char notes[512]; /* what it could not have and why, "; " between; "" when it had all */
} sandbox_info;

/* The runtime's object (codegen_opts.rt_in) inside the sandbox: a copy of
 * o->rt_in under this name in the work directory. */
#define SANDBOX_RT_IN "rt-in.o"

/* codegen_compile(g, o, out_so, res, err) in the sandbox, under lim (NULL:
 * the defaults).  out_so is required; o->dump_after and o->keep_c are not
 * supported (they write where the sandbox cannot).  0 on success with
 * out_so in place; -1 with err: the compile's own error, or the sandbox's
 * verdict on it:
 *   COIL_E_TIMEOUT   past the deadline (the whole tree killed)
 *   COIL_E_RESOURCE  over the memory, process or CPU budget; cannot fork
 *   COIL_E_INTERNAL  code generation crashed ("... crashed (signal 11)")
 *   COIL_E_COMPILER  the C compiler failed or died
 * info (may be NULL) says what isolation the compile had. */
int sandbox_compile(coil_graph *g, const codegen_opts *o, const sandbox_limits *lim, const char *out_so,
		    codegen_result *res, sandbox_info *info, coil_err *err);

/* 0 when COIL_SANDBOX is "0" or "off" in the environment, else 1. */
int sandbox_enabled(void);

#endif
