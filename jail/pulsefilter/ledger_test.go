package pulsefilter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// A step of a connection: a packet the app sends (tag and frame), or one
// the server sends.
type step struct {
	app    []byte
	server []byte
}

// create is the app's CREATE_* of cmd with tag.
func create(cmd, tag uint32) step {
	values := stream(props("media.name", "x")...)
	if cmd == cmdCreateUploadStream {
		values = upload(4)
	}
	return step{app: withTag(packet(cmd, values...), tag)}
}

// onChannel is the app's cmd (a delete, a finish) of channel, with tag.
func onChannel(cmd, tag, channel uint32) step {
	return step{app: withTag(packet(cmd, binary.BigEndian.AppendUint32([]byte{tagU32}, channel)...), tag)}
}

// answer is the server's cmd with tag and one uint32 value, v.
func answer(cmd, tag, v uint32) step {
	p := binary.BigEndian.AppendUint32([]byte{tagU32}, cmd)
	p = binary.BigEndian.AppendUint32(append(p, tagU32), tag)
	p = binary.BigEndian.AppendUint32(append(p, tagU32), v)
	return step{server: frame(packetChannel, 0, p)}
}

// run plays steps on c; the app's refusal, if any.
func (c *conn) run(t *testing.T, steps []step) error {
	t.Helper()
	for _, s := range steps {
		if s.app != nil {
			if err := c.filter(context.Background(), io.Discard, bytes.NewReader(s.app), nil); err != nil {
				return err
			}
			continue
		}
		var got bytes.Buffer
		if err := copyBack(&got, bytes.NewReader(s.server), c); err != io.EOF {
			t.Fatalf("copyBack: %v, want io.EOF", err)
		}
		if !bytes.Equal(got.Bytes(), s.server) {
			t.Fatalf("the server's packet reached the app as % x, want % x", got.Bytes(), s.server)
		}
	}
	return nil
}

// series is n steps made by f of 0 to n-1.
func series(n int, f func(i uint32) []step) []step {
	var out []step
	for i := range uint32(n) {
		out = append(out, f(i)...)
	}
	return out
}

// full is MaxStreams playback streams, the i-th made with tag 10i+1
// and answered on channel i, then what f adds for it (tags 10i+2 to
// 10i+9 are its).
func full(f func(i uint32) []step) []step {
	return series(MaxStreams, func(i uint32) []step {
		s := []step{create(cmdCreatePlaybackStream, 10*i+1), answer(cmdReply, 10*i+1, i)}
		if f != nil {
			s = append(s, f(i)...)
		}
		return s
	})
}

// more is n more playback streams, with tags from 10000.
func more(n int) []step {
	return series(n, func(i uint32) []step { return []step{create(cmdCreatePlaybackStream, 10000+i)} })
}

