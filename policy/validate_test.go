package policy

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"octosup/configs"
)

// app is a manifest with one app "notes" whose entry has the given extra
// fields, so that a case shows only what it is about.
func app(fields string) string {
	if fields != "" {
		fields = ", " + fields
	}
	return `{"version": 1, "apps": [{"id": "notes", "exec": ["/usr/lib/octos/notes"]` + fields + `}]}`
}

func sandbox(fields string) string { return app(`"sandbox": {` + fields + `}`) }

type badCase struct {
	name  string
	input string // the manifest, or
	file  string // a file under testdata/bad
	want  []string
}

var badCases = []badCase{
	{name: "empty file", input: "  \n",
		want: []string{`the manifest is empty (fix: write at least {"version": 1, "apps": []}; configs/native-apps.example.json is a starting point)`}},
	{name: "not an object", input: `[]`,
		want: []string{`the manifest must be an object, not a list (fix: write the manifest as one JSON object, e.g. {"version": 1, "apps": []})`}},
	{name: "syntax error names line and column", file: "trailing-comma.json",
		want: []string{`line 4, column 43: invalid character '}' looking for beginning of object key string (fix: correct the JSON there: a missing or extra comma, quote or bracket is the usual cause)`}},
	{name: "truncated", input: `{"version": 1, "apps": [`,
		want: []string{`line 1, column 25: the file ends in the middle of the manifest (fix: close every open string, [ and {)`}},
	{name: "second value after the object", file: "two-objects.json",
		want: []string{`line 2, column 1: there is more after the manifest's closing } (fix: remove it: a manifest is exactly one JSON object)`}},
	{name: "invalid UTF-8", file: "latin1.json",
		want: []string{`line 1, column 36: the file is not valid UTF-8 (fix: save the file as UTF-8 (an editor's encoding setting, or iconv -t UTF-8))`}},
	{name: "too large", input: `{"version": 1, "apps": [], "x": "` + strings.Repeat("a", MaxManifestSize) + `"}`,
		want: []string{`the manifest is larger than 1048576 bytes (fix: check that this is the right file: a manifest of hundreds of apps stays far below the limit)`}},
	{name: "nested too deep", input: `{"version": 1, "apps": [], "x": ` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		want: []string{`line 1, column 64: the manifest nests deeper than 32 levels (fix: check that this is the right file: a manifest nests 6 levels at most)`}},
	{name: "wrong version", input: `{"version": 2, "apps": []}`,
		want: []string{`version: must be 1, not 2 (fix: set "version": 1)`}},
	{name: "version as a string", input: `{"version": "1", "apps": []}`,
		want: []string{`version: must be 1, not "1" (fix: set "version": 1)`}},
	{name: "huge numbers", input: `{"version": 100000000000000000000000000001, "apps": [{"id": "a", "exec": ["/x"], "sandbox": {"network": "tcp", "tcp_bind": [1e999999]}}]}`,
		want: []string{
			`version: must be 1, not 100000000000000000000000000001 (fix: set "version": 1)`,
			`app "a": sandbox.tcp_bind[0]: 1e999999 is not written as a whole number (fix: write a whole number, without a fraction or an exponent)`,
		}},
	{name: "version written as a fraction", input: `{"version": 1.0, "apps": []}`,
		want: []string{`version: 1.0 is not written as a whole number (fix: write 1)`}},
	{name: "missing version and apps", input: `{}`,
		want: []string{
			`apps: is missing (fix: add it, e.g. "apps": [])`,
			`version: is missing (fix: add it, e.g. "version": 1)`,
		}},
	{name: "unknown top-level field, close to a known one", input: `{"version": 1, "apps": [], "developer-mode": true}`,
		want: []string{`developer-mode: is not a field octosup knows (fix: rename it to "developer_mode")`}},
	{name: "unknown field, nothing close", input: app(`"colour": "blue"`),
		want: []string{`app "notes": colour: is not a field octosup knows (fix: remove it; the fields here are autostart, env, exec, grants, id, limits, name, pass_env, resources, restart, sandbox, storage)`}},
	{name: "case-variant field", input: app(`"Resources": ["/x"]`),
		want: []string{`app "notes": Resources: is not a field octosup knows (fix: rename it to "resources")`}},
	{name: "case-variant field does not stand in for the real one", input: sandbox(`"network": "tcp", "tcp_connect": [443], "Network": "none"`),
		want: []string{`app "notes": sandbox.Network: is not a field octosup knows (fix: rename it to "network")`}},
	{name: "duplicate key", input: `{"version": 1, "apps": [], "version": 1}`,
		want: []string{`version: the key "version" appears twice in the same object (fix: keep one of them: JSON readers disagree on which one counts)`}},
	{name: "duplicate key inside an app", input: sandbox(`"network": "none", "network": "full"`),
		want: []string{`app "notes": sandbox.network: the key "network" appears twice in the same object (fix: keep one of them: JSON readers disagree on which one counts)`}},
	{name: "apps not a list", input: `{"version": 1, "apps": {"notes": {}}}`,
		want: []string{`apps: must be a list, not an object (fix: write the apps as a list of objects: "apps": [{"id": "notes", "exec": ["/usr/lib/octos/notes"]}])`}},
	{name: "apps that are not objects, an app without id", input: `{"version": 1, "apps": [1, "notes", {"exec": []}]}`,
		want: []string{
			`app #0: must be an object, not a number (fix: write each app as an object with at least "id" and "exec")`,
			`app #1: must be an object, not a string (fix: write each app as an object with at least "id" and "exec")`,
			`app #2: id: is missing (fix: add it, e.g. "id": "notes")`,
			`app #2: exec: must name the program to run (fix: list the program and its arguments, e.g. "exec": ["/usr/lib/octos/notes", "--hub-fd", "3"])`,
		}},
	{name: "bad id, relative exec", input: `{"version": 1, "apps": [{"id": "Notes", "exec": ["bin/notes"]}]}`,
		want: []string{
			`app #0: id: "Notes" must be 1 to 32 characters: a lowercase letter, then lowercase letters, digits or '-' (fix: use an id like "notes" or "photo-sync")`,
			`app #0: exec[0]: "bin/notes" must be an absolute path (fix: write the full path, starting with /)`,
		}},
	{name: "id too long", input: `{"version": 1, "apps": [{"id": "a23456789012345678901234567890123", "exec": ["/x"]}]}`,
		want: []string{`app #0: id: "a23456789012345678901234567890123" must be 1 to 32 characters: a lowercase letter, then lowercase letters, digits or '-' (fix: use an id like "notes" or "photo-sync")`}},
	{name: "missing exec", input: `{"version": 1, "apps": [{"id": "notes"}]}`,
		want: []string{`app "notes": exec: is missing (fix: add it, e.g. "exec": ["/usr/lib/octos/notes"])`}},
	{name: "argument not a string", input: `{"version": 1, "apps": [{"id": "notes", "exec": ["/x", 3]}]}`,
		want: []string{`app "notes": exec[1]: must be a string, not a number (fix: write every argument as a string, e.g. "3" rather than 3)`}},
	{name: "NUL in an argument", input: `{"version": 1, "apps": [{"id": "notes", "exec": ["/x", "a\u0000b"]}]}`,
		want: []string{`app "notes": exec[1]: contains a NUL character (\u0000) (fix: remove it: paths, arguments and names cannot hold NUL)`}},
	{name: "lone surrogate escapes", input: app(`"name": "\ud83d\ude00 ok", "env": {"A": "\ud800", "B": "\udc00x", "C": "\\ud800", "D": "\ud800\u0041"}`),
		want: []string{
			`app "notes": env.A: contains a \u escape of half a UTF-16 surrogate pair (fix: write the character itself, or both halves of the pair)`,
			`app "notes": env.B: contains a \u escape of half a UTF-16 surrogate pair (fix: write the character itself, or both halves of the pair)`,
			`app "notes": env.D: contains a \u escape of half a UTF-16 surrogate pair (fix: write the character itself, or both halves of the pair)`,
		}},
	{name: "duplicate ids, unclean exec", input: `{"version": 1, "apps": [{"id": "notes", "exec": ["/x"]}, {"id": "notes", "exec": ["/usr//lib/./octos/notes/"]}]}`,
		want: []string{
			`app #1: id: "notes" is already the id of apps[0] (fix: give every app its own id)`,
			`app #1: exec[0]: "/usr//lib/./octos/notes/" has redundant parts (//, /./, /../ or a trailing /) (fix: write "/usr/lib/octos/notes")`,
		}},
	{name: "restart and network typos", input: app(`"restart": "always", "sandbox": {"network": "tpc", "tcp_connect": [80]}`),
		want: []string{
			`app "notes": restart: "always" is not one of "on-request", "on-failure" (fix: use "on-request" or "on-failure")`,
			`app "notes": sandbox.network: "tpc" is not one of "none", "tcp", "full" (fix: write "tcp")`,
		}},
	{name: "ports without network tcp", input: sandbox(`"tcp_connect": [443], "tcp_bind": [8080]`),
		want: []string{
			`app "notes": sandbox.tcp_connect: ports need network "tcp" (fix: set "network": "tcp" or remove tcp_connect)`,
			`app "notes": sandbox.tcp_bind: ports need network "tcp" (fix: set "network": "tcp" or remove tcp_bind)`,
		}},
	// The misspelt field is the one problem: the network it meant is
	// not "none", so the ports are not flagged for it.
	{name: "a misspelt network", input: sandbox(`"netwrok": "tcp", "tcp_bind": [8080]`),
		want: []string{`app "notes": sandbox.netwrok: is not a field octosup knows (fix: rename it to "network")`}},
	{name: "ports with network full", input: sandbox(`"network": "full", "tcp_bind": [8080]`),
		want: []string{`app "notes": sandbox.tcp_bind: ports need network "tcp" (fix: set "network": "tcp" or remove tcp_bind)`}},
	{name: "network tcp without ports", input: sandbox(`"network": "tcp", "tcp_connect": []`),
		want: []string{`app "notes": sandbox.network: "tcp" with no port in tcp_connect or tcp_bind allows no connection at all (fix: list the ports the app needs in tcp_connect or tcp_bind, or set "network": "none")`}},
	{name: "bad ports", input: sandbox(`"network": "tcp", "tcp_connect": [443, 0, 70000, 443, -1], "tcp_bind": [8e3, "80"]`),
		want: []string{
			`app "notes": sandbox.tcp_connect[1]: 0 must be a TCP port from 1 to 65535 (fix: use a port number from 1 to 65535)`,
			`app "notes": sandbox.tcp_connect[2]: 70000 must be a TCP port from 1 to 65535 (fix: use a port number from 1 to 65535)`,
			`app "notes": sandbox.tcp_connect[3]: 443 is already listed at [0] (fix: remove the duplicate)`,
			`app "notes": sandbox.tcp_connect[4]: -1 must be a TCP port from 1 to 65535 (fix: use a port number from 1 to 65535)`,
			`app "notes": sandbox.tcp_bind[0]: 8e3 is not written as a whole number (fix: write 8000)`,
			`app "notes": sandbox.tcp_bind[1]: must be a whole number, not a string (fix: use a port number from 1 to 65535)`,
		}},
	{name: "broad with narrowing settings", input: sandbox(`"policy": "broad", "network": "none", "tcp_connect": [443], "external": [{"path": "/srv", "access": "ro"}]`),
		want: []string{
			`app "notes": sandbox.network: "none" has no effect with policy "broad", which does not narrow the network (fix: remove "network" (a broad app has the full network) or set "policy": "jail")`,
			`app "notes": sandbox.tcp_connect: has no effect with policy "broad", which does not narrow the network (fix: remove tcp_connect, or set "policy": "jail" and "network": "tcp")`,
			`app "notes": sandbox.external: has no effect with policy "broad", which does not narrow the filesystem (fix: remove external, or set "policy": "jail")`,
		}},
	{name: "desktop sockets and devices: typos, refusals, repeats", input: sandbox(`"sockets": ["wayland", "pulse-audio", "x11", "pipewire", "wayland"], "devices": ["dri", "input", "dry"]`),
		want: []string{
			`app "notes": sandbox.sockets[1]: "pulse-audio" is not one of "wayland", "pulseaudio" (fix: write "pulseaudio")`,
			`app "notes": sandbox.sockets[2]: "x11" is refused: an X11 client can read every other window's keystrokes and contents and inject input into them, so no X11 socket is a jail (fix: run an X11-only app under Xwayland's rootless mode with its own X server per app (e.g. xwayland-satellite), or give it policy "broad" knowing it sees the whole X session; see docs/manifest.md)`,
			`app "notes": sandbox.sockets[3]: "pipewire" is refused: a client of PipeWire's own socket can have the server load a plugin from a path it names, which is code outside the jail (fix: use "pulseaudio": pipewire-pulse serves the PulseAudio protocol, through the daemon's sound filter; see docs/jail.md)`,
			`app "notes": sandbox.sockets[4]: "wayland" is already listed at [0] (fix: remove the duplicate)`,
			`app "notes": sandbox.devices[1]: "input" is refused: input devices carry every keystroke of every app, the password prompt's too (fix: remove it: input comes from the compositor ("sockets": ["wayland"]))`,
			`app "notes": sandbox.devices[2]: "dry" is not one of "dri" (fix: write "dri")`,
		}},
	{name: "desktop grants with policy broad", input: sandbox(`"policy": "broad", "sockets": ["wayland"], "devices": ["dri"]`),
		want: []string{
			`app "notes": sandbox.sockets: has no effect with policy "broad", which reaches every socket and device it can name (fix: remove sockets, or set "policy": "jail")`,
			`app "notes": sandbox.devices: has no effect with policy "broad", which reaches every socket and device it can name (fix: remove devices, or set "policy": "jail")`,
		}},
	{name: "unknown sandbox field, bad strictness and accounts", input: sandbox(`"netwrok": "none", "accounts": ["", "my account"], "strictness": "lax", "processes": "false"`),
		want: []string{
			`app "notes": sandbox.netwrok: is not a field octosup knows (fix: rename it to "network")`,
			`app "notes": sandbox.accounts[0]: "" must be an account name of 1 to 64 characters without spaces or control characters (fix: use the account's name, e.g. "personal")`,
			`app "notes": sandbox.accounts[1]: "my account" must be an account name of 1 to 64 characters without spaces or control characters (fix: use the account's name, e.g. "personal")`,
			`app "notes": sandbox.strictness: "lax" is not one of "best-effort", "strict" (fix: use "best-effort" or "strict", or leave it out to follow the daemon's setting)`,
			`app "notes": sandbox.processes: must be true or false, not a string (fix: write true or false, without quotes)`,
		}},
	{name: "external paths", input: sandbox(`"external": [{"path": "Documents"}, {"path": "~/a/../b", "access": "rw"}, {"path": "~/../etc", "access": "ro"}, {"path": "/srv", "access": "ro", "mode": "0644"}, {"path": "/srv", "access": "rw"}, {"path": "~user/x", "access": "ro"}]`),
		want: []string{
			`app "notes": sandbox.external[0].access: is missing (fix: add it, e.g. "access": "ro")`,
			`app "notes": sandbox.external[0].path: "Documents" must be an absolute path or start with ~/ (fix: write the full path, starting with / (or ~/ for a place in your home))`,
			`app "notes": sandbox.external[1].path: "~/a/../b" has redundant parts (//, /./, /../ or a trailing /) (fix: write "~/b")`,
			`app "notes": sandbox.external[2].path: "~/../etc" leaves your home directory (fix: write the absolute path instead)`,
			`app "notes": sandbox.external[3].mode: is not a field octosup knows (fix: remove it; the fields here are access, path)`,
			`app "notes": sandbox.external[4].path: "/srv" is already listed at external[3] (fix: keep one entry (with "rw" if either needs to write))`,
			`app "notes": sandbox.external[5].path: "~user/x" must be an absolute path or start with ~/ (fix: write the full path, starting with / (or ~/ for a place in your home))`,
		}},
	{name: "resources", input: app(`"resources": ["share/notes", "/usr/share/notes/", "/usr/share/x", "/usr/share/x"]`),
		want: []string{
			`app "notes": resources[0]: "share/notes" must be an absolute path or start with ~/ (fix: write the full path, starting with / (or ~/ for a place in your home))`,
			`app "notes": resources[1]: "/usr/share/notes/" has redundant parts (//, /./, /../ or a trailing /) (fix: write "/usr/share/notes")`,
			`app "notes": resources[3]: "/usr/share/x" is already listed at [2] (fix: remove the duplicate)`,
		}},
	// Paths that name the process opening them: the daemon opens the
	// jail's paths, so they would grant the daemon's own files.
	{name: "self paths", input: app(`"resources": ["/proc/self/cwd", "/proc/selfish", "/dev/stdout"], "sandbox": {"policy": "jail", "network": "none", "external": [{"path": "/dev/fd/3", "access": "rw"}, {"path": "/proc/thread-self", "access": "ro"}]}`),
		want: []string{
			`app "notes": resources[0]: "/proc/self/cwd" names whichever process opens it: the daemon builds the jail, so it would grant the daemon's own files (fix: name the real path (the app's own /proc entry is always readable))`,
			`app "notes": resources[1]: "/proc/selfish" is in /proc, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised (fix: remove it (the app's own /proc entry is always readable))`,
			`app "notes": resources[2]: "/dev/stdout" names whichever process opens it: the daemon builds the jail, so it would grant the daemon's own files (fix: name the real path (the app's own /proc entry is always readable))`,
			`app "notes": sandbox.external[0].path: "/dev/fd/3" names whichever process opens it: the daemon builds the jail, so it would grant the daemon's own files (fix: name the real path (the app's own /proc entry is always readable))`,
			`app "notes": sandbox.external[1].path: "/proc/thread-self" names whichever process opens it: the daemon builds the jail, so it would grant the daemon's own files (fix: name the real path (the app's own /proc entry is always readable))`,
		}},
	// /proc and /sys are never granted: /proc names the daemon and the
	// user's processes, /sys holds the cgroup tree.
	{name: "kernel views", input: app(`"resources": ["/proc/cpuinfo", "/sysroot"], "sandbox": {"policy": "jail", "network": "none", "external": [{"path": "/sys/fs/cgroup", "access": "rw"}, {"path": "/proc", "access": "ro"}]}`),
		want: []string{
			`app "notes": resources[0]: "/proc/cpuinfo" is in /proc, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised (fix: remove it (the app's own /proc entry is always readable))`,
			`app "notes": sandbox.external[0].path: "/sys/fs/cgroup" is in /sys, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised (fix: remove it (the app's own /proc entry is always readable))`,
			`app "notes": sandbox.external[1].path: "/proc" is in /proc, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised (fix: remove it (the app's own /proc entry is always readable))`,
		}},
	// "/" holds them both, read-only as well.
	{name: "the root", input: app(`"resources": ["/"], "sandbox": {"policy": "jail", "network": "none", "external": [{"path": "/", "access": "ro"}]}`),
		want: []string{
			`app "notes": resources[0]: "/" holds /proc and /sys, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised (fix: name the directories the app needs)`,
			`app "notes": sandbox.external[0].path: "/" holds /proc and /sys, which no app is granted: /proc names the daemon and every process of the user, /sys holds the cgroup tree that keeps apps supervised (fix: name the directories the app needs)`,
		}},
	{name: "reserved environment variables", input: app(`"env": {"OCTOS_AUTH_TOKEN": "x", "OCTOSENSE_VAULT": "x", "OCTOSUP_HUB_FD": "4", "NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1", "LISTEN_FDS": "1", "OCTOSX": "fine", "LISTENER": "fine"}`),
		want: []string{
			`app "notes": env.OCTOS_AUTH_TOKEN: is reserved: the daemon keeps octos' own variables (OCTOS_*, OCTOSENSE_*) away from every app (fix: remove it, or give the variable a name outside these prefixes)`,
			`app "notes": env.OCTOSENSE_VAULT: is reserved: the daemon keeps octos' own variables (OCTOS_*, OCTOSENSE_*) away from every app (fix: remove it, or give the variable a name outside these prefixes)`,
			`app "notes": env.OCTOSUP_HUB_FD: is reserved: OCTOSUP_* variables are the daemon's own (it sets OCTOSUP_APP_ID, OCTOSUP_HUB_FD, OCTOSUP_JAIL and OCTOSUP_SECRETS itself) (fix: remove it, or give the variable a name outside these prefixes)`,
			`app "notes": env.NOTIFY_SOCKET: is reserved: systemd's NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* belong to the daemon alone (fix: remove it, or give the variable a name outside these prefixes)`,
			`app "notes": env.WATCHDOG_USEC: is reserved: systemd's NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* belong to the daemon alone (fix: remove it, or give the variable a name outside these prefixes)`,
			`app "notes": env.LISTEN_FDS: is reserved: systemd's NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* belong to the daemon alone (fix: remove it, or give the variable a name outside these prefixes)`,
		}},
	{name: "pass_env", input: app(`"pass_env": ["GTK_THEME", "OCTOS_TOKEN", "GTK_THEME", "1BAD"]`),
		want: []string{
			`app "notes": pass_env[1]: is reserved: the daemon keeps octos' own variables (OCTOS_*, OCTOSENSE_*) away from every app (fix: remove it)`,
			`app "notes": pass_env[2]: "GTK_THEME" is already listed at [0] (fix: remove the duplicate)`,
			`app "notes": pass_env[3]: "1BAD" is not a valid variable name: letters, digits and '_', not starting with a digit, at most 128 (fix: write a variable name, e.g. "GTK_THEME")`,
		}},
	{name: "environment names and values", input: app(`"env": {"MY-VAR": "1", "1X": "1", "COUNT": 1, "OK": "yes", "a.b": ""}`),
		want: []string{
			`app "notes": env.MY-VAR: is not a valid variable name: letters, digits and '_', not starting with a digit, at most 128 (fix: rename it, e.g. MY_SETTING)`,
			`app "notes": env["1X"]: is not a valid variable name: letters, digits and '_', not starting with a digit, at most 128 (fix: rename it, e.g. MY_SETTING)`,
			`app "notes": env.COUNT: must be a string, not a number (fix: write the value as a string, e.g. "1" rather than 1)`,
			`app "notes": env["a.b"]: is not a valid variable name: letters, digits and '_', not starting with a digit, at most 128 (fix: rename it, e.g. MY_SETTING)`,
		}},
	{name: "unknown service, method typo, bad tool name", input: app(`"grants": {"services": ["agent.other"], "methods": ["octos.turn.stat"], "tools": ["bad tool", "notes.search", "notes.search"]}`),
		want: []string{
			`app "notes": grants.services[0]: "agent.other" is not one of "agent.octos" (fix: the only service is "agent.octos")`,
			`app "notes": grants.methods[0]: "octos.turn.stat" is not one of "octos.session.open", "octos.session.history", "octos.turn.start", "octos.turn.interrupt", "octos.context.close" (fix: write "octos.turn.start")`,
			`app "notes": grants.tools[0]: "bad tool" must be up to 64 characters: dot-separated words of letters, digits, '_' or '-', each starting with a letter (fix: use a tool name like "notes.search")`,
			`app "notes": grants.tools[2]: "notes.search" is already listed at [1] (fix: remove the duplicate)`,
		}},
	{name: "methods and tools without the service", input: app(`"grants": {"services": [], "methods": ["octos.turn.start"], "tools": ["notes.search"]}`),
		want: []string{
			`app "notes": grants.methods: methods need the "agent.octos" service (fix: add "agent.octos" to grants.services, or remove methods)`,
			`app "notes": grants.tools: tools need the "agent.octos" service (fix: add "agent.octos" to grants.services, or remove tools)`,
		}},
	{name: "wrong types for booleans and objects", input: app(`"autostart": 1, "storage": {"jail": "yes", "secrets": true, "tmp": true}, "grants": []`),
		want: []string{
			`app "notes": autostart: must be true or false, not a number (fix: write true or false, without quotes)`,
			`app "notes": storage.jail: must be true or false, not a string (fix: write true or false, without quotes)`,
			`app "notes": storage.tmp: is not a field octosup knows (fix: remove it; the fields here are jail, secrets)`,
			`app "notes": grants: must be an object, not a list (fix: write grants as an object, e.g. "grants": {"services": ["agent.octos"], "methods": [], "tools": []})`,
		}},
	{name: "empty name and control characters", input: `{"version": 1, "developer_mode": "yes", "apps": [{"id": "a", "exec": ["/x"], "name": ""}, {"id": "b", "exec": ["/x"], "name": "tab\there"}]}`,
		want: []string{
			`developer_mode: must be true or false, not a string (fix: write true or false, without quotes)`,
			`app "a": name: "" must be 1 to 64 characters without control characters (fix: use a short name for people, e.g. "Notes", or leave "name" out)`,
			`app "b": name: "tab\there" must be 1 to 64 characters without control characters (fix: use a short name for people, e.g. "Notes", or leave "name" out)`,
		}},
	{name: "limits of the wrong kinds", input: app(`"limits": {"memory_max": 512, "memory_high": "1.5G", "tasks_max": 0, "cpu_weight": 20000, "cpu_max": "half", "io_weight": "100", "swap_max": "1G"}`),
		want: []string{
			`app "notes": limits.memory_max: 512 is not a size from 1M to 1P: bytes, or digits with K, M, G or T (powers of 1024) (fix: write a size like "512M" or "2G")`,
			`app "notes": limits.memory_high: "1.5G" is not a size from 1M to 1P: bytes, or digits with K, M, G or T (powers of 1024) (fix: write a size like "512M" or "2G")`,
			`app "notes": limits.tasks_max: 0 must be a number of tasks from 1 to 4194304 (fix: write a whole number, e.g. "tasks_max": 256)`,
			`app "notes": limits.cpu_weight: 20000 must be a weight from 1 to 10000 (100 is the default) (fix: write a whole number from 1 to 10000, e.g. 200 for twice the default share)`,
			`app "notes": limits.cpu_max: "half" is not a CPU cap: "N%" of one CPU, or "quota/period" in microseconds (fix: write e.g. "cpu_max": "50%", or "50000/100000")`,
			`app "notes": limits.io_weight: must be a whole number, not a string (fix: write a whole number from 1 to 10000, e.g. 200 for twice the default share)`,
			`app "notes": limits.swap_max: is not a field octosup knows (fix: remove it; the fields here are cpu_max, cpu_weight, io_weight, memory_high, memory_max, tasks_max)`,
		}},
	{name: "limits the schema lets through", input: app(`"limits": {"memory_max": "512K", "cpu_max": "500/100000"}`),
		want: []string{
			`app "notes": limits.memory_max: 512K is less than 1M, too little to load a program (fix: write the unit: "512M", not "512")`,
			`app "notes": limits.cpu_max: "500/100000": the quota must be at least 1000 microseconds (1% of the default period) (fix: write a share of one CPU like "50%" (or "200%" for two), or "quota/period" in microseconds like "50000/100000")`,
		}},
	{name: "memory_high above memory_max, a period out of range", input: app(`"limits": {"memory_max": "1G", "memory_high": "2G", "cpu_max": "5000/10"}`),
		want: []string{
			`app "notes": limits.memory_high: 2G is above memory_max 1G: the app would be killed before it is ever throttled (fix: set memory_high below memory_max (e.g. 80% of it), or leave it out)`,
			`app "notes": limits.cpu_max: "5000/10": the period must be from 1000 to 1000000 microseconds (fix: write a share of one CPU like "50%" (or "200%" for two), or "quota/period" in microseconds like "50000/100000")`,
		}},
	{name: "limits not an object, a size too large", input: `{"version": 1, "apps": [{"id": "a", "exec": ["/x"], "limits": []}, {"id": "b", "exec": ["/x"], "limits": {"memory_max": "99999T"}}]}`,
		want: []string{
			`app "a": limits: must be an object, not a list (fix: write limits as an object, e.g. "limits": {"memory_max": "512M", "tasks_max": 256})`,
			`app "b": limits.memory_max: "99999T" is not a size from 1M to 1P: bytes, or digits with K, M, G or T (powers of 1024) (fix: write a size like "512M" or "2G")`,
		}},
	{name: "several apps, several problems each", file: "many.json",
		want: []string{
			`app #0: exec[0]: "notes" must be an absolute path (fix: write the full path, starting with /)`,
			`app #0: restart: "sometimes" is not one of "on-request", "on-failure" (fix: use "on-request" or "on-failure")`,
			`app #0: sandbox.tcp_connect: ports need network "tcp" (fix: set "network": "tcp" or remove tcp_connect)`,
			`app #0: sandbox.external[0].access: "write" is not one of "ro", "rw" (fix: use "ro" (read-only) or "rw" (read-write))`,
			`app #0: env.OCTOSUP_HUB_FD: is reserved: OCTOSUP_* variables are the daemon's own (it sets OCTOSUP_APP_ID, OCTOSUP_HUB_FD, OCTOSUP_JAIL and OCTOSUP_SECRETS itself) (fix: remove it, or give the variable a name outside these prefixes)`,
			`app #1: id: "notes" is already the id of apps[0] (fix: give every app its own id)`,
			`app #1: grants.methods[1]: "octos.turn.start" is already listed at [0] (fix: remove the duplicate)`,
			`app #1: colour: is not a field octosup knows (fix: remove it; the fields here are autostart, env, exec, grants, id, limits, name, pass_env, resources, restart, sandbox, storage)`,
			`app #2: id: "Clock" must be 1 to 32 characters: a lowercase letter, then lowercase letters, digits or '-' (fix: use an id like "notes" or "photo-sync")`,
			`app #2: storage.jail: must be true or false, not a string (fix: write true or false, without quotes)`,
		}},
}

