// Command hubping is the app the benchmarks in bench/ start. It writes one
// byte to its hub (fd 3), then one byte to the FIFO named by its first
// argument when there is one, and then blocks reading the hub. When the
// hub closes (a daemon without a peer link closes its end once the app
// runs) it waits for a signal: its life is the supervisor's to end.
//
// The FIFO is how a benchmark sees the app's first byte when the daemon,
// not the benchmark, holds the other end of the hub: it is a file, so a
// jail with network none (no socket()) and processes false still lets the
// app open it from an rw external directory.
//
// It uses raw system calls only: what it costs to start is the Go
// runtime's start and nothing else.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const hubFD = 3

func main() {
	if err := ping(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "hubping: %v\n", err)
		os.Exit(2)
	}
	var buf [512]byte
	for {
		n, err := unix.Read(hubFD, buf[:])
		if err == unix.EINTR {
			continue
		}
		if n <= 0 {
			break
		}
	}
	for {
		// EINTR (the Go runtime's own signals) only: the app ends by a
		// signal whose default action ends it.
		_ = unix.Pause()
	}
}

func ping(args []string) error {
	for {
		_, err := unix.Write(hubFD, []byte{'!'})
		switch err {
		case nil, unix.EPIPE, unix.ECONNRESET:
			// A closed hub is not the benchmark's business: the FIFO is.
		case unix.EINTR:
			continue
		case unix.EBADF:
			return fmt.Errorf("fd %d is not a hub (%v): start me with a socket as fd 3", hubFD, err)
		default:
			return fmt.Errorf("write the hub: %w", err)
		}
		break
	}
	if len(args) == 0 {
		return nil
	}
	fd, err := unix.Open(args[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the FIFO %s: %w", args[0], err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte{'!'}); err != nil {
		return fmt.Errorf("write the FIFO %s: %w", args[0], err)
	}
	return nil
}
