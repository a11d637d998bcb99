package helper

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// The helper's input and its status lines are written and read by hand,
// not with encoding/json: the helper is a fresh process every time, and
// encoding/json's first use in a process (reflection over the types, its
// code paged in) cost ~0.3 ms of a ~3 ms start here, as much as Landlock
// and seccomp together. The daemon reads the status with encoding/json
// (ParseStatus); the spec keeps its JSON form for people (Describe,
// octosupctl --json jail).

// inputMagic begins every input; its last byte is the wire version, so
// that a helper and a daemon of different versions refuse each other.
const inputMagic = "OSJ\x02"

// The input, after inputMagic: the Spec field by field in its declaration
// order, then the filter. Integers are uvarints (MinABI a varint), a
// bool one byte (0 or 1), a string or byte slice a uvarint length and
// the bytes, a list a uvarint count and its elements.

type wireWriter struct{ b []byte }

func (w *wireWriter) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *wireWriter) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *wireWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}
func (w *wireWriter) str(s string) { w.uint(uint64(len(s))); w.b = append(w.b, s...) }
func (w *wireWriter) strs(ss []string) {
	w.uint(uint64(len(ss)))
	for _, s := range ss {
		w.str(s)
	}
}

// errWire is wrapped by every decoding error (inside ErrBadSpec).
var errWire = errors.New("malformed input")

type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errWire, what)
	}
}

