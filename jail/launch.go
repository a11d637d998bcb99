package jail

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/jail/pulsefilter"
	"octosup/policy"
)

// Request is everything one launch of an app needs.
type Request struct {
	App policy.App
	// Neighbours are the manifest's other apps (its entries: App's own
	// may be among them, which changes nothing): a link planted below
	// any jail app's rw external may redirect this app's grants, so none
	// of this app's grants follows one (resolveGrants). The slice is
	// only read.
	Neighbours    []policy.App
	DeveloperMode bool
	Dirs          policy.Dirs
	// BaseEnv is the daemon's environment, before the scrub.
	BaseEnv []string
	// Stdout and Stderr are the write ends of the daemon's capture pipes
	// (nil: /dev/null); Hub is the app's end of the hub socketpair (it
	// becomes fd 3; required). The caller keeps ownership and closes its
	// copies after Start.
	Stdout, Stderr, Hub *os.File
	// CgroupFD, when positive, is an open cgroup v2 directory the process
	// is forked into (CLONE_INTO_CGROUP), so that it and every descendant
	// are in it from the first instruction. -1 (or 0, which is stdin and
	// never a cgroup) leaves the process in the daemon's cgroup. The
	// caller keeps ownership.
	CgroupFD int
}

// Process is an app process the Launcher forked.
type Process struct {
	Pid int
	// Pidfd refers to the process for its whole life; the caller owns it
	// and is the one place that waits for the process.
	Pidfd int

	app    string
	log    *zap.Logger
	status *os.File // the helper's status pipe; nil for an in-process spawn
	forked bool     // spawned in-process, not through the helper
	notify *Guard   // the app's notified calls; nil when it has none
	// spec is what a helper was started with: its status names a step
	// of the sequence, which stepFailure words with it.
	spec Spec
	// notifySock brings the helper's listener; -1 without one. guard
	// makes the Guard of the listener.
	notifySock int
	guard      func(fd int) *Guard
	once       sync.Once
	report     Report
	err        error
}

// Confirm waits until the process runs the app's program, or says why it
// could not: a *LayerError naming the layer and errno (e.g. "landlock:
// restrict: EINVAL", "jail: landlock ABI 3 < 6"), or ErrHelperDied. It
// may be called from any goroutine, more than once; every caller gets the
// same answer. Call it once for every started Process: it closes the
// status pipe.
func (p *Process) Confirm() (Report, error) {
	p.once.Do(func() {
		if !p.forked {
			if err := readStatus(p.status, p.spec); err != nil {
				p.report, p.err = Report{}, err
			}
			p.status.Close()
			if p.notifySock >= 0 {
				if p.err == nil {
					p.takeGuard(p.notifySock, p.guard)
				} else {
					unix.Close(p.notifySock)
				}
			}
		}
		switch {
		case p.err != nil:
			p.log.Warn("jail failed", zap.String("app", p.app), zap.Int("pid", p.Pid), zap.Error(p.err))
		case len(p.report.Missing) > 0:
			p.log.Warn("jailed with layers missing", zap.String("app", p.app), zap.Int("pid", p.Pid),
				zap.Int("landlock_abi", p.report.LandlockABI), zap.Strings("layers", p.report.Layers),
				zap.Strings("missing", p.report.Missing))
		default:
			// Debug: the supervisor's "app started" line carries the same.
			p.log.Debug("jailed", zap.String("app", p.app), zap.Int("pid", p.Pid),
				zap.Int("landlock_abi", p.report.LandlockABI), zap.Strings("layers", p.report.Layers))
		}
	})
	return p.report, p.err
}

// takeGuard receives the notify listener the sequence sent down sock
// before its execve, and closes sock.
func (p *Process) takeGuard(sock int, guard func(fd int) *Guard) {
	defer unix.Close(sock)
	fd, err := helper.RecvFD(sock)
	if err != nil {
		p.report = Report{}
		p.err = layerErr("seccomp", "the notify listener: "+err.Error(), err)
		return
	}
	p.notify = guard(fd)
}