func TestStreamsBounded(t *testing.T) {
	const past = "a stream past the 64"
	for _, tc := range []struct {
		name    string
		steps   []step
		refused string // "" for none
	}{
		{name: "64 streams asked for, then one more", steps: append(series(MaxStreams, func(i uint32) []step {
			return []step{create(cmdCreatePlaybackStream+2*(i%2), i+1)} // playback and record
		}), create(cmdCreateUploadStream, 100)), refused: past},
		{name: "deletes of channels never given free nothing", steps: append(full(func(i uint32) []step {
			return []step{onChannel(cmdDeletePlaybackStream, 10*i+2, 100+i)}
		}), more(1)...), refused: past},
		{name: "deletes of another kind free nothing", steps: append(full(func(i uint32) []step {
			return []step{onChannel(cmdDeleteRecordStream, 10*i+2, i), onChannel(cmdDeleteUploadStream, 10*i+3, i)}
		}), more(1)...), refused: past},
		{name: "deletes of the channels given free them", steps: append(full(func(i uint32) []step {
			return []step{onChannel(cmdDeletePlaybackStream, 10*i+2, i)}
		}), more(MaxStreams)...)},
		{name: "refused creates free their places", steps: append(series(MaxStreams, func(i uint32) []step {
			return []step{create(cmdCreatePlaybackStream, i+1), answer(cmdError, i+1, 3)}
		}), more(MaxStreams)...)},
		{name: "streams the server killed free their places", steps: append(full(func(i uint32) []step {
			return []step{answer(cmdPlaybackStreamKilled, noTag, i)}
		}), more(MaxStreams)...)},
		{name: "a kill of the other kind frees nothing", steps: append(full(func(i uint32) []step {
			return []step{answer(cmdRecordStreamKilled, noTag, i)}
		}), more(1)...), refused: past},
		{name: "an error with the server's own tag frees nothing", steps: append(full(func(i uint32) []step {
			return []step{answer(cmdError, noTag, 3)}
		}), more(1)...), refused: past},
		{name: "finished uploads free their places", steps: append(series(MaxStreams, func(i uint32) []step {
			return []step{create(cmdCreateUploadStream, 10*i+1), answer(cmdReply, 10*i+1, i), onChannel(cmdFinishUploadStream, 10*i+2, i)}
		}), more(MaxStreams)...)},
		{name: "a channel given again: the stream there before had ended", steps: append(series(MaxStreams, func(i uint32) []step {
			return []step{create(cmdCreatePlaybackStream, i+1), answer(cmdReply, i+1, 7)}
		}), more(MaxStreams-1)...)},
		{name: "a channel given again, then one too many", steps: append(series(MaxStreams, func(i uint32) []step {
			return []step{create(cmdCreatePlaybackStream, i+1), answer(cmdReply, i+1, 7)}
		}), more(MaxStreams)...), refused: past},
		{name: "a create's tag not past an earlier one", steps: []step{onChannel(cmdDeletePlaybackStream, 5, 1), create(cmdCreatePlaybackStream, 5)},
			refused: "command 3 with tag 5, not past 5"},
		{name: "a create's tag below an earlier one", steps: []step{onChannel(cmdDeletePlaybackStream, 9, 1), create(cmdCreatePlaybackStream, 5)},
			refused: "command 3 with tag 5, not past 9"},
		{name: "a create with the server's own tag", steps: []step{create(cmdCreatePlaybackStream, noTag)}, refused: "command 3 with tag 4294967295"},
		{name: "a packet with the tag of a create not answered", steps: []step{create(cmdCreatePlaybackStream, 5), onChannel(cmdDeleteRecordStream, 5, 1)},
			refused: "command 6 with tag 5, the tag of a command that waits"},
		{name: "a finish of a playback channel", steps: []step{create(cmdCreatePlaybackStream, 1), answer(cmdReply, 1, 0), onChannel(cmdFinishUploadStream, 2, 0)},
			refused: "a finish of upload channel 0, which the server did not give"},
		{name: "a finish of an upload before its answer", steps: []step{create(cmdCreateUploadStream, 1), onChannel(cmdFinishUploadStream, 2, 0)},
			refused: "a finish of upload channel 0, which the server did not give"},
		{name: "a finish of an upload on the channel given", steps: []step{create(cmdCreateUploadStream, 1), answer(cmdReply, 1, 0), onChannel(cmdFinishUploadStream, 2, 0)}},
		{name: "the tag of an answered create may come again", steps: []step{create(cmdCreatePlaybackStream, 5), answer(cmdReply, 5, 0), onChannel(cmdDeleteRecordStream, 5, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(NewLedger(), unpaced)
			err := c.run(t, tc.steps)
			if tc.refused == "" && err != nil || tc.refused != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("%v; want refused %q", err, tc.refused)
			}
		})
	}
}

// TestStreamsShared: an app's connections share its bound, and a
// connection's end gives its streams back.
func TestStreamsShared(t *testing.T) {
	l := NewLedger()
	a, b := newConn(l, unpaced), newConn(l, unpaced)
	half := func(from uint32) []step {
		return series(MaxStreams/2, func(i uint32) []step { return []step{create(cmdCreatePlaybackStream, from+i)} })
	}
	if err := a.run(t, half(1)); err != nil {
		t.Fatal(err)
	}
	if err := b.run(t, half(1)); err != nil {
		t.Fatal(err)
	}
	if err := b.run(t, more(1)); !errors.Is(err, ErrRefused) {
		t.Fatalf("a stream past the bound of the app's two connections: %v, want refused", err)
	}
	a.streams.close()
	if err := b.run(t, more(MaxStreams/2)); err != nil {
		t.Fatalf("streams in the places a closed connection gave back: %v", err)
	}
}

