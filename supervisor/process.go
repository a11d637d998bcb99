package supervisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/internal/passrights"
	"octosup/jail"
)

// spawnRequest asks the spawner thread to start one process, or with
// ping only to answer (Supervisor.Ping).
type spawnRequest struct {
	req   jail.Request
	ping  bool
	reply chan spawnResult // buffered 1
}

type spawnResult struct {
	proc spawned
	err  error
}

// confirmer is what the runner needs of a launched process beyond its pid
// and pidfd: *jail.Process provides it. It is an interface so that tests
// can stand in for a jail helper that never reports.
type confirmer interface {
	Confirm() (jail.Report, error)
}

// settled is implemented by a confirmer whose answer may be known when
// the launch returns (*jail.Process: an in-process spawn's); the runner
// then takes it at once instead of waiting on a goroutine for it.
type settled interface {
	Settled() bool
}

// spawned is one process a launch forked.
type spawned struct {
	pid, pidfd int
	confirm    confirmer // nil only with a launch error
}

// launchFunc starts one process; launcherFunc adapts a Launcher to it.
type launchFunc func(jail.Request) (spawned, error)

func launcherFunc(l Launcher) launchFunc {
	return func(req jail.Request) (spawned, error) {
		p, err := l.Start(req)
		if p == nil {
			return spawned{pid: -1, pidfd: -1}, err
		}
		return spawned{pid: p.Pid, pidfd: p.Pidfd, confirm: p}, err
	}
}

// spawner runs on one OS thread for the whole life of Run. The kernel ties
// an app's parent-death signal to the thread that forked it, not to the
// process (golang/go#27505): a Go thread that the runtime retires would
// kill the apps it forked. This thread is locked and never unlocked, so it
// dies only when the goroutine returns at the end of Run, after every app
// was stopped, or with the daemon.
func spawner(launch launchFunc, reqs <-chan spawnRequest, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	runtime.LockOSThread()
	for {
		select {
		case r := <-reqs:
			if r.ping {
				r.reply <- spawnResult{}
				continue
			}
			p, err := launch(r.req)
			r.reply <- spawnResult{p, err}
		case <-stop:
			return
		}
	}
}

// captures are the fds one launch needs: a pipe per output stream and the
// hub socketpair. The child's ends are blocking (a program that gets a
// non-blocking stdout may lose output with EAGAIN); the daemon's ends are
// non-blocking so that Go's netpoller serves them.
type captures struct {
	outR, outW *os.File
	errR, errW *os.File
	hub        *os.File // the daemon's end
	hubChild   *os.File
}

func newCaptures(appID string) (c *captures, err error) {
	c = &captures{}
	defer func() {
		if err != nil {
			c.closeChild()
			c.closeDaemon()
		}
	}()
	if c.outR, c.outW, err = pipe(appID, "stdout"); err != nil {
		return c, err
	}
	if c.errR, c.errW, err = pipe(appID, "stderr"); err != nil {
		return c, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return c, fmt.Errorf("hub socketpair: %w", err)
	}
	// The hub carries lines only (docs/jail.md, "File descriptors"): a
	// descriptor an app hands over is refused, not closed by the thread
	// that reads past it.
	if err := errors.Join(unix.SetNonblock(fds[0], true), passrights.Refuse(fds[0])); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return c, fmt.Errorf("hub socketpair: %w", err)
	}
	c.hub = os.NewFile(uintptr(fds[0]), "hub:"+appID)
	c.hubChild = os.NewFile(uintptr(fds[1]), "hub-child:"+appID)
	return c, nil
}

func pipe(appID, stream string) (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("%s pipe: %w", stream, err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, fmt.Errorf("%s pipe: %w", stream, err)
	}
	return os.NewFile(uintptr(p[0]), stream+":"+appID), os.NewFile(uintptr(p[1]), stream+"-child:"+appID), nil
}

// closeChild closes the daemon's copies of the child's ends, which it
// must do once the child has them: a pipe reaches EOF only when every
// writer is gone.
func (c *captures) closeChild() {
	for _, f := range []*os.File{c.outW, c.errW, c.hubChild} {
		if f != nil {
			f.Close()
		}
	}
}

func (c *captures) closeDaemon() {
	for _, f := range []*os.File{c.outR, c.errR, c.hub} {
		if f != nil {
			f.Close()
		}
	}
}

// watchExit waits, without a thread of its own, until the process behind
// pidfd has exited, then closes exited. The pidfd is non-blocking and
// registered with Go's netpoller (os.NewFile), so the wait parks a
// goroutine, not a thread. It does not reap: the runner does that, after
// it has killed what is left of the app's process group. If the wait
// itself fails, exited is closed all the same (the runner then reaps,
// which blocks until the process is gone) and the failure is logged.
func watchExit(pidfd *os.File, exited chan<- struct{}, log *zap.Logger, appID string, pid int) {
	defer close(exited)
	rc, err := pidfd.SyscallConn()
	if err != nil {
		log.Error("cannot watch an app process's pidfd; reaping it at once", zap.String("app", appID), zap.Int("pid", pid), zap.Error(err))
		return
	}
	// Read's callback runs first at once, then each time the poller says
	// the fd is readable. A pidfd is readable once its process exited; the
	// zero-timeout poll makes the first call see an exit that happened
	// before the fd was registered.
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				return false
			}
			perr = err
			return true
		}
		return n > 0
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		log.Error("waiting on an app process's pidfd failed; reaping it at once", zap.String("app", appID), zap.Int("pid", pid), zap.Error(err))
	}
}

