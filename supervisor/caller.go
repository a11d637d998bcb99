package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Placing a process outside every app (CheckCaller), for the control
// socket: a caller is served only when the supervisor can show that it is
// no app's, and refused when it is, or when it cannot be shown either way.
//
// Every read is of /proc/<pid>, which names a process only as long as the
// pid is not reused. So each process is held by a pidfd, its /proc
// entries are read, and only then is the pidfd asked whether its process
// still runs: if it does, the pid was its all along and the reads were of
// it. The caller's own pidfd comes with the connection (SO_PEERPIDFD), or is
// opened on its pid by the daemon; each ancestor's is opened on the parent
// pid its child named, and is that parent's only if the child, still
// running, names it again afterwards.

// maxCallerDepth bounds the walk up the process tree.
const maxCallerDepth = 64

// tick is the unit of start times in /proc/PID/stat: USER_HZ, which is
// 100 on every architecture Linux runs octosup on.
const tick = 10 * time.Millisecond

// Caller is a process to place: a control-socket client.
type Caller struct {
	// Pid is its pid, as the kernel gave it with the connection
	// (SO_PEERCRED).
	Pid int
	// Pidfd is a pidfd of the same process: from SO_PEERPIDFD, which
	// names the process that connected even once its pid is reused, or
	// pidfd_open of Pid where the kernel has no SO_PEERPIDFD.
	Pidfd int
	// StartedBy, when not zero, is a moment (CLOCK_BOOTTIME) by which the
	// process had started: one at Pid that started later is not the one
	// that connected, its pid was reused. The caller passes the moment it
	// accepted the connection.
	StartedBy time.Duration
}

// CallerError is why CheckCaller refused a process.
type CallerError struct {
	Pid int
	// Inside: the process is an app's or descends from one. Otherwise it
	// could not be placed: it is gone, a zombie, its pid was reused, or
	// something about it could not be read.
	Inside bool
	// App is the app it is in or descends from, when one is known.
	App    string
	Reason string
}

func (e *CallerError) Error() string {
	if e.Inside {
		return fmt.Sprintf("process %d %s", e.Pid, e.Reason)
	}
	return fmt.Sprintf("process %d cannot be placed outside every app: %s", e.Pid, e.Reason)
}

// CheckCaller returns nil only when the process p is positively outside
// every app: neither it nor any of its ancestors is in the apps' cgroup
// subtree (any leaf, a known app's or not, or a cgroup below one), is an
// app's main process, or is in an app's process group; and everything
// that says so was read while the process ran. Otherwise it returns a
// *CallerError. The walk up the tree ends at the daemon itself or at a
// child of pid 1. Without the cgroup stopper the walk is the whole check.
func (s *Supervisor) CheckCaller(p Caller) error {
	pl := placer{src: procfs{}, self: s.self, selfSid: s.sid, lookup: s.lookup, appNamed: s.appNamed}
	if s.cgroups != nil {
		pl.own, pl.subtree = s.cgroups.own, s.cgroups.name
	}
	var bound uint64
	if p.StartedBy > 0 {
		bound = uint64(p.StartedBy / tick)
	}
	return pl.place(p.Pid, p.Pidfd, bound)
}

// record is what the supervisor's own books say of one process.
type record struct {
	app string // the app whose main process it is, or whose group or session it is in
	// by says how: "" (its main process), "process group" or "session".
	by       string
	starting bool // an app process is being started and not yet in the books
}

// lookup reads the books on pid, of process group pgid and session sid,
// under one lock. An app's main pid is its group's and its session's id.
func (s *Supervisor) lookup(pid, pgid, sid int) record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.pids[pid]; ok {
		return record{app: r.id}
	}
	if r, ok := s.pids[pgid]; ok {
		return record{app: r.id, by: "process group"}
	}
	if r, ok := s.pids[sid]; ok {
		return record{app: r.id, by: "session"}
	}
	return record{starting: s.spawning > 0}
}

func (s *Supervisor) appNamed(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.apps[id]
	return ok
}

// procSource is what placing reads of processes: procfs, or a test's fake.
type procSource interface {
	stat(pid int) (procStat, error)
	// cgroup is the process's cgroup v2 path, relative to the
	// hierarchy's root.
	cgroup(pid int) (string, error)
	// alive is nil while the process behind pidfd has not exited.
	alive(pidfd int) error
	open(pid int) (pidfd int, err error)
	close(pidfd int)
}

