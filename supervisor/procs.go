package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// An app's processes, found without a cgroup (docs/jail.md, "The app's
// processes"). Every app is started as the leader of a session of its
// own, and a jail app's processes may not leave it (the filter refuses
// setsid): the session id is the app's main pid, which the kernel does
// not give to another process while the session has a member. The
// daemon is a child subreaper (Run), so a process whose parent dies is
// re-parented to the daemon, never to init: it stays findable and is
// reaped here. So the processes of an app are those of its session, the
// descendants of those (a broad app's child that called setsid), and,
// for a broad app, the strays: children of the daemon that are no app's
// main process, in no running app's session and not in the daemon's own
// (where a test's own children are). Only a broad app can make one.

// killDrain bounds how long the kill step waits for an app's processes
// to die, and for new ones they forked meanwhile, before it gives up
// and logs those left.
const killDrain = 2 * time.Second

// procInfo is one process as /proc/PID/stat showed it.
type procInfo struct {
	pid int
	procStat
}

// scanProcs reads every process's stat; one that ends meanwhile is left
// out.
func scanProcs() ([]procInfo, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]procInfo, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue
		}
		out = append(out, procInfo{pid: pid, procStat: st})
	}
	return out, nil
}

// family picks out of all the processes of the session sid and their
// descendants, and with strays the daemon's stray children and theirs
// (see above). mains are the live apps' main pids, which are their
// sessions. The daemon itself is never among them.
func (s *Supervisor) family(all []procInfo, sid int, strays bool, mains map[int]bool) []procInfo {
	children := make(map[int][]procInfo, len(all))
	var roots []procInfo
	for _, p := range all {
		if p.pid == s.self {
			continue
		}
		children[p.ppid] = append(children[p.ppid], p)
		switch {
		case p.sid == sid:
			roots = append(roots, p)
		case strays && p.ppid == s.self && !mains[p.pid] && !mains[p.sid] && p.sid != s.sid:
			roots = append(roots, p)
		}
	}
	seen := make(map[int]bool, len(roots))
	out := make([]procInfo, 0, len(roots))
	for len(roots) > 0 {
		p := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if seen[p.pid] {
			continue
		}
		seen[p.pid] = true
		out = append(out, p)
		roots = append(roots, children[p.pid]...)
	}
	return out
}

// mainPids is the set of the live apps' main pids.
func (s *Supervisor) mainPids() map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]bool, len(s.pids))
	for pid := range s.pids {
		out[pid] = true
	}
	return out
}

// liveThreads says whether a process whose stat says zombie (its
// thread-group leader exited) still has other threads: such a process
// runs on, and only a signal to its thread group ends it. A hostile
// review's probe did that (a child starts a thread, then its leader
// calls exit) and outlived its app.
func liveThreads(pid int) bool {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err == nil && len(tasks) > 1
}

// signalProc sends sig to p through a pidfd, only if the process at p's
// pid is still p (the same start time, read after the pidfd was
// opened). It returns the pidfd (the caller closes it), or -1 when the
// process is gone or not p any more.
func signalProc(p procInfo, sig unix.Signal) int {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return -1
	}
	st, err := readStat(p.pid)
	if err != nil || st.start != p.start || unix.PidfdSendSignal(fd, sig, nil, 0) != nil {
		unix.Close(fd)
		return -1
	}
	return fd
}

// signalFamily sends sig to every process of the session sid and its
// family (strays too, with strays), and returns how many there were,
// zombies aside, with pidfds of those signalled (the caller closes
// them).
func (s *Supervisor) signalFamily(sid int, strays bool, sig unix.Signal) (live int, fds []int, err error) {
	all, err := scanProcs()
	if err != nil {
		return 0, nil, err
	}
	for _, p := range s.family(all, sid, strays, s.mainPids()) {
		if (p.state == 'Z' || p.state == 'X') && !liveThreads(p.pid) {
			continue
		}
		live++
		if fd := signalProc(p, sig); fd >= 0 {
			fds = append(fds, fd)
		}
	}
	return live, fds, nil
}

