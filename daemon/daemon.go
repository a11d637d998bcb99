package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"octosup/jail"
	"octosup/policy"
	"octosup/supervisor"
)

// Config is what Run needs. The zero value (with Log set) runs the
// daemon of the environment: default manifest, default socket.
type Config struct {
	// ManifestPath is the manifest; "" means
	// $XDG_CONFIG_HOME/octosup/native-apps.json.
	ManifestPath string
	// SocketPath is the control socket when systemd passes none; ""
	// means $XDG_RUNTIME_DIR/octosup/control.sock.
	SocketPath string
	// Getenv resolves the XDG places; nil means os.Getenv.
	Getenv func(string) string
	// Environ is the environment apps start from (before the scrub); nil
	// means os.Environ().
	Environ []string
	Log     *zap.Logger
	// StopGrace is the time between SIGTERM and SIGKILL of a stop; 0
	// leaves the supervisor's default.
	StopGrace time.Duration
	// Jail configures the jail launcher; its Log defaults to the daemon's.
	Jail jail.Config
	// LogLines is the size of each app's log ring; 0 leaves the
	// supervisor's default.
	LogLines int
	// Setup runs once the server exists and before it serves (tests and
	// benchmarks that run a daemon in process learn so when it is
	// listening).
	Setup func(ctx context.Context, s *Server, apps Apps) error
}

// Run is the daemon: it returns when ctx is done (after stopping every
// app) or when it cannot go on. A manifest that does not load is an error
// before anything starts; it wraps the *policy.ValidationError.
func Run(ctx context.Context, cfg Config) error {
	d, m, err := load(cfg)
	if err != nil {
		return err
	}
	// The state store before anything else: a second daemon on the same
	// state stops here, having touched nothing.
	if d.links, err = openPeerLink(d.dirs, d.log.Named("peer")); err != nil {
		return err
	}
	// Deferred first, so it runs last: after every app was stopped.
	defer d.links.Close()
	d.links.m.SetManifest(m)
	if err := d.newSupervisor(); err != nil {
		return err
	}
	ln, err := d.listen(ctx)
	if err != nil {
		return err
	}
	srv := d.newServer()
	if cfg.Setup != nil {
		if err := cfg.Setup(ctx, srv, d.apps); err != nil {
			ln.Close()
			return fmt.Errorf("set up the control server: %w", err)
		}
	}
	return d.serve(ctx, m, srv, ln)
}

// instance is one Run's parts, as its steps make them.
type instance struct {
	cfg          Config
	log          *zap.Logger
	dirs         policy.Dirs
	environ      []string
	manifestPath string
	links        *peerLink
	// One launcher: the jail op compiles specs with the very settings
	// (strictness, narrowing, spawn path) the apps start under.
	launcher *jail.Launcher
	apps     Apps
	runApps  func(context.Context) error
	reloadMu sync.Mutex // one reload at a time
	// srv is the control server once it exists: the supervisor's events
	// go to it (supervisor.Config.Publish). Before, no client can be
	// connected, and they go nowhere.
	srv atomic.Pointer[Server]
	// stateChanged is poked by every state event: keepStatus's cue.
	stateChanged chan struct{}
}

// load resolves the environment's places and loads the manifest.
func load(cfg Config) (*instance, *policy.Manifest, error) {
	d := &instance{cfg: cfg, log: cfg.Log, environ: cfg.Environ, stateChanged: make(chan struct{}, 1)}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if d.environ == nil {
		d.environ = os.Environ()
	}
	var err error
	if d.dirs, err = policy.DirsFromEnv(getenv); err != nil {
		return nil, nil, err
	}
	d.manifestPath = cfg.ManifestPath
	if d.manifestPath == "" {
		d.manifestPath = d.dirs.ManifestPath()
	}
	m, err := loadManifest(d.manifestPath, d.dirs)
	if err != nil {
		return nil, nil, err
	}
	d.log.Info("manifest loaded", zap.String("path", d.manifestPath), zap.Int("apps", len(m.Apps)))
	return d, m, nil
}

// newSupervisor creates the launcher and the supervisor (not yet run).
func (d *instance) newSupervisor() error {
	jcfg := d.cfg.Jail
	if jcfg.Log == nil {
		jcfg.Log = d.log.Named("jail")
	}
	d.launcher = jail.NewLauncher(jcfg)
	sup, err := supervisor.New(supervisor.Config{
		Launcher:  d.launcher,
		Links:     d.links.m,
		Dirs:      d.dirs,
		BaseEnv:   d.environ,
		Log:       d.log.Named("supervisor"),
		StopGrace: d.cfg.StopGrace,
		LogLines:  d.cfg.LogLines,
		Now:       time.Now,
		Publish: func(ev supervisor.Event) {
			if ev.Kind == supervisor.KindState {
				select {
				case d.stateChanged <- struct{}{}:
				default: // a change is already due
				}
			}
			if s := d.srv.Load(); s != nil {
				s.supervisorEvent(ev)
			}
		},
		// The limits follow the jail's strictness (docs/limits.md).
		Strictness: jcfg.Strictness,
	})
	if err != nil {
		return fmt.Errorf("create the supervisor: %w", err)
	}
	d.apps, d.runApps = sup, sup.Run
	return nil
}