func (c badCase) data(t testing.TB) []byte {
	if c.file == "" {
		return []byte(c.input)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "bad", c.file))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseBad(t *testing.T) {
	if len(badCases) < 25 {
		t.Fatalf("only %d bad manifests: the table is the specification of the errors, keep it broad", len(badCases))
	}
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse(c.data(t))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", m)
			}
			verr, ok := errors.AsType[*ValidationError](err)
			if !ok {
				t.Fatalf("Parse returned %T (%v), want *ValidationError", err, err)
			}
			got := make([]string, len(verr.Problems))
			for i, p := range verr.Problems {
				got[i] = p.String()
				if p.Message == "" || p.Fix == "" {
					t.Errorf("problem %q lacks a message or a fix", got[i])
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if want := strings.Join(c.want, "\n"); err.Error() != want {
				t.Errorf("Error() =\n%s\nwant\n%s", err.Error(), want)
			}
		})
	}
}

// TestParseReportsEveryProblem guards the promise that a person fixes a
// manifest in one round: a problem in one app does not hide another's.
func TestParseReportsEveryProblem(t *testing.T) {
	data, err := os.ReadFile("testdata/bad/many.json")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(data)
	verr, ok := errors.AsType[*ValidationError](err)
	if !ok {
		t.Fatalf("Parse: %v, want a *ValidationError", err)
	}
	apps := map[string]int{}
	for _, p := range verr.Problems {
		apps[p.App]++
	}
	if len(verr.Problems) < 10 || apps["#0"] < 5 || apps["#1"] < 3 || apps["#2"] < 2 {
		t.Errorf("got %d problems (%v per app), want at least 10 across all three apps:\n%v", len(verr.Problems), apps, err)
	}
}

