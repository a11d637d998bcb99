package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/jail"
	"octosup/policy"
)

// Errors callers branch on.
var (
	// ErrUnknownApp: no app with that id is in the manifest.
	ErrUnknownApp = errors.New("unknown app")
	// ErrStartFailed: the app could not be started; the error and the
	// returned status's Reason say why.
	ErrStartFailed = errors.New("app failed to start")
	// ErrShutdown: the supervisor is shutting down or has shut down.
	ErrShutdown = errors.New("supervisor is shut down")
	// ErrStartTimeout: a started process did not report within
	// Config.StartTimeout (wrapped along with ErrStartFailed).
	ErrStartTimeout = errors.New("start timed out")
)

// Defaults for Config.
const (
	DefaultStopGrace    = 5 * time.Second
	DefaultStartTimeout = 30 * time.Second
	DefaultLogLines     = 1000
)

// StopperProcessGroup is AppStatus.Stopper for apps stopped through their
// process group, where no delegated cgroup v2 is available (StopperCgroup
// otherwise).
const StopperProcessGroup = "process-group"

// Launcher starts one app process; *jail.Launcher satisfies it.
type Launcher interface {
	Start(req jail.Request) (*jail.Process, error)
	// Spec compiles the jail req's process would run in, starting
	// nothing: Apply compares what a running app's process runs with
	// what its new entry would run.
	Spec(req jail.Request) (jail.Spec, error)
}

// LinkHandler learns of each process's hub (the peer link).
//
// Both methods are called from the app's own goroutine, which meanwhile
// notices nothing else about that app: no exit, no Stop, no start
// timeout. They must return promptly (hand the work to a goroutine of the
// handler's own, never block on I/O or a lock held across I/O) and must
// not call Start, Stop or Restart of the same app and wait for it, which
// would deadlock. The supervisor logs a warning when one takes longer
// than a second.
type LinkHandler interface {
	// Attach hands over the daemon's end of a new process's hub; the
	// handler owns it from then on. It is called once the process runs.
	Attach(app policy.App, hub *os.File)
	// Detach says that process has ended (always after its Attach).
	Detach(appID string)
}

// Config is what New needs. Launcher and Log are required.
type Config struct {
	Launcher Launcher
	// Links gets each process's hub; nil closes the hubs.
	Links LinkHandler
	Dirs  policy.Dirs
	// BaseEnv is the daemon's environment; the jail scrubs it.
	BaseEnv []string
	Log     *zap.Logger
	// StopGrace is the time between SIGTERM and SIGKILL (default 5s).
	StopGrace time.Duration
	// StartTimeout bounds how long a started process may take to report
	// that its jail is in place and its program runs (default 30s). A
	// process that has not reported by then has its process group killed
	// and the app fails with a reason saying so.
	StartTimeout time.Duration
	// LogLines is the size of each app's output ring (default 1000 lines
	// of at most 4 KiB each).
	LogLines int
	// Now is the supervisor's clock (default time.Now): of the restart
	// policy, of states' and log lines' times, and of how long a
	// LinkHandler call took.
	Now func() time.Time
	// Publish, when set, is handed every event in the step that makes
	// it: a state move under the supervisor's lock, before the move's
	// caller hears of it; a line under its app's ring lock. It must not
	// block nor call the Supervisor.
	Publish func(Event)
	// Strictness is the daemon's jail strictness (jail.Config's), which
	// an entry's sandbox.strictness overrides: a strict app does not start
	// without every limit its entry asks for (limits.go).
	Strictness jail.Strictness
}

