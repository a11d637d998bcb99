package jail

// HelperArg is argv[1] of the daemon's own binary re-executed as the jail
// helper. Nothing else is on argv: the spec comes on an inherited pipe.
const HelperArg = "__octosup_jail_helper"

// IsHelper reports whether args (os.Args) ask for the helper mode. main
// calls it before anything else and, if so, RunHelper.
func IsHelper(args []string) bool { return len(args) == 2 && args[1] == HelperArg }

// RunHelper is the helper's whole life: it reads the spec, restricts
// itself and execs the app. It returns only on failure, with the exit code.
func RunHelper() int {
	return 70 // implemented by the jail issue
}
