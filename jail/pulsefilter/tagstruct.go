package pulsefilter

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
)

// A packet's values are a tagstruct (tagstruct.c): each a type byte, then
// its bytes. Every type has a size the walk can tell without knowing the
// command, so the filter reads every packet whole and passes on a
// property list's entries only by their key, whatever the command.
//
// Properties are the other way in: module-filter-apply loads
// "module-<filter.apply>" with a stream's "filter.apply.*.parameters",
// so a stream with filter.apply=ladspa-sink had PulseAudio dlopen a path
// the app named; pipewire-pulse copies a stream's properties into its
// PipeWire node's, where adapt.follower.node is read as a pointer. Only
// the keys PulseAudio defines for clients to describe themselves, their
// streams and events pass (proplist.h), and module-stream-restore.id,
// which clients set to share a stream's saved volume.
var clientKeys = map[string]bool{
	"media.name": true, "media.title": true, "media.artist": true, "media.copyright": true, "media.software": true,
	"media.language": true, "media.filename": true, "media.icon": true, "media.icon_name": true, "media.role": true,
	"event.id": true, "event.description": true, "event.mouse.x": true, "event.mouse.y": true, "event.mouse.hpos": true,
	"event.mouse.vpos": true, "event.mouse.button": true,
	"window.name": true, "window.id": true, "window.icon": true, "window.icon_name": true, "window.x": true, "window.y": true,
	"window.width": true, "window.height": true, "window.hpos": true, "window.vpos": true, "window.desktop": true,
	"window.x11.display": true, "window.x11.screen": true, "window.x11.monitor": true, "window.x11.xid": true,
	"application.name": true, "application.id": true, "application.version": true, "application.icon": true,
	"application.icon_name": true, "application.language": true, "application.process.id": true,
	"application.process.binary": true, "application.process.user": true, "application.process.host": true,
	"application.process.machine_id": true, "application.process.session_id": true,
	"format.sample_format": true, "format.rate": true, "format.channels": true, "format.channel_map": true,
	"module-stream-restore.id": true,
}

// sampleKeys name an uploaded sample in pipewire-pulse 0.3, which reads
// them from the upload's properties laid over the client's own: in the
// client's they would name a sample other than the upload says (a hostile
// review cached ten 4 MiB samples the filter counted as one), so there
// they are left out, unsaid (paplay sets media.name on itself).
var sampleKeys = map[string]bool{"event.id": true, "media.name": true}

// Tag types (tagstruct.h) and the fixed sizes of those that have one,
// the type byte included.
const (
	tagString     = 't'
	tagStringNull = 'N'
	tagArbitrary  = 'x'
	tagProplist   = 'P'
	tagFormatInfo = 'f'
	tagChannelMap = 'm'
	tagCVolume    = 'v'
	tagU8         = 'B'
)

// fixedSize is the size of a value of type t, 0 for a type whose size
// its bytes tell.
func fixedSize(t byte) int {
	switch t {
	case '1', '0', tagStringNull: // booleans, a null string
		return 1
	case tagU8:
		return 2
	case 'L', 'V': // uint32, volume
		return 5
	case 'a': // sample spec: format, channels, rate
		return 7
	case 'R', 'r', 'U', 'T': // uint64, int64, usec, timeval
		return 9
	}
	return 0
}

// cleanTags copies the tagstruct p to out, leaving out each property whose
// key is not a client's (dropped is told of it), and, in the client's own
// properties (ofClient), the keys that name a sample (samplesKeys);
// ErrRefused for a value the walk cannot read, as the server would refuse
// it.
func cleanTags(out, p []byte, ofClient bool, dropped func(key string)) ([]byte, error) {
	for len(p) > 0 {
		n, err := valueSize(p)
		if err != nil {
			return nil, err
		}
		switch p[0] {
		case tagProplist:
			out, err = cleanProplist(out, p[:n], ofClient, dropped)
		case tagFormatInfo: // its encoding, then a property list
			out = append(out, p[:3]...)
			out, err = cleanProplist(out, p[3:n], false, dropped)
		default:
			out = append(out, p[:n]...)
		}
		if err != nil {
			return nil, err
		}
		p = p[n:]
	}
	return out, nil
}

