package peer

import "go.uber.org/zap"

// feed calls the Kernel and the ToolRelay. It is a serial of its own: the
// callbacks run one at a time, in the order the peers posted them (so
// each app's are in the order they happened), on the feed's goroutine,
// never on a peer's serial (they are posted, never run by the poster),
// and under no lock of the package, so a slow one holds up no app's hub.
// The relay's queue while none is installed is the feed's too. Two
// waits nest on it (sync, and a kernel tool call's accepted: call, which
// an idle feed lets its caller run), and neither runs a Kernel callback.
type feed struct {
	in  serial
	log *zap.Logger

	// Owned by in.
	kernel *KernelSession
	// waiting is a held session (AttachKernelHeld) not started yet, and
	// held what the feed would have called it with meanwhile, in order:
	// run at its Start, refused at its Detach. The feed itself never
	// waits for a Start.
	waiting    *KernelSession
	held       []func()
	relay      ToolRelay
	relayOwner *KernelSession // the session whose Kernel is the relay
	queue      relayRing
}

func (f *feed) init(relayQueue int, log *zap.Logger) {
	f.log = log
	f.queue.size = relayQueue
}

// attach makes s the kernel, and the relay if its Kernel is one.
func (f *feed) attach(s *KernelSession) {
	f.kernel = s
	if r, ok := s.k.(ToolRelay); ok {
		f.relayOwner = s
		f.install(r)
	}
}

func (f *feed) detach(s *KernelSession) {
	if f.waiting == s {
		// Never started: what was held for it is refused (a request
		// checks f.kernel) or dropped, as for a detached kernel.
		f.release()
	}
	if f.kernel == s {
		f.kernel = nil
	}
	if f.relayOwner == s {
		f.relayOwner = nil
		f.install(nil)
	}
}

// install sets the relay and drains the queue into it.
func (f *feed) install(r ToolRelay) {
	f.relay = r
	if r == nil {
		return
	}
	f.queue.drain(f.deliver)
	if d := f.queue.dropped; d > 0 {
		f.log.Error("tool outcomes were lost while no relay was installed", zap.Int("dropped", d))
		f.queue.dropped = 0
	}
}

func (f *feed) deliver(n relayNote) {
	if n.finished {
		f.relay.Finished(n.app, n.callID, n.r)
	} else {
		f.relay.Acknowledged(n.app, n.callID)
	}
}

// request hands kr to s, which must still be the kernel; refused hears
// why it could not take it.
func (f *feed) request(s *KernelSession, kr KernelRequest, refused func(error)) {
	f.toKernel(func() {
		if f.kernel != s {
			refused(ErrKernelDetached)
		} else if err := s.k.Request(kr); err != nil {
			refused(err)
		}
	})
}

func (f *feed) contextClosed(app, contextID, reason string) {
	f.toKernel(func() {
		if f.kernel != nil {
			f.kernel.k.ContextClosed(app, contextID, reason)
		}
	})
}

// toKernel posts call, a call to the kernel, which runs on the feed at
// once or, while a held session waits for its Start, once it starts or
// goes (release).
func (f *feed) toKernel(call func()) {
	f.in.post(func() {
		if f.waiting != nil {
			f.held = append(f.held, call)
			return
		}
		call()
	})
}

// release ends the wait of a held session: what was held runs, in order.
func (f *feed) release() {
	f.waiting = nil
	held := f.held
	f.held = nil
	for _, call := range held {
		call()
	}
}

// start makes a held session the kernel, then runs what was held for it.
func (f *feed) start(s *KernelSession) {
	if f.waiting != s {
		return
	}
	f.attach(s)
	f.release()
}

// sync returns once what was posted to the feed before it was called:
// the Kernel and ToolRelay callbacks of an op come before its answer.
func (f *feed) sync() { f.in.call(func() {}) }

// note hands a callback to the relay, or queues it while none is
// installed.
func (f *feed) note(n relayNote) {
	f.in.post(func() {
		if f.relay != nil {
			f.deliver(n)
		} else {
			f.queue.push(n)
		}
	})
}

// relayRing is the bounded queue of relay callbacks kept while no relay
// is installed: past size the oldest is overwritten, and counted.
type relayRing struct {
	size    int
	buf     []relayNote
	head, n int
	dropped int
}

func (q *relayRing) push(n relayNote) {
	if q.buf == nil {
		q.buf = make([]relayNote, q.size)
	}
	if q.n == len(q.buf) {
		q.buf[q.head] = n
		q.head = (q.head + 1) % len(q.buf)
		q.dropped++
		return
	}
	q.buf[(q.head+q.n)%len(q.buf)] = n
	q.n++
}

func (q *relayRing) drain(f func(relayNote)) {
	for ; q.n > 0; q.n-- {
		n := q.buf[q.head]
		q.buf[q.head] = relayNote{}
		q.head = (q.head + 1) % len(q.buf)
		f(n)
	}
	q.buf = nil // a backlog's array is not kept
	q.head = 0
}