func (r *wireReader) uint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) int(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// small reads a uvarint that must fit an int below limit.
func (r *wireReader) small(what string, limit uint64) int {
	v := r.uint(what)
	if v >= limit {
		r.fail(what + " out of range")
		return 0
	}
	return int(v)
}

func (r *wireReader) bool(what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail(what)
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

func (r *wireReader) bytes(what string) []byte {
	n := r.uint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(what + " truncated")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) str(what string) string { return string(r.bytes(what)) }

// count reads a list's length: every element takes at least a byte, so a
// count beyond what is left is malformed (and allocates nothing).
func (r *wireReader) count(what string) int {
	n := r.uint(what)
	if n > uint64(len(r.b)) {
		r.fail(what + " count")
		return 0
	}
	return int(n)
}

func (r *wireReader) strs(what string) []string {
	n := r.count(what)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.str(what)
	}
	return out
}

func (r *wireReader) ports(what string) []uint16 {
	n := r.count(what)
	if n == 0 {
		return nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(r.small(what, math.MaxUint16+1))
	}
	return out
}

func encodeSpec(w *wireWriter, s Spec) {
	w.uint(uint64(s.Version))
	w.str(s.App)
	w.str(s.Program)
	w.strs(s.Argv)
	w.strs(s.Env)
	w.str(s.Dir)
	w.uint(uint64(s.ParentPID))
	w.uint(uint64(len(s.FDs)))
	for _, fd := range s.FDs {
		w.uint(uint64(fd))
	}
	w.bool(s.Strict)
	w.bool(s.ExecOnce)
	ll := s.Landlock
	w.bool(ll.FS)
	w.bool(ll.WriteOnly)
	w.uint(uint64(len(ll.Paths)))
	for _, p := range ll.Paths {
		w.str(p.Path)
		w.uint(uint64(p.Access))
		w.str(p.Why)
		w.bool(p.Optional)
	}
	w.bool(ll.Net)
	for _, ports := range [][]uint16{ll.ConnectTCP, ll.BindTCP} {
		w.uint(uint64(len(ports)))
		for _, p := range ports {
			w.uint(uint64(p))
		}
	}
	w.bool(ll.UnixSockets)
	w.bool(ll.Scope)
	w.int(int64(ll.MinABI))
	w.bool(ll.LogApp)
	w.uint(uint64(len(s.Seccomp)))
	for _, r := range s.Seccomp {
		w.str(r.Name)
		w.str(r.Errno)
		w.str(r.Why)
		w.bool(r.Notify)
		w.uint(uint64(len(r.Args)))
		for _, a := range r.Args {
			w.uint(uint64(a.Index))
			w.str(string(a.Op))
			w.uint(a.Value)
			w.uint(a.Mask)
		}
	}
}

func decodeSpec(r *wireReader) Spec {
	const maxInt = math.MaxInt32
	var s Spec
	s.Version = r.small("version", maxInt)
	s.App = r.str("app")
	s.Program = r.str("program")
	s.Argv = r.strs("argv")
	s.Env = r.strs("env")
	s.Dir = r.str("dir")
	s.ParentPID = r.small("parent_pid", maxInt)
	if n := r.count("fds"); n > 0 {
		s.FDs = make([]int, n)
		for i := range s.FDs {
			s.FDs[i] = r.small("fd", maxInt)
		}
	}
	s.Strict = r.bool("strict")
	s.ExecOnce = r.bool("exec_once")
	ll := &s.Landlock
	ll.FS = r.bool("landlock fs")
	ll.WriteOnly = r.bool("landlock write_only")
	if n := r.count("landlock paths"); n > 0 {
		ll.Paths = make([]PathRule, n)
		for i := range ll.Paths {
			p := &ll.Paths[i]
			p.Path = r.str("path")
			p.Access = Access(r.small("access", math.MaxUint16+1))
			p.Why = r.str("why")
			p.Optional = r.bool("optional")
		}
	}
	ll.Net = r.bool("landlock net")
	ll.ConnectTCP = r.ports("connect_tcp")
	ll.BindTCP = r.ports("bind_tcp")
	ll.UnixSockets = r.bool("landlock unix_sockets")
	ll.Scope = r.bool("landlock scope")
	if v := r.int("min_abi"); v >= -maxInt && v <= maxInt {
		ll.MinABI = int(v)
	} else {
		r.fail("min_abi out of range")
	}
	ll.LogApp = r.bool("landlock log_app")
	if n := r.count("seccomp"); n > 0 {
		s.Seccomp = make([]Syscall, n)
		for i := range s.Seccomp {
			sc := &s.Seccomp[i]
			sc.Name = r.str("syscall")
			sc.Errno = r.str("errno")
			sc.Why = r.str("why")
			sc.Notify = r.bool("notify")
			if m := r.count("args"); m > 0 {
				sc.Args = make([]ArgCmp, m)
				for j := range sc.Args {
					a := &sc.Args[j]
					a.Index = uint(r.small("arg index", 64))
					a.Op = CmpOp(r.str("arg op"))
					a.Value = r.uint("arg value")
					a.Mask = r.uint("arg mask")
				}
			}
		}
	}
	return s
}

// appendStatus is the status line for m: the JSON encoding/json would
// write (ParseStatus reads it with encoding/json), without its cost.
func appendStatus(b []byte, m statusMsg) []byte {
	strs := func(b []byte, ss []string) []byte {
		b = append(b, '[')
		for i, s := range ss {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s)
		}
		return append(b, ']')
	}
	switch {
	case m.Failure != nil:
		f := m.Failure
		b = append(b, `{"failure":{"layer":`...)
		b = appendJSONString(b, f.Layer)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, f.Message)
		if f.Errno != "" {
			b = append(b, `,"errno":`...)
			b = appendJSONString(b, f.Errno)
		}
		if f.Code != 0 {
			b = append(b, `,"code":`...)
			b = strconv.AppendInt(b, int64(f.Code), 10)
		}
		b = append(b, "}}"...)
	case m.Report != nil:
		r := m.Report
		b = append(b, `{"report":{"landlock_abi":`...)
		b = strconv.AppendInt(b, int64(r.LandlockABI), 10)
		b = append(b, `,"layers":`...)
		b = strs(b, r.Layers)
		b = append(b, `,"missing":`...)
		b = strs(b, r.Missing)
		b = append(b, "}}"...)
	default:
		b = append(b, "{}"...)
	}
	return append(b, '\n')
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as encoding/json makes it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
