package daemon

import (
	"context"
	"testing"
)

// TestPublishedGoesBySeq: an answer waits for the event of its own move,
// by the move's number. The old wait went by Since: a move at the same
// instant as the last one published (a coarse clock), or after the clock
// stepped back, counted as published at once, and the answer could pass
// its event; and after 5 s it went out anyway.
func TestPublishedGoesBySeq(t *testing.T) {
	var p published
	done, cancel := context.WithCancel(context.Background())
	cancel()
	p.note("a", 1)
	if !p.wait(done, "a", 1) {
		t.Fatal("move 1 was published")
	}
	if p.wait(done, "a", 2) {
		t.Fatal("move 2 counted as published before its event was")
	}
	if p.wait(done, "b", 1) {
		t.Fatal("another app's move counted as published")
	}
	waited := make(chan bool)
	go func() { waited <- p.wait(context.Background(), "a", 3) }()
	p.note("a", 2)
	p.note("a", 3)
	if !<-waited {
		t.Fatal("move 3's wait did not end with its event")
	}
	go func() { waited <- p.wait(context.Background(), "a", 9) }()
	p.end()
	if <-waited {
		t.Fatal("a wait past the end of the events said published")
	}
}