// listen is the socket systemd passed, else the configured one.
func (d *instance) listen(ctx context.Context) (net.Listener, error) {
	ln, err := activated(d.log)
	if err != nil {
		return nil, err
	}
	if ln != nil {
		d.log.Info("serving the socket systemd passed", zap.String("socket", ln.Addr().String()))
		return ln, nil
	}
	path := d.cfg.SocketPath
	if path == "" {
		path = d.dirs.ControlSocket()
	}
	if ln, err = listenUnix(ctx, path, path == d.dirs.ControlSocket()); err != nil {
		return nil, err
	}
	d.log.Info("control socket", zap.String("socket", path))
	return ln, nil
}

// newServer is the control server with the peer link's ops.
func (d *instance) newServer() *Server {
	srv := NewServer(ServerConfig{
		Apps:       d.apps,
		Log:        d.log.Named("control"),
		LinkStatus: d.links.m.LinkStatus,
		Store:      d.links.storeStatus,
		JailSpec:   d.jailSpec,
		Reload:     d.reload,
	})
	d.links.register(srv)
	d.srv.Store(srv)
	return srv
}

// jailSpec is the request the supervisor makes at start, without the
// descriptors, compiled.
func (d *instance) jailSpec(id string) (jail.Spec, error) {
	entry, dev, ok := d.apps.Entry(id)
	if !ok {
		return jail.Spec{}, fmt.Errorf("jail %s: %w", id, supervisor.ErrUnknownApp)
	}
	return d.launcher.Spec(jail.Request{App: entry, Neighbours: d.apps.Entries(), DeveloperMode: dev, Dirs: d.dirs, BaseEnv: d.environ})
}

// reload re-reads the manifest and applies it.
func (d *instance) reload(ctx context.Context, opt supervisor.ApplyOptions) (int, supervisor.Applied, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	m, err := loadManifest(d.manifestPath, d.dirs)
	if err != nil {
		d.log.Warn("reload refused: the running apps are unchanged", zap.Error(err))
		return 0, supervisor.Applied{}, err
	}
	// Grants narrow at once, on the links of the processes that run now,
	// before any of them is restarted (peer.SetManifest).
	d.links.m.SetManifest(m)
	done, err := d.apps.Apply(ctx, m, opt)
	if err != nil {
		return 0, done, fmt.Errorf("apply %s: %w", d.manifestPath, err)
	}
	d.log.Info("manifest reloaded", zap.String("path", d.manifestPath), zap.Int("apps", len(m.Apps)),
		zap.Strings("added", done.Added), zap.Strings("removed", done.Removed),
		zap.Strings("restarted", changeIDs(done.Restarted)), zap.Strings("stale", changeIDs(done.Stale)),
		zap.Strings("limits_in_place", done.Limits))
	return len(m.Apps), done, nil
}

