package jail

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	seccomp "github.com/seccomp/libseccomp-golang"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The guard's connect (docs/jail.md, "Desktop sockets and devices"): for
// an app with desktop sockets, or with network full below Landlock ABI 9,
// every connect comes to the daemon. The guard takes the app's socket
// (pidfd_getfd) and its address (one copy, read once), and
//
//   - a unix socket: connects it to a granted socket whose path the
//     address names byte for byte, through an address the daemon built
//     from the grant, never the app's bytes; any other pathname is
//     EACCES (Landlock's answer) and an abstract name EPERM (Landlock
//     scoping's: the daemon is not scoped, so it connects to none);
//   - an inet socket: connects it with the daemon's copy, after checking
//     the port against tcp_connect for network tcp (the daemon's connect
//     is not Landlock's to narrow);
//   - anything else (network full: netlink, vsock, say): EPERM. The
//     daemon's connect would carry its credentials (a root daemon's
//     CAP_NET_ADMIN joins netlink groups the app may not), and handing
//     the call back to the kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE) has
//     it look the descriptor up again: a hostile review's second thread
//     swapped a unix socket onto the number meanwhile, and the kernel
//     connected that to any path. Netlink works without connect (bind,
//     sendto), as glibc, libnl and sd-netlink use it.
//
// A thread of the app that rewrites the address, or swaps the descriptor,
// while the guard decides changes nothing: the guard acts on the socket
// it took and the address it copied.
//
// A connect may block (a TCP handshake; a unix listener whose backlog is
// full), and so may the close of the daemon's copy of any descriptor the
// guard takes of the app (connect, bind, listen, inotify_add_watch, whose
// "inotify" descriptor may be any socket): once the app has closed its
// own the copy is the last, and closing a TCP socket with unsent data and
// SO_LINGER set waits for as long as the app set; so may the taking of
// the descriptor itself (pidfd_getfd), when the kernel's fget loses a
// race with the app's close and drops the last reference. So each such
// call runs on a goroutine of its own, with its own copy of the listener,
// holding one of the app's slots (later); Serve waits for its decision
// (the app's socket taken, its address read and checked, a bind or
// listen made), briefly, so that a connect that holds a slot has taken
// the app's socket before the next call, and is one the daemon makes
// even if the app dies before it is done.

// maxConnects bounds the connects one app has the daemon make at once,
// across its processes and restarts (Launcher.slotsOf): a connect that
// never ends (a listener that never accepts, a SYN never answered), or
// whose close lingers, holds its slot, and past maxConnects the app's
// connect is EAGAIN, never made in line, so the guard always goes on.
// maxCloses bounds the same way the app's other calls whose close of the
// daemon's copy of a descriptor is under way (bind, listen,
// inotify_add_watch: a close that lingers).
const (
	maxConnects = 16
	maxCloses   = 16
)

// sockAddr is a decoded socket address, as the kernel would read it.
type sockAddr struct {
	family uint16
	// path is a pathname unix socket's name (up to its first NUL);
	// abstract says the name is abstract (path then holds it without the
	// leading NUL); both empty: an unnamed (autobind) address.
	path     string
	abstract bool
	// port is an inet address's, host order.
	port uint16
}

// sizeofSockaddrStorage is the longest address the kernel takes
// (move_addr_to_kernel: sizeof(struct sockaddr_storage)); callers pass
// it as the length of a sockaddr_storage they filled.
const sizeofSockaddrStorage = 128

// errShortAddr is decodeSockaddr's answer for fewer bytes than the family
// needs, which the kernel refuses with EINVAL.
var errShortAddr = fmt.Errorf("socket address too short: %w", unix.EINVAL)

