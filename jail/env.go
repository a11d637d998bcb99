package jail

import (
	"path/filepath"
	"slices"
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
// variables the scrub removes (policy.ReservedEnv: octos secrets, the
// daemon's own knobs, and systemd's per-service variables, which belong
// to the daemon alone — an app that saw NOTIFY_SOCKET could send READY=1
// for it), and of those only what keep allows (nil: all of them), then
// the entry's env, then the daemon's own settings, which win over both.
// The result is sorted so that the same inputs always give the same
// environment.
func Environ(base []string, keep func(name string) bool, entry map[string]string, daemon map[string]string) []string {
	vars := make(map[string]string, len(base)+len(entry)+len(daemon))
	for _, kv := range base {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || policy.ReservedEnv(name) || keep != nil && !keep(name) {
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

// jailEnv is what a jail app keeps of the daemon's environment (an allow
// list: a terminal's TMUX, SSH_AUTH_SOCK or exported tokens stay out):
// who and where the user is, the locale, the time zone, PATH (which the
// caller filtered: jailPath), and what the entry's pass_env names.
func jailEnv(pass []string) func(string) bool {
	return func(name string) bool {
		switch name {
		case "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "PATH":
			return true
		}
		return strings.HasPrefix(name, "LC_") || slices.Contains(pass, name)
	}
}

// defaultPath is a jail app's PATH when the daemon has none to filter.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// jailPath keeps the directories of the daemon's PATH the jail grants
// (beneath a rule of rules), in order: a PATH naming ~/bin or a
// terminal's tool directories would only send programs to EACCES.
func jailPath(base []string, rules []PathRule) string {
	path := lookupEnv(base, "PATH")
	if path == "" {
		path = defaultPath
	}
	var keep []string
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) || slices.Contains(keep, d) {
			continue
		}
		if slices.ContainsFunc(rules, func(r PathRule) bool {
			return r.Access&AccessList != 0 && (d == r.Path || strings.HasPrefix(d, r.Path+"/"))
		}) {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, ":")
}
