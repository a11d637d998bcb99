package jail

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/internal/passrights"
	"octosup/jail/pulsefilter"
)

// A pulseaudio grant is not a connect to the server: a client of the
// user's own may load code into a PulseAudio server (pulsefilter's doc).
// The guard dials the server itself, connects the app's socket to a
// listener of its own that lives for that one connect, and runs a
// pulsefilter between the two.

// maxSoundConns bounds an app's connections to its sound server at once.
// Each holds two of the daemon's descriptors and buffers, where a plain
// connect held none of the daemon's; a client uses one, or a few.
const maxSoundConns = 8

// soundFilters are the filters a guard's connects started. Serve ends
// them when it returns (the app is gone, or the daemon stops): each is a
// goroutine of the guard's, counted in wg and in n.
type soundFilters struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	ended  bool // guards wg's adds: none after end
	n      int  // filters running
	wg     sync.WaitGroup
}

func newSoundFilters() *soundFilters {
	ctx, cancel := context.WithCancel(context.Background())
	return &soundFilters{ctx: ctx, cancel: cancel}
}

// end stops the filters and waits for them.
func (s *soundFilters) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// connectFiltered connects the app's socket sock to a filter in front of
// the PulseAudio server at path.
func (g *Guard) connectFiltered(sock int, path string) error {
	s := g.sound
	s.mu.Lock()
	if s.ended || s.n >= maxSoundConns {
		s.mu.Unlock()
		return fmt.Errorf("%d connections to the sound server at once: %w", maxSoundConns, unix.EAGAIN)
	}
	s.n++
	s.wg.Add(1)
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		s.n--
		s.mu.Unlock()
		s.wg.Done()
	}
	server, err := dialServer(s.ctx, path)
	if err != nil {
		release()
		return err // the server's errno, as the app's own connect would get
	}
	app, err := handOver(sock)
	if err != nil {
		server.Close()
		release()
		return err
	}
	go func() {
		defer release()
		dropped := eachOnce(maxDroppedKeys, func(key string, more bool) {
			if more {
				g.log.Warn("sound filter: more properties the app set are not passed on; they are not logged", zap.String("app", g.spec.App))
				return
			}
			g.log.Warn("sound filter: a property the app set is not passed on", zap.String("app", g.spec.App), zap.String("key", key))
		})
		if err := pulsefilter.Run(s.ctx, app, server, g.slots.sound, dropped); errors.Is(err, pulsefilter.ErrRefused) {
			g.log.Warn("sound filter: the app sent what playing and recording need not; its connection to the sound server is closed",
				zap.String("app", g.spec.App), zap.Error(err))
		}
	}()
	return nil
}

// maxDroppedKeys and maxKeyLogged bound what a sound connection logs of
// the property keys its filter leaves out: the keys are the app's to
// choose (a hostile review had the daemon keep 1.8 GB of 1 MB keys and
// write 990,000 warnings in 2.4 s).
const (
	maxDroppedKeys = 32
	maxKeyLogged   = 64
)

// eachOnce returns a func that calls log once for each key it is given,
// cut to maxKeyLogged bytes, for the first n keys; for the next, once
// more with more set, then never. One goroutine calls it.
func eachOnce(n int, log func(key string, more bool)) func(string) {
	seen := map[string]bool{}
	return func(key string) {
		if len(key) > maxKeyLogged {
			key = key[:maxKeyLogged] + "..."
		}
		if seen[key] || len(seen) > n {
			return
		}
		seen[key] = true
		log(key, len(seen) > n)
	}
}

// dialWait bounds how long dialServer waits for room in the server's
// backlog.
const dialWait = 5 * time.Second

// dialServer connects to the sound server at path as the app's own
// blocking connect would: Go's dial of a unix socket does not wait, and
// is EAGAIN while the server's backlog is full (a burst of connects on a
// loaded machine, which CI met), where the app's connect waits for room.
// It waits up to dialWait, and ends with ctx: end, and with it the
// guard's Serve, never waits on it for long.
func dialServer(ctx context.Context, path string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialWait)
	defer cancel()
	var d net.Dialer
	pause := time.Millisecond
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			if err := passCreds(c); err != nil {
				return nil, err
			}
			return c, nil
		}
		if !errors.Is(err, unix.EAGAIN) {
			return nil, err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// passCreds has every packet on c carry the daemon's credentials. A
// server that turns SO_PASSCRED on only after accepting (PulseAudio, which
// authorizes a client of its own user by them) otherwise reads none on
// what arrived in between, the AUTH packet among it, and refuses it as
// uid 65534.
func passCreds(c net.Conn) error {
	rc, err := c.(syscall.Conn).SyscallConn()
	var serr error
	if err == nil {
		err = rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) })
	}
	if err = cmp.Or(err, serr); err != nil {
		c.Close()
		return fmt.Errorf("sound filter: pass credentials to the server: %w", err)
	}
	return nil
}

// handOver connects sock to a listener of the daemon's that takes that
// one connection, and returns the daemon's end. The listener's name is
// abstract and random, and the connection taken must be the daemon's own
// (SO_PEERCRED): a jail app reaches no abstract socket, and anything
// else that got there first is refused, not filtered.
func handOver(sock int) (net.Conn, error) {
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sound filter: socket: %w", err)
	}
	defer unix.Close(ln)
	// Connections inherit it: a descriptor the app sends is refused
	// (internal/passrights).
	if err := passrights.Refuse(ln); err != nil {
		return nil, fmt.Errorf("sound filter: %w", err)
	}
	var name [16]byte
	rand.Read(name[:])
	addr := &unix.SockaddrUnix{Name: "@octosup-sound-" + hex.EncodeToString(name[:])}
	if err := unix.Bind(ln, addr); err != nil {
		return nil, fmt.Errorf("sound filter: bind: %w", err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		return nil, fmt.Errorf("sound filter: listen: %w", err)
	}
	if err := unix.Connect(sock, addr); err != nil {
		return nil, fmt.Errorf("sound filter: connect the app's socket: %w", err)
	}
	fd, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("sound filter: accept: %w", err)
	}
	f := os.NewFile(uintptr(fd), "sound-filter")
	defer f.Close()
	if cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err != nil || int(cred.Pid) != os.Getpid() {
		return nil, fmt.Errorf("sound filter: a connection not the daemon's took the listener: %w", unix.ECONNREFUSED)
	}
	return net.FileConn(f)
}
