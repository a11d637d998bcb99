package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

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
	// Setup runs once the server exists and before it serves: the place
	// to register more ops (Server.Handle) and topics (Server.AddTopic)
	// and to keep the Server for Publish.
	Setup func(ctx context.Context, s *Server, apps Apps) error

	// newApps replaces the real supervisor in tests.
	newApps func(supervisor.Config) (Apps, func(context.Context) error, error)
	// ready is told when the daemon told systemd READY=1 (tests).
	ready func()
}

// Run is the daemon: it returns when ctx is done (after stopping every
// app) or when it cannot go on. A manifest that does not load is an error
// before anything starts; it wraps the *policy.ValidationError.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	environ := cfg.Environ
	if environ == nil {
		environ = os.Environ()
	}
	dirs, err := policy.DirsFromEnv(getenv)
	if err != nil {
		return err
	}
	manifestPath := cfg.ManifestPath
	if manifestPath == "" {
		manifestPath = dirs.ManifestPath()
	}
	m, err := loadManifest(manifestPath, dirs)
	if err != nil {
		return err
	}
	log.Info("manifest loaded", zap.String("path", manifestPath), zap.Int("apps", len(m.Apps)))

	// The state store before anything else: a second daemon on the same
	// state stops here, having touched nothing.
	links, err := openPeerLink(dirs, log.Named("peer"))
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: after every app was stopped.
	defer links.Close()
	links.m.SetManifest(m)

	jcfg := cfg.Jail
	if jcfg.Log == nil {
		jcfg.Log = log.Named("jail")
	}
	newApps := cfg.newApps
	if newApps == nil {
		newApps = newSupervisor
	}
	// One launcher: the jail op compiles specs with the very settings
	// (strictness, narrowing, spawn path) the apps start under.
	launcher := jail.NewLauncher(jcfg)
	apps, runApps, err := newApps(supervisor.Config{
		Launcher:  launcher,
		Links:     links.m,
		Dirs:      dirs,
		BaseEnv:   environ,
		Log:       log.Named("supervisor"),
		StopGrace: cfg.StopGrace,
		LogLines:  cfg.LogLines,
		Now:       time.Now,
		// The limits follow the jail's strictness (docs/limits.md).
		Strictness: jcfg.Strictness,
	})
	if err != nil {
		return fmt.Errorf("create the supervisor: %w", err)
	}

	ln, err := activated(log)
	if err != nil {
		return err
	}
	if ln != nil {
		log.Info("serving the socket systemd passed", zap.String("socket", ln.Addr().String()))
	} else {
		path := cfg.SocketPath
		if path == "" {
			path = dirs.ControlSocket()
		}
		ln, err = listenUnix(ctx, path, path == dirs.ControlSocket())
		if err != nil {
			return err
		}
		log.Info("control socket", zap.String("socket", path))
	}

	var reloadMu sync.Mutex
	srv := NewServer(ServerConfig{
		Apps:       apps,
		Log:        log.Named("control"),
		LinkStatus: links.linkStatus,
		Store:      links.storeStatus,
		JailSpec: func(id string) (jail.Spec, error) {
			entry, dev, ok := apps.Entry(id)
			if !ok {
				return jail.Spec{}, fmt.Errorf("jail %s: %w", id, supervisor.ErrUnknownApp)
			}
			// The request the supervisor makes at start, without the
			// descriptors.
			return launcher.Spec(jail.Request{App: entry, Neighbours: apps.Entries(id), DeveloperMode: dev, Dirs: dirs, BaseEnv: environ})
		},
		Reload: func(ctx context.Context, opt supervisor.ApplyOptions) (int, supervisor.Applied, error) {
			reloadMu.Lock()
			defer reloadMu.Unlock()
			m, err := loadManifest(manifestPath, dirs)
			if err != nil {
				log.Warn("reload refused: the running apps are unchanged", zap.Error(err))
				return 0, supervisor.Applied{}, err
			}
			// Grants narrow at once, on the links of the processes that
			// run now, before any of them is restarted (peer.SetManifest).
			links.m.SetManifest(m)
			done, err := apps.Apply(ctx, m, opt)
			if err != nil {
				return 0, done, fmt.Errorf("apply %s: %w", manifestPath, err)
			}
			log.Info("manifest reloaded", zap.String("path", manifestPath), zap.Int("apps", len(m.Apps)),
				zap.Strings("added", done.Added), zap.Strings("removed", done.Removed),
				zap.Strings("restarted", changeIDs(done.Restarted)), zap.Strings("stale", changeIDs(done.Stale)),
				zap.Strings("limits_in_place", done.Limits))
			return len(m.Apps), done, nil
		},
	})
	links.register(srv)
	if cfg.Setup != nil {
		if err := cfg.Setup(ctx, srv, apps); err != nil {
			ln.Close()
			return fmt.Errorf("set up the control server: %w", err)
		}
	}

	// Everything below stops when rctx is done: ctx's end, or a part
	// that failed.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(rctx); err != nil && rctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	run("supervisor", runApps)
	run("control socket", func(ctx context.Context) error { return srv.Serve(ctx, ln) })

	if _, err := apps.Apply(rctx, m, supervisor.ApplyOptions{}); err != nil {
		if rctx.Err() == nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("start the manifest's apps: %w", err)
		}
		// Asked to stop (or a part failed) while starting: shut down as
		// below, without READY=1.
	}
	if rctx.Err() != nil {
		notify(log, "STOPPING=1")
		cancel()
		wg.Wait()
		close(errs)
		return joinErrs(errs)
	}
	all, _ := apps.Status("")
	line := statusLine(all, links.storeNotes())
	notify(log, "READY=1\nSTATUS="+line)
	log.Info("ready", zap.String("status", line))
	if cfg.ready != nil {
		cfg.ready()
	}

	run("status", func(ctx context.Context) error { keepStatus(ctx, log, apps, links.storeNotes); return nil })
	if wd := watchdogInterval(log); wd > 0 {
		run("watchdog", func(ctx context.Context) error { watchdog(ctx, log, apps, wd/2); return nil })
	}

	<-rctx.Done()
	notify(log, "STOPPING=1")
	log.Info("stopping: every app is being stopped")
	cancel()
	wg.Wait()
	close(errs)
	return joinErrs(errs)
}

