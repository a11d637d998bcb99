package version

import (
	"runtime/debug"
	"testing"
)

func TestFromSettings(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"no vcs", nil, "devel"},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-03T23:00:00Z"}, {Key: "vcs.modified", Value: "false"}},
			"0123456789ab (2026-12-03T23:00:00Z)"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}, "0123456789ab+dirty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fromSettings(c.settings); got != c.want {
				t.Fatalf("%q, want %q", got, c.want)
			}
		})
	}
}
