package jail

import (
	"fmt"
	"syscall"

	seccomp "github.com/seccomp/libseccomp-golang"
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
