package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"octosup/control"
)

// The server runs in the test's process: what the test opens and starts
// must show in the daemon's counts.
func TestDebugOpCountsWhatTheProcessHolds(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	ctx := context.Background()
	conn, err := ts.client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	debugOf := func() DebugData {
		t.Helper()
		var d DebugData
		if err := conn.Do(ctx, OpDebug, DebugArgs{GC: true}, &d); err != nil {
			t.Fatalf("debug: %v", err)
		}
		return d
	}
	before := debugOf()
	if before.Goroutines <= 0 || before.Threads <= 0 || before.FDs <= 0 || before.RSSBytes <= 0 || before.HeapBytes == 0 {
		t.Fatalf("debug = %+v: every member must be positive", before)
	}

	const extra = 7
	dir := t.TempDir()
	var files []*os.File
	for i := range extra {
		f, err := os.Create(filepath.Join(dir, string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	release := make(chan struct{})
	parked := make(chan struct{})
	for range extra {
		go func() {
			parked <- struct{}{}
			<-release
		}()
		<-parked
	}
	during := debugOf()
	close(release)
	for _, f := range files {
		f.Close()
	}
	// Other goroutines of the test process come and go (the connection's
	// own): the extra ones must show at least.
	if during.FDs < before.FDs+extra {
		t.Errorf("fds = %d with %d more files open, was %d", during.FDs, extra, before.FDs)
	}
	if during.Goroutines < before.Goroutines+extra {
		t.Errorf("goroutines = %d with %d more parked, was %d", during.Goroutines, extra, before.Goroutines)
	}
}

func TestDebugOpRefusesUnknownArgs(t *testing.T) {
	ts := startServer(t, newFakeApps("a"), nil)
	err := ts.client.Do(context.Background(), OpDebug, map[string]any{"verbose": true}, nil)
	if codeOf(err) != control.CodeBadRequest {
		t.Fatalf("debug {verbose} = %v, want %s", err, control.CodeBadRequest)
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		rss         int64
		threads     int
		wantErrText bool
	}{
		{name: "both", in: "Name:\tx\nVmRSS:\t  1234 kB\nThreads:\t9\n", rss: 1234, threads: 9},
		{name: "no rss (kernel thread)", in: "Name:\tx\nThreads:\t1\n", wantErrText: true},
		{name: "bad number", in: "VmRSS:\tlots kB\nThreads:\t1\n", wantErrText: true},
		{name: "empty", in: "", wantErrText: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rss, threads, err := parseStatus([]byte(tt.in))
			if tt.wantErrText {
				if err == nil {
					t.Fatalf("parseStatus = %d, %d; want an error", rss, threads)
				}
				return
			}
			if err != nil || rss != tt.rss || threads != tt.threads {
				t.Fatalf("parseStatus = %d, %d, %v; want %d, %d", rss, threads, err, tt.rss, tt.threads)
			}
		})
	}
}