func TestParseGood(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good manifests: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			assertRoundTrip(t, m)
		})
	}
}

func assertRoundTrip(t testing.TB, m *Manifest) {
	t.Helper()
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("the re-encoded manifest does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(m, again) {
		t.Fatalf("round trip changed the manifest:\nfirst  %+v\nsecond %+v\nvia %s", m, again, out)
	}
}

func TestParseSpecExample(t *testing.T) {
	data, err := os.ReadFile("testdata/good/spec-example.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	no := false
	want := &Manifest{Version: 1, Apps: []App{{
		ID:        "notes",
		Name:      "Notes",
		Exec:      []string{"/usr/lib/octos/notes", "--hub-fd", "3"},
		Resources: []string{"/usr/share/octos/notes"},
		Autostart: true,
		Restart:   RestartOnRequest,
		Grants: Grants{
			Services: []string{ServiceAgent},
			Methods:  KnownMethods(),
			Tools:    []string{"notes.search", "notes.append"},
		},
		Sandbox: Sandbox{
			Policy:    PolicyJail,
			Network:   NetworkNone,
			Processes: &no,
			Accounts:  []string{"personal"},
			External:  []External{{Path: "~/Documents/Notes", Access: AccessRW}},
		},
		Storage: Storage{Jail: true, Secrets: true},
		Env:     map[string]string{"LANG": "C.UTF-8"},
		Limits:  ResourceLimits{TasksMax: DefaultTasksMax},
	}}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got  %+v\nwant %+v", m, want)
	}
}

func TestParseDefaults(t *testing.T) {
	m, err := Parse([]byte(`{"version": 1, "apps": [
		{"id": "a", "exec": ["/x"]},
		{"id": "b", "exec": ["/x"], "sandbox": {"policy": "broad"}},
		{"id": "c", "exec": ["/x"], "sandbox": {"network": "full"}, "grants": {"services": [], "tools": []}, "env": {}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		restart RestartPolicy
		policy  SandboxPolicy
		network Network
	}{
		{RestartOnRequest, PolicyJail, NetworkNone},
		{RestartOnRequest, PolicyBroad, NetworkFull},
		{RestartOnRequest, PolicyJail, NetworkFull},
	}
	for i, w := range want {
		a := m.Apps[i]
		if a.Restart != w.restart || a.Sandbox.Policy != w.policy || a.Sandbox.Network != w.network {
			t.Errorf("app %s: restart %q policy %q network %q, want %q %q %q",
				a.ID, a.Restart, a.Sandbox.Policy, a.Sandbox.Network, w.restart, w.policy, w.network)
		}
		if !a.Sandbox.MayCreateProcesses() {
			t.Errorf("app %s: processes default to false, want true", a.ID)
		}
	}
	c := m.Apps[2]
	if c.Grants.Services != nil || c.Grants.Tools != nil || c.Env != nil {
		t.Errorf("empty lists and maps are not nil: %+v", c)
	}
}

// Developer mode grants every service, so methods without agent.octos
// are not a mistake there.
func TestParseDeveloperModeAllowsMethodsWithoutService(t *testing.T) {
	in := `{"version": 1, "developer_mode": true, "apps": [{"id": "a", "exec": ["/x"], "grants": {"methods": ["octos.turn.start"]}}]}`
	if _, err := Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
}

func TestShippedExample(t *testing.T) {
	m, err := Load("../configs/native-apps.example.json")
	if err != nil {
		t.Fatalf("the shipped example does not load: %v", err)
	}
	assertRoundTrip(t, m)
	clock, ok := m.App("clock")
	if !ok || clock.Exec[0] != "/usr/lib/octosup/examples/clock" || clock.Restart != RestartOnFailure ||
		clock.Sandbox.MayCreateProcesses() || len(clock.Grants.Services) != 0 || !clock.Autostart {
		t.Errorf("clock entry: %+v", clock)
	}
	notes, ok := m.App("notes")
	if !ok || !slices.Equal(notes.Exec, []string{"/usr/lib/octosup/examples/notes", "--hub-fd", "3"}) ||
		!slices.Equal(notes.Grants.Methods, KnownMethods()) || !notes.Storage.Secrets || notes.Env["LANG"] != "C.UTF-8" {
		t.Errorf("notes entry: %+v", notes)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"version": 1, "apps": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil {
		t.Errorf("Load(good): %v", err)
	}

	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": 2, "apps": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if verr, ok := errors.AsType[*ValidationError](err); !ok || verr.File != bad {
		t.Errorf("Load(bad) = %v, want a *ValidationError for %s", err, bad)
	} else if want := bad + `: version: must be 1, not 2 (fix: set "version": 1)`; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}

	// Whoever can write the manifest chooses what runs as the user.
	open := filepath.Join(dir, "open.json")
	if err := os.WriteFile(open, []byte(`{"version": 1, "apps": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = Load(open)
	if want := open + ": is writable by every user (mode 0666): anyone could make octosup run their program as you (fix: chmod o-w " + open + ")"; err == nil || err.Error() != want {
		t.Errorf("Load(world-writable) = %v, want %s", err, want)
	}

	// A FIFO would block a plain open forever.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fifo); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("Load(fifo) = %v, want a not-a-regular-file problem", err)
	}

	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"version": 1, "apps": [], "x": "`+strings.Repeat("a", 2*MaxManifestSize)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, want a size problem", err)
	}
}

func TestProblemString(t *testing.T) {
	for _, c := range []struct {
		p    Problem
		want string
	}{
		{Problem{App: "notes", Field: "sandbox.tcp_connect", Message: `ports need network "tcp"`, Fix: `set "network": "tcp" or remove tcp_connect`},
			`app "notes": sandbox.tcp_connect: ports need network "tcp" (fix: set "network": "tcp" or remove tcp_connect)`},
		{Problem{App: "#3", Field: "id", Message: "is missing", Fix: "add it"}, `app #3: id: is missing (fix: add it)`},
		{Problem{App: "#3", Message: "must be an object", Fix: "x"}, `app #3: must be an object (fix: x)`},
		{Problem{Field: "version", Message: "must be 1"}, `version: must be 1`},
		{Problem{Message: "the manifest is empty"}, `the manifest is empty`},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
	e := &ValidationError{File: "m.json", Problems: []Problem{{Field: "a", Message: "x"}, {Field: "b", Message: "y"}}}
	if got, want := e.Error(), "m.json: a: x\nm.json: b: y"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestDirsExpand(t *testing.T) {
	d := Dirs{Home: "/home/ada"}
	for in, want := range map[string]string{
		"~":              "/home/ada",
		"~/":             "/home/ada",
		"~/Documents/x":  "/home/ada/Documents/x",
		"/usr/share":     "/usr/share",
		"~ada/Documents": "~ada/Documents",
		"relative":       "relative",
	} {
		if got := d.Expand(in); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (Dirs{}).Expand("~/x"); got != "~/x" {
		t.Errorf("Expand without a home = %q, want it unchanged", got)
	}
}

func TestReservedEnv(t *testing.T) {
	for name, want := range map[string]bool{
		"OCTOS_AUTH_TOKEN": true, "OCTOSENSE_VAULT": true, "OCTOSUP_X": true, "NOTIFY_SOCKET": true,
		"WATCHDOG_PID": true, "LISTEN_FDNAMES": true,
		"OCTOS": false, "NOTIFY_SOCKETS": false, "LISTENER": false, "LANG": false, "HOME": false,
	} {
		if got := ReservedEnv(name); got != want {
			t.Errorf("ReservedEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestSchemaMatchesTypes keeps configs/native-apps.schema.json and the Go
// types in step: a field added to one and not the other would be refused
// by the schema or silently dropped by the decoder.
func TestSchemaMatchesTypes(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(configs.Schema(), &schema); err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	defs := schema["$defs"].(map[string]any)
	for _, c := range []struct {
		typ    reflect.Type
		schema map[string]any
	}{
		{reflect.TypeFor[Manifest](), schema},
		{reflect.TypeFor[App](), defs["app"].(map[string]any)},
		{reflect.TypeFor[Grants](), defs["grants"].(map[string]any)},
		{reflect.TypeFor[Sandbox](), defs["sandbox"].(map[string]any)},
		{reflect.TypeFor[Storage](), defs["storage"].(map[string]any)},
		{reflect.TypeFor[External](), defs["external"].(map[string]any)},
		{reflect.TypeFor[ResourceLimits](), defs["limits"].(map[string]any)},
	} {
		var fields []string
		for f := range c.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		var props []string
		for name := range c.schema["properties"].(map[string]any) {
			props = append(props, name)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: Go fields %v, schema properties %v", c.typ.Name(), fields, props)
		}
		if c.schema["additionalProperties"] != false {
			t.Errorf("%s: the schema allows unknown fields", c.typ.Name())
		}
	}

	enum := func(path ...string) []string {
		var cur any = defs
		for _, p := range path {
			cur = cur.(map[string]any)[p]
		}
		var out []string
		for _, v := range cur.([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	for _, c := range []struct {
		got, want []string
	}{
		{enum("grants", "properties", "methods", "items", "enum"), KnownMethods()},
		{enum("grants", "properties", "services", "items", "enum"), []string{ServiceAgent}},
		{enum("app", "properties", "restart", "enum"), []string{string(RestartOnRequest), string(RestartOnFailure)}},
		{enum("sandbox", "properties", "policy", "enum"), []string{string(PolicyJail), string(PolicyBroad)}},
		{enum("sandbox", "properties", "network", "enum"), []string{string(NetworkNone), string(NetworkTCP), string(NetworkFull)}},
		{enum("external", "properties", "access", "enum"), []string{string(AccessRO), string(AccessRW)}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("schema enum %v, Go constants %v", c.got, c.want)
		}
	}
	if got := defs["app"].(map[string]any)["properties"].(map[string]any)["id"].(map[string]any)["pattern"]; got != idPattern.String() {
		t.Errorf("schema id pattern %v, Go %v", got, idPattern)
	}
}

// FuzzParse: Parse never panics, refuses only with problems a person can
// act on (each one line, with a fix), and whatever it accepts re-encodes
// to a manifest it accepts as equal.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, c := range badCases {
		if c.file == "" && len(c.input) < 4096 {
			f.Add([]byte(c.input))
		}
	}
	f.Add(example(f))
	// One compiled schema for all inputs: Parse compiles it per call,
	// which would spend the fuzzer's time on the same work.
	v, err := newValidator()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := v.parse(data)
		if err != nil {
			verr, ok := errors.AsType[*ValidationError](err)
			if !ok {
				t.Fatalf("Parse returned %T, not a *ValidationError: %v", err, err)
			}
			if len(verr.Problems) == 0 {
				t.Fatal("a ValidationError without problems")
			}
			for _, p := range verr.Problems {
				if s := p.String(); p.Message == "" || p.Fix == "" || strings.ContainsAny(s, "\n\r") {
					t.Fatalf("problem not fit for a person: %q", s)
				}
			}
			return
		}
		assertRoundTrip(t, m)
	})
}

func BenchmarkParse(b *testing.B) {
	data := example(b)
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// example is the shipped example manifest's bytes.
func example(tb testing.TB) []byte {
	b, err := os.ReadFile("../configs/native-apps.example.json")
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
