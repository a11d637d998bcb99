package helper

import (
	"errors"
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Landlock through go-landlock: Config.NewRulesetFD builds the ruleset in
// the daemon (best effort down the ABIs, its rule types carrying the
// semantics), for both launchers, and the setup sequence (jail/spawn)
// enforces it with the raw landlock_restrict_self, in a process of one
// thread, so no other thread needs covering (go-landlock's Restrict
// covers every thread of the caller: psx below ABI 8, TSYNC from 8).

// errataScopeSignal is the Landlock erratum whose fix makes signal
// scoping (ABI 6) trustworthy; go-landlock treats a kernel without it as
// ABI 5, and so does the report.
const errataScopeSignal = 0x2

// LandlockABI says which Landlock ABI the kernel gives, as go-landlock
// uses it: the kernel's version (landlock_create_ruleset with
// LANDLOCK_CREATE_RULESET_VERSION), taken down to 5 when the signal
// scoping erratum is not fixed; 0 when Landlock is absent or disabled at
// boot.
func LandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	if v >= 6 {
		if e, err := ll.LandlockGetErrata(); err != nil || e&errataScopeSignal == 0 {
			v = 5
		}
	}
	return v
}

// landlockConfig is what ls asks Landlock to handle: go-landlock's newest
// preset (V11: files incl. pathname-socket connect, TCP and UDP, both
// scopes), without the kinds ls leaves alone, best effort so that
// NewRulesetFD takes it down to what the kernel has. UDP is handled and
// never granted: an app has no UDP from ABI 10, as seccomp already makes
// it (docs/jail.md).
func landlockConfig(ls LandlockSpec) landlock.Config {
	cfg := landlock.V11
	switch {
	case ls.WriteOnly:
		cfg.HandledAccessFS = landlock.AccessFSSet(WriteRights)
	case !ls.FS:
		cfg.HandledAccessFS = 0
	}
	if !ls.Net {
		cfg.HandledAccessNet = 0
	}
	if !ls.Scope {
		cfg.Scoped = 0
	}
	if ls.LogApp {
		// LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (ABI 7): the app's own
		// denials reach the audit log, not only the sequence's.
		cfg = cfg.EnableLoggingForSubprocesses()
	}
	return cfg.BestEffort()
}

// WriteRights are the rights that change the filesystem: all a WriteOnly
// (policy broad) ruleset handles, so that reading stays unrestricted.
const WriteRights = ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
	ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo |
	ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSRefer

// The go-landlock canned rules whose rights are exactly one of ours (the
// tests hold them to it); every other set goes through PathAccess.
const (
	rxDir  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir // RODirs
	rxFile = ll.AccessFSExecute | ll.AccessFSReadFile                      // ROFiles
)

func pathRule(path string, rights uint64, dir bool) landlock.FSRule {
	switch {
	case dir && rights == rxDir:
		return landlock.RODirs(path)
	case !dir && rights == rxFile:
		return landlock.ROFiles(path)
	}
	return landlock.PathAccess(landlock.AccessFSSet(rights), path)
}

// fsRights maps our vocabulary onto Landlock's rights; a regular file
// takes only the file rights (directory rights on it are EINVAL).
func fsRights(a Access, dir bool) uint64 {
	var r uint64
	if a&AccessRead != 0 {
		r |= ll.AccessFSReadFile
	}
	if a&AccessExec != 0 {
		r |= ll.AccessFSExecute
	}
	if a&AccessWrite != 0 {
		r |= ll.AccessFSWriteFile
	}
	if a&AccessTruncate != 0 {
		r |= ll.AccessFSTruncate
	}
	if a&AccessDevIoctl != 0 {
		r |= ll.AccessFSIoctlDev
	}
	if dir {
		if a&AccessList != 0 {
			r |= ll.AccessFSReadDir
		}
		if a&AccessCreate != 0 {
			r |= ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym
		}
		if a&AccessWrite != 0 {
			// Connecting to a pathname socket (ABI 9) is writing to it.
			r |= ll.AccessFSResolveUnix
		}
		if a&AccessRemove != 0 {
			r |= ll.AccessFSRemoveFile | ll.AccessFSRemoveDir
		}
		if a&AccessRefer != 0 {
			r |= ll.AccessFSRefer
		}
	}
	return r
}

// PathRights is the Landlock rights a path rule of a grants on a
// directory (dir) or a file, for a kernel at abi.
func PathRights(a Access, dir bool, abi int) uint64 {
	rights := fsRights(a, dir)
	if abi < 2 {
		// go-landlock drops the whole ruleset when a rule asks for refer
		// on ABI 1; without the right, renames across directories are
		// refused there, which is the stricter way to degrade.
		rights &^= ll.AccessFSRefer
	}
	return rights
}

