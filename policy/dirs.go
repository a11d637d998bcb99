package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dirs are the per-user places of docs/spec.md, resolved once from the
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
		// per-uid directory the daemon creates 0700 itself. Its name is
		// predictable, so whoever creates it must use EnsurePrivateDir.
		tmp := getenv("TMPDIR")
		if tmp == "" || !filepath.IsAbs(tmp) {
			tmp = "/tmp"
		}
		runtime = filepath.Join(tmp, fmt.Sprintf("octosup-%d", os.Getuid()))
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

// EnsurePrivateDir makes path a directory that only this user can use, as
// the control socket's directory must be: it creates it 0700 when absent
// (and its parents, 0700), and otherwise accepts it only if it is a real
// directory (not a symlink) owned by this user that nobody else can
// write to; read or search bits for others are taken away. The checks and
// that chmod go through one descriptor opened without following a
// symlink, so the directory cannot be swapped in between. A directory in
// a shared place like /tmp that someone else made first is refused, never
// used.
func EnsurePrivateDir(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create the parent of %s: %w", path, err)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s is not a directory but a symlink or a file: refusing to use it (remove it, or set XDG_RUNTIME_DIR)", path)
	case err != nil:
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): someone else created it; refusing to use it (remove it, or set XDG_RUNTIME_DIR)", path, st.Uid, uid)
	}
	perm := st.Mode & 0o777
	if perm&0o022 != 0 {
		return fmt.Errorf("%s has mode %#o: others could have put files in it; refusing to use it (remove it and let octosup create it again)", path, perm)
	}
	if perm != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("make %s private (mode 0700): %w", path, err)
		}
	}
	return nil
}
