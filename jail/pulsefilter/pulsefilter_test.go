package pulsefilter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
)

// unpaced is a bound on unanswered commands that a test with no server
// to answer them never reaches.
const unpaced = math.MaxInt

// packet is a control frame: the descriptor, then the command and tag as
// tagstruct uint32s, then rest.
func packet(cmd uint32, rest ...byte) []byte {
	p := []byte{tagU32, 0, 0, 0, 0, tagU32, 0, 0, 0, 7}
	binary.BigEndian.PutUint32(p[1:], cmd)
	p = append(p, rest...)
	return frame(packetChannel, 0, p)
}

// withTag is the packet frame f with the tag tag.
func withTag(f []byte, tag uint32) []byte {
	f = slices.Clone(f)
	binary.BigEndian.PutUint32(f[descriptorSize+6:], tag)
	return f
}

// filter runs a connection's filter with a Ledger of its own.
func filter(w io.Writer, r io.Reader, dropped func(string)) error {
	c := newConn(NewLedger(), unpaced)
	return c.filter(context.Background(), w, r, dropped)
}

func frame(channel, flags uint32, payload []byte) []byte {
	d := make([]byte, descriptorSize, descriptorSize+len(payload))
	binary.BigEndian.PutUint32(d[0:], uint32(len(payload)))
	binary.BigEndian.PutUint32(d[4:], channel)
	binary.BigEndian.PutUint32(d[16:], flags)
	return append(d, payload...)
}

// auth is an AUTH offering shm and memfd (version 35), with a cookie.
func auth(flags byte) []byte {
	cookie := bytes.Repeat([]byte{0xAB}, 256)
	rest := append([]byte{tagU32, flags, 0, 0, 35, 'x', 0, 0, 1, 0}, cookie...)
	return packet(cmdAuth, rest...)
}

// props is a property list of key, value pairs (values as strings, NUL
// ended as libpulse sets them).
func props(kv ...string) []byte {
	p := []byte{tagProplist}
	for i := 0; i < len(kv); i += 2 {
		v := append([]byte(kv[i+1]), 0)
		p = append(append(append(p, tagString), kv[i]...), 0)
		p = binary.BigEndian.AppendUint32(append(p, tagU32), uint32(len(v)))
		p = append(binary.BigEndian.AppendUint32(append(p, tagArbitrary), uint32(len(v))), v...)
	}
	return append(p, tagStringNull)
}

// stream is the values of a create_playback_stream before and after its
// property list, shortened: a name, a sample spec, a channel map, a
// volume, booleans.
func stream(proplist ...byte) []byte {
	b := []byte{'t', 's', 0, 'a', 3, 2, 0, 0, 0xAC, 0x44, 'm', 2, 1, 2, 'v', 2, 0, 1, 0, 0, 0, 1, 0, 0, '1', '0', 'N'}
	return append(append(b, proplist...), 'U', 0, 0, 0, 0, 0, 0, 0, 1)
}

// upload is a create_upload_stream's values as libpulse sends them: a
// name (its event.id), a sample spec, a channel map, the length,
// properties.
func upload(length uint32) []byte { return uploadNamed("bell", length, props("event.id", "bell")) }

// uploadNamed is a create_upload_stream's values with the name value
// name ("" for a null string) and the property list proplist (none when
// nil).
func uploadNamed(name string, length uint32, proplist []byte) []byte {
	b := []byte{tagStringNull}
	if name != "" {
		b = append(append([]byte{tagString}, name...), 0)
	}
	b = append(b, 'a', 3, 2, 0, 0, 0xAC, 0x44, 'm', 2, 1, 2)
	b = binary.BigEndian.AppendUint32(append(b, tagU32), length)
	return append(b, proplist...)
}

// chmap is a format's channel map of n names, as a JSON string.
func chmap(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = "aux" + strconv.Itoa(i)
	}
	return `"` + strings.Join(names, ",") + `"`
}

// rateless is stream's values with the sample spec's rate 0, as a
// client that gives formats sends it.
func rateless(b []byte) []byte {
	b = slices.Clone(b)
	copy(b[6:10], []byte{0, 0, 0, 0})
	return b
}

