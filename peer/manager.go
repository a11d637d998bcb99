package peer

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"octosup/control"
	"octosup/peer/internal/frame"
	"octosup/policy"
)

// Defaults of Config.
const (
	DefaultConsentTimeout      = 2 * time.Minute
	DefaultKernelTimeout       = time.Minute
	DefaultQueueFrames         = 1024
	DefaultQueueBytes          = 8 << 20
	DefaultWriteTimeout        = 10 * time.Second
	DefaultMaxOpenRequests     = 64
	DefaultMaxContexts         = 256
	DefaultMaxCalls            = 256
	DefaultMaxPendingApprovals = 16       // host sheets: more than a person reads
	DefaultMaxSessions         = 1000     // per app and account
	DefaultMaxTurns            = 1000     // per session
	DefaultMaxStoreBytes       = 64 << 20 // per app
	DefaultUnaskedRate         = 4 << 20  // with unaskedLineCost, 2,048 small lines or 4 MiB a second
	// A turn keeps at most maxTurnEvents and maxTurnBytes for its history
	// (one modest store value); past them it is marked truncated.
	maxTurnEvents = 512
	maxTurnBytes  = 256 << 10
)

// Config sets up a Manager. Store is required; zero durations and sizes
// take the defaults.
type Config struct {
	Store  Store  // a *policy.Store
	Events Events // nil drops approvals and pass-through frames
	Log    *zap.Logger

	ConsentTimeout time.Duration // for the consent prompt, then consent_required
	KernelTimeout  time.Duration // for the kernel's reply (not events), then timeout
	// QueueFrames and QueueBytes bound an app's write queue. Frames from
	// outside the link (kernel events, tool calls, app.send) may fill 3/4,
	// then are refused ErrQueueFull; an app that fills the rest (what the
	// daemon owes it) is disconnected.
	QueueFrames, QueueBytes int
	WriteTimeout            time.Duration // a hub write blocked longer disconnects the app
	MaxOpenRequests         int           // per link; past it the hub is not read
	MaxContexts             int           // per link; past it session.open fails quota_exceeded
	// MaxSessions (per account), MaxTurns (per session; one more drops the
	// oldest) and MaxStoreBytes bound an app's store records. At a limit
	// its oldest closed untitled sessions are evicted; with none,
	// session.open fails quota_exceeded and a turn is not recorded.
	MaxSessions, MaxTurns int
	MaxStoreBytes         int64
	MaxPendingApprovals   int              // an app's open host sheets; past it a call ends quota_exceeded
	MaxCalls              int              // an app's outstanding tool calls; past it ErrLimit
	Nonce                 string           // prefixes context ids; random when empty
	Now                   func() time.Time // stamps records; deadlines use the monotonic clock
	MaxToolTimeout        time.Duration    // the longest timeout_ms a tool call may ask
	RelayQueue            int              // callbacks kept while no ToolRelay is installed
	DuplicateWindow       int              // finished call ids per app still refused as duplicates
	// UnaskedRate bounds, in bytes a second, the lines the daemon handles
	// unasked (pass-through and bad frames, requests answered at once or
	// by the store, results of calls not sent), each costing its bytes plus
	// unaskedLineCost; past it the hub is read no faster, so an app whose
	// CPU is capped cannot have the daemon parse and log for it without
	// end. MaxOpenRequests and the kernel bound the rest.
	UnaskedRate int
	AuditKeep   int // entries the store keeps (0: policy.DefaultAuditKeep)
	// AuditInterval: how long an audit batch waits after its first entry,
	// i.e. what a SIGKILL may lose, against an fsync per batch.
	AuditInterval time.Duration
}

// Events receives what the control socket publishes to subscribers.
type Events interface {
	// Approval (topic "approval"): raised (State "pending") and settled.
	Approval(Approval)
	// AppFrame (topic "app.frame"): the app's line, unchanged.
	AppFrame(app string, frame json.RawMessage)
}

// Manager runs the peer links of all apps: the supervisor's LinkHandler
// (Attach, Detach). All methods are safe for concurrent use.
type Manager struct {
	cfg                   Config
	log                   *zap.Logger
	store                 Store
	limits                policy.Limits
	pushFrames, pushBytes int // what frames from outside a link may fill of its queue

	// mu guards the fields below; a peer's step runs under it where the
	// peer must see manifests and attaches in mu's order.
	mu       sync.Mutex
	closed   bool
	manifest *policy.Manifest // the last SetManifest's (nil before): an attach gets its grants
	peers    map[string]*peer
	// kept is the consent and rules, read by New, of each app with no
	// peer yet; policyErr is why New could not read them.
	kept      map[string]appPolicy
	policyErr error

	kernel       atomic.Pointer[KernelSession] // changes under mu (nil: none)
	nextHandle   atomic.Uint64
	nextApproval atomic.Uint64

	relay  relay
	audit  *auditLog
	timers sync.WaitGroup // armed and firing deadlines (peer.after): Close waits for them
}