// serve runs the supervisor and the control server, starts the
// manifest's apps, tells systemd it is ready and keeps it told until ctx
// ends or a part fails. The parts are an errgroup: the first that fails
// ends the others, and its error is Run's.
func (d *instance) serve(ctx context.Context, m *policy.Manifest, srv *Server, ln net.Listener) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(rctx)
	run := func(name string, f func(context.Context) error) {
		g.Go(func() error {
			if err := f(gctx); err != nil && gctx.Err() == nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	run("supervisor", d.runApps)
	// The control socket is served while the apps start, once they are
	// the supervisor's: a client that connects at once (a socket systemd
	// holds, or octosupctl waiting for the socket) sees every app,
	// starting, never an empty list.
	serveOnce := sync.OnceFunc(func() {
		run("control socket", func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	})
	_, err := d.apps.Apply(gctx, m, supervisor.ApplyOptions{Swapped: serveOnce})
	serveOnce()
	if err != nil && gctx.Err() == nil {
		cancel()
		g.Wait()
		return fmt.Errorf("start the manifest's apps: %w", err)
	}
	// Asked to stop (or a part failed) while starting: shut down without
	// READY=1.
	if gctx.Err() == nil {
		d.ready()
		run("status", func(ctx context.Context) error {
			keepStatus(ctx, d.log, d.apps, d.stateChanged, d.links.storeNotes)
			return nil
		})
		if wd := watchdogInterval(d.log); wd > 0 {
			run("watchdog", func(ctx context.Context) error { watchdog(ctx, d.log, d.watched(), wd/2, wd/4); return nil })
		}
		<-gctx.Done()
	}
	notify(d.log, "STOPPING=1")
	d.log.Info("stopping: every app is being stopped")
	cancel()
	return g.Wait()
}

// ready tells systemd the daemon is ready, with where the apps are.
func (d *instance) ready() {
	// The autostart apps' starts (compiling each jail, reading the
	// manifest, the apps' first output) leave garbage several times the
	// live heap, which the runtime would hand back to the kernel only
	// over minutes: returned at once, an idle daemon's memory is what it
	// holds (500 idle apps: 103 KiB of RSS an app at READY without it,
	// measured by make bench). One collection, before READY=1.
	debug.FreeOSMemory()
	all, _ := d.apps.Status("")
	line := statusLine(all, d.links.storeNotes())
	notify(d.log, "READY=1\nSTATUS="+line)
	d.log.Info("ready", zap.String("status", line))
}

// watched are the parts the watchdog hears from before each ping.
func (d *instance) watched() []watchedPart {
	return []watchedPart{
		{"supervisor", d.apps.Ping},
		{"peer links", d.links.m.Ping},
	}
}

// changeIDs are the apps of a reload's changes, for its log line.
func changeIDs(list []supervisor.AppChange) []string {
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, c.ID)
	}
	return out
}

// ManifestError is the error of a manifest that did not load: Err is the
// read error or the *policy.ValidationError with every problem.
type ManifestError struct {
	Path string
	Err  error
}

// Error says what to do about a missing manifest in words true of every
// place it is read: a reload reads the path the daemon started with (only
// octosupd run takes --config, and says so itself).
func (e *ManifestError) Error() string {
	if errors.Is(e.Err, os.ErrNotExist) {
		return fmt.Sprintf("no manifest at %s: create one (%s is a start)", e.Path, exampleManifest())
	}
	return fmt.Sprintf("manifest %s: %v", e.Path, e.Err)
}

// exampleManifest is where the example manifest is: the one make install
// put in the doc directory next to the binary's (PREFIX/bin →
// PREFIX/share/doc/octosup), else the source tree's.
func exampleManifest() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(filepath.Dir(exe)), "share", "doc", "octosup", "configs", "native-apps.example.json")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "configs/native-apps.example.json in octosup's source"
}

func (e *ManifestError) Unwrap() error { return e.Err }

// loadManifest loads and validates the manifest, with what it grants
// checked against the daemon's own directories.
func loadManifest(path string, dirs policy.Dirs) (*policy.Manifest, error) {
	m, err := policy.Load(path)
	if err == nil {
		err = m.CheckPlaces(dirs)
		var verr *policy.ValidationError
		if errors.As(err, &verr) {
			verr.File = path
		}
	}
	if err != nil {
		return nil, &ManifestError{Path: path, Err: err}
	}
	return m, nil
}

// statusDelay is how long keepStatus lets state changes gather before it
// sends STATUS=. The line is for a person reading systemctl status;
// answering each change at once would put a status of every app and a
// datagram to systemd next to each event on its way to subscribers (a
// crash's stopped event among them), and an autostart of n apps would
// cost n² status entries.
const statusDelay = 50 * time.Millisecond

// keepStatus keeps systemd's STATUS= line current as apps change state:
// at most statusDelay after a change (changed, which the supervisor's
// Publish pokes on every state event), the line says where the apps are,
// and what storeNotes says of the state store then.
func keepStatus(ctx context.Context, log *zap.Logger, apps Apps, changed <-chan struct{}, storeNotes func() []string) {
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(statusDelay):
		}
		all, err := apps.Status("")
		if err != nil {
			continue
		}
		if s := statusLine(all, storeNotes()); s != last {
			last = s
			notify(log, "STATUS="+s)
		}
	}
}

// watchedPart is one part of the daemon the watchdog hears from: ping
// returns nil once the part answered within ctx.
type watchedPart struct {
	name string
	ping func(ctx context.Context) error
}

// watchdog pings systemd every interval, but only once every part
// answered within bound: a daemon with a wedged part (the supervisor's
// spawner thread or an app's runner, the peer links) stops pinging, says
// which part, and systemd restarts it (WatchdogSec= of octosupd.service).
// bound is under half of WatchdogSec, and every is half: a ping follows
// the one before within every+bound, less than WatchdogSec.
func watchdog(ctx context.Context, log *zap.Logger, parts []watchedPart, every, bound time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if stuck := checkParts(ctx, parts, bound); len(stuck) > 0 {
				if ctx.Err() != nil {
					return
				}
				log.Error("watchdog: not pinging systemd, which restarts the daemon unless this part answers again", zap.Strings("stuck", stuck), zap.Duration("bound", bound))
				continue
			}
			notify(log, "WATCHDOG=1")
		}
	}
}

// checkParts pings every part, each within bound, and says which did not
// answer.
func checkParts(ctx context.Context, parts []watchedPart, bound time.Duration) []string {
	var stuck []string
	for _, p := range parts {
		pctx, cancel := context.WithTimeout(ctx, bound)
		err := p.ping(pctx)
		cancel()
		if err != nil {
			stuck = append(stuck, p.name+": "+err.Error())
		}
	}
	return stuck
}
