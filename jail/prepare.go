package jail

import (
	"fmt"
	"os"
	"slices"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"octosup/jail/helper"
	"octosup/jail/spawn"
)

// A start has two halves. The daemon prepares everything the jail needs
// (this file): it validates the spec, takes the compiled seccomp program,
// builds the Landlock ruleset with go-landlock, lays the exec's arguments
// out for the exec gate and opens the descriptors, and says what the
// Report will be. Then a launcher runs the one setup sequence
// (jail/spawn) on what was prepared: in-process (fork.go) or through the
// helper (startHelper).

// landlockABI1FS is every filesystem right of Landlock ABI 1: the rights
// the sequence's /proc/self rule may carry on any kernel with Landlock
// (the rule is read-only; a right past ABI 1 given to it is dropped).
const landlockABI1FS = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
	ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
	ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym

// prepared is one start's jail, ready for either launcher. close releases
// what it holds once the launcher has forked.
type prepared struct {
	spec Spec
	rep  Report
	// prog is the filter to load, the exec gate in front when the spec
	// asks for it; nil: none (a kernel without seccomp).
	prog []unix.SockFilter
	// rulesetFD is the Landlock ruleset (-1: none), llFlags its
	// restrict flags, procRights the rights of the /proc/self rule the
	// sequence adds.
	rulesetFD  int
	llFlags    uint32
	procRights uint64
	ea         *helper.ExecArgs
	// files become the app's 0–3.
	files   [4]*os.File
	devnull *os.File
	// notifyR is the daemon's end of the socket the listener comes down,
	// notifyW the sequence's; -1 when the spec notifies nothing.
	notifyR, notifyW int
}

// prepare makes spec ready to launch. A jail that cannot be set up fails
// with the bare *LayerError, as a failure the sequence finds does, so that
// status reads "failed: <layer>: …" whichever launcher an app took.
func (l *Launcher) prepare(spec Spec, stdout, stderr, hub *os.File) (_ *prepared, err error) {
	p := &prepared{spec: spec, rulesetFD: -1, notifyR: -1, notifyW: -1}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := l.prepareFilter(p); err != nil {
		return nil, err
	}
	if hub == nil {
		return nil, fmt.Errorf("start %s: %w", spec.App, ErrNoHub)
	}
	if err := l.prepareLandlock(p); err != nil {
		return nil, err
	}
	if err := l.prepareSeccomp(p); err != nil {
		return nil, err
	}
	if err := p.openFiles(stdout, stderr, hub); err != nil {
		return nil, err
	}
	if err := l.prepareExec(p); err != nil {
		return nil, err
	}
	return p, nil
}

// prepareFilter checks the spec as the helper did when it decoded its
// input, and takes its compiled filter, checking the very program about to
// be loaded whatever fills the cache.
func (l *Launcher) prepareFilter(p *prepared) error {
	if err := p.spec.Validate(); err != nil {
		return layerErr("spec", err.Error(), err)
	}
	prog, err := l.filters.get(p.spec.Seccomp)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.spec.App, layerErr("seccomp", err.Error(), err))
	}
	if err := helper.CheckFilter(prog); err != nil {
		return layerErr("seccomp", err.Error(), err)
	}
	p.prog = prog
	return nil
}

// prepareLandlock builds the ruleset of every path but /proc/self, which
// names the daemon here: the sequence adds its own entry before it
// restricts itself. It starts the Report.
func (l *Launcher) prepareLandlock(p *prepared) error {
	spec := p.spec
	abi := l.kernel().landlockABI
	if spec.Strict && abi < spec.Landlock.MinABI {
		return &LayerError{Layer: "jail", Message: fmt.Sprintf("landlock ABI %d < %d", abi, spec.Landlock.MinABI)}
	}
	p.rep = Report{LandlockABI: abi, Layers: []string{"env", "fds", "no_new_privs", "caps"}, Missing: []string{}, Grants: desktopGrants(spec)}
	p.rep.Missing = append(p.rep.Missing, helper.LandlockMissing(spec.Landlock, abi)...)
	if os.Geteuid() == 0 {
		// A root daemon's app keeps uid 0, capabilities emptied: it owns
		// what root owns (docs/jail.md, "Root"). Said wherever the
		// missing layers are: status, octosupctl jail, the start's log.
		p.rep.Missing = append(p.rep.Missing, MissingUser)
	}
	ls := spec.Landlock
	var procRights uint64
	if i := slices.IndexFunc(ls.Paths, func(p PathRule) bool { return p.Why == "proc" }); i >= 0 && (ls.FS || ls.WriteOnly) {
		procRights = helper.PathRights(ls.Paths[i].Access, true, abi) & landlockABI1FS
		if ls.WriteOnly {
			procRights &= helper.WriteRights
		}
		ls.Paths = slices.Delete(slices.Clone(ls.Paths), i, i+1)
	}
	fd, flags, lerr := helper.BuildRuleset(ls, abi)
	if lerr != nil {
		return lerr
	}
	if fd < 0 {
		p.rep.LandlockABI = 0
		if len(p.rep.Missing) == 0 && (ls.FS || ls.WriteOnly || ls.Net || ls.Scope) {
			p.rep.Missing = []string{"landlock"}
		}
		return nil
	}
	p.rulesetFD, p.llFlags, p.procRights = fd, flags, procRights
	p.rep.Layers = append(p.rep.Layers, "landlock")
	return nil
}

