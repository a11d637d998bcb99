package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/internal/cgroupfs"
)

// A cgroup v2 leaf per app process: where the daemon's own cgroup is one
// it may create children in (root, or a systemd service with
// Delegate=yes), every process is forked into a fresh leaf
// (CLONE_INTO_CGROUP), and what is left of it once its leader is gone, or
// after a stop's grace, is killed through cgroup.kill (Linux 5.14): a
// descendant that called setsid or double-forked cannot slip out of it.
// Elsewhere the process group is the stopper, as before.
//
// The leaves live in a subtree of the daemon's cgroup named after the
// daemon process, octosup.<pid>.<start time>: several daemons (or test
// binaries) sharing a cgroup keep apart, and a subtree whose daemon is
// gone (SIGKILLed) is recognised, killed and removed at the next start.

// StopperCgroup is AppStatus.Stopper for apps whose processes are in a
// cgroup leaf of their own and stopped through cgroup.kill.
const StopperCgroup = "cgroup"

// ErrNoCgroup is wrapped when the daemon cannot put apps in cgroup leaves;
// the supervisor then stops them through their process groups.
var ErrNoCgroup = errors.New("no delegated cgroup v2")

// cgroupDrain bounds the wait for a killed leaf to empty before it is
// removed; a leaf still busy then is left for the next start.
const cgroupDrain = 5 * time.Second

const subtreePrefix = "octosup."

// cgroupTree is this daemon's subtree, where its leaves are made.
type cgroupTree struct {
	mnt, dir string
	// own is the daemon's cgroup and name the subtree's name in it: dir
	// is mnt/own/name (own as /proc/PID/cgroup names it).
	own, name string
	log       *zap.Logger
	// controllers are the limit controllers the leaves have
	// (enableControllers); lacking says why the others are not there.
	controllers map[string]bool
	lacking     string
}

// openCgroupTree finds the daemon's cgroup v2 directory, checks it can
// hold leaves with cgroup.kill, clears the subtrees of daemons that are
// gone, and makes this daemon's subtree.
func openCgroupTree(log *zap.Logger) (*cgroupTree, error) {
	mnt, err := cgroup2Mount("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	ownRel, err := cgroupPath("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	name, err := subtreeName(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	ownRel = outOfDaemonLeaf(ownRel, name)
	own := filepath.Join(mnt, ownRel)
	if err := unix.Access(own, unix.W_OK); err != nil {
		return nil, fmt.Errorf("%w: cannot write %s (run under systemd with Delegate=yes, or as root): %v", ErrNoCgroup, own, err)
	}
	// The leaves' limits need controllers, which the no-internal-process
	// rule gives them only once the daemon is out of own: see
	// enableControllers (limits.go).
	clearLeftovers(own, log)
	dir := filepath.Join(own, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("%w: no cgroup.kill in %s (needs Linux 5.14)", ErrNoCgroup, dir)
	}
	t := &cgroupTree{mnt: mnt, dir: dir, own: ownRel, name: name, log: log}
	t.controllers, t.lacking = t.enableControllers()
	return t, nil
}

// outOfDaemonLeaf is the cgroup a daemon divides, given the cgroup it is
// in, cg, and the name of its subtree: a daemon that moved itself into its
// own leaf (enableControllers), as a second supervisor of the same process
// finds it, still divides the cgroup it came from.
func outOfDaemonLeaf(cg, subtree string) string {
	if filepath.Base(cg) == daemonLeaf && filepath.Base(filepath.Dir(cg)) == subtree {
		return filepath.Dir(filepath.Dir(cg))
	}
	return cg
}

// cgroupPath is the cgroup v2 path (its "0::" line) a /proc/PID/cgroup
// file names, relative to the hierarchy's root: "/" or "/a/b". A cgroup
// removed under a zombie has " (deleted)" after it.
func cgroupPath(cgroup string) (string, error) {
	b, err := os.ReadFile(cgroup)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(rel, "/") {
			return rel, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 line in %s", cgroup)
}

// cgroup2Mount finds where the cgroup2 filesystem is mounted, from a
// mountinfo file.
func cgroup2Mount(mountinfo string) (string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	defer f.Close()
	mnt, err := cgroupfs.ParseMountinfo(f)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoCgroup, mountinfo, err)
	}
	return mnt, nil
}

// subtreeName names the subtree of the daemon pid: its pid and start time
// (in clock ticks since boot), which together never name another process.
func subtreeName(pid int) (string, error) {
	start, err := startTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s%d.%d", subtreePrefix, pid, start), nil
}

// startTime is field 22 of /proc/PID/stat.
func startTime(pid int) (uint64, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, fmt.Errorf("stat of %d: %w", pid, err)
	}
	return st.start, nil
}

// clearLeftovers kills and removes the subtrees in parent of daemons that
// are gone: what their apps left (descendants outside the process group
// that outlived a SIGKILLed daemon) dies now.
func clearLeftovers(parent string, log *zap.Logger) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), subtreePrefix) {
			continue
		}
		pidS, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), subtreePrefix), ".")
		pid, err := strconv.Atoi(pidS)
		if !ok || err != nil {
			continue
		}
		if live, err := subtreeName(pid); err == nil && live == e.Name() {
			continue // its daemon runs
		}
		dir := filepath.Join(parent, e.Name())
		leaves, _ := os.ReadDir(dir)
		for _, l := range leaves {
			if l.IsDir() {
				leaf := filepath.Join(dir, l.Name())
				if populated(leaf) {
					log.Warn("killing what a gone daemon's app left running", zap.String("cgroup", leaf))
				}
				if err := removeLeaf(leaf); err != nil {
					log.Warn("cannot clear a gone daemon's cgroup", zap.String("cgroup", leaf), zap.Error(err))
				}
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot remove a gone daemon's cgroup", zap.String("cgroup", dir), zap.Error(err))
		}
	}
}

