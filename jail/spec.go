package jail

import (
	"fmt"
	"slices"
	"strings"

	"octosup/internal/visible"
	"octosup/jail/helper"
	"octosup/policy"
)

// The jail's data types are package jail/helper's, which holds what both
// launchers share: these aliases keep them jail.Spec, jail.Report, … for
// the daemon's code.
type (
	// Spec is the whole jail of one app process, as Compile produced it:
	// the launchers apply exactly this and nothing else.
	Spec = helper.Spec
	// LandlockSpec is the Landlock part of a Spec.
	LandlockSpec = helper.LandlockSpec
	// PathRule grants Access beneath Path.
	PathRule = helper.PathRule
	// Access is a set of filesystem rights.
	Access = helper.Access
	// Syscall is one seccomp rule.
	Syscall = helper.Syscall
	// ArgCmp compares one syscall argument.
	ArgCmp = helper.ArgCmp
	// CmpOp is how an argument is compared.
	CmpOp = helper.CmpOp
)

// SpecVersion is the version of the Spec's wire form.
const SpecVersion = helper.SpecVersion

// Rights and compares, as in package helper.
const (
	AccessRead     = helper.AccessRead
	AccessList     = helper.AccessList
	AccessExec     = helper.AccessExec
	AccessWrite    = helper.AccessWrite
	AccessTruncate = helper.AccessTruncate
	AccessCreate   = helper.AccessCreate
	AccessRemove   = helper.AccessRemove
	AccessRefer    = helper.AccessRefer
	AccessDevIoctl = helper.AccessDevIoctl
	AccessAll      = helper.AccessAll
	AccessRO       = helper.AccessRO
	AccessRX       = helper.AccessRX
	AccessRW       = helper.AccessRW

	CmpMasked = helper.CmpMasked
	CmpGT     = helper.CmpGT
	CmpNE     = helper.CmpNE
)

// ErrBadSpec is wrapped by every error Spec.Validate and DecodeSpec
// return.
var ErrBadSpec = helper.ErrBadSpec

// Describe renders a spec for a person (octosupctl prints it as it is).
// What comes from the manifest (program, env values, paths) is rendered
// by visible.String, so that a control character in it cannot reach the
// person's terminal nor a newline print a line of the description's own;
// argv is Go-quoted, which is as unambiguous.
func Describe(s Spec) string {
	var b strings.Builder
	describeProcess(&b, s)
	describeFiles(&b, s.Landlock)
	describeReach(&b, s)
	describeSyscalls(&b, s.Seccomp)
	return b.String()
}

// describeProcess renders what the process starts as: its program, argv,
// directory, strictness, descriptors, environment and execs.
func describeProcess(b *strings.Builder, s Spec) {
	fmt.Fprintf(b, "app %s\n", visible.String(s.App))
	fmt.Fprintf(b, "  program  %s\n", visible.String(s.Program))
	fmt.Fprintf(b, "  argv     %q\n", s.Argv)
	fmt.Fprintf(b, "  dir      %s\n", visible.String(s.Dir))
	mode := "best-effort (runs with whatever layers the kernel has)"
	if s.Strict {
		mode = fmt.Sprintf("strict (refused below Landlock ABI %d or without seccomp)", s.Landlock.MinABI)
	}
	fmt.Fprintf(b, "  mode     %s\n", mode)
	fmt.Fprintf(b, "  fds      %v (everything else closed)\n", s.FDs)
	b.WriteString("  env\n")
	for _, kv := range s.Env {
		fmt.Fprintf(b, "    %s\n", visible.String(kv))
	}
	if s.ExecOnce {
		b.WriteString("  exec     the program once; every later execve EPERM (processes: false)\n")
	}
}

// describeFiles renders the files the app may reach: ll's path rules.
func describeFiles(b *strings.Builder, ll LandlockSpec) {
	switch {
	case ll.WriteOnly:
		b.WriteString("  files    read anywhere; write, create and remove only beneath these (policy broad):\n")
		for _, p := range ll.Paths {
			fmt.Fprintf(b, "    %-8s %-40s %s\n", p.Why, p.Path, p.Access)
		}
	case !ll.FS:
		b.WriteString("  files    not narrowed (policy broad)\n")
	default:
		b.WriteString("  files    only these (everything else closed):\n")
		for _, p := range ll.Paths {
			opt := ""
			if p.Optional {
				opt = " (if present)"
			}
			fmt.Fprintf(b, "    %-8s %-40s %s%s\n", p.Why, visible.String(p.Path), p.Access, opt)
		}
	}
}

