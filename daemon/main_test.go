package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"octosup/jail"
)

// The test binary plays more parts, chosen by the environment before any
// test runs: the jail helper (the supervisor re-executes the daemon's
// binary), a control client (of another uid, or outside every app), the
// apps of the tests, the child that the race app forks
// (peer_race_test.go), and a whole daemon for the tests that need a
// process of its own (socket activation).
func TestMain(m *testing.M) {
	if jail.IsHelper(os.Args) {
		os.Exit(jail.RunHelper())
	}
	if path := os.Getenv("OCTOSUP_TEST_DIAL"); path != "" {
		os.Exit(dialAndPrint(path))
	}
	if path := os.Getenv("DAEMON_TEST_CONNECT"); path != "" {
		os.Exit(connectChild(path))
	}
	if os.Getenv("DAEMON_TEST_RACEAPP") != "" {
		os.Exit(raceApp())
	}
	if stage := os.Getenv("DAEMON_TEST_ORPHAN"); stage != "" {
		os.Exit(orphanApp(stage))
	}
	if os.Getenv("DAEMON_TEST_PROBE") == "1" {
		os.Exit(probeApp())
	}
	if os.Getenv("DAEMON_TEST_GRANTAPP") == "1" {
		os.Exit(grantApp())
	}
	if os.Getenv("DAEMON_TEST_NETAPP") == "1" {
		os.Exit(netApp())
	}
	if os.Getenv("DAEMON_TEST_PINGAPP") == "1" {
		os.Exit(pingApp())
	}
	if os.Getenv("DAEMON_TEST_HUBAPP") == "1" {
		os.Exit(hubApp())
	}
	if os.Getenv("DAEMON_TEST_HUBAPP") == "golden" {
		os.Exit(goldenNotesApp())
	}
	if os.Getenv("DAEMON_TEST_CLOCK") == "1" {
		os.Exit(goldenClockApp())
	}
	if os.Getenv("DAEMON_TEST_HUBAPP") == "flood" {
		os.Exit(floodApp())
	}
	if os.Getenv("OCTOSUP_TEST_DAEMON") == "1" {
		os.Exit(runTestDaemon())
	}
	goleak.VerifyTestMain(m)
}

// dialAndPrint connects to the control socket, asks for status and prints
// the first line the daemon sends.
func dialAndPrint(path string) int {
	nc, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return 1
	}
	defer nc.Close()
	fmt.Fprintln(nc, `{"id":1,"op":"status"}`)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "read:", err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// runTestDaemon is octosupd run --config $OCTOSUP_TEST_MANIFEST.
func runTestDaemon() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log, err := NewLogger(os.Stderr, "debug")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := Run(ctx, Config{ManifestPath: os.Getenv("OCTOSUP_TEST_MANIFEST"), Log: log, StopGrace: time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, "octosupd:", err)
		return 1
	}
	return 0
}
