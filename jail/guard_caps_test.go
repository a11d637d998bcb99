package jail

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWatchTakesTheAppsAccess: the guard adds an app's inotify watch with
// the app's own file-system access, not a root daemon's capabilities. A
// directory in the app's jail that nobody may read (mode 000: the app,
// root with no capability under a root daemon, may not) was watched,
// and the app learnt the names created in it; a directory it may read
// is watched (the control).
func TestWatchTakesTheAppsAccess(t *testing.T) {
	launchers(t, func(t *testing.T, h *harness) {
		jail := h.dirs.JailDir("probe")
		if err := os.MkdirAll(jail, 0o700); err != nil {
			t.Fatal(err)
		}
		hidden := filepath.Join(jail, "hidden")
		if err := os.Mkdir(hidden, 0o000); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(hidden, 0o700) })
		runEscapeCase(t, h, escapeCase{name: "watch a directory the app may not read",
			attempt: jailed(asIs, "inotify", hidden), refused: []string{"EACCES"},
			control: jailed(asIs, "inotify", jail), allowed: "ok"}, nil)
	})
}
