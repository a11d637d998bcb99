package jail

import (
	"sort"
	"strings"

	"octosup/jail/helper"
	"octosup/policy"
)

// Env variables the daemon sets for every app.
const (
	EnvAppID   = "OCTOSUP_APP_ID"
	EnvHubFD   = "OCTOSUP_HUB_FD"
	EnvJail    = "OCTOSUP_JAIL"
	EnvSecrets = "OCTOSUP_SECRETS"
)

// HubFD is the descriptor number of the hub in every app.
const HubFD = helper.HubFD

// Environ builds an app's environment: base (the daemon's) without the
// variables SPEC §2.1 scrubs (policy.ReservedEnv: octos secrets, the
// daemon's own knobs, and systemd's per-service variables, which belong
// to the daemon alone — an app that saw NOTIFY_SOCKET could send READY=1
// for it), then the entry's env, then the daemon's own settings,
// which win over both. The result is sorted so that the same inputs always
// give the same environment.
func Environ(base []string, entry map[string]string, daemon map[string]string) []string {
	vars := make(map[string]string, len(base)+len(entry)+len(daemon))
	for _, kv := range base {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || policy.ReservedEnv(name) {
			continue
		}
		vars[name] = value
	}
	for k, v := range entry {
		// An entry may not smuggle back what the scrub removed.
		if policy.ReservedEnv(k) {
			continue
		}
		vars[k] = v
	}
	for k, v := range daemon {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
