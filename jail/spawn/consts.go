package spawn

// Arg is argv[1] of the helper. Nothing else is on argv (other processes
// can read a command line): the input comes on an inherited descriptor.
const Arg = "__octosup_jail_helper"

// The helper's descriptors besides 0–3, and its exit code when it could
// not run the app (the reason is on the status pipe).
const (
	StatusFD = 4
	InputFD  = 5
	Exit     = 127
)

// stepNoCgo is StepNoCgo, for nocgo.go.
const stepNoCgo = 19

// IsHelper reports whether args (os.Args) ask for the helper.
func IsHelper(args []string) bool { return len(args) == 2 && args[1] == Arg }

// Step is where the sequence stopped (spawn.h's OCS_*).
type Step int
