package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wantInside fails unless err is a *CallerError placing the process in app
// (any app when app is ""), with a reason containing why.
func wantInside(t *testing.T, err error, app, why string) {
	t.Helper()
	var pe *CallerError
	if !errors.As(err, &pe) || !pe.Inside || (app != "" && pe.App != app) || !strings.Contains(pe.Reason, why) {
		t.Errorf("CheckCaller = %v; want inside app %q, saying %q", err, app, why)
	}
}

// wantUnplaced fails unless err is a *CallerError that could not place the
// process, with a reason containing why.
func wantUnplaced(t *testing.T, err error, why string) {
	t.Helper()
	var pe *CallerError
	if !errors.As(err, &pe) || pe.Inside || !strings.Contains(pe.Reason, why) {
		t.Errorf("CheckCaller = %v; want unplaced, saying %q", err, why)
	}
}

// checkPid is CheckCaller of the running process pid.
func checkPid(t *testing.T, sup *Supervisor, pid int) error {
	t.Helper()
	return sup.CheckCaller(Caller{Pid: pid, Pidfd: pidfd(t, pid)})
}

// fakeProcs is a process table for placer: byPid is what /proc shows,
// fds the pidfds open, each on the process it was opened on.
type fakeProcs struct {
	byPid  map[int]*fakeProc
	fds    map[int]*fakeProc
	nextFD int
	// afterStat and afterOpen run after each stat read and each open, to
	// change the table under the walk.
	afterStat func(pid int)
	afterOpen func(pid int)
}

type fakeProc struct {
	st      procStat
	cg      string
	dead    bool  // exited and reaped
	statErr error // what reading its stat fails with
	cgErr   error
}

func (f *fakeProcs) stat(pid int) (procStat, error) {
	p := f.byPid[pid]
	if p == nil {
		return procStat{}, fs.ErrNotExist
	}
	if p.statErr != nil {
		return procStat{}, p.statErr
	}
	st := p.st
	if f.afterStat != nil {
		f.afterStat(pid)
	}
	return st, nil
}

func (f *fakeProcs) cgroup(pid int) (string, error) {
	p := f.byPid[pid]
	if p == nil {
		return "", fs.ErrNotExist
	}
	return p.cg, p.cgErr
}

func (f *fakeProcs) alive(fd int) error {
	p, ok := f.fds[fd]
	if !ok {
		return unix.EBADF
	}
	if p.dead {
		return unix.ESRCH
	}
	return nil
}

func (f *fakeProcs) open(pid int) (int, error) {
	p := f.byPid[pid]
	if p == nil || p.dead {
		return -1, unix.ESRCH
	}
	f.nextFD++
	f.fds[f.nextFD] = p
	if f.afterOpen != nil {
		f.afterOpen(pid)
	}
	return f.nextFD, nil
}

func (f *fakeProcs) close(fd int) { delete(f.fds, fd) }

// The fake system: the daemon is pid 10 in /svc, its apps' subtree is
// /svc/octosup.10.5, app notes's main process is pid 20 in leaf
// notes.abc (and leads process group 20), a user's shell is pid 50.
const (
	fakeOwn     = "/svc"
	fakeSubtree = "octosup.10.5"
	notesLeaf   = "/svc/octosup.10.5/notes.abc"
)

func fproc(ppid, pgid int, start uint64, cg string) *fakeProc {
	return &fakeProc{st: procStat{state: 'S', ppid: ppid, pgid: pgid, start: start}, cg: cg}
}

// fprocIn is fproc in session sid (fproc's are all in the daemon's, 0).
func fprocIn(ppid, pgid, sid int, start uint64, cg string) *fakeProc {
	p := fproc(ppid, pgid, start, cg)
	p.st.sid = sid
	return p
}

func baseTable() map[int]*fakeProc {
	return map[int]*fakeProc{
		1:  fproc(0, 1, 0, "/init.scope"),
		10: fproc(1, 10, 100, fakeOwn),
		20: fproc(10, 20, 200, notesLeaf),
		50: fproc(1, 50, 150, "/user/session"),
	}
}

