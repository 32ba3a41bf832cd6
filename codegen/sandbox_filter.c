/* The compile sandbox's seccomp filter (libseccomp): a denylist, default
 * allow.  An allowlist would be stronger, but what gcc, cc1, as, collect2
 * and ld call changes with their versions and a missed call breaks every
 * compile; the denylist refuses what a compiler never needs and what
 * would let code in the sandbox reach outside it:
 *   - tracing and reading other processes (ptrace, process_vm_*, kcmp,
 *     pidfd_getfd);
 *   - mounts and namespaces (mount, umount2, pivot_root, chroot, the new
 *     mount API, unshare, setns, clone with any CLONE_NEW* flag; clone3,
 *     whose flags a filter cannot read, says ENOSYS and glibc falls back
 *     to clone);
 *   - the kernel's own state (reboot, kexec, modules, swap, acct, quotas,
 *     the clocks, hostname, syslog, iopl/ioperm, personality flags that
 *     weaken the address space: no ASLR, executable data, page zero);
 *   - bpf, perf_event_open, userfaultfd, io_uring (whose operations escape
 *     seccomp), the keyrings (keyctl, add_key, request_key), handles to
 *     files by number (open_by_handle_at);
 *   - sockets of any family but AF_UNIX (the network namespace has no
 *     interfaces anyway), and TIOCSTI (typing into a terminal).
 * Refused calls fail with EPERM (sockets EAFNOSUPPORT, clone3 ENOSYS)
 * rather than killing the process: the compiler reports its own error.
 * System calls of another architecture (i386, x32) are killed. */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>

#include "codegen/sandbox_internal.h"

static const char *const DENIED[] = {
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
	"fspick", "mount_setattr", "unshare", "setns",
	"reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
	"swapoff", "acct", "quotactl", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname", "iopl", "ioperm", "vhangup", "lookup_dcookie",
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at", "fanotify_init",
};

static const unsigned long CLONE_NS_FLAGS[] = {CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
					       CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP};

static const unsigned long PERSONA_FLAGS[] = {ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO,
					      ADDR_COMPAT_LAYOUT};

/* The rules; 0 or a negative errno from libseccomp. */
static int add_rules(scmp_filter_ctx ctx)
{
	int rc = 0;
	for (size_t i = 0; i < sizeof DENIED / sizeof *DENIED; i++) {
		int nr = seccomp_syscall_resolve_name(DENIED[i]);
		if (nr != __NR_SCMP_ERROR) /* a call this libseccomp does not know: none to refuse */
			rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	for (size_t i = 0; i < sizeof CLONE_NS_FLAGS / sizeof *CLONE_NS_FLAGS; i++) {
		unsigned long f = CLONE_NS_FLAGS[i];
		rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
						SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
	}
	rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
					SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
					SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
					SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
	/* personality(): no flag that weakens the address space (a rule cannot
	 * compare one argument twice, so one rule per flag) */
	for (size_t i = 0; i < sizeof PERSONA_FLAGS / sizeof *PERSONA_FLAGS; i++) {
		unsigned long f = PERSONA_FLAGS[i];
		rc = rc ? rc : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
						SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
	}
	return rc;
}

int sbx_filter_load(char *why, size_t cap)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		snprintf(why, cap, "seccomp_init failed");
		return -1;
	}
	int rc = add_rules(ctx);
	if (rc)
		snprintf(why, cap, "building the filter: %s", strerror(-rc));
	else if ((rc = seccomp_load(ctx)) != 0)
		snprintf(why, cap, "loading the filter: %s", strerror(-rc));
	seccomp_release(ctx);
	return rc ? -1 : 0;
}
