package peer

import "sync"

// serial runs the functions posted to it one at a time, in the order
// posted, on a goroutine of its own that exists only while some are
// queued: what a serial's functions touch has one owner at any moment
// (the goroutine draining it), and posting never blocks. Every app's state
// (peer), every app's store I/O and the Kernel and ToolRelay callbacks
// (feed) each have one.
//
// mu guards the queue alone: nothing runs, and nothing else is locked,
// while it is held.
type serial struct {
	// after, when set (before the first post), runs after each
	// function, on the serial: the peer's status publish, without a
	// wrapping closure (an allocation) around every function. It must
	// not mind running twice.
	after func()

	mu      sync.Mutex
	q       []func()
	running bool
	closed  bool
	idle    chan struct{} // made by close while running; closed when the run ends
	spare   []func()      // the drained batch's array, for the next one
}

// post queues f; false when the serial is closed and nothing will run it.
func (s *serial) post(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.q = append(s.q, f)
	if !s.running {
		s.running = true
		go s.run()
	}
	return true
}

func (s *serial) run() {
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			s.stopLocked()
			s.mu.Unlock()
			return
		}
		batch := s.q
		s.q, s.spare = s.spare, nil
		s.mu.Unlock()
		for i, f := range batch {
			s.run1(f)
			batch[i] = nil
		}
		s.mu.Lock()
		if s.spare == nil && cap(batch) <= 1024 {
			s.spare = batch[:0]
		}
		s.mu.Unlock()
	}
}

// call runs f on the serial and waits for it: false, f not run, when the
// serial is closed. A serial with nothing queued is taken by the caller,
// which runs f itself (a round trip saved) and hands what was posted
// meanwhile to a goroutine. It must not be called from the serial
// itself, nor with a lock held that the serial's functions take.
func (s *serial) call(f func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if s.running || len(s.q) > 0 {
		done := make(chan struct{})
		// after runs again once this returns, harmlessly: it must have
		// run before the caller goes on.
		s.q = append(s.q, func() { s.run1(f); close(done) })
		s.mu.Unlock()
		<-done
		return true
	}
	s.runHere(f)
	return true
}

// do is post, but a serial with nothing queued is taken by the caller,
// which runs f at once (a goroutine's wake-up saved). Like call, it must
// not be called with a lock held that the serial's functions take: never
// from a linewriter's Then (post there).
func (s *serial) do(f func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if s.running || len(s.q) > 0 {
		s.q = append(s.q, f)
		s.mu.Unlock()
		return true
	}
	s.runHere(f)
	return true
}

// run1 runs one function, and after.
func (s *serial) run1(f func()) {
	f()
	if s.after != nil {
		s.after()
	}
}

// runHere runs f as the serial's owner, mu held and the serial idle; what
// was posted meanwhile goes to a goroutine. It releases mu.
func (s *serial) runHere(f func()) {
	s.running = true
	s.mu.Unlock()
	s.run1(f)
	s.mu.Lock()
	if len(s.q) == 0 {
		s.stopLocked()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	go s.run()
}

// stopLocked ends a run, whoever ran it; mu is held. The channel close
// waits on is made only then: a run is most often a caller's one
// function, and a channel for each would be an allocation per call.
func (s *serial) stopLocked() {
	s.running = false
	if s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// close refuses new functions and returns once the queued ones ran.
func (s *serial) close() {
	s.mu.Lock()
	s.closed = true
	var idle chan struct{}
	if s.running {
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle = s.idle
	}
	s.mu.Unlock()
	if idle != nil {
		<-idle
	}
}
