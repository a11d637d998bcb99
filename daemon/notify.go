package daemon

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"octosup/supervisor"
)

// notify sends one sd_notify state (nothing without NOTIFY_SOCKET),
// keeping the environment for later ones: the jail scrubs it for apps.
func notify(log *zap.Logger, state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", zap.String("state", state), zap.Error(err))
	}
}

// summary is e.g. "3 apps: 2 running, 1 stopped": states in order's
// order, any other after them by name.
func summary(all []supervisor.AppStatus) string {
	if len(all) == 0 {
		return "0 apps"
	}
	counts := make(map[supervisor.State]int)
	for _, st := range all {
		counts[st.State]++
	}
	order := []supervisor.State{supervisor.Running, supervisor.Starting, supervisor.Stopping, supervisor.Stopped, supervisor.Failed}
	rank := func(s supervisor.State) int {
		if i := slices.Index(order, s); i >= 0 {
			return i
		}
		return len(order)
	}
	states := slices.SortedFunc(maps.Keys(counts), func(a, b supervisor.State) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
	})
	noun := "apps"
	if len(all) == 1 {
		noun = "app"
	}
	parts := make([]string, 0, len(states))
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	return fmt.Sprintf("%d %s: %s", len(all), noun, strings.Join(parts, ", "))
}

// statusLine is STATUS=: the summary, then any store notes ("2 apps: 2
// running; store: state.db was damaged (...): moved to ...").
func statusLine(all []supervisor.AppStatus, storeNotes []string) string {
	s := summary(all)
	if len(storeNotes) > 0 {
		s += "; store: " + strings.Join(storeNotes, "; ")
	}
	// A newline would start another sd_notify assignment.
	return strings.ReplaceAll(s, "\n", " ")
}

// watchdogInterval is systemd's WatchdogSec for this process, 0 when off.
func watchdogInterval(log *zap.Logger) time.Duration {
	wd, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("watchdog settings", zap.Error(err))
		return 0
	}
	return wd
}