// uploadAs is the app's CREATE_UPLOAD_STREAM with tag, name and proplist
// (uploadNamed), of length bytes.
func uploadAs(tag uint32, name string, length uint32, proplist []byte) step {
	return step{app: withTag(packet(cmdCreateUploadStream, uploadNamed(name, length, proplist)...), tag)}
}

// removeSample is the app's REMOVE_SAMPLE of name.
func removeSample(tag uint32, name string) step {
	return step{app: withTag(packet(cmdRemoveSample, append(append([]byte{tagString}, name...), 0)...), tag)}
}

// acked is the app's command (its tag the step's) and the server's ack.
func acked(s step) []step {
	return []step{s, answer(cmdReply, binary.BigEndian.Uint32(s.app[descriptorSize+6:]), 0)}
}

// cache is an upload of name (tag), answered on channel, finished (tag+1)
// and acked: a sample cached.
func cache(tag uint32, name string, length, channel uint32) []step {
	return append([]step{uploadAs(tag, name, length, props("event.id", name)), answer(cmdReply, tag, channel)},
		acked(onChannel(cmdFinishUploadStream, tag+1, channel))...)
}

// fill caches n samples a0, a1, ... of MaxSample: MaxCache/MaxSample fill
// the cache.
func fill(n int) []step {
	return series(n, func(i uint32) []step { return cache(2*i+1, "a"+string(rune('0'+i)), MaxSample, i) })
}

