package jail

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"octosup/jail/helper"
	"octosup/policy"
)

// Strictness says what happens when the kernel lacks a layer an app's jail
// needs.
type Strictness string

const (
	// BestEffort starts the app with whatever layers took and reports the
	// missing ones in status and the log. It is the default.
	BestEffort Strictness = "best-effort"
	// Strict refuses to start the app: status says failed: jail: ...
	Strict Strictness = "strict"
)

// ParseStrictness reads a strictness setting; "" is the default.
func ParseStrictness(s string) (Strictness, error) {
	switch Strictness(s) {
	case "", BestEffort:
		return BestEffort, nil
	case Strict:
		return Strict, nil
	}
	return "", fmt.Errorf("jail strictness %q: want %q or %q", s, BestEffort, Strict)
}

// EnvNarrow is the daemon's variable that narrows apps for test runs.
const EnvNarrow = "OCTOSUP_SANDBOX_NARROW"

// ParseNarrow splits an OCTOSUP_SANDBOX_NARROW value into app ids.
func ParseNarrow(v string) []string {
	var out []string
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// Options are the inputs of Compile besides the entry. Everything that
// depends on the machine (the program's interpreter, where /etc's links
// lead) is resolved by the caller and passed in, so Compile stays pure:
// the same inputs always give the same Spec.
type Options struct {
	DeveloperMode bool
	Dirs          policy.Dirs
	// BaseEnv is the daemon's environment before the scrub.
	BaseEnv []string
	// Narrowed takes the app to jail-only, no network, no externals
	// (OCTOSUP_SANDBOX_NARROW).
	Narrowed bool
	// Strictness is the daemon's setting; the entry's
	// sandbox.strictness overrides it.
	Strictness Strictness
	ParentPID  int
	// Program is the file exec[0] leads to, through its symlinks (""
	// means exec[0] itself): the rule grants it, and it is it that is
	// checked. Interpreters are what the kernel opens for execute besides
	// the program (each #! interpreter, the ELF interpreter), resolved
	// the same way.
	Program      string
	Interpreters []string
	// SystemLinks maps symlinks inside the system directories to where
	// they resolve (e.g. /etc/resolv.conf → /run/systemd/...): a target
	// outside the system directories is granted read-only on its own.
	SystemLinks map[string]string
	// etc is /etc's public part (etc.go), granted instead of /etc whole
	// for a root daemon, whose apps' uid owns /etc/shadow; nil grants
	// /etc whole (a user's daemon: the files' modes hold its apps to
	// what the user may read).
	etc []publicGrant
	// LandlockABI is the kernel's: below landlockABIUnix a tcp app may
	// not make unix sockets, whose connect Landlock cannot narrow there.
	LandlockABI int
	// BroadRoots are the entries of / a broad app may write beneath:
	// all but /sys (the cgroup tree: an app must not move itself out of
	// its leaf, nor write another's cgroup.kill), /proc (another process's
	// oom_score_adj, say) and any entry that holds a cgroup mount.
	BroadRoots []string
	// Resolved maps resources and externals (with ~ expanded) to where
	// their symlinks lead. The rule grants the target, and it is the
	// target that is checked: a symlink to /proc/self or into the
	// daemon's own directories passes every check of the path as written.
	Resolved map[string]string
	// Planted maps each resource or external that leads through a
	// symlink in a directory the app can write to that symlink: the app
	// could have made it, so the grant is refused rather than followed.
	Planted map[string]string
	// RenderNodes are the machine's GPU render nodes (devices: ["dri"]).
	RenderNodes []RenderNode
}

// landlockABIUnix is the Landlock ABI that narrows connecting to
// pathname unix sockets.
const landlockABIUnix = helper.ABIUnixConnect

// systemDirs are readable by every jailed app; executable only when the
// app may create processes.
var systemDirs = [...]string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr"}

// devices every program expects to open. /dev/null takes O_TRUNC (shell
// redirections); none gets ioctl.
var devices = [...]struct {
	path   string
	access Access
}{
	{"/dev/full", AccessRead | AccessWrite},
	{"/dev/null", AccessRead | AccessWrite | AccessTruncate},
	{"/dev/random", AccessRead},
	{"/dev/urandom", AccessRead},
	{"/dev/zero", AccessRead | AccessWrite},
}

// Compile turns an entry into the jail its process runs in (docs/jail.md).
func Compile(app policy.App, opt Options) (Spec, error) {
	fail := func(format string, args ...any) (Spec, error) {
		// The caller knows the app: status shows this beside its id.
		return Spec{}, fmt.Errorf("jail: "+format, args...)
	}
	if len(app.Exec) == 0 || !filepath.IsAbs(app.Exec[0]) {
		return fail("exec[0] must be an absolute path")
	}
	strict, err := compileStrictness(app, opt)
	if err != nil {
		return fail("%v", err)
	}
	sb := effectiveSandbox(app, opt)
	processes := sb.MayCreateProcesses()
	jailDir, secretsDir, daemonEnv := storageDirs(app, opt)
	dir := "/"
	if jailDir != "" {
		dir = jailDir
	}
	spec := Spec{
		Version: SpecVersion,
		App:     app.ID,
		Program: filepath.Clean(app.Exec[0]),
		Argv:    slices.Clone(app.Exec),

		Dir:       dir,
		ParentPID: opt.ParentPID,
		FDs:       []int{0, 1, 2, HubFD},
		Strict:    strict == Strict,
	}
	desk, err := compileDesktop(app, sb, opt)
	if err != nil {
		return fail("%v", err)
	}
	ll, err := compileLandlock(app, sb, opt, jailDir, secretsDir, processes)
	if err != nil {
		return fail("%v", err)
	}
	ll.Paths = append(ll.Paths, desk.rules...)
	if desk.unixGuard {
		// The guard decides every unix connect: Landlock's ABI 9 rule
		// would not see the daemon's connects anyway.
		ll.UnixSockets = false
		ll.MinABI = minABI(ll)
	}
	spec.Landlock = ll
	spec.Sockets = desk.sockets
	for k, v := range desk.env {
		daemonEnv[k] = v
	}
	spec.Env = compileEnv(app, opt, ll, daemonEnv)
	network := sb.Network
	if sb.Policy == policy.PolicyBroad {
		// Broad skips network narrowing along with the filesystem's.
		network = policy.NetworkFull
	}
	spec.ExecOnce = !processes
	spec.Seccomp = seccompRules(ruleSet{
		network:     network,
		processes:   processes,
		fsNarrowed:  ll.FS,
		bindTCP:     network == policy.NetworkTCP && len(ll.BindTCP) > 0,
		unixSockets: opt.LandlockABI >= landlockABIUnix,
		unixGuard:   desk.unixGuard,
	})
	if err := validateCompiled(spec); err != nil {
		return fail("%v", err)
	}
	return spec, nil
}

// compileStrictness is the entry's sandbox.strictness, else the daemon's.
func compileStrictness(app policy.App, opt Options) (Strictness, error) {
	strict, err := ParseStrictness(string(opt.Strictness))
	if err != nil {
		return "", fmt.Errorf("daemon setting: %v", err)
	}
	if app.Sandbox.Strictness != "" {
		if strict, err = ParseStrictness(app.Sandbox.Strictness); err != nil {
			return "", fmt.Errorf("sandbox.strictness: %v", err)
		}
	}
	return strict, nil
}

// effectiveSandbox is the entry's sandbox, narrowed to jail-only and no
// network when the daemon narrows this app.
func effectiveSandbox(app policy.App, opt Options) policy.Sandbox {
	sb := app.Sandbox
	if opt.Narrowed {
		sb.Policy = policy.PolicyJail
		sb.Network = policy.NetworkNone
		sb.TCPConnect, sb.TCPBind, sb.External = nil, nil, nil
		sb.Sockets, sb.Devices = nil, nil
	}
	return sb
}

// storageDirs are the app's jail and secrets directories ("" when the
// entry asks for none) and the daemon's own variables of its environment.
func storageDirs(app policy.App, opt Options) (jailDir, secretsDir string, daemonEnv map[string]string) {
	if app.Storage.Jail {
		jailDir = opt.Dirs.JailDir(app.ID)
	}
	if app.Storage.Secrets {
		secretsDir = opt.Dirs.SecretsDir(app.ID)
	}
	daemonEnv = map[string]string{EnvAppID: app.ID, EnvHubFD: strconv.Itoa(HubFD)}
	if jailDir != "" {
		daemonEnv[EnvJail] = jailDir
	}
	if secretsDir != "" {
		daemonEnv[EnvSecrets] = secretsDir
	}
	return jailDir, secretsDir, daemonEnv
}

// compileLandlock is the Landlock part of the spec: only writes narrowed
// for policy broad; files and the network for a jail app.
func compileLandlock(app policy.App, sb policy.Sandbox, opt Options, jailDir, secretsDir string, processes bool) (LandlockSpec, error) {
	ll := LandlockSpec{Scope: true, LogApp: opt.DeveloperMode}
	if sb.Policy == policy.PolicyBroad {
		ll.WriteOnly = true
		ll.Paths = broadRules(opt.BroadRoots)
	} else {
		ll.FS = true
		paths, err := fsRules(app, sb, opt, jailDir, secretsDir, processes)
		if err != nil {
			return LandlockSpec{}, err
		}
		ll.Paths = paths
		switch sb.Network {
		case policy.NetworkNone, "":
			ll.Net = true
		case policy.NetworkTCP:
			ll.Net = true
			ll.ConnectTCP = sortedPorts(sb.TCPConnect)
			ll.BindTCP = sortedPorts(sb.TCPBind)
		case policy.NetworkFull:
		default:
			return LandlockSpec{}, fmt.Errorf("sandbox.network %q: want none, tcp or full", sb.Network)
		}
	}
	// Unix sockets: a full app makes them; a tcp app only where Landlock
	// narrows their connect (seccomp refuses them below it).
	ll.UnixSockets = ll.FS && (sb.Network == policy.NetworkFull || sb.Network == policy.NetworkTCP && opt.LandlockABI >= landlockABIUnix)
	ll.MinABI = minABI(ll)
	return ll, nil
}

// compileEnv is the app's environment: an allow list of the daemon's
// for a jail app, with a PATH of the directories it may list (the
// entry's own PATH still wins); the daemon's, scrubbed, for a broad one.
func compileEnv(app policy.App, opt Options, ll LandlockSpec, daemonEnv map[string]string) []string {
	if !ll.FS {
		return Environ(opt.BaseEnv, nil, app.Env, daemonEnv)
	}
	base := []string{"PATH=" + jailPath(opt.BaseEnv, ll.Paths)}
	for _, kv := range opt.BaseEnv {
		if !strings.HasPrefix(kv, "PATH=") {
			base = append(base, kv)
		}
	}
	return Environ(base, jailEnv(app.PassEnv), app.Env, daemonEnv)
}

// validateCompiled is Validate minus the pid, which the caller may fill
// in only at fork time.
func validateCompiled(s Spec) error {
	if s.ParentPID == 0 {
		s.ParentPID = 1
	}
	return s.Validate()
}

// fsRules are a jail app's path rules, in this order: the system
// directories and where their links lead, the program and its
// interpreters, the devices every program expects, its own /proc entry,
// its resources, its jail and secrets directories, its externals.
func fsRules(app policy.App, sb policy.Sandbox, opt Options, jailDir, secretsDir string, processes bool) ([]PathRule, error) {
	var rules pathRules
	sys := AccessRO
	if processes {
		sys = AccessRX
	}
	rules.addSystem(opt, sys)
	rules.addSystemLinks(opt)
	if err := rules.addProgram(app, opt); err != nil {
		return nil, err
	}
	for _, d := range devices {
		rules.add(d.path, d.access, "device", true)
	}
	// The app's own /proc/<pid> (the sequence's pid is the app's: exec keeps
	// it); every other process's /proc entry stays closed.
	rules.add("/proc/self", AccessRO, "proc", false)
	if err := rules.addResources(app, opt, sys); err != nil {
		return nil, err
	}
	if jailDir != "" {
		rules.add(jailDir, AccessRW, "jail", false)
	}
	if secretsDir != "" {
		rules.add(secretsDir, AccessRW, "secrets", false)
	}
	if err := rules.addExternals(sb, opt); err != nil {
		return nil, err
	}
	return rules, nil
}

// pathRules is fsRules' list, built step by step in the order the rules
// are granted.
type pathRules []PathRule

// add grants access beneath path, cleaned.
func (r *pathRules) add(path string, access Access, why string, optional bool) {
	*r = append(*r, PathRule{Path: filepath.Clean(path), Access: access, Why: why, Optional: optional})
}

// addSystem grants the system directories sys, but /etc read-only:
// whole, or its names and its public part (Options.etc).
func (r *pathRules) addSystem(opt Options, sys Access) {
	for _, d := range systemDirs {
		if d == "/etc" {
			if opt.etc == nil {
				r.add(d, AccessRO, "system", true)
			} else {
				// Names only, as ls shows them: Landlock's list right
				// holds beneath, and a name is not a file's content.
				r.add(d, AccessList, "system", true)
			}
			for _, g := range opt.etc {
				access := AccessRead
				if g.dir {
					access = AccessRO
				}
				r.add(g.path, access, "system", true)
			}
			continue
		}
		r.add(d, sys, "system", true)
	}
}

// addSystemLinks grants, read-only and in path order, the system links
// that lead outside the system directories and the kernel's views.
func (r *pathRules) addSystemLinks(opt Options) {
	links := make([]string, 0, len(opt.SystemLinks))
	for l := range opt.SystemLinks {
		links = append(links, l)
	}
	slices.Sort(links)
	for _, l := range links {
		// A link into /proc (/etc/mtab → /proc/self/mounts) names the
		// daemon when the daemon opens it.
		if t := opt.SystemLinks[l]; underAny(t, systemDirs[:]) || underAny(t, kernelViews[:]) || policy.SelfPath(t) {
			continue
		}
		r.add(l, AccessRead, "system", true)
	}
}

// addProgram grants the program and its interpreters read and execute,
// or says why one may not be granted.
func (r *pathRules) addProgram(app policy.App, opt Options) error {
	program := app.Exec[0]
	if opt.Program != "" {
		program = opt.Program
	}
	if _, err := grantable(filepath.Clean(program), opt); err != nil {
		return fmt.Errorf("exec[0] %q %w", app.Exec[0], err)
	}
	r.add(program, AccessRead|AccessExec, "program", false)
	for _, in := range opt.Interpreters {
		if !filepath.IsAbs(in) {
			return fmt.Errorf("interpreter %q is not absolute", in)
		}
		if _, err := grantable(filepath.Clean(in), opt); err != nil {
			return fmt.Errorf("interpreter %q %w", in, err)
		}
		r.add(in, AccessRead|AccessExec, "interp", false)
	}
	return nil
}

// addResources grants the entry's resources with sys, where their links
// lead, or says why one may not be granted.
func (r *pathRules) addResources(app policy.App, opt Options, sys Access) error {
	for _, res := range app.Resources {
		if !filepath.IsAbs(res) {
			return fmt.Errorf("resources: %q is not absolute", res)
		}
		p, err := grantable(filepath.Clean(res), opt)
		if err != nil {
			return fmt.Errorf("resources: %q %w", res, err)
		}
		r.add(p, sys, "resource", false)
	}
	return nil
}

// addExternals grants the entry's externals (~ expanded, where their
// links lead) with the access each asks for, or says why one may not be
// granted.
func (r *pathRules) addExternals(sb policy.Sandbox, opt Options) error {
	for _, e := range sb.External {
		p, err := expandHome(e.Path, opt.Dirs.Home)
		if err != nil {
			return fmt.Errorf("external %q: %w", e.Path, err)
		}
		if p, err = grantable(p, opt); err != nil {
			return fmt.Errorf("external %q %w", e.Path, err)
		}
		switch e.Access {
		case policy.AccessRO:
			r.add(p, AccessRO, "external", true)
		case policy.AccessRW:
			r.add(p, AccessRW, "external", true)
		default:
			return fmt.Errorf("external %q: access %q: want ro or rw", e.Path, e.Access)
		}
	}
	return nil
}

// broadWrite is what a broad app may do beneath its roots: everything
// that changes the filesystem (reading is not narrowed at all).
const broadWrite = AccessWrite | AccessTruncate | AccessCreate | AccessRemove | AccessRefer

// broadRules are a broad app's write rules: its roots, and its own
// /proc/<pid> (the child adds it; /proc/self here would name the daemon).
func broadRules(roots []string) []PathRule {
	rules := make([]PathRule, 0, len(roots)+1)
	for _, r := range roots {
		rules = append(rules, PathRule{Path: r, Access: broadWrite, Why: "broad", Optional: true})
	}
	return append(rules, PathRule{Path: "/proc/self", Access: broadWrite, Why: "proc"})
}

// kernelViews are never granted beyond the app's own /proc entry: /proc
// names the daemon when the daemon opens it, and /sys holds the cgroup
// tree (an app must not leave its leaf) and the machine's knobs.
var kernelViews = [...]string{"/proc", "/sys"}

// grantable is the path a resource or external rule grants (where its
// symlinks lead), or why it may not be granted: it names the daemon's own
// process or a kernel view, or it overlaps the daemon's own directories
// (an app that reaches them rewrites its jail or reads every consent).
func grantable(p string, opt Options) (string, error) {
	if l, ok := opt.Planted[p]; ok {
		return "", fmt.Errorf("leads through %s, a symlink in a directory the app can write (the app could have planted it): name the real path in the manifest, or remove the link", l)
	}
	if t, ok := opt.Resolved[p]; ok {
		p = t
	}
	switch {
	case policy.SelfPath(p):
		return "", fmt.Errorf("names the daemon's own process when the daemon opens it")
	case underAny(p, kernelViews[:]):
		return "", fmt.Errorf("leads into %s, which no app is granted", p)
	}
	// A grant that holds a kernel view grants it too ("/" holds all).
	for _, v := range kernelViews {
		if underAny(v, []string{p}) {
			return "", fmt.Errorf("holds %s, which no app is granted: name the directories the app needs instead", v)
		}
	}
	for _, d := range []struct{ what, dir string }{
		{"configuration", opt.Dirs.Config}, {"state", opt.Dirs.State}, {"data (jails, secrets)", opt.Dirs.Data}, {"runtime (the control socket)", opt.Dirs.Runtime},
	} {
		if d.dir != "" && (underAny(p, []string{d.dir}) || underAny(d.dir, []string{p})) {
			return "", fmt.Errorf("overlaps octosup's own %s directory %s", d.what, d.dir)
		}
	}
	return p, nil
}

// underAny says whether p is one of dirs or beneath one. Every path is
// beneath "/" (whose children's prefix is not "//").
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func expandHome(p, home string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if !filepath.IsAbs(home) {
			return "", fmt.Errorf("~ needs the user's home, which is unknown")
		}
		p = filepath.Join(home, p[1:])
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("not an absolute path")
	}
	return filepath.Clean(p), nil
}

