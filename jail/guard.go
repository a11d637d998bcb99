package jail

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	seccomp "github.com/seccomp/libseccomp-golang"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/jail/helper"
)

// A Guard answers the calls an app's filter hands to the daemon
// (Syscall.Notify, seccomp user notification): the decisions a filter
// cannot make because they need a socket's state or a path's place.
//
//   - bind and listen, for a tcp app with tcp_bind: listen() binds an
//     unbound socket to an ephemeral port, which Landlock's bind rule
//     never sees, and bind() also names unix sockets (an abstract name
//     squats a host service's). The guard takes the app's socket
//     (pidfd_getfd), checks it and the port against the spec, and makes
//     the call itself on that same socket.
//   - inotify_add_watch, for a jail app: a watch needs no open, so
//     Landlock never sees it, and it reports the names of files created
//     and opened in any directory the app can name. The guard resolves
//     the path beneath the grant it names (openat2 with RESOLVE_BENEATH,
//     so no symlink or .. leaves it) and adds the watch itself, on the
//     app's inotify descriptor, to the inode it opened.
//   - connect, for an app with desktop sockets, or network full below
//     Landlock ABI 9 (guard_connect.go): the guard connects the app's
//     socket itself, to a granted socket only.
//
// Its work is held to a share of one CPU per app (budget.go): past it,
// the guard pauses and the app's notified calls wait.
//
// Never CONTINUE: between a check and the kernel's own run of the call
// another thread of the app could swap the descriptor or rewrite the
// path. Acting on the very socket or inode that was checked leaves no
// such window. Every refusal is EACCES, as Landlock's would be, or EPERM
// where the call is one the app may not make at all.
type Guard struct {
	f          *os.File // the listener, non-blocking, in the runtime's poller
	spec       Spec
	log        *zap.Logger
	unprivPort uint16 // net.ipv4.ip_unprivileged_port_start
	// slots hold a token per connect under way, and per close of a
	// descriptor the guard took (later): the app's, across its processes
	// (Launcher.slotsOf).
	slots appSlots
	// spentMu guards spent, the guard's budget (budget.go): Serve's
	// answers and the connects' goroutines spend from it.
	spentMu sync.Mutex
	spent   budget
	// sound are the filters between the app and its PulseAudio server
	// (guard_sound.go).
	sound *soundFilters
}

// newGuard takes the listener fd of spec's filter.
func newGuard(spec Spec, fd int, unprivPort uint16, slots appSlots, log *zap.Logger) *Guard {
	unix.SetNonblock(fd, true)
	return &Guard{f: os.NewFile(uintptr(fd), "seccomp-notify-"+spec.App), spec: spec, log: log, unprivPort: unprivPort,
		slots: slots, sound: newSoundFilters()}
}

// spend records work of the guard that took used, ending now, and says
// how long Serve must pause before its next call. A connect's time counts
// up to the burst: a connect blocked in the kernel uses no CPU.
func (g *Guard) spend(now time.Time, used time.Duration) time.Duration {
	g.spentMu.Lock()
	defer g.spentMu.Unlock()
	return g.spent.spend(now, min(used, guardBurst))
}

// Guard is the process's notification guard, nil when its filter hands
// nothing to the daemon. The caller serves it for the app's life (Serve);
// until then the app's notified calls wait.
func (p *Process) Guard() *Guard { return p.notify }

// Close closes a guard that will not be served; the app's notified calls
// then fail with ENOSYS.
func (g *Guard) Close() error {
	g.sound.end()
	return g.f.Close()
}