// landlockRules turns ls into go-landlock rules for a kernel at abi. Each
// path is looked at first: a regular file takes the file rights only, and
// a missing required path fails with its name and errno. The returned
// descriptors are what some rules name (/proc/self/fd/N): the caller
// closes them once the ruleset is built.
func landlockRules(ls LandlockSpec, abi int) (rules []landlock.Rule, fds []int, lerr *LayerError) {
	if ls.FS || ls.WriteOnly {
		for _, p := range ls.Paths {
			path, fd, dir, err := openRule(p)
			if err != nil {
				if p.Optional && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)) {
					continue
				}
				closeAll(fds)
				return nil, nil, LayerErr("landlock", "open "+p.Path, err)
			}
			if fd >= 0 {
				fds = append(fds, fd)
			}
			rights := PathRights(p.Access, dir, abi)
			if ls.WriteOnly {
				rights &= WriteRights
			}
			r := pathRule(path, rights, dir)
			if p.Optional {
				r = r.IgnoreIfMissing()
			}
			rules = append(rules, r)
		}
	}
	if ls.Net {
		for _, port := range ls.ConnectTCP {
			rules = append(rules, landlock.ConnectTCP(port))
		}
		for _, port := range ls.BindTCP {
			rules = append(rules, landlock.BindTCP(port))
		}
	}
	return rules, fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// openRule looks at a rule's path before go-landlock opens it, and says
// which path go-landlock is to open, the descriptor it names (-1: none)
// and whether it is a directory. A user's rule (OpenGrant) is given to
// go-landlock as that very descriptor, /proc/self/fd/N: a swap between
// this check and go-landlock's open reaches nothing. A system path is
// looked at by path: no app can write where those live.
func openRule(p PathRule) (path string, fd int, dir bool, err error) {
	switch p.Why {
	case "external", "resource", "jail", "secrets", "program", "interp":
		fd, dir, err := OpenGrant(p)
		if err != nil {
			return "", -1, false, err
		}
		return fmt.Sprintf("/proc/self/fd/%d", fd), fd, dir, nil
	}
	if p.Access&^(AccessRead|AccessExec|AccessWrite|AccessTruncate|AccessDevIoctl) == 0 {
		// File rights only (a root daemon's /etc files, /etc's link
		// targets): they suit a file and a directory alike, and a stat
		// per rule was a fifth of a root daemon's start.
		return p.Path, -1, false, nil
	}
	st, err := os.Stat(p.Path)
	if err != nil {
		return "", -1, false, err
	}
	return p.Path, -1, st.IsDir(), nil
}

// OpenGrant opens a rule's path O_PATH, as whatever grants it must: the
// ruleset, and the guard placing an inotify watch below it.
//
// An external's, a resource's, the program's and an interpreter's path
// was resolved in full by the daemon, so it is opened with
// RESOLVE_NO_SYMLINKS: a link in any component now is a swap (an app with
// rw on a directory above it can make one), and would grant wherever it
// leads. The program and an interpreter must still be regular files: a
// directory would be granted whole. The jail and secrets directories (made
// by descriptor, below a data directory the user may reach through links
// of their own) must be real directories of this user, not links. A
// system path may be a link (/etc/resolv.conf): no app can write there.
func OpenGrant(p PathRule) (fd int, dir bool, err error) {
	switch p.Why {
	case "external", "resource", "program", "interp":
		fd, err = unix.Openat2(unix.AT_FDCWD, p.Path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
		if errors.Is(err, unix.ELOOP) {
			return -1, false, fmt.Errorf("%s leads through a symlink now (it was resolved before): %w", p.Path, unix.ELOOP)
		}
	case "jail", "secrets":
		fd, err = unix.Open(p.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	default:
		fd, err = unix.Open(p.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
	if (p.Why == "program" || p.Why == "interp") && st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, false, fmt.Errorf("%s is not a regular file now (it was resolved to one before): %w", p.Path, unix.EACCES)
	}
	if p.Why == "jail" || p.Why == "secrets" {
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			err = fmt.Errorf("%s is a symlink now (it was resolved before): %w", p.Path, unix.ELOOP)
		case !dir || int(st.Uid) != os.Geteuid():
			err = fmt.Errorf("%s is not a directory of uid %d: %w", p.Path, os.Geteuid(), unix.EPERM)
		}
		if err != nil {
			unix.Close(fd)
			return -1, false, err
		}
	}
	return fd, dir, nil
}

// ABIUnixConnect is the Landlock ABI that narrows connecting to pathname
// unix sockets.
const ABIUnixConnect = 9

// LandlockMissing lists what ls asks for that abi cannot enforce.
func LandlockMissing(ls LandlockSpec, abi int) []string {
	if (ls.FS || ls.WriteOnly || ls.Net || ls.Scope) && abi < 1 {
		return []string{"landlock"}
	}
	var out []string
	if (ls.FS || ls.WriteOnly) && abi < 3 {
		out = append(out, "landlock.truncate")
	}
	if ls.Net && abi < 4 {
		out = append(out, "landlock.net")
	}
	if ls.Scope && abi < 6 {
		out = append(out, "landlock.scope")
	}
	if ls.UnixSockets && abi < ABIUnixConnect {
		out = append(out, "landlock.unix")
	}
	return out
}

// BuildRuleset creates the ruleset for ls (close-on-exec), or returns -1
// when there is nothing to enforce: Landlock is absent, or nothing ls
// asks for exists at this ABI. Building opens files and restricts
// nothing: it may run on any thread.
func BuildRuleset(ls LandlockSpec, abi int) (int, uint32, *LayerError) {
	if abi < 1 {
		// NewRulesetFD would say the same (-1), but only after opening
		// every path for nothing.
		return -1, 0, nil
	}
	rules, fds, lerr := landlockRules(ls, abi)
	if lerr != nil {
		return -1, 0, lerr
	}
	fd, flags, err := landlockConfig(ls).NewRulesetFD(rules...)
	closeAll(fds)
	if err != nil {
		return -1, 0, LayerErr("landlock", "ruleset: "+err.Error(), err)
	}
	return fd, flags, nil
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
