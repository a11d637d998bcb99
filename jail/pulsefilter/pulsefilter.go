package pulsefilter

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
)

// ErrRefused is wrapped by Run's error when the app sent what the filter
// does not pass on.
var ErrRefused = errors.New("refused by the sound filter")

// The frame: a descriptor of five big-endian uint32 (pstream.c), then
// length bytes. Channel packetChannel is a packet (a tagstruct), any
// other a memory block of a stream.
const (
	descriptorSize = 20
	packetChannel  = 0xFFFFFFFF
	// maxFrame is the server's own cap (FRAME_SIZE_MAX_ALLOW).
	maxFrame = 16 << 20
	// flagShmMask marks a frame that refers to shared memory.
	flagShmMask = 0xFF000000
)

// A packet begins with its command and tag, each a tagstruct uint32:
// 'L' and four big-endian bytes. AUTH's next value is the protocol
// version, whose top bits offer shared memory (PA_PROTOCOL_FLAG_SHM,
// PA_PROTOCOL_FLAG_MEMFD).
const (
	tagU32     = 'L'
	headSize   = 10
	authSize   = 15
	authFlags  = 11 // the version's most significant byte
	offerShm   = 0x80
	offerMemfd = 0x40
)

// Commands, by their number in the protocol (native-common.h).
const (
	cmdCreatePlaybackStream  = 3
	cmdCreateRecordStream    = 5
	cmdAuth                  = 8
	cmdSetClientName         = 9
	cmdCreateUploadStream    = 15
	cmdPlaySample            = 18
	cmdSetPlaybackBufferAttr = 72
	cmdSetRecordBufferAttr   = 73
	cmdUpdateClientProplist  = 82
)

// allowed are the commands a client needs to play, record and look at
// what it plays on: streams and their latency, the sample cache, lookups
// and lists, subscriptions, its own name and properties, and its
// streams' volume. Loading and unloading modules, extensions and object
// messages (code and state inside the server), killing, moving and
// suspending what is not the app's, the defaults, cards, ports and
// device volumes, and EXIT are not on it; nor anything only a server
// sends, nor shared memory's commands.
var allowed = [...]string{
	3: "create_playback_stream", 4: "delete_playback_stream", 5: "create_record_stream", 6: "delete_record_stream",
	8: "auth", 9: "set_client_name", 10: "lookup_sink", 11: "lookup_source", 12: "drain_playback_stream",
	13: "stat", 14: "get_playback_latency", 15: "create_upload_stream", 16: "delete_upload_stream",
	17: "finish_upload_stream", 18: "play_sample", 19: "remove_sample", 20: "get_server_info",
	21: "get_sink_info", 22: "get_sink_info_list", 23: "get_source_info", 24: "get_source_info_list",
	25: "get_module_info", 26: "get_module_info_list", 27: "get_client_info", 28: "get_client_info_list",
	29: "get_sink_input_info", 30: "get_sink_input_info_list", 31: "get_source_output_info",
	32: "get_source_output_info_list", 33: "get_sample_info", 34: "get_sample_info_list", 35: "subscribe",
	37: "set_sink_input_volume", 41: "cork_playback_stream", 42: "flush_playback_stream",
	43: "trigger_playback_stream", 46: "set_playback_stream_name", 47: "set_record_stream_name",
	57: "get_record_latency", 58: "cork_record_stream", 59: "flush_record_stream", 60: "prebuf_playback_stream",
	69: "set_sink_input_mute", 72: "set_playback_stream_buffer_attr", 73: "set_record_stream_buffer_attr",
	74: "update_playback_stream_sample_rate", 75: "update_record_stream_sample_rate",
	80: "update_record_stream_proplist", 81: "update_playback_stream_proplist", 82: "update_client_proplist",
	83: "remove_record_stream_proplist", 84: "remove_playback_stream_proplist", 85: "remove_client_proplist",
	88: "get_card_info", 89: "get_card_info_list", 98: "set_source_output_volume", 99: "set_source_output_mute",
}

