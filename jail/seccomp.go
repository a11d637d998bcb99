package jail

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	for _, r := range rules {
		nr, err := seccomp.GetSyscallFromName(r.Name)
		if err != nil || nr < 0 {
			// Unknown to this libseccomp, or absent on this architecture:
			// nothing to refuse.
			continue
		}
		action := seccomp.ActErrno.SetReturnCode(int16(syscall.EPERM))
		if r.Errno == "ENOSYS" {
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

// filterCache keeps compiled filters by rule set (the SHA-256 of its
// JSON): compiling costs more than loading, and a daemon has a handful of
// distinct rule sets. Both the helper (which gets the BPF with the spec)
// and the direct spawn load what it holds.
type filterCache struct {
	mu    sync.Mutex
	progs map[[sha256.Size]byte][]unix.SockFilter
}

func (c *filterCache) get(rules []Syscall) ([]unix.SockFilter, error) {
	b, err := json.Marshal(rules)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.progs[key]; ok {
		return p, nil
	}
	p, err := compileBPF(rules)
	if err != nil {
		return nil, err
	}
	if c.progs == nil {
		c.progs = map[[sha256.Size]byte][]unix.SockFilter{}
	}
	c.progs[key] = p
	return p, nil
}

// compileBPF compiles rules with libseccomp and returns the raw program,
// to be loaded on one thread (helper.LoadFilter): by the helper, which
// has no libseccomp, or by a direct spawn's thread, where
// libseccomp-golang's Load, which always asks for TSYNC, would filter the
// whole daemon.
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
	// The helper checks the same before it loads it; checking here too
	// makes a libseccomp that exports something else fail the start with
	// the reason, before anything is forked.
	prog, err := helper.ParseFilter(raw)
	if err != nil {
		return nil, fmt.Errorf("libseccomp's export: %w", err)
	}
	return prog, nil
}