// decodeSockaddr reads b, the n bytes the app passed to connect, as the
// kernel does: the family in the first two bytes, then a unix name (a
// pathname ends at its first NUL or at the end; a leading NUL makes the
// rest, every byte, an abstract name) or an inet port.
func decodeSockaddr(b []byte) (sockAddr, error) {
	if len(b) < 2 {
		return sockAddr{}, errShortAddr
	}
	if len(b) > sizeofSockaddrStorage {
		return sockAddr{}, fmt.Errorf("socket address of %d bytes: %w", len(b), unix.EINVAL)
	}
	a := sockAddr{family: binary.NativeEndian.Uint16(b)}
	switch a.family {
	case unix.AF_UNIX:
		name := b[2:]
		if len(name) > len(unix.RawSockaddrUnix{}.Path) {
			return sockAddr{}, fmt.Errorf("unix socket name of %d bytes: %w", len(name), unix.EINVAL)
		}
		switch {
		case len(name) == 0:
		case name[0] == 0:
			a.abstract, a.path = true, string(name[1:])
		default:
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			a.path = string(name)
		}
	case unix.AF_INET:
		if len(b) < unix.SizeofSockaddrInet4 {
			return sockAddr{}, errShortAddr
		}
		a.port = binary.BigEndian.Uint16(b[2:4])
	case unix.AF_INET6:
		if len(b) < unix.SizeofSockaddrInet6-4 { // SIN6_LEN_RFC2133: without the scope id
			return sockAddr{}, errShortAddr
		}
		a.port = binary.BigEndian.Uint16(b[2:4])
	}
	return a, nil
}

// later takes the calls the spec hands over (connect, bind, listen,
// inotify_add_watch) and reports true, with how long it waited for a
// slot; false for any other (Serve answers it ENOSYS). Each runs on a
// goroutine of its own, which decides it (while the app waits in the
// call, and Serve for the decision, up to decideWait), makes the connect
// (for a connect), closes the daemon's copies of the app's descriptors
// and answers: neither the taking of an app's descriptor, nor a connect,
// nor a close is ever made on the Serve loop, so a listener that never
// accepts, or a socket that lingers, cannot hold the guard (nor the
// daemon's shutdown, which waits for Serve). A connect holds one of the
// app's connect slots, and past maxConnects under way it is EAGAIN at
// once; any other call holds a close slot, and past maxCloses it waits up
// to closeWait for one (a burst of calls, each a close of microseconds),
// then is EAGAIN (closes that linger).
func (g *Guard) later(ctx context.Context, req *seccomp.ScmpNotifReq) (taken bool, waited time.Duration) {
	slots := g.slots.closes
	var decide func(*call) (func() error, uintptr, error)
	switch nr := int(req.Data.Syscall); {
	case nr == unix.SYS_CONNECT && g.rule("connect"):
		slots, decide = g.slots.connects, func(c *call) (func() error, uintptr, error) {
			connect, err := g.connect(c)
			return connect, 0, err
		}
	case nr == unix.SYS_BIND && g.rule("bind"):
		decide = func(c *call) (func() error, uintptr, error) { return nil, 0, g.bind(c) }
	case nr == unix.SYS_LISTEN && g.rule("listen"):
		decide = func(c *call) (func() error, uintptr, error) { return nil, 0, g.listen(c) }
	case nr == unix.SYS_INOTIFY_ADD_WATCH && g.rule("inotify_add_watch"):
		decide = func(c *call) (func() error, uintptr, error) {
			wd, err := g.watch(c)
			return nil, wd, err
		}
	default:
		return false, 0
	}
	refuse := func(errno unix.Errno) (bool, time.Duration) {
		g.answerConnect(seccomp.ScmpFd(g.f.Fd()), &seccomp.ScmpNotifResp{ID: req.ID, Error: int32(errno)})
		return true, waited
	}
	t0 := time.Now()
	ok := g.takeSlot(ctx, slots)
	waited = time.Since(t0)
	if !ok {
		return refuse(unix.EAGAIN)
	}
	// Its own copy of the listener: Serve may close its own (the app
	// gone, or ctx done) while this call still runs.
	fd, err := unix.FcntlInt(g.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		<-slots
		return refuse(unix.EAGAIN)
	}
	c := newCall(seccomp.ScmpFd(fd), req)
	decided := make(chan struct{})
	go func() {
		connect, val, err := decide(c)
		close(decided)
		if connect != nil {
			start := time.Now()
			err = connect()
			now := time.Now()
			g.spend(now, now.Sub(start))
		}
		g.finish(req, c, slots, val, err)
	}()
	// Serve waits for the decision, so that the calls are taken in their
	// order (a connect that holds a slot has taken the app's socket
	// before the next call is looked at), but not past decideWait: taking
	// the app's descriptor can itself end in a lingering close, when the
	// kernel's fget loses a race with the app's close and drops the last
	// reference.
	t := time.NewTimer(decideWait)
	defer t.Stop()
	select {
	case <-decided:
	case <-t.C:
	case <-ctx.Done():
	}
	return true, waited
}

