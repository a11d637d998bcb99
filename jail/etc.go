package jail

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// /etc is granted as what every user of the machine may read there, not
// whole: a root daemon's apps run as uid 0 without capabilities, and the
// owner's read bit let them read /etc/shadow, /etc/gshadow and the TLS
// keys in /etc/ssl/private. "Every user may read" is the others' read
// bit (and, for a directory, its search bit) on the entry and on every
// directory above it: what a jail app of any daemon then reads in /etc is
// the machine's public configuration.

// publicGrant is one read grant of a public tree: a directory whose whole
// tree is public, or a public file.
type publicGrant struct {
	path string
	dir  bool
}

// publicTree is the smallest set of grants that covers exactly the public
// entries beneath root, and the directories it read with their stats
// (which say when to read it again); watch is called with each directory
// before it is read. A directory whose whole tree is public is one
// grant; any other is split into its public entries. Symlinks are
// neither granted nor counted against their directory: Landlock checks
// the file a link leads to, and /etc's links are granted where they lead
// (Options.SystemLinks). An entry that cannot be read is not public.
func publicTree(root string, watch func(dir string)) (grants []publicGrant, dirs []string, keys []fileKey) {
	var walk func(dir string) ([]publicGrant, bool)
	walk = func(dir string) ([]publicGrant, bool) {
		// The stat and the watch before the read: a change after them is
		// seen next time.
		watch(dir)
		k, _ := statKey(dir)
		dirs, keys = append(dirs, dir), append(keys, k)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, false
		}
		whole := true
		var out []publicGrant
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if e.Type()&os.ModeSymlink != 0 {
				continue
			}
			info, err := e.Info()
			if err != nil {
				whole = false
				continue
			}
			mode := info.Mode().Perm()
			if !e.IsDir() {
				if mode&0o004 == 0 {
					whole = false
					continue
				}
				out = append(out, publicGrant{path: p})
				continue
			}
			if mode&0o005 != 0o005 {
				whole = false
				continue
			}
			sub, subWhole := walk(p)
			if subWhole {
				out = append(out, publicGrant{path: p, dir: true})
				continue
			}
			whole = false
			out = append(out, sub...)
		}
		return out, whole
	}
	info, err := os.Stat(root)
	if err != nil || info.Mode().Perm()&0o005 != 0o005 {
		k, _ := statKey(root)
		return nil, []string{root}, []fileKey{k}
	}
	out, whole := walk(root)
	if whole {
		return []publicGrant{{path: root, dir: true}}, dirs, keys
	}
	slices.SortFunc(out, func(a, b publicGrant) int { return strings.Compare(a.path, b.path) })
	return out, dirs, keys
}
