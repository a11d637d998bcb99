package supervisor

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"octosup/policy"

	"golang.org/x/sys/unix"
)

// passFD is the app that hands a descriptor (its stdin) over its hub,
// fd 3, and, as the positive control, over a socket pair of its own;
// it prints what each sendmsg answered.
func passFD() int {
	send := func(fd int) string {
		rights := unix.UnixRights(0)
		if err := unix.Sendmsg(fd, []byte("\n"), rights, nil, 0); err != nil {
			return unix.ErrnoName(err.(unix.Errno))
		}
		return "ok"
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("pair", send(pair[0]))
	fmt.Println("hub", send(3))
	fmt.Println("ready")
	sleepForever()
	return 0
}

// TestHubTakesNoDescriptors: an app cannot hand the daemon a descriptor
// over its hub (SO_PASSRIGHTS off on the daemon's end). A hostile review
// handed over TCP sockets with unsent data and SO_LINGER set; their close
// ran in the daemon thread that read past them, and held the app's link
// and the daemon's stop for as long as the app set. A jail app and a
// broad one; its own socket pair takes the same message.
func TestHubTakesNoDescriptors(t *testing.T) {
	exe := testExe(t)
	for _, app := range []struct {
		name string
		jail bool
	}{{"broad", false}, {"jail", true}} {
		t.Run(app.name, func(t *testing.T) {
			links := &holdLinks{hubs: map[string]*os.File{}}
			defer links.closeAll()
			sup := startSup(t, func(c *testConfig) { c.Links = links })
			sub := sup.Subscribe(1024)
			defer sub.Close()
			a := testApp(exe, "passfd", "pass-fd", true)
			if app.jail {
				a = jailTestApp(exe, "passfd", "pass-fd")
				delete(a.Env, "SUPTEST_SETSID")
			}
			apply(t, sup, a)
			got := waitLogs(t, sub, "passfd", "pair ", "hub ", "ready")
			if got[0] != "pair ok" {
				t.Fatalf("the positive control: a descriptor over the app's own pair: %q", got[0])
			}
			if got[1] != "hub EPERM" {
				t.Errorf("a descriptor over the hub: %q, want hub EPERM", got[1])
			}
		})
	}
}

// holdLinks keeps each process's hub open, unread, until its Detach: the
// daemon's end as a peer link holds it.
type holdLinks struct {
	mu   sync.Mutex
	hubs map[string]*os.File
}

func (l *holdLinks) Attach(app policy.App, hub *os.File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.hubs[app.ID]; old != nil {
		old.Close()
	}
	l.hubs[app.ID] = hub
}

func (l *holdLinks) Detach(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.hubs[id]; h != nil {
		h.Close()
		delete(l.hubs, id)
	}
}

func (l *holdLinks) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, h := range l.hubs {
		h.Close()
		delete(l.hubs, id)
	}
}
