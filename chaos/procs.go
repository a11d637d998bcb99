package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// procs holds a pidfd on every app process the run saw. A pidfd pins its
// process: the pid is not reused while it is open, and it becomes
// readable when the process exits, so "did it outlive the daemon" is
// answered without racing pid reuse.
type procs struct {
	mu   sync.Mutex
	seen map[int]*proc // by pid
}

type proc struct {
	pid, fd int
	app     string
	daemon  int // the daemon's pid when it was seen
}

func newProcs() *procs { return &procs{seen: map[int]*proc{}} }

// Track takes a pidfd on pid when it is a child of daemonPid (a state
// event may name a process that has already gone, and its pid reused).
// It reports whether pid is now tracked.
func (p *procs) Track(pid int, app string, daemonPid int) bool {
	if pid <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.seen[pid]; ok && old.daemon == daemonPid {
		return true
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false // gone already
	}
	// With the pidfd held, the pid names this process: check its parent.
	if ppid, err := parentOf(pid); err != nil || ppid != daemonPid {
		unix.Close(fd)
		return false
	}
	if old, ok := p.seen[pid]; ok {
		unix.Close(old.fd)
	}
	p.seen[pid] = &proc{pid: pid, fd: fd, app: app, daemon: daemonPid}
	return true
}

// TrackChildren tracks every process whose parent is daemonPid.
func (p *procs) TrackChildren(daemonPid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentOf(pid); err == nil && ppid == daemonPid {
			if p.Track(pid, "", daemonPid) {
				n++
			}
		}
	}
	return n
}

// Kill sends sig to pid through its pidfd, when tracked.
func (p *procs) Kill(pid int, sig unix.Signal) error {
	p.mu.Lock()
	pr, ok := p.seen[pid]
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("pid %d is not tracked", pid)
	}
	return unix.PidfdSendSignal(pr.fd, sig, nil, 0)
}

// Survivors waits up to timeout for every tracked process of daemonPid to
// exit and describes the ones still alive. The kernel's teardown of a
// process killed by its parent-death signal takes time: that is why the
// wait.
func (p *procs) Survivors(daemonPid int, timeout time.Duration) (checked int, alive []string) {
	p.mu.Lock()
	var list []*proc
	for _, pr := range p.seen {
		if pr.daemon == daemonPid {
			list = append(list, pr)
		}
	}
	p.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for _, pr := range list {
		for !exited(pr.fd, time.Until(deadline)) {
			if time.Now().After(deadline) {
				alive = append(alive, describe(pr))
				break
			}
		}
	}
	return len(list), alive
}

// Release closes the pidfds of daemonPid's processes.
func (p *procs) Release(daemonPid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, pr := range p.seen {
		if pr.daemon == daemonPid {
			unix.Close(pr.fd)
			delete(p.seen, pid)
		}
	}
}

// exited polls a pidfd for up to wait.
func exited(fd int, wait time.Duration) bool {
	ms := int(wait / time.Millisecond)
	if ms < 0 {
		ms = 0
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

func describe(pr *proc) string {
	app := pr.app
	if app == "" {
		app = "?"
	}
	name, state := "?", "?"
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pr.pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "State:"); ok {
				state = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Sprintf("pid %d (app %s, %s, state %s) is alive after octosupd %d died", pr.pid, app, name, state, pr.daemon)
}

// parentOf reads a process's parent pid from /proc/PID/stat.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold anything: the
	// fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}
