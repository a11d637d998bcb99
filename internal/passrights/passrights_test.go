package passrights

import (
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListenerRefusesDescriptors: a connection to a listener with passing
// off refuses SCM_RIGHTS at once, accepted or not; the same message goes
// to a listener left as it is (the positive control).
func TestListenerRefusesDescriptors(t *testing.T) {
	for _, c := range []struct {
		name   string
		refuse bool
		want   error
	}{{"refused", true, unix.EPERM}, {"as is", false, nil}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			if c.refuse {
				if err := RefuseOn(ln); err != nil {
					t.Fatal(err)
				}
			}
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
				t.Fatal(err)
			}
			send := func() error { return unix.Sendmsg(fd, []byte("x"), unix.UnixRights(0), nil, 0) }
			if err := send(); err != c.want {
				t.Errorf("before accept: %v, want %v", err, c.want)
			}
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := send(); err != c.want {
				t.Errorf("after accept: %v, want %v", err, c.want)
			}
		})
	}
}
