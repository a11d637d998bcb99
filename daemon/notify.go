package daemon

import (
	"fmt"
	"sort"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"octosup/supervisor"
)

// notify sends one sd_notify state; without NOTIFY_SOCKET it does
// nothing. The environment is kept: STATUS= and WATCHDOG=1 follow all
// along, and apps never see it (the jail scrubs it).
func notify(log *zap.Logger, state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", zap.String("state", state), zap.Error(err))
	}
}

// stateOrder is the order of states in the status summary.
var stateOrder = map[supervisor.State]int{
	supervisor.Running: 0, supervisor.Starting: 1, supervisor.Stopping: 2, supervisor.Stopped: 3, supervisor.Failed: 4,
}

// summary is the one-line STATUS=, e.g. "3 apps: 2 running, 1 stopped".
func summary(all []supervisor.AppStatus) string {
	counts := make(map[supervisor.State]int)
	for _, st := range all {
		counts[st.State]++
	}
	states := make([]supervisor.State, 0, len(counts))
	for s := range counts {
		states = append(states, s)
	}
	sort.Slice(states, func(i, j int) bool {
		oi, iok := stateOrder[states[i]]
		oj, jok := stateOrder[states[j]]
		if iok != jok {
			return iok
		}
		if oi != oj {
			return oi < oj
		}
		return states[i] < states[j]
	})
	noun := "apps"
	if len(all) == 1 {
		noun = "app"
	}
	if len(all) == 0 {
		return "0 apps"
	}
	parts := make([]string, 0, len(states))
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	return fmt.Sprintf("%d %s: %s", len(all), noun, strings.Join(parts, ", "))
}

// statusLine is STATUS=: the apps' summary, then what the state store
// has to say when it is not healthy, e.g. "2 apps: 2 running; store:
// state.db was damaged (invalid database): moved to ...".
func statusLine(all []supervisor.AppStatus, storeNotes []string) string {
	s := summary(all)
	if len(storeNotes) > 0 {
		s += "; store: " + strings.Join(storeNotes, "; ")
	}
	// One line: a newline would start another sd_notify assignment.
	return strings.ReplaceAll(s, "\n", " ")
}

func sdWatchdogEnabled() (time.Duration, error) { return sd.SdWatchdogEnabled(false) }
