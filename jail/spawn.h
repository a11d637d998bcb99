// The in-process spawn (fork.go): the jail's syscalls run in a vfork
// child on a stack of its own, between clone3 and its one execve. The
// child makes raw syscalls only: it shares the daemon's memory, and glibc
// (errno, locks) and the Go runtime belong to the parent's threads.
#ifndef OCTOSUP_SPAWN_H
#define OCTOSUP_SPAWN_H

#include <stdint.h>

// Where the child stopped; ocs_step_names in fork.go follows this order.
enum {
	OCS_OK = 0,
	OCS_SIGMASK,
	OCS_FDS,
	OCS_SETPGID,
	OCS_NO_NEW_PRIVS,
	OCS_PDEATHSIG,
	OCS_PARENT_GONE,
	OCS_CAPS,
	OCS_DIR,
	OCS_LANDLOCK_PROC,
	OCS_LANDLOCK_RESTRICT,
	OCS_SECCOMP,
	OCS_NOTIFY,
	OCS_EXEC,
	// Not steps of the child: it never reached execve (a signal killed
	// it), and, in the parent, the child's stack could not be mapped.
	OCS_NO_EXEC,
	OCS_STACK,
};

struct ocs_filter {
	uint16_t code;
	uint8_t jt, jf;
	uint32_t k;
};

struct ocs_spawn {
	// In: everything is in C memory, made ready before the fork.
	// execve's arguments, at the addresses the exec gate knows
	// (helper.ExecArgs): not pointers of C's heap.
	uint64_t path, argv, envp;
	const char *dir;
	int fds[4]; // become 0 to 3
	int parent_pid;
	int cgroup_fd;       // > 0: CLONE_INTO_CGROUP
	int ruleset_fd;      // < 0: no Landlock
	uint32_t landlock_flags;
	uint64_t proc_access; // Landlock rights on /proc/self; 0: no rule
	const struct ocs_filter *filter;
	uint32_t filter_len; // 0: no seccomp
	// notify_sock >= 0: load the filter with a user-notification listener
	// and send the listener down this socket (SCM_RIGHTS) before execve.
	int notify_sock;
	uint64_t ignored; // signals to reset to SIG_DFL (bit n-1 for signal n)
	// Out.
	int pid, pidfd;
	int step; // OCS_*: where the child failed; OCS_OK once it reached execve
	int err;  // the errno of that step
};

// ocs_spawn forks s's program: 0, or -errno when clone3 itself failed
// (-ENOSYS: not on this architecture or kernel; s->step OCS_STACK: no
// stack for the child). A child that could not jail or exec itself sets
// s->step and s->err and exits 127 before this returns; one killed before
// it reached execve leaves s->step at OCS_NO_EXEC.
int ocs_spawn(struct ocs_spawn *s);

#endif