// leaf makes a fresh leaf for one process of app and opens it for
// CLONE_INTO_CGROUP. The name is unique, so a leaf still draining never
// meets the next process of the same app. A leaf is never reused, empty
// or not: a process forked into a leaf that was once killed through
// cgroup.kill is killed at once too (Linux 6.18 does so).
func (t *cgroupTree) leaf(app string) (path string, dirFD *os.File, err error) {
	path, err = os.MkdirTemp(t.dir, app+".")
	if err != nil {
		return "", nil, fmt.Errorf("create a cgroup for %s: %w", app, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(path)
		return "", nil, fmt.Errorf("open the cgroup of %s: %w", app, err)
	}
	return path, os.NewFile(uintptr(fd), path), nil
}

// close removes the subtree once its leaves are gone (another supervisor
// of the same process may still have some: then it stays for it).
func (t *cgroupTree) close() {
	if err := os.Remove(t.dir); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, fs.ErrNotExist) {
		t.log.Warn("cannot remove the daemon's cgroup", zap.String("cgroup", t.dir), zap.Error(err))
	}
}

// killLeaf SIGKILLs every process in the leaf at once (cgroup.kill).
func killLeaf(leaf string) error {
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", leaf, err)
	}
	return nil
}

// removeLeaf kills the leaf, waits until it is empty (at most
// cgroupDrain) and removes it.
func removeLeaf(leaf string) error {
	if err := killLeaf(leaf); err != nil {
		return err
	}
	if err := awaitEmpty(leaf, cgroupDrain); err != nil {
		return err
	}
	if err := os.Remove(leaf); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", leaf, err)
	}
	return nil
}

// populated reads "populated" from the leaf's cgroup.events; a leaf that
// is gone or unreadable counts as empty.
func populated(leaf string) bool {
	b, err := os.ReadFile(filepath.Join(leaf, "cgroup.events"))
	return err == nil && populatedIn(b)
}

func populatedIn(events []byte) bool {
	for line := range strings.SplitSeq(string(events), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}

// awaitEmpty waits until the leaf has no process left. The kernel wakes
// a poll of cgroup.events (POLLPRI) at each change of the file; inotify
// would do too, but closing an inotify instance waits for an RCU grace
// period (~10 ms), which every app exit would pay.
func awaitEmpty(leaf string, limit time.Duration) error {
	fd, err := unix.Open(filepath.Join(leaf, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // already removed
		}
		return fmt.Errorf("watch cgroup %s: %w", leaf, err)
	}
	defer unix.Close(fd)
	return awaitEmptyFD(fd, leaf, limit)
}

// awaitEmptyFD is awaitEmpty on the leaf's open cgroup.events.
func awaitEmptyFD(fd int, leaf string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var buf [512]byte
	for {
		n, err := unix.Pread(fd, buf[:], 0)
		if err != nil {
			if errors.Is(err, unix.ENODEV) {
				return nil // the leaf was removed under the open file
			}
			return fmt.Errorf("read cgroup %s: %w", leaf, err)
		}
		if !populatedIn(buf[:n]) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s still has processes %s after cgroup.kill", leaf, limit)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("watch cgroup %s: %w", leaf, err)
		}
	}
}

// processLeaf is the leaf of one app process, with the two files its end
// needs held open from the start: between a crash and its stopped event
// the leaf is killed and checked empty, and a held descriptor costs one
// system call each time where os.WriteFile or os.ReadFile cost an open,
// the netpoller's registration and a close around it.
type processLeaf struct {
	path   string
	kill   int // cgroup.kill, write-only
	events int // cgroup.events, read-only
}

// openProcessLeaf opens the files of the leaf at path through dir, the
// leaf's directory.
func openProcessLeaf(path string, dir *os.File) (*processLeaf, error) {
	kill, err := unix.Openat(int(dir.Fd()), "cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/cgroup.kill: %w", path, err)
	}
	events, err := unix.Openat(int(dir.Fd()), "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(kill)
		return nil, fmt.Errorf("open %s/cgroup.events: %w", path, err)
	}
	return &processLeaf{path: path, kill: kill, events: events}, nil
}

// killAll SIGKILLs every process in the leaf at once (cgroup.kill).
func (l *processLeaf) killAll() error {
	for {
		_, err := unix.Write(l.kill, []byte("1"))
		switch {
		case err == nil, errors.Is(err, unix.ENODEV): // ENODEV: removed
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		}
		return fmt.Errorf("kill cgroup %s: %w", l.path, err)
	}
}

// awaitEmpty waits until the leaf has no process left (at most limit).
func (l *processLeaf) awaitEmpty(limit time.Duration) error {
	return awaitEmptyFD(l.events, l.path, limit)
}

// close closes the leaf's files; the leaf stays.
func (l *processLeaf) close() {
	unix.Close(l.kill)
	unix.Close(l.events)
}

// remove closes the leaf's files and removes the leaf, which must be
// empty.
func (l *processLeaf) remove() error {
	l.close()
	if err := unix.Rmdir(l.path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", l.path, err)
	}
	return nil
}
