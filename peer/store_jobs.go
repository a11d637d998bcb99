package peer

import "sync"

// storeJobs runs the Manager's store I/O (sessions opened, history read,
// turns recorded) off m.mu, one job at a time in the order queued: a
// history read queued after a turn's record sees that turn. A job that
// must change the Manager takes m.mu itself once its I/O is done.
//
// The queue needs no bound of its own: every job belongs to an open
// request (bounded per link by Config.MaxOpenRequests) or to a turn that
// just ended (one per such request). Its goroutine runs only while jobs
// are queued, so an idle Manager runs none; close waits for it.
type storeJobs struct {
	mu      sync.Mutex
	q       []func()
	running bool
	closed  bool
	stopped chan struct{} // closed when the current goroutine exits
}

// do queues job; false when the Manager is closed and nothing will run it.
func (s *storeJobs) do(job func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.q = append(s.q, job)
	if !s.running {
		s.running = true
		s.stopped = make(chan struct{})
		go s.run(s.stopped)
	}
	return true
}

func (s *storeJobs) run(stopped chan struct{}) {
	defer close(stopped)
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		job := s.q[0]
		s.q[0] = nil
		s.q = s.q[1:]
		s.mu.Unlock()
		job()
	}
}

// close refuses new jobs and returns once the queued ones ran.
func (s *storeJobs) close() {
	s.mu.Lock()
	s.closed = true
	running, stopped := s.running, s.stopped
	s.mu.Unlock()
	if running {
		<-stopped
	}
}
