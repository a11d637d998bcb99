package jail

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// pulseClient writes the PulseAudio native protocol itself, as a hostile
// app would: packets of its own making, its tags counted up.
type pulseClient struct {
	fd  int
	b   []byte
	tag uint32
}

func dialPulse(path string) (*pulseClient, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &pulseClient{fd: fd}, nil
}

func (c *pulseClient) u32(v uint32) { c.b = binary.BigEndian.AppendUint32(append(c.b, 'L'), v) }

func (c *pulseClient) prop(k, v string) {
	c.b = append(append(append(c.b, 't'), k...), 0)
	c.u32(uint32(len(v) + 1))
	c.b = append(binary.BigEndian.AppendUint32(append(c.b, 'x'), uint32(len(v)+1)), append([]byte(v), 0)...)
}

// send writes the packet cmd with the values body appends; its tag.
func (c *pulseClient) send(cmd uint32, body func()) (uint32, error) {
	c.b = c.b[:0]
	c.u32(cmd)
	tag := c.tag
	c.u32(tag)
	c.tag++
	body()
	d := make([]byte, 20)
	binary.BigEndian.PutUint32(d, uint32(len(c.b)))
	binary.BigEndian.PutUint32(d[4:], 0xFFFFFFFF)
	_, err := unix.Write(c.fd, append(d, c.b...))
	return tag, err
}

// answer reads the server's frames until the answer to tag: the reply's
// first uint32 (a created stream's channel), or an error for the
// server's error or the connection's end.
func (c *pulseClient) answer(tag uint32) (uint32, error) {
	d := make([]byte, 20)
	for {
		if err := readFull(c.fd, d); err != nil {
			return 0, err
		}
		p := make([]byte, binary.BigEndian.Uint32(d))
		if err := readFull(c.fd, p); err != nil {
			return 0, err
		}
		if binary.BigEndian.Uint32(d[4:]) != 0xFFFFFFFF || len(p) < 10 || binary.BigEndian.Uint32(p[6:]) != tag {
			continue // audio, or what the server sends unasked
		}
		switch cmd := binary.BigEndian.Uint32(p[1:]); {
		case cmd == 0:
			return 0, fmt.Errorf("the server refused tag %d", tag)
		case len(p) >= 15:
			return binary.BigEndian.Uint32(p[11:]), nil
		default:
			return 0, nil
		}
	}
}

// readFull reads b whole from fd. A read on a socket with SO_RCVTIMEO
// is not restarted after a signal (signal(7)), and the Go runtime sends
// its threads SIGURG: EINTR is read again.
func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		b = b[n:]
	}
	return nil
}

// hello authenticates (protocol 35, no shared memory) and names the
// client.
func (c *pulseClient) hello() error {
	if _, err := c.send(8, func() {
		c.u32(35)
		c.b = append(binary.BigEndian.AppendUint32(append(c.b, 'x'), 256), make([]byte, 256)...)
	}); err != nil {
		return err
	}
	_, err := c.send(9, func() { c.b = append(c.b, 'P'); c.prop("application.name", "probe"); c.b = append(c.b, 'N') })
	return err
}

// createStream sends a CREATE_PLAYBACK_STREAM of a sample spec of rate
// and a format whose channel map lists channels names.
func (c *pulseClient) createStream(rate uint32, channels string) (uint32, error) {
	return c.send(3, func() {
		c.b = binary.BigEndian.AppendUint32(append(c.b, 'a', 3, 2), rate)
		c.b = append(c.b, 'm', 2, 1, 2)
		c.u32(0xFFFFFFFF)
		c.b = append(c.b, 'N')
		c.u32(0xFFFFFFFF)
		c.b = append(c.b, '0')
		for range 3 {
			c.u32(0xFFFFFFFF)
		}
		c.u32(c.tag)                                      // the sync group: streams of one are created corked
		c.b = append(c.b, 'v', 2, 0, 1, 0, 0, 0, 1, 0, 0) // both channels at 100%
		c.b = append(c.b, '0', '0', '0', '0', '0', '0', '0', '0', '0', 'P')
		c.prop("media.name", "x")
		c.b = append(c.b, 'N', '0', '0', '0', '0', '0', '0', '0', 'B', 1, 'f', 'B', 1, 'P')
		c.prop("format.sample_format", `"s16le"`)
		c.prop("format.rate", "44100")
		c.prop("format.channels", "2")
		c.prop("format.channel_map", `"`+channels+`"`)
		c.b = append(c.b, 'N')
	})
}

