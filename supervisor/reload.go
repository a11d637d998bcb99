package supervisor

import (
	"cmp"
	"reflect"
	"slices"

	"octosup/jail"
	"octosup/policy"
)

// The parts of what a process runs that a reload compares, as
// AppChange.Changed and AppStatus.Stale name them, in this order.
const (
	// ChangedJail: what the jail enforces (Landlock, seccomp, the exec
	// gate, strictness, the descriptors kept).
	ChangedJail = "jail"
	// ChangedExec: the program.
	ChangedExec = "exec"
	// ChangedArgv: its arguments.
	ChangedArgv = "argv"
	// ChangedEnv: its environment.
	ChangedEnv = "environment"
	// ChangedDir: its working directory.
	ChangedDir = "directory"
)

// ApplyOptions change what Apply does to the running apps.
type ApplyOptions struct {
	// KeepRunning leaves each running app whose process would now run
	// differently as it is: its status says Stale until it is restarted.
	KeepRunning bool
	// Swapped, when set, is called once the manifest's apps are the
	// supervisor's (Status lists them, added ones perhaps starting) and
	// before Apply waits for them to settle; not when Apply fails before.
	// It must not block nor call Apply.
	Swapped func()
}

// Applied is what an Apply did, each list in manifest order.
type Applied struct {
	// Added are the apps the manifest added (started when autostart).
	Added []string
	// Removed are the apps it removed (stopped, gone).
	Removed []string
	// Restarted are the running apps whose process would now run
	// differently, restarted so that it does; Status is where the
	// restart left each (failed, with its Reason, when the new entry
	// could not start).
	Restarted []AppChange
	// Stale are those apps when KeepRunning left them running as they
	// were; Status is their status then.
	Stale []AppChange
	// Limits are the running apps whose changed limits were written into
	// their cgroups in place, with no restart (applyLimitsLive).
	Limits []string
}

// AppChange is one running app whose process a reload found out of date.
type AppChange struct {
	ID string
	// Changed names what differs (ChangedJail, ChangedExec, …).
	Changed []string
	Status  AppStatus
}

// specChanges compares what two compiled jails enforce and run: a rule's
// Why and the order of the path rules are for people, and are left out,
// so that a manifest that says the same thing another way (reordered,
// reformatted) changes nothing.
func specChanges(a, b jail.Spec) []string {
	var out []string
	if !reflect.DeepEqual(enforced(a), enforced(b)) {
		out = append(out, ChangedJail)
	}
	if a.Program != b.Program {
		out = append(out, ChangedExec)
	}
	if !slices.Equal(tail(a.Argv), tail(b.Argv)) {
		out = append(out, ChangedArgv)
	}
	if !slices.Equal(a.Env, b.Env) {
		out = append(out, ChangedEnv)
	}
	if a.Dir != b.Dir {
		out = append(out, ChangedDir)
	}
	return out
}

// tail is argv without argv[0], which is the program (ChangedExec).
func tail(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	return argv[1:]
}

// enforced is the part of a spec the jail enforces, in a canonical form.
func enforced(s jail.Spec) jail.Spec {
	ll := s.Landlock
	ll.Paths = make([]jail.PathRule, len(s.Landlock.Paths))
	for i, p := range s.Landlock.Paths {
		p.Why = ""
		ll.Paths[i] = p
	}
	slices.SortFunc(ll.Paths, func(x, y jail.PathRule) int {
		return cmp.Or(cmp.Compare(x.Path, y.Path), cmp.Compare(x.Access, y.Access), boolCompare(x.Optional, y.Optional))
	})
	sc := make([]jail.Syscall, len(s.Seccomp))
	for i, r := range s.Seccomp {
		r.Why = ""
		sc[i] = r
	}
	return jail.Spec{
		Version: s.Version, FDs: s.FDs, Strict: s.Strict, ExecOnce: s.ExecOnce,
		Landlock: ll, Seccomp: sc,
	}
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// entryChanges is specChanges for an entry whose jail does not compile
// now (its program is gone, a grant is refused): the parts of the entry
// that feed each part of the spec. What the jail does not see (name,
// autostart, restart, grants, accounts) is left out.
func entryChanges(a, b policy.App, devA, devB bool) []string {
	var out []string
	sa, sb := a.Sandbox, b.Sandbox
	sa.Accounts, sb.Accounts = nil, nil
	if devA != devB || !reflect.DeepEqual(sa, sb) || !slices.Equal(a.Resources, b.Resources) || a.Storage != b.Storage {
		out = append(out, ChangedJail)
	}
	if !slices.Equal(a.Exec[:min(1, len(a.Exec))], b.Exec[:min(1, len(b.Exec))]) {
		out = append(out, ChangedExec)
	}
	if !slices.Equal(tail(a.Exec), tail(b.Exec)) {
		out = append(out, ChangedArgv)
	}
	if !reflect.DeepEqual(a.Env, b.Env) || !slices.Equal(a.PassEnv, b.PassEnv) || a.Storage != b.Storage {
		out = append(out, ChangedEnv)
	}
	if a.Storage.Jail != b.Storage.Jail {
		out = append(out, ChangedDir)
	}
	return out
}