type procfs struct{}

func (procfs) stat(pid int) (procStat, error) { return readStat(pid) }

func (procfs) cgroup(pid int) (string, error) {
	return cgroupPath("/proc/" + strconv.Itoa(pid) + "/cgroup")
}

func (procfs) alive(pidfd int) error {
	err := unix.PidfdSendSignal(pidfd, 0, nil, 0)
	if errors.Is(err, unix.EPERM) {
		// Another user's process (an ancestor): the kernel looks the
		// process up before it checks the right to signal it, so it is
		// there.
		return nil
	}
	return err
}

func (procfs) open(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }
func (procfs) close(pidfd int)           { unix.Close(pidfd) }

// placer holds what placing a process needs.
type placer struct {
	src     procSource
	self    int // the daemon's pid
	selfSid int // the daemon's session
	// own is the daemon's cgroup and subtree the name of its apps'
	// subtree in it ("" for both without the cgroup stopper).
	own, subtree string
	lookup       func(pid, pgid, sid int) record
	appNamed     func(id string) bool
}

// node is one process of the walk.
type node struct {
	pid, fd int
	st      procStat
	owned   bool // fd was opened by the walk, which closes it
}

// place decides on the process pid, held by pidfd; bound, when not zero,
// is the clock tick by which it had started. It walks from the process up
// its ancestors, each held by a pidfd, until one is the daemon or init
// (outside every app), or one is an app's (inside); a step it cannot
// take fails closed.
func (pl placer) place(pid, pidfd int, bound uint64) error {
	w := &walk{pl: pl, pid: pid, cur: node{pid: pid, fd: pidfd}}
	if pid <= 0 {
		return w.unplaced("the kernel gave no pid for it (it is in a pid namespace the daemon does not see)")
	}
	defer w.close()
	for depth := 0; ; depth++ {
		if depth > maxCallerDepth {
			return w.unplaced("it has more than %d ancestors", maxCallerDepth)
		}
		cg, err := w.read(depth, bound)
		if err != nil {
			return err
		}
		if done, err := w.judge(depth, cg); done {
			return err
		}
		if err := w.up(); err != nil {
			return err
		}
	}
}

// walk is one place: the process being checked (cur) and, above the
// first step, the child it was reached from.
type walk struct {
	pl    placer
	pid   int // the peer's
	cur   node
	child *node
}

func (w *walk) unplaced(format string, a ...any) error {
	return &CallerError{Pid: w.pid, Reason: fmt.Sprintf(format, a...)}
}

func (w *walk) close() {
	for _, n := range []*node{&w.cur, w.child} {
		if n != nil && n.owned {
			w.pl.src.close(n.fd)
		}
	}
}

// read reads cur's stat and cgroup, then checks they were of the very
// process its pidfd holds, and that cur is the parent its child named.
func (w *walk) read(depth int, bound uint64) (cg string, err error) {
	who := "it"
	if depth > 0 {
		who = fmt.Sprintf("its ancestor %d", w.cur.pid)
	}
	gone := func(err error) error {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) || errors.Is(err, errExiting) {
			return w.unplaced("%s exited before the daemon could check it (a connection is checked when it is accepted, and must come from a running process)", who)
		}
		return w.unplaced("cannot read %s: %v", who, err)
	}
	st, err := w.pl.src.stat(w.cur.pid)
	if err != nil {
		return "", gone(err)
	}
	if w.pl.own != "" {
		if cg, err = w.pl.src.cgroup(w.cur.pid); err != nil {
			return "", gone(err)
		}
	}
	// After the reads: they were of this very process only if it still
	// runs.
	if err := w.pl.src.alive(w.cur.fd); err != nil {
		return "", gone(err)
	}
	if st.state == 'Z' || st.state == 'X' {
		return "", w.unplaced("%s has exited (a zombie)", who)
	}
	w.cur.st = st
	if depth == 0 && bound > 0 && st.start > bound {
		return "", w.unplaced("the process at pid %d started after the connection was accepted: the pid was reused", w.pid)
	}
	return cg, w.checkChild()
}

