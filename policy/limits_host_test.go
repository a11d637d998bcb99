package policy

import (
	"slices"
	"testing"
)

func TestCheckLimitsHost(t *testing.T) {
	m := &Manifest{Apps: []App{
		{ID: "hog", Limits: ResourceLimits{MemoryMax: 64 << 20, TasksMax: 64, CPUWeight: 50}},
		{ID: "plain", Limits: ResourceLimits{TasksMax: DefaultTasksMax}},
	}}
	fields := func(ps []Problem) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.App+" "+p.Field)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		have  map[string]bool
		where string
		root  bool
		want  []string
	}{
		{"every controller", map[string]bool{"memory": true, "pids": true, "cpu": true, "io": true}, "/sys/fs/cgroup", true, nil},
		{"hybrid, root", map[string]bool{}, "/sys/fs/cgroup/unified", true, []string{"hog limits.memory_max", "hog limits.tasks_max", "hog limits.cpu_weight"}},
		{"hybrid, a user: RLIMIT_NPROC holds tasks_max", map[string]bool{}, "/sys/fs/cgroup/unified", false, []string{"hog limits.memory_max", "hog limits.cpu_weight"}},
		{"no cgroup2", map[string]bool{}, "", false, []string{"hog limits.memory_max", "hog limits.cpu_weight"}},
		{"memory only", map[string]bool{"memory": true}, "/sys/fs/cgroup", true, []string{"hog limits.tasks_max", "hog limits.cpu_weight"}},
	} {
		if got := fields(m.CheckLimitsHost(c.have, c.where, c.root)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	got := m.CheckLimitsHost(map[string]bool{"cpu": true}, "/sys/fs/cgroup/unified", true)[0].String()
	want := `app "hog": limits.memory_max: memory_max 64M cannot be held here: this host's cgroup v2 (/sys/fs/cgroup/unified) has no memory controller (it offers cpu); the daemon will refuse to start the app (fix: remove it to run the app without it, or run octosupd on a host whose cgroup v2 has the controller (docs/limits.md))`
	if got != want {
		t.Errorf("message\n%s\nwant\n%s", got, want)
	}
}