// describeReach renders what the app may reach besides files: TCP
// ports, processes outside the jail, unix sockets and devices.
func describeReach(b *strings.Builder, s Spec) {
	ll := s.Landlock
	switch {
	case !ll.Net:
		b.WriteString("  tcp      not narrowed by Landlock\n")
	default:
		fmt.Fprintf(b, "  tcp      connect %s, bind %s\n", ports(ll.ConnectTCP), ports(ll.BindTCP))
	}
	if ll.Scope {
		b.WriteString("  scope    no signals to, no abstract sockets of, processes outside the jail\n")
	}
	if ll.UnixSockets {
		b.WriteString("  unix     pathname sockets: only those in its read-write places from Landlock ABI 9; below it every socket it can name\n")
	}
	for _, g := range s.Sockets {
		fmt.Fprintf(b, "  socket   %-10s %s (from %s; %s)\n", g.Name, visible.String(g.Path), g.From, socketHow(g))
	}
	if slices.ContainsFunc(s.Landlock.Paths, func(p PathRule) bool { return p.Why == "gpu" }) {
		b.WriteString("  device   dri        the render nodes read-write with their ioctls (rules \"gpu\"); no card* node\n")
	}
	if slices.ContainsFunc(s.Seccomp, func(r Syscall) bool { return r.Notify && r.Name == "connect" }) {
		b.WriteString("  connect  every connect is the daemon's: unix stream sockets reach only the sockets above, no abstract one\n")
	}
}

// describeSyscalls renders the seccomp rules: the calls refused, and
// those the daemon decides.
func describeSyscalls(b *strings.Builder, rules []Syscall) {
	b.WriteString("  syscalls refused (\"daemon\": the daemon decides each call):\n")
	// Runs of rules with one reason (the socket families, say) make one
	// line: the patterns are in the JSON form for whoever needs them.
	for i := 0; i < len(rules); {
		r := rules[i]
		j := i + 1
		for j < len(rules) && rules[j].Name == r.Name && rules[j].Why == r.Why && rules[j].Errno == r.Errno {
			j++
		}
		detail := describeArgs(r.Args)
		if j-i > 1 {
			detail = fmt.Sprintf(" [%d argument patterns]", j-i)
		}
		answer := r.Errno
		if r.Notify {
			answer = "daemon"
		}
		fmt.Fprintf(b, "    %-18s %-6s %s%s\n", r.Name, answer, r.Why, detail)
		i = j
	}
	if len(rules) > 0 {
		fmt.Fprintf(b, "    %-18s %-6s %s\n", fmt.Sprintf("(numbers > %d)", NewestSyscall), "ENOSYS", "syscalls newer than these rules")
	}
}

func ports(p []uint16) string {
	if len(p) == 0 {
		return "none"
	}
	return fmt.Sprint(p)
}

func describeArgs(args []ArgCmp) string {
	if len(args) == 0 {
		return ""
	}
	parts := make([]string, len(args))
	for i, c := range args {
		switch c.Op {
		case CmpMasked:
			parts[i] = fmt.Sprintf("arg%d&%#x==%#x", c.Index, c.Mask, c.Value)
		case CmpGT:
			parts[i] = fmt.Sprintf("arg%d>%#x", c.Index, c.Value)
		case CmpNE:
			parts[i] = fmt.Sprintf("arg%d!=%#x", c.Index, c.Value)
		}
	}
	return " [" + strings.Join(parts, " ") + "]"
}

// socketHow says how the app gets a socket and what the server sees.
func socketHow(g SocketGrant) string {
	switch g.Via {
	case GrantGuard:
		if g.Name == policy.SocketWayland {
			return "the daemon connects the app's socket; the compositor sees the daemon's pid and uid and gives no security context: every protocol it offers its clients, screen capture and virtual input among them where it has them"
		}
		return "the daemon connects the app's socket; the server sees the daemon's pid and uid"
	case GrantPulseFilter:
		return "the daemon connects the app's socket to its sound filter, which passes on playing, recording and the server's lists (no modules, defaults or devices); the server sees the daemon's pid and uid"
	}
	return g.Via
}