// killFamily SIGKILLs the family of session sid until none of it is
// left alive, waiting on the pidfds of what it killed between rounds
// (a process forked before its parent died is found by the next), for
// at most killDrain. It returns how many were still alive at the end.
func (s *Supervisor) killFamily(sid int, strays bool) (int, error) {
	deadline := time.Now().Add(killDrain)
	for {
		live, fds, err := s.signalFamily(sid, strays, unix.SIGKILL)
		if err != nil || live == 0 {
			closeFds(fds)
			return live, err
		}
		awaitExits(fds, time.Until(deadline))
		closeFds(fds)
		if !time.Now().Before(deadline) {
			live, fds, err := s.signalFamily(sid, strays, unix.SIGKILL)
			closeFds(fds)
			return live, err
		}
	}
}

// awaitExits waits until every pidfd in fds is readable (its process
// exited), or limit passes.
func awaitExits(fds []int, limit time.Duration) {
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	end := time.Now().Add(limit)
	for len(pfds) > 0 {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		n, err := unix.Poll(pfds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		kept := pfds[:0]
		for _, p := range pfds {
			if p.Revents == 0 {
				kept = append(kept, p)
			}
		}
		pfds = kept
	}
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// signalLeaf sends sig to each process in the cgroup leaf at path (its
// cgroup.procs), checked after its pidfd is open to be still in it:
// cgroup.kill, which the kill step uses, has no gentler signal.
func signalLeaf(path string, sig unix.Signal) error {
	b, err := os.ReadFile(path + "/cgroup.procs")
	if err != nil {
		return err
	}
	rel := leafRel(path)
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if cg, err := cgroupPath("/proc/" + f + "/cgroup"); err == nil && strings.HasSuffix(cg, rel) {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
	return nil
}

// leafRel is the last two components of a leaf's path (the apps'
// subtree and the leaf), which end the cgroup path /proc shows of a
// process in it.
func leafRel(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return path
	}
	j := strings.LastIndexByte(path[:i], '/')
	return path[j:]
}

// reapStrays collects the exit status of every zombie child of the daemon
// that is no app's main process and not in the daemon's own session: an
// app's process that was re-parented to the daemon and has exited. A
// main process is its runner's to reap; while a start is under way none
// is reaped (the process being started is not in the books yet), and
// the spawn's end asks again. It says whether it had to leave some for
// either reason.
//
// Most SIGCHLDs are an app's main process ending, and a scan of /proc
// reads every process's stat: on each crash, a millisecond of CPU beside
// the crash's own path (make bench's crash section: 2.1x the floor with
// the scan, 1.9x without). So it looks first, without reaping, at the
// zombie the kernel would reap next: none, no scan; a main process, no
// scan either, until its runner has reaped it and asks again (reaped),
// since a stray may wait behind it. A look that fails scans, as before.
func (s *Supervisor) reapStrays() (later bool) {
	if pid, err := nextZombie(); err == nil {
		if pid == 0 {
			return false
		}
		s.mu.Lock()
		_, main := s.pids[pid]
		s.mu.Unlock()
		if main {
			return true
		}
	}
	all, err := scanProcs()
	if err != nil {
		return false
	}
	var zombies []int
	for _, p := range all {
		if p.ppid == s.self && p.state == 'Z' && p.sid != s.sid {
			zombies = append(zombies, p.pid)
		}
	}
	if len(zombies) == 0 {
		return false
	}
	s.mu.Lock()
	if s.spawning > 0 {
		s.mu.Unlock()
		return true
	}
	mine := zombies[:0]
	for _, pid := range zombies {
		if _, ok := s.pids[pid]; !ok {
			mine = append(mine, pid)
		}
	}
	s.mu.Unlock()
	for _, pid := range mine {
		// A zombie holds its pid: it is this process, whatever runs
		// meanwhile.
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG, nil)
	}
	return false
}

// nextZombie is the pid of a zombie child of the daemon, left a zombie
// (WNOWAIT); 0 when there is none, or no child at all.
func nextZombie() (int, error) {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("waitid: %w", err)
	}
	pid, _ := sigchld(&info)
	return pid, nil
}
