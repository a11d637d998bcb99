package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/internal/cgroupfs"
	"octosup/jail"
	"octosup/policy"
)

// The manifest's limits (docs/limits.md) are written into each process's
// leaf before the fork, so that CLONE_INTO_CGROUP starts the app under
// them. A leaf has a controller's files only when its parent enables the
// controller for its children (cgroup.subtree_control), and a cgroup may
// do that only while it holds no process itself (the no-internal-process
// rule; the root is exempt): enableControllers turns them on in the
// daemon's cgroup and its subtree, moving the daemon into a leaf of its
// own, octosup.<pid>.<start>/daemon, when its cgroup must give them up.

// Limiters: LimitsReport.Limiter.
const (
	LimiterCgroup  = "cgroup"
	LimiterPrlimit = "prlimit"
	LimiterNone    = "none"
)

// daemonLeaf is the leaf the daemon moves itself into; no app leaf has
// this name (theirs are "<id>.<random>").
const daemonLeaf = "daemon"

// LimitsReport says which of an app's limits took for its process, as
// jail.Report says which layers did. Missing names the controller of each
// limit the entry asked for that nothing enforces ("limits.memory"); a
// strict app does not start with any. The default tasks_max is never
// missing: where the pids controller lacks, RLIMIT_NPROC stands in.
type LimitsReport struct {
	// Limiter is what holds the app to its limits: "cgroup", "prlimit"
	// (RLIMIT_NPROC only), both ("cgroup+prlimit"), or "none".
	Limiter string `json:"limiter"`
	// Applied lists each limit in force as name=value, those held by an
	// rlimit marked so, with what it really bounds: "tasks_max=512
	// (RLIMIT_NPROC 824: every task of the user)".
	Applied []string `json:"applied"`
	Missing []string `json:"missing"`
}

// limitWrite is one value for one cgroup file.
type limitWrite struct {
	limit string // the manifest's field
	file  string // in the leaf
	value string // what is written
	shown string // the value as the report shows it
	asked bool   // the entry set it (not a default)
}

// limitWrites is what the leaf's files get for lim. A fresh leaf already
// holds the kernel's defaults ("max", weight 100), so for a start
// (reset false) only what differs is written; a reload (reset true)
// writes every file, turning a limit the entry dropped back to its
// default.
func limitWrites(lim policy.ResourceLimits, reset bool) []limitWrite {
	var out []limitWrite
	add := func(limit, file, value, shown string, asked bool) {
		if asked || reset {
			out = append(out, limitWrite{limit: limit, file: file, value: value, shown: shown, asked: asked})
		}
	}
	bytes := func(limit, file string, b policy.Bytes) {
		if b == 0 {
			add(limit, file, "max", "max", false)
		} else {
			add(limit, file, strconv.FormatUint(uint64(b), 10), b.String(), true)
		}
	}
	bytes("memory_max", "memory.max", lim.MemoryMax)
	bytes("memory_high", "memory.high", lim.MemoryHigh)
	tasks := lim.TasksMax
	if tasks == 0 {
		tasks = policy.DefaultTasksMax // an entry built by hand, not by Parse
	}
	// The default is written at every start: a fresh leaf has no pids
	// limit. It counts as asked only when the entry set another value.
	out = append(out, limitWrite{limit: "tasks_max", file: "pids.max", value: strconv.Itoa(tasks), shown: strconv.Itoa(tasks),
		asked: lim.TasksMax != 0 && lim.TasksMax != policy.DefaultTasksMax})
	weight := func(limit, file, prefix string, w int) {
		if w == 0 {
			add(limit, file, prefix+strconv.Itoa(policy.DefaultWeight), strconv.Itoa(policy.DefaultWeight), false)
		} else {
			add(limit, file, prefix+strconv.Itoa(w), strconv.Itoa(w), true)
		}
	}
	weight("cpu_weight", "cpu.weight", "", lim.CPUWeight)
	if lim.CPUMax == "" {
		add("cpu_max", "cpu.max", "max "+strconv.Itoa(policy.DefaultCPUPeriod), "max", false)
	} else if q, p, err := policy.ParseCPUMax(lim.CPUMax); err == nil {
		add("cpu_max", "cpu.max", fmt.Sprintf("%d %d", q, p), lim.CPUMax, true)
	}
	// "default N" sets the weight of every device without one of its own.
	weight("io_weight", "io.weight", "default ", lim.IOWeight)
	return out
}

// writeLimits writes lim into the leaf open at dir, with the controllers
// have enabled for it, and says what took. reset: see limitWrites.
func writeLimits(dir int, lim policy.ResourceLimits, have map[string]bool, reset bool) (LimitsReport, error) {
	rep := LimitsReport{Applied: []string{}, Missing: []string{}}
	var errs []error
	for _, w := range limitWrites(lim, reset) {
		ctl := policy.LimitController(w.limit)
		if !have[ctl] {
			if w.asked {
				rep.addMissing(ctl)
			}
			continue
		}
		if err := writeAt(dir, w.file, w.value); err != nil {
			if !w.asked && errors.Is(err, unix.ENOENT) {
				continue // a default the kernel has no file for (io.weight without blk-iocost)
			}
			if w.asked {
				rep.addMissing(ctl)
			}
			errs = append(errs, fmt.Errorf("%s %s: %w", w.file, w.value, err))
			continue
		}
		if w.asked || w.limit == "tasks_max" {
			rep.Applied = append(rep.Applied, w.limit+"="+w.shown)
		}
	}
	if len(rep.Applied) > 0 {
		rep.Limiter = LimiterCgroup
	} else {
		rep.Limiter = LimiterNone
	}
	return rep, errors.Join(errs...)
}

