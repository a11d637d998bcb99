package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// LimitController names the cgroup controller a limit (a field of
// ResourceLimits, by its JSON name) needs.
func LimitController(limit string) string {
	switch limit {
	case "memory_max", "memory_high":
		return "memory"
	case "tasks_max":
		return "pids"
	case "cpu_weight", "cpu_max":
		return "cpu"
	case "io_weight":
		return "io"
	}
	return ""
}

// HardLimit reports whether a limit bounds an app (a start that cannot
// hold one the entry sets is refused) rather than shares a resource with
// the other apps (cpu_weight, io_weight: the app runs without it).
func HardLimit(limit string) bool {
	switch limit {
	case "memory_max", "memory_high", "tasks_max", "cpu_max":
		return true
	}
	return false
}

// Set lists the limits the entry sets itself, as JSON name and value,
// in the order of the fields; tasks_max counts when it differs from
// DefaultTasksMax.
func (l ResourceLimits) Set() [][2]string {
	var out [][2]string
	add := func(name, value string, set bool) {
		if set {
			out = append(out, [2]string{name, value})
		}
	}
	add("memory_max", l.MemoryMax.String(), l.MemoryMax != 0)
	add("memory_high", l.MemoryHigh.String(), l.MemoryHigh != 0)
	add("tasks_max", strconv.Itoa(l.TasksMax), l.TasksMax != 0 && l.TasksMax != DefaultTasksMax)
	add("cpu_weight", strconv.Itoa(l.CPUWeight), l.CPUWeight != 0)
	add("cpu_max", l.CPUMax, l.CPUMax != "")
	add("io_weight", strconv.Itoa(l.IOWeight), l.IOWeight != 0)
	return out
}

// Unheld lists the limits the entry sets (Set) that nothing would hold
// where have says which controllers a process's cgroup has: a tasks_max
// without the pids controller is still held by RLIMIT_NPROC, except for
// a root daemon's apps (root), which the kernel exempts from it.
func (l ResourceLimits) Unheld(have func(controller string) bool, root bool) [][2]string {
	var out [][2]string
	for _, kv := range l.Set() {
		if have(LimitController(kv[0])) || kv[0] == "tasks_max" && !root {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// LimitControllers are the cgroup controllers the limits use, in the
// order the daemon enables them.
func LimitControllers() []string { return []string{"memory", "pids", "cpu", "io"} }

// CheckLimitsHost warns of each limit an entry sets that this host
// cannot hold: its controller is not among have, what the cgroup v2
// hierarchy mounted at where offers (its root's cgroup.controllers; where
// is "" when none is mounted), as Unheld says.
// Like CheckPrograms these are warnings about the machine, never errors:
// the daemon refuses to start an app whose hard limit it cannot hold, and
// runs one without a weight it cannot apply.
func (m *Manifest) CheckLimitsHost(have map[string]bool, where string, root bool) []Problem {
	var offered []string
	for _, c := range LimitControllers() {
		if have[c] {
			offered = append(offered, c)
		}
	}
	lacks := func(ctl string) string {
		if where == "" {
			return "no cgroup v2 is mounted here"
		}
		return fmt.Sprintf("this host's cgroup v2 (%s) has no %s controller (it offers %s)", where, ctl, orNothing(offered))
	}
	var warns []Problem
	for _, a := range m.Apps {
		for _, kv := range a.Limits.Unheld(func(c string) bool { return have[c] }, root) {
			name, value := kv[0], kv[1]
			ctl := LimitController(name)
			p := Problem{App: a.ID, Field: "limits." + name}
			if HardLimit(name) {
				p.Message = fmt.Sprintf("%s %s cannot be held here: %s; the daemon will refuse to start the app", name, value, lacks(ctl))
				if name == "tasks_max" {
					p.Message += " (RLIMIT_NPROC does not hold a root daemon's apps)"
				}
				p.Fix = "remove it to run the app without it, or run octosupd on a host whose cgroup v2 has the controller (docs/limits.md)"
			} else {
				p.Message = fmt.Sprintf("%s %s cannot be applied here: %s; the app runs without it (refused where strict)", name, value, lacks(ctl))
				p.Fix = "remove it, or run octosupd on a host whose cgroup v2 has the controller (docs/limits.md)"
			}
			warns = append(warns, p)
		}
	}
	return warns
}

func orNothing(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