// pulseRaw is the probe action pulse_raw MODE N PATH: a hostile client of
// the server at PATH. It authenticates, names itself and creates a
// playback stream in format mode, whose format's channel map lists N
// channels (pipewire-pulse 0.3 writes them into a 64-entry array on its
// stack). With MODE battr the stream's sample spec has rate 0 and the
// stream's buffer attributes are set at once (pipewire-pulse 0.3 divides
// by the rate). It reports "sent" once the packets are written; what the
// server did is the test's to see.
func pulseRaw(mode string, n int, path string) (string, error) {
	c, err := dialPulse(path)
	if err != nil {
		return "", err
	}
	defer unix.Close(c.fd)
	rate := uint32(44100)
	if mode == "battr" {
		rate = 0
	}
	if err := c.hello(); err != nil {
		return "", err
	}
	if _, err := c.createStream(rate, strings.TrimSuffix(strings.Repeat("aux63,", n), ",")); err != nil {
		return "", err
	}
	if mode == "battr" {
		if _, err := c.send(72, func() {
			c.u32(0)
			for range 4 {
				c.u32(0xFFFFFFFF)
			}
			c.b = append(c.b, '0', '0')
		}); err != nil {
			return "", err
		}
	}
	// Give the server the packets' time, then leave: read what comes
	// until it closes or a second passes.
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
	buf := make([]byte, 4096)
	for {
		if n, err := unix.Read(c.fd, buf); n <= 0 || err != nil {
			break
		}
	}
	return "sent", nil
}

// pulseStreams is the probe action pulse_streams N PATH: a client that
// creates N playback streams on the server at PATH, one after another,
// and after each deletes a channel that is none of them (as if to free
// the stream from a count). It reports how many the server made:
// "made N", or "made K, then: why".
func pulseStreams(n int, path string) (string, error) {
	c, err := dialPulse(path)
	if err != nil {
		return "", err
	}
	defer unix.Close(c.fd)
	if err := c.hello(); err != nil {
		return "", err
	}
	for i := range n {
		tag, err := c.createStream(44100, "front-left,front-right")
		if err == nil {
			_, err = c.answer(tag)
		}
		if err == nil {
			_, err = c.send(4, func() { c.u32(uint32(1_000_000 + i)) })
		}
		if err != nil {
			return fmt.Sprintf("made %d, then: %v", i, err), nil
		}
	}
	return fmt.Sprintf("made %d", n), nil
}

// pulseUploads is the probe action pulse_uploads N SIZE PATH [MODE]: a
// client that puts N samples of SIZE bytes in the sample cache of the
// server at PATH, named probe-0, probe-1 and so on, as libpulse names a
// sample (an upload stream whose name and event.id are the sample's, its
// audio, its finish). MODE tries to take samples off a count:
//   - remove: it removes each sample's name before its finish;
//   - alias: before each upload it sets its client's event.id to the
//     sample's name (UPDATE_CLIENT_PROPLIST), and the upload's own name is
//     "decoy", with no properties (pipewire-pulse 0.3 names a sample by
//     the client's properties under the upload's);
//   - forget: after each finish it sends a REMOVE_SAMPLE of the name with
//     a value too many, which PulseAudio ends the connection for before
//     removing anything, and connects again.
//
// It reports how many the server cached: "cached N", or "cached K, then:
// why".
func pulseUploads(n, size int, path, mode string) (string, error) {
	c, err := dialPulse(path)
	if err != nil {
		return "", err
	}
	defer func() { unix.Close(c.fd) }()
	if err := c.hello(); err != nil {
		return "", err
	}
	chunk := make([]byte, 20+64<<10)
	upload := func(name string) error {
		if mode == "alias" {
			tag, err := c.send(82, func() { // mode replace
				c.u32(2)
				c.b = append(c.b, 'P')
				c.prop("event.id", name)
				c.b = append(c.b, 'N')
			})
			if err == nil {
				_, err = c.answer(tag)
			}
			if err != nil {
				return err
			}
		}
		tag, err := c.send(15, func() {
			if mode == "alias" {
				c.b = append(c.b, 't', 'd', 'e', 'c', 'o', 'y', 0)
			} else {
				c.b = append(append(append(c.b, 't'), name...), 0)
			}
			c.b = binary.BigEndian.AppendUint32(append(c.b, 'a', 3, 2), 44100)
			c.b = append(c.b, 'm', 2, 1, 2)
			c.u32(uint32(size))
			c.b = append(c.b, 'P')
			if mode != "alias" {
				c.prop("event.id", name)
			}
			c.b = append(c.b, 'N')
		})
		if err != nil {
			return err
		}
		channel, err := c.answer(tag)
		if err != nil {
			return err
		}
		if mode == "remove" {
			if _, err := c.send(19, func() { c.b = append(append(append(c.b, 't'), name...), 0) }); err != nil {
				return err
			}
		}
		for left := size; left > 0; {
			m := min(left, len(chunk)-20)
			binary.BigEndian.PutUint32(chunk, uint32(m))
			binary.BigEndian.PutUint32(chunk[4:], channel)
			if _, err := unix.Write(c.fd, chunk[:20+m]); err != nil {
				return err
			}
			left -= m
		}
		if tag, err = c.send(17, func() { c.u32(channel) }); err != nil {
			return err
		}
		_, err = c.answer(tag)
		return err
	}
	for i := range n {
		name := fmt.Sprintf("probe-%d", i)
		if err := upload(name); err != nil {
			return fmt.Sprintf("cached %d, then: %v", i, err), nil
		}
		if mode == "forget" {
			c.send(19, func() {
				c.b = append(append(append(c.b, 't'), name...), 0)
				c.u32(0) // one value too many
			})
			c.answer(c.tag - 1) // the end of the connection, as PulseAudio ends it
			unix.Close(c.fd)
			if c, err = dialPulse(path); err == nil {
				err = c.hello()
			}
			if err != nil {
				return fmt.Sprintf("cached %d, then: connect again: %v", i+1, err), nil
			}
		}
	}
	return fmt.Sprintf("cached %d", n), nil
}

