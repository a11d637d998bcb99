package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The desktop app's actions: what an app granted a socket or the GPU
// tries beyond its grant. Raw syscalls, so that the errno is the
// kernel's, the filter's or the guard's.

func desktopProbe(action string, a []string) (out string, err error, known bool) {
	known = true
	switch action {
	case "unix_dgram_socket":
		// A datagram socket of its own: its sendto names any socket.
		var fd int
		if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
			err = unix.Sendto(fd, []byte("forged"), 0, &unix.SockaddrUnix{Name: a[0]})
			unix.Close(fd)
		}
	case "stream_sendto":
		// sendto with an address on an unconnected stream socket.
		var fd int
		if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			err = unix.Sendto(fd, []byte("forged"), 0, &unix.SockaddrUnix{Name: a[0]})
			unix.Close(fd)
		}
	case "unix_connect_link":
		// A link of its own, in its own runtime directory, to a path:
		// the kernel would follow it; the guard compares names.
		link := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "link")
		os.Remove(link)
		if err = os.Symlink(a[0], link); err == nil {
			err = unixConnect(link)
		}
	case "getenv":
		out = os.Getenv(a[0])
	case "connect_race":
		out, err = connectRace(a[0], a[1], atoi(a[2]))
	case "connect_loop":
		out, err = connectLoop(a[0], atoi(a[1]))
	case "connect_signalled":
		out, err = connectSignalled(a[0], atoi(a[1]))
	case "connect_flood":
		out, err = connectFlood(a[0], atoi(a[1]), time.Duration(atoi(a[2]))*time.Millisecond)
	case "connect_stall":
		out, err = connectStall(a[0], atoi(a[1]), atoi(a[2]))
	case "linger_race":
		out, err = lingerRace(a[0], atoi(a[1]), atoi(a[2]), a[3], atoi(a[4]))
	case "netlink_groups":
		// A netlink socket joining rtnetlink's link group by its connect:
		// the kernel asks the connecting task for CAP_NET_ADMIN.
		var fd int
		if fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE); err == nil {
			err = unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK})
			unix.Close(fd)
		}
	case "open_rw":
		var fd int
		if fd, err = unix.Open(a[0], unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	case "drm_ioctl":
		// DRM_IOCTL_VERSION on the node: a stand-in answers ENOTTY (the
		// driver saw it), Landlock EACCES (it never got there).
		var fd int
		if fd, err = unix.Open(a[0], unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			var v [64]byte
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0xc0406400, uintptr(unsafe.Pointer(&v[0])))
			err = errOrNil(e)
			unix.Close(fd)
		}
	default:
		known = false
	}
	return out, err, known
}

// connectRace connects non-blocking unix sockets to the address in one
// buffer n times, while another thread rewrites that buffer between the
// paths good and bad, word by word. It prints how many connects
// succeeded and how many were refused.
func connectRace(good, bad string, n int) (string, error) {
	var buf [14]uint64 // a sockaddr_un, 8-aligned, written atomically
	fill := func(p string) (w [14]uint64) {
		b := (*[112]byte)(unsafe.Pointer(&w[0]))
		*(*uint16)(unsafe.Pointer(&b[0])) = unix.AF_UNIX
		copy(b[2:109], p)
		return w
	}
	words := [2][14]uint64{fill(good), fill(bad)}
	for i := range buf {
		atomic.StoreUint64(&buf[i], words[0][i])
	}
	k := 0
	stop := meanwhile(func() {
		w := &words[k&1]
		for i := range buf {
			atomic.StoreUint64(&buf[i], w[i])
		}
		k++
	})
	var ok, refused, other int
	for range n {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			stop()
			return "", err
		}
		_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), 110)
		switch e {
		case 0:
			ok++
		case unix.EACCES, unix.EPERM, unix.ENOENT, unix.ECONNREFUSED, unix.EINVAL:
			refused++
		default:
			other++
		}
		unix.Close(fd)
	}
	stop()
	return fmt.Sprintf("ok=%d refused=%d other=%d", ok, refused, other), nil
}

// connectSignalled connects n unix stream sockets to path while another
// thread signals the connecting one without pause (SIGURG, which the Go
// runtime takes with SA_RESTART, as it does for its own preemption): a
// signal that lands while the daemon makes the connect restarts the
// call. It prints how many connects succeeded and the errors of the rest.
func connectSignalled(path string, n int) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := unix.Getpid(), unix.Gettid()
	stop := meanwhile(func() { unix.Tgkill(pid, tid, unix.SIGURG) })
	ok, failed := 0, map[string]int{}
	for range n {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			stop()
			return "", err
		}
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			failed[unix.ErrnoName(err.(unix.Errno))]++
		} else {
			ok++
		}
		unix.Close(fd)
	}
	stop()
	if len(failed) == 0 {
		return "ok", nil
	}
	return fmt.Sprintf("ok=%d failed=%v", ok, failed), nil
}