// AppStatus is an app's state as status reports it.
type AppStatus struct {
	ID    string `json:"id"`
	State State  `json:"state"`
	Pid   int    `json:"pid,omitempty"`
	// Restarts counts the starts after the first since the app was added,
	// automatic or requested.
	Restarts int       `json:"restarts"`
	Since    time.Time `json:"since"`
	// Seq numbers the app's moves, rising (one count for every app, as
	// LogLine.Seq): the state event of a move carries the Seq the move
	// returned, whatever the clock did to Since.
	Seq      uint64       `json:"-"`
	LastExit *Exit        `json:"last_exit,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	Jail     *jail.Report `json:"jail,omitempty"`
	Stopper  string       `json:"stopper"` // StopperCgroup or StopperProcessGroup
	// Stale names what of the app's entry changed (ChangedJail, …) since
	// its process started, when an Apply with KeepRunning left it
	// running: the process runs its old entry until it is restarted.
	// Empty otherwise.
	Stale []string `json:"stale,omitempty"`
	// Limits says which of the entry's limits hold the running process.
	Limits *LimitsReport `json:"limits,omitempty"`
}

// Supervisor runs the apps of a manifest. Create it with New, run it with
// Run, and give it a manifest with Apply.
type Supervisor struct {
	cfg Config
	log *zap.Logger
	// logSeq numbers the apps' output lines (LogLine.Seq), stateSeq
	// their moves (AppStatus.Seq).
	logSeq, stateSeq atomic.Uint64

	spawnReqs   chan spawnRequest
	spawnStop   chan struct{}
	spawnerDone chan struct{}
	quit        chan struct{} // closed when Run's context is done
	applyMu     sync.Mutex    // one Apply at a time

	// runners counts app goroutines; io counts output readers and pidfd
	// watchers. Run waits for both.
	runners sync.WaitGroup
	io      sync.WaitGroup
	// guards ends the apps' jail guards (jail.Guard.Serve) once every app
	// was stopped; each ends by itself when its app's last process exits.
	guards     context.Context
	stopGuards context.CancelFunc

	mu      sync.Mutex
	started bool // Run was called
	closed  bool // Run's context is done: no new runners
	devMode bool
	// entries are the manifest's entries, a slice of their own that no
	// one changes: a start reads its neighbours from it, and keeps it
	// (runner.procEntries) to compare at the next Apply, shared by every
	// app instead of a copy of the others' entries each (n² of them).
	entries  []policy.App
	apps     map[string]*runner // the manifest's apps
	order    []string           // their ids, in manifest order
	removing map[*runner]struct{}
	pending  []*runner       // created before Run started
	pids     map[int]*runner // live (unreaped) process group leaders
	// spawning counts the processes being started that are not in pids
	// yet: CheckCaller does not place the daemon's children meanwhile, nor
	// does reapStrays reap them.
	spawning int

	// self and sid are the daemon's pid and session (procs.go).
	self, sid int
	// reapKick wakes the stray reaper (buffered 1): a start, or an app's
	// main process unreaped, that held it off is over.
	reapKick chan struct{}

	// launch starts processes on the spawner thread: cfg.Launcher, or a
	// test's stand-in set before Run.
	launch launchFunc
	// spec compiles a request's jail: cfg.Launcher.Spec.
	spec func(jail.Request) (jail.Spec, error)
	// cgroups is where each process gets a leaf; nil: process groups,
	// and noCgroup says why.
	cgroups  *cgroupTree
	noCgroup string
	// tasks warns of apps at their tasks_max; nil without the pids
	// controller.
	tasks *taskWatch
}

// New checks cfg and returns a Supervisor with no apps, which gives each
// app process a cgroup leaf where the daemon can (cgroup.go), and stops
// apps through their process groups where it cannot.
func New(cfg Config) (*Supervisor, error) {
	s, err := newSupervisor(cfg)
	if err != nil {
		return nil, err
	}
	s.openCgroups()
	return s, nil
}

// newSupervisor is New without cgroups: its apps are stopped through
// their process groups until openCgroups finds a tree.
func newSupervisor(cfg Config) (*Supervisor, error) {
	if cfg.Launcher == nil {
		return nil, errors.New("supervisor: Config.Launcher is nil (use jail.NewLauncher)")
	}
	if cfg.Log == nil {
		return nil, errors.New("supervisor: Config.Log is nil (pass the daemon's logger, or zap.NewNop())")
	}
	if cfg.StopGrace < 0 || cfg.StartTimeout < 0 || cfg.LogLines < 0 {
		return nil, fmt.Errorf("supervisor: negative StopGrace (%s), StartTimeout (%s) or LogLines (%d)", cfg.StopGrace, cfg.StartTimeout, cfg.LogLines)
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.LogLines == 0 {
		cfg.LogLines = DefaultLogLines
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	guards, stopGuards := context.WithCancel(context.Background())
	s := &Supervisor{
		guards:      guards,
		stopGuards:  stopGuards,
		cfg:         cfg,
		log:         cfg.Log,
		spawnReqs:   make(chan spawnRequest),
		spawnStop:   make(chan struct{}),
		spawnerDone: make(chan struct{}),
		quit:        make(chan struct{}),
		apps:        make(map[string]*runner),
		removing:    make(map[*runner]struct{}),
		pids:        make(map[int]*runner),
		self:        os.Getpid(),
		reapKick:    make(chan struct{}, 1),
	}
	sid, err := unix.Getsid(0)
	if err != nil {
		return nil, fmt.Errorf("supervisor: the daemon's session: %w", err)
	}
	s.sid = sid
	s.launch = launcherFunc(cfg.Launcher)
	s.spec = cfg.Launcher.Spec
	s.noCgroup = "the supervisor was made without cgroups"
	return s, nil
}

// openCgroups gives s the daemon's cgroup tree, when it has one it may
// write, and says which stopper its apps get.
func (s *Supervisor) openCgroups() {
	t, err := openCgroupTree(s.log)
	if err != nil {
		s.noCgroup = err.Error()
		s.log.Info("apps are stopped through their process groups", zap.Error(err))
		return
	}
	s.cgroups = t
	s.log.Info("each app process runs in a cgroup of its own", zap.String("cgroup", t.dir),
		zap.Strings("controllers", keys(t.controllers)), zap.String("lacking", t.lacking))
	if t.controllers["pids"] {
		if s.tasks, err = newTaskWatch(s.log, s.warnTasks); err != nil {
			s.log.Warn("apps at their tasks_max go unreported", zap.Error(err))
		}
	}
}

// warnTasks tells of an app whose forks are refused at its tasks_max:
// a log line and a warning event, once per episode (taskWatch).
func (s *Supervisor) warnTasks(r *runner, limit int) {
	text := fmt.Sprintf("tasks_max reached (%d): the app's forks and new threads fail", limit)
	s.log.Warn("app reached its tasks_max", zap.String("app", r.id), zap.Int("tasks_max", limit))
	s.mu.Lock()
	st := r.status
	s.publish(Event{Kind: KindWarning, State: &st, Warning: text})
	s.mu.Unlock()
}

// limitsLack says why some limits have no controller, for an error.
func (s *Supervisor) limitsLack() string {
	if s.cgroups != nil {
		return s.cgroups.lacking
	}
	return s.noCgroup
}

// stopper is what stops this supervisor's apps.
func (s *Supervisor) stopper() string {
	if s.cgroups != nil {
		return StopperCgroup
	}
	return StopperProcessGroup
}

// Run owns the spawner thread and every goroutine of the supervisor. It
// returns once ctx is done and every app has been stopped (SIGTERM, then
// SIGKILL after StopGrace).
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("supervisor: Run called twice")
	}
	s.started = true
	// The apps' orphans are re-parented to the daemon, not to init: it
	// finds them (the control socket's peer check, a stop) and reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		s.log.Warn("cannot become the apps' subreaper: a process of an app whose parent died is init's, and out of reach", zap.Error(err))
	}
	reaperStop, reaperDone := make(chan struct{}), make(chan struct{})
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	go s.reaper(sigchld, reaperStop, reaperDone)
	go spawner(s.launch, s.spawnReqs, s.spawnStop, s.spawnerDone)
	if s.tasks != nil {
		s.io.Add(1)
		go func() {
			defer s.io.Done()
			s.tasks.run()
		}()
	}
	for _, r := range s.pending {
		s.launchLocked(r)
	}
	s.pending = nil
	s.mu.Unlock()

	<-ctx.Done()

	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	s.runners.Wait()
	signal.Stop(sigchld)
	close(reaperStop)
	<-reaperDone
	if s.tasks != nil {
		s.tasks.close()
	}
	s.stopGuards()
	close(s.spawnStop)
	<-s.spawnerDone
	s.io.Wait()
	if s.cgroups != nil {
		s.cgroups.close()
	}
	return nil
}

// spawnedLocked counts a start's process as in the books, or gone; the
// last one lets the stray reaper go on.
func (s *Supervisor) spawnedLocked() {
	s.spawning--
	if s.spawning == 0 {
		s.kickReaper()
	}
}

// kickReaper has the stray reaper look again if it left zombies for later.
func (s *Supervisor) kickReaper() {
	select {
	case s.reapKick <- struct{}{}:
	default:
	}
}

// reaper reaps the apps' strays (reapStrays) when a child of the daemon
// exits, and once more when a start or an unreaped main process that
// held it off is over, until stop; then once more.
func (s *Supervisor) reaper(sigchld <-chan os.Signal, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	later := false
	for {
		select {
		case <-sigchld:
			later = s.reapStrays()
		case <-s.reapKick:
			if later {
				later = s.reapStrays()
			}
		case <-stop:
			s.reapStrays()
			return
		}
	}
}

func (s *Supervisor) launchLocked(r *runner) {
	s.runners.Add(1)
	go func() {
		defer s.runners.Done()
		r.run()
	}()
}

// Start starts an app and returns once it runs or has failed to start
// (then with an error wrapping ErrStartFailed). An app already running is
// left alone.
func (s *Supervisor) Start(ctx context.Context, id string) (AppStatus, error) {
	return s.command(ctx, id, cmdStart)
}

// Stop stops an app (SIGTERM to its process group, SIGKILL after
// StopGrace) and returns once it has stopped. A pending automatic restart
// is cancelled.
func (s *Supervisor) Stop(ctx context.Context, id string) (AppStatus, error) {
	return s.command(ctx, id, cmdStop)
}

// Restart stops the app if it runs, then starts it, with a fresh restart
// policy history.
func (s *Supervisor) Restart(ctx context.Context, id string) (AppStatus, error) {
	return s.command(ctx, id, cmdRestart)
}

func (s *Supervisor) command(ctx context.Context, id string, kind cmdKind) (AppStatus, error) {
	s.mu.Lock()
	r := s.apps[id]
	s.mu.Unlock()
	if r == nil {
		return AppStatus{}, fmt.Errorf("%s %s: %w", kind, id, ErrUnknownApp)
	}
	c := command{kind: kind, reply: make(chan cmdResult, 1)}
	select {
	case r.cmds <- c:
	case <-r.done:
		return AppStatus{}, fmt.Errorf("%s %s: %w", kind, id, s.goneErr())
	case <-ctx.Done():
		return AppStatus{}, fmt.Errorf("%s %s: %w", kind, id, ctx.Err())
	}
	select {
	case res := <-c.reply:
		return res.status, res.err
	case <-ctx.Done():
		return AppStatus{}, fmt.Errorf("%s %s: still in progress, stopped waiting: %w", kind, id, ctx.Err())
	}
}

// goneErr is why a runner is gone: removed from the manifest, or the
// supervisor shut down.
func (s *Supervisor) goneErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrShutdown
	}
	return ErrUnknownApp
}

// Status returns the state of the app id, or of every app in manifest
// order when id is "": a copy of what the runners keep up to date, with
// no file read (Usage reads the counters).
func (s *Supervisor) Status(id string) ([]AppStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != "" {
		r, ok := s.apps[id]
		if !ok {
			return nil, fmt.Errorf("status %s: %w", id, ErrUnknownApp)
		}
		return []AppStatus{r.shownLocked()}, nil
	}
	out := make([]AppStatus, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.apps[id].shownLocked())
	}
	return out, nil
}

// Usage reads what the leaf of the app id counts now, with no lock held:
// nil when its process runs in no leaf (stopped, or not in a cgroup) or
// the leaf went meanwhile. The counters are read only when someone asks,
// a few files an app (docs/limits.md), so that a status of many apps
// costs none of them.
func (s *Supervisor) Usage(id string) (*Usage, error) {
	s.mu.Lock()
	r, ok := s.apps[id]
	var leaf string
	if ok {
		leaf = r.leafPath
	}
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("usage %s: %w", id, ErrUnknownApp)
	}
	if leaf == "" {
		return nil, nil
	}
	return readUsage(leaf, s.cfg.Now()), nil
}

// Entry returns the manifest entry of the app id and the manifest's
// developer mode: what its next start compiles its jail from (octosupctl
// jail shows that). ok is false when the app is not in the manifest.
func (s *Supervisor) Entry(id string) (app policy.App, developerMode, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.apps[id]
	if !ok {
		return policy.App{}, false, false
	}
	return r.entry, s.devMode, true
}

// Entries returns the manifest's entries, in its order: the neighbours
// a jail spec is compiled against (jail.Request.Neighbours). The slice
// is shared: the caller only reads it.
func (s *Supervisor) Entries() []policy.App {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries
}

// Logs returns up to n of the app's last output lines, oldest first (all
// that are kept when n <= 0).
func (s *Supervisor) Logs(id string, n int) ([]LogLine, error) {
	logs, err := s.logsOf(id)
	if err != nil {
		return nil, err
	}
	return logs.last(n), nil
}

// FollowLogs hands join the last n lines of app id (all when n <= 0)
// under the app's ring lock: Publish is handed every line after those,
// and no line before them, once join returns. join must not block nor
// call the Supervisor.
func (s *Supervisor) FollowLogs(id string, n int, join func([]LogLine)) error {
	logs, err := s.logsOf(id)
	if err != nil {
		return err
	}
	logs.follow(n, join)
	return nil
}

// logsOf is app id's output ring.
func (s *Supervisor) logsOf(id string) (*ring, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.apps[id]
	if !ok {
		return nil, fmt.Errorf("logs %s: %w", id, ErrUnknownApp)
	}
	return r.logs, nil
}

// publish hands ev to Publish (when set), in the step that makes it.
func (s *Supervisor) publish(ev Event) {
	if s.cfg.Publish != nil {
		s.cfg.Publish(ev)
	}
}
