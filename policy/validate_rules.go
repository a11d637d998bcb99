package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// parse runs the three passes and attributes what they found.
//
// Each pass sees everything the one before could make sense of, so one run
// reports every problem; a rule is skipped where an earlier pass already
// found its fields wrong, so that one mistake is reported once and not
// again as the consequences of its wrong value.
func (v *validator) parse(data []byte) (*Manifest, error) {
	s := scan(data)
	if s.fatal {
		return nil, v.problems(nil, s, s.findings)
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		// scan accepted it: the two readers disagree, which is a bug.
		return nil, fmt.Errorf("policy: decode a manifest the scan accepted: %w", err)
	}
	findings := append(s.findings, v.schemaFindings(tameNumbers(doc))...)

	var m Manifest
	if len(findings) == 0 {
		if err := decodeStrict(data, &m); err != nil {
			return nil, fmt.Errorf("policy: the schema accepted what the manifest types refuse: %w", err)
		}
	} else {
		// Best effort, for the rules: fields the schema did not know go
		// first (encoding/json would take "Network" for "network"), then
		// a value of the wrong type is skipped and the rest decoded. The
		// rules skip whatever was found wrong.
		if b, err := json.Marshal(dropUnknown(doc, findings)); err == nil {
			_ = json.Unmarshal(b, &m)
		}
	}
	findings = append(findings, rules(&m, findings)...)
	if len(findings) > 0 {
		return nil, v.problems(doc, s, findings)
	}
	m.normalize()
	return &m, nil
}

// tameNumbers replaces numbers written with an exponent (which scan has
// already reported) by 0 before the schema sees them: the schema library
// turns every number into an exact rational, and 1e999999 is a
// million-digit one.
func tameNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = tameNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = tameNumbers(e)
		}
	case json.Number:
		if strings.ContainsAny(string(x), "eE") {
			return json.Number("0")
		}
	}
	return v
}

// dropUnknown removes from doc the fields findings call unknown.
func dropUnknown(doc any, findings []finding) any {
	for _, f := range findings {
		if !f.unknown || len(f.at) == 0 {
			continue
		}
		if obj, ok := valueAt(doc, f.at[:len(f.at)-1]).(map[string]any); ok {
			delete(obj, f.at[len(f.at)-1].key)
		}
	}
	return doc
}

func decodeStrict(data []byte, m *Manifest) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(m)
}

// problems attributes findings to apps, drops repeats of a path already
// reported, and puts them in the order of the file.
func (v *validator) problems(doc any, s scanned, findings []finding) *ValidationError {
	names := appNames(doc)
	type placed struct {
		finding
		off  int64
		path string
	}
	seen := map[string]bool{}
	var list []placed
	for _, f := range findings {
		p := f.at.String()
		if f.at != nil && seen[p] {
			continue
		}
		seen[p] = true
		off := int64(-1)
		for n := len(f.at); n >= 0; n-- {
			if o, ok := s.offsets[f.at[:n].String()]; ok {
				off = o
				break
			}
		}
		list = append(list, placed{f, off, p})
	}
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].off != list[j].off {
			return list[i].off < list[j].off
		}
		return list[i].path < list[j].path
	})
	verr := &ValidationError{Problems: make([]Problem, len(list))}
	for i, f := range list {
		app, field := attribute(f.at, names)
		verr.Problems[i] = Problem{App: app, Field: field, Message: f.msg, Fix: f.fix}
	}
	return verr
}

