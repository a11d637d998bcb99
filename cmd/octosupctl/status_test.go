package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"octosup/control"
)

// TestStatusShowsTheStore: status prints the state store's notes after
// the apps (also with no apps), and --json has the store member whole; a
// healthy store adds nothing.
func TestStatusShowsTheStore(t *testing.T) {
	app := control.AppStatus{ID: "clock", State: "stopped"}
	sick := &control.StoreStatus{Path: "/s/state.db", AuditDropped: 87, AuditError: "no space left on device",
		Notes: []string{"audit: 87 entries dropped: no space left on device"}}
	tests := []struct {
		name   string
		data   control.StatusData
		stdout string // regexp
	}{
		{"healthy", control.StatusData{Apps: []control.AppStatus{app}, Store: &control.StoreStatus{Path: "/s/state.db", Healthy: true, Notes: []string{}}},
			`^APP +STATE .*\nclock +stopped .*\n$`},
		{"audit dropped", control.StatusData{Apps: []control.AppStatus{app}, Store: sick},
			`^APP +STATE .*\nclock +stopped .*\nstore: audit: 87 entries dropped: no space left on device\n$`},
		{"no apps", control.StatusData{Apps: []control.AppStatus{}, Store: sick},
			`^no apps in the manifest\nstore: audit: 87 entries dropped: no space left on device\n$`},
		{"an older daemon", control.StatusData{Apps: []control.AppStatus{app}}, `^APP +STATE .*\nclock +stopped .*\n$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			socket := fakeDaemon(t, func(op string, _ json.RawMessage, _ bool) (any, *control.Error, []fakeEvent) {
				return tt.data, nil, nil
			})
			r := ctl(t, "--socket", socket, "status")
			if r.code != exitOK || !regexp.MustCompile(tt.stdout).MatchString(r.stdout) {
				t.Fatalf("status: %+v, want stdout %s", r, tt.stdout)
			}
			r = ctl(t, "--socket", socket, "--json", "status")
			var got control.StatusData
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK {
				t.Fatalf("status --json: %v %+v", err, r)
			}
			if want := string(mustJSON(t, tt.data)); string(mustJSON(t, got)) != want {
				t.Fatalf("status --json has %s, want %s", mustJSON(t, got), want)
			}
		})
	}
}