// guardFor makes the Guard of spec's listener.
func (l *Launcher) guardFor(spec Spec) func(fd int) *Guard {
	unprivPort := l.kernel().unprivPort
	slots := l.slotsOf(spec.App)
	kept := guardSpec(spec)
	return func(fd int) *Guard { return newGuard(kept, fd, unprivPort, slots, l.log) }
}

// guardSpec is what a Guard reads of spec for its process's life: the
// app, its sockets, its Landlock rules and its notified calls. The rest
// (the filter's other rules, the environment, argv) would stay in the
// daemon's memory as long as the app runs, for every app.
func guardSpec(spec Spec) Spec {
	return Spec{
		App: spec.App, Sockets: spec.Sockets, Landlock: spec.Landlock,
		Seccomp: slices.DeleteFunc(slices.Clone(spec.Seccomp), func(r Syscall) bool { return !r.Notify }),
	}
}

// appSlots are an app's slots for the guard's work off its loop (later),
// kept across the app's processes, since that work can outlive the
// process that asked for it: connects under way, and closes of the
// daemon's copies of the app's descriptors.
type appSlots struct {
	connects, closes chan struct{}
	// sound is what the app holds in its sound server (pulsefilter's
	// Ledger): its samples outlive a run of the app.
	sound *pulsefilter.Ledger
}

// slotsOf are app's slots, made at its first start.
func (l *Launcher) slotsOf(app string) appSlots {
	l.slotsMu.Lock()
	defer l.slotsMu.Unlock()
	if l.slots == nil {
		l.slots = map[string]appSlots{}
	}
	s, ok := l.slots[app]
	if !ok {
		s = appSlots{connects: make(chan struct{}, maxConnects), closes: make(chan struct{}, maxCloses), sound: pulsefilter.NewLedger()}
		l.slots[app] = s
	}
	return s
}

// Settled reports whether Confirm's answer is known already and it
// returns at once: an in-process spawn's is known when Start returns
// (its child exec'd or failed by then); the helper's comes down its
// status pipe.
func (p *Process) Settled() bool { return p.forked }

// Config sets up a Launcher.
type Config struct {
	// HelperPath is the jail helper a helper start runs as [HelperPath,
	// HelperArg]: octosupd passes octosup-jail (FindHelper). Apps take it
	// with UseHelper, or where the in-process spawn cannot run (not
	// x86-64, or a kernel before 5.11).
	// Empty means /proc/self/exe, a binary that is its own helper (a test
	// binary that dispatches IsHelper in TestMain).
	HelperPath string
	// Strictness is the daemon's setting; an entry's sandbox.strictness
	// overrides it. Zero is BestEffort.
	Strictness Strictness
	// Narrow lists apps narrowed to jail-only and no network
	// (OCTOSUP_SANDBOX_NARROW; the variable in Request.BaseEnv counts too).
	Narrow []string
	// Log receives a line per start with the layers that took; nil logs
	// nothing.
	Log *zap.Logger
	// UseHelper starts every app through the helper instead of the
	// in-process spawn (fork.go). It costs an exec per app (docs/jail.md);
	// the escape suite runs both ways.
	UseHelper bool
}

// Launcher starts app processes. Use NewLauncher.
type Launcher struct {
	cfg     Config
	log     *zap.Logger
	filters filterCache
	facts   fileFacts
	kernel  func() kernelInfo // probed once, at the first start
	// noFork is set when clone3 refused the in-process spawn's flags.
	noFork atomic.Bool
	// arena holds the in-process spawn's exec arguments (helper.Arena);
	// only the spawner thread uses it.
	arena func() (*helper.Arena, error)
	// inheritedIgnored is kernelIgnored, asked at the first start.
	inheritedIgnored func() uint64
	// slotsMu guards slots: each app's slots for its guard's work off
	// the loop (appSlots).
	slotsMu sync.Mutex
	slots   map[string]appSlots
}