func TestSampleCacheBounded(t *testing.T) {
	full := fill(MaxCache / MaxSample)
	const past = "(an app caches 16777216 at most"
	b := func(tag, length uint32) step { return uploadAs(tag, "b", length, props("event.id", "b")) }
	for _, tc := range []struct {
		name    string
		steps   []step
		refused string
	}{
		{name: "full, then one byte more", steps: append(full, b(100, 4)), refused: past},
		{name: "full, then a sample in another's place (counted beside it until finished)", steps: append(full, uploadAs(100, "a0", 4, props("event.id", "a0"))), refused: past},
		{name: "full, then one removed and cached again", steps: slices.Concat(full, acked(removeSample(100, "a0")), cache(101, "a0", 4, 9), []step{b(103, MaxSample-minSampleCost)})},
		{name: "full, then one removed and another cached", steps: slices.Concat(full, acked(removeSample(100, "a1")), []step{b(101, MaxSample)})},
		{name: "a remove the server refuses frees nothing", steps: slices.Concat(full, []step{removeSample(100, "a1"), answer(cmdError, 100, 5), b(101, 4)}), refused: past},
		{name: "a remove not answered frees nothing", steps: slices.Concat(full, []step{removeSample(100, "a1"), b(101, 4)}), refused: past},
		{name: "a name never cached removed frees nothing", steps: slices.Concat(full, acked(removeSample(100, "zz")), []step{b(101, 4)}), refused: past},
		{name: "a packet with the tag of a remove not answered", steps: slices.Concat(full, []step{removeSample(100, "a1"), onChannel(cmdDeleteRecordStream, 100, 0)}),
			refused: "the tag of a command that waits"},
		{name: "a remove with a tag not past an earlier one", steps: slices.Concat(full, []step{removeSample(8, "a1")}), refused: "command 19 with tag 8, not past 8"},
		{name: "removing a sample on its way frees nothing", steps: slices.Concat(fill(3), []step{uploadAs(100, "a3", MaxSample, props("event.id", "a3"))},
			acked(removeSample(101, "a3")), []step{b(102, 4)}), refused: past},
		{name: "an upload deleted before its finish frees its place", steps: slices.Concat(fill(3), []step{uploadAs(100, "a3", MaxSample, props("event.id", "a3")), answer(cmdReply, 100, 9),
			onChannel(cmdDeleteUploadStream, 101, 9), b(102, MaxSample)})},
		{name: "an upload refused by the server frees its place", steps: slices.Concat(fill(3), []step{uploadAs(100, "a3", MaxSample, props("event.id", "a3")), answer(cmdError, 100, 3),
			b(102, MaxSample)})},
		{name: "a finish refused by the server frees its place", steps: slices.Concat(fill(3), []step{uploadAs(100, "a3", MaxSample, props("event.id", "a3")), answer(cmdReply, 100, 9),
			onChannel(cmdFinishUploadStream, 101, 9), answer(cmdError, 101, 3), b(102, MaxSample)})},
		{name: "a finish not yet answered still counts", steps: slices.Concat(fill(3), []step{uploadAs(100, "a3", MaxSample, props("event.id", "a3")), answer(cmdReply, 100, 9),
			onChannel(cmdFinishUploadStream, 101, 9), b(102, 4)}), refused: past},
		{name: "full, then a stream's end frees no sample", steps: slices.Concat(full, []step{onChannel(cmdDeleteUploadStream, 100, 0), b(101, 4)}), refused: past},
		{name: "named by event.id alone, removed by that name", steps: slices.Concat(fill(3), []step{uploadAs(100, "", MaxSample, props("event.id", "e")), answer(cmdReply, 100, 9)},
			acked(onChannel(cmdFinishUploadStream, 101, 9)), acked(removeSample(102, "e")), []step{b(103, MaxSample)})},
		{name: "named by event.id alone, removed by another name", steps: slices.Concat(fill(3), []step{uploadAs(100, "", MaxSample, props("event.id", "e")), answer(cmdReply, 100, 9)},
			acked(onChannel(cmdFinishUploadStream, 101, 9)), acked(removeSample(102, "x")), []step{b(103, 4)}), refused: past},
		{name: "named by media.name alone", steps: append(full, uploadAs(100, "", 4, props("media.name", "m"))), refused: past},
		{name: "tiny samples cost 64 KiB each", steps: append(series(MaxCache/minSampleCost, func(i uint32) []step {
			return cache(2*i+1, fmt.Sprintf("t%d", i), 1, i)
		}), uploadAs(1000, "one-more", 1, props("event.id", "one-more"))), refused: past},
		{name: "a name of 127 bytes", steps: []step{uploadAs(1, strings.Repeat("n", 127), 4, props())}},
		{name: "a name of 128 bytes", steps: []step{uploadAs(1, strings.Repeat("n", 128), 4, props())}, refused: "named with 128 bytes (PulseAudio takes 127 at most)"},
		{name: "event.id before media.name", steps: []step{uploadAs(1, "e", 4, props("media.name", "m", "event.id", "e"))}},
		{name: "a name that is not its event.id", steps: []step{uploadAs(1, "a", 4, props("event.id", "b"))}, refused: `named "a" whose properties name it "b"`},
		{name: "a name that is not its media.name", steps: []step{uploadAs(1, "a", 4, props("media.name", "b"))}, refused: `named "a" whose properties name it "b"`},
		{name: "a name with no properties to disagree", steps: []step{uploadAs(1, "a", 4, props("media.role", "event"))}},
		{name: "no name at all", steps: []step{uploadAs(1, "", 4, props("media.role", "event"))}},
		{name: "an event.id with a NUL inside", steps: []step{uploadAs(1, "", 4, props("event.id", "a\x00b"))}, refused: "event.id is not one string"},
		{name: "a media.name not UTF-8", steps: []step{uploadAs(1, "", 4, props("media.name", "a\xffb"))}, refused: "media.name is not one string"},
		{name: "past the bound of one sample", steps: []step{uploadAs(1, "a", MaxSample+1, props("event.id", "a"))}, refused: "a sample of 4194305 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(NewLedger(), unpaced)
			err := c.run(t, tc.steps)
			if tc.refused == "" && err != nil || tc.refused != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("%v; want refused %q", err, tc.refused)
			}
		})
	}
}

