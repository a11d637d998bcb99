package supervisor

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRing(t *testing.T) {
	for _, tc := range []struct {
		cap, add, n int
		want        []string
	}{
		{cap: 3, add: 0, n: 0, want: []string{}},
		{cap: 3, add: 2, n: 0, want: []string{"0", "1"}},
		{cap: 3, add: 2, n: 5, want: []string{"0", "1"}},
		{cap: 3, add: 3, n: 2, want: []string{"1", "2"}},
		{cap: 3, add: 7, n: 0, want: []string{"4", "5", "6"}},
		{cap: 3, add: 7, n: 1, want: []string{"6"}},
		{cap: 1, add: 4, n: 0, want: []string{"3"}},
	} {
		t.Run(fmt.Sprintf("cap%d_add%d_n%d", tc.cap, tc.add, tc.n), func(t *testing.T) {
			r := newRing(tc.cap)
			for i := range tc.add {
				r.add(LogLine{Text: fmt.Sprint(i)}, new(atomic.Uint64), time.Now, func(LogLine) {})
			}
			got := []string{}
			for _, l := range r.last(tc.n) {
				got = append(got, l.Text)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("last(%d) = %q, want %q", tc.n, got, tc.want)
			}
		})
	}
}

// chunks hands a reader its input in pieces, like a pipe.
type chunks struct{ parts []string }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func (c *chunks) Close() error { return nil }

func TestReadLines(t *testing.T) {
	long := strings.Repeat("y", maxLineBytes)
	for _, tc := range []struct {
		name  string
		parts []string
		want  []string
	}{
		{"lines", []string{"a\nb\n"}, []string{"a", "b"}},
		{"split across reads", []string{"he", "llo\nwor", "ld\n"}, []string{"hello", "world"}},
		{"no final newline", []string{"a\nlast"}, []string{"a", "last"}},
		{"crlf and empty lines", []string{"a\r\n\n"}, []string{"a", ""}},
		{"invalid utf-8", []string{"a\xffb\n"}, []string{"a\uFFFDb"}},
		{"over the cap", []string{long + "zzz\nnext\n"}, []string{long + truncatedMark, "next"}},
		{"over the cap, no newline", []string{long, "zzz"}, []string{long + truncatedMark}},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			readLines(&chunks{parts: slices.Clone(tc.parts)}, func(s string) { got = append(got, s) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzReadLines(f *testing.F) {
	f.Add([]byte("a\nb\r\n"), 3)
	f.Add([]byte(strings.Repeat("x", 5000)+"\n"), 100)
	f.Fuzz(func(t *testing.T, in []byte, split int) {
		if split <= 0 {
			split = 1
		}
		var parts []string
		for s := string(in); s != ""; {
			n := min(split, len(s))
			parts = append(parts, s[:n])
			s = s[n:]
		}
		readLines(&chunks{parts: parts}, func(s string) {
			if !utf8.ValidString(s) || strings.ContainsRune(s, '\n') || len(s) > 3*maxLineBytes+len(truncatedMark) {
				t.Fatalf("bad line %q", s)
			}
		})
	})
}

func TestParseStat(t *testing.T) {
	// The 18 fields between pgrp and starttime, as a sleeping process has
	// them: the first is the session.
	const mid = " 1200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
	for _, tc := range []struct {
		in      string
		want    procStat
		wantErr bool
	}{
		{in: "1234 (sleep) S 1200 1234" + mid + "98765 8192 200", want: procStat{state: 'S', ppid: 1200, pgid: 1234, sid: 1200, start: 98765}},
		{in: "77 (a) b) c) R 5 6" + mid + "7", want: procStat{state: 'R', ppid: 5, pgid: 6, sid: 1200, start: 7}},
		{in: "77 (with space) Z 0 0" + mid + "0", want: procStat{state: 'Z', sid: 1200}},
		{in: "77 (x) S 1 2" + mid, wantErr: true},        // no starttime
		{in: "77 (x) S 1 2" + mid + "-3", wantErr: true}, // bad starttime
		{in: "77 (x) SS 1 2" + mid + "3", wantErr: true}, // bad state
		{in: "77 x S 1 2" + mid + "3", wantErr: true},    // no command name
		{in: "77 (x) S -1 2" + mid + "3", wantErr: true}, // bad ppid
		{in: "77 (x) S 1 pg" + mid + "3", wantErr: true}, // bad pgrp
		{in: "77 (x) S", wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := parseStat([]byte(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseStat(%q) = %+v, %v", tc.in, got, err)
		}
	}
	// An exiting process shows -1 for its released process group.
	if _, err := parseStat([]byte("77 (x) S 1 -1" + mid + "3")); !errors.Is(err, errExiting) {
		t.Errorf("parseStat of pgrp -1: %v, want errExiting", err)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (sleep) S 1200 1234 1200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 8192 200"))
	f.Add([]byte("1 ()) S 0 0"))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, err := parseStat(in)
		if err == nil && (st.ppid < 0 || st.pgid < 0) {
			t.Fatalf("parseStat(%q) = %+v", in, st)
		}
	})
}

// TestRingPublishesInItsOrder: an app's two readers add lines at once;
// the lines are published in the order the ring holds them, numbered
// rising, so a follower that has line n has every earlier one.
func TestRingPublishesInItsOrder(t *testing.T) {
	r := newRing(1000)
	var seq atomic.Uint64
	var published []LogLine // appended under the ring's lock
	done := make(chan struct{})
	for _, stream := range []string{"stdout", "stderr"} {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 400 {
				r.add(LogLine{Stream: stream, Text: fmt.Sprint(i)}, &seq, time.Now, func(l LogLine) { published = append(published, l) })
			}
		}()
	}
	<-done
	<-done
	held := r.last(0)
	if len(published) != 800 || !slices.EqualFunc(held, published, func(a, b LogLine) bool { return a == b }) {
		t.Fatalf("published %d lines in an order other than the ring's %d", len(published), len(held))
	}
	for i := 1; i < len(held); i++ {
		if held[i].Seq != held[i-1].Seq+1 || held[i].At.Before(held[i-1].At) {
			t.Fatalf("line %d: seq %d at %v after seq %d at %v", i, held[i].Seq, held[i].At, held[i-1].Seq, held[i-1].At)
		}
	}
}
