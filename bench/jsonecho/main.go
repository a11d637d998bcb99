// Command jsonecho is the floor of the bench's tool-call and request
// sections. Run without arguments it writes back every line it reads on
// fd 3, byte for byte, one write(2) per line, and exits when fd 3 reaches
// end-of-file. The bench writes it the same JSON lines a kernel writes to
// the daemon, so what the daemon adds to a round trip is the difference.
//
// Run as "jsonecho relay" it stands where the daemon stands: every line
// read on fd 3 is written to fd 4 and every line read on fd 4 to fd 3
// (one write each), with an echo behind fd 4. A round trip through it
// crosses four processes' sockets, as a tool call does (kernel, daemon,
// app, daemon, kernel), with no work done in the middle: the floor of the
// path's shape.
//
// It reads and writes as the bench's tool app (bench/toolapp) does its
// hub: an os.File on the Go netpoller, the way a Go program usually does
// socket I/O. It decodes nothing: the floor is the kernel's sockets and
// the Go runtime's wake-ups.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 1:
		err = echo()
	case len(os.Args) == 2 && os.Args[1] == "relay":
		err = relay()
	default:
		err = fmt.Errorf("usage: jsonecho [relay] (with a socket as fd 3, and as fd 4 for relay)")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "jsonecho: %v\n", err)
		os.Exit(2)
	}
}

// socket is fd as an os.File on the netpoller.
func socket(fd int) (*os.File, error) {
	// Non-blocking, so that os.NewFile puts it on the netpoller.
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("fd %d is not open (%v): start me with a socket as fd %d", fd, err, fd)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("fd %d", fd)), nil
}

func echo() error {
	f, err := socket(3)
	if err != nil {
		return err
	}
	return copyLines(f, f)
}

func relay() error {
	kernel, err := socket(3)
	if err != nil {
		return err
	}
	app, err := socket(4)
	if err != nil {
		return err
	}
	back := make(chan error, 1)
	go func() { back <- copyLines(kernel, app) }()
	err = copyLines(app, kernel)
	// fd 3's end: the echo behind fd 4 sees end-of-file, exits, and the
	// copy back ends.
	app.Close()
	if berr := <-back; err == nil && !errors.Is(berr, os.ErrClosed) {
		err = berr
	}
	return err
}

// copyLines writes each line read from r to w, one write per line, until
// r's end-of-file.
func copyLines(w io.Writer, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, bufio.ErrBufferFull):
			return fmt.Errorf("a line over %d bytes: this echo is for short JSON lines", br.Size())
		case err != nil:
			return fmt.Errorf("read: %w", err)
		}
		if _, err := w.Write(line); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
}