// Run passes app's frames to server through the filter and server's
// frames back to app, until either side ends, ctx ends or the app sends
// what is refused (ErrRefused). It closes both connections. ledger is
// the app's, which every connection of it shares (nil: one of this
// connection's own). dropped, when set, is told of each property it
// leaves out of what the app sent.
func Run(ctx context.Context, app, server net.Conn, ledger *Ledger, dropped func(key string)) error {
	if ledger == nil {
		ledger = NewLedger()
	}
	parent := ctx
	// ctx also ends with the server's half: a filter waiting for an
	// answer, or for room to play, waits no longer.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	closeBoth := func() { once.Do(func() { app.Close(); server.Close() }) }
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	c := newConn(ledger, MaxUnanswered)
	defer c.streams.close()
	back := make(chan struct{})
	go func() {
		defer close(back)
		copyBack(app, bufio.NewReaderSize(server, 64<<10), c)
		cancel()
	}()
	err := c.filter(ctx, server, bufio.NewReaderSize(app, 64<<10), dropped)
	closeBoth()
	<-back
	// The filter's half ends with a closed connection, or a wait that
	// ctx ended, when the server's half or ctx ended first.
	if errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) || parent.Err() != nil {
		err = nil
	}
	return err
}

// copyBack copies the server's frames in r to w as they are, telling c's
// streams of each packet's command, tag and first value, and c's
// answers of each REPLY and ERROR (before writing it: an answer read is
// one the server no longer holds), until either side ends.
func copyBack(w io.Writer, r io.Reader, c *conn) error {
	var b [descriptorSize + replyHeadSize]byte
	for {
		if _, err := io.ReadFull(r, b[:descriptorSize]); err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(b[0:]))
		head := b[:descriptorSize]
		if binary.BigEndian.Uint32(b[4:]) == packetChannel {
			head = b[:descriptorSize+min(n, replyHeadSize)]
			if _, err := io.ReadFull(r, head[descriptorSize:]); err != nil {
				return err
			}
			if p := head[descriptorSize:]; len(p) >= headSize && p[0] == tagU32 && p[5] == tagU32 {
				cmd, tag := binary.BigEndian.Uint32(p[1:]), binary.BigEndian.Uint32(p[6:])
				c.streams.received(cmd, tag, p[headSize:])
				if cmd == cmdReply || cmd == cmdError {
					c.answers.answered(tag)
				}
			}
		}
		if _, err := w.Write(head); err != nil {
			return err
		}
		if _, err := io.CopyN(w, r, n-int64(len(head)-descriptorSize)); err != nil {
			return err
		}
	}
}

// replyHeadSize is how much of a server's packet copyBack reads: its
// command, its tag and a uint32 (a created stream's channel).
const replyHeadSize = headSize + 5

// maxPacket bounds a packet, which the filter reads whole: a client's
// are small (a stream's properties, an icon among them); audio comes in
// memory blocks, which are copied through.
const maxPacket = 1 << 20

