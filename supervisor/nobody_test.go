package supervisor

import (
	"strings"
	"testing"

	"octosup/internal/asnobody"
)

// TestAsNobody re-runs the tests of what an app does to its parentage,
// session and process group, and of the limits without a cgroup, as an
// unprivileged user with no cgroup of its own: a daemon run by a person,
// whose only stopper is the process group and the subreaper, and whose
// only limiter RLIMIT_NPROC.
func TestAsNobody(t *testing.T) {
	tests := []string{"TestOrphanStaysTheApps", "TestStopEndsEveryProcess", "TestTermReachesEveryProcess", "TestCgroupStopsSetsidDescendant", "TestStopKillsGrandchild",
		"TestZombieLeaderDiesWithTheApp", "TestUnheldLimitsRefused", "TestReloadLimitsInPlace"}
	out := asnobody.Run(t, "^("+strings.Join(tests, "|")+")$")
	// The run must have been real: the process-group cases ran and passed.
	asnobody.WantPassed(t, out,
		"TestOrphanStaysTheApps/process-group/jail", "TestOrphanStaysTheApps/process-group/broad-setsid",
		"TestStopEndsEveryProcess/process-group",
		"TestTermReachesEveryProcess/process-group/own-group", "TestTermReachesEveryProcess/process-group/broad-setsid",
		"TestCgroupStopsSetsidDescendant/process-group_fallback", "TestStopKillsGrandchild",
		"TestZombieLeaderDiesWithTheApp/process-group/broad/stop/in-process", "TestZombieLeaderDiesWithTheApp/process-group/jail/leader_killed/helper",
		// A user's daemon: memory_max refused, tasks_max held by
		// RLIMIT_NPROC, and a reload lowers it in place.
		"TestUnheldLimitsRefused", "TestReloadLimitsInPlace/rlimit")
}
