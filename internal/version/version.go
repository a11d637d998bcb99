// Package version says which build a binary is, from the VCS facts the
// Go toolchain stamps into it (runtime/debug.ReadBuildInfo): the
// commit, its time and whether the tree had changes. A build without
// them (go run, or outside a checkout) says "devel".
package version

import (
	"runtime/debug"
	"strings"
)

// String is the binary's version: "COMMIT (TIME)", with "+dirty" when
// the tree had uncommitted changes, or "devel".
func String() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromSettings(info.Settings)
}

func fromSettings(settings []debug.BuildSetting) string {
	var rev, at string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	var b strings.Builder
	b.WriteString(rev[:min(12, len(rev))])
	if dirty {
		b.WriteString("+dirty")
	}
	if at != "" {
		b.WriteString(" (" + at + ")")
	}
	return b.String()
}
