// Package cgroupfs reads the cgroup v2 filesystem's layout: where it is
// mounted, and the words of a cgroup's interface files
// (cgroup.controllers). The supervisor makes its leaves with it;
// octosupctl validate asks it what the host's hierarchy offers.
package cgroupfs

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoCgroup2 is ParseMountinfo's answer when no cgroup2 is mounted.
var ErrNoCgroup2 = errors.New("no cgroup2 filesystem is mounted")

// ParseMountinfo returns the mount point of the first mount of a cgroup2
// hierarchy's root in r, which is in the format of /proc/PID/mountinfo
// (proc(5): the fields after " - " start with the filesystem type).
func ParseMountinfo(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, typ := strings.Fields(pre), strings.Fields(post)
		// Only a mount of the hierarchy's root: the paths in
		// /proc/self/cgroup are relative to it, not to a bind-mounted
		// subtree.
		if ok && len(fields) >= 5 && len(typ) >= 1 && typ[0] == "cgroup2" && fields[3] == "/" {
			mnt := unescapeMount(fields[4])
			if !filepath.IsAbs(mnt) {
				continue
			}
			return filepath.Clean(mnt), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", ErrNoCgroup2
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Words is the set of words in a cgroup file such as cgroup.controllers;
// empty when it cannot be read.
func Words(file string) map[string]bool {
	b, _ := os.ReadFile(file)
	out := map[string]bool{}
	for _, w := range strings.Fields(string(b)) {
		out[w] = true
	}
	return out
}

// HostControllers is what the cgroup v2 hierarchy offers at its root
// (cgroup.controllers of its mount, from /proc/self/mountinfo), and where
// it is mounted; where is "" when no cgroup2 is mounted.
func HostControllers() (have map[string]bool, where string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return map[string]bool{}, ""
	}
	defer f.Close()
	mnt, err := ParseMountinfo(f)
	if err != nil {
		return map[string]bool{}, ""
	}
	return Words(filepath.Join(mnt, "cgroup.controllers")), mnt
}
