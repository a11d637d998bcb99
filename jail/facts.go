package jail

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// fileFacts remembers what Spec reads from the filesystem besides the
// entry, for as long as the files it came from stay as they were: a
// program's interpreters (its #! line, PT_INTERP) and /etc's symlinks.
// Reading them again costs more than all the rest of a start's
// preparation (an ELF parse; a directory read and a symlink walk per
// link), while a stat per file says whether they still hold.
//
// What a stat cannot see: a symlink in /etc retargeted at a place past
// its first hop (/etc's own entries changing updates its mtime). The
// daemon's restart, or any change to /etc itself, reads them again.
type fileFacts struct {
	mu     sync.Mutex
	interp map[string]interpFact
	links  map[string]linksFact
	roots  linksFact // broadRoots, keyed by /'s stat
	etc    etcFact
}

// etcFact is publicTree("/etc") with the stats of the directories it
// read.
type etcFact struct {
	dirs   []string
	keys   []fileKey
	grants []publicGrant
	watch  *os.File // inotify on dirs; nil: the keys say
}

// maxFacts bounds each map (programs and directories, one per app at
// most); past it the map starts over.
const maxFacts = 4096

// fileKey is what changes when a file is replaced or rewritten.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func statKey(path string) (fileKey, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileKey{}, false
	}
	return fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true
}

type interpFact struct {
	keys   []fileKey // the program's, then each interpreter's
	interp []string
}

type linksFact struct {
	key   fileKey
	links map[string]string
	roots []string
}

// interpreters is interpreters(program), read again only when the
// program or one of its interpreters changed. Errors are not remembered:
// the file may appear, and the error says what to fix.
func (f *fileFacts) interpreters(program string) ([]string, error) {
	f.mu.Lock()
	fact, ok := f.interp[program]
	f.mu.Unlock()
	if ok && f.holds(append([]string{program}, fact.interp...), fact.keys) {
		return fact.interp, nil
	}
	// Keys first: a change while reading makes the next start read again.
	var keys []fileKey
	pk, ok := statKey(program)
	interp, err := interpreters(program)
	if err != nil || !ok {
		return interp, err
	}
	keys = append(keys, pk)
	for _, p := range interp {
		k, ok := statKey(p)
		if !ok {
			return interp, nil
		}
		keys = append(keys, k)
	}
	f.mu.Lock()
	if f.interp == nil || len(f.interp) >= maxFacts {
		f.interp = map[string]interpFact{}
	}
	f.interp[program] = interpFact{keys: keys, interp: interp}
	f.mu.Unlock()
	return interp, nil
}

func (f *fileFacts) holds(paths []string, keys []fileKey) bool {
	if len(paths) != len(keys) {
		return false
	}
	for i, p := range paths {
		if k, ok := statKey(p); !ok || k != keys[i] {
			return false
		}
	}
	return true
}

// systemLinks is systemLinks(dir), read again when dir changed. The map
// is shared: callers must not modify it.
func (f *fileFacts) systemLinks(dir string) map[string]string {
	key, ok := statKey(dir)
	f.mu.Lock()
	fact, hit := f.links[dir]
	f.mu.Unlock()
	if ok && hit && fact.key == key {
		return fact.links
	}
	links := systemLinks(dir)
	if ok {
		f.mu.Lock()
		if f.links == nil || len(f.links) >= maxFacts {
			f.links = map[string]linksFact{}
		}
		f.links[dir] = linksFact{key: key, links: links}
		f.mu.Unlock()
	}
	return links
}

// publicEtc is publicTree("/etc"), read again when anything in a
// directory of /etc changed: an entry added, removed, renamed, or its
// mode changed. An inotify descriptor watching every directory it read
// says so for the cost of one read a start (a stat of each of /etc's
// ~150 directories was 0.2 ms); where inotify is out of instances or
// watches, the stats say it instead, and miss a chmod of a file until
// its directory changes.
func (f *fileFacts) publicEtc() []publicGrant { return f.publicTreeOf("/etc") }