// New returns a Manager with every app's consent and standing rules read
// from the store, and starts its audit loop (ended by Close).
func New(cfg Config) *Manager {
	cfg.setDefaults()
	log := cfg.Log.Named("peer")
	m := &Manager{
		cfg:        cfg,
		limits:     policy.Limits{Sessions: cfg.MaxSessions, Turns: cfg.MaxTurns, Bytes: cfg.MaxStoreBytes},
		pushFrames: max(1, cfg.QueueFrames*3/4),
		pushBytes:  max(1, cfg.QueueBytes*3/4),
		log:        log,
		store:      cfg.Store,
		peers:      map[string]*peer{},
		audit:      newAuditLog(cfg.Store, cfg.AuditKeep, cfg.AuditInterval, log),
	}
	var rulesErr error
	if m.kept, m.policyErr, rulesErr = loadPolicy(cfg.Store); m.policyErr != nil {
		log.Error("read the consent decisions: every request that needs consent fails internal until the daemon is restarted", zap.Error(m.policyErr))
	}
	if rulesErr != nil {
		log.Error("read the standing rules: every host-confirmed call asks the person until the daemon is restarted", zap.Error(rulesErr))
	}
	m.relay.queue.size = cfg.RelayQueue
	m.relay.log = log
	return m
}

func (cfg *Config) setDefaults() {
	orDefault(&cfg.ConsentTimeout, DefaultConsentTimeout)
	orDefault(&cfg.KernelTimeout, DefaultKernelTimeout)
	orDefault(&cfg.QueueFrames, DefaultQueueFrames)
	orDefault(&cfg.QueueBytes, DefaultQueueBytes)
	orDefault(&cfg.WriteTimeout, DefaultWriteTimeout)
	orDefault(&cfg.MaxOpenRequests, DefaultMaxOpenRequests)
	orDefault(&cfg.MaxContexts, DefaultMaxContexts)
	orDefault(&cfg.MaxSessions, DefaultMaxSessions)
	orDefault(&cfg.MaxTurns, DefaultMaxTurns)
	orDefault(&cfg.MaxStoreBytes, DefaultMaxStoreBytes)
	orDefault(&cfg.MaxPendingApprovals, DefaultMaxPendingApprovals)
	orDefault(&cfg.MaxCalls, DefaultMaxCalls)
	orDefault(&cfg.UnaskedRate, DefaultUnaskedRate)
	orDefault(&cfg.MaxToolTimeout, DefaultMaxToolTimeout)
	orDefault(&cfg.RelayQueue, DefaultRelayQueue)
	orDefault(&cfg.DuplicateWindow, DefaultDuplicateWindow)
	orDefault(&cfg.AuditInterval, DefaultAuditInterval)
	if cfg.Nonce == "" {
		b := make([]byte, 8)
		rand.Read(b) // crypto/rand.Read never fails on Linux
		cfg.Nonce = hex.EncodeToString(b)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Events == nil {
		cfg.Events = nopEvents{}
	}
}

func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

type nopEvents struct{}

func (nopEvents) Approval(Approval)                {}
func (nopEvents) AppFrame(string, json.RawMessage) {}

// SetManifest applies a (re)loaded manifest's developer_mode and grants at
// once to the running processes' links (narrow): what a narrowed grant no
// longer allows ends. An app the manifest lacks is granted nothing. Call
// it at start and after every reload, before the supervisor applies it.
func (m *Manager) SetManifest(man *policy.Manifest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.manifest = man
	for _, id := range slices.Sorted(maps.Keys(m.peers)) {
		p := m.peers[id]
		app := m.entryOf(id, policy.App{ID: id})
		// Under mu: peers see manifests and attaches in mu's order.
		p.run(func() { p.narrow(app, man.DeveloperMode) })
	}
}

// entryOf is app id's manifest entry: empty when the manifest lacks it,
// fallback before any manifest. m.mu is held.
func (m *Manager) entryOf(id string, fallback policy.App) policy.App {
	if m.manifest == nil {
		return fallback
	}
	if app, ok := m.manifest.App(id); ok {
		return app
	}
	return policy.App{ID: id}
}

func (m *Manager) peerOf(app string) *peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peers[app]
}