// TestSamplesOutliveConnections: what an app cached stays counted when
// the connection that cached it ends (the server keeps it), as does a
// finish whose answer the end lost; an upload not finished when its
// connection ended does not (the server drops it).
func TestSamplesOutliveConnections(t *testing.T) {
	l := NewLedger()
	for i := range MaxCache / MaxSample {
		c := newConn(l, unpaced)
		err := c.run(t, []step{uploadAs(1, "on-the-way", MaxSample, props("event.id", "on-the-way"))})
		c.streams.close()
		if err != nil {
			t.Fatalf("an upload on a connection of its own, left unfinished, after %d samples: %v", i, err)
		}
		c = newConn(l, unpaced)
		name := string(rune('a' + i))
		// The last finish's answer is lost with its connection: the
		// server may have cached it, so it counts.
		steps := cache(1, name, MaxSample, 0)
		if i == MaxCache/MaxSample-1 {
			steps = steps[:len(steps)-1]
		}
		err = c.run(t, steps)
		c.streams.close()
		if err != nil {
			t.Fatalf("sample %d on a connection of its own: %v", i, err)
		}
	}
	c := newConn(l, unpaced)
	if err := c.run(t, []step{uploadAs(1, "z", 4, props("event.id", "z"))}); !errors.Is(err, ErrRefused) {
		t.Fatalf("a sample past the cache's bound, the others cached on connections now closed: %v, want refused", err)
	}
}

// FuzzCopyBack: whatever the server sends reaches the app as it is (as
// far as it goes, when it is cut inside a frame).
func FuzzCopyBack(f *testing.F) {
	f.Add(answer(cmdReply, 1, 7).server)
	f.Add(append(answer(cmdPlaybackStreamKilled, noTag, 7).server, frame(3, 0, []byte("pcm"))...))
	f.Add(frame(packetChannel, 0, []byte{tagU32, 0, 0}))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newConn(NewLedger(), unpaced)
		s := c.streams
		var got bytes.Buffer
		copyBack(&got, bytes.NewReader(in), c)
		if !bytes.HasPrefix(in, got.Bytes()) {
			t.Fatalf("the app got % x of % x", got.Bytes(), in)
		}
		s.close()
		if s.ledger.streams != 0 {
			t.Fatalf("%d streams counted after the connection's end", s.ledger.streams)
		}
	})
}

// playSample is the app's PLAY_SAMPLE of the sample "bell" with tag.
func playSample(tag uint32) []byte {
	v := []byte{tagU32, 0xFF, 0xFF, 0xFF, 0xFF, tagStringNull, tagU32, 0, 1, 0, 0, tagString, 'b', 'e', 'l', 'l', 0}
	return withTag(packet(cmdPlaySample, append(v, props("media.role", "event")...)...), tag)
}

// TestPlaysBounded: an app starts MaxPlays plays in a window at once; the
// next waits until the oldest leaves the window, then passes, as it was.
func TestPlaysBounded(t *testing.T) {
	const window = 300 * time.Millisecond
	l := newLedger(window)
	c := newConn(l, unpaced)
	var got bytes.Buffer
	var in [][]byte
	for i := range uint32(MaxPlays + 1) {
		in = append(in, playSample(i+1))
	}
	start := time.Now()
	if err := c.filter(context.Background(), &got, bytes.NewReader(bytes.Join(in[:MaxPlays], nil)), nil); err != nil {
		t.Fatal(err)
	}
	first := l.plays[0]
	if err := c.filter(context.Background(), &got, bytes.NewReader(in[MaxPlays]), nil); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(first); waited < window {
		t.Fatalf("play %d passed %s after the first, inside the %s window (%d started at once in %s)", MaxPlays+1, waited, window, MaxPlays, first.Sub(start))
	}
	if want := bytes.Join(in, nil); !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the server got %d bytes, want %d", got.Len(), len(want))
	}
}

