package jail

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// restrictedThreads lists this process's threads under a seccomp filter
// or no_new_privs: a direct spawn's own thread while its app lives, and
// nothing once the apps are gone.
func restrictedThreads(t *testing.T) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // the thread is gone
		}
		s := string(b)
		if strings.Contains(s, "\nSeccomp:\t2") || strings.Contains(s, "\nNoNewPrivs:\t1") {
			out = append(out, task.Name())
		}
	}
	return out
}

// TestDirectLeavesDaemonFree: the threads a direct spawn restricts serve
// their app alone and go with it; the daemon's other threads keep every
// right (they can open files no app may, and make calls the filter
// refuses).
func TestDirectLeavesDaemonFree(t *testing.T) {
	h := newHarness(t)
	h.l = NewLauncher(Config{HelperPath: h.helper, DirectSpawn: true})
	h.processes = true
	private := filepath.Join(h.dirs.State, "consent.db")
	if err := os.WriteFile(private, []byte("daemon only"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		o := h.runApp(h.probeApp("direct", "read", private), nil, nil)
		if o.err != nil || !o.direct || o.out != "EACCES" {
			t.Fatalf("direct app: %+v", o)
		}
	}
	// The restricted threads end with their goroutines, right after their
	// apps: no event says when, so poll with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for left := restrictedThreads(t); len(left) > 0; left = restrictedThreads(t) {
		if time.Now().After(deadline) {
			t.Fatalf("threads %v still restricted after their apps ended", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 32 {
		wg.Go(func() {
			if _, err := os.ReadFile(private); err != nil {
				errs <- err
			}
			if _, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("daemon lost a right: %v", err)
	}
}

// TestOnSpareThread: the restricted work never runs on the main thread,
// even when the goroutine starting it lands there.
func TestOnSpareThread(t *testing.T) {
	main := unix.Getpid()
	for range 50 {
		tid := make(chan int)
		onSpareThread(func() { tid <- unix.Gettid() })
		if got := <-tid; got == main {
			t.Fatal("ran on the main thread")
		}
	}
}
