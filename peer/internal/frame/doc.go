// Package frame is the peer link's wire codec: the frames an app and the
// daemon exchange on a hub, one JSON object per line under "octos_peer"
// (docs/protocol.md, "Frames"), and the link's error codes.
//
// Decoding is strict: internal/strictjson checks a line (UTF-8, one
// value, no duplicate key, bounded depth), then json/v2 reads it with
// exact names and RejectUnknownMembers. An undefined member is bad_frame,
// never ignored: identity comes from the socket, so a frame that names an
// app or an account must fail rather than be half-read. EncodeDown writes
// the golden bytes of testdata/golden. The app's side, which the daemon
// never plays, is a second implementation in peer's tests
// (frametest_test.go).
//
// It is internal to peer: the daemon and the apps speak the wire, not
// this package.
package frame