func (m *Manager) peerList() []*peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.peers))
}

// Attach takes over the daemon's end of a new process's hub and runs its
// link until Detach, the app closing its end, or the app not reading. A
// link still attached (a Detach that never came) is shut, and the new one
// handles no line before the old one is torn down. Attach waits for no
// socket or store, only for steps under Manager.mu and the peer's mu.
func (m *Manager) Attach(app policy.App, hub *os.File) {
	conn, err := net.FileConn(hub)
	hub.Close() // FileConn dup'ed it
	if err != nil {
		m.log.Error("hub is not a socket: the app runs without a link", zap.String("app", app.ID), zap.Error(err))
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		conn.Close()
		return
	}
	p := m.peers[app.ID]
	if p == nil {
		p = newPeer(m, app.ID, m.kept[app.ID])
		delete(m.kept, app.ID)
		m.peers[app.ID] = p
	}
	// The manifest's grants, not the start's: a reload may have narrowed them.
	entry, dev := m.entryOf(app.ID, app), m.manifest != nil && m.manifest.DeveloperMode
	old := p.cur.Load()
	l := newLink(m, p, conn, old)
	p.cur.Store(l)
	var service bool
	p.run(func() {
		p.link, p.app, p.dev = l, entry, dev
		service = p.serviceGranted(entry)
	})
	m.mu.Unlock()
	m.log.Info("link up", zap.String("app", app.ID), zap.Bool("service", service))
	if old != nil {
		old.shut("replaced by a new process") // off m.mu: it closes a socket
	}
	go l.readLoop()
	go l.writeLoop()
}

// Detach shuts the app's link because its process ended, without waiting
// for its teardown. The peer stays.
func (m *Manager) Detach(appID string) {
	if p := m.peerOf(appID); p != nil {
		if l := p.cur.Load(); l != nil {
			l.shut("process exited")
		}
	}
}

// Close ends every link and pending approval (outstanding calls get their
// outcomes) and writes the rest of the audit trail. The Manager is
// unusable after.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true // no peer is made after
	m.mu.Unlock()
	peers := m.peerList()
	var links []*link
	for _, p := range peers {
		if l := p.cur.Load(); l != nil {
			l.shut("daemon stopping")
			links = append(links, l)
		}
	}
	for _, l := range links {
		<-l.done
	}
	// The teardowns' turns are written (their jobs need live peers), then
	// the peers end.
	for _, p := range peers {
		p.jobs.close()
	}
	for _, p := range peers {
		p.run(func() {
			p.stopTimers()
			p.closed = true
		})
	}
	// Every armed deadline is stopped; one that fired finishes its step or
	// finds its peer closed.
	m.timers.Wait()
	m.audit.close()
}

// Send queues a pass-through frame (op app.send) to the app and then calls
// sent, if set, in the same step: the control socket queues its answer
// there, so it precedes the app's reply (an app.frame event, published in
// a later step). sent must not block.
func (m *Manager) Send(appID string, raw json.RawMessage, sent func()) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return refuse(ErrInvalid, "the frame is not JSON: %v", err)
	}
	_, pass, err := frame.ParseLine(buf.Bytes())
	if err != nil {
		return refuse(ErrInvalid, "%v", err)
	}
	if !pass {
		return refuse(ErrInvalid, "%q frames belong to the daemon: send the app frames of your own", frame.Envelope)
	}
	if buf.Len() > frame.MaxFrame {
		return refuse(ErrInvalid, "the frame is over %d bytes", frame.MaxFrame)
	}
	buf.WriteByte('\n')
	err = ErrNotConnected
	m.onLink(appID, func(_ *peer, l *link) {
		if err = l.write(buf.Bytes(), false, true); err == nil && sent != nil {
			sent()
		}
	})
	return err
}

// LinkStatus reports an app's link for status. It waits for no socket or
// store (doc.go, rule 1).
func (m *Manager) LinkStatus(appID string) control.LinkStatus {
	var st control.LinkStatus
	m.onLink(appID, func(p *peer, l *link) {
		// Without agent.octos a process has a hub (pass-through frames
		// flow) but no peer link.
		if p.serviceGranted(p.app) {
			st = control.LinkStatus{Connected: true, Contexts: len(l.contexts), OutstandingCalls: len(l.calls)}
		}
	})
	return st
}

// HasLink reports whether app has a peer link: a process on its hub and
// the agent.octos grant (or developer_mode).
func (m *Manager) HasLink(app string) bool { return m.LinkStatus(app).Connected }