// valueSize is the size of p's first value.
func valueSize(p []byte) (int, error) {
	bad := func(what string) (int, error) {
		return 0, fmt.Errorf("a packet whose %s the filter cannot read: %w", what, ErrRefused)
	}
	if n := fixedSize(p[0]); n > 0 {
		if len(p) < n {
			return bad("last value is cut short")
		}
		return n, nil
	}
	switch p[0] {
	case tagString:
		i := bytes.IndexByte(p[1:], 0)
		if i < 0 {
			return bad("string has no end")
		}
		return i + 2, nil
	case tagArbitrary:
		if len(p) < 5 || uint64(len(p)-5) < uint64(binary.BigEndian.Uint32(p[1:])) {
			return bad("arbitrary value is cut short")
		}
		return 5 + int(binary.BigEndian.Uint32(p[1:])), nil
	case tagChannelMap, tagCVolume:
		if len(p) < 2 {
			return bad("channel list is cut short")
		}
		n := 2 + int(p[1])
		if p[0] == tagCVolume {
			n = 2 + 4*int(p[1])
		}
		if len(p) < n {
			return bad("channel list is cut short")
		}
		return n, nil
	case tagFormatInfo:
		if len(p) < 3 || p[1] != tagU8 {
			return bad("format has no encoding")
		}
		n, err := proplistSize(p[3:])
		return 3 + n, err
	case tagProplist:
		return proplistSize(p)
	}
	return bad(fmt.Sprintf("value of type %q", p[0]))
}

// proplistSize is the size of the property list p begins with: 'P', then
// entries of a key string, a uint32 length and that many arbitrary bytes,
// then a null string.
func proplistSize(p []byte) (int, error) {
	if len(p) == 0 || p[0] != tagProplist {
		return 0, fmt.Errorf("a format without its properties: %w", ErrRefused)
	}
	i := 1
	for {
		if i >= len(p) {
			return 0, fmt.Errorf("a property list with no end: %w", ErrRefused)
		}
		if p[i] == tagStringNull {
			return i + 1, nil
		}
		_, head, value, err := entry(p[i:])
		if err != nil {
			return 0, err
		}
		i += head + value
	}
}

// entry reads a property list's entry at p: its key, and the sizes of
// the key with the length value, and of the arbitrary value.
func entry(p []byte) (key string, head, value int, err error) {
	if p[0] != tagString {
		return "", 0, 0, fmt.Errorf("a property without a key: %w", ErrRefused)
	}
	k, err := valueSize(p)
	if err != nil {
		return "", 0, 0, err
	}
	key = string(p[1 : k-1])
	if len(p) < k+5 || p[k] != 'L' {
		return "", 0, 0, fmt.Errorf("property %q without its length: %w", key, ErrRefused)
	}
	length := binary.BigEndian.Uint32(p[k+1:])
	v := p[k+5:]
	if len(v) == 0 || v[0] != tagArbitrary {
		return "", 0, 0, fmt.Errorf("property %q without its value: %w", key, ErrRefused)
	}
	n, err := valueSize(v)
	if err != nil {
		return "", 0, 0, err
	}
	if uint64(n-5) != uint64(length) {
		return "", 0, 0, fmt.Errorf("property %q whose length is not its value's: %w", key, ErrRefused)
	}
	if key == "" {
		return "", 0, 0, fmt.Errorf("a property with an empty key: %w", ErrRefused)
	}
	return key, k + 5, n, nil
}

// cleanProplist copies the property list p (whole, as proplistSize
// measured it) to out without the entries whose key is not a client's.
func cleanProplist(out, p []byte, ofClient bool, dropped func(string)) ([]byte, error) {
	out = append(out, tagProplist)
	i := 1
	for p[i] != tagStringNull {
		key, head, value, err := entry(p[i:])
		if err != nil {
			return nil, err
		}
		switch {
		case ofClient && sampleKeys[key]:
			// Left out unsaid: libpulse clients set media.name on
			// themselves as a matter of course (paplay does).
		case clientKeys[key] && value-5 <= MaxValue:
			// A longer value is left out as an unknown key is: the
			// server repeats it in every list reply it queues and keeps
			// stream-restore's on disk (a hostile review grew a server
			// by 2.6 GB with 60 KB values).
			if err := checkValue(key, p[i+head+5:i+head+value]); err != nil {
				return nil, err
			}
			out = append(out, p[i:i+head+value]...)
		case dropped != nil:
			dropped(key)
		}
		i += head + value
	}
	return append(out, tagStringNull), nil
}

// MaxValue bounds the value of a property passed on, in bytes: names,
// titles and ids fit; an icon's pixels do not, and are left out.
const MaxValue = 1 << 10

// maxChannels is PulseAudio's PA_CHANNELS_MAX.
const maxChannels = 32

// checkValue checks the value v of a key that is passed on, where a
// server trusts it: pipewire-pulse 0.3 writes each name of a format's
// channel map into a 64-entry array on its stack, however many there are
// (a hostile review smashed its stack with 250).
func checkValue(key string, v []byte) error {
	switch key {
	case "format.channel_map":
		if n := bytes.Count(v, []byte(",")) + 1; n > maxChannels {
			return fmt.Errorf("a channel map of %d channels (%d at most): %w", n, maxChannels, ErrRefused)
		}
	case "format.channels":
		n, err := strconv.Atoi(string(bytes.Trim(v, "\x00\" ")))
		if err != nil || n < 0 || n > maxChannels {
			return fmt.Errorf("format.channels %q (%d at most): %w", bytes.TrimRight(v, "\x00"), maxChannels, ErrRefused)
		}
	}
	return nil
}
