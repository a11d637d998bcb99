package tsclient

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// run runs name in dir, failing the test with its output.
func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// TestGeneratedTypesCheck: json-schema-to-typescript turns the schemas
// into types a strict TypeScript client of every op type-checks against,
// and ajv compiles them in strict mode and accepts every golden line.
func TestGeneratedTypesCheck(t *testing.T) {
	for _, p := range []string{"node", "npm"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is not installed: this test needs it (.ci/run installs nodejs and npm)", p)
		}
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// A copy of this directory outside the tree, where npm ci puts the
	// exact versions of package-lock.json (from the registry or npm's
	// cache): node_modules never lands in the checkout.
	work := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "gen.mjs", "check.mjs", "client.ts", "tsconfig.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, work, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error")

	schemas := filepath.Join(here, "..", "..", "configs", "schema")
	run(t, work, "node", "gen.mjs", schemas, filepath.Join(work, "gen"))
	run(t, work, filepath.Join(work, "node_modules", ".bin", "tsc"), "-p", ".")

	golden, _ := filepath.Glob(filepath.Join(here, "..", "..", "control", "testdata", "golden", "*.jsonl"))
	frames, _ := filepath.Glob(filepath.Join(here, "..", "..", "peer", "internal", "frame", "testdata", "golden", "*.json"))
	if len(golden) == 0 || len(frames) == 0 {
		t.Fatalf("no golden lines (%d control files, %d hub frames)", len(golden), len(frames))
	}
	run(t, work, "node", append([]string{"check.mjs", schemas}, append(golden, frames...)...)...)
}
