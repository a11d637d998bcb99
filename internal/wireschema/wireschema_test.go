package wireschema

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"octosup/configs/schema"
	"octosup/control"
)

// goldenLine is one line of a control golden file: "> " a request the
// client sent, "< " what the daemon sent.
type goldenLine struct {
	file string
	sent bool
	text []byte
}

func controlGolden(t *testing.T) map[string][]goldenLine {
	t.Helper()
	files, err := filepath.Glob("../../control/testdata/golden/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no control golden files: %v", err)
	}
	out := map[string][]goldenLine{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		for sc.Scan() {
			l := sc.Text()
			dir, text, ok := strings.Cut(l, " ")
			if !ok || (dir != ">" && dir != "<") {
				t.Fatalf("%s: a line that is neither > nor <: %q", f, l)
			}
			out[name] = append(out[name], goldenLine{file: name, sent: dir == ">", text: []byte(text)})
		}
	}
	return out
}

// TestControlGoldenLinesFitTheSchemas: every line of every control golden
// file fits its schema; a request the daemon refused as malformed
// (bad_request, unknown_op) fits none.
func TestControlGoldenLinesFitTheSchemas(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, lines := range controlGolden(t) {
		ops := map[int64]string{}
		refused := map[int64]bool{}
		for _, l := range lines {
			var m struct {
				ID    json.RawMessage `json:"id"`
				Op    string          `json:"op"`
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(l.text, &m); err != nil {
				t.Fatalf("%s: not JSON: %s", name, l.text)
			}
			var id int64
			json.Unmarshal(m.ID, &id)
			if l.sent {
				ops[id] = m.Op
			} else if m.Error != nil && (m.Error.Code == "bad_request" || m.Error.Code == "unknown_op") {
				refused[id] = true
			}
		}
		for _, l := range lines {
			var m struct {
				ID    json.RawMessage `json:"id"`
				Event *string         `json:"event"`
			}
			json.Unmarshal(l.text, &m)
			var id int64
			idOK := json.Unmarshal(m.ID, &id) == nil
			var err error
			switch {
			case l.sent && (!idOK || refused[id]):
				if s.Request(l.text) == nil {
					t.Errorf("%s: the daemon refused %s, but it fits the request schema", name, l.text)
				}
				continue
			case l.sent:
				err = s.Request(l.text)
			case m.Event != nil:
				err = s.Event(l.text)
			default:
				err = s.Answer(ops[id], l.text)
			}
			if err != nil {
				t.Errorf("%s: %s\n%v", name, l.text, err)
			}
			n++
		}
	}
	t.Logf("%d golden lines fit", n)
}

// TestEveryOpHasSchemasAndAnExample: the ops hello lists are exactly those
// the schemas type (args and data), and each has a golden example, which
// docs/control.md quotes.
func TestEveryOpHasSchemasAndAnExample(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	golden := controlGolden(t)
	var hello struct {
		Data struct {
			Ops    []string `json:"ops"`
			Topics []string `json:"topics"`
		} `json:"data"`
	}
	if h := golden["hello"]; len(h) != 2 || json.Unmarshal(h[1].text, &hello) != nil {
		t.Fatalf("hello.jsonl: %d lines", len(h))
	}
	if !slices.Equal(hello.Data.Ops, s.Ops()) {
		t.Errorf("the daemon serves %v; the answer schema types %v", hello.Data.Ops, s.Ops())
	}
	args := slices.Sorted(func(yield func(string) bool) {
		for op := range s.args {
			if !yield(op) {
				return
			}
		}
	})
	if !slices.Equal(hello.Data.Ops, args) {
		t.Errorf("the daemon serves %v; the request schema types %v", hello.Data.Ops, args)
	}
	sent := map[string]bool{}
	for _, lines := range golden {
		for _, l := range lines {
			var r struct {
				Op string `json:"op"`
			}
			if l.sent && json.Unmarshal(l.text, &r) == nil {
				sent[r.Op] = true
			}
		}
	}
	for _, op := range hello.Data.Ops {
		if !sent[op] {
			t.Errorf("no golden file sends %s", op)
		}
	}
}

// TestHubGoldenFramesFitTheSchemas: peer/internal/frame/testdata/golden, both ways.
func TestHubGoldenFramesFitTheSchemas(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../peer/internal/frame/testdata/golden/*.json")
	if len(files) == 0 {
		t.Fatal("no hub golden files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check := s.Up
		if strings.HasPrefix(filepath.Base(f), "down_") {
			check = s.Down
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if err := check(line); err != nil {
				t.Errorf("%s: %s\n%v", filepath.Base(f), line, err)
			}
		}
	}
}

// TestSchemasRefuseWhatTheDaemonRefuses: lines the daemon refuses do not
// fit the schemas either, so a client checked against them is not
// surprised.
func TestSchemasRefuseWhatTheDaemonRefuses(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		check func([]byte) error
		line  string
	}{
		{"id 0", s.Request, `{"id":0,"op":"status"}`},
		{"a string id", s.Request, `{"id":"1","op":"status"}`},
		{"an unknown op", s.Request, `{"id":1,"op":"stat"}`},
		{"an unknown member", s.Request, `{"id":1,"op":"status","extra":1}`},
		{"an args typo", s.Request, `{"id":1,"op":"subscribe","args":{"topic":["state"]}}`},
		{"an unknown topic", s.Request, `{"id":1,"op":"subscribe","args":{"topics":["states"]}}`},
		{"tool.call without confirm", s.Request, `{"id":1,"op":"tool.call","args":{"app":"a","call":{"call_id":"c","name":"t","timeout_ms":1,"context_id":"x","caller":"k"}}}`},
		{"tool.call without caller", s.Request, `{"id":1,"op":"tool.call","args":{"app":"a","call":{"call_id":"c","name":"t","confirm":"none","timeout_ms":1,"context_id":"x"}}}`},
		{"an event that is a string", s.Request, `{"id":1,"op":"request.event","args":{"app":"a","req_id":"r","event":"hi"}}`},
		{"an event without type", s.Request, `{"id":1,"op":"request.event","args":{"app":"a","req_id":"r","event":{"text":"hi"}}}`},
		{"turn.end without reason", s.Request, `{"id":1,"op":"request.event","args":{"app":"a","req_id":"r","event":{"type":"turn.end","turn_id":"T1"}}}`},
		{"an answer with id 0", func(b []byte) error { return s.Answer("", b) }, `{"id":0,"ok":false,"error":{"code":"x","message":"y"}}`},
		{"an ok answer with an error", func(b []byte) error { return s.Answer("", b) }, `{"id":1,"ok":true,"error":{"code":"x","message":"y"}}`},
		{"a failed answer without one", func(b []byte) error { return s.Answer("", b) }, `{"id":1,"ok":false}`},
		{"status data of another shape", func(b []byte) error { return s.Answer("status", b) }, `{"id":1,"ok":true,"data":{"apps":[{"id":"a"}]}}`},
		{"an unknown event", s.Event, `{"event":"states","app":"a"}`},
		{"a state event with an unknown state", s.Event, `{"event":"state","app":"a","state":"zombie","restarts":0,"since":"2026-12-01T20:00:00Z"}`},
		{"a case-variant envelope", s.Up, `{"Octos_Peer":{"type":"request","req_id":"r1","method":"m"}}`},
		{"a member beside the envelope", s.Up, `{"octos_peer":{"type":"request","req_id":"r1","method":"m"},"app":"x"}`},
		{"identity in a request", s.Up, `{"octos_peer":{"type":"request","req_id":"r1","method":"octos.session.open","app":"other"}}`},
		{"identity in args", s.Up, `{"octos_peer":{"type":"request","req_id":"r1","method":"octos.session.open","args":{"client":"x"}}}`},
		{"a tool_result ok with an error", s.Up, `{"octos_peer":{"type":"tool_result","call_id":"c","ok":true,"error":{"code":"x","message":"y"}}}`},
		{"awaiting_confirmation false", s.Up, `{"octos_peer":{"type":"tool_result","call_id":"c","awaiting_confirmation":false}}`},
		{"an empty req_id", s.Up, `{"octos_peer":{"type":"request","req_id":"","method":"m"}}`},
		{"a down frame the daemon never sends", s.Down, `{"octos_peer":{"type":"request","req_id":"r1","method":"m"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.check([]byte(tc.line)) == nil {
				t.Fatalf("%s fits the schema", tc.line)
			}
		})
	}
}

// TestControlDocQuotesTheGoldenFiles: every example line of
// docs/control.md (a jsonl block) is a line of a golden file, so the page
// shows what the daemon sends; and every golden file is shown.
func TestControlDocQuotesTheGoldenFiles(t *testing.T) {
	doc, err := os.ReadFile("../../docs/control.md")
	if err != nil {
		t.Fatal(err)
	}
	golden := controlGolden(t)
	lines := map[string]string{}
	for name, ls := range golden {
		for _, l := range ls {
			dir := "< "
			if l.sent {
				dir = "> "
			}
			lines[dir+string(l.text)] = name
		}
	}
	shown := map[string]bool{}
	in := false
	for i, l := range strings.Split(string(doc), "\n") {
		switch {
		case l == "```jsonl":
			in = true
		case l == "```":
			in = false
		case in:
			name, ok := lines[l]
			if !ok {
				t.Errorf("docs/control.md:%d quotes a line no golden file has: %s", i+1, l)
			}
			shown[name] = true
		}
	}
	for name := range golden {
		if !shown[name] {
			t.Errorf("docs/control.md shows nothing of control/testdata/golden/%s.jsonl", name)
		}
	}
}

// TestJailGrantsFitTheSchema: a status answer whose jail report carries
// desktop grants, marshalled from the daemon's own types, fits; a grant
// given some other way does not.
func TestJailGrantsFitTheSchema(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	app := control.AppStatus{ID: "paint", State: "running", Since: time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC),
		Jail: &control.JailReport{LandlockABI: 7, Layers: []string{"landlock", "seccomp"}, Missing: []string{}, Grants: []control.Grant{
			{Name: "wayland", Path: "/run/user/1000/wayland-0", Via: "guard-connect"},
			{Name: "dri", Path: "/dev/dri/renderD128", Via: "landlock"},
			{Name: "dri", Via: "no-render-node"},
		}}}
	data, err := json.Marshal(control.StatusData{Apps: []control.AppStatus{app}, Store: &control.StoreStatus{Path: "/s", Healthy: true, Notes: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(`{"id":1,"ok":true,"data":` + string(data) + `}`)
	if err := s.Answer("status", line); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	bad := bytes.Replace(line, []byte(`"via":"landlock"`), []byte(`"via":"bind-mount"`), 1)
	if s.Answer("status", bad) == nil {
		t.Fatalf("%s fits the schema", bad)
	}
}

// TestSchemasNameTheirProtocol: each schema file says which protocol
// version it describes, the one hello answers.
func TestSchemasNameTheirProtocol(t *testing.T) {
	for _, name := range schema.Names() {
		var s struct {
			Comment string `json:"$comment"`
		}
		b, err := schema.File(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("octosup protocol %d ", control.ProtocolVersion); !strings.HasPrefix(s.Comment, want) {
			t.Errorf("%s: $comment %q, want it to begin %q", name, s.Comment, want)
		}
	}
}