// connectFlood connects unix stream sockets to path from n threads in a
// loop for d, and prints how many connects were made.
func connectFlood(path string, n int, d time.Duration) (string, error) {
	var calls atomic.Int64
	end := time.Now().Add(d)
	done := make(chan struct{})
	for range n {
		go func() {
			defer func() { done <- struct{}{} }()
			for time.Now().Before(end) {
				if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
					unix.Connect(fd, &unix.SockaddrUnix{Name: path})
					unix.Close(fd)
				}
				calls.Add(1)
			}
		}()
	}
	for range n {
		<-done
	}
	return fmt.Sprintf("calls %d", calls.Load()), nil
}

// connectStall connects n unix stream sockets to path, whose listener
// never accepts (one, then the others at once, each on a thread of its
// own), and waits for want of them to return (the rest block): it prints
// how many connected and what the others got, then exits, which ends the
// blocked threads.
func connectStall(path string, n, want int) (string, error) {
	got := make(chan error, n)
	connect := func() {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		}
		got <- err
	}
	// One first, alone: the one the listener's backlog takes when it has
	// room, done before the others start; they all stall.
	connect()
	for range n - 1 {
		go connect()
	}
	ok, failed := 0, map[string]int{}
	for range want {
		if err := <-got; err != nil {
			failed[unix.ErrnoName(err.(unix.Errno))]++
		} else {
			ok++
		}
	}
	return fmt.Sprintf("ok=%d failed=%v", ok, failed), nil
}

// lingerRace tries, up to tries times, to have the daemon make the last
// close of a TCP socket that lingers: a socket connected to port (whose
// peer never reads) with its send queue full and SO_LINGER set, one
// thread handing it to the guard (op: a connect or a bind to denied, or
// an inotify_add_watch, all refused) while another closes it. When the
// guard took its copy before that close, the copy is the last, and the
// call is answered only once the daemon's close is done. It prints
// "held, lingered K" when the guard answered a connect to the granted
// socket live whenever a call was not answered within 20 ms (K times,
// up to past both slot bounds; "busy": a connect was EAGAIN, the
// lingering closes holding the app's connect slots), and "stalled at try
// N" when it did not within 15 s.
func lingerRace(op string, port, denied int, live string, tries int) (string, error) {
	lo := [4]byte{127, 0, 0, 1}
	fill := make([]byte, 64<<10)
	lingered := 0
	for i := 0; i < tries && lingered <= maxConnects+maxCloses; i++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: lo}); err == unix.EAGAIN {
			return fmt.Sprintf("held, lingered %d, busy", lingered), nil
		} else if err != nil {
			return "", fmt.Errorf("try %d: connect: %w", i, err)
		}
		unix.SetNonblock(fd, true)
		for {
			if _, err := unix.Write(fd, fill); err != nil {
				break // EAGAIN: the peer's window is shut
			}
		}
		unix.SetNonblock(fd, false)
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 60}); err != nil {
			return "", err
		}
		start, answered := make(chan struct{}), make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			sa := &unix.SockaddrInet4{Port: denied, Addr: lo}
			<-start
			switch op {
			case "bind":
				answered <- unix.Bind(fd, sa)
			case "inotify": // the guard takes any descriptor for the inotify one
				_, err := unix.InotifyAddWatch(fd, os.Getenv(EnvJail), unix.IN_CREATE)
				answered <- err
			default:
				answered <- unix.Connect(fd, sa)
			}
		}()
		close(start)
		for k := 0; k < (i*37)%4000*10; k++ { // a close at another moment each try
			spin.Add(1)
		}
		go unix.Close(fd) // the last close waits out the linger
		select {
		case err := <-answered:
			if err == unix.EAGAIN {
				return fmt.Sprintf("held, lingered %d, busy", lingered), nil
			}
			continue
		case <-time.After(20 * time.Millisecond):
		}
		if lingered++; lingered > maxConnects+maxCloses {
			break // past both bounds: calls wait, or are EAGAIN
		}
		alive := make(chan struct{})
		go func() {
			if s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
				unix.Connect(s, &unix.SockaddrUnix{Name: live})
			}
			close(alive)
		}()
		// Long enough for the guard's own pauses (budget.go: on a busy
		// machine its calls are slow, and it pauses ten times as long),
		// short of the 60 s linger.
		select {
		case <-alive:
		case <-time.After(15 * time.Second):
			return fmt.Sprintf("stalled at try %d", i), nil
		}
	}
	return fmt.Sprintf("held, lingered %d", lingered), nil
}

// spin is lingerRace's busy loop's counter, which the compiler keeps.
var spin atomic.Int64

// connectLoop connects n unix stream sockets to path and prints the mean
// time of one connect in nanoseconds.
func connectLoop(path string, n int) (string, error) {
	sa := &unix.SockaddrUnix{Name: path}
	var total time.Duration
	for range n {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		start := time.Now()
		err = unix.Connect(fd, sa)
		total += time.Since(start)
		unix.Close(fd)
		if err != nil {
			return "", err
		}
	}
	return strings.TrimSpace(fmt.Sprint(total.Nanoseconds() / int64(n))), nil
}