func sortedPorts(p []uint16) []uint16 {
	out := slices.Clone(p)
	slices.Sort(out)
	return slices.Compact(out)
}

// minABI is the Landlock ABI that enforces everything ll asks for: files
// from 1 (truncation from 3), TCP ports from 4, scoping from 6, pathname
// unix-socket connect from 9.
func minABI(ll LandlockSpec) int {
	abi := 0
	if ll.FS {
		abi = 3
	}
	if ll.Net {
		abi = max(abi, 4)
	}
	if ll.Scope {
		abi = max(abi, 6)
	}
	if ll.UnixSockets {
		abi = max(abi, landlockABIUnix)
	}
	return abi
}

// desktop is what sandbox.sockets and sandbox.devices add to a jail
// app's spec (desktop.go).
type desktop struct {
	sockets []SocketGrant
	rules   []PathRule
	env     map[string]string
	// unixGuard: the guard decides the app's every connect (a granted
	// socket, or network full below Landlock ABI 9, which could
	// otherwise name any socket: the session bus).
	unixGuard bool
}

// compileDesktop resolves the entry's sockets and devices. A broad app
// has none: it reaches every socket and device already.
func compileDesktop(app policy.App, sb policy.Sandbox, opt Options) (desktop, error) {
	var d desktop
	if sb.Policy != policy.PolicyJail && sb.Policy != "" {
		return d, nil
	}
	socks, err := resolveSockets(sb.Sockets, opt.BaseEnv)
	if err != nil {
		return d, err
	}
	d.sockets = socks
	for _, dev := range sb.Devices {
		if dev != policy.DeviceDRI {
			return d, fmt.Errorf("devices: %q is not a device octosup grants (want %s)", dev, strings.Join(policy.KnownDevices(), ", "))
		}
		d.rules = append(d.rules, gpuRules(opt.RenderNodes)...)
	}
	if len(socks) > 0 || len(sb.Devices) > 0 {
		dir := RuntimeDir(opt.Dirs, app.ID)
		d.rules = append(d.rules, PathRule{Path: dir, Access: AccessRW, Why: "runtime"})
		d.env = socketEnv(socks, dir)
	}
	d.unixGuard = len(socks) > 0 || sb.Network == policy.NetworkFull && opt.LandlockABI < landlockABIUnix
	return d, nil
}
