package jail

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStartClosesOnlyItsOwn: a start closes the descriptors it opened,
// each once. A second close of a number that another goroutine of the
// daemon has opened since closes that goroutine's file under it: the
// in-process launcher closed the guard's socket twice, and the control
// socket's peer check, reading /proc in the daemon meanwhile, failed with
// EBADF. Another goroutine here opens and checks /dev/null descriptors
// while apps with a guard start, by both launchers.
func TestStartClosesOnlyItsOwn(t *testing.T) {
	for _, useHelper := range []bool{false, true} {
		t.Run(map[bool]string{false: "fork", true: "helper"}[useHelper], func(t *testing.T) {
			h := newHarness(t)
			h.l = NewLauncher(Config{HelperPath: h.helper, UseHelper: useHelper})
			spec, err := h.l.Spec(Request{App: h.probeApp("fds", "getpid"), Dirs: h.dirs})
			if err != nil {
				t.Fatal(err)
			}
			if !spec.Notifies() {
				t.Fatal("the probe app has no guard: the test would prove nothing")
			}
			var null unix.Stat_t
			if err := unix.Stat("/dev/null", &null); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var bad []string
			var mu sync.Mutex
			wg.Add(4)
			for range 4 {
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						// A batch, so that whatever number a start frees is
						// likely taken at once.
						var fds []int
						for range 4 {
							fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
							if err != nil {
								bad = append(bad, err.Error())
								return
							}
							fds = append(fds, fd)
						}
						runtime.Gosched()
						for _, fd := range fds {
							var st unix.Stat_t
							if err := unix.Fstat(fd, &st); err != nil || st.Ino != null.Ino || st.Rdev != null.Rdev {
								// Not ours any more: leave it to whoever has it.
								mu.Lock()
								bad = append(bad, fmt.Sprintf("fd %d closed or replaced under its owner (%v)", fd, err))
								mu.Unlock()
								return
							}
						}
						for _, fd := range fds {
							unix.Close(fd)
						}
					}
				}()
			}
			for range 50 {
				if o := h.runApp(h.probeApp("fds", "getpid"), nil, nil); o.err != nil {
					t.Errorf("start: %v", o.err)
					break
				}
			}
			close(stop)
			wg.Wait()
			for _, b := range bad {
				t.Error(b)
			}
		})
	}
}