// pulseRemove is the probe action pulse_remove N PATH: a client that
// removes the samples probe-0 to probe-N-1 from the cache of the server
// at PATH. It reports "removed N" once the server answered each.
func pulseRemove(n int, path string) (string, error) {
	c, err := dialPulse(path)
	if err != nil {
		return "", err
	}
	defer unix.Close(c.fd)
	if err := c.hello(); err != nil {
		return "", err
	}
	for i := range n {
		tag, err := c.send(19, func() { c.b = append(append(append(c.b, 't'), fmt.Sprintf("probe-%d", i)...), 0) })
		if err == nil {
			_, err = c.answer(tag)
		}
		if err != nil {
			return fmt.Sprintf("removed %d, then: %v", i, err), nil
		}
	}
	return fmt.Sprintf("removed %d", n), nil
}

// pulsePlays is the probe action pulse_plays N PATH: a client that puts
// a tenth of a second of silence in the sample cache of the server at
// PATH and plays it N times, each once the last was answered, giving
// each answer 3 s. It reports "played N", or "played K, then: why".
func pulsePlays(n int, path string) (string, error) {
	c, err := dialPulse(path)
	if err != nil {
		return "", err
	}
	defer unix.Close(c.fd)
	if err := c.hello(); err != nil {
		return "", err
	}
	const name, size = "probe-play", 17640 // 0.1 s of s16le stereo at 44.1 kHz
	tag, err := c.send(15, func() {
		c.b = append(append(append(c.b, 't'), name...), 0)
		c.b = binary.BigEndian.AppendUint32(append(c.b, 'a', 3, 2), 44100)
		c.b = append(c.b, 'm', 2, 1, 2)
		c.u32(size)
		c.b = append(c.b, 'P')
		c.prop("event.id", name)
		c.b = append(c.b, 'N')
	})
	if err != nil {
		return "", err
	}
	channel, err := c.answer(tag)
	if err != nil {
		return "", err
	}
	block := make([]byte, 20+size)
	binary.BigEndian.PutUint32(block, size)
	binary.BigEndian.PutUint32(block[4:], channel)
	if _, err := unix.Write(c.fd, block); err != nil {
		return "", err
	}
	if tag, err = c.send(17, func() { c.u32(channel) }); err == nil {
		_, err = c.answer(tag)
	}
	if err != nil {
		return "", fmt.Errorf("cache the sample: %w", err)
	}
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 3})
	for i := range n {
		tag, err := c.send(18, func() {
			c.u32(0xFFFFFFFF)
			c.b = append(c.b, 'N')
			c.u32(0x10000)
			c.b = append(append(append(c.b, 't'), name...), 0)
			c.b = append(c.b, 'P', 'N')
		})
		if err == nil {
			_, err = c.answer(tag)
		}
		if err != nil {
			return fmt.Sprintf("played %d, then: %v", i, err), nil
		}
	}
	return fmt.Sprintf("played %d", n), nil
}
