package jail

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock through its three syscalls (x/sys/unix), for the calling thread
// only: the helper holds that thread locked and execs from it, so there
// are no other threads to cover. go-landlock's Restrict covers every
// thread through libcap's psx, which this module does not carry (see
// docs/jail.md); its per-ABI rules are mirrored in abiRights.

// LandlockABI asks the kernel which Landlock ABI it has
// (landlock_create_ruleset with LANDLOCK_CREATE_RULESET_VERSION); 0 when
// Landlock is absent or disabled at boot.
func LandlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 || int(v) < 0 {
		return 0
	}
	return int(v)
}

// abiRights is what an ABI can enforce.
type abiRights struct {
	fs, net, scoped uint64
	logFlags        bool
}

func rightsAt(abi int) abiRights {
	var r abiRights
	if abi < 1 {
		return r
	}
	r.fs = 1<<13 - 1 // execute … make_sym
	if abi >= 2 {
		r.fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		r.fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 4 {
		r.net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if abi >= 5 {
		r.fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 6 {
		r.scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	if abi >= 7 {
		r.logFlags = true
	}
	if abi >= 9 {
		r.fs |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	if abi >= 10 {
		// Handled but never granted: no UDP at all (docs/jail.md).
		r.net |= unix.LANDLOCK_ACCESS_NET_BIND_UDP | unix.LANDLOCK_ACCESS_NET_CONNECT_SEND_UDP
	}
	return r
}

// handled is what ls asks for, cut down to what abi can enforce (best
// effort down the ABIs, done here so that the report says exactly what
// took).
func handled(ls LandlockSpec, abi int) unix.LandlockRulesetAttr {
	r := rightsAt(abi)
	var a unix.LandlockRulesetAttr
	if ls.FS {
		a.Handled_access_fs = r.fs
	}
	if ls.Net {
		a.Handled_access_net = r.net
	}
	if ls.Scope {
		a.Scoped = r.scoped
	}
	return a
}

// fsRights maps our vocabulary onto Landlock's rights; a regular file
// takes only the file rights (directory rights on it are EINVAL).
func fsRights(a Access, dir bool) uint64 {
	var r uint64
	if a&AccessRead != 0 {
		r |= unix.LANDLOCK_ACCESS_FS_READ_FILE
	}
	if a&AccessExec != 0 {
		r |= unix.LANDLOCK_ACCESS_FS_EXECUTE
	}
	if a&AccessWrite != 0 {
		r |= unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	}
	if a&AccessTruncate != 0 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if a&AccessDevIoctl != 0 {
		r |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if dir {
		if a&AccessList != 0 {
			r |= unix.LANDLOCK_ACCESS_FS_READ_DIR
		}
		if a&AccessCreate != 0 {
			r |= unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
				unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
		}
		if a&AccessWrite != 0 {
			// Connecting to a pathname socket (ABI 9) is writing to it.
			r |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
		}
		if a&AccessRemove != 0 {
			r |= unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR
		}
		if a&AccessRefer != 0 {
			r |= unix.LANDLOCK_ACCESS_FS_REFER
		}
	}
	return r
}

// landlockMissing lists what ls asks for that abi cannot enforce.
func landlockMissing(ls LandlockSpec, abi int) []string {
	if (ls.FS || ls.Net || ls.Scope) && abi < 1 {
		return []string{"landlock"}
	}
	var out []string
	if ls.FS && abi < 3 {
		out = append(out, "landlock.truncate")
	}
	if ls.Net && abi < 4 {
		out = append(out, "landlock.net")
	}
	if ls.Scope && abi < 6 {
		out = append(out, "landlock.scope")
	}
	return out
}

// netPortAttr is struct landlock_net_port_attr (x/sys lacks it).
type netPortAttr struct {
	allowedAccess uint64
	port          uint64
}

// applyLandlock restricts the calling thread to ls at the kernel's abi and
// reports whether a domain was enforced. no_new_privs must be set.
func applyLandlock(ls LandlockSpec, abi int) (bool, *LayerError) {
	fd, flags, lerr := buildRuleset(ls, abi)
	if lerr != nil || fd < 0 {
		return false, lerr
	}
	defer unix.Close(fd)
	if lerr := restrictSelf(fd, flags); lerr != nil {
		return false, lerr
	}
	return true, nil
}

// buildRuleset creates the ruleset for ls at abi (close-on-exec), or
// returns -1 when abi can enforce nothing of it. Building opens files and
// restricts nothing: it may run on any thread.
func buildRuleset(ls LandlockSpec, abi int) (int, uintptr, *LayerError) {
	attr := handled(ls, abi)
	if attr.Handled_access_fs == 0 && attr.Handled_access_net == 0 && attr.Scoped == 0 {
		return -1, 0, nil
	}
	size := unsafe.Offsetof(attr.Quiet_access_fs) // the fields before quieting (ABI 10)
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return -1, 0, layerErr("landlock", "create ruleset", e)
	}
	fd := int(r)
	fail := func(lerr *LayerError) (int, uintptr, *LayerError) {
		unix.Close(fd)
		return -1, 0, lerr
	}
	for _, p := range ls.Paths {
		if lerr := addPathRule(fd, p, attr.Handled_access_fs); lerr != nil {
			return fail(lerr)
		}
	}
	for _, port := range ls.ConnectTCP {
		if lerr := addPortRule(fd, unix.LANDLOCK_ACCESS_NET_CONNECT_TCP&attr.Handled_access_net, port); lerr != nil {
			return fail(lerr)
		}
	}
	for _, port := range ls.BindTCP {
		if lerr := addPortRule(fd, unix.LANDLOCK_ACCESS_NET_BIND_TCP&attr.Handled_access_net, port); lerr != nil {
			return fail(lerr)
		}
	}
	var flags uintptr
	if ls.LogApp && rightsAt(abi).logFlags {
		flags = unix.LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
	}
	return fd, flags, nil
}

// restrictSelf enforces a ruleset on the calling thread only.
func restrictSelf(rulesetFD int, flags uintptr) *LayerError {
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), flags, 0); e != 0 {
		return layerErr("landlock", "restrict", e)
	}
	return nil
}

func addPathRule(rulesetFD int, p PathRule, handledFS uint64) *LayerError {
	fd, err := unix.Open(p.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if p.Optional && (err == unix.ENOENT || err == unix.ENOTDIR) {
			return nil
		}
		return layerErr("landlock", "open "+p.Path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return layerErr("landlock", "stat "+p.Path, err)
	}
	rights := fsRights(p.Access, st.Mode&unix.S_IFMT == unix.S_IFDIR) & handledFS
	if rights == 0 {
		return nil // nothing this ABI handles: adding it would be EINVAL
	}
	return addRawPathRule(rulesetFD, fd, rights, p.Path)
}

func addRawPathRule(rulesetFD, fd int, rights uint64, path string) *LayerError {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if e != 0 {
		return layerErr("landlock", "add rule "+path, e)
	}
	return nil
}

const landlockRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

func addPortRule(rulesetFD int, access uint64, port uint16) *LayerError {
	if access == 0 {
		return nil
	}
	attr := netPortAttr{allowedAccess: access, port: uint64(port)}
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), landlockRuleNetPort,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if e != 0 {
		return layerErr("landlock", fmt.Sprintf("add port rule %d", port), e)
	}
	return nil
}

// errnoOf names the errno inside err ("" when there is none).
func errnoOf(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	return ""
}