// decideWait is how long Serve waits for a call it handed over to be
// decided.
const decideWait = 100 * time.Millisecond

// closeWait is how long a call waits for one of its app's close slots
// when every one is taken.
const closeWait = 100 * time.Millisecond

// takeSlot takes one of slots: a connect's at once or not at all, a
// close's within closeWait; false when none came (or ctx ended).
func (g *Guard) takeSlot(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	if slots == g.slots.connects {
		return false
	}
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// finish ends a call later took: it closes what the call opened (a close
// that lingers waits here), frees its slot and answers, with val or err,
// on the call's listener copy, which it closes. The slot is free before
// the app hears, and a call the app makes next finds it free.
func (g *Guard) finish(req *seccomp.ScmpNotifReq, c *call, slots chan struct{}, val uintptr, err error) {
	c.close()
	<-slots
	resp := g.response(req, c, val, err)
	g.answerConnect(c.fd, &resp)
	unix.Close(int(c.fd))
}

// answerConnect answers a connect off Serve's own step, on the listener
// fd; a caller gone meanwhile (ENOENT) is no failure, and any other is
// logged, since Serve goes on.
func (g *Guard) answerConnect(fd seccomp.ScmpFd, resp *seccomp.ScmpNotifResp) {
	if err := seccomp.NotifRespond(fd, resp); err != nil && !errors.Is(err, unix.ENOENT) {
		g.log.Warn("guard: respond to a connect", zap.String("app", g.spec.App), zap.Error(err))
	}
}

// connect decides one connect (see above): the connect to make, or why
// none is made.
func (g *Guard) connect(c *call) (func() error, error) {
	sock, domain, _, err := c.socket()
	if err != nil {
		return nil, err
	}
	n := c.args[2]
	if n > sizeofSockaddrStorage {
		return nil, unix.EINVAL
	}
	raw, err := c.read(c.args[1], int(n))
	if err != nil {
		return nil, err
	}
	a, err := decodeSockaddr(raw)
	if err != nil {
		return nil, err
	}
	switch domain {
	case unix.AF_UNIX:
		grant, err := g.connectUnix(a)
		if err != nil {
			return nil, err
		}
		if grant.Via == GrantPulseFilter {
			return func() error { return g.connectFiltered(sock, grant.Path) }, nil
		}
		return func() error { return unix.Connect(sock, &unix.SockaddrUnix{Name: grant.Path}) }, nil
	case unix.AF_INET, unix.AF_INET6:
		if g.spec.Landlock.Net && (a.family == unix.AF_INET || a.family == unix.AF_INET6) && !slices.Contains(g.spec.Landlock.ConnectTCP, a.port) {
			return nil, fmt.Errorf("port %d is not in tcp_connect: %w", a.port, unix.EACCES)
		}
		return func() error { return rawConnect(sock, raw) }, nil
	}
	return nil, fmt.Errorf("connect of a domain %d socket: the guard makes unix and inet connects only: %w", domain, unix.EPERM)
}

// connectUnix is the granted socket a names: the grant's path, not the
// app's bytes, is what the daemon connects to.
func (g *Guard) connectUnix(a sockAddr) (SocketGrant, error) {
	switch {
	case a.family != unix.AF_UNIX:
		return SocketGrant{}, fmt.Errorf("address family %d on a unix socket: %w", a.family, unix.EINVAL)
	case a.abstract:
		return SocketGrant{}, fmt.Errorf("abstract socket %q: the jail reaches no abstract socket outside it: %w", a.path, unix.EPERM)
	case a.path == "":
		return SocketGrant{}, unix.EINVAL
	}
	i := slices.IndexFunc(g.spec.Sockets, func(s SocketGrant) bool { return s.Path == a.path })
	if i < 0 {
		return SocketGrant{}, fmt.Errorf("%s is not a granted socket: %w", a.path, unix.EACCES)
	}
	return g.spec.Sockets[i], nil
}

// rawConnect connects sock to the address raw as it is (the daemon's
// copy of the app's).
func rawConnect(sock int, raw []byte) error {
	var p unsafe.Pointer
	if len(raw) > 0 {
		p = unsafe.Pointer(&raw[0])
	}
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(sock), uintptr(p), uintptr(len(raw)))
	return errOrNil(e)
}
