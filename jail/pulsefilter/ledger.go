package pulsefilter

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxStreams bounds the streams an app's sound connections hold in the
// server at once, playback, record and upload together, asked for or
// made: pipewire-pulse 0.3 gives each stream a 4 MiB buffer and a
// PipeWire node, and bounds neither (upstream later capped a client at
// 64 streams).
const MaxStreams = 64

// MaxCache bounds the bytes of the samples an app keeps, or is
// uploading, in the server's sample cache: the cache outlives the
// connections that filled it, and neither server bounds its total (upstream pipewire-pulse later capped
// it at 64 MiB, for every client together).
const MaxCache = 16 << 20

// MaxPlays samples an app starts playing in any PlayWindow, and no sample
// it uploads plays for longer: so at most MaxPlays of its own samples
// play at once. Each play is a stream of the server's (pipewire-pulse
// 0.3 makes a PipeWire node of it) that ends when the sample does, and
// the server tells the client when it starts, not when it ends: the
// filter cannot count those playing, only bound how fast they start. A
// play past the bound waits, and the app's later packets behind it, until
// the oldest leaves the window; none is refused.
const (
	MaxPlays   = 64
	PlayWindow = 30 * time.Second
)

// Ledger is what an app holds in its sound server: the streams of its
// connections, and its samples, cached (by the name the server keeps
// each under) or on their way (an upload open, or finished and not yet
// answered). One Ledger serves every connection of the app and outlives
// them (the jail keeps one an app, across its restarts): a sample stays
// cached when its connection ends, a stream and an unfinished upload do
// not. Its methods are safe for concurrent use.
//
// Counts err on the high side, never the low one: a sample is cached,
// and a name removed, when the server says so (a finish whose answer a
// closed connection lost counts as cached); a stream the server ended
// without saying so (an error that ends a stream with tag -1, an older
// client's protocol without "killed" events) stays counted until its
// connection ends. What the server freed is never taken for what it
// holds.
type Ledger struct {
	mu        sync.Mutex
	streams   int
	samples   map[string]int64 // what each cached sample costs, by name
	cached    int64            // the sum of samples
	uploading int64            // what the samples on their way cost
	// plays are when the last MaxPlays plays started, a ring whose next
	// entry is the oldest; window is PlayWindow.
	plays  [MaxPlays]time.Time
	next   int
	window time.Duration
	// retired are the costs of samples removed or replaced while a play
	// may still hold them: a server's play keeps its sample's memory to
	// its end, whatever becomes of the name (a hostile review held 60
	// plays of a 4 MiB sample re-uploaded under one name, 294 MB,
	// against a ledger of 4 MiB). Each counts until a window after it
	// was retired, as long as the longest play (checkDuration).
	retired []retired
}