// checkChild: cur was opened on the parent pid the child named; it is
// that parent only if the child, still running, names it again.
func (w *walk) checkChild() error {
	child := w.child
	if child == nil {
		return nil
	}
	cst, err := w.pl.src.stat(child.pid)
	if err == nil {
		err = w.pl.src.alive(child.fd)
	}
	if err != nil || cst.state == 'Z' || cst.state == 'X' {
		return w.unplaced("process %d exited while its ancestors were being checked", child.pid)
	}
	if cst.ppid != w.cur.pid {
		return w.unplaced("the parent of process %d changed while it was being checked", child.pid)
	}
	if w.cur.st.start > child.st.start {
		return w.unplaced("process %d started after its child %d: the pid was reused", w.cur.pid, child.pid)
	}
	if child.owned {
		w.pl.src.close(child.fd)
	}
	w.child = nil
	return nil
}

// judge decides on cur, in cgroup cg: done with an *CallerError when it is
// an app's (or the walk cannot go on), done with nil when it is the
// daemon or has no parent to go to.
func (w *walk) judge(depth int, cg string) (done bool, err error) {
	cur := w.cur
	via := ""
	if depth > 0 {
		via = fmt.Sprintf("descends from process %d, which ", cur.pid)
	}
	inside := func(app, format string, a ...any) error {
		return &CallerError{Pid: w.pid, Inside: true, App: app, Reason: via + fmt.Sprintf(format, a...)}
	}
	if in, ours, leaf := w.pl.inApps(cg); in {
		switch id, _, _ := strings.Cut(leaf, "."); {
		case !ours:
			return true, inside("", "is in another octosup daemon's apps' cgroup %s", cg)
		case id != "" && w.pl.appNamed(id):
			return true, inside(id, "belongs to app %q (its cgroup %s is in the apps' subtree)", id, cg)
		default:
			return true, inside("", "is in the apps' cgroup subtree (%s), though in no known app's leaf", cg)
		}
	}
	rec := w.pl.lookup(cur.pid, cur.st.pgid, cur.st.sid)
	switch {
	case rec.app != "" && rec.by != "":
		return true, inside(rec.app, "is in the %s of app %q", rec.by, rec.app)
	case rec.app != "":
		return true, inside(rec.app, "is the main process of app %q", rec.app)
	case rec.starting && cur.st.ppid == w.pl.self:
		who := "it"
		if depth > 0 {
			who = fmt.Sprintf("its ancestor %d", cur.pid)
		}
		return true, w.unplaced("%s is a child of the daemon while an app is being started, which may be that app's process: try again", who)
	case cur.pid != w.pl.self && cur.st.ppid == w.pl.self && cur.st.sid != w.pl.selfSid:
		// The daemon forks apps only, each the leader of a session of
		// its own, and is their subreaper: a child of it that is no
		// app's main process, outside the daemon's session, is an app's
		// process whose parent died, whatever it did to its session.
		return true, inside("", "is an orphan of an app: its parent exited and it was re-parented to the daemon, the apps' subreaper")
	}
	// The walk ends at the daemon, or at init (pid 1, or 0 for the
	// kernel's own): no app's process reaches init while the daemon, its
	// subreaper, lives.
	return cur.pid == w.pl.self || cur.st.ppid <= 1, nil
}

// up moves the walk to cur's parent, held by a pidfd of its own.
func (w *walk) up() error {
	ppid := w.cur.st.ppid
	fd, err := w.pl.src.open(ppid)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return w.unplaced("its ancestor %d exited while it was being checked", ppid)
		}
		return w.unplaced("cannot open a pidfd of its ancestor %d: %v", ppid, err)
	}
	prev := w.cur
	w.child = &prev
	w.cur = node{pid: ppid, fd: fd, owned: true}
	return nil
}

// inApps says whether the cgroup cg is an apps' subtree of the daemon's
// cgroup or below one: octosup.* in own, which is this daemon's when ours
// (then leaf is the leaf's name), or another daemon's that shares the
// cgroup.
func (pl placer) inApps(cg string) (in, ours bool, leaf string) {
	if pl.own == "" {
		return false, false, ""
	}
	cg = strings.TrimSuffix(cg, " (deleted)")
	rest, ok := strings.CutPrefix(cg, strings.TrimSuffix(pl.own, "/")+"/")
	if !ok {
		return false, false, ""
	}
	top, below, _ := strings.Cut(rest, "/")
	if !strings.HasPrefix(top, subtreePrefix) {
		return false, false, ""
	}
	if below == daemonLeaf {
		// A daemon's own leaf (enableControllers): what runs there is
		// the daemon's, no app's; the walk goes on to its ancestors.
		return false, false, ""
	}
	leaf, _, _ = strings.Cut(below, "/")
	return true, top == pl.subtree, leaf
}
