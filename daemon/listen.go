package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"go.uber.org/zap"

	"octosup/internal/passrights"
	"octosup/policy"
)

// ErrAlreadyRunning is Run's error when a live daemon answers on the
// control socket.
var ErrAlreadyRunning = errors.New("already running")

// activated returns the socket systemd passed, or nil. Call it once:
// activation.Listeners unsets LISTEN_*.
func activated(log *zap.Logger) (net.Listener, error) {
	if os.Getenv("LISTEN_FDS") == "" {
		return nil, nil
	}
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	var ln net.Listener
	for _, l := range lns {
		switch {
		case l == nil: // not a listening socket of a kind Go knows
		case ln == nil:
			ln = l
		default:
			log.Warn("systemd passed more than one socket: serving the first", zap.String("ignored", l.Addr().String()))
			l.Close()
		}
	}
	if ln == nil {
		log.Warn("LISTEN_FDS is set but no socket was passed to this process: listening on our own")
		return nil, nil
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("socket activation: systemd passed %s socket %s; octosupd.socket must be a ListenStream= path", ln.Addr().Network(), ln.Addr())
	}
	if err := passrights.RefuseOn(ul); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	return ln, nil
}

// listenUnix listens on path as a per-user daemon must: the directory
// private (policy.EnsurePrivateDir, with privateDir), a live daemon's
// socket never replaced (it is dialed first), a stale one removed, the
// socket 0600.
func listenUnix(ctx context.Context, path string, privateDir bool) (net.Listener, error) {
	dir := filepath.Dir(path)
	if privateDir {
		// The fallback runtime dir is in /tmp: another user could have
		// made it first.
		if err := policy.EnsurePrivateDir(dir); err != nil {
			return nil, fmt.Errorf("the control socket's directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the control socket's directory: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "unix", path)
	switch {
	case err == nil:
		c.Close()
		return nil, fmt.Errorf("%w: a daemon answers on %s (stop it first: systemctl --user stop octosupd)", ErrAlreadyRunning, path)
	case errors.Is(err, syscall.ECONNREFUSED):
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove the stale control socket: %w", err)
		}
	case errors.Is(err, syscall.ENOENT):
	default:
		return nil, fmt.Errorf("check %s for a running daemon: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on the control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("make the control socket private: %w", err)
	}
	// Clients send lines: a passed descriptor (a lingering socket) would
	// hold the reader that closes it (internal/passrights).
	if err := passrights.RefuseOn(ln.(*net.UnixListener)); err != nil {
		ln.Close()
		return nil, fmt.Errorf("the control socket: %w", err)
	}
	return ln, nil
}
