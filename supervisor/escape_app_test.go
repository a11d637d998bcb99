package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The apps of escape_test.go: what an adversarial review's probes did to
// their parentage, sessions and process groups, as modes of the test
// binary. SUPTEST_SETSID=1 has the child that forks the next one leave
// the app's session first (a jail app is refused that, and says so).

// escapeChild runs one of those modes.
func escapeChild(mode string) int {
	switch mode {
	case "orphan":
		// Fork a child that forks the grandchild and exits.
		if err := runChild("orphan-child", false); err != nil {
			fmt.Println("error", err)
		}
		fmt.Println("ready")
		sleepForever()
	case "orphan-child":
		if os.Getenv("SUPTEST_SETSID") == "1" {
			if _, err := unix.Setsid(); err != nil {
				fmt.Println("setsid:", err)
			}
		}
		os.Setenv("SUPTEST_PARENT", strconv.Itoa(os.Getpid()))
		if err := runChild("orphan-grandchild", true); err != nil {
			fmt.Println("error", err)
		}
		return 0
	case "orphan-grandchild":
		// Wait until the parent is gone and someone adopted it, then say
		// who, and live on: it would connect to the control socket now.
		parent, _ := strconv.Atoi(os.Getenv("SUPTEST_PARENT"))
		for i := 0; os.Getppid() == parent; i++ {
			if i > 1000 {
				fmt.Println("error: never re-parented")
				return 1
			}
			time.Sleep(10 * time.Millisecond)
		}
		sid, _ := unix.Getsid(0)
		fmt.Println("orphan", os.Getpid(), os.Getppid(), sid)
		sleepForever()
	case "regroup":
		// The main process tries to join the daemon's process group (the
		// review's probe did, and then could not be stopped), forks a
		// child into a process group of its own, and ignores SIGTERM.
		signal.Ignore(syscall.SIGTERM)
		err := unix.Setpgid(0, unix.Getpgrp()) // its own: a no-op
		if pg, e := unix.Getpgid(os.Getppid()); e == nil {
			err = unix.Setpgid(0, pg)
		}
		fmt.Println("join", errnoName(err))
		if err := runChild("regroup-child", false); err != nil {
			fmt.Println("error", err)
		}
		fmt.Println("ready")
		sleepForever()
	case "regroup-child":
		signal.Ignore(syscall.SIGTERM)
		if err := unix.Setpgid(0, 0); err != nil {
			fmt.Println("setpgid:", err)
		}
		fmt.Println("child", os.Getpid())
		sleepForever()
	case "termtree":
		// A child in a process group of its own (or a session, with
		// SUPTEST_SETSID) that says when SIGTERM reaches it.
		if err := runChild("termtree-child", false); err != nil {
			fmt.Println("error", err)
		}
		fmt.Println("ready")
		sleepForever()
	case "termtree-child":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		if os.Getenv("SUPTEST_SETSID") == "1" {
			if _, err := unix.Setsid(); err != nil {
				fmt.Println("setsid:", err)
			}
		} else if err := unix.Setpgid(0, 0); err != nil {
			fmt.Println("setpgid:", err)
		}
		fmt.Println("child", os.Getpid())
		<-term
		fmt.Println("child got SIGTERM")
		return 0
	}
	return 2
}

// runChild starts the test binary in mode with the same output; wait
// says to wait for it.
func runChild(mode string, detach bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), modeEnv+"="+mode)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	if detach {
		return cmd.Process.Release()
	}
	if mode == "orphan-child" {
		return cmd.Wait()
	}
	return nil
}

func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(syscall.Errno); ok {
		return unix.ErrnoName(e)
	}
	return err.Error()
}