func (rep *LimitsReport) addMissing(ctl string) {
	if name := "limits." + ctl; !slices.Contains(rep.Missing, name) {
		rep.Missing = append(rep.Missing, name)
	}
}

// noCgroupLimits is the report of a process without a leaf: every limit
// the entry asked for is missing.
func noCgroupLimits(lim policy.ResourceLimits) LimitsReport {
	rep, _ := writeLimits(-1, lim, nil, false)
	return rep
}

// tasksMax is the tasks_max the entry gives, or the default.
func tasksMax(lim policy.ResourceLimits) int {
	if lim.TasksMax == 0 {
		return policy.DefaultTasksMax
	}
	return lim.TasksMax
}

// heldByPids reports whether the report's tasks_max is the pids
// controller's.
func (rep *LimitsReport) heldByPids() bool {
	for _, a := range rep.Applied {
		if strings.HasPrefix(a, "tasks_max=") && !strings.Contains(a, "(RLIMIT_NPROC") {
			return true
		}
	}
	return false
}

// limitNproc holds the process pid to RLIMIT_NPROC where the pids
// controller cannot: the kernel counts every task of the user against it,
// not the app's, so the limit is what the whole system runs now (an upper
// bound of the user's count) plus tasks_max. It is set, soft and hard (an
// app cannot raise it back), as soon as the fork returns: with the
// in-process spawn that is just after the app's execve, so an app could
// fork during its first microseconds before it. Root's processes are not
// held by it at all (the kernel exempts uid 0).
func limitNproc(pid, tasks int) (string, error) {
	running, err := systemTasks("/proc/loadavg")
	if err != nil {
		return "", err
	}
	n := uint64(running + tasks)
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		return "", fmt.Errorf("prlimit RLIMIT_NPROC %d on %d: %w", n, pid, err)
	}
	// What binds is the user's whole count, not the app's.
	return fmt.Sprintf("tasks_max=%d (RLIMIT_NPROC %d: every task of the user)", tasks, n), nil
}

// systemTasks is the number of tasks on the system: the fourth field of
// /proc/loadavg, "running/total".
func systemTasks(loadavg string) (int, error) {
	b, err := os.ReadFile(loadavg)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, fmt.Errorf("%s: %q has no task count", loadavg, b)
	}
	_, total, ok := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(total)
	if !ok || err != nil {
		return 0, fmt.Errorf("%s: %q has no task count", loadavg, f[3])
	}
	return n, nil
}

// unheldLimits names the hard limits the entry sets that nothing will
// hold, as "memory_max 32M", given what the leaf took (rep, before the
// spawn: a limit the entry set is missing when its controller did not
// take it) and whether the daemon is root (policy.ResourceLimits.Unheld).
func unheldLimits(lim policy.ResourceLimits, rep LimitsReport, root bool) []string {
	var out []string
	took := func(ctl string) bool { return !slices.Contains(rep.Missing, "limits."+ctl) }
	for _, kv := range lim.Unheld(took, root) {
		if policy.HardLimit(kv[0]) {
			out = append(out, kv[0]+" "+kv[1])
		}
	}
	return out
}

// strictLimits reports whether a start without every limit the entry
// asked for is refused: the entry's sandbox.strictness, else the
// daemon's, as for the jail's layers.
func strictLimits(app policy.App, daemon jail.Strictness) bool {
	if app.Sandbox.Strictness != "" {
		return jail.Strictness(app.Sandbox.Strictness) == jail.Strict
	}
	return daemon == jail.Strict
}

