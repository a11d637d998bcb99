package jail

import (
	"debug/elf"
	"testing"
)

// helperLDFlags are the Makefile's for octosup-jail: linked statically,
// so that a helper start maps one file and runs no dynamic loader.
const helperLDFlags = "-extldflags=-static"

// TestHelperIsStatic: octosup-jail, as make build builds it, is a static
// binary (no ELF interpreter, no shared library) that links the setup
// sequence and not libseccomp: the sequence runs from a constructor
// before its Go runtime starts, so a helper start costs an exec, not the
// dynamic loader's and the daemon's package inits' milliseconds.
func TestHelperIsStatic(t *testing.T) {
	f, err := elf.Open(standaloneHelper(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v segment: it is dynamically linked", HelperName, p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s imports %v (%v)", HelperName, libs, err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	sequence := false
	for _, s := range syms {
		switch s.Name {
		case "seccomp_init":
			t.Errorf("%s links libseccomp (%s)", HelperName, s.Name)
		case "ocs_helper_main":
			sequence = true
		}
	}
	if !sequence {
		t.Errorf("%s does not link the setup sequence (ocs_helper_main)", HelperName)
	}
}
