// See spawn.h: the one setup sequence (jail_exec) and its launchers.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spawn.h"

// Numbers the headers of an older distribution may lack; they are the
// same on every architecture that has them.
#define OCS_NR_clone3 435
#define OCS_NR_close_range 436
#define OCS_NR_landlock_add_rule 445
#define OCS_NR_landlock_restrict_self 446
#define OCS_CLONE_VM 0x00000100ULL
#define OCS_CLONE_VFORK 0x00004000ULL
#define OCS_CLONE_PIDFD 0x00001000ULL
#define OCS_CLONE_CLEAR_SIGHAND 0x100000000ULL
#define OCS_CLONE_INTO_CGROUP 0x200000000ULL
#define OCS_CLOSE_RANGE_CLOEXEC (1U << 2)
#define OCS_LANDLOCK_RULE_PATH_BENEATH 1
#define OCS_SECCOMP_SET_MODE_FILTER 1
#define OCS_SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
// Once the daemon has received a notification, only a fatal signal ends
// the app's wait for the answer (Linux 5.19). Without it any signal
// withdraws the notification and the call restarts after the daemon may
// have made it (a connect then fails with EISCONN, a bind with EINVAL):
// Go apps are signalled all the time (the runtime preempts with SIGURG).
#define OCS_SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#define OCS_CAP_SETPCAP 8
#define OCS_CAP_V3 0x20080522
#define OCS_MAP_FIXED_NOREPLACE 0x100000
#define OCS_MAX_FILTER 4096 // BPF_MAXINSNS
#define OCS_PAGE 4096UL

#define OCS_SIGKILL 9
#define OCS_SIGSTOP 19

// The kernel's struct sigaction with SA_RESTORER (x86-64, arm64); the
// sequence only ever passes it zeroed (SIG_DFL, no flags, empty mask),
// which reads the same where the kernel's has no restorer.
struct ocs_sigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

struct ocs_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

struct ocs_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

struct ocs_fprog {
	unsigned short len;
	const struct ocs_filter *filter;
};

struct ocs_cap_header {
	uint32_t version;
	int pid;
};

struct ocs_cap_data {
	uint32_t effective, permitted, inheritable;
};

