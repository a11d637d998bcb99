package supervisor

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"octosup/jail"
	"octosup/policy"
)

// TestPing: Ping answers while every part of the supervisor does, and
// names the one that is wedged: the spawner thread in a launch that does
// not return, an app's runner in a LinkHandler call that does not.
func TestPing(t *testing.T) {
	exe := testExe(t)
	for _, tc := range []struct {
		name  string
		wedge string // "", "spawner", "runner"
		stuck []string
		fine  []string
	}{
		{name: "healthy"},
		{name: "spawner", wedge: "spawner", stuck: []string{"the spawner thread", "the runner of app wedged"}, fine: []string{"app calm"}},
		{name: "runner", wedge: "runner", stuck: []string{"the runner of app wedged"}, fine: []string{"spawner", "app calm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			entered := make(chan struct{}, 1)
			links := &wedgeLinks{wedge: tc.wedge == "runner", entered: entered, release: release}
			sup := startSupLaunch(t, func(c *testConfig) { c.Links = links }, func(launch launchFunc) launchFunc {
				return func(req jail.Request) (spawned, error) {
					if tc.wedge == "spawner" && req.App.ID == "wedged" {
						entered <- struct{}{}
						<-release
					}
					return launch(req)
				}
			})
			defer close(release)
			apply(t, sup, testApp(exe, "calm", "sleep", true))
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := sup.Ping(ctx); err != nil {
				t.Fatalf("Ping of a healthy supervisor: %v", err)
			}
			if tc.wedge == "" {
				return
			}
			go sup.Apply(context.Background(), &policy.Manifest{Version: 1, Apps: []policy.App{
				testApp(exe, "calm", "sleep", true), testApp(exe, "wedged", "sleep", true)}}, ApplyOptions{})
			<-entered
			pctx, pcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer pcancel()
			err := sup.Ping(pctx)
			var stuck *StuckError
			if !errors.As(err, &stuck) {
				t.Fatalf("Ping with the %s wedged: %v, want a *StuckError", tc.wedge, err)
			}
			for _, want := range tc.stuck {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Ping's error does not name %q: %v", want, err)
				}
			}
			for _, fine := range tc.fine {
				if strings.Contains(err.Error(), fine) {
					t.Errorf("Ping's error names %q, which answers: %v", fine, err)
				}
			}
			// A second ping finds the first one still unanswered.
			if err := sup.Ping(pctx); err == nil {
				t.Error("a second Ping of a wedged supervisor answered")
			}
		})
	}
}

// wedgeLinks is a LinkHandler whose Attach of app "wedged" does not
// return until release is closed (with wedge set): a wedged app runner.
type wedgeLinks struct {
	wedge   bool
	entered chan<- struct{}
	release <-chan struct{}
}

func (l *wedgeLinks) Attach(app policy.App, hub *os.File) {
	hub.Close()
	if l.wedge && app.ID == "wedged" {
		l.entered <- struct{}{}
		<-l.release
	}
}

func (l *wedgeLinks) Detach(string) {}