// Serve answers notifications until every process of the app has exited
// (the listener hangs up), ctx ends, or the listener fails; it closes the
// listener and ends the app's sound filters. It returns nil when the app
// is gone.
func (g *Guard) Serve(ctx context.Context) error {
	defer g.f.Close()
	// The app is gone, or the daemon stops: so do its sound filters.
	defer g.sound.end()
	rc, err := g.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("guard %s: %w", g.spec.App, err)
	}
	stop := context.AfterFunc(ctx, func() { g.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	throttled := false // logged once per app process
	for {
		var req *seccomp.ScmpNotifReq
		var hup bool
		var rerr error
		var start time.Time
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			switch {
			case err == unix.EINTR || err == nil && n == 0:
				return false // nothing yet: wait in the poller
			case err != nil:
				rerr = err
			case pfd[0].Revents&unix.POLLIN != 0:
				start = time.Now()
				req, rerr = seccomp.NotifReceive(seccomp.ScmpFd(fd))
			default: // POLLHUP: no process uses the filter any more
				hup = true
			}
			return true
		})
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("guard %s: %w", g.spec.App, err)
		case hup:
			return nil
		case errors.Is(rerr, unix.ENOENT):
			continue // the caller died before we took it
		case rerr != nil:
			return fmt.Errorf("guard %s: receive: %w", g.spec.App, rerr)
		}
		taken, waited := g.later(ctx, req)
		if !taken {
			resp := g.decide(req)
			if err := seccomp.NotifRespond(seccomp.ScmpFd(g.f.Fd()), &resp); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("guard %s: respond: %w", g.spec.App, err)
			}
		}
		// Wall time from the receive to the answer (or to the connect's
		// hand-off; its goroutine spends its own) stands for the guard's
		// CPU: it blocks on nothing but its own system calls (budget.go),
		// and a wait for a slot, which is not counted.
		now := time.Now()
		if pause := g.spend(now, now.Sub(start)-waited); pause > 0 {
			if !throttled {
				throttled = true
				g.log.Info("guard throttled: the app's calls to the daemon use more than its share", zap.String("app", g.spec.App),
					zap.Float64("share", guardShare), zap.Duration("pause", pause))
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
}

// decide answers a notification of a call the spec does not hand over
// (later takes those it does).
func (g *Guard) decide(req *seccomp.ScmpNotifReq) seccomp.ScmpNotifResp {
	return g.response(req, newCall(seccomp.ScmpFd(g.f.Fd()), req), 0, unix.ENOSYS)
}

// response is the answer to req of a call that returned val, or failed
// with err: its errno (EACCES for an error that has none).
func (g *Guard) response(req *seccomp.ScmpNotifReq, c *call, val uintptr, err error) seccomp.ScmpNotifResp {
	resp := seccomp.ScmpNotifResp{ID: req.ID}
	var errno unix.Errno
	switch {
	case err == nil:
		resp.Val = uint64(val)
		return resp
	case errors.As(err, &errno):
	default:
		errno = unix.EACCES
	}
	if errno != unix.ENOENT {
		g.log.Debug("guard refused", zap.String("app", g.spec.App), zap.Int("pid", c.pid),
			zap.String("syscall", syscallName(int(req.Data.Syscall))), zap.Error(err))
	}
	resp.Error = int32(errno)
	return resp
}

func syscallName(nr int) string {
	if n, err := seccomp.ScmpSyscall(nr).GetName(); err == nil {
		return n
	}
	return strconv.Itoa(nr)
}

// rule says whether the spec hands name to the daemon.
func (g *Guard) rule(name string) bool {
	return slices.ContainsFunc(g.spec.Seccomp, func(r Syscall) bool { return r.Notify && r.Name == name })
}

// call is one notified call of one process: its pidfd, opened on first
// use and checked to still be the caller (NotifIDValid: the pid could
// have been reused since), and what the guard opened for it.
type call struct {
	fd    seccomp.ScmpFd
	id    uint64
	pid   int
	args  []uint64
	pidfd int // -1 until opened
	open  []int
}

func newCall(fd seccomp.ScmpFd, req *seccomp.ScmpNotifReq) *call {
	return &call{fd: fd, id: req.ID, pid: int(req.Pid), args: req.Data.Args, pidfd: -1}
}

func (c *call) close() {
	for _, fd := range c.open {
		unix.Close(fd)
	}
}

// valid fails once the caller is no longer waiting in this call: what was
// read of it may be another process's.
func (c *call) valid() error {
	if err := seccomp.NotifIDValid(c.fd, c.id); err != nil {
		return unix.ENOENT
	}
	return nil
}

// getfd duplicates the caller's descriptor n into the daemon.
func (c *call) getfd(n uint64) (int, error) {
	if c.pidfd < 0 {
		fd, err := openThread(c.pid)
		if err != nil {
			return -1, unix.ENOENT
		}
		c.pidfd = fd
		c.open = append(c.open, fd)
		if err := c.valid(); err != nil {
			return -1, err
		}
	}
	if n > 1<<31 {
		return -1, unix.EBADF
	}
	fd, err := unix.PidfdGetfd(c.pidfd, int(n), 0)
	if err != nil {
		if err == unix.EPERM {
			// The app made itself undumpable: it is refused, not served.
			return -1, unix.EPERM
		}
		return -1, err
	}
	c.open = append(c.open, fd)
	return fd, nil
}

// pidfdThread (PIDFD_THREAD, Linux 6.9) opens a pidfd of a thread that
// does not lead its group.
const pidfdThread = unix.O_EXCL

// openThread opens a pidfd of the notifying task, which is a thread, not
// always the one leading its process: of the thread itself where the
// kernel allows, else of its process (the descriptor table and memory
// the guard reaches through it are the same).
func openThread(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, pidfdThread)
	if err != unix.EINVAL {
		return fd, err
	}
	if fd, err = unix.PidfdOpen(tid, 0); err != unix.EINVAL {
		return fd, err
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return -1, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			tgid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return -1, err
			}
			return unix.PidfdOpen(tgid, 0)
		}
	}
	return -1, unix.ESRCH
}