// filter copies r to w frame by frame, as Run's app-to-server half does:
// nil at r's end, ErrRefused for a frame it does not pass on (nothing of
// that frame is written), or the read or write error. A PLAY_SAMPLE past
// the app's bound waits for room (Ledger.play), and a command past
// c's bound of unanswered ones for an answer (answers.wait), or for
// ctx's end. Memory blocks (a stream's audio) are not commands: nothing
// waits for them, but they queue behind a command that waits. dropped,
// when set, is told of each property it leaves out.
func (c *conn) filter(ctx context.Context, w io.Writer, r io.Reader, dropped func(key string)) error {
	var d [descriptorSize]byte
	var in, out []byte
	for {
		if _, err := io.ReadFull(r, d[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := binary.BigEndian.Uint32(d[0:])
		channel := binary.BigEndian.Uint32(d[4:])
		flags := binary.BigEndian.Uint32(d[16:])
		switch {
		case n > maxFrame:
			return fmt.Errorf("a frame of %d bytes (the most is %d): %w", n, maxFrame, ErrRefused)
		case flags&flagShmMask != 0:
			return fmt.Errorf("a frame that refers to shared memory (flags %#x): %w", flags, ErrRefused)
		case channel == packetChannel && n > maxPacket:
			return fmt.Errorf("a packet of %d bytes (the filter reads %d at most): %w", n, maxPacket, ErrRefused)
		case channel == packetChannel:
			in = slices.Grow(in[:0], int(n))[:n]
			if _, err := io.ReadFull(r, in); err != nil {
				return unexpected(err)
			}
			var err error
			if out, err = c.check(out[:0], in, dropped); err != nil {
				return err
			}
			if binary.BigEndian.Uint32(in[1:]) == cmdPlaySample {
				if err := c.streams.ledger.play(ctx); err != nil {
					return err
				}
			}
			if err := c.answers.wait(ctx, binary.BigEndian.Uint32(in[6:])); err != nil {
				return err
			}
			binary.BigEndian.PutUint32(d[0:], uint32(len(out)))
			if _, err := w.Write(append(d[:], out...)); err != nil {
				return err
			}
			continue
		}
		if _, err := w.Write(d[:]); err != nil {
			return err
		}
		if _, err := io.CopyN(w, r, int64(n)); err != nil {
			return unexpected(err)
		}
	}
}

// unexpected is a read's error inside a frame.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// conn is what the filter remembers of a connection.
type conn struct {
	// rateless: a stream was created with a sample spec of rate 0 (its
	// format comes from its format list, as GStreamer's are made).
	// pipewire-pulse 0.3 divides by a stream's rate when its buffer
	// attributes are set, before it has one from the format (a hostile
	// review crashed it), so such a connection may not set them.
	rateless bool
	// streams are its streams and uploads in the app's Ledger.
	streams *streams
	// answers are its commands the server has not answered.
	answers *answers
}

// newConn is a connection of the app whose Ledger is l, bound commands
// at most waiting for their answers.
func newConn(l *Ledger, bound int) *conn {
	return &conn{streams: newStreams(l), answers: newAnswers(bound)}
}

// check decides the packet p and appends what is passed on of it to out:
// the command must be on the allow-list, an AUTH loses its shared-memory
// offer (in p, the filter's own copy), every property list keeps only
// a client's keys (cleanTags), and the app's streams and samples stay
// within its Ledger's bounds (streams.send).
func (c *conn) check(out, p []byte, dropped func(string)) ([]byte, error) {
	if len(p) < headSize || p[0] != tagU32 || p[5] != tagU32 {
		return nil, fmt.Errorf("a packet that does not begin with its command and tag: %w", ErrRefused)
	}
	cmd := binary.BigEndian.Uint32(p[1:])
	if cmd >= uint32(len(allowed)) || allowed[cmd] == "" {
		return nil, fmt.Errorf("command %d (%s): %w", cmd, commandName(cmd), ErrRefused)
	}
	out = append(out, p[:headSize]...)
	rest := p[headSize:]
	switch cmd {
	case cmdAuth:
		if len(p) < authSize || p[headSize] != tagU32 {
			return nil, fmt.Errorf("an AUTH without its version: %w", ErrRefused)
		}
		p[authFlags] &^= offerShm | offerMemfd
	case cmdCreatePlaybackStream, cmdCreateRecordStream:
		if rateOf(rest) == 0 {
			c.rateless = true
		}
	case cmdSetPlaybackBufferAttr, cmdSetRecordBufferAttr:
		if c.rateless {
			return nil, fmt.Errorf("buffer attributes on a connection that made a stream of rate 0: %w", ErrRefused)
		}
	}
	out, err := cleanTags(out, rest, cmd == cmdSetClientName || cmd == cmdUpdateClientProplist, dropped)
	if err != nil {
		return nil, err
	}
	tag := binary.BigEndian.Uint32(p[6:])
	if err := c.streams.send(cmd, tag, out[headSize:]); err != nil {
		return nil, err
	}
	return out, nil
}

// MaxSample bounds a sample an app uploads to the cache: pipewire-pulse
// before 1.x takes a length up to 16 MiB into a buffer of 4 MiB and,
// playing the sample, reads past it (a hostile review crashed it, and
// recorded what lay beyond). An event sound is far smaller.
const MaxSample = 4 << 20

// rateOf is the rate of the first sample spec in the values p (0 when
// there is none, or the walk stops).
func rateOf(p []byte) uint32 {
	for len(p) > 0 {
		n, err := valueSize(p)
		if err != nil {
			return 0
		}
		if p[0] == 'a' {
			return binary.BigEndian.Uint32(p[3:])
		}
		p = p[n:]
	}
	return 0
}

// refusedNames name, for the log, the refused commands a client may
// mean to send.
var refusedNames = [...]string{
	0: "error", 1: "timeout", 2: "reply", 7: "exit", 36: "set_sink_volume", 38: "set_source_volume",
	39: "set_sink_mute", 40: "set_source_mute", 44: "set_default_sink", 45: "set_default_source",
	48: "kill_client", 49: "kill_sink_input", 50: "kill_source_output", 51: "load_module", 52: "unload_module",
	67: "move_sink_input", 68: "move_source_output", 70: "suspend_sink", 71: "suspend_source",
	87: "extension", 90: "set_card_profile", 96: "set_sink_port", 97: "set_source_port",
	100: "set_port_latency_offset", 101: "enable_srbchannel", 102: "disable_srbchannel",
	103: "register_memfd_shmid", 104: "send_object_message",
}

func commandName(cmd uint32) string {
	if cmd < uint32(len(refusedNames)) && refusedNames[cmd] != "" {
		return refusedNames[cmd]
	}
	return "not one a client sends"
}