// TestPlaysShared: the app's connections share the bound; a play that
// waits ends with Run's context, passing nothing.
func TestPlaysShared(t *testing.T) {
	l := newLedger(time.Hour)
	a, b := newConn(l, unpaced), newConn(l, unpaced)
	var plays [][]byte
	for i := range uint32(MaxPlays) {
		plays = append(plays, playSample(i+1))
	}
	if err := a.filter(context.Background(), io.Discard, bytes.NewReader(bytes.Join(plays, nil)), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var got bytes.Buffer
	go func() { done <- b.filter(ctx, &got, bytes.NewReader(playSample(1)), nil) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || got.Len() != 0 {
		t.Fatalf("a play past the bound on another connection, its context ended: %v, %d bytes passed; want context.Canceled and none", err, got.Len())
	}
}

// uploadSpec is a create_upload_stream's values, named by event.id, in
// the sample spec of format, channels and rate.
func uploadSpec(format, channels byte, rate, length uint32) step {
	b := []byte{tagString, 'e', 0, 'a', format, channels}
	b = binary.BigEndian.AppendUint32(b, rate)
	b = append(b, 'm', 1, 0)
	b = binary.BigEndian.AppendUint32(append(b, tagU32), length)
	return step{app: withTag(packet(cmdCreateUploadStream, append(b, props("event.id", "e")...)...), 1)}
}

// TestUploadDuration: no sample an app uploads plays for longer than
// PlayWindow, so that MaxPlays bounds what of its own plays at once.
func TestUploadDuration(t *testing.T) {
	for _, tc := range []struct {
		name    string
		up      step
		refused string
	}{
		{"30 s of s16le stereo at 44.1 kHz? no: 4 MiB is 23 s", uploadSpec(3, 2, 44100, MaxSample), ""},
		{"30 s of u8 mono at 8 kHz", uploadSpec(0, 1, 8000, 240000), ""},
		{"30 s and a byte", uploadSpec(0, 1, 8000, 240001), "plays for 30s (the filter passes 30s at most"},
		{"4 MiB of u8 mono at 8 kHz", uploadSpec(0, 1, 8000, MaxSample), "plays for 524s"},
		{"4 MiB at 1 Hz", uploadSpec(3, 2, 1, MaxSample), "plays for 1048576s"},
		{"rate 0", uploadSpec(3, 2, 0, 4), "without a sample spec that gives it a duration"},
		{"no channels", uploadSpec(3, 0, 44100, 4), "without a sample spec that gives it a duration"},
		{"a format past the known", uploadSpec(13, 2, 44100, 4), "without a sample spec that gives it a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(NewLedger(), unpaced)
			err := c.run(t, []step{tc.up})
			if tc.refused == "" && err != nil || tc.refused != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("%v; want refused %q", err, tc.refused)
			}
		})
	}
}

// TestSamplesPlayingStayCounted: a sample removed or replaced while a
// play may still hold it stays counted for a window; with no play in
// the window before, its place is free at once.
func TestSamplesPlayingStayCounted(t *testing.T) {
	full, three := fill(MaxCache/MaxSample), fill(3)
	const past = "(an app caches 16777216 at most"
	b := func(tag, length uint32) step { return uploadAs(tag, "b", length, props("event.id", "b")) }
	for _, tc := range []struct {
		name    string
		start   []step
		played  bool
		then    []step
		refused string
	}{
		{name: "removed, no play", start: full, then: slices.Concat(acked(removeSample(100, "a1")), []step{b(101, MaxSample)})},
		{name: "removed after a play", start: full, played: true, then: slices.Concat(acked(removeSample(100, "a1")), []step{b(101, MaxSample)}), refused: past},
		{name: "replaced, no play", start: three, then: slices.Concat(cache(100, "a0", 4, 9), []step{b(102, MaxSample)})},
		{name: "replaced after a play", start: three, played: true, then: slices.Concat(cache(100, "a0", 4, 9), []step{b(102, MaxSample)}), refused: past},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger()
			c := newConn(l, unpaced)
			if err := c.run(t, tc.start); err != nil {
				t.Fatal(err)
			}
			if tc.played {
				if err := l.play(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			err := c.run(t, tc.then)
			if tc.refused == "" && err != nil || tc.refused != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("%v; want refused %q", err, tc.refused)
			}
		})
	}
}
