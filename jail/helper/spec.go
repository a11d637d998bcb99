package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// SpecVersion is the version of the Spec's form (its JSON, which
// octosupctl prints). The helper's input is not the Spec: it carries a
// version of its own (jail/spawn), so that a daemon and a helper of
// different builds refuse each other.
const SpecVersion = 1

// HubFD is the descriptor number of the hub in every app.
const HubFD = 3

// Spec is the whole jail of one app process, as Compile produced it: the
// launchers apply exactly this and nothing else. It is plain data so that
// a person can read it (Describe) and the daemon can validate it before
// every start.
type Spec struct {
	Version int    `json:"version"`
	App     string `json:"app"`
	// Program is the absolute path execve runs; Argv its arguments
	// (Argv[0] included); Env its whole environment; Dir its working
	// directory.
	Program string   `json:"program"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	// ParentPID is the daemon's pid: the sequence checks it is still its
	// parent after setting the parent-death signal, so that an app whose
	// daemon died in between does not run on unsupervised.
	ParentPID int `json:"parent_pid"`
	// FDs are the descriptors the program keeps (0–3); every other one is
	// closed at exec.
	FDs []int `json:"fds"`
	// Strict refuses to run the app when a layer it needs did not take.
	Strict bool `json:"strict"`
	// ExecOnce lets the program's own execve through and no other
	// (processes: false): the spawn loads a second filter, keyed to the
	// addresses of that one call's arguments (ExecGate).
	ExecOnce bool         `json:"exec_once,omitempty"`
	Landlock LandlockSpec `json:"landlock"`
	Seccomp  []Syscall    `json:"seccomp"`
	// Sockets are the pathname sockets the daemon's guard connects the
	// app to (sandbox.sockets); with a notified connect, every other
	// pathname and every abstract unix connect is refused.
	Sockets []SocketGrant `json:"sockets,omitempty"`
}

// SocketGrant is one desktop socket an app may reach: Name is the
// manifest's (wayland, pulseaudio, pipewire), Path the socket the guard
// connects to, From the variable it was found by (WAYLAND_DISPLAY, …),
// Via how the app gets it (GrantGuard: its connect of exactly Path is
// made by the daemon).
type SocketGrant struct {
	Name string `json:"name"`
	Path string `json:"path"`
	From string `json:"from"`
	Via  string `json:"via"`
}

// GrantGuard is SocketGrant.Via for a socket whose connect the daemon's
// guard makes on the app's behalf.
const GrantGuard = "guard-connect"

// GrantPulseFilter is SocketGrant.Via for the PulseAudio server's socket:
// the guard connects the app's socket to a filter in the daemon, which
// passes on what playing and recording sound need (jail/pulsefilter).
const GrantPulseFilter = "pulse-filter"

// MaxSocketPath is the longest pathname a sockaddr_un holds (108 bytes
// with its NUL).
const MaxSocketPath = 107

// LandlockSpec is the Landlock part of a Spec.
type LandlockSpec struct {
	// FS says whether filesystem access is narrowed at all (false for
	// policy broad); when it is, only Paths are reachable.
	FS bool `json:"fs"`
	// WriteOnly narrows only what changes the filesystem (policy broad):
	// the app reads everywhere, and writes, creates and removes only
	// beneath Paths, which leave out /sys (the cgroup tree: an app must
	// not move itself out of its leaf).
	WriteOnly bool       `json:"write_only,omitempty"`
	Paths     []PathRule `json:"paths,omitempty"`
	// Net says whether TCP bind/connect is narrowed (network none or tcp);
	// when it is, only the listed ports are allowed.
	Net        bool     `json:"net"`
	ConnectTCP []uint16 `json:"connect_tcp,omitempty"`
	BindTCP    []uint16 `json:"bind_tcp,omitempty"`
	// UnixSockets says the app may create unix sockets (network full, or
	// tcp where the kernel narrows them): their pathname connect is
	// narrowed by Landlock's ABI 9 only, and below it the app reaches
	// every socket it can name (the session bus).
	UnixSockets bool `json:"unix_sockets,omitempty"`
	// Scope cuts the app off from abstract unix sockets and signals of
	// processes outside its jail (ABI 6).
	Scope bool `json:"scope"`
	// MinABI is the lowest Landlock ABI that gives this app every
	// restriction it asks for; strict mode refuses anything lower.
	MinABI int `json:"min_abi"`
	// LogApp asks the kernel to audit-log the app's denials (developer
	// mode), not only the sequence's.
	LogApp bool `json:"log_app,omitempty"`
}

// PathRule grants Access beneath Path (the path itself when it is a file).
type PathRule struct {
	Path   string `json:"path"`
	Access Access `json:"access"`
	// Why says where the rule comes from: system, program, interp,
	// resource, jail, secrets, external, device, proc.
	Why string `json:"why"`
	// Optional rules are skipped when the path does not exist (e.g. /lib32
	// on a system without it); a missing required path is an error.
	Optional bool `json:"optional,omitempty"`
}

// Access is a set of filesystem rights, a coarser vocabulary than
// Landlock's that maps onto it (landlock.go) at whatever ABI the kernel has.
type Access uint16

const (
	AccessRead     Access = 1 << iota // read files
	AccessList                        // list directories
	AccessExec                        // execute files
	AccessWrite                       // write files
	AccessTruncate                    // truncate files (ABI 3)
	AccessCreate                      // create files, dirs, fifos, sockets, symlinks
	AccessRemove                      // remove files and dirs
	AccessRefer                       // rename or link across directories (ABI 2)
	AccessDevIoctl                    // ioctl on devices (ABI 5)
	accessEnd
)

// AccessAll is every right in the vocabulary.
const AccessAll = accessEnd - 1

var accessNames = [...]string{"read", "list", "exec", "write", "truncate", "create", "remove", "refer", "ioctl"}

// Common sets.
const (
	AccessRO  = AccessRead | AccessList
	AccessRX  = AccessRO | AccessExec
	AccessRW  = AccessRO | AccessWrite | AccessTruncate | AccessCreate | AccessRemove | AccessRefer
	accessDir = AccessList | AccessCreate | AccessRemove | AccessRefer
)

// Names lists the rights in a fixed order.
func (a Access) Names() []string {
	var out []string
	for i, n := range accessNames {
		if a&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	return strings.Join(a.Names(), ",")
}

// MarshalJSON writes the rights as a list of names, for people.
func (a Access) MarshalJSON() ([]byte, error) {
	names := a.Names()
	if names == nil {
		names = []string{}
	}
	return json.Marshal(names)
}

// UnmarshalJSON reads a list of names and refuses an unknown one.
func (a *Access) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return err
	}
	var out Access
	for _, n := range names {
		i := slices.Index(accessNames[:], n)
		if i < 0 {
			return fmt.Errorf("unknown access right %q", n)
		}
		out |= 1 << i
	}
	*a = out
	return nil
}

// Syscall is one seccomp rule: calls to Name whose arguments match every
// condition in Args fail with Errno. Rules are alternatives (OR); the
// conditions of one rule are a conjunction and name each argument at most
// once (libseccomp 2.5 refuses two conditions on one argument).
type Syscall struct {
	Name  string   `json:"name"`
	Errno string   `json:"errno"` // EPERM or ENOSYS; "" with Notify
	Args  []ArgCmp `json:"args,omitempty"`
	Why   string   `json:"why"`
	// Notify hands the call to the daemon (seccomp user notification),
	// which decides it against the spec and answers for the kernel:
	// jail.Guard. Without a daemon listening the kernel answers ENOSYS.
	Notify bool `json:"notify,omitempty"`
}

// ArgCmp compares one syscall argument. Masked compares (arg & Mask) ==
// Value; it is also how 32-bit arguments (int family, unsigned cmd) are
// compared without being fooled by garbage in the register's upper half.
type ArgCmp struct {
	Index uint   `json:"index"`
	Op    CmpOp  `json:"op"`
	Value uint64 `json:"value"`
	Mask  uint64 `json:"mask,omitempty"`
}

// CmpOp is how an argument is compared.
type CmpOp string

const (
	CmpMasked CmpOp = "masked_eq" // (arg & Mask) == Value
	CmpGT     CmpOp = "gt"        // arg > Value (64-bit)
	CmpNE     CmpOp = "ne"        // arg != Value (64-bit)
)

// ErrBadSpec is wrapped by every error Validate returns.
var ErrBadSpec = errors.New("invalid jail spec")

// Validate checks what the setup sequence relies on. The daemon runs it
// on every spec it is about to start, whichever launcher takes it: a spec
// is the daemon's own word, but this is the last point where a mistake can
// still be refused instead of run.
func (s Spec) Validate() error {
	for _, check := range []func() error{s.validateExec, s.validateLandlock, s.validateSeccomp, s.validateSockets} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// bad is Validate's error.
func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSpec}, args...)...)
}

// validateExec checks the program, its arguments and environment, the
// directory, the parent and the descriptors.
func (s Spec) validateExec() error {
	if s.Version != SpecVersion {
		return bad("version %d, want %d", s.Version, SpecVersion)
	}
	if s.App == "" {
		return bad("no app id")
	}
	if !filepath.IsAbs(s.Program) || filepath.Clean(s.Program) != s.Program {
		return bad("program %q is not a clean absolute path", s.Program)
	}
	if len(s.Argv) == 0 {
		return bad("empty argv")
	}
	if !filepath.IsAbs(s.Dir) {
		return bad("dir %q is not absolute", s.Dir)
	}
	for _, kv := range s.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" || strings.ContainsRune(kv, 0) {
			return bad("env entry %q is not NAME=value", kv)
		}
	}
	for _, a := range s.Argv {
		if strings.ContainsRune(a, 0) {
			return bad("argv entry contains NUL")
		}
	}
	if s.ParentPID < 1 {
		return bad("parent pid %d", s.ParentPID)
	}
	if !slices.Equal(s.FDs, []int{0, 1, 2, HubFD}) {
		return bad("fds %v, want [0 1 2 %d]", s.FDs, HubFD)
	}
	return nil
}

// validateLandlock checks the Landlock part.
func (s Spec) validateLandlock() error {
	ll := s.Landlock
	if ll.MinABI < 0 || ll.MinABI > 64 {
		return bad("landlock min_abi %d", ll.MinABI)
	}
	if ll.FS && ll.WriteOnly {
		return bad("landlock fs and write_only together")
	}
	if !ll.FS && !ll.WriteOnly && len(ll.Paths) > 0 {
		return bad("landlock paths without fs narrowing")
	}
	for _, p := range ll.Paths {
		if !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path {
			return bad("landlock path %q is not a clean absolute path", p.Path)
		}
		if p.Access == 0 || p.Access&^AccessAll != 0 {
			return bad("landlock path %s: access %#x", p.Path, uint16(p.Access))
		}
	}
	if !ll.Net && (len(ll.ConnectTCP) > 0 || len(ll.BindTCP) > 0) {
		return bad("tcp ports without net narrowing")
	}
	return nil
}

// validateSeccomp checks the seccomp rules.
func (s Spec) validateSeccomp() error {
	for _, r := range s.Seccomp {
		if r.Name == "" {
			return bad("seccomp rule without a syscall")
		}
		switch {
		case r.Notify && r.Errno != "":
			return bad("seccomp %s: errno %q on a notify rule (the daemon answers)", r.Name, r.Errno)
		case !r.Notify && r.Errno != "EPERM" && r.Errno != "ENOSYS":
			return bad("seccomp %s: errno %q, want EPERM or ENOSYS", r.Name, r.Errno)
		}
		if err := validateArgs(r); err != nil {
			return err
		}
	}
	return nil
}

// validateArgs checks one rule's argument compares.
func validateArgs(r Syscall) error {
	var seen uint8 // a bit per argument
	for _, c := range r.Args {
		if c.Index > 5 {
			return bad("seccomp %s: argument %d", r.Name, c.Index)
		}
		if seen&(1<<c.Index) != 0 {
			return bad("seccomp %s: two conditions on argument %d", r.Name, c.Index)
		}
		seen |= 1 << c.Index
		switch c.Op {
		case CmpMasked:
			if c.Mask == 0 {
				return bad("seccomp %s: masked compare with an empty mask", r.Name)
			}
		case CmpGT, CmpNE:
		default:
			return bad("seccomp %s: compare %q", r.Name, c.Op)
		}
	}
	return nil
}

// validateSockets checks the socket grants: the compositor's connected
// by the guard, the sound server's through the filter and no other, at
// absolute, clean paths a sockaddr_un holds.
func (s Spec) validateSockets() error {
	for _, g := range s.Sockets {
		if !(g.Name == "wayland" && g.Via == GrantGuard || g.Name == "pulseaudio" && g.Via == GrantPulseFilter) {
			return bad("socket grant %q via %q", g.Name, g.Via)
		}
		if !filepath.IsAbs(g.Path) || filepath.Clean(g.Path) != g.Path || len(g.Path) > MaxSocketPath || strings.ContainsRune(g.Path, 0) {
			return bad("socket %s: %q is not a clean absolute path of at most %d bytes", g.Name, g.Path, MaxSocketPath)
		}
	}
	return nil
}
