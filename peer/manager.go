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
	DefaultConsentTimeout  = 2 * time.Minute
	DefaultKernelTimeout   = time.Minute
	DefaultQueueFrames     = 1024
	DefaultQueueBytes      = 8 << 20
	DefaultWriteTimeout    = 10 * time.Second
	DefaultMaxOpenRequests = 64
	DefaultMaxContexts     = 256
	// The store's limits per app (docs/protocol.md, "Limits"): with the
	// defaults an app holds at most 64 MiB of records, whatever it does.
	DefaultMaxSessions   = 1000     // per app and account
	DefaultMaxTurns      = 1000     // per session
	DefaultMaxStoreBytes = 64 << 20 // per app
	// DefaultMaxPendingApprovals bounds an app's open host sheets (its
	// consent prompt is one at most, always): more than a person reads.
	DefaultMaxPendingApprovals = 16
	// DefaultMaxCalls bounds an app's outstanding tool calls.
	DefaultMaxCalls = 256
	// DefaultUnaskedRate is Config.UnaskedRate's: with unaskedLineCost,
	// 2,048 small lines or 4 MiB a second.
	DefaultUnaskedRate = 4 << 20
	// maxTurnEvents and maxTurnBytes bound the events one turn keeps for
	// its history (the rest is streamed but not kept: the turn is marked
	// truncated), so that a turn is one modest store value.
	maxTurnEvents = 512
	maxTurnBytes  = 256 << 10
)

// Config sets up a Manager. Store is required; zero durations and sizes
// take the defaults above.
type Config struct {
	Store  Store  // a *policy.Store
	Events Events // nil drops approvals and pass-through frames
	Log    *zap.Logger

	// ConsentTimeout is how long a request waits for a person to answer the
	// first-use consent prompt before it fails consent_required.
	ConsentTimeout time.Duration
	// KernelTimeout is how long a turn request waits for the kernel's reply
	// (not its events) before it fails timeout.
	KernelTimeout time.Duration
	// QueueFrames and QueueBytes bound the frames waiting to be written to
	// one app. Frames pushed from outside the link (a kernel's events and
	// tool calls, app.send) may fill three quarters of either: the next
	// one is refused (ErrQueueFull) and the app stays connected. The
	// rest is kept for what the daemon owes the app (replies, error
	// frames, context_closed, tool_cancel, the turn.end it sends); an
	// app that lets even that fill is disconnected.
	QueueFrames int
	QueueBytes  int
	// WriteTimeout is how long one write to a hub may block before the app
	// is disconnected for not reading.
	WriteTimeout time.Duration
	// MaxOpenRequests is how many requests one link may have open (waiting
	// for consent, the store or the kernel, or streaming) before the
	// daemon stops reading its hub: the socket then slows the app.
	MaxOpenRequests int
	// MaxContexts is how many contexts one link may hold; a session.open
	// beyond it fails quota_exceeded (close one first).
	MaxContexts int
	// MaxSessions, MaxTurns and MaxStoreBytes bound what one app makes
	// the store keep (policy.Limits): sessions per account, turns per
	// session (recording one more drops the oldest), and bytes of
	// records. At a limit the app's oldest closed untitled sessions are
	// evicted; when none is, a session.open fails quota_exceeded and a
	// turn that does not fit is not recorded (logged).
	MaxSessions   int
	MaxTurns      int
	MaxStoreBytes int64
	// MaxPendingApprovals is how many host sheets one app may have open;
	// a host-confirmed call that would raise one more (no standing rule
	// answers it) ends Error{quota_exceeded}.
	MaxPendingApprovals int
	// MaxCalls is how many tool calls one app may have outstanding; a
	// call beyond it is refused ErrLimit.
	MaxCalls int
	// Nonce prefixes context ids; random per Manager (per daemon start)
	// when empty.
	Nonce string
	// Now is time.Now unless a test injects a clock. It stamps records
	// (approvals, the audit); deadlines run on the monotonic clock.
	Now func() time.Time

	// MaxToolTimeout is the longest timeout_ms a tool call may ask for.
	MaxToolTimeout time.Duration
	// RelayQueue bounds the tool-call callbacks kept while no ToolRelay is
	// installed; past it the oldest are dropped (and logged).
	RelayQueue int
	// DuplicateWindow is how many finished call ids per app are still
	// refused as duplicates.
	DuplicateWindow int
	// UnaskedRate bounds, in bytes a second, the lines an app sends
	// unasked that the daemon handles: pass-through frames, bad frames,
	// requests answered at once (refused), and tool results for calls it
	// was not sent. Each costs its bytes and unaskedLineCost; past the
	// rate the daemon reads the app's hub no faster, and the socket slows
	// the app: an app whose own CPU is capped cannot have the daemon
	// parse and log for it without end. A request that stays open and a
	// tool result the daemon waits for cost nothing: MaxOpenRequests and
	// the kernel's calls bound those.
	UnaskedRate int
	// AuditKeep is how many audit entries the store keeps
	// (policy.DefaultAuditKeep when 0).
	AuditKeep int
	// AuditInterval is how long a batch of the audit trail waits after
	// its first entry before it is written (DefaultAuditInterval when 0):
	// what a SIGKILL of the daemon may lose, against an fsync per batch.
	AuditInterval time.Duration
}