// changeIDs are the apps of a reload's changes, for its log line.
func changeIDs(list []supervisor.AppChange) []string {
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, c.ID)
	}
	return out
}

func joinErrs(errs <-chan error) error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func newSupervisor(cfg supervisor.Config) (Apps, func(context.Context) error, error) {
	s, err := supervisor.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return SupervisorApps(s), s.Run, nil
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
		return fmt.Sprintf("no manifest at %s: create one (configs/native-apps.example.json is a start)", e.Path)
	}
	return fmt.Sprintf("manifest %s: %v", e.Path, e.Err)
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
// at most statusDelay after a change, the line says where the apps are,
// and what storeNotes says of the state store then.
func keepStatus(ctx context.Context, log *zap.Logger, apps Apps, storeNotes func() []string) {
	last := ""
	update := func() {
		all, err := apps.Status("")
		if err != nil {
			return
		}
		if s := statusLine(all, storeNotes()); s != last {
			last = s
			notify(log, "STATUS="+s)
		}
	}
	for ctx.Err() == nil {
		// State events only: a chatty app's log lines must not fill this
		// queue and cost a resubscription.
		sub := apps.Subscribe(256, supervisor.KindState)
		func() {
			defer sub.Close()
			var (
				timer *time.Timer
				due   <-chan time.Time // armed by a change, nil otherwise
			)
			defer func() {
				if timer != nil {
					timer.Stop()
				}
			}()
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-sub.Events():
					if !ok {
						return
					}
					if due == nil {
						timer = time.NewTimer(statusDelay)
						due = timer.C
					}
				case <-due:
					timer, due = nil, nil
					update()
				}
			}
		}()
		if !errors.Is(sub.Err(), supervisor.ErrSlowSubscriber) {
			return
		}
		// Changes may have gone with the dropped queue.
		update()
	}
}

// watchdogInterval is systemd's WatchdogSec for this process, 0 when off.
func watchdogInterval(log *zap.Logger) time.Duration {
	wd, err := sdWatchdogEnabled()
	if err != nil {
		log.Warn("watchdog settings", zap.Error(err))
		return 0
	}
	return wd
}

// watchdog pings systemd every interval, but only while the supervisor
// answers: a daemon whose supervisor hangs is restarted by systemd.
func watchdog(ctx context.Context, log *zap.Logger, apps Apps, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := apps.Status(""); err != nil {
				log.Warn("watchdog: the supervisor does not answer; not pinging", zap.Error(err))
				continue
			}
			notify(log, "WATCHDOG=1")
		}
	}
}
