package jail

import (
	"encoding/binary"
	"strings"

	"golang.org/x/sys/unix"
)

// pulseRaw is the probe action pulse_raw MODE N PATH: a client that
// writes the PulseAudio native protocol itself, as a hostile app would,
// to the server at PATH. It authenticates, names itself and creates a
// playback stream in format mode, whose format's channel map lists N
// channels (pipewire-pulse 0.3 writes them into a 64-entry array on its
// stack). With MODE battr the stream's sample spec has rate 0 and the
// stream's buffer attributes are set at once (pipewire-pulse 0.3 divides
// by the rate). It reports "sent" once the packets are written; what the
// server did is the test's to see.
func pulseRaw(mode string, n int, path string) (string, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return "", err
	}
	var b []byte
	u32 := func(v uint32) { b = binary.BigEndian.AppendUint32(append(b, 'L'), v) }
	prop := func(k, v string) {
		b = append(append(append(b, 't'), k...), 0)
		u32(uint32(len(v) + 1))
		b = append(binary.BigEndian.AppendUint32(append(b, 'x'), uint32(len(v)+1)), append([]byte(v), 0)...)
	}
	tag := uint32(0)
	send := func(cmd uint32, body func()) error {
		b = b[:0]
		u32(cmd)
		u32(tag)
		tag++
		body()
		d := make([]byte, 20)
		binary.BigEndian.PutUint32(d, uint32(len(b)))
		binary.BigEndian.PutUint32(d[4:], 0xFFFFFFFF)
		_, err := unix.Write(fd, append(d, b...))
		return err
	}
	rate := uint32(44100)
	if mode == "battr" {
		rate = 0
	}
	names := strings.TrimSuffix(strings.Repeat("aux63,", n), ",")
	steps := []struct {
		cmd  uint32
		body func()
	}{
		{8, func() { u32(35); b = append(binary.BigEndian.AppendUint32(append(b, 'x'), 256), make([]byte, 256)...) }},
		{9, func() { b = append(b, 'P'); prop("application.name", "probe"); b = append(b, 'N') }},
		{3, func() {
			b = binary.BigEndian.AppendUint32(append(b, 'a', 3, 2), rate)
			b = append(b, 'm', 2, 1, 2)
			u32(0xFFFFFFFF)
			b = append(b, 'N')
			u32(0xFFFFFFFF)
			b = append(b, '0')
			for range 4 {
				u32(0xFFFFFFFF)
			}
			b = append(b, 'v', 0, '0', '0', '0', '0', '0', '0', '0', '0', '0', 'P')
			prop("media.name", "x")
			b = append(b, 'N', '0', '0', '0', '0', '0', '0', '0', 'B', 1, 'f', 'B', 1, 'P')
			prop("format.sample_format", `"s16le"`)
			prop("format.rate", "44100")
			prop("format.channels", "2")
			prop("format.channel_map", `"`+names+`"`)
			b = append(b, 'N')
		}},
	}
	if mode == "battr" {
		steps = append(steps, struct {
			cmd  uint32
			body func()
		}{72, func() {
			u32(0)
			for range 4 {
				u32(0xFFFFFFFF)
			}
			b = append(b, '0', '0')
		}})
	}
	for _, s := range steps {
		if err := send(s.cmd, s.body); err != nil {
			return "", err
		}
	}
	// Give the server the packets' time, then leave: read what comes
	// until it closes or a second passes.
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
	buf := make([]byte, 4096)
	for {
		if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
			break
		}
	}
	return "sent", nil
}