// Events receives what the control socket publishes to subscribers.
type Events interface {
	// Approval: topic "approval". Called when an approval is raised
	// (State "pending") and when it is settled (allowed, denied, expired,
	// cancelled).
	Approval(Approval)
	// AppFrame: topic "app.frame". frame is the app's line, unchanged.
	AppFrame(app string, frame json.RawMessage)
}

// Manager runs the peer links of all apps. It satisfies the supervisor's
// LinkHandler (Attach, Detach). All methods are safe for concurrent use.
//
// It keeps a registry of the apps (peers) and the few indexes across
// them; each app's state is its peer's, touched only with the peer's mu
// held (doc.go).
type Manager struct {
	cfg   Config
	log   *zap.Logger
	store Store
	// limits are the store's bounds of each app, from cfg.
	limits policy.Limits
	// pushFrames and pushBytes are the part of an app's write queue that
	// frames pushed from outside the link may fill (Config.QueueFrames).
	pushFrames, pushBytes int

	// mu guards the fields below it. It is held for their reads and
	// writes, and around a peer's run where the peer must see the
	// manifests and attaches in mu's order (Manager.mu before peer.mu).
	mu     sync.Mutex
	closed bool
	// manifest is the one SetManifest applied last (nil before): an
	// attaching process gets its entry's grants, whatever entry its start
	// read.
	manifest *policy.Manifest
	peers    map[string]*peer
	// kept is the consent and the rules of each app that has no peer yet,
	// read from the store by New; a new peer takes its part. policyErr is
	// why New could not read them (policy.go).
	kept      map[string]appPolicy
	policyErr error

	// amu guards approvals, which indexes every pending approval by id:
	// the app whose peer holds it, and what Approvals lists. It is taken
	// under a peer's mu, and takes nothing.
	amu       sync.Mutex
	approvals map[string]pendingApproval

	// kernel is the attached kernel session (nil: none); it changes under
	// mu, and is read without it.
	kernel       atomic.Pointer[KernelSession]
	nextHandle   atomic.Uint64
	nextApproval atomic.Uint64

	// relay hands the calls' outcomes to the ToolRelay (tool.go).
	relay relay

	audit *auditLog
	// timers counts the deadlines (peer.after) not yet stopped or done
	// firing: Close waits for them, so that none's goroutine outlives it.
	timers sync.WaitGroup
}

// pendingApproval is an entry of Manager.approvals.
type pendingApproval struct {
	p *peer
	a Approval
}

// New returns a Manager, with every app's consent and standing rules
// read from the store, and starts its audit log's goroutine (ended by
// Close).
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
		approvals:  map[string]pendingApproval{},
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

// setDefaults gives every zero field of cfg its default.
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

// orDefault sets *v to def when it is zero (or negative).
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

type nopEvents struct{}

func (nopEvents) Approval(Approval)                {}
func (nopEvents) AppFrame(string, json.RawMessage) {}

// SetManifest applies a (re)loaded manifest: developer_mode (every app may
// then use every service) and each app's grants and accounts, at once,
// on the links of the processes that run now (narrow): the next request
// or tool call is checked against them, and what a narrowed grant no
// longer allows ends. An app the manifest no longer has is granted
// nothing (its process is being stopped). Call it at start and after
// every successful reload, before the supervisor applies the manifest.
func (m *Manager) SetManifest(man *policy.Manifest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.manifest = man
	for _, id := range slices.Sorted(maps.Keys(m.peers)) {
		p := m.peers[id]
		app := m.entryOf(id, policy.App{ID: id})
		// Under mu: every peer sees the manifests and the attaches in
		// the order mu took them.
		p.run(func() { p.narrow(app, man.DeveloperMode) })
	}
}

