// See spawn.h and fork.go.
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
#include <sys/syscall.h>
#include <unistd.h>

#include "spawn.h"

#if defined(__x86_64__)

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
#define OCS_CAP_SETPCAP 8
#define OCS_CAP_V3 0x20080522

#define OCS_SIGKILL 9
#define OCS_SIGSTOP 19

// The kernel's struct sigaction on x86-64 (not glibc's).
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

// sys is a raw syscall: -errno on failure, and no errno written (the
// child shares the parent thread's TLS).
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

#define SYS0(n) sys((n), 0, 0, 0, 0, 0, 0)
#define SYS1(n, a) sys((n), (long)(a), 0, 0, 0, 0, 0)
#define SYS2(n, a, b) sys((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define SYS3(n, a, b, c) sys((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define SYS4(n, a, b, c, d) sys((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define SYS5(n, a, b, c, d, e) sys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

struct ocs_child {
	struct ocs_spawn *s;
	uint64_t mask; // the parent thread's signal mask, for the app
};

static int fail(struct ocs_spawn *s, int step, long ret) {
	s->step = step;
	s->err = (int)-ret;
	return 127;
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

// drop_caps empties every capability set, as helper.DropCaps does.
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

// child runs between clone3 and execve, in the order docs/jail.md
// gives (the helper's order): its return is its exit code.
static int child(void *arg) {
	struct ocs_child *c = arg;
	struct ocs_spawn *s = c->s;
	long r;

	// Out of the daemon's process group first: a signal to that group (a
	// terminal's ^Z or ^C to a daemon run by hand) must not reach a child
	// the daemon's spawner thread is waiting on.
	r = SYS2(SYS_setpgid, 0, 0);
	if (r < 0)
		return fail(s, OCS_SETPGID, r);
	// CLONE_CLEAR_SIGHAND reset the daemon's handlers, but not what it
	// ignores (execve keeps that too): the app starts with every signal's
	// default, as the helper path gives it. The set is the daemon's
	// (fork.go's ignoredSignals), not read here: a query per signal would
	// cost the child 62 system calls.
	for (long sig = 1; sig <= 64; sig++) {
		if (!(s->ignored & (1ULL << (sig - 1))) || sig == OCS_SIGKILL || sig == OCS_SIGSTOP)
			continue;
		struct ocs_sigaction dfl = {0, 0, 0, 0};
		r = SYS4(SYS_rt_sigaction, sig, &dfl, NULL, 8);
		if (r < 0)
			return fail(s, OCS_SIGMASK, r);
	}
	r = SYS4(SYS_rt_sigprocmask, SIG_SETMASK, &c->mask, NULL, 8);
	if (r < 0)
		return fail(s, OCS_SIGMASK, r);

	// fds: each source above the targets first (a source may be another's
	// target), then onto 0..3 (dup2 clears close-on-exec), then every other
	// descriptor close-on-exec: the ruleset stays open until restrict.
	// The ruleset and the notify socket are used after the shuffle: a
	// daemon whose own 0..3 were closed (socket activation hands the
	// listener on fd 3, and it may be closed since) can hold them there,
	// where dup2 would replace them.
	int ruleset = s->ruleset_fd, notify = s->notify_sock;
	if (ruleset >= 0) {
		r = SYS3(SYS_fcntl, ruleset, F_DUPFD_CLOEXEC, 4);
		if (r < 0)
			return fail(s, OCS_FDS, r);
		ruleset = (int)r;
	}
	if (notify >= 0) {
		r = SYS3(SYS_fcntl, notify, F_DUPFD_CLOEXEC, 4);
		if (r < 0)
			return fail(s, OCS_FDS, r);
		notify = (int)r;
	}
	int tmp[4];
	for (int i = 0; i < 4; i++) {
		r = SYS3(SYS_fcntl, s->fds[i], F_DUPFD_CLOEXEC, 4);
		if (r < 0)
			return fail(s, OCS_FDS, r);
		tmp[i] = (int)r;
	}
	for (int i = 0; i < 4; i++) {
		r = SYS2(SYS_dup2, tmp[i], i);
		if (r < 0)
			return fail(s, OCS_FDS, r);
	}
	r = SYS3(OCS_NR_close_range, 4, ~0U, OCS_CLOSE_RANGE_CLOEXEC);
	if (r < 0)
		return fail(s, OCS_FDS, r);

	r = SYS5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	if (r < 0)
		return fail(s, OCS_NO_NEW_PRIVS, r);
	// Tied to the forking thread, the daemon's spawner thread, which lives
	// as long as the daemon; then the check the signal alone cannot make:
	// the daemon died before it was set.
	r = SYS5(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (r < 0)
		return fail(s, OCS_PDEATHSIG, r);
	if (SYS0(SYS_getppid) != s->parent_pid)
		return fail(s, OCS_PARENT_GONE, -ESRCH);
	r = drop_caps();
	if (r < 0)
		return fail(s, OCS_CAPS, r);
	r = SYS1(SYS_chdir, s->dir);
	if (r < 0)
		return fail(s, OCS_DIR, r);

	if (ruleset >= 0) {
		if (s->proc_access) {
			// This process's /proc entry, which the daemon could not name
			// before the fork: exec keeps the pid, so it is the app's.
			r = SYS4(SYS_openat, AT_FDCWD, "/proc/self", O_PATH | O_CLOEXEC | O_DIRECTORY, 0);
			if (r < 0)
				return fail(s, OCS_LANDLOCK_PROC, r);
			struct ocs_path_beneath pb = {s->proc_access, (int32_t)r};
			long add = SYS4(OCS_NR_landlock_add_rule, ruleset, OCS_LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
			SYS1(SYS_close, pb.parent_fd);
			if (add < 0)
				return fail(s, OCS_LANDLOCK_PROC, add);
		}
		r = SYS2(OCS_NR_landlock_restrict_self, ruleset, s->landlock_flags);
		if (r < 0)
			return fail(s, OCS_LANDLOCK_RESTRICT, r);
	}
	if (s->filter_len) {
		struct ocs_fprog prog = {(unsigned short)s->filter_len, s->filter};
		unsigned long flags = notify >= 0 ? OCS_SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
		r = SYS3(SYS_seccomp, OCS_SECCOMP_SET_MODE_FILTER, flags, &prog);
		if (r < 0)
			return fail(s, OCS_SECCOMP, r);
		if (notify >= 0) {
			// The listener is close-on-exec; the daemon answers the
			// app's notified calls with it (jail.Guard).
			long listener = r;
			r = send_fd(notify, (int)listener);
			SYS1(SYS_close, listener);
			if (r < 0)
				return fail(s, OCS_NOTIFY, r);
		}
	}
	// Until here a signal that ends the child leaves OCS_NO_EXEC for the
	// parent; a signal during execve may still end it after this store,
	// which the daemon then sees as the app's own, immediate death.
	s->step = OCS_OK;
	r = SYS3(SYS_execve, s->path, s->argv, s->envp);
	return fail(s, OCS_EXEC, r);
}

int ocs_spawn(struct ocs_spawn *s) {
	enum { stack_size = 64 << 10 };
	s->step = OCS_NO_EXEC;
	s->err = 0;
	s->pid = -1;
	s->pidfd = -1;
	void *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		s->step = OCS_STACK;
		return -errno;
	}
	// Every signal blocked on this thread across the fork: the child must
	// not run a handler of the daemon's before CLONE_CLEAR_SIGHAND took.
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	struct ocs_child c = {s, 0};
	memcpy(&c.mask, &old, sizeof c.mask);
	int pidfd = -1;
	struct ocs_clone_args args = {
		.flags = OCS_CLONE_VM | OCS_CLONE_VFORK | OCS_CLONE_PIDFD | OCS_CLONE_CLEAR_SIGHAND,
		.pidfd = (uint64_t)(uintptr_t)&pidfd,
		.exit_signal = SIGCHLD,
		.stack = (uint64_t)(uintptr_t)stack,
		.stack_size = stack_size,
	};
	if (s->cgroup_fd > 0) {
		args.flags |= OCS_CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)s->cgroup_fd;
	}
	// CLONE_VFORK: this thread sleeps until the child execs or exits, so
	// its stack and s are the child's alone until then.
	long pid = ocs_clone3(&args, sizeof args, child, &c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	munmap(stack, stack_size);
	if (pid < 0)
		return (int)pid;
	s->pid = (int)pid;
	s->pidfd = pidfd;
	return 0;
}

#else

int ocs_spawn(struct ocs_spawn *s) {
	(void)s;
	return -ENOSYS;
}

#endif
