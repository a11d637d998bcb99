package jail

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"octosup/jail/helper"
)

// buildFilter compiles rules into a libseccomp filter for the native
// architecture: allow by default, each rule's errno for what it matches,
// and any other architecture's syscalls (32-bit int 0x80 on x86_64, x32)
// kill the whole process: libseccomp's default kills only the thread,
// which would let the others run on.
func buildFilter(rules []Syscall) (*seccomp.ScmpFilter, error) {
	f, err := seccomp.NewFilter(seccomp.ActAllow)
	if err != nil {
		return nil, fmt.Errorf("new filter: %w", err)
	}
	if err := f.SetBadArchAction(seccomp.ActKillProcess); err != nil {
		f.Release()
		return nil, fmt.Errorf("bad-arch action: %w", err)
	}
	// A binary tree of syscall numbers instead of libseccomp's default
	// list: every syscall an app makes, the allowed ones included, walks
	// the filter, in ~7 compares instead of one per rule (~80).
	if err := f.SetOptimize(2); err != nil {
		f.Release()
		return nil, fmt.Errorf("optimize: %w", err)
	}
	for _, r := range rules {
		nr, err := syscallNumber(r.Name)
		if err != nil {
			f.Release()
			return nil, err
		}
		if nr < 0 {
			continue // absent on this architecture: nothing to refuse
		}
		action := seccomp.ActErrno.SetReturnCode(int16(syscall.EPERM))
		switch {
		case r.Notify:
			action = seccomp.ActNotify
		case r.Errno == "ENOSYS":
			action = seccomp.ActErrno.SetReturnCode(int16(syscall.ENOSYS))
		}
		if len(r.Args) == 0 {
			err = f.AddRule(nr, action)
		} else {
			conds := make([]seccomp.ScmpCondition, 0, len(r.Args))
			for _, a := range r.Args {
				var c seccomp.ScmpCondition
				switch a.Op {
				case CmpMasked:
					c, err = seccomp.MakeCondition(a.Index, seccomp.CompareMaskedEqual, a.Mask, a.Value)
				case CmpGT:
					c, err = seccomp.MakeCondition(a.Index, seccomp.CompareGreater, a.Value)
				case CmpNE:
					c, err = seccomp.MakeCondition(a.Index, seccomp.CompareNotEqual, a.Value)
				default:
					err = fmt.Errorf("compare %q", a.Op)
				}
				if err != nil {
					break
				}
				conds = append(conds, c)
			}
			if err == nil {
				err = f.AddRuleConditional(nr, action, conds)
			}
		}
		if err != nil {
			f.Release()
			return nil, fmt.Errorf("rule %s%s: %w", r.Name, describeArgs(r.Args), err)
		}
	}
	return f, nil
}

// NewestSyscall is the highest syscall number the rules were written
// against (file_setattr, Linux 6.17). A kernel's newer calls are ENOSYS
// for every app, as a kernel without them would answer, so a program falls
// back: a call this list never weighed is not let through unseen, as
// setxattrat was (libseccomp 2.5 does not name it, and the filter skipped
// it: an app set an ACL on a file outside every grant).
const NewestSyscall = 469

// lateSyscalls numbers the calls the rules name that a libseccomp older
// than the kernel may not know. Since Linux 5.1 a new syscall has one
// number on every architecture but alpha, so one table serves x86-64 and
// arm64.
var lateSyscalls = map[string]seccomp.ScmpSyscall{
	"open_tree_attr": 467,
	"setxattrat":     463,
	"getxattrat":     464,
	"listxattrat":    465,
	"removexattrat":  466,
	"file_setattr":   469,
}

// syscallNumber is name's number on the native architecture, negative
// when it is absent there (libseccomp's pseudo-numbers), or an error for a
// name neither libseccomp nor lateSyscalls knows: the filter is not built
// without a rule it was asked for.
func syscallNumber(name string) (seccomp.ScmpSyscall, error) {
	nr, err := seccomp.GetSyscallFromName(name)
	if err == nil {
		return nr, nil
	}
	if nr, ok := lateSyscalls[name]; ok {
		return nr, nil
	}
	return 0, fmt.Errorf("rule %s: neither libseccomp %s nor the jail's own table knows this syscall: %w", name, libseccompVersion(), err)
}

func libseccompVersion() string {
	major, minor, micro := seccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d", major, minor, micro)
}

// filterCache keeps compiled filters by rule set: compiling costs more
// than loading, and a daemon has a handful of distinct rule sets (they
// follow from network, processes and the policy), so a short list
// compared rule by rule finds one faster than hashing the set would.
type filterCache struct {
	mu      sync.Mutex
	entries []filterEntry
}

type filterEntry struct {
	rules []Syscall
	prog  []unix.SockFilter
}

// maxFilters bounds the cache; a daemon needs far fewer.
const maxFilters = 32

func sameRules(a, b []Syscall) bool {
	return slices.EqualFunc(a, b, func(x, y Syscall) bool {
		return x.Name == y.Name && x.Errno == y.Errno && x.Notify == y.Notify && x.Why == y.Why && slices.Equal(x.Args, y.Args)
	})
}

func (c *filterCache) get(rules []Syscall) ([]unix.SockFilter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if sameRules(e.rules, rules) {
			return e.prog, nil
		}
	}
	p, err := compileBPF(rules)
	if err != nil {
		return nil, err
	}
	if len(c.entries) == maxFilters {
		c.entries = slices.Delete(c.entries, 0, 1)
	}
	c.entries = append(c.entries, filterEntry{rules: slices.Clone(rules), prog: p})
	return p, nil
}

// compileBPF compiles rules with libseccomp and returns the raw program,
// to be loaded by one process, by the setup sequence, which has no
// libseccomp (libseccomp-golang's Load, which always asks for TSYNC,
// would filter the whole daemon).
func compileBPF(rules []Syscall) ([]unix.SockFilter, error) {
	f, err := buildFilter(rules)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	memfd, err := unix.MemfdCreate("octosup-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	file := os.NewFile(uintptr(memfd), "seccomp-bpf")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(file)
	if err != nil {
		return nil, err
	}
	// prepare checks the same before every start; checking here too
	// makes a libseccomp that exports something else fail with the
	// reason when the rule set is compiled.
	prog, err := helper.ParseFilter(raw)
	if err != nil {
		return nil, fmt.Errorf("libseccomp's export: %w", err)
	}
	return helper.RefuseNewer(prog, NewestSyscall), nil
}
