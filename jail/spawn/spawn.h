// The jail's setup sequence (spawn.c), the one code that runs between
// fork and exec of every jailed app, and its two launchers: the
// in-process spawn (ocs_fork, a clone3 vfork child of the daemon) and the
// helper (ocs_helper_main, octosup-jail or any binary linking this
// package, run before its Go runtime starts). Both read the same
// prepared buffer, struct ocs_input and what follows it, which the daemon
// builds (input.go). The sequence makes raw syscalls only: in the
// in-process child it shares the daemon's memory, and glibc (errno,
// locks) and the Go runtime belong to the parent's threads.
#ifndef OCTOSUP_SPAWN_H
#define OCTOSUP_SPAWN_H

#include <stdint.h>

// argv[1] of the helper; nothing else is on its argv.
#define OCS_HELPER_ARG "__octosup_jail_helper"
// The helper's descriptors besides 0-3: the status pipe (close-on-exec,
// so that EOF after OCS_OK means the exec succeeded) and the input, a
// memfd.
#define OCS_STATUS_FD 4
#define OCS_INPUT_FD 5
#define OCS_HELPER_EXIT 127

// Where the sequence stopped; spawn.go's step names follow this order.
enum {
	OCS_OK = 0,
	OCS_SIGMASK,
	OCS_FDS,
	OCS_SETSID,
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
	// Not steps of the sequence: the process never reached execve (a
	// signal killed it); in the daemon, the child's stack could not be
	// mapped; in the helper, its input could not be read, was not a
	// well-formed input of this build, or the exec's arguments could not
	// be mapped where the exec gate expects them.
	OCS_NO_EXEC,
	OCS_STACK,
	OCS_INPUT_READ,
	OCS_INPUT_BAD,
	OCS_EXEC_ARGS,
	// The helper binary was built without cgo (nocgo.go): it has no
	// sequence to run.
	OCS_NO_CGO,
};

// The first bytes of every input; the last is its version, so that a
// helper and a daemon of different builds refuse each other.
#define OCS_MAGIC "OCSJAIL\x03"

struct ocs_filter {
	uint16_t code;
	uint8_t jt, jf;
	uint32_t k;
};

// ocs_region is memory the helper maps at addr before the sequence: the
// exec's arguments, at the addresses the daemon chose and the exec gate
// knows (helper.ExecArgs). len bytes at off in the input.
struct ocs_region {
	uint64_t addr;
	uint32_t off, len;
};

// ocs_input heads the buffer; offsets are from its first byte.
struct ocs_input {
	char magic[8];
	uint32_t size;               // the whole buffer's
	uint32_t dir;                // offset of the working directory, NUL-terminated
	uint32_t filter, filter_len; // offset, instructions; 0 instructions: no seccomp
	uint32_t regions, nregions;  // offset of struct ocs_region[nregions]
	// execve's arguments, at the addresses the exec gate knows: the
	// daemon's (the in-process child shares its memory) or the regions'.
	uint64_t path, argv, envp;
	int32_t fds[4];      // become 0 to 3
	int32_t parent_pid;  // the daemon: the parent the sequence checks for
	int32_t ruleset_fd;  // < 0: no Landlock
	uint32_t landlock_flags;
	// notify_sock >= 0: load the filter with a user-notification listener
	// and send the listener down this socket (SCM_RIGHTS) before execve.
	int32_t notify_sock;
	uint64_t proc_access; // Landlock rights on /proc/self; 0: no rule
	uint64_t ignored;     // signals to reset to SIG_DFL (bit n-1 for signal n)
};

// ocs_status is the helper's record on its status pipe, and the
// in-process child's answer in memory.
struct ocs_status {
	int32_t step; // OCS_*: OCS_OK once the sequence reached execve
	int32_t err;  // the errno of that step
};

// ocs_check says whether buf is a well-formed input of this build: 0, or
// -EINVAL. Every launcher checks before the sequence reads it.
int ocs_check(const void *buf, uint64_t len);

// ocs_fork starts the sequence for the input in buf (checked) in a
// clone3(CLONE_VM|CLONE_VFORK) child of the calling thread, into the
// cgroup cgroup_fd when it is > 0: 0, or -errno when clone3 itself
// failed (-ENOSYS: not on this architecture or kernel; st->step
// OCS_STACK: no stack for the child). A child that could not jail or
// exec itself sets *st and exits 127 before this returns; one killed
// before it reached execve leaves st->step at OCS_NO_EXEC.
int ocs_fork(const void *buf, int cgroup_fd, struct ocs_status *st, int *pid, int *pidfd);

// ocs_helper_main is the helper's whole life: it reads the input on
// OCS_INPUT_FD, maps the exec's arguments, runs the sequence and execs.
// It returns only on failure, with the exit code, after writing the
// failing step on OCS_STATUS_FD.
int ocs_helper_main(void);

#endif
