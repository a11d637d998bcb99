package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Measurement is one named section of the table. Measurements are
// independent: each starts the daemons and processes it needs, so any
// subset runs (--only). To add one, write a constructor like
// spawnMeasurement and list it in measurements().
type Measurement struct {
	Name  string // what --only names: "spawn"
	Title string // one line for the table
	About string // what is measured and against what (--list)
	// Flags registers the measurement's own flags (counts, sizes) on the
	// program's flag set; Run reads the values they set.
	Flags func(fs *flag.FlagSet)
	// Run measures and returns the rows. An error ends the section; the
	// rows returned with it are still printed.
	Run func(ctx context.Context, env *Env) ([]Row, error)
}

// Env is what every measurement shares: the binaries, a scratch
// directory, and the rows of the sections already run.
type Env struct {
	Octosupd string // the daemon
	Hubping  string // the tiny app (bench/hubping), built static
	Bwrap    string // bubblewrap; "" when absent or not wanted
	// JSONEcho and ToolApp are bench/jsonecho and bench/toolapp, of the
	// tools and requests sections; "" means next to Hubping.
	JSONEcho, ToolApp string
	// Dir is the run's scratch directory, removed at the end.
	Dir string
	// Timeout bounds one operation (a start, an event, READY=1).
	Timeout  time.Duration
	Progress io.Writer

	mu      sync.Mutex
	earlier map[string]Row
}

// Earlier is a row of a section that already ran (by Key), so that a
// later one may compare with it.
func (e *Env) Earlier(key string) (Row, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.earlier[key]
	return r, ok
}

func (e *Env) remember(rows []Row) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.earlier == nil {
		e.earlier = make(map[string]Row)
	}
	for _, r := range rows {
		e.earlier[r.Key] = r
	}
}

// Progressf tells the person waiting what is going on (stderr).
func (e *Env) Progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, "bench: "+format+"\n", args...)
	}
}

// Scratch makes a fresh directory under Dir.
func (e *Env) Scratch(name string) (string, error) {
	dir := filepath.Join(e.Dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("scratch directory: %w", err)
	}
	return dir, nil
}

// ScratchLog makes the scratch directory name and, in it, the file logName
// for the output of the processes a section starts itself.
func (e *Env) ScratchLog(name, logName string) (dir string, logw *os.File, err error) {
	if dir, err = e.Scratch(name); err != nil {
		return "", nil, err
	}
	if logw, err = os.Create(filepath.Join(dir, logName)); err != nil {
		return "", nil, err
	}
	return dir, logw, nil
}

// fifo is a named pipe the bench reads and an app writes. The bench holds
// it open read-write, so an app's open for writing never blocks and the
// bench never sees end-of-file between apps.
type fifo struct {
	Path string
	fd   int
}

// newFIFO makes dir/name as a FIFO and opens it.
func newFIFO(dir, name string) (*fifo, error) {
	p := filepath.Join(dir, name)
	if err := unix.Mkfifo(p, 0o600); err != nil {
		return nil, fmt.Errorf("mkfifo %s: %w", p, err)
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the FIFO %s: %w", p, err)
	}
	return &fifo{Path: p, fd: fd}, nil
}

func (f *fifo) Close() error { return unix.Close(f.fd) }

// await returns when the next byte arrived (see awaitByte).
func (f *fifo) await(timeout time.Duration) (time.Time, error) {
	return awaitByte(f.fd, timeout)
}

// errNoByte is awaitByte's timeout.
var errNoByte = errors.New("no byte came")

// awaitByte blocks in poll(2) until fd is readable, notes the time, then
// reads what is there (one app's byte). poll on this goroutine's thread,
// not the Go netpoller, so the wake-up costs the same for every variant
// and is as short as the kernel makes it.
func awaitByte(fd int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return time.Time{}, fmt.Errorf("%w in %v", errNoByte, timeout)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(left/time.Millisecond)+1)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("poll: %w", err)
		}
		at := time.Now()
		var buf [64]byte
		m, err := unix.Read(fd, buf[:])
		switch {
		case err != nil:
			return time.Time{}, fmt.Errorf("read: %w", err)
		case m == 0:
			return time.Time{}, errors.New("closed before any byte came")
		}
		return at, nil
	}
}

// child is a hubping the bench started itself, with a socketpair as its
// fd 3 (the plain and bwrap variants, the waitpid floor).
type child struct {
	cmd *exec.Cmd
	hub int // the bench's end
}

// startChild runs argv with a fresh socketpair as fd 3 and stdout and
// stderr to logw. It returns as soon as the process is started.
func startChild(argv []string, logw *os.File) (*child, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hub socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "hub")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = logw, logw
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return &child{cmd: cmd, hub: fds[0]}, nil
}

// kill ends the child and reaps it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	unix.Close(c.hub)
}