#if defined(__x86_64__)
// sys is a raw syscall: -errno on failure, and no errno written (the
// in-process child shares the parent thread's TLS).
static inline long sys(long n, long a1, long a2, long a3, long a4, long a5, long a6) {
	long ret;
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#else
// Elsewhere only the helper runs the sequence, in a process of its own:
// libc's syscall and errno are its to use.
static inline long sys(long n, long a1, long a2, long a3, long a4, long a5, long a6) {
	long r = syscall(n, a1, a2, a3, a4, a5, a6);
	return r == -1 ? -errno : r;
}
#endif

#define SYS0(n) sys((n), 0, 0, 0, 0, 0, 0)
#define SYS1(n, a) sys((n), (long)(a), 0, 0, 0, 0, 0)
#define SYS2(n, a, b) sys((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define SYS3(n, a, b, c) sys((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define SYS4(n, a, b, c, d) sys((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define SYS5(n, a, b, c, d, e) sys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#define SYS6(n, a, b, c, d, e, f) sys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

// report sets *st and, for the helper (status_fd >= 0), writes it on the
// status pipe: the daemon takes the last record it reads.
static void report(struct ocs_status *st, int status_fd, int step, int err) {
	st->step = step;
	st->err = err;
	if (status_fd < 0)
		return;
	const char *p = (const char *)st;
	size_t left = sizeof *st;
	while (left > 0) {
		long r = SYS3(SYS_write, status_fd, p, left);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			return; // a daemon gone meanwhile is not ours to report
		p += r;
		left -= (size_t)r;
	}
}

// send_fd sends fd down the unix socket sock, with one byte of data.
static long send_fd(int sock, int fd) {
	char byte = 'n';
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = {0};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = u.buf;
	msg.msg_controllen = sizeof u.buf;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	*(int *)CMSG_DATA(c) = fd;
	return SYS3(SYS_sendmsg, sock, &msg, MSG_NOSIGNAL);
}

// drop_caps empties every capability set: bounding (when it may: that
// needs CAP_SETPCAP, which an unprivileged daemon does not have and then
// cannot pass on either), ambient, inheritable, permitted and effective.
// With no_new_privs already set, nothing the app execs can gain any back,
// even when the daemon runs as root.
static long drop_caps(void) {
	struct ocs_cap_header hdr = {OCS_CAP_V3, 0};
	struct ocs_cap_data data[2];
	// Zeroed field by field below, not with memset: a libc call (or one
	// a sanitizer adds) has no place in a child sharing the daemon's
	// memory.
	long r = SYS2(SYS_capget, &hdr, data);
	if (r < 0)
		return r;
	if (data[0].effective & (1U << OCS_CAP_SETPCAP)) {
		for (long c = 0; c < 64; c++) {
			r = SYS5(SYS_prctl, PR_CAPBSET_DROP, c, 0, 0, 0);
			if (r == -EINVAL)
				break; // past the kernel's last capability
			if (r < 0)
				return r;
		}
	}
	r = SYS5(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (r < 0 && r != -EINVAL)
		return r;
	for (int i = 0; i < 2; i++) {
		data[i].effective = 0;
		data[i].permitted = 0;
		data[i].inheritable = 0;
	}
	r = SYS2(SYS_capset, &hdr, data);
	if (r < 0)
		return r;
	r = SYS2(SYS_capget, &hdr, data);
	if (r < 0)
		return r;
	for (int i = 0; i < 2; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			return -EPERM;
	return 0;
}

// The steps of the sequence, each 0 or -errno.

// reset_signals gives the app every signal's default and the daemon
// thread's mask. The launchers reset the handlers (CLONE_CLEAR_SIGHAND;
// the helper's execve), but not what the daemon ignores, which execve
// keeps too. The set is the daemon's (fork.go's ignoredSignals), not read
// here: a query per signal would cost 62 system calls.
static long reset_signals(uint64_t ignored, uint64_t mask) {
	for (long sig = 1; sig <= 64; sig++) {
		if (!(ignored & (1ULL << (sig - 1))) || sig == OCS_SIGKILL || sig == OCS_SIGSTOP)
			continue;
		struct ocs_sigaction dfl = {0, 0, 0, 0};
		long r = SYS4(SYS_rt_sigaction, sig, &dfl, NULL, 8);
		if (r < 0)
			return r;
	}
	return SYS4(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, 8);
}

// above3 moves fd above 3 (close-on-exec), where the dup3 onto 0..3
// cannot replace it: a daemon whose own 0..3 were closed (socket
// activation hands the listener on fd 3, and it may be closed since) can
// hold the ruleset or the notify socket there.
static long above3(int *fd) {
	if (*fd < 0)
		return 0;
	long r = SYS3(SYS_fcntl, *fd, F_DUPFD_CLOEXEC, 4);
	if (r >= 0)
		*fd = (int)r;
	return r;
}

// setup_fds puts fds onto 0..3 and marks every other descriptor
// close-on-exec: each source above the targets first (a source may be
// another's target), then dup3 onto 0..3 (which clears close-on-exec).
// Marking, not closing, keeps the ruleset open until restrict.
static long setup_fds(const int32_t fds[4]) {
	int tmp[4];
	long r;
	for (int i = 0; i < 4; i++) {
		r = SYS3(SYS_fcntl, fds[i], F_DUPFD_CLOEXEC, 4);
		if (r < 0)
			return r;
		tmp[i] = (int)r;
	}
	for (int i = 0; i < 4; i++) {
		r = SYS3(SYS_dup3, tmp[i], i, 0);
		if (r < 0)
			return r;
	}
	return SYS3(OCS_NR_close_range, 4, ~0U, OCS_CLOSE_RANGE_CLOEXEC);
}

// add_proc_self grants this process's own /proc entry, which the daemon
// could not name before the fork: exec keeps the pid, so it is the app's.
static long add_proc_self(int ruleset, uint64_t access) {
	long r = SYS4(SYS_openat, AT_FDCWD, "/proc/self", O_PATH | O_CLOEXEC | O_DIRECTORY, 0);
	if (r < 0)
		return r;
	struct ocs_path_beneath pb = {access, (int32_t)r};
	long add = SYS4(OCS_NR_landlock_add_rule, ruleset, OCS_LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
	SYS1(SYS_close, pb.parent_fd);
	return add;
}

// own_session makes the process lead a session of its own.
static long own_session(void) {
	long r = SYS0(SYS_setsid);
	if (r == -EPERM && SYS1(SYS_getsid, 0) == SYS0(SYS_getpid))
		return 0;
	return r;
}

// jail_exec is the sequence, in the order docs/jail.md gives, then the
// exec: it returns (the exit code) only when a step failed, having
// reported which.
static int jail_exec(const char *buf, uint64_t mask, struct ocs_status *st, int status_fd) {
	const struct ocs_input *in = (const struct ocs_input *)buf;
	long r;
#define STEP(step, call)                                        \
	do {                                                    \
		if ((r = (call)) < 0) {                         \
			report(st, status_fd, (step), (int)-r); \
			return OCS_HELPER_EXIT;                 \
		}                                               \
	} while (0)

	// Out of the daemon's session and process group first: a signal to
	// the daemon's group (a terminal's ^Z or ^C to a daemon run by hand)
	// must not reach a child the daemon's spawner thread is waiting on,
	// and an app in the daemon's session could join the daemon's group
	// (setpgid) and act on it: renice it (PRIO_PGRP, who 0), idle its
	// I/O, and leave its own group's signals. A session of its own it
	// cannot leave the app's way: setpgid does not cross sessions. The
	// helper's fork made it a session leader already (EPERM, and its
	// session is its own).
	STEP(OCS_SETSID, own_session());
	STEP(OCS_SIGMASK, reset_signals(in->ignored, mask));
	int ruleset = in->ruleset_fd, notify = in->notify_sock;
	STEP(OCS_FDS, above3(&ruleset));
	STEP(OCS_FDS, above3(&notify));
	STEP(OCS_FDS, setup_fds(in->fds));
	STEP(OCS_NO_NEW_PRIVS, SYS5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
	// Tied to the forking thread, the daemon's spawner thread, which lives
	// as long as the daemon; then the check the signal alone cannot make:
	// the daemon died before it was set.
	STEP(OCS_PDEATHSIG, SYS5(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
	STEP(OCS_PARENT_GONE, SYS0(SYS_getppid) == in->parent_pid ? 0 : -ESRCH);
	STEP(OCS_CAPS, drop_caps());
	STEP(OCS_DIR, SYS1(SYS_chdir, buf + in->dir));
	if (ruleset >= 0) {
		if (in->proc_access)
			STEP(OCS_LANDLOCK_PROC, add_proc_self(ruleset, in->proc_access));
		STEP(OCS_LANDLOCK_RESTRICT, SYS2(OCS_NR_landlock_restrict_self, ruleset, in->landlock_flags));
	}
	// Last, so that nothing the sequence still does is filtered.
	if (in->filter_len) {
		struct ocs_fprog prog = {(unsigned short)in->filter_len, (const struct ocs_filter *)(buf + in->filter)};
		unsigned long flags = notify >= 0 ? OCS_SECCOMP_FILTER_FLAG_NEW_LISTENER | OCS_SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV : 0;
		r = SYS3(SYS_seccomp, OCS_SECCOMP_SET_MODE_FILTER, flags, &prog);
		if (r == -EINVAL && notify >= 0)
			// A kernel before 5.19: the listener without the killable
			// wait (docs/jail.md, "Older kernels and strictness").
			r = SYS3(SYS_seccomp, OCS_SECCOMP_SET_MODE_FILTER, OCS_SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
		STEP(OCS_SECCOMP, r);
		if (notify >= 0) {
			// The listener is close-on-exec; the daemon answers the
			// app's notified calls with it (jail.Guard).
			long listener = r;
			r = send_fd(notify, (int)listener);
			SYS1(SYS_close, listener);
			STEP(OCS_NOTIFY, r);
		}
	}
	// Until here a signal that ends the process leaves OCS_NO_EXEC (or no
	// record) for the daemon; a signal during execve may still end it
	// after this, which the daemon then sees as the app's own, immediate
	// death.
	report(st, status_fd, OCS_OK, 0);
	r = SYS3(SYS_execve, in->path, in->argv, in->envp);
	report(st, status_fd, OCS_EXEC, (int)-r);
	return OCS_HELPER_EXIT;
#undef STEP
}

int ocs_check(const void *buf, uint64_t len) {
	const struct ocs_input *in = buf;
	if (len < sizeof *in || len > (1U << 24) || ((uintptr_t)buf & 7) != 0)
		return -EINVAL;
	for (int i = 0; i < 8; i++)
		if (in->magic[i] != OCS_MAGIC[i])
			return -EINVAL;
	if (in->size != len || in->dir < sizeof *in || in->dir >= len)
		return -EINVAL;
	const char *p = (const char *)buf;
	if (p[in->dir] != '/' || memchr(p + in->dir, 0, len - in->dir) == NULL)
		return -EINVAL;
	if (in->filter_len > OCS_MAX_FILTER || in->filter % 4 != 0 || in->filter > len ||
	    (uint64_t)in->filter_len * sizeof(struct ocs_filter) > len - in->filter)
		return -EINVAL;
	if (in->nregions > 3 || in->regions % 8 != 0 || in->regions > len ||
	    (uint64_t)in->nregions * sizeof(struct ocs_region) > len - in->regions)
		return -EINVAL;
	const struct ocs_region *rg = (const struct ocs_region *)(p + in->regions);
	for (uint32_t i = 0; i < in->nregions; i++)
		if (rg[i].off > len || rg[i].len > len - rg[i].off || rg[i].addr < OCS_PAGE ||
		    rg[i].addr + rg[i].len < rg[i].addr)
			return -EINVAL;
	return 0;
}

// The helper: a process of its own (the daemon forked and exec'd it), so
// libc may serve it, but its Go runtime, if any, has not started: this
// runs from a constructor (early, below) before it.

// map_regions puts the exec's arguments where the exec gate expects them.
// A fresh process has nothing mapped in the range the daemon draws from
// (helper.ExecArgs); if something is, the start fails, never the gate.
static long map_regions(const char *buf) {
	const struct ocs_input *in = (const struct ocs_input *)buf;
	const struct ocs_region *rg = (const struct ocs_region *)(buf + in->regions);
	for (uint32_t i = 0; i < in->nregions; i++) {
		uint64_t page = rg[i].addr & ~(OCS_PAGE - 1);
		uint64_t end = (rg[i].addr + rg[i].len + OCS_PAGE - 1) & ~(OCS_PAGE - 1);
		long r = SYS6(SYS_mmap, page, end - page, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | OCS_MAP_FIXED_NOREPLACE, -1, 0);
		if (r < 0)
			return r;
		if ((uint64_t)r != page) {
			// A kernel before MAP_FIXED_NOREPLACE (4.17) took it as a hint.
			SYS2(SYS_munmap, r, end - page);
			return -EEXIST;
		}
		memcpy((void *)(uintptr_t)rg[i].addr, buf + rg[i].off, rg[i].len);
	}
	return 0;
}

int ocs_helper_main(void) {
	struct ocs_status st = {OCS_NO_EXEC, 0};
	// Close-on-exec first, so that nothing below can leak it into the app.
	if (SYS3(SYS_fcntl, OCS_STATUS_FD, F_SETFD, FD_CLOEXEC) < 0)
		return OCS_HELPER_EXIT; // no status pipe: the daemon sees EOF without a record
	struct stat sb;
	long r = SYS2(SYS_fstat, OCS_INPUT_FD, &sb);
	if (r < 0 || sb.st_size <= 0 || sb.st_size > (1 << 24)) {
		report(&st, OCS_STATUS_FD, OCS_INPUT_READ, r < 0 ? (int)-r : EINVAL);
		return OCS_HELPER_EXIT;
	}
	// Never unmapped: the exec replaces this memory.
	long addr = SYS6(SYS_mmap, 0, sb.st_size, PROT_READ, MAP_PRIVATE, OCS_INPUT_FD, 0);
	SYS1(SYS_close, OCS_INPUT_FD);
	if (addr < 0 && addr > -4096) {
		report(&st, OCS_STATUS_FD, OCS_INPUT_READ, (int)-addr);
		return OCS_HELPER_EXIT;
	}
	const char *buf = (const char *)addr;
	if (ocs_check(buf, (uint64_t)sb.st_size) < 0) {
		report(&st, OCS_STATUS_FD, OCS_INPUT_BAD, EINVAL);
		return OCS_HELPER_EXIT;
	}
	if ((r = map_regions(buf)) < 0) {
		report(&st, OCS_STATUS_FD, OCS_EXEC_ARGS, (int)-r);
		return OCS_HELPER_EXIT;
	}
	uint64_t mask = 0;
	if ((r = SYS4(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &mask, 8)) < 0) {
		report(&st, OCS_STATUS_FD, OCS_SIGMASK, (int)-r);
		return OCS_HELPER_EXIT;
	}
	return jail_exec(buf, mask, &st, OCS_STATUS_FD);
}

// early makes every binary that links this package a helper when its
// argv says so (octosup-jail; octosupd and test binaries with an empty
// Config.HelperPath), before its Go runtime starts: a helper start costs
// the dynamic loader's work at most, not a runtime's.
__attribute__((constructor)) static void early(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc == 2 && argv != NULL && argv[1] != NULL && strcmp(argv[1], OCS_HELPER_ARG) == 0)
		_exit(ocs_helper_main());
}

#if defined(__x86_64__)

// ocs_clone3(args, size, fn, arg): clone3, and in the child fn(arg) on the
// stack args names, then exit with what fn returns (glibc's clone3.S
// does the same; its __clone3 is not exported). Returns the child's pid
// or -errno in the parent.
long ocs_clone3(struct ocs_clone_args *args, size_t size, int (*fn)(void *), void *arg);
__asm__(
	".text\n"
	".globl ocs_clone3\n"
	".hidden ocs_clone3\n"
	".type ocs_clone3,@function\n"
	"ocs_clone3:\n"
	"	mov %rcx, %r8\n" // arg survives the syscall in r8, fn in rdx
	"	mov $435, %eax\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jz 1f\n"
	"	ret\n"
	"1:\n"
	"	xor %ebp, %ebp\n"
	"	and $-16, %rsp\n"
	"	mov %r8, %rdi\n"
	"	call *%rdx\n"
	"	mov %rax, %rdi\n"
	"	mov $60, %eax\n" // exit
	"	syscall\n"
	"	hlt\n"
	".size ocs_clone3, .-ocs_clone3\n");

struct ocs_child {
	const char *buf;
	struct ocs_status *st;
	uint64_t mask; // the parent thread's signal mask, for the app
};

static int child(void *arg) {
	struct ocs_child *c = arg;
	return jail_exec(c->buf, c->mask, c->st, -1);
}

int ocs_fork(const void *buf, int cgroup_fd, struct ocs_status *st, int *pid, int *pidfd) {
	enum { stack_size = 64 << 10 };
	st->step = OCS_NO_EXEC;
	st->err = 0;
	*pid = -1;
	*pidfd = -1;
	void *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		st->step = OCS_STACK;
		return -errno;
	}
	// Every signal blocked on this thread across the fork: the child must
	// not run a handler of the daemon's before CLONE_CLEAR_SIGHAND took.
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	struct ocs_child c = {buf, st, 0};
	memcpy(&c.mask, &old, sizeof c.mask);
	int fd = -1;
	struct ocs_clone_args args = {
		.flags = OCS_CLONE_VM | OCS_CLONE_VFORK | OCS_CLONE_PIDFD | OCS_CLONE_CLEAR_SIGHAND,
		.pidfd = (uint64_t)(uintptr_t)&fd,
		.exit_signal = SIGCHLD,
		.stack = (uint64_t)(uintptr_t)stack,
		.stack_size = stack_size,
	};
	if (cgroup_fd > 0) {
		args.flags |= OCS_CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)cgroup_fd;
	}
	// CLONE_VFORK: this thread sleeps until the child execs or exits, so
	// its stack and st are the child's alone until then.
	long r = ocs_clone3(&args, sizeof args, child, &c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	munmap(stack, stack_size);
	if (r < 0)
		return (int)r;
	*pid = (int)r;
	*pidfd = fd;
	return 0;
}

#else

int ocs_fork(const void *buf, int cgroup_fd, struct ocs_status *st, int *pid, int *pidfd) {
	(void)buf;
	(void)cgroup_fd;
	st->step = OCS_NO_EXEC;
	*pid = -1;
	*pidfd = -1;
	return -ENOSYS;
}

#endif
