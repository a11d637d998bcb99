// Command clock is octosup's smallest demo app: it prints the time once a
// second until it is told to stop. It uses no hub (its manifest entry
// grants no service), so it shows the supervisor and the jail alone:
// its output lands in `octosupctl logs clock`, and `kill -9` of it shows
// the stopped state.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx))
}

func run(ctx context.Context) int {
	fmt.Printf("clock %s started (pid %d)\n", os.Getenv("OCTOSUP_APP_ID"), os.Getpid())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("clock: stopping")
			return 0
		case now := <-tick.C:
			fmt.Println(now.Format(time.TimeOnly))
		}
	}
}