var (
	idPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// appNames names each app for problems: its id when that is valid and
// unique (what a person searches the file for), else its position.
func appNames(doc any) []string {
	root, _ := doc.(map[string]any)
	apps, _ := root["apps"].([]any)
	ids := make([]string, len(apps))
	count := map[string]int{}
	for i, a := range apps {
		obj, _ := a.(map[string]any)
		if id, ok := obj["id"].(string); ok && idPattern.MatchString(id) {
			ids[i] = id
			count[id]++
		}
	}
	names := make([]string, len(apps))
	for i, id := range ids {
		if id != "" && count[id] == 1 {
			names[i] = id
		} else {
			names[i] = fmt.Sprintf("#%d", i)
		}
	}
	return names
}

func attribute(at jsonPath, names []string) (app, field string) {
	if len(at) >= 2 && at[0] == (seg{key: "apps", index: -1}) && at[1].index >= 0 {
		i := at[1].index
		app = fmt.Sprintf("#%d", i)
		if i < len(names) {
			app = names[i]
		}
		return app, at[2:].String()
	}
	return "", at.String()
}

// flaggedSet answers "did an earlier pass find something wrong at, above
// or below this path?" in time proportional to the path, not to the
// number of problems: a 1 MiB manifest can hold tens of thousands.
type flaggedSet struct {
	at    map[string]bool // the paths problems were found at
	above map[string]bool // every ancestor of those
}

func newFlaggedSet(findings []finding) flaggedSet {
	fs := flaggedSet{at: map[string]bool{}, above: map[string]bool{}}
	mark := func(at jsonPath) {
		fs.at[at.String()] = true
		for n := len(at) - 1; n >= 0; n-- {
			k := at[:n].String()
			if fs.above[k] {
				break
			}
			fs.above[k] = true
		}
	}
	for _, f := range findings {
		mark(f.at)
		if f.meant != "" && len(f.at) > 0 {
			// "netwrok": the network it meant is not "none", whatever
			// the default says: rules on it would only add noise.
			mark(f.at[:len(f.at)-1].child(f.meant))
		}
	}
	return fs
}

func (fs flaggedSet) any(paths ...jsonPath) bool {
	for _, p := range paths {
		if fs.above[p.String()] {
			return true
		}
		for n := len(p); n >= 0; n-- {
			if fs.at[p[:n].String()] {
				return true
			}
		}
	}
	return false
}

// reservedEnv are the variables the daemon removes from or sets in every
// app's environment (docs/jail.md, "Environment"), with why. An entry naming one would be
// silently dropped at launch; saying so here is kinder.
var reservedEnv = []struct{ prefix, why string }{
	{"OCTOSUP_", "OCTOSUP_* variables are the daemon's own (it sets OCTOSUP_APP_ID, OCTOSUP_HUB_FD, OCTOSUP_JAIL and OCTOSUP_SECRETS itself)"},
	{"OCTOSENSE_", "the daemon keeps octos' own variables (OCTOS_*, OCTOSENSE_*) away from every app"},
	{"OCTOS_", "the daemon keeps octos' own variables (OCTOS_*, OCTOSENSE_*) away from every app"},
	{"NOTIFY_SOCKET", "systemd's NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* belong to the daemon alone"},
	{"WATCHDOG_", "systemd's NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* belong to the daemon alone"},
	{"LISTEN_", "systemd's NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* belong to the daemon alone"},
}

// ReservedEnv reports whether an app's env may not name the variable: the
// daemon removes it from, or sets it in, every app's environment.
func ReservedEnv(name string) bool { return reservedEnvWhy(name) != "" }

func reservedEnvWhy(name string) string {
	for _, r := range reservedEnv {
		if name == r.prefix || (strings.HasSuffix(r.prefix, "_") && strings.HasPrefix(name, r.prefix)) {
			return r.why
		}
	}
	return ""
}

// rules are the checks a JSON Schema cannot express: relations between
// fields and between apps, and paths in their simplest form.
func rules(m *Manifest, earlier []finding) []finding {
	flagged := newFlaggedSet(earlier)
	var out []finding
	add := func(at jsonPath, msg, fix string) {
		out = append(out, finding{at: at, msg: msg, fix: fix})
	}
	root := jsonPath{}
	devMode := m.DeveloperMode && !flagged.any(root.child("developer_mode"))

	firstByID := map[string]int{}
	for i := range m.Apps {
		a := &m.Apps[i]
		p := root.child("apps").at(i)

		if at := p.child("id"); a.ID != "" && !flagged.any(at) {
			if first, dup := firstByID[a.ID]; dup {
				add(at, fmt.Sprintf("%q is already the id of apps[%d]", a.ID, first), "give every app its own id")
			} else {
				firstByID[a.ID] = i
			}
		}

		out = append(out, appPathRules(p, a, flagged)...)
		out = append(out, sandboxRules(p.child("sandbox"), &a.Sandbox, flagged)...)
		out = append(out, limitsRules(p.child("limits"), &a.Limits, flagged)...)
		linked := devMode || containsString(a.Grants.Services, ServiceAgent)
		out = append(out, grantsRules(p.child("grants"), &a.Grants, linked, flagged)...)
		out = append(out, envRules(p.child("env"), a.Env, flagged)...)
		out = append(out, passEnvRules(p.child("pass_env"), a.PassEnv, a.Sandbox.Policy == PolicyBroad, flagged)...)
	}
	return out
}

// appPathRules checks that the app at p writes its exec[0] and its
// resources in their simplest form.
func appPathRules(p jsonPath, a *App, flagged flaggedSet) []finding {
	var out []finding
	add := func(at jsonPath, msg, fix string) {
		out = append(out, finding{at: at, msg: msg, fix: fix})
	}
	if at := p.child("exec").at(0); len(a.Exec) > 0 && !flagged.any(at) {
		if clean := path.Clean(a.Exec[0]); clean != a.Exec[0] {
			add(at, fmt.Sprintf("%q has redundant parts (//, /./, /../ or a trailing /)", a.Exec[0]),
				fmt.Sprintf("write %q", clean))
		}
	}
	for k, r := range a.Resources {
		at := p.child("resources").at(k)
		if !flagged.any(at) {
			out = append(out, userPathFindings(at, r)...)
		}
	}
	return out
}

// grantsRules checks that methods and tools, which only the agent
// service serves, come with it: linked says the app has that service,
// granted or through developer mode (which grants every app every
// service).
func grantsRules(g jsonPath, gr *Grants, linked bool, flagged flaggedSet) []finding {
	var out []finding
	add := func(at jsonPath, msg, fix string) {
		out = append(out, finding{at: at, msg: msg, fix: fix})
	}
	if !linked && !flagged.any(g.child("services")) {
		if len(gr.Methods) > 0 && !flagged.any(g.child("methods")) {
			add(g.child("methods"), fmt.Sprintf("methods need the %q service", ServiceAgent),
				fmt.Sprintf("add %q to grants.services, or remove methods", ServiceAgent))
		}
		if len(gr.Tools) > 0 && !flagged.any(g.child("tools")) {
			add(g.child("tools"), fmt.Sprintf("tools need the %q service", ServiceAgent),
				fmt.Sprintf("add %q to grants.services, or remove tools", ServiceAgent))
		}
	}
	return out
}

// envRules checks the names an app's env sets, at p, in name order.
func envRules(p jsonPath, env map[string]string, flagged flaggedSet) []finding {
	var out []finding
	add := func(at jsonPath, msg, fix string) {
		out = append(out, finding{at: at, msg: msg, fix: fix})
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		at := p.child(k)
		if flagged.any(at) {
			continue
		}
		if !envName.MatchString(k) {
			add(at, "is not a valid variable name: letters, digits and '_', not starting with a digit, at most 128",
				"rename it, e.g. MY_SETTING")
		} else if why := reservedEnvWhy(k); why != "" {
			add(at, "is reserved: "+why, "remove it, or give the variable a name outside these prefixes")
		}
	}
	return out
}

// passEnvRules checks the variables an app's pass_env, at p, names: none
// twice nor reserved, and none at all for a broad app, which gets the
// daemon's whole environment anyway.
func passEnvRules(p jsonPath, passEnv []string, broad bool, flagged flaggedSet) []finding {
	var out []finding
	add := func(at jsonPath, msg, fix string) {
		out = append(out, finding{at: at, msg: msg, fix: fix})
	}
	seen := map[string]int{}
	for k, name := range passEnv {
		at := p.at(k)
		if flagged.any(at) {
			continue
		}
		switch first, dup := seen[name]; {
		case broad:
			add(at, `has no effect with policy "broad", which gets the daemon's whole environment`, `remove pass_env, or set "policy": "jail"`)
		case dup:
			add(at, fmt.Sprintf("%q is already listed at [%d]", name, first), "remove the duplicate")
		default:
			if why := reservedEnvWhy(name); why != "" {
				add(at, "is reserved: "+why, "remove it")
			}
			seen[name] = k
		}
	}
	return out
}

func sandboxRules(p jsonPath, s *Sandbox, flagged flaggedSet) []finding {
	var out []finding
	add := func(at jsonPath, msg, fix string) {
		out = append(out, finding{at: at, msg: msg, fix: fix})
	}
	policyAt, networkAt := p.child("policy"), p.child("network")
	lists := []struct {
		name  string
		ports []uint16
	}{{"tcp_connect", s.TCPConnect}, {"tcp_bind", s.TCPBind}}

	if !flagged.any(policyAt, networkAt) {
		if s.Policy == PolicyBroad {
			// A broad app's network and filesystem are not narrowed: a
			// setting that reads as a restriction would be a lie.
			if s.Network == NetworkNone || s.Network == NetworkTCP {
				add(networkAt, fmt.Sprintf("%q has no effect with policy \"broad\", which does not narrow the network", s.Network),
					`remove "network" (a broad app has the full network) or set "policy": "jail"`)
			}
			for _, l := range lists {
				if at := p.child(l.name); len(l.ports) > 0 && !flagged.any(at) {
					add(at, `has no effect with policy "broad", which does not narrow the network`,
						fmt.Sprintf(`remove %s, or set "policy": "jail" and "network": "tcp"`, l.name))
				}
			}
			if at := p.child("external"); len(s.External) > 0 && !flagged.any(at) {
				add(at, `has no effect with policy "broad", which does not narrow the filesystem`,
					`remove external, or set "policy": "jail"`)
			}
			// A broad app reaches every socket and device it can name:
			// a grant would read as the only ones.
			for _, l := range []struct {
				name string
				n    int
			}{{"sockets", len(s.Sockets)}, {"devices", len(s.Devices)}} {
				if at := p.child(l.name); l.n > 0 && !flagged.any(at) {
					add(at, `has no effect with policy "broad", which reaches every socket and device it can name`,
						fmt.Sprintf(`remove %s, or set "policy": "jail"`, l.name))
				}
			}
		} else if s.Network == NetworkTCP {
			if len(s.TCPConnect) == 0 && len(s.TCPBind) == 0 && !flagged.any(p.child("tcp_connect"), p.child("tcp_bind")) {
				add(networkAt, `"tcp" with no port in tcp_connect or tcp_bind allows no connection at all`,
					`list the ports the app needs in tcp_connect or tcp_bind, or set "network": "none"`)
			}
		} else {
			for _, l := range lists {
				if at := p.child(l.name); len(l.ports) > 0 && !flagged.any(at) {
					add(at, `ports need network "tcp"`, fmt.Sprintf(`set "network": "tcp" or remove %s`, l.name))
				}
			}
		}
	}

	firstByPath := map[string]int{}
	for k, e := range s.External {
		at := p.child("external").at(k).child("path")
		if flagged.any(at) {
			continue
		}
		fs := userPathFindings(at, e.Path)
		out = append(out, fs...)
		if len(fs) > 0 {
			continue
		}
		if first, dup := firstByPath[e.Path]; dup {
			add(at, fmt.Sprintf("%q is already listed at external[%d]", e.Path, first),
				`keep one entry (with "rw" if either needs to write)`)
		} else {
			firstByPath[e.Path] = k
		}
	}
	return out
}

// userPathFindings checks that a path the schema let through (absolute,
// or under ~) is in its simplest form and, under ~, stays in the home.
func userPathFindings(at jsonPath, p string) []finding {
	var clean string
	switch {
	case p == "~":
		return nil
	case strings.HasPrefix(p, "~/"):
		rest := path.Clean(p[2:])
		if rest == ".." || strings.HasPrefix(rest, "../") {
			return []finding{{at: at, msg: fmt.Sprintf("%q leaves your home directory", p),
				fix: "write the absolute path instead"}}
		}
		clean = "~/" + rest
		if rest == "." {
			clean = "~"
		}
	case strings.HasPrefix(p, "/"):
		clean = path.Clean(p)
	default:
		return nil // the schema reported it
	}
	if clean != p {
		return []finding{{at: at, msg: fmt.Sprintf("%q has redundant parts (//, /./, /../ or a trailing /)", p),
			fix: fmt.Sprintf("write %q", clean)}}
	}
	if SelfPath(clean) {
		return []finding{{at: at, msg: fmt.Sprintf("%q names whichever process opens it: the daemon builds the jail, so it would grant the daemon's own files", p),
			fix: "name the real path (the app's own /proc entry is always readable)"}}
	}
	if clean == "/" {
		return []finding{{at: at, msg: `"/" holds /proc and /sys, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised`,
			fix: "name the directories the app needs"}}
	}
	if v := KernelView(clean); v != "" {
		return []finding{{at: at, msg: fmt.Sprintf("%q is in %s, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised", p, v),
			fix: "remove it (the app's own /proc entry is always readable)"}}
	}
	return nil
}

// KernelView says which of /proc and /sys the absolute, clean path p is
// or lies beneath, "" for neither.
func KernelView(p string) string {
	for _, v := range [...]string{"/proc", "/sys"} {
		if p == v || strings.HasPrefix(p, v+"/") {
			return v
		}
	}
	return ""
}

// selfPaths resolve to the process that opens them.
var selfPaths = [...]string{"/proc/self", "/proc/thread-self", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"}

// SelfPath reports whether the absolute, clean path p is or lies under a
// path that names the process opening it (/proc/self, /dev/fd, …). The
// jail's rules are opened by the daemon, so such a path would grant the
// daemon's files (its working directory through /proc/self/cwd, its
// descriptors) rather than the app's.
func SelfPath(p string) bool {
	for _, s := range selfPaths {
		if p == s || strings.HasPrefix(p, s+"/") {
			return true
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// normalize fills in the defaults of docs/manifest.md and makes empty
// lists and maps nil, so that a manifest and its re-encoding are equal.
func (m *Manifest) normalize() {
	for i := range m.Apps {
		a := &m.Apps[i]
		if a.Restart == "" {
			a.Restart = RestartOnRequest
		}
		if a.Sandbox.Policy == "" {
			a.Sandbox.Policy = PolicyJail
		}
		if a.Sandbox.Network == "" {
			a.Sandbox.Network = NetworkNone
			if a.Sandbox.Policy == PolicyBroad {
				a.Sandbox.Network = NetworkFull
			}
		}
		if a.Limits.TasksMax == 0 {
			a.Limits.TasksMax = DefaultTasksMax
		}
		a.Resources = nilIfEmpty(a.Resources)
		a.PassEnv = nilIfEmpty(a.PassEnv)
		a.Grants.Services = nilIfEmpty(a.Grants.Services)
		a.Grants.Methods = nilIfEmpty(a.Grants.Methods)
		a.Grants.Tools = nilIfEmpty(a.Grants.Tools)
		a.Sandbox.TCPConnect = nilIfEmpty(a.Sandbox.TCPConnect)
		a.Sandbox.TCPBind = nilIfEmpty(a.Sandbox.TCPBind)
		a.Sandbox.Accounts = nilIfEmpty(a.Sandbox.Accounts)
		a.Sandbox.External = nilIfEmpty(a.Sandbox.External)
		a.Sandbox.Sockets = nilIfEmpty(a.Sandbox.Sockets)
		a.Sandbox.Devices = nilIfEmpty(a.Sandbox.Devices)
		if len(a.Env) == 0 {
			a.Env = nil
		}
	}
	if m.Apps == nil {
		m.Apps = []App{}
	}
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
