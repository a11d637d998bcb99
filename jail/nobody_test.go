package jail

import (
	"strings"
	"testing"

	"octosup/internal/asnobody"
)

// TestAsNobody re-runs the jail's process tests as an unprivileged user:
// Landlock and seccomp need no privilege, and a daemon run by a person is
// not root. It runs only where it can switch users (root with setpriv).
func TestAsNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := asnobody.NewDir(t)
	helperBin := asnobody.Copy(t, dir, standaloneHelper(t), HelperName)
	out := asnobody.RunIn(t, dir, "^(TestEscape|TestJailedProcess|TestNarrow|TestHelperFailure|TestPlantedSymlinkIsNotFollowed|TestPlantedSymlinkRace|TestGuardDoesNotFollowAPlantedRoot|TestSignalsStartClean|TestShebangGrantsOnlyWhatTheKernelRuns|TestExecPathsAreGrantedLikeExternals|TestSigioReachesNoOutsideGroup|TestDesktopSocketEscapes|TestPulseJailed|TestPipeWireJailed|TestSoundServerHoldingsBounded|TestWatchTakesTheAppsAccess)$",
		helperPathEnv+"="+helperBin)
	// The run must have been real: every escape case ran as nobody.
	if n := strings.Count(out, "--- PASS: TestEscape/helper/"); n < 25 {
		t.Fatalf("as nobody only %d escape cases passed:\n%s", n, out)
	}
	asnobody.WantPassed(t, out, "TestPlantedSymlinkIsNotFollowed", "TestPlantedSymlinkRace", "TestGuardDoesNotFollowAPlantedRoot", "TestSignalsStartClean",
		"TestShebangGrantsOnlyWhatTheKernelRuns", "TestExecPathsAreGrantedLikeExternals", "TestSigioReachesNoOutsideGroup", "TestDesktopSocketEscapes", "TestPulseJailed", "TestPipeWireJailed", "TestSoundServerHoldingsBounded", "TestWatchTakesTheAppsAccess")
	t.Logf("as nobody: %d escape cases passed", strings.Count(out, "--- PASS: TestEscape/helper/"))
}
