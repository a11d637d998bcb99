package supervisor

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// episodeQuiet is how long an app must go without a refused fork for its
// tasks_max episode to be over: the next refusal warns again.
const episodeQuiet = time.Second

// taskWatch warns, once per episode, when an app's forks are refused at
// its tasks_max. The kernel counts each refusal in the leaf's pids.events
// ("max N") and wakes a poll of the file; one goroutine waits on every
// leaf's file at once (epoll), so an idle daemon makes no wake-up at all.
// During an episode a fork bomb refuses thousands of forks a second: the
// leaf then leaves the epoll set and is read again once a second, until a
// second passes without a new refusal.
type taskWatch struct {
	epfd, wake int // wake: an eventfd that brings the loop to its queue
	log        *zap.Logger
	warn       func(r *runner, limit int)

	mu    sync.Mutex // guards queue and stop; no I/O under it
	queue []watchReq
	stop  bool

	// Owned by the loop.
	leaves map[int]*watchedLeaf // by the fd of their pids.events
}

type watchReq struct {
	add   bool
	path  string // the leaf
	r     *runner
	limit int
}

type watchedLeaf struct {
	path  string
	r     *runner
	limit int
	seen  uint64    // pids.events's max when last read
	quiet time.Time // in an episode: when it is read again; zero otherwise
}

func newTaskWatch(log *zap.Logger, warn func(*runner, int)) (*taskWatch, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll for tasks_max warnings: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd for tasks_max warnings: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("epoll for tasks_max warnings: %w", err)
	}
	return &taskWatch{epfd: epfd, wake: wake, log: log, warn: warn, leaves: map[int]*watchedLeaf{}}, nil
}

// add watches the leaf of r's process, held at limit tasks.
func (w *taskWatch) add(r *runner, leaf string, limit int) {
	w.send(watchReq{add: true, path: leaf, r: r, limit: limit})
}

// remove stops watching the leaf (before it is removed).
func (w *taskWatch) remove(leaf string) { w.send(watchReq{path: leaf}) }

func (w *taskWatch) send(req watchReq) {
	w.mu.Lock()
	if w.stop {
		w.mu.Unlock()
		return
	}
	w.queue = append(w.queue, req)
	w.mu.Unlock()
	w.poke()
}

func (w *taskWatch) poke() {
	var one = [8]byte{1}
	_, _ = unix.Write(w.wake, one[:]) // EAGAIN: a wake-up is pending anyway
}

// close ends run, which then closes every descriptor.
func (w *taskWatch) close() {
	w.mu.Lock()
	w.stop = true
	w.mu.Unlock()
	w.poke()
}

// run is the watch's goroutine; it returns after close.
func (w *taskWatch) run() {
	defer func() {
		for fd := range w.leaves {
			unix.Close(fd)
		}
		unix.Close(w.wake)
		unix.Close(w.epfd)
	}()
	events := make([]unix.EpollEvent, 32)
	for {
		n, err := unix.EpollWait(w.epfd, events, w.timeout(time.Now()))
		if err != nil && !errors.Is(err, unix.EINTR) {
			w.log.Error("tasks_max warnings stop: epoll failed", zap.Error(err))
			return
		}
		for _, ev := range events[:max(n, 0)] {
			if int(ev.Fd) == w.wake {
				var buf [8]byte
				_, _ = unix.Read(w.wake, buf[:])
				continue
			}
			if l := w.leaves[int(ev.Fd)]; l != nil {
				w.refused(int(ev.Fd), l, time.Now())
			}
		}
		if !w.serve() {
			return
		}
		now := time.Now()
		for fd, l := range w.leaves {
			if !l.quiet.IsZero() && !now.Before(l.quiet) {
				w.recheck(fd, l, now)
			}
		}
	}
}

// timeout is epoll's: until the first episode is to be read again, or
// forever (-1) when no app is in one.
func (w *taskWatch) timeout(now time.Time) int {
	ms := -1
	for _, l := range w.leaves {
		if l.quiet.IsZero() {
			continue
		}
		d := int(l.quiet.Sub(now).Milliseconds()) + 1
		if ms < 0 || d < ms {
			ms = max(d, 0)
		}
	}
	return ms
}

// serve takes the queued requests; false once the watch is closed.
func (w *taskWatch) serve() bool {
	w.mu.Lock()
	queue, stop := w.queue, w.stop
	w.queue = nil
	w.mu.Unlock()
	if stop {
		return false
	}
	for _, req := range queue {
		if req.add {
			w.watch(req)
			continue
		}
		for fd, l := range w.leaves {
			if l.path == req.path {
				delete(w.leaves, fd)
				_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
				unix.Close(fd)
			}
		}
	}
	return true
}

func (w *taskWatch) watch(req watchReq) {
	fd, err := unix.Open(filepath.Join(req.path, "pids.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		w.log.Warn("no tasks_max warnings for the app", zap.String("app", req.r.id), zap.Error(err))
		return
	}
	l := &watchedLeaf{path: req.path, r: req.r, limit: req.limit}
	l.seen, _ = readMaxEvents(fd) // the read also clears the poll's state
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLPRI, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		w.log.Warn("no tasks_max warnings for the app", zap.String("app", req.r.id), zap.Error(err))
		return
	}
	w.leaves[fd] = l
}

// refused handles a wake-up of the leaf's pids.events: a new refusal
// starts an episode, which warns, and takes the leaf off the epoll set
// until it is quiet.
func (w *taskWatch) refused(fd int, l *watchedLeaf, now time.Time) {
	n, err := readMaxEvents(fd)
	if err != nil || n <= l.seen {
		return
	}
	l.seen = n
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	l.quiet = now.Add(episodeQuiet)
	w.warn(l.r, l.limit)
}

// recheck reads a leaf in an episode: still refusing, it stays off the
// epoll set another episodeQuiet; quiet, the episode is over.
func (w *taskWatch) recheck(fd int, l *watchedLeaf, now time.Time) {
	n, err := readMaxEvents(fd)
	if err == nil && n > l.seen {
		l.seen = n
		l.quiet = now.Add(episodeQuiet)
		return
	}
	l.quiet = time.Time{}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLPRI, Fd: int32(fd)}); err != nil {
		w.log.Warn("tasks_max warnings stop for the app", zap.String("app", l.r.id), zap.Error(err))
	}
}

// readMaxEvents reads "max N" of an open pids.events.
func readMaxEvents(fd int) (uint64, error) {
	var buf [256]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		return 0, err
	}
	v, _ := keyed(buf[:n], "max")
	return v, nil
}