// writeAt writes value to the file name in the directory dir.
func writeAt(dir int, name, value string) error {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(value))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// enableControllers turns on, for the leaves, the limit controllers the
// daemon's cgroup has, and returns those it could: in own's
// cgroup.subtree_control, then in the subtree's. why says what kept the
// others off.
//
// Outside the root the daemon first moves out of own into a leaf of its
// own: the kernel refuses a cgroup that holds processes the domain
// controllers (memory, io) for its children, and takes the threaded ones
// (pids, cpu), but they would make it a thread root, in whose domain
// children (the leaves) no process could then run. For the same reason
// nothing is enabled while own holds a process that is not the daemon's.
func (t *cgroupTree) enableControllers() (have map[string]bool, why string) {
	own := filepath.Join(t.mnt, t.own)
	avail := cgroupfs.Words(filepath.Join(own, "cgroup.controllers"))
	var want []string
	var whys []string
	all := policy.LimitControllers()
	for _, c := range all {
		if avail[c] {
			want = append(want, c)
		}
	}
	if len(want) < len(all) {
		lacks := slices.DeleteFunc(slices.Clone(all), func(c string) bool { return avail[c] })
		whys = append(whys, fmt.Sprintf("%s has no %s controller (of the controllers limits use, its cgroup.controllers lists %s)", own, orList(lacks), orNone(want)))
	}
	have = map[string]bool{}
	if len(want) == 0 {
		return have, strings.Join(whys, "; ")
	}
	if t.own != "/" {
		if procs := strings.Fields(readFile(filepath.Join(own, "cgroup.procs"))); len(procs) > 0 {
			if err := t.moveSelf(); err != nil {
				return have, strings.Join(append(whys, err.Error()), "; ")
			}
		}
		if procs := strings.Fields(readFile(filepath.Join(own, "cgroup.procs"))); len(procs) > 0 {
			return have, strings.Join(append(whys, fmt.Sprintf("%s holds processes other than the daemon (%s): the kernel gives it no controllers for its children then", own, strings.Join(procs, " "))), "; ")
		}
	}
	on := enable(own, want)
	if len(on) < len(want) {
		whys = append(whys, fmt.Sprintf("%s would not enable %s for its children", own, strings.Join(without(want, on), ", ")))
	}
	for _, c := range enable(t.dir, on) {
		have[c] = true
	}
	if len(have) < len(on) {
		whys = append(whys, fmt.Sprintf("%s would not enable %s", t.dir, strings.Join(without(on, keys(have)), ", ")))
	}
	return have, strings.Join(whys, "; ")
}

func readFile(file string) string {
	b, _ := os.ReadFile(file)
	return string(b)
}

// moveSelf moves the daemon (every thread of it) into the leaf
// daemonLeaf of its subtree.
func (t *cgroupTree) moveSelf() error {
	leaf := filepath.Join(t.dir, daemonLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("make the daemon's own leaf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("move the daemon into %s: %w", leaf, err)
	}
	t.log.Info("the daemon moved into a leaf of its own, so that its cgroup may enable controllers for the apps", zap.String("cgroup", leaf))
	return nil
}

// enable turns on each of ctls in dir's cgroup.subtree_control, one by
// one (one refused does not stop the others), and returns those now on.
func enable(dir string, ctls []string) []string {
	file := filepath.Join(dir, "cgroup.subtree_control")
	for _, c := range ctls {
		_ = os.WriteFile(file, []byte("+"+c), 0)
	}
	on := cgroupfs.Words(file)
	var out []string
	for _, c := range ctls {
		if on[c] {
			out = append(out, c)
		}
	}
	return out
}

func without(all, some []string) []string {
	var out []string
	for _, c := range all {
		if !slices.Contains(some, c) {
			out = append(out, c)
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// orList is "a", "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// liveLimits is a running process whose entry's limits a reload changed.
type liveLimits struct {
	r    *runner
	leaf string // "" without a leaf
	pid  int
	lim  policy.ResourceLimits
}

// applyLimitsLive writes changed limits into a running process's leaf
// (cgroup files take effect at once: no restart), or its RLIMIT_NPROC
// where that stands in, and puts the new report in its status. A process
// that ended meanwhile is left alone: its next start reads the entry.
// It reports whether the limits took (some may still be missing).
func (s *Supervisor) applyLimitsLive(l liveLimits) bool {
	var rep LimitsReport
	if l.leaf != "" {
		fd, err := unix.Open(l.leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false // gone with its process
		}
		rep, err = writeLimits(fd, l.lim, s.cgroups.controllers, true)
		unix.Close(fd)
		if err != nil {
			s.log.Warn("app's cgroup refused changed limits", zap.String("app", l.r.id), zap.Error(err))
		}
	} else {
		rep = noCgroupLimits(l.lim)
	}
	switch {
	case rep.heldByPids():
	case os.Geteuid() == 0:
		// The kernel exempts root's processes from RLIMIT_NPROC (as at
		// start, fallbackNproc).
		rep.addMissing("pids")
	default:
		// Raising a hard rlimit takes CAP_SYS_RESOURCE: a higher
		// tasks_max then waits for the app's next start.
		applied, err := limitNproc(l.pid, tasksMax(l.lim))
		if err != nil {
			s.log.Warn("app's RLIMIT_NPROC stays as it was until it restarts", zap.String("app", l.r.id), zap.Error(err))
		} else {
			rep.Applied = append(rep.Applied, applied)
			rep.Limiter = strings.TrimPrefix(rep.Limiter+"+"+LimiterPrlimit, LimiterNone+"+")
		}
	}
	s.mu.Lock()
	applied := l.r.status.Pid == l.pid
	if applied {
		l.r.status.Limits = &rep
	}
	s.mu.Unlock()
	if applied {
		s.log.Info("changed limits applied in place, without a restart", zap.String("app", l.r.id), zap.Int("pid", l.pid),
			zap.Strings("applied", rep.Applied), zap.Strings("missing", rep.Missing))
	}
	return applied
}
