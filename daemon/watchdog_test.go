package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestWatchdogStopsForAWedgedPart: the watchdog pings systemd only
// while every part the daemon watches answers within the bound; with one
// wedged (its ping does not return), WATCHDOG=1 stops and the log names
// the part, which is what has systemd restart the daemon; once it answers
// again the pings resume. The parts are the daemon's (instance.watched,
// over a fake supervisor and real peer links), one wrapped so that the
// test can wedge it; supervisor's and peer's TestPing wedge the parts
// themselves (a launch that does not return, an app runner in a
// LinkHandler call, the peer links' lock held), and TestRunNotify has a
// running daemon's watchdog ping with every part real.
func TestWatchdogStopsForAWedgedPart(t *testing.T) {
	for _, part := range []string{"supervisor", "peer links"} {
		t.Run(part, func(t *testing.T) {
			env := newTestEnv(t)
			notify := listenNotify(t)
			links, err := openPeerLink(env.dirs, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer links.Close()
			parts := (&instance{apps: newFakeApps(), links: links}).watched()
			var names []string
			for _, p := range parts {
				names = append(names, p.name)
			}
			if !slices.Equal(names, []string{"supervisor", "peer links"}) {
				t.Fatalf("the watchdog hears from %q", names)
			}

			var mu sync.Mutex
			wedged := make(chan struct{}) // closed: the part answers again
			isWedged := false
			asked := make(chan struct{}, 1)
			i := slices.Index(names, part)
			real := parts[i].ping
			parts[i].ping = func(ctx context.Context) error {
				mu.Lock()
				w, gate := isWedged, wedged
				mu.Unlock()
				if w {
					select {
					case asked <- struct{}{}:
					default:
					}
					select {
					case <-gate:
					case <-ctx.Done():
						return fmt.Errorf("wedged by the test: %w", ctx.Err())
					}
				}
				return real(ctx)
			}
			core, logged := observer.New(zapcore.ErrorLevel)
			log := zap.New(zapcore.NewTee(core, testLogger(t).Core()))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { watchdog(ctx, log, parts, 100*time.Millisecond, 50*time.Millisecond); close(done) }()
			defer func() { cancel(); <-done }()

			read := func(wait time.Duration) (string, bool) {
				got, err := readNotify(notify, time.Now().Add(wait))
				return got, err == nil
			}
			waitPing := func(why string) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
					if got, ok := read(time.Until(deadline)); ok && got == "WATCHDOG=1" {
						return
					}
				}
				t.Fatalf("no WATCHDOG=1 %s", why)
			}
			waitPing("while every part answers")

			mu.Lock()
			isWedged = true
			mu.Unlock()
			waitAsked := func() {
				t.Helper()
				select {
				case <-asked:
				case <-time.After(10 * time.Second):
					t.Fatalf("the watchdog did not ask %s within 10s", part)
				}
			}
			waitAsked()
			// The round that asked is held; the pings of the rounds before
			// it are in the socket already.
			for _, ok := read(0); ok; _, ok = read(0) {
			}
			for i := 0; i < 3; i++ {
				waitAsked() // three more rounds of the watchdog, none of which pinged
			}
			for got, ok := read(0); ok; got, ok = read(0) {
				if got == "WATCHDOG=1" {
					t.Fatalf("WATCHDOG=1 while %s was wedged", part)
				}
			}
			var named bool
			for _, e := range logged.FilterMessageSnippet("watchdog: not pinging").All() {
				for _, f := range e.Context {
					if f.Key == "stuck" && strings.Contains(fmt.Sprint(f.Interface), part+": wedged by the test") {
						named = true
					}
				}
			}
			if !named {
				t.Fatalf("the log does not name the wedged %s: %v", part, logged.All())
			}

			mu.Lock()
			isWedged = false
			close(wedged)
			mu.Unlock()
			waitPing("once " + part + " answers again")
		})
	}
}