type retired struct {
	until time.Time
	cost  int64
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger { return newLedger(PlayWindow) }

func newLedger(window time.Duration) *Ledger {
	return &Ledger{samples: map[string]int64{}, window: window}
}

// play counts a play that starts now, once fewer than MaxPlays started in
// the window before: until then it waits, holding no lock, and is ctx's
// error if ctx ends first.
func (l *Ledger) play(ctx context.Context) error {
	for {
		l.mu.Lock()
		now := time.Now()
		since := now.Sub(l.plays[l.next])
		if l.plays[l.next].IsZero() || since >= l.window {
			l.plays[l.next] = now
			l.next = (l.next + 1) % MaxPlays
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
		t := time.NewTimer(l.window - since)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// addStream counts a stream asked for, or refuses it past MaxStreams; an
// upload's cost (sampleCost) counts at once, or it is refused past
// MaxCache with what is cached and on its way.
func (l *Ledger) addStream(upload int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams >= MaxStreams {
		return fmt.Errorf("a stream past the %d an app holds in the sound server at once (delete one first): %w", MaxStreams, ErrRefused)
	}
	if held := l.cached + l.uploading + l.stillPlaying(time.Now()); held+upload > MaxCache {
		return fmt.Errorf("a sample that costs %d bytes with %d cached or on the way (an app caches %d at most, a sample costing %d at least: remove one first): %w",
			upload, held, MaxCache, minSampleCost, ErrRefused)
	}
	l.streams++
	l.uploading += upload
	return nil
}

// dropStream forgets a stream, and what an upload that did not finish
// cost.
func (l *Ledger) dropStream(upload int64) {
	l.mu.Lock()
	l.streams--
	l.uploading -= upload
	l.mu.Unlock()
}

// endUpload forgets a finished upload's stream (the server frees it at
// the finish, whatever its answer); its sample stays on its way.
func (l *Ledger) endUpload() {
	l.mu.Lock()
	l.streams--
	l.mu.Unlock()
}

// settle ends a finished upload's wait: cached, its cost moves to the
// cache under name, in place of a sample of that name; refused, it is
// forgotten.
func (l *Ledger) settle(name string, cost int64, cached bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uploading -= cost
	if cached {
		l.retire(l.samples[name])
		l.cached += cost - l.samples[name]
		l.samples[name] = cost
	}
}

// retire keeps cost, a sample's that the server forgets, counted for a
// window when a play started in the last one (it may be playing still).
// l.mu is held.
func (l *Ledger) retire(cost int64) {
	now := time.Now()
	last := l.plays[(l.next+MaxPlays-1)%MaxPlays]
	if cost > 0 && !last.IsZero() && now.Sub(last) < l.window {
		l.retired = append(l.retired, retired{until: now.Add(l.window), cost: cost})
	}
}

// stillPlaying forgets the retired costs whose window ended, and sums
// the others. l.mu is held.
func (l *Ledger) stillPlaying(now time.Time) (sum int64) {
	l.retired = slices.DeleteFunc(l.retired, func(r retired) bool { return !now.Before(r.until) })
	for _, r := range l.retired {
		sum += r.cost
	}
	return sum
}

// holds reports whether a sample of that name is counted.
func (l *Ledger) holds(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.samples[name]
	return ok
}

// remove forgets the sample cached under name.
func (l *Ledger) remove(name string) {
	l.mu.Lock()
	l.retire(l.samples[name])
	l.cached -= l.samples[name]
	delete(l.samples, name)
	l.mu.Unlock()
}

// minSampleCost is the least a sample costs of MaxCache, whatever its
// length: a cached sample costs the server memory of its own (an entry,
// its properties; pipewire-pulse 0.3 a 4 MiB buffer's mapping), so
// 1-byte samples would otherwise be millions (a hostile review cached
// 70,000, and the server's memory grew by 190 MiB, 938 MiB under
// pipewire-pulse). MaxCache/minSampleCost samples at most: 256.
const minSampleCost = 64 << 10

// sampleCost is what a sample of length bytes costs of MaxCache.
func sampleCost(length uint32) int64 { return max(int64(length), minSampleCost) }

// maxSampleName is PulseAudio's bound on a name (PA_NAME_MAX, its NUL
// included), which pipewire-pulse does not hold: a longer name's upload
// is refused, so that what the Ledger keeps of an app is small.
const maxSampleName = 127

// streamKind is what a create command makes; a channel number is the
// server's for one kind (PulseAudio numbers record streams apart from
// the others), so a stream is its kind and channel.
type streamKind uint8

const (
	playback streamKind = iota + 1
	record
	uploading
)

type streamKey struct {
	kind    streamKind
	channel uint32
}

// Commands the streams' count follows, both ways (native-common.h).
const (
	cmdError                = 0
	cmdReply                = 2
	cmdDeletePlaybackStream = 4
	cmdDeleteRecordStream   = 6
	cmdDeleteUploadStream   = 16
	cmdFinishUploadStream   = 17
	cmdRemoveSample         = 19
	cmdPlaybackStreamKilled = 64
	cmdRecordStreamKilled   = 65
	noTag                   = 0xFFFFFFFF // the tag of what the server sends unasked
)

// streams are one connection's streams and samples in its app's Ledger.
// The server answers a create with the stream's channel, and a finish or
// a REMOVE_SAMPLE with an ack or an error, under the command's tag; an
// app that reused that tag could have another answer taken for it, so
// such a command's tag must be past every tag the connection sent before
// it (libpulse counts its tags up), and no packet may reuse the tag of
// one still unanswered. An upload is finished only on a channel the
// server gave it: a finish sent on a guess, before the answer, would
// cache a sample the filter had not seen become one.
type streams struct {
	ledger *Ledger
	mu     sync.Mutex // the filter's half and the server's both use what follows
	sent   bool       // a packet has been sent: last is its tag
	last   uint32
	asked  map[uint32]asked // commands not answered yet, by tag
	live   map[streamKey]openStream
	// unplaced are streams whose answer named no channel the filter could
	// read: counted until the connection ends.
	unplaced []openStream
}

// openStream is a stream of the connection: an upload's also the name
// and cost of its sample.
type openStream struct {
	kind streamKind
	name string
	cost int64
}

// asked is a command the server has not answered: a create (stream), a
// finish (finished, the upload) or a REMOVE_SAMPLE (remove, the name).
type asked struct {
	stream   openStream
	finished bool
	remove   string
}

func newStreams(l *Ledger) *streams {
	return &streams{ledger: l, asked: map[uint32]asked{}, live: map[streamKey]openStream{}}
}

// send follows the app's packet cmd with tag, the rest of its values
// being rest (as passed on): nil, or ErrRefused for a stream or sample
// past the app's bounds, a tag the answers could not be told apart by,
// or a finish of an upload the app was not given.
func (s *streams) send(cmd, tag uint32, rest []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.asked[tag]; ok {
		return fmt.Errorf("command %d with tag %d, the tag of a command that waits for its answer: %w", cmd, tag, ErrRefused)
	}
	var a asked
	channel, hasChannel := firstU32(rest)
	switch cmd {
	case cmdCreatePlaybackStream:
		a.stream.kind = playback
	case cmdCreateRecordStream:
		a.stream.kind = record
	case cmdCreateUploadStream:
		name, length, err := uploadOf(rest)
		if err != nil {
			return err
		}
		a.stream = openStream{kind: uploading, name: name, cost: sampleCost(length)}
	case cmdFinishUploadStream:
		k := streamKey{uploading, channel}
		up, live := s.live[k]
		if !hasChannel || !live {
			return fmt.Errorf("a finish of upload channel %d, which the server did not give this connection: %w", channel, ErrRefused)
		}
		a.finished, a.stream = true, up
	case cmdRemoveSample:
		// Followed only for a name the Ledger counts, once: what waits
		// is bounded by what it counts.
		if name, ok := firstString(rest); ok && s.ledger.holds(name) && !s.removing(name) {
			a.remove = name
		}
	}
	if a.stream.kind != 0 || a.remove != "" {
		if tag == noTag || s.sent && tag <= s.last {
			return fmt.Errorf("command %d with tag %d, not past %d before it: its answer could not be told from another's: %w", cmd, tag, s.last, ErrRefused)
		}
	}
	switch {
	case a.finished:
		delete(s.live, streamKey{uploading, channel})
		s.ledger.endUpload()
	case a.stream.kind != 0:
		if err := s.ledger.addStream(a.stream.cost); err != nil {
			return err
		}
	}
	if a.stream.kind != 0 || a.remove != "" {
		s.asked[tag] = a
	}
	if !s.sent || tag > s.last {
		s.sent, s.last = true, tag
	}
	switch cmd {
	case cmdDeletePlaybackStream:
		s.end(playback, channel, hasChannel)
	case cmdDeleteRecordStream:
		s.end(record, channel, hasChannel)
	case cmdDeleteUploadStream:
		s.end(uploading, channel, hasChannel)
	}
	return nil
}

// removing reports whether a REMOVE_SAMPLE of name waits for its answer.
func (s *streams) removing(name string) bool {
	for _, a := range s.asked {
		if a.remove == name {
			return true
		}
	}
	return false
}

// end forgets the stream of kind on channel, if it is one: the server
// frees it (an upload's data with it).
func (s *streams) end(kind streamKind, channel uint32, ok bool) {
	k := streamKey{kind, channel}
	if st, live := s.live[k]; ok && live {
		delete(s.live, k)
		s.ledger.dropStream(st.cost)
	}
}

// received follows the server's packet cmd with tag, whose first value
// is first (nil when it is not a uint32): an answer to a create places
// its stream or drops it, an ack of a finish caches its sample, an ack
// of a REMOVE_SAMPLE forgets one, and a stream the server killed is
// gone.
func (s *streams) received(cmd, tag uint32, first []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	channel, ok := firstU32(first)
	switch cmd {
	case cmdReply, cmdError:
		a, waits := s.asked[tag]
		if !waits {
			return
		}
		delete(s.asked, tag)
		st, k := a.stream, streamKey{a.stream.kind, channel}
		switch {
		case a.remove != "":
			if cmd == cmdReply {
				s.ledger.remove(a.remove)
			}
		case a.finished:
			s.ledger.settle(st.name, st.cost, cmd == cmdReply)
		case cmd == cmdError:
			s.ledger.dropStream(st.cost)
		case !ok:
			s.unplaced = append(s.unplaced, st)
		default:
			// A channel given again: the stream the filter had there
			// ended unannounced (it cannot have been a finished upload:
			// the filter sees every finish).
			s.end(st.kind, channel, true)
			s.live[k] = st
		}
	case cmdPlaybackStreamKilled:
		s.end(playback, channel, ok)
	case cmdRecordStreamKilled:
		s.end(record, channel, ok)
	}
}

// close gives the connection's streams back: the server ends them, and
// their uploads, with it. A finish not answered counts as cached (the
// server may have cached it before the close), a REMOVE_SAMPLE not
// answered as not done.
func (s *streams) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.asked {
		switch {
		case a.finished:
			s.ledger.settle(a.stream.name, a.stream.cost, true)
		case a.stream.kind != 0:
			s.ledger.dropStream(a.stream.cost)
		}
	}
	for _, st := range s.live {
		s.ledger.dropStream(st.cost)
	}
	for _, st := range s.unplaced {
		s.ledger.dropStream(st.cost)
	}
	s.asked, s.live, s.unplaced = nil, nil, nil
}

// uploadOf is the name a CREATE_UPLOAD_STREAM's sample will be cached
// under ("" when it has none: either server refuses it) and its length.
// PulseAudio takes the name value, else the event.id property, else
// media.name; pipewire-pulse 0.3 takes event.id, else media.name (the
// name value when no property list follows). An upload whose name and
// properties would have the two keep it under different names is
// refused, so that a REMOVE_SAMPLE frees what was counted.
func uploadOf(p []byte) (name string, length uint32, err error) {
	var vals [4][]byte
	for i := range vals {
		if len(p) == 0 {
			break
		}
		n, err := valueSize(p)
		if err != nil {
			return "", 0, err
		}
		vals[i], p = p[:n], p[n:]
	}
	length, ok := firstU32(vals[3])
	if !ok {
		return "", 0, fmt.Errorf("an upload without its length: %w", ErrRefused)
	}
	if length > MaxSample {
		return "", 0, fmt.Errorf("a sample of %d bytes (the filter passes %d at most): %w", length, MaxSample, ErrRefused)
	}
	if err := checkDuration(vals[1], length); err != nil {
		return "", 0, err
	}
	name, named := firstString(vals[0])
	pw, pwNamed := name, named
	if len(p) > 0 {
		if pw, pwNamed, err = uploadProperty(p); err != nil {
			return "", 0, err
		}
	}
	switch {
	case named && pwNamed && name != pw:
		return "", 0, fmt.Errorf("an upload named %q whose properties name it %q: PulseAudio and pipewire-pulse would cache it under different names: %w", name, pw, ErrRefused)
	case !named:
		name = pw
	}
	if len(name) > maxSampleName {
		return "", 0, fmt.Errorf("an upload named with %d bytes (PulseAudio takes %d at most): %w", len(name), maxSampleName, ErrRefused)
	}
	return name, length, nil
}

// sampleSizes are the bytes of one sample of each format of a sample
// spec (sample.h: u8, alaw, ulaw, s16le, s16be, float32le, float32be,
// s32le, s32be, s24le, s24be, s24-32le, s24-32be).
var sampleSizes = [...]uint64{1, 1, 1, 2, 2, 4, 4, 4, 4, 3, 3, 4, 4}

// checkDuration refuses an upload of length bytes in the sample spec
// spec that plays for longer than PlayWindow (MaxPlays), or whose spec
// says no duration.
func checkDuration(spec []byte, length uint32) error {
	if len(spec) != 7 || spec[0] != 'a' || int(spec[1]) >= len(sampleSizes) || spec[2] == 0 || binary.BigEndian.Uint32(spec[3:]) == 0 {
		return fmt.Errorf("an upload without a sample spec that gives it a duration: %w", ErrRefused)
	}
	perSecond := sampleSizes[spec[1]] * uint64(spec[2]) * uint64(binary.BigEndian.Uint32(spec[3:]))
	if secs := uint64(PlayWindow / time.Second); uint64(length) > secs*perSecond {
		return fmt.Errorf("a sample that plays for %ds (the filter passes %ds at most: an event's sound): %w", uint64(length)/perSecond, secs, ErrRefused)
	}
	return nil
}

// uploadProperty is the upload's name in its property list p: event.id,
// else media.name. A value that is not one clean string (a NUL inside, not
// UTF-8: read differently by the two servers) is refused.
func uploadProperty(p []byte) (string, bool, error) {
	if p[0] != tagProplist {
		return "", false, nil
	}
	found := map[string]string{}
	for i := 1; p[i] != tagStringNull; {
		key, head, value, err := entry(p[i:])
		if err != nil {
			return "", false, err
		}
		if key == "event.id" || key == "media.name" {
			v := p[i+head+5 : i+head+value]
			if len(v) == 0 || bytes.IndexByte(v, 0) != len(v)-1 || !utf8.Valid(v) {
				return "", false, fmt.Errorf("an upload whose %s is not one string: %w", key, ErrRefused)
			}
			found[key] = string(v[:len(v)-1])
		}
		i += head + value
	}
	if v, ok := found["event.id"]; ok {
		return v, true, nil
	}
	v, ok := found["media.name"]
	return v, ok, nil
}

// firstU32 is the uint32 p begins with.
func firstU32(p []byte) (uint32, bool) {
	if len(p) < 5 || p[0] != tagU32 {
		return 0, false
	}
	return binary.BigEndian.Uint32(p[1:]), true
}

// firstString is the string p begins with (false for a null string).
func firstString(p []byte) (string, bool) {
	if len(p) < 2 || p[0] != tagString {
		return "", false
	}
	i := bytes.IndexByte(p[1:], 0)
	if i < 0 {
		return "", false
	}
	return string(p[1 : 1+i]), true
}
