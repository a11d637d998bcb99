package main

import "fmt"

// debugData is the daemon's debug op answer (daemon.DebugData).
type debugData struct {
	Goroutines int    `json:"goroutines"`
	Threads    int    `json:"threads"`
	FDs        int    `json:"fds"`
	RSSBytes   int64  `json:"rss_bytes"`
	HeapBytes  uint64 `json:"heap_bytes"`
}

// The tolerances of "back to the baseline". The baseline is taken with
// every app running with its two contexts, the kernel, the watcher and
// the admin connection attached; the comparison is made in the same
// shape, after a GC that returns free memory to the kernel, and polled
// for a while so that teardown still under way (a connection's
// goroutines, an exited app's pipes) is not mistaken for a leak.
const (
	// fdSlack: every fd of the daemon belongs to an app (its hub, its
	// output pipes, its pidfd), a connection, the state store or the
	// runtime; in the same shape the count is the same. One is allowed
	// for the store's file being reopened by bbolt's remap, one for an
	// app whose restart is in flight when the sample is taken.
	fdSlack = 2
	// goroutineSlack: the same reasoning for goroutines, plus the
	// runtime's and the audit writer's that come and go.
	goroutineSlack = 8
	// rssSlackBytes and rssPerCall: what the daemon keeps by design grows
	// with the storm — each app's window of its last 4096 finished call
	// ids (the duplicate check: measured at ~0.5 KiB an id with its
	// audit and map overhead), the audit store's pages mapped in as it
	// grew. rssPerCall covers an accepted call up to the window's size
	// (windowPerApp per app: past it the window holds steady); the rest is
	// a fixed margin for the runtime's spans and the allocator's caches,
	// which are not returned page for page.
	rssSlackBytes = 24 << 20
	rssPerCall    = 1024
	windowPerApp  = 4096
)

// withinBudget says how now differs from base beyond the tolerances, ""
// when it does not.
func withinBudget(base, now debugData, accepted, apps int) string {
	var out []string
	if now.FDs > base.FDs+fdSlack {
		out = append(out, fmt.Sprintf("fds %d, baseline %d (+%d allowed)", now.FDs, base.FDs, fdSlack))
	}
	if now.Goroutines > base.Goroutines+goroutineSlack {
		out = append(out, fmt.Sprintf("goroutines %d, baseline %d (+%d allowed)", now.Goroutines, base.Goroutines, goroutineSlack))
	}
	if limit := rssLimit(base, accepted, apps); now.RSSBytes > limit {
		out = append(out, fmt.Sprintf("rss %s, baseline %s (up to %s allowed)", mib(now.RSSBytes), mib(base.RSSBytes), mib(limit)))
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

func rssLimit(base debugData, accepted, apps int) int64 {
	return base.RSSBytes + rssSlackBytes + int64(min(accepted, apps*windowPerApp))*rssPerCall
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
