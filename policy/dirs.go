package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Dirs are the per-user places of SPEC §5, resolved once from the
// environment so that nothing below reads it again.
type Dirs struct {
	Home    string // the user's home, for "~" in externals
	Config  string // $XDG_CONFIG_HOME/octosup
	State   string // $XDG_STATE_HOME/octosup: consent, rules, sessions
	Data    string // $XDG_DATA_HOME/octosup: jails/ and secrets/
	Runtime string // $XDG_RUNTIME_DIR/octosup: control.sock
}

// DirsFromEnv resolves Dirs with the XDG defaults where a variable is
// unset. getenv is os.Getenv in production and a map lookup in tests.
func DirsFromEnv(getenv func(string) string) (Dirs, error) {
	home := getenv("HOME")
	if home == "" {
		return Dirs{}, fmt.Errorf("HOME is not set: octosup keeps its state under the user's home")
	}
	xdg := func(name, def string) string {
		if v := getenv(name); v != "" && filepath.IsAbs(v) {
			return v
		}
		return def
	}
	runtime := getenv("XDG_RUNTIME_DIR")
	if runtime == "" || !filepath.IsAbs(runtime) {
		// No session runtime dir (e.g. a bare container): fall back to a
		// per-uid directory the daemon creates 0700 itself.
		runtime = filepath.Join(os.TempDir(), fmt.Sprintf("octosup-%d", os.Getuid()))
	} else {
		runtime = filepath.Join(runtime, "octosup")
	}
	return Dirs{
		Home:    home,
		Config:  filepath.Join(xdg("XDG_CONFIG_HOME", filepath.Join(home, ".config")), "octosup"),
		State:   filepath.Join(xdg("XDG_STATE_HOME", filepath.Join(home, ".local", "state")), "octosup"),
		Data:    filepath.Join(xdg("XDG_DATA_HOME", filepath.Join(home, ".local", "share")), "octosup"),
		Runtime: runtime,
	}, nil
}

// ManifestPath is the default manifest.
func (d Dirs) ManifestPath() string { return filepath.Join(d.Config, "native-apps.json") }

// ControlSocket is the default control socket path.
func (d Dirs) ControlSocket() string { return filepath.Join(d.Runtime, "control.sock") }

// JailDir is an app's private writable directory.
func (d Dirs) JailDir(app string) string { return filepath.Join(d.Data, "jails", app) }

// SecretsDir is an app's private secrets directory.
func (d Dirs) SecretsDir(app string) string { return filepath.Join(d.Data, "secrets", app) }

// Expand resolves a manifest path: "~" is the user's home and "~/x" a place
// in it; every other path is returned as written. The manifest keeps "~"
// as written so that one file means the same for whichever user runs it;
// the expansion happens here, where the home is known. With no Home it
// returns p unchanged rather than a path relative to the daemon's cwd.
func (d Dirs) Expand(p string) string {
	if d.Home == "" {
		return p
	}
	if p == "~" {
		return d.Home
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(d.Home, rest)
	}
	return p
}