// MissingUser is the missing layer of a root daemon's apps: they run as
// uid 0 (without capabilities), not as an unprivileged user.
const MissingUser = "unprivileged_user"

// prepareSeccomp drops the filter on a kernel without seccomp (strict
// refuses), and opens the socket its listener comes down when the spec
// hands calls to the daemon.
func (l *Launcher) prepareSeccomp(p *prepared) error {
	if l.kernel().seccompAbsent {
		if p.spec.Strict {
			return &LayerError{Layer: "jail", Message: "no seccomp filters in this kernel"}
		}
		p.rep.Missing = append(p.rep.Missing, "seccomp")
		p.prog = nil
		return nil
	}
	p.rep.Layers = append(p.rep.Layers, "seccomp")
	if !p.spec.Notifies() {
		return nil
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("start %s: notify socket: %w", p.spec.App, err)
	}
	p.notifyR, p.notifyW = pair[0], pair[1]
	return nil
}

// openFiles names the app's 0–3: /dev/null, stdout and stderr (/dev/null
// when nil) and the hub.
func (p *prepared) openFiles(stdout, stderr, hub *os.File) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.spec.App, err)
	}
	p.devnull = devnull
	if stdout == nil {
		stdout = devnull
	}
	if stderr == nil {
		stderr = devnull
	}
	p.files = [4]*os.File{devnull, stdout, stderr, hub}
	return nil
}

// prepareExec lays the exec's arguments out and puts the exec gate in
// front of the filter for processes: false.
func (l *Launcher) prepareExec(p *prepared) error {
	ea, err := l.execArgs(p.spec)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.spec.App, layerErr("exec", err.Error(), err))
	}
	p.ea = ea
	if p.spec.ExecOnce && p.prog != nil {
		p.prog = ea.Gate(p.prog)
	}
	return nil
}

// input lays the prepared jail out for the sequence, with fds as the
// app's 0–3 and ruleset and notify as the descriptors of the ruleset and
// the listener's socket in the process that runs it; regions carries the
// exec's arguments to a process that does not share this one's memory.
func (p *prepared) input(l *Launcher, fds [4]int, ruleset, notify int, regions bool) *spawn.Input {
	params := &spawn.Params{
		Path: p.ea.Path, Argv: p.ea.Argv, Envp: p.ea.Envp,
		Dir:       p.spec.Dir,
		FDs:       fds,
		ParentPID: p.spec.ParentPID,
		RulesetFD: ruleset, LandlockFlags: p.llFlags, ProcAccess: p.procRights,
		Filter:     p.prog,
		NotifySock: notify,
		Ignored:    l.ignoredSignals(),
	}
	if regions {
		b := p.ea.Bytes()
		params.Regions = []spawn.Region{{Addr: p.ea.Path, Data: b[0]}, {Addr: p.ea.Argv, Data: b[1]}, {Addr: p.ea.Envp, Data: b[2]}}
	}
	return spawn.NewInput(params)
}

func (p *prepared) close() {
	if p.rulesetFD >= 0 {
		unix.Close(p.rulesetFD)
	}
	if p.notifyW >= 0 {
		unix.Close(p.notifyW)
	}
	if p.notifyR >= 0 {
		unix.Close(p.notifyR)
	}
	if p.devnull != nil {
		p.devnull.Close()
	}
	if p.ea != nil {
		p.ea.Free()
	}
}

// takeNotifyR hands the daemon's end of the listener's socket to the
// caller, who closes it.
func (p *prepared) takeNotifyR() int {
	fd := p.notifyR
	p.notifyR = -1
	return fd
}