func (f *fileFacts) publicTreeOf(root string) []publicGrant {
	f.mu.Lock()
	fact := f.etc
	if fact.watch != nil && fact.grants != nil && !noEvents(fact.watch) {
		// Consumed: nobody may take the old grants from now on.
		f.etc.grants = nil
		fact.grants = nil
	}
	f.mu.Unlock()
	if fact.grants != nil && fact.dirs[0] == root && (fact.watch != nil || f.holds(fact.dirs, fact.keys)) {
		return fact.grants
	}
	w := newDirWatch()
	grants, dirs, keys := publicTree(root, w.add)
	if grants == nil {
		grants = []publicGrant{}
	}
	f.mu.Lock()
	old := f.etc.watch
	f.etc = etcFact{dirs: dirs, keys: keys, grants: grants, watch: w.file()}
	f.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return grants
}

// noEvents says whether the non-blocking inotify descriptor w has
// nothing to read: nothing it watches changed. One read, which never
// blocks.
func noEvents(w *os.File) bool {
	var buf [unix.SizeofInotifyEvent + unix.NAME_MAX + 1]byte
	_, err := unix.Read(int(w.Fd()), buf[:])
	return errors.Is(err, unix.EAGAIN)
}

// dirWatch is an inotify descriptor on directories, or nothing once it
// could not watch one.
type dirWatch struct {
	fd     int
	failed bool
}

func newDirWatch() *dirWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	return &dirWatch{fd: fd, failed: err != nil}
}

func (w *dirWatch) add(dir string) {
	if w.failed {
		return
	}
	const changes = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	if _, err := unix.InotifyAddWatch(w.fd, dir, changes); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES) {
		unix.Close(w.fd)
		w.failed = true
	}
}

// file is the descriptor (closed with the File, or when the File is
// collected), nil where it failed.
func (w *dirWatch) file() *os.File {
	if w.failed {
		return nil
	}
	return os.NewFile(uintptr(w.fd), "inotify-etc")
}

// broadRoots is broadRoots(), read again when / changed (an entry added
// or removed).
func (f *fileFacts) broadRoots() []string {
	key, ok := statKey("/")
	f.mu.Lock()
	fact := f.roots
	f.mu.Unlock()
	if ok && fact.key == key && fact.roots != nil {
		return fact.roots
	}
	roots := broadRoots()
	if ok {
		f.mu.Lock()
		f.roots = linksFact{key: key, roots: roots}
		f.mu.Unlock()
	}
	return roots
}

// broadRoots lists the entries of / a broad app may write beneath
// (Options.BroadRoots): all but /sys, /proc and any entry holding a
// cgroup mount. A mount that cannot be read keeps them all out.
func broadRoots() []string {
	entries, err := os.ReadDir("/")
	if err != nil {
		return []string{}
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return []string{}
	}
	var roots, links []string
	for _, e := range entries {
		p := "/" + e.Name()
		if p == "/sys" || p == "/proc" || slices.ContainsFunc(mounts, func(m string) bool { return m == p || strings.HasPrefix(m, p+"/") }) {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 {
			links = append(links, p)
			continue
		}
		roots = append(roots, p)
	}
	// A link like /bin -> usr/bin leads beneath a root already listed: a
	// rule of its own would only make the ruleset longer.
	// A link that leads into /proc, /sys or a cgroup mount gets none.
	for _, l := range links {
		t, err := filepath.EvalSymlinks(l)
		if err != nil || underAny(t, roots) || underAny(t, kernelViews[:]) || slices.ContainsFunc(mounts, func(m string) bool { return underAny(t, []string{m}) }) {
			continue
		}
		roots = append(roots, l)
	}
	slices.Sort(roots)
	return roots
}

// cgroupMounts lists where cgroup and cgroup2 file systems are mounted.
func cgroupMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if ok && len(f) >= 5 && (strings.HasPrefix(post, "cgroup2 ") || strings.HasPrefix(post, "cgroup ")) {
			out = append(out, f[4])
		}
	}
	return out, nil
}