// reap collects the exit status of the exited process behind pidfd. It is
// the one place in the supervisor that waits for a process.
func reap(pidfd *os.File, at time.Time) (Exit, error) {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return lostExit(at), err
	}
	var info unix.Siginfo
	var werr error
	if err := rc.Control(func(fd uintptr) {
		for {
			werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED, nil)
			if errors.Is(werr, unix.EAGAIN) {
				// Not exited yet (the watch failed): on a non-blocking
				// pidfd waitid would not wait, so make it block.
				if werr = unix.SetNonblock(int(fd), false); werr != nil {
					return
				}
				continue
			}
			if !errors.Is(werr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return lostExit(at), err
	}
	if werr != nil {
		return lostExit(at), fmt.Errorf("waitid: %w", werr)
	}
	return exitOf(&info, at), nil
}

// si_code values of SIGCHLD (<asm-generic/siginfo.h>), which x/sys does
// not export.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// sigchld decodes the SIGCHLD part of a siginfo_t, which x/sys leaves
// opaque: si_pid, si_uid, si_status follow the three int header fields,
// aligned to a pointer.
func sigchld(info *unix.Siginfo) (pid, status int) {
	raw := (*[unsafe.Sizeof(unix.Siginfo{})]byte)(unsafe.Pointer(info))
	off := 3 * 4
	if a := int(unsafe.Sizeof(uintptr(0))); off%a != 0 {
		off += a - off%a
	}
	return int(int32(binary.NativeEndian.Uint32(raw[off:]))), int(int32(binary.NativeEndian.Uint32(raw[off+8:])))
}

// exitOf is the Exit a waitid's siginfo_t reports.
func exitOf(info *unix.Siginfo, at time.Time) Exit {
	_, status := sigchld(info)
	switch info.Code {
	case cldExited:
		return Exit{Kind: ExitStatus, Code: status, At: at}
	case cldKilled, cldDumped:
		return Exit{Kind: ExitSignal, Code: -1, Signal: signalName(status), SignalNumber: status,
			CoreDumped: info.Code == cldDumped, At: at}
	}
	return Exit{Kind: ExitUnknown, Code: -1, At: at}
}

// lostExit is the Exit of a process whose status could not be collected.
func lostExit(at time.Time) Exit { return Exit{Kind: ExitUnknown, Code: -1, At: at} }

// signalName names signal n. unix.SignalName knows only the classic
// signals; the real-time ones (32-64 on Linux) are named as the kernel
// and kill(1) count them.
func signalName(n int) string {
	if name := unix.SignalName(unix.Signal(n)); name != "" {
		return name
	}
	if rtmin, rtmax := 32, 64; n >= rtmin && n <= rtmax {
		if n == rtmin {
			return "SIGRTMIN"
		}
		return fmt.Sprintf("SIGRTMIN+%d", n-rtmin)
	}
	return fmt.Sprintf("signal %d", n)
}

// pidfdSignal sends sig to the process behind pidfd, a non-blocking
// file Go's netpoller holds (its Fd would make it blocking).
func pidfdSignal(pidfd *os.File, sig unix.Signal) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	return serr
}

// killGroup signals the app's process group. The caller guarantees that
// the group leader is not yet reaped, so pgid still names the app's group
// and cannot have been reused.
func killGroup(pgid int, sig unix.Signal) error {
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d with %s: %w", pgid, unix.SignalName(sig), err)
	}
	return nil
}

// procStat is what CheckCaller needs of /proc/PID/stat.
type procStat struct {
	state           byte   // R, S, D, Z, X, ...
	ppid, pgid, sid int    // parent, process group, session
	start           uint64 // start time, clock ticks since boot
}

// errExiting is a stat whose process group or session reads -1: the
// process is exiting, its ids already released.
var errExiting = errors.New("stat: the process is exiting")

// parseStat decodes /proc/PID/stat. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted from its last ')'.
func parseStat(b []byte) (procStat, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	// state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice num_threads
	// itrealvalue starttime ...
	if len(f) < 20 {
		return procStat{}, errors.New("stat: too few fields")
	}
	if len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("stat: bad state %q", f[0])
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid < 0 {
		return procStat{}, fmt.Errorf("stat: bad ppid %q", f[1])
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, fmt.Errorf("stat: bad pgrp %q", f[2])
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return procStat{}, fmt.Errorf("stat: bad session %q", f[3])
	}
	if pgid < 0 || sid < 0 {
		return procStat{}, errExiting
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("stat: bad starttime %q", f[19])
	}
	return procStat{state: f[0][0], ppid: ppid, pgid: pgid, sid: sid, start: start}, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}
