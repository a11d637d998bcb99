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

// ErrAlreadyRunning is returned by Run when a live daemon answers on the
// control socket.
var ErrAlreadyRunning = errors.New("already running")

// activated returns the control socket systemd passed (socket activation),
// or nil when it passed none. activation.Listeners reads LISTEN_* once
// and unsets them, so it is called once, here.
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
		case l == nil:
			// Not a listening socket of a kind Go knows.
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

// listenUnix listens on path the way a per-user daemon must: the
// directory private (policy.EnsurePrivateDir: created 0700 when missing,
// refused when it is not this user's own), a live daemon's socket
// never replaced (it is dialed first), a stale one removed, the socket
// itself 0600.
func listenUnix(ctx context.Context, path string, privateDir bool) (net.Listener, error) {
	dir := filepath.Dir(path)
	if privateDir {
		// The fallback runtime dir lives in /tmp, where another user
		// could have made it first: it must be ours and nobody else's.
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
		// A socket nobody listens on: left by a daemon that died.
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
	// Clients send lines; a descriptor one handed over would be closed by
	// the connection's reader, which a lingering socket holds
	// (internal/passrights).
	if err := passrights.RefuseOn(ln.(*net.UnixListener)); err != nil {
		ln.Close()
		return nil, fmt.Errorf("the control socket: %w", err)
	}
	return ln, nil
}