// read copies n bytes of the caller's memory at addr, then checks the
// caller is still the one that asked.
func (c *call) read(addr uint64, n int) ([]byte, error) {
	buf := make([]byte, n)
	if n == 0 {
		return buf, nil
	}
	got, err := unix.ProcessVMReadv(c.pid, []unix.Iovec{{Base: &buf[0], Len: uint64(n)}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
	if err != nil || got != n {
		return nil, unix.EFAULT
	}
	return buf, c.valid()
}

// readString reads the caller's NUL-terminated string at addr (at most
// PATH_MAX), a page at a time so that a string ending before an unmapped
// page is read whole.
func (c *call) readString(addr uint64) (string, error) {
	var out []byte
	for len(out) < unix.PathMax {
		n := min(int(pageSizeOf-(addr+uint64(len(out)))%pageSizeOf), unix.PathMax-len(out))
		b, err := c.read(addr+uint64(len(out)), n)
		if err != nil {
			return "", err
		}
		if i := slices.Index(b, 0); i >= 0 {
			return string(append(out, b[:i]...)), nil
		}
		out = append(out, b...)
	}
	return "", unix.ENAMETOOLONG
}

const pageSizeOf = 4096

// socket takes the caller's socket of arg 0 and says what it is.
func (c *call) socket() (fd, domain, typ int, err error) {
	if fd, err = c.getfd(c.args[0]); err != nil {
		return -1, 0, 0, err
	}
	if domain, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		return -1, 0, 0, unix.ENOTSOCK
	}
	if typ, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return -1, 0, 0, unix.ENOTSOCK
	}
	return fd, domain, typ, nil
}

// port checks a TCP port against the spec, as Landlock's rule would,
// and below the unprivileged start as the kernel would for an app
// without capabilities (the daemon may have them).
func (g *Guard) port(p uint16) error {
	if p == 0 || !slices.Contains(g.spec.Landlock.BindTCP, p) {
		return fmt.Errorf("port %d is not in tcp_bind: %w", p, unix.EACCES)
	}
	if p < g.unprivPort {
		return fmt.Errorf("port %d is privileged: %w", p, unix.EACCES)
	}
	return nil
}

func (g *Guard) bind(c *call) error {
	sock, domain, typ, err := c.socket()
	if err != nil {
		return err
	}
	if domain != unix.AF_INET && domain != unix.AF_INET6 || typ != unix.SOCK_STREAM {
		return fmt.Errorf("bind of a domain %d socket (tcp apps bind tcp ports only): %w", domain, unix.EPERM)
	}
	n := c.args[2]
	if n < 4 || n > sizeofSockaddrStorage {
		return unix.EINVAL
	}
	addr, err := c.read(c.args[1], int(n))
	if err != nil {
		return err
	}
	if err := g.port(binary.BigEndian.Uint16(addr[2:4])); err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_BIND, uintptr(sock), uintptr(unsafe.Pointer(&addr[0])), uintptr(len(addr)))
	return errOrNil(e)
}

