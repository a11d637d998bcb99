package jail

import (
	"debug/elf"
	"testing"
)

// TestHelperIsStatic: octosup-jail, as make build builds it, is a static
// binary without cgo: no ELF interpreter, no shared library, no
// libseccomp. That is what makes a helper start cost a millisecond, not
// the dynamic loader's and the daemon's package inits' seven.
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
	for _, s := range syms {
		switch s.Name {
		case "seccomp_init", "x_cgo_init": // libseccomp; runtime/cgo
			t.Errorf("%s links %s", HelperName, s.Name)
		}
	}
}
