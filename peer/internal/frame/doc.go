// Package frame is the peer link's wire codec: the frames an app and the
// daemon exchange on a hub, one JSON object per line under "octos_peer"
// (docs/protocol.md, "Frames"), and the link's error codes.
//
// Decoding is strict: internal/strictjson checks a line (valid UTF-8, one
// value, no duplicate key, at most strictjson.MaxDepth levels) and words
// what it refuses, then go-json-experiment/json (v2) reads it into the
// wire's structs with exact names and RejectUnknownMembers. A member a
// frame does not define is bad_frame, never ignored: identity comes from
// the socket, so a frame that names an app or an account must fail
// rather than be half-read. Reader splits a hub
// into lines under a size cap; ParseLine tells a peer-link frame from a
// pass-through one; EncodeDown writes the golden bytes of
// testdata/golden. The app's side (encoding up frames, decoding down
// ones), which the daemon never plays, is package frametest, a second
// implementation on encoding/json/v2 for the tests.
//
// It is internal to peer: the daemon and the apps speak the wire, not
// this package.
package frame
