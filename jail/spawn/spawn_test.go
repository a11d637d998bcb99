package spawn

import (
	"encoding/binary"
	"io"
	"os"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func testParams() *Params {
	return &Params{
		Path: 0x10000, Argv: 0x20000, Envp: 0x30000,
		Regions:   []Region{{Addr: 0x10000, Data: []byte("/bin/true\x00")}},
		Dir:       "/tmp",
		FDs:       [4]int{0, 1, 2, 3},
		ParentPID: 1,
		RulesetFD: -1, NotifySock: -1,
		Filter: []unix.SockFilter{{Code: 6, K: 0x7fff0000}},
	}
}

func input(p *Params) []byte {
	in := NewInput(p)
	defer in.Free()
	return slices.Clone(in.Bytes())
}

// Offsets of struct ocs_input's fields (spawn.h).
const (
	offSize      = 8
	offDir       = 12
	offFilter    = 16
	offFilterLen = 20
	offNRegions  = 28
)

// helperTakes runs the helper (this test binary, as [itself, Arg]) on b
// in a memfd, as launch.go does, and says whether it went past its input
// check (ocs_check). Past it, the sequence stops at the descriptors (fd
// 3 is not open here) or at the latest at testParams' ParentPID (1, not
// the test): nothing is exec'd.
func helperTakes(t testing.TB, b []byte) bool {
	t.Helper()
	fd, err := unix.MemfdCreate("input", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	input := os.NewFile(uintptr(fd), "input")
	defer input.Close()
	if _, err := input.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := input.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	files := []uintptr{0, 1, 2, ^uintptr(0), ^uintptr(0), ^uintptr(0)}
	files[StatusFD], files[InputFD] = w.Fd(), input.Fd()
	pid, err := syscall.ForkExec(os.Args[0], []string{os.Args[0], Arg}, &syscall.ProcAttr{Files: files})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := io.ReadAll(r)
	var ws syscall.WaitStatus
	if _, werr := syscall.Wait4(pid, &ws, 0, nil); werr != nil || err != nil {
		t.Fatal(werr, err)
	}
	st, ok := ParseStatus(rec)
	if !ok {
		t.Fatalf("the helper wrote no status record (%x), exit %v", rec, ws)
	}
	switch st.Step {
	case StepInputRead, StepInputBad:
		return false
	case StepOK, StepExec:
		t.Fatalf("the helper went as far as the exec (%v)", st.Errno)
	}
	return true
}

// TestCheck: the helper takes what NewInput lays out and nothing that
// points outside itself or comes from another build.
func TestCheck(t *testing.T) {
	good := input(testParams())
	put := func(off int, v uint32) []byte {
		b := slices.Clone(good)
		binary.NativeEndian.PutUint32(b[off:], v)
		return b
	}
	long := testParams()
	long.Filter = make([]unix.SockFilter, 4097)
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"as laid out", good, true},
		{"another version", append([]byte("OCSJAIL\x02"), good[8:]...), false},
		{"truncated", good[:len(good)-1], false},
		{"trailing byte", append(slices.Clone(good), 0), false},
		{"only the head", good[:64], false},
		{"size that is not the length", put(offSize, uint32(len(good)+8)), false},
		{"dir past the end", put(offDir, uint32(len(good))), false},
		{"dir inside the head", put(offDir, 0), false},
		{"filter past the end", put(offFilterLen, uint32(len(good))), false},
		{"misaligned filter", put(offFilter, 13), false},
		{"more regions than there are", put(offNRegions, 3), false},
		{"a filter longer than the kernel takes", input(long), false},
		{"nothing", nil, false},
	} {
		if got := helperTakes(t, c.in); got != c.want {
			t.Errorf("%s: the helper took it: %v, want %v", c.name, got, c.want)
		}
	}
	rel := testParams()
	rel.Dir = "tmp"
	if helperTakes(t, input(rel)) {
		t.Error("a relative dir passed")
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(input(testParams()))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		// What passes is what the sequence reads: every offset and
		// length inside b, the dir a NUL-terminated absolute path.
		if !helperTakes(t, b) {
			return
		}
		if len(b) != int(binary.NativeEndian.Uint32(b[offSize:])) || string(b[:8]) != magic {
			t.Errorf("accepted %x", b)
		}
		dir := binary.NativeEndian.Uint32(b[offDir:])
		if b[dir] != '/' || !slices.Contains(b[dir:], 0) {
			t.Errorf("accepted a dir at %d that is not an absolute path", dir)
		}
	})
}

func TestParseStatus(t *testing.T) {
	rec := func(step Step, errno int32) []byte {
		b := binary.NativeEndian.AppendUint32(nil, uint32(step))
		return binary.NativeEndian.AppendUint32(b, uint32(errno))
	}
	for _, c := range []struct {
		name string
		in   []byte
		want Status
		ok   bool
	}{
		{"exec reached", rec(StepOK, 0), Status{Step: StepOK}, true},
		{"the last record wins", append(rec(StepOK, 0), rec(StepExec, 2)...), Status{Step: StepExec, Errno: unix.ENOENT}, true},
		{"nothing", nil, Status{}, false},
		{"half a record", rec(StepOK, 0)[:4], Status{}, false},
	} {
		st, ok := ParseStatus(c.in)
		if st != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, st, ok, c.want, c.ok)
		}
	}
}

// TestConstants: the Go names of spawn.h's helper constants are its.
func TestConstants(t *testing.T) {
	if Arg != cArg {
		t.Errorf("Arg %q, spawn.h's %q", Arg, cArg)
	}
	if StepNoCgo != stepNoCgo {
		t.Errorf("StepNoCgo %d, stepNoCgo %d", StepNoCgo, stepNoCgo)
	}
}