// entryOf is the entry whose grants app id has: the manifest's, nothing
// when the manifest no longer has it, or fallback before any manifest.
// m.mu is held.
func (m *Manager) entryOf(id string, fallback policy.App) policy.App {
	if m.manifest == nil {
		return fallback
	}
	if app, ok := m.manifest.App(id); ok {
		return app
	}
	return policy.App{ID: id}
}

// peerOf is app's peer, nil when it never had a process.
func (m *Manager) peerOf(app string) *peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peers[app]
}

// peerList is a snapshot of the peers.
func (m *Manager) peerList() []*peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.peers))
}

// Attach takes over the daemon's end of a freshly started process's hub and
// runs its link until Detach, the app closing its end, or the app not
// reading. The peer is created on the app's first Attach and kept after.
// A link still attached for the app (a Detach that never came) is shut;
// the new link handles no line before the old one is torn down. Attach
// waits for no socket and no store; it takes Manager.mu and the peer's
// lock, so it waits for the steps taken under them (doc.go, rule 5).
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
	old := p.cur.Load()
	l := newLink(m, p, conn, old)
	p.cur.Store(l)
	// The manifest's grants, not those of the entry the process's start
	// read: a reload may have narrowed them since.
	entry, dev := m.entryOf(app.ID, app), m.manifest != nil && m.manifest.DeveloperMode
	var service bool
	p.run(func() {
		// The old link, shut below, is torn down on its own.
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

// Detach ends the app's link because its process ended. It returns once
// the link is shut, without waiting for its teardown (open requests
// failed, contexts closed and the kernel told, a pending consent prompt
// withdrawn), which its peer finishes on its own. The peer stays.
func (m *Manager) Detach(appID string) {
	if p := m.peerOf(appID); p != nil {
		if l := p.cur.Load(); l != nil {
			l.shut("process exited")
		}
	}
}

// Close ends every link and pending approval (outstanding calls get
// their outcomes) and writes the rest of the audit trail. The Manager is
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
	// The turns the teardowns recorded are written (their jobs ask their
	// peers, which still run), then the peers end.
	for _, p := range peers {
		p.jobs.close()
	}
	for _, p := range peers {
		p.run(func() {
			p.stopTimers()
			p.closed = true
		})
	}
	// The teardowns and stopTimers stopped every deadline still armed;
	// one that fired before is finishing its step, or finds its peer
	// closed.
	m.timers.Wait()
	m.audit.close()
}

// Send writes a pass-through frame (control op app.send: one JSON object
// that is not a peer-link frame) to the app, and calls sent (when set)
// in the same step, with the app's peer locked, once it is queued: the
// control socket queues its answer there, so that the app's reply to the
// frame (an app.frame event, published in a step of the same peer)
// follows it. sent must not block.
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
	p := m.peerOf(appID)
	if p == nil {
		return ErrNotConnected
	}
	err = ErrNotConnected
	p.run(func() {
		l := p.cur.Load()
		if l == nil {
			return
		}
		if err = l.write(buf.Bytes(), false, true); err == nil && sent != nil {
			sent()
		}
	})
	return err
}

// LinkStatus reports an app's link for status. It waits for no socket or
// store: a peer's mu is held only for steps (doc.go, rules 2 and 5).
func (m *Manager) LinkStatus(appID string) control.LinkStatus {
	var st control.LinkStatus
	if p := m.peerOf(appID); p != nil {
		p.run(func() {
			// A process without agent.octos has a hub (its pass-through
			// frames flow) but no peer link: no request of it is served.
			if l := p.link; l != nil && p.serviceGranted(p.app) {
				st = control.LinkStatus{Connected: true, Contexts: len(l.contexts), OutstandingCalls: len(l.calls)}
			}
		})
	}
	return st
}

// HasLink reports whether app has a peer link: a process on its hub and
// the agent.octos grant (or developer_mode).
func (m *Manager) HasLink(app string) bool { return m.LinkStatus(app).Connected }