// kernelInfo is what a Launcher asks of the kernel once.
type kernelInfo struct {
	landlockABI   int
	seccompAbsent bool
	fork          bool   // SpawnsInProcess
	unprivPort    uint16 // the first port an app without capabilities may bind
}

func probeKernel() kernelInfo {
	return kernelInfo{landlockABI: helper.LandlockABI(), seccompAbsent: helper.SeccompAbsent(), fork: SpawnsInProcess(), unprivPort: unprivilegedPortStart()}
}

// unprivilegedPortStart reads net.ipv4.ip_unprivileged_port_start: the
// Guard binds for apps, which have no capabilities even where the daemon
// has them.
func unprivilegedPortStart() uint16 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16)
	if err != nil {
		return 1024
	}
	return uint16(n)
}

// NewLauncher returns a Launcher.
func NewLauncher(cfg Config) *Launcher {
	if cfg.HelperPath == "" {
		cfg.HelperPath = "/proc/self/exe"
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Launcher{cfg: cfg, log: log, kernel: sync.OnceValue(probeKernel), arena: sync.OnceValues(helper.NewArena),
		inheritedIgnored: sync.OnceValue(kernelIgnored)}
}

// ErrNoHub is returned when a Request has no hub to become fd 3.
var ErrNoHub = errors.New("no hub socket")

// ErrNoProgram is returned when an entry's program cannot be run at all.
var ErrNoProgram = errors.New("program not found")

// Spec compiles the jail req's app would get, without starting anything
// (octosupctl prints it with Describe). ParentPID is this process.
func (l *Launcher) Spec(req Request) (Spec, error) {
	app := req.App
	if len(app.Exec) == 0 {
		return Spec{}, fmt.Errorf("%w: exec is empty", ErrNoProgram)
	}
	interps, err := l.facts.interpreters(app.Exec[0])
	if err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrNoProgram, err)
	}
	execs, err := resolveExec(append([]string{app.Exec[0]}, interps...), withApp(app, req.Neighbours), req.Dirs)
	if err != nil {
		return Spec{}, err
	}
	narrow := slices.Concat(l.cfg.Narrow, ParseNarrow(lookupEnv(req.BaseEnv, EnvNarrow)))
	resolved, planted := resolveGrants(app, req.Neighbours, req.Dirs)
	var etc []publicGrant
	if os.Geteuid() == 0 {
		etc = l.facts.publicEtc()
	}
	return Compile(app, Options{
		etc:           etc,
		Program:       execs[0],
		Resolved:      resolved,
		Planted:       planted,
		DeveloperMode: req.DeveloperMode,
		Dirs:          req.Dirs,
		BaseEnv:       req.BaseEnv,
		Narrowed:      slices.Contains(narrow, app.ID),
		Strictness:    l.cfg.Strictness,
		ParentPID:     os.Getpid(),
		Interpreters:  execs[1:],
		SystemLinks:   l.facts.systemLinks("/etc"),
		LandlockABI:   l.kernel().landlockABI,
		BroadRoots:    l.facts.broadRoots(),
		RenderNodes:   renderNodesFor(app),
	})
}

// Start forks the app's process, which jails itself and execs the
// program: in-process (fork.go), or through the helper. It returns once
// the fork is done; Confirm says whether the program runs. It must be called from the daemon's spawner thread: the
// child's parent-death signal is tied to the thread that forked it
// (golang/go#27505).
func (l *Launcher) Start(req Request) (*Process, error) {
	app := req.App
	spec, err := l.Spec(req)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", app.ID, err)
	}
	if err := prepareDirs(req); err != nil {
		return nil, fmt.Errorf("start %s: %w", app.ID, err)
	}
	p, err := l.start(spec, req.Stdout, req.Stderr, req.Hub, req.CgroupFD)
	if p != nil && p.Settled() {
		p.Confirm() // logs the layers, as the helper's reader does
	}
	return p, err
}

