package daemon

import (
	"cmp"
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
// environment's daemon: default manifest, default socket.
type Config struct {
	// ManifestPath "" means $XDG_CONFIG_HOME/octosup/native-apps.json.
	ManifestPath string
	// SocketPath is used when systemd passes no socket; "" means
	// $XDG_RUNTIME_DIR/octosup/control.sock.
	SocketPath string
	// Getenv resolves the XDG places; nil means os.Getenv.
	Getenv func(string) string
	// Environ is what apps start from (before the scrub); nil means
	// os.Environ().
	Environ []string
	Log     *zap.Logger
	// StopGrace is a stop's SIGTERM-to-SIGKILL time; 0: the supervisor's.
	StopGrace time.Duration
	// Jail configures the launcher; its Log defaults to the daemon's.
	Jail jail.Config
	// LogLines sizes each app's log ring; 0: the supervisor's default.
	LogLines int
	// Setup runs once the server exists, before it serves (how in-process
	// tests and benchmarks learn it is listening).
	Setup func(ctx context.Context, s *Server, apps Apps) error
}

// Run is the daemon: it returns when ctx is done (after stopping every
// app) or when it cannot go on. A manifest that does not load is an error
// before anything starts, wrapping the *policy.ValidationError.
func Run(ctx context.Context, cfg Config) error {
	d, m, err := load(cfg)
	if err != nil {
		return err
	}
	// The store first: a second daemon on this state stops here.
	if d.links, err = openPeerLink(d.dirs, d.log.Named("peer")); err != nil {
		return err
	}
	defer d.links.Close() // deferred first: runs after every app was stopped
	d.links.m.SetManifest(m)
	if err := d.newSupervisor(); err != nil {
		return err
	}
	ln, err := d.listen(ctx)
	if err != nil {
		return err
	}
	// The control server, with the peer link's ops.
	srv := NewServer(ServerConfig{Apps: d.apps, Log: d.log.Named("control"), LinkStatus: d.links.m.LinkStatus,
		Store: d.links.storeStatus, JailSpec: d.jailSpec, Reload: d.reload})
	d.links.register(srv)
	d.srv.Store(srv)
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
	// One launcher: the jail op compiles with the apps' very settings.
	launcher *jail.Launcher
	apps     Apps
	runApps  func(context.Context) error
	reloadMu sync.Mutex // one reload at a time
	// srv gets the supervisor's events once it exists; before, no client
	// is connected.
	srv          atomic.Pointer[Server]
	stateChanged chan struct{} // poked by every state event: keepStatus's cue
}

// load resolves the environment's places and loads the manifest.
func load(cfg Config) (*instance, *policy.Manifest, error) {
	d := &instance{cfg: cfg, log: cmp.Or(cfg.Log, zap.NewNop()), environ: cfg.Environ, stateChanged: make(chan struct{}, 1)}
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
	d.manifestPath = cmp.Or(cfg.ManifestPath, d.dirs.ManifestPath())
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
	jcfg.Log = cmp.Or(jcfg.Log, d.log.Named("jail"))
	d.launcher = jail.NewLauncher(jcfg)
	sup, err := supervisor.New(supervisor.Config{
		Launcher: d.launcher, Links: d.links.m, Dirs: d.dirs, BaseEnv: d.environ, Log: d.log.Named("supervisor"),
		StopGrace: d.cfg.StopGrace, LogLines: d.cfg.LogLines, Now: time.Now,
		Strictness: jcfg.Strictness, // the limits follow it (docs/limits.md)
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
	path := cmp.Or(d.cfg.SocketPath, d.dirs.ControlSocket())
	if ln, err = listenUnix(ctx, path, path == d.dirs.ControlSocket()); err != nil {
		return nil, err
	}
	d.log.Info("control socket", zap.String("socket", path))
	return ln, nil
}

// jailSpec compiles the request the supervisor makes at start, but for
// the descriptors.
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
	// Grants narrow on the running processes' links before any restart.
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
// ends or a part fails; the first part's error is Run's.
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
	// Served once the apps are the supervisor's, while they start: an
	// early client (socket activation, octosupctl waiting) sees every
	// app, never an empty list.
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
	if gctx.Err() == nil { // else stopped while starting: no READY=1
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

func (d *instance) watched() []watchedPart {
	return []watchedPart{
		{"supervisor", d.apps.Ping},
		{"peer links", d.links.m.Ping},
	}
}

func changeIDs(list []supervisor.AppChange) []string {
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, c.ID)
	}
	return out
}

// ManifestError is a manifest that did not load: Err is the read error
// or the *policy.ValidationError.
type ManifestError struct {
	Path string
	Err  error
}

// Error says what to do about a missing manifest in words true at start
// and at reload alike (only octosupd run takes --config, and says so).
func (e *ManifestError) Error() string {
	if errors.Is(e.Err, os.ErrNotExist) {
		return fmt.Sprintf("no manifest at %s: create one (%s is a start)", e.Path, exampleManifest())
	}
	return fmt.Sprintf("manifest %s: %v", e.Path, e.Err)
}

func (e *ManifestError) Unwrap() error { return e.Err }

// exampleManifest is make install's example manifest next to the binary
// (PREFIX/bin → PREFIX/share/doc/octosup), else the source tree's.
func exampleManifest() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(filepath.Dir(exe)), "share", "doc", "octosup", "configs", "native-apps.example.json")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "configs/native-apps.example.json in octosup's source"
}

// loadManifest loads and validates the manifest, its grants checked
// against the daemon's own directories.
func loadManifest(path string, dirs policy.Dirs) (*policy.Manifest, error) {
	m, err := policy.Load(path)
	if err == nil {
		err = m.CheckPlaces(dirs)
		if verr, ok := errors.AsType[*policy.ValidationError](err); ok {
			verr.File = path
		}
	}
	if err != nil {
		return nil, &ManifestError{Path: path, Err: err}
	}
	return m, nil
}

// statusDelay gathers state changes before a STATUS=, which is for a
// person: one per change would put a status of every app and a datagram
// next to each event, and an autostart of n apps would cost n² entries.
const statusDelay = 50 * time.Millisecond

// keepStatus sends STATUS= (the apps and storeNotes) statusDelay after
// each poke of changed, when the line changed.
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

// watchedPart is a part the watchdog hears from: ping returns nil once
// the part answered within ctx.
type watchedPart struct {
	name string
	ping func(ctx context.Context) error
}

// watchdog pings systemd each interval every, once each part answered
// within bound: a wedged part stops the pings, is logged, and systemd
// restarts the daemon. With every = WatchdogSec/2 and bound under that,
// pings come within every+bound < WatchdogSec.
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

// ready tells systemd the daemon is ready, with where the apps are.
func (d *instance) ready() {
	// Autostart leaves garbage several times the live heap, which the
	// runtime returns only over minutes (500 idle apps: 103 KiB RSS an
	// app at READY without this, make bench). One collection, now.
	debug.FreeOSMemory()
	all, _ := d.apps.Status("")
	line := statusLine(all, d.links.storeNotes())
	notify(d.log, "READY=1\nSTATUS="+line)
	d.log.Info("ready", zap.String("status", line))
}

// checkParts says which parts did not answer within bound.
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
