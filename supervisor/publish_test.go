package supervisor

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPublishBeforeTheCallerHears: Config.Publish has a move's state
// event by the time the op that made the move returns, every time: the
// control socket queues that event before the op's answer, with nothing
// in between to wait for.
func TestPublishBeforeTheCallerHears(t *testing.T) {
	var mu sync.Mutex
	last := map[string]uint64{} // the Seq of each app's last state event
	sup := startSup(t, func(c *testConfig) {
		c.Publish = func(ev Event) {
			if ev.Kind == KindState {
				mu.Lock()
				last[ev.State.ID] = ev.State.Seq
				mu.Unlock()
			}
		}
	})
	apply(t, sup, testApp(testExe(t), "a", "sleep", false))
	ctx := context.Background()
	for i, op := range []func(context.Context, string) (AppStatus, error){sup.Start, sup.Restart, sup.Stop, sup.Start, sup.Stop} {
		st, err := op(ctx, "a")
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		mu.Lock()
		got := last["a"]
		mu.Unlock()
		if got != st.Seq {
			t.Fatalf("op %d returned move %d (%s) when Publish had had move %d", i, st.Seq, st.State, got)
		}
	}
}

// TestFollowSplitsTheLines: what follow hands join and what is published
// after it are every line of the ring once, in order, for followers that
// join while two writers (an app's stdout and stderr) add lines. A follow
// that read the ring and joined in two steps would lose the lines added
// between.
func TestFollowSplitsTheLines(t *testing.T) {
	const each, followers = 3000, 40
	r := newRing(10000)
	var seq atomic.Uint64
	type follower struct {
		lines []uint64 // the snapshot's, then the published ones
	}
	var fs []*follower // under r.mu, as publish runs
	publish := func(l LogLine) {
		for _, f := range fs {
			f.lines = append(f.lines, l.Seq)
		}
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r.add(LogLine{Text: fmt.Sprint(w, i)}, &seq, time.Now, publish)
			}
		}()
	}
	for range followers {
		f := &follower{}
		r.follow(5, func(lines []LogLine) {
			for _, l := range lines {
				f.lines = append(f.lines, l.Seq)
			}
			fs = append(fs, f)
		})
		runtime.Gosched()
	}
	wg.Wait()
	for i, f := range fs {
		if len(f.lines) == 0 {
			continue
		}
		for j, s := range f.lines {
			if want := f.lines[0] + uint64(j); s != want {
				t.Fatalf("follower %d: line %d is %d, want %d (lost or repeated)", i, j, s, want)
			}
		}
		if last := f.lines[len(f.lines)-1]; last != 2*each {
			t.Fatalf("follower %d: lines up to %d of %d", i, last, 2*each)
		}
	}
}