// start forks spec in-process where it may (fork.go), else through the
// helper (launch_helper.go).
func (l *Launcher) start(spec Spec, stdout, stderr, hub *os.File, cgroupFD int) (*Process, error) {
	if !l.cfg.UseHelper && !l.noFork.Load() && l.kernel().fork {
		if p, ok, err := l.startFork(spec, stdout, stderr, hub, cgroupFD); ok {
			return p, err
		}
	}
	return l.startHelper(spec, stdout, stderr, hub, cgroupFD)
}

func lookupEnv(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// systemLinks maps the symlinks directly in dir to where they lead (e.g.
// /etc/resolv.conf into /run); Compile grants the targets outside the
// system directories.
func systemLinks(dir string) map[string]string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if t, err := filepath.EvalSymlinks(p); err == nil {
			out[p] = t
		}
	}
	return out
}

// resolveGrants maps the app's resources and externals to where their
// symlinks lead (Options.Resolved); a path that does not resolve (missing)
// is left out, and its rule names it as written. It also names each grant
// that leads through a symlink lying below a jail app's rw external, this
// app's or a neighbour's (Options.Planted): externals are resolved at
// every start, so an app that replaced a directory there with a link
// would have the next start of any app granted that directory grant
// wherever the link leads. Broad apps do not count as planters: one can
// read everything itself already.
//
// Each path is walked once (walkGrant), and the rule is built from what
// that walk saw: a real path, which the ruleset opens with
// RESOLVE_NO_SYMLINKS. An app that flips a directory and a link while
// the daemon resolves gains nothing: a link seen in a writable place is
// refused, and a directory seen there and a link by the open is ELOOP.
func resolveGrants(app policy.App, neighbours []policy.App, d policy.Dirs) (resolved, planted map[string]string) {
	resolved, planted = map[string]string{}, map[string]string{}
	// The writable places are worked out only when a walk meets a link:
	// most grants have none, and walking every neighbour's rw externals
	// at each start would make starting N apps cost N² lookups.
	writable := func() []string { return nil }
	if app.Sandbox.Policy == policy.PolicyJail {
		writable = sync.OnceValue(func() []string { return writablePlaces(withApp(app, neighbours), d) })
	}
	paths := slices.Clone(app.Resources)
	for _, e := range app.Sandbox.External {
		if p, err := expandHome(e.Path, d.Home); err == nil {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		p = filepath.Clean(p)
		real, link := walkGrant(p, writable)
		switch {
		case link != "":
			planted[p] = link
		case real != "" && real != p:
			resolved[p] = real
		}
	}
	return resolved, planted
}

// withApp yields app, then its neighbours: the apps whose rw externals
// count, without a copy of the manifest's entries at every start (n
// starts made n² copies). The app's own entry may be among neighbours.
func withApp(app policy.App, neighbours []policy.App) iter.Seq[policy.App] {
	return func(yield func(policy.App) bool) {
		if !yield(app) {
			return
		}
		for _, a := range neighbours {
			if !yield(a) {
				return
			}
		}
	}
}

// writablePlaces are the rw externals of the jail apps among apps, as
// written and where they lead.
func writablePlaces(apps iter.Seq[policy.App], d policy.Dirs) []string {
	var out []string
	for a := range apps {
		if a.Sandbox.Policy != policy.PolicyJail {
			continue
		}
		for _, e := range a.Sandbox.External {
			p, err := expandHome(e.Path, d.Home)
			if err != nil || e.Access != policy.AccessRW {
				continue
			}
			p = filepath.Clean(p)
			out = append(out, p)
			if real, _ := walkGrant(p, func() []string { return nil }); real != "" && real != p {
				out = append(out, real)
			}
		}
	}
	return out
}

// walkGrant walks p as the kernel resolves it. It returns the real path
// it reached (every component seen as no link), "" when p does not
// resolve, and the first symlink it met that lies in a directory under
// one of writable's places (real paths), which stops the walk.
func walkGrant(p string, writable func() []string) (real, planted string) {
	dir := "/"
	rest := strings.Split(p, "/")
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			dir = filepath.Dir(dir)
			continue
		}
		next := filepath.Join(dir, name)
		st, err := os.Lstat(next)
		if err != nil {
			return "", ""
		}
		if st.Mode()&os.ModeSymlink == 0 {
			dir = next
			continue
		}
		if underAny(dir, writable()) {
			return "", next
		}
		target, err := os.Readlink(next)
		if hops++; err != nil || hops > 40 {
			return "", "" // ELOOP, as the kernel would say
		}
		if filepath.IsAbs(target) {
			dir = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return dir, ""
}

// renderNodesFor lists the render nodes when the entry asks for the GPU
// (on every start: a GPU may come and go).
func renderNodesFor(app policy.App) []RenderNode {
	if !slices.Contains(app.Sandbox.Devices, policy.DeviceDRI) {
		return nil
	}
	return renderNodes(driDir)
}

// prepareDirs creates the app's jail and secrets directories 0700 when the
// entry asks for them, and its runtime directory when it has sockets or
// devices.
func prepareDirs(req Request) error {
	if sb := req.App.Sandbox; sb.Policy != policy.PolicyBroad && (len(sb.Sockets) > 0 || len(sb.Devices) > 0) {
		if err := mkdirPrivate(req.Dirs.Runtime, "apps", req.App.ID); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		want bool
		sub  string
	}{{req.App.Storage.Jail, "jails"}, {req.App.Storage.Secrets, "secrets"}} {
		if d.want {
			if err := mkdirPrivate(req.Dirs.Data, d.sub, req.App.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// mkdirPrivate makes base/sub/id a private directory of this user, by
// descriptor below base: each component is opened with openat2 and
// RESOLVE_NO_SYMLINKS, created 0700 if missing, refused unless it is a
// real directory this user owns, and chmod'ed through its descriptor. A
// jail directory trusted by its path let an app that could write the
// user's home replace it with a symlink: the daemon then chmod'ed the
// target and Landlock granted it read-write. base itself (the daemon's
// data directory) may be reached through the user's own symlinks.
func mkdirPrivate(base, sub, id string) error {
	if err := os.MkdirAll(base, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", base, err)
	}
	dir, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", base, err)
	}
	path := base
	for _, name := range []string{sub, id} {
		path = filepath.Join(path, name)
		next, err := privateDir(dir, name, path)
		unix.Close(dir)
		if err != nil {
			return err
		}
		dir = next
	}
	unix.Close(dir)
	return nil
}

// privateDir opens (creating it if missing) the directory name beneath
// the descriptor at, refusing symlinks and what is not this user's.
func privateDir(at int, name, path string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(at, name, &how)
	if err == unix.ENOENT {
		if err := unix.Mkdirat(at, name, 0o700); err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("create %s: %w", path, err)
		}
		fd, err = unix.Openat2(at, name, &how)
	}
	switch err {
	case nil:
	case unix.ELOOP, unix.ENOTDIR, unix.EXDEV:
		return -1, fmt.Errorf("%s is not a real directory (a symlink?): refusing to use it as an app's private directory: %w", path, err)
	default:
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat %s: %w", path, err)
	}
	if int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return -1, fmt.Errorf("%s belongs to uid %d, not %d: refusing to use it as an app's private directory: %w", path, st.Uid, os.Geteuid(), unix.EPERM)
	}
	// An existing directory keeps its mode through the open: a jail must
	// not be readable by other users whatever created it first.
	if err := unix.Fchmod(fd, 0o700); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("chmod %s: %w", path, err)
	}
	return fd, nil
}