func TestPlace(t *testing.T) {
	for _, c := range []struct {
		name     string
		peer     int
		procs    map[int]*fakeProc // added to the base table
		noCgroup bool              // the process-group stopper
		starting bool              // an app process is being started
		bound    uint64
		setup    func(f *fakeProcs, peerFD int)
		inside   string // the app; "-" for inside no known app
		unplaced string // what the refusal says
	}{
		{name: "the user's client", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user/session")}},
		{name: "the daemon itself", peer: 10},
		{name: "pid 1", peer: 1},
		{name: "the daemon's child, no app starting", peer: 60, procs: map[int]*fakeProc{60: fproc(10, 10, 300, fakeOwn)}},
		{name: "a look-alike cgroup", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/svc/octosup-notes/x.y")}},
		{name: "a look-alike parent cgroup", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/svcx/octosup.10.5/notes.abc")}},
		{name: "started within the bound's tick", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user")}, bound: 300},

		{name: "an app's main process", peer: 20, inside: "notes"},
		{name: "in a known app's leaf", peer: 30, procs: map[int]*fakeProc{30: fproc(20, 30, 300, notesLeaf)}, inside: "notes"},
		{name: "below a leaf", peer: 30, procs: map[int]*fakeProc{30: fproc(1, 30, 300, notesLeaf+"/own")}, inside: "notes"},
		{name: "in a leaf of no known app", peer: 30, procs: map[int]*fakeProc{30: fproc(50, 30, 300, "/svc/octosup.10.5/ghost.1")}, inside: "-"},
		{name: "in the subtree itself", peer: 30, procs: map[int]*fakeProc{30: fproc(50, 30, 300, "/svc/octosup.10.5")}, inside: "-"},
		{name: "in another daemon's apps", peer: 30, procs: map[int]*fakeProc{30: fproc(50, 30, 300, "/svc/octosup.99.1/x.2")}, inside: "-"},
		{name: "a zombie's removed leaf", peer: 30, procs: map[int]*fakeProc{30: fproc(50, 30, 300, "/svc/octosup.10.5/notes.old (deleted)")}, inside: "notes"},
		{name: "moved out, child of the main process", peer: 40, procs: map[int]*fakeProc{40: fproc(20, 40, 300, "/user/session")}, inside: "notes"},
		{name: "moved out, below an app process in its leaf", peer: 41, procs: map[int]*fakeProc{
			41: fproc(30, 41, 400, "/user/session"), 30: fproc(1, 30, 300, notesLeaf)}, inside: "notes"},
		{name: "moved out, below one in no known leaf", peer: 41, procs: map[int]*fakeProc{
			41: fproc(30, 41, 400, "/user/session"), 30: fproc(1, 30, 300, "/svc/octosup.10.5/stale.1")}, inside: "-"},
		{name: "moved out with its app's main process", peer: 40, procs: map[int]*fakeProc{
			40: fproc(20, 40, 300, "/user"), 20: fproc(10, 20, 200, "/user")}, inside: "notes"},
		{name: "moved out, in the app's process group", peer: 40, procs: map[int]*fakeProc{40: fproc(1, 20, 300, "/user")}, inside: "notes"},
		{name: "no cgroups: in the app's group", peer: 40, noCgroup: true, procs: map[int]*fakeProc{40: fproc(1, 20, 300, "/user")}, inside: "notes"},
		{name: "no cgroups: setsid descendant", peer: 41, noCgroup: true, procs: map[int]*fakeProc{
			41: fproc(40, 41, 400, ""), 40: fproc(20, 40, 300, "")}, inside: "notes"},
		{name: "no cgroups: the user's client", peer: 100, noCgroup: true, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "")}},
		// The adversarial review's escape: an app's grandchild in a
		// session of its own, whose parent exited. With the daemon as the
		// apps' subreaper it is the daemon's child, not init's.
		{name: "no cgroups: an orphan that left its app's session", peer: 70, noCgroup: true, procs: map[int]*fakeProc{
			70: fprocIn(10, 70, 70, 300, "")}, inside: "-"},
		{name: "an orphan that left its app's session", peer: 70, procs: map[int]*fakeProc{
			70: fprocIn(10, 70, 70, 300, "/user")}, inside: "-"},
		{name: "no cgroups: below such an orphan", peer: 71, noCgroup: true, procs: map[int]*fakeProc{
			71: fprocIn(70, 71, 70, 400, ""), 70: fprocIn(10, 70, 70, 300, "")}, inside: "-"},
		{name: "no cgroups: in the app's session, another group", peer: 72, noCgroup: true, procs: map[int]*fakeProc{
			72: fprocIn(10, 72, 20, 300, "")}, inside: "notes"},

		{name: "no pid", peer: 0, unplaced: "no pid"},
		{name: "gone", peer: 100, procs: map[int]*fakeProc{100: {st: procStat{state: 'S', ppid: 50}, dead: true}}, unplaced: "exited before"},
		{name: "no /proc entry", peer: 100, setup: func(f *fakeProcs, _ int) { delete(f.byPid, 100) },
			procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user")}, unplaced: "exited before"},
		{name: "a zombie", peer: 100, procs: map[int]*fakeProc{100: {st: procStat{state: 'Z', ppid: 50, pgid: 100}, cg: "/user"}}, unplaced: "zombie"},
		{name: "an app's zombie", peer: 30, procs: map[int]*fakeProc{30: {st: procStat{state: 'Z', ppid: 20, pgid: 30}, cg: notesLeaf}}, unplaced: "zombie"},
		{name: "reaped, its pid now another's", peer: 30, procs: map[int]*fakeProc{30: fproc(20, 30, 300, notesLeaf)},
			setup: func(f *fakeProcs, fd int) {
				// The pidfd holds the app's process, which is gone; /proc/30
				// is a user's process now.
				f.fds[fd].dead = true
				f.byPid[30] = fproc(50, 30, 900, "/user")
			}, unplaced: "exited before"},
		{name: "dies between the reads and the check", peer: 30, procs: map[int]*fakeProc{30: fproc(50, 30, 300, "/user")},
			setup: func(f *fakeProcs, fd int) {
				f.afterStat = func(pid int) {
					if pid == 30 {
						f.fds[fd].dead = true
					}
				}
			}, unplaced: "exited before"},
		{name: "pid reused before pidfd_open", peer: 100, bound: 299, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user")}, unplaced: "the pid was reused"},
		{name: "cgroup unreadable", peer: 100, procs: map[int]*fakeProc{100: {st: procStat{state: 'S', ppid: 50}, cgErr: fs.ErrPermission}}, unplaced: "cannot read it"},
		{name: "stat unreadable", peer: 100, procs: map[int]*fakeProc{100: {statErr: fs.ErrPermission}}, unplaced: "cannot read it"},
		{name: "an ancestor unreadable", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user"), 50: {statErr: fs.ErrPermission}}, unplaced: "cannot read its ancestor 50"},
		{name: "exiting, its pgrp read -1", peer: 100, procs: map[int]*fakeProc{100: {st: procStat{state: 'S', ppid: 50}, statErr: errExiting}}, unplaced: "exited before"},
		{name: "an ancestor a zombie", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user"), 50: {st: procStat{state: 'Z', ppid: 1}}}, unplaced: "its ancestor 50 has exited"},
		{name: "the parent gone before its pidfd", peer: 100, procs: map[int]*fakeProc{100: fproc(55, 100, 300, "/user")}, unplaced: "its ancestor 55 exited"},
		{name: "the parent changed under the walk", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 300, "/user")},
			setup: func(f *fakeProcs, _ int) {
				f.afterOpen = func(pid int) {
					if pid == 50 {
						// The shell exits, 100 is reparented to init, and
						// pid 50 is another process.
						f.byPid[100].st.ppid = 1
						f.byPid[50] = fproc(1, 50, 350, "/user")
					}
				}
			}, unplaced: "the parent of process 100 changed"},
		{name: "a parent younger than its child", peer: 100, procs: map[int]*fakeProc{100: fproc(50, 100, 100, "/user")}, unplaced: "started after its child 100"},
		{name: "the daemon's child while an app starts", peer: 60, starting: true, procs: map[int]*fakeProc{60: fproc(10, 60, 300, fakeOwn)}, unplaced: "try again"},
		{name: "below the daemon's child while an app starts", peer: 61, starting: true, noCgroup: true, procs: map[int]*fakeProc{
			61: fproc(60, 61, 400, ""), 60: fproc(10, 60, 300, "")}, unplaced: "its ancestor 60 is a child of the daemon"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeProcs{byPid: baseTable(), fds: map[int]*fakeProc{}}
			for pid, p := range c.procs {
				f.byPid[pid] = p
			}
			pl := placer{src: f, self: 10, own: fakeOwn, subtree: fakeSubtree,
				lookup: func(pid, pgid, sid int) record {
					switch {
					case pid == 20:
						return record{app: "notes"}
					case pgid == 20:
						return record{app: "notes", by: "process group"}
					case sid == 20:
						return record{app: "notes", by: "session"}
					}
					return record{starting: c.starting}
				},
				appNamed: func(id string) bool { return id == "notes" },
			}
			if c.noCgroup {
				pl.own, pl.subtree = "", ""
			}
			fd := -1
			if p := f.byPid[c.peer]; p != nil {
				f.nextFD++
				fd = f.nextFD
				f.fds[fd] = p
			}
			if c.setup != nil {
				c.setup(f, fd)
			}
			err := pl.place(c.peer, fd, c.bound)
			switch {
			case c.inside == "-":
				wantInside(t, err, "", "")
				if pe := (*CallerError)(nil); errors.As(err, &pe) && pe.App != "" {
					t.Errorf("placed in app %q, want in no known app", pe.App)
				}
			case c.inside != "":
				wantInside(t, err, c.inside, "")
			case c.unplaced != "":
				wantUnplaced(t, err, c.unplaced)
			case err != nil:
				t.Errorf("CheckCaller = %v, want outside every app", err)
			}
			delete(f.fds, fd)
			if len(f.fds) != 0 {
				t.Errorf("the walk left %d pidfds open", len(f.fds))
			}
		})
	}
}

func TestPlaceDepth(t *testing.T) {
	f := &fakeProcs{byPid: baseTable(), fds: map[int]*fakeProc{}}
	for pid := 1000; pid < 1000+maxCallerDepth+1; pid++ {
		f.byPid[pid] = fproc(pid+1, pid, 300, "/user")
	}
	f.byPid[1000+maxCallerDepth+1] = fproc(1, 0, 300, "/user")
	f.fds[1] = f.byPid[1000]
	f.nextFD = 1
	pl := placer{src: f, self: 10, own: fakeOwn, subtree: fakeSubtree,
		lookup: func(int, int, int) record { return record{} }, appNamed: func(string) bool { return false }}
	wantUnplaced(t, pl.place(1000, 1, 0), "more than 64 ancestors")
	delete(f.fds, 1)
	if len(f.fds) != 0 {
		t.Errorf("the walk left %d pidfds open", len(f.fds))
	}
}

// TestCheckCallerRealProcesses: CheckCaller on real processes, each held by a
// pidfd as the control socket holds its peers.
func TestCheckCallerRealProcesses(t *testing.T) {
	exe := testExe(t)
	sup := startSup(t, nil)

	// started runs the test binary in mode, outside every app, with
	// attr; it is killed and reaped when the test ends.
	started := func(t *testing.T, mode string, attr *syscall.SysProcAttr) (*exec.Cmd, int) {
		t.Helper()
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), modeEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
		cmd.SysProcAttr = attr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, pidfd(t, cmd.Process.Pid)
	}

	t.Run("the test process", func(t *testing.T) {
		if err := checkPid(t, sup, os.Getpid()); err != nil {
			t.Fatalf("CheckCaller(the test) = %v, want nil", err)
		}
	})
	t.Run("a child outside every app", func(t *testing.T) {
		cmd, fd := started(t, "sleep", nil)
		if err := sup.CheckCaller(Caller{Pid: cmd.Process.Pid, Pidfd: fd}); err != nil {
			t.Fatalf("CheckCaller = %v, want nil", err)
		}
	})
	t.Run("a zombie, then reaped", func(t *testing.T) {
		cmd, fd := started(t, "exit3", nil)
		// Exited, not reaped: WNOWAIT leaves it a zombie.
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
			t.Fatal(err)
		}
		wantUnplaced(t, sup.CheckCaller(Caller{Pid: cmd.Process.Pid, Pidfd: fd}), "zombie")
		cmd.Wait()
		wantUnplaced(t, sup.CheckCaller(Caller{Pid: cmd.Process.Pid, Pidfd: fd}), "exited before")
	})
	t.Run("started after the bound", func(t *testing.T) {
		cmd, fd := started(t, "sleep", nil)
		st, err := readStat(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		// A connection accepted a tick before the process started cannot
		// be that process's.
		before := (time.Duration(st.start) - 1) * tick
		wantUnplaced(t, sup.CheckCaller(Caller{Pid: cmd.Process.Pid, Pidfd: fd, StartedBy: before}), "reused")
		if err := sup.CheckCaller(Caller{Pid: cmd.Process.Pid, Pidfd: fd, StartedBy: time.Duration(st.start) * tick}); err != nil {
			t.Fatalf("accepted in the tick it started: %v, want nil", err)
		}
	})
	t.Run("in a leaf of no app", func(t *testing.T) {
		cgroupOrSkip(t)
		leaf := filepath.Join(sup.cgroups.dir, "ghost.1")
		if err := os.Mkdir(leaf, 0o755); err != nil {
			t.Fatal(err)
		}
		dir, err := os.Open(leaf)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		cmd, fd := started(t, "sleep", &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())})
		t.Cleanup(func() { _ = removeLeaf(leaf) })
		wantInside(t, sup.CheckCaller(Caller{Pid: cmd.Process.Pid, Pidfd: fd}), "", "in no known app's leaf")
	})
	t.Run("moved out of its app's leaf", func(t *testing.T) {
		cgroupOrSkip(t)
		// The daemon's cgroup: where it started, or the leaf of its own it
		// moved into to enable the limits' controllers.
		own, err := ownCgroup("/proc/self/mountinfo", "/proc/self/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		sub := sup.Subscribe(1024)
		defer sub.Close()
		apply(t, sup, testApp(exe, "tree", "setsid-grandchild", true))
		gpid := waitPid(t, sub, "tree", "grandchild")
		gfd := pidfd(t, gpid)
		// Out of the leaf, into the daemon's own cgroup, as one who may
		// write cgroup.procs could move it; in a session of its own, it
		// is in no app's process group either.
		if err := os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(strconv.Itoa(gpid)), 0); err != nil {
			t.Fatal(err)
		}
		if dir, err := ownCgroup("/proc/self/mountinfo", fmt.Sprintf("/proc/%d/cgroup", gpid)); err != nil || dir != own {
			t.Fatalf("the grandchild's cgroup is %q (%v) after the move, want %s", dir, err, own)
		}
		app := status(t, sup, "tree")
		wantInside(t, sup.CheckCaller(Caller{Pid: gpid, Pidfd: gfd}), "tree", fmt.Sprintf("descends from process %d, which belongs to app", app.Pid))
		// Its app stops; only the group kill could reach it, and its
		// group is its own: it is killed here.
		if err := unix.PidfdSendSignal(gfd, unix.SIGKILL, nil, 0); err != nil {
			t.Fatal(err)
		}
		awaitGone(t, gfd, "moved grandchild")
	})
}
