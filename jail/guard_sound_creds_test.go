package jail

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDialServerSendsCredentials: PulseAudio authorizes a client of its
// own user by the credentials on its AUTH packet, and turns SO_PASSCRED
// on for a connection only after accepting it. What the daemon writes
// between the accept and that carries no credentials unless the
// daemon's own socket passes them (a stock server refused 4 of 69
// filtered connections as uid 65534). The fake server here enables
// SO_PASSCRED only once the first bytes have arrived.
func TestDialServerSendsCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "native")
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		t.Fatal(err)
	}
	c, err := dialServer(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := c.Write([]byte("auth")); err != nil {
		t.Fatal(err)
	}
	// The bytes are queued at fd before it passes credentials.
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 16), make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read %q with control messages %v (%v), want the sender's credentials", buf[:n], msgs, err)
	}
	cred, err := unix.ParseUnixCredentials(&msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if int(cred.Uid) != os.Getuid() || int(cred.Pid) != os.Getpid() {
		t.Fatalf("the server read uid %d pid %d on the first bytes, want the daemon's %d and %d", cred.Uid, cred.Pid, os.Getuid(), os.Getpid())
	}
}