func (g *Guard) listen(c *call) error {
	sock, domain, _, err := c.socket()
	if err != nil {
		return err
	}
	// Only an inet socket: a unix one the app holds may have a name
	// (autobind: a connect with SO_PASSCRED names it, the guard's own
	// connect to a granted socket whose server is absent too), and
	// listening there takes connects from outside the jail.
	if domain != unix.AF_INET && domain != unix.AF_INET6 {
		return fmt.Errorf("listen on a domain %d socket (tcp apps listen on tcp_bind ports only): %w", domain, unix.EPERM)
	}
	sa, err := unix.Getsockname(sock)
	if err != nil {
		return err
	}
	var port int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	}
	if err := g.port(uint16(port)); err != nil {
		return fmt.Errorf("listen on a socket not bound to a tcp_bind port (%w)", err)
	}
	return unix.Listen(sock, int(int32(c.args[1])))
}

func (g *Guard) watch(c *call) (uintptr, error) {
	path, err := c.readString(c.args[1])
	if err != nil {
		return 0, err
	}
	if path == "" {
		return 0, unix.ENOENT
	}
	mask := uint32(c.args[2])
	if !filepath.IsAbs(path) {
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(c.pid) + "/cwd")
		if err != nil {
			return 0, unix.ENOENT
		}
		if err := c.valid(); err != nil {
			return 0, err
		}
		path = cwd + "/" + path
	}
	grant, rest, ok := g.grantOf(path)
	if !ok {
		return 0, fmt.Errorf("%s is outside the app's grants: %w", path, unix.EACCES)
	}
	ifd, err := c.getfd(c.args[0])
	if err != nil {
		return 0, err
	}
	// Without the daemon's capabilities: a root daemon's would watch a
	// directory the app (root too, with none) may not read.
	var wd int
	err = withoutCaps(func() error {
		var err error
		wd, err = addWatch(c, ifd, grant, rest, path, mask)
		return err
	})
	if err != nil {
		return 0, err
	}
	return uintptr(wd), nil
}

// addWatch adds the watch watch decided on to the inotify instance ifd:
// path, under grant as rest, opened as the ruleset opens it and watched
// through the inode opened.
func addWatch(c *call, ifd int, grant PathRule, rest, path string, mask uint32) (int, error) {
	root := grant.Path
	// As the ruleset opens it: a link the app planted in the place of a
	// grant nested in its rw one is refused, not followed.
	rfd, _, err := helper.OpenGrant(grant)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%w: %w", err, unix.EACCES)
		}
		return -1, err
	}
	c.open = append(c.open, rfd)
	target := rfd
	if rest != "" {
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
		if mask&unix.IN_DONT_FOLLOW != 0 {
			how.Flags |= unix.O_NOFOLLOW
		}
		if target, err = unix.Openat2(rfd, rest, &how); err != nil {
			if err == unix.EXDEV {
				return -1, fmt.Errorf("%s leaves the grant %s: %w", path, root, unix.EACCES)
			}
			return -1, err
		}
		c.open = append(c.open, target)
	}
	// The magic link names the inode opened above, whatever happened to
	// the path since.
	return unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(target), mask&^unix.IN_DONT_FOLLOW)
}

// grantOf finds the grant path is beneath (the longest), and the rest of
// path below it. path is only tidied of empty and "." components: a ".."
// stays in the rest, where RESOLVE_BENEATH keeps it inside the grant.
// /proc is never a grant here: the daemon would open its own.
func (g *Guard) grantOf(path string) (grant PathRule, rest string, ok bool) {
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p != "" && p != "." {
			parts = append(parts, p)
		}
	}
	tidy := "/" + strings.Join(parts, "/")
	if tidy == "/proc" || strings.HasPrefix(tidy, "/proc/") {
		return PathRule{}, "", false
	}
	for _, r := range g.spec.Landlock.Paths {
		if r.Why == "proc" || r.Access&(AccessRead|AccessList) == 0 || len(r.Path) <= len(grant.Path) {
			continue
		}
		if tidy == r.Path {
			grant, rest, ok = r, "", true
		} else if strings.HasPrefix(tidy, r.Path+"/") {
			grant, rest, ok = r, tidy[len(r.Path)+1:], true
		}
	}
	return grant, rest, ok
}

func errOrNil(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