func TestFilter(t *testing.T) {
	noEnd := props("media.name", "x")
	noEnd = noEnd[:len(noEnd)-1]
	audio := frame(0, 0, bytes.Repeat([]byte{1, 2, 3}, 5000))
	play := packet(3, stream(props("media.name", "a tune", "media.role", "music")...)...)
	for _, tc := range []struct {
		name    string
		in      [][]byte
		want    [][]byte // what the server gets
		refused string   // in the error; "" for none
		dropped []string // the properties left out
	}{
		{name: "a session: auth, a stream, its audio", in: [][]byte{auth(offerShm | offerMemfd), withTag(play, 8), audio},
			want: [][]byte{auth(0), withTag(play, 8), audio}},
		{name: "auth without the offer is as it was", in: [][]byte{auth(0)}, want: [][]byte{auth(0)}},
		{name: "auth keeps the version's other bits", in: [][]byte{auth(0xFF)}, want: [][]byte{auth(0x3F)}},
		{name: "a stream's properties: a client's pass, filter.apply and a PipeWire pointer do not",
			in:      [][]byte{packet(3, stream(props("media.name", "x", "filter.apply", "ladspa-sink", "filter.apply.ladspa-sink.parameters", "plugin=/e.so", "adapt.follower.node", "pointer:0x41")...)...)},
			want:    [][]byte{packet(3, stream(props("media.name", "x")...)...)},
			dropped: []string{"filter.apply", "filter.apply.ladspa-sink.parameters", "adapt.follower.node"}},
		{name: "a client's properties", in: [][]byte{packet(82, append([]byte{tagU32, 0, 0, 0, 1}, props("application.name", "a", "filter.want", "echo-cancel")...)...)},
			want:    [][]byte{packet(82, append([]byte{tagU32, 0, 0, 0, 1}, props("application.name", "a")...)...)},
			dropped: []string{"filter.want"}},
		{name: "a client's properties name no sample", in: [][]byte{packet(82, append([]byte{tagU32, 0, 0, 0, 1}, props("application.name", "a", "event.id", "alias", "media.name", "m")...)...)},
			want: [][]byte{packet(82, append([]byte{tagU32, 0, 0, 0, 1}, props("application.name", "a")...)...)}},
		{name: "nor do those it names itself with", in: [][]byte{packet(9, props("application.name", "a", "event.id", "alias", "filter.want", "x")...)},
			want: [][]byte{packet(9, props("application.name", "a")...)}, dropped: []string{"filter.want"}},
		{name: "a format's properties", in: [][]byte{packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.rate", "48000", "node.target", "x")...)...)},
			want:    [][]byte{packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.rate", "48000")...)...)},
			dropped: []string{"node.target"}},
		{name: "a client's property of 1 KiB passes, one longer does not",
			in:      [][]byte{packet(9, props("application.name", strings.Repeat("a", MaxValue-1), "media.title", strings.Repeat("t", MaxValue))...)},
			want:    [][]byte{packet(9, props("application.name", strings.Repeat("a", MaxValue-1))...)},
			dropped: []string{"media.title"}},
		{name: "a value of no known type", in: [][]byte{packet(3, 'z', 0)}, refused: `value of type 'z'`},
		{name: "a string with no end", in: [][]byte{packet(9, 't', 'a', 'b')}, refused: "string has no end"},
		{name: "a property list with no end", in: [][]byte{packet(9, noEnd...)}, refused: "property list with no end"},
		{name: "a property whose length is not its value's", in: [][]byte{packet(9, 'P', 't', 'k', 0, tagU32, 0, 0, 0, 9, tagArbitrary, 0, 0, 0, 1, 'v', tagStringNull)},
			refused: "whose length is not its value's"},
		{name: "an arbitrary value past the packet", in: [][]byte{packet(9, tagArbitrary, 0xFF, 0, 0, 0, 1)}, refused: "arbitrary value is cut short"},
		{name: "a packet past the filter's bound", in: [][]byte{frame(packetChannel, 0, make([]byte, maxPacket+1))}, refused: "the filter reads"},
		{name: "an upload of a sample of 4 MiB", in: [][]byte{packet(15, upload(MaxSample)...)}, want: [][]byte{packet(15, upload(MaxSample)...)}},
		{name: "an upload past 4 MiB", in: [][]byte{packet(15, upload(MaxSample+1)...)}, refused: "a sample of 4194305 bytes"},
		{name: "an upload without its length", in: [][]byte{packet(15, 't', 's', 0, 'a', 3, 2, 0, 0, 0xAC, 0x44)}, refused: "without its length"},
		{name: "a format's channel map of 32", in: [][]byte{packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.channels", "32", "format.channel_map", chmap(32))...)...)},
			want: [][]byte{packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.channels", "32", "format.channel_map", chmap(32))...)...)}},
		{name: "a format's channel map of 33", in: [][]byte{packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.channel_map", chmap(33))...)...)},
			refused: "a channel map of 33 channels"},
		{name: "a format of 300 channels", in: [][]byte{packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.channels", "300")...)...)},
			refused: `format.channels "300"`},
		{name: "buffer attributes after a stream of a rate", in: [][]byte{packet(3, stream(props("media.name", "x")...)...), withTag(packet(72, tagU32, 0, 0, 0, 0), 8)},
			want: [][]byte{packet(3, stream(props("media.name", "x")...)...), withTag(packet(72, tagU32, 0, 0, 0, 0), 8)}},
		{name: "buffer attributes after a stream of rate 0", in: [][]byte{packet(3, rateless(stream(props("media.name", "x")...))...), withTag(packet(73, tagU32, 0, 0, 0, 0), 8)},
			want: [][]byte{packet(3, rateless(stream(props("media.name", "x")...))...)}, refused: "a stream of rate 0"},
		{name: "load_module", in: [][]byte{auth(0), packet(51, []byte("module-ladspa-sink")...)}, want: [][]byte{auth(0)},
			refused: "command 51 (load_module)"},
		{name: "exit", in: [][]byte{packet(7)}, refused: "command 7 (exit)"},
		{name: "extension", in: [][]byte{packet(87)}, refused: "(extension)"},
		{name: "send_object_message", in: [][]byte{packet(104)}, refused: "(send_object_message)"},
		{name: "a server's command", in: [][]byte{packet(61)}, refused: "command 61 (not one a client sends)"},
		{name: "past the last command", in: [][]byte{packet(1 << 31)}, refused: "command 2147483648"},
		{name: "a packet shorter than its head", in: [][]byte{frame(packetChannel, 0, []byte{tagU32, 0, 0, 0, 3})},
			refused: "does not begin with its command and tag"},
		{name: "a command of another type", in: [][]byte{frame(packetChannel, 0, []byte{'t', 0, 0, 0, 3, tagU32, 0, 0, 0, 1})},
			refused: "does not begin with its command and tag"},
		{name: "an auth cut before its version", in: [][]byte{packet(cmdAuth, tagU32, 0x80)}, refused: "AUTH without its version"},
		{name: "shared memory", in: [][]byte{frame(0, 0x80000000, nil)}, refused: "shared memory"},
		{name: "a shm release", in: [][]byte{frame(packetChannel, 0x40000000, nil)}, refused: "shared memory"},
		{name: "over the server's cap", in: [][]byte{append(frame(0, 0, nil)[:0], 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)},
			refused: "a frame of 16777217 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got bytes.Buffer
			var dropped []string
			err := filter(&got, bytes.NewReader(bytes.Join(tc.in, nil)), func(k string) { dropped = append(dropped, k) })
			if tc.refused == "" && err != nil || tc.refused != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("Filter: %v; want refused %q", err, tc.refused)
			}
			if want := bytes.Join(tc.want, nil); !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("the server got %d bytes, want %d:\n% x\nwant\n% x", got.Len(), len(want), got.Bytes(), want)
			}
			if !slices.Equal(dropped, tc.dropped) {
				t.Fatalf("dropped %q, want %q", dropped, tc.dropped)
			}
		})
	}
}

// TestFilterCutShort: a stream that ends inside a frame is an error, not
// a clean end.
func TestFilterCutShort(t *testing.T) {
	whole := auth(0)
	for _, n := range []int{1, descriptorSize - 1, descriptorSize + 3, len(whole) - 1} {
		if err := filter(io.Discard, bytes.NewReader(whole[:n]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

// TestRun: the server's bytes reach the app as they are, a refused
// command closes both connections, and Run returns why.
func TestRun(t *testing.T) {
	app, appEnd := net.Pipe()
	server, serverEnd := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), appEnd, serverEnd, nil, nil) }()
	go app.Write(auth(offerShm))
	got := make([]byte, len(auth(0)))
	if _, err := io.ReadFull(server, got); err != nil || !bytes.Equal(got, auth(0)) {
		t.Fatalf("server read %v: % x", err, got)
	}
	reply := packet(2, tagU32, 0, 0, 0, 35)
	go server.Write(reply)
	back := make([]byte, len(reply))
	if _, err := io.ReadFull(app, back); err != nil || !bytes.Equal(back, reply) {
		t.Fatalf("app read %v: % x", err, back)
	}
	go app.Write(packet(51))
	if err := <-done; !errors.Is(err, ErrRefused) {
		t.Fatalf("Run: %v, want ErrRefused", err)
	}
	if _, err := server.Read(make([]byte, 1)); err == nil {
		t.Error("the server's connection is still open")
	}
	if _, err := app.Read(make([]byte, 1)); err == nil {
		t.Error("the app's connection is still open")
	}
}

// TestRunUnanswered: once MaxUnanswered of the app's commands wait for
// their answers, the filter passes no more (an app that never reads the
// answers would have the server queue them without end); audio is not
// counted; the server's answers let the rest through.
func TestRunUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app, appEnd := net.Pipe()
		server, serverEnd := net.Pipe()
		defer app.Close()
		defer server.Close()
		go Run(t.Context(), appEnd, serverEnd, nil, nil)

		const commands, audioFrames = 100, 50
		go func() {
			for i := range uint32(commands) {
				if i == MaxUnanswered-1 {
					for range audioFrames {
						if _, err := app.Write(frame(0, 0, []byte("pcm"))); err != nil {
							return
						}
					}
				}
				if _, err := app.Write(withTag(packet(28), i)); err != nil { // get_client_info_list
					return
				}
			}
		}()
		// The fake server reads what the filter passes; it answers only
		// what the test has it answer.
		tags := make(chan uint32, commands)
		audio := make(chan struct{}, audioFrames)
		go func() {
			var d [descriptorSize]byte
			for {
				if _, err := io.ReadFull(server, d[:]); err != nil {
					return
				}
				p := make([]byte, binary.BigEndian.Uint32(d[0:]))
				if _, err := io.ReadFull(server, p); err != nil {
					return
				}
				if binary.BigEndian.Uint32(d[4:]) != packetChannel {
					audio <- struct{}{}
					continue
				}
				tags <- binary.BigEndian.Uint32(p[6:])
			}
		}()
		replies := make(chan struct{}, commands)
		go func() {
			for {
				var d [descriptorSize]byte
				if _, err := io.ReadFull(app, d[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, app, int64(binary.BigEndian.Uint32(d[0:]))); err != nil {
					return
				}
				replies <- struct{}{}
			}
		}()

		synctest.Wait()
		if len(tags) != MaxUnanswered || len(audio) != audioFrames {
			t.Fatalf("with none answered the server got %d commands and %d audio frames, want %d and %d", len(tags), len(audio), MaxUnanswered, audioFrames)
		}
		for range commands {
			if _, err := server.Write(answer(cmdReply, <-tags, 0).server); err != nil {
				t.Fatalf("the server's answer: %v", err)
			}
		}
		synctest.Wait()
		if len(replies) != commands || len(tags) != 0 {
			t.Fatalf("the app got %d answers of %d, %d commands left unanswered", len(replies), commands, len(tags))
		}
	})
}

// TestRunContext: Run ends with ctx, closing both.
func TestRunContext(t *testing.T) {
	_, appEnd := net.Pipe()
	_, serverEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, appEnd, serverEnd, nil, nil) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

// FuzzFilter: whatever the app sends, what the server gets is what the
// filter passes on unchanged (filtering it again changes nothing), and
// every property in it is a client's.
func FuzzFilter(f *testing.F) {
	f.Add(bytes.Join([][]byte{auth(0xC0), packet(3, stream(props("media.name", "x", "filter.apply", "y")...)...), frame(0, 0, []byte("pcm"))}, nil))
	f.Add(packet(51))
	f.Add(packet(3, append([]byte{tagFormatInfo, tagU8, 1}, props("format.rate", "1", "a.b", "c")...)...))
	f.Add(frame(packetChannel, 0, []byte{tagU32}))
	f.Fuzz(func(t *testing.T, in []byte) {
		var once, twice bytes.Buffer
		err1 := filter(&once, bytes.NewReader(in), nil)
		err2 := filter(&twice, bytes.NewReader(once.Bytes()), func(k string) { t.Fatalf("passed on property %q", k) })
		// A stream cut inside an audio block is passed on as far as it
		// goes, and is cut the second time too.
		if err1 == nil && err2 != nil || !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatalf("the filtered stream filters differently (%v, then %v):\n% x\n% x", err1, err2, once.Bytes(), twice.Bytes())
		}
	})
}
