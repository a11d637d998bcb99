package peer

import "sync"

// jobs runs an app's store I/O in order on a goroutine that lives only
// while jobs are queued: a stalled store stalls that app alone, and post
// never blocks. mu guards the queue; no job runs under it.
type jobs struct {
	mu      sync.Mutex
	q       []func()
	running bool
	closed  bool
	wg      sync.WaitGroup
}

// post queues f; false when the queue is closed and nothing will run it.
func (j *jobs) post(f func()) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return false
	}
	j.q = append(j.q, f)
	if !j.running {
		j.running = true
		j.wg.Add(1)
		go j.run()
	}
	return true
}

func (j *jobs) run() {
	defer j.wg.Done()
	for {
		j.mu.Lock()
		if len(j.q) == 0 {
			j.running = false
			j.mu.Unlock()
			return
		}
		f := j.q[0]
		j.q[0] = nil
		j.q = j.q[1:]
		j.mu.Unlock()
		f()
	}
}

// close refuses new jobs and returns once the queued ones ran (no post
// adds to wg once closed).
func (j *jobs) close() {
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	j.wg.Wait()
}
