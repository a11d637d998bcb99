package cgroupfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzParseMountinfo(f *testing.F) {
	for _, name := range []string{"mountinfo-hybrid", "mountinfo-unified", "mountinfo-v1", "mountinfo-bind-then-root"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("1 2 3 / x - cgroup2\n1 2 3 / /a\\0 - cgroup2 c rw\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mnt, err := ParseMountinfo(strings.NewReader(string(b)))
		if err == nil && (!filepath.IsAbs(mnt) || filepath.Clean(mnt) != mnt) {
			t.Fatalf("mount point %q is not a clean absolute path", mnt)
		}
	})
}
