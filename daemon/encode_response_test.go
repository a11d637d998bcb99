package daemon

import (
	"encoding/json"
	"testing"

	"octosup/control"
)

// encodeResponse writes json.Marshal's bytes, whatever the answer: Data
// it appends as it is, and Data json.Marshal would rewrite (space, HTML
// escapes, a name twice) it leaves to json.Marshal.
func TestEncodeResponseIsJSONMarshal(t *testing.T) {
	for _, data := range []string{"", `{"call_id":"b1","accepted":true}`, `[1,"x",null]`, `{"a": 1}`, `{"a":"<b>"}`,
		`{"a":"\u2028"}`, "{\"a\":\"\u2028\"}", `{"a":1,"a":2}`, `"x"`} {
		for _, resp := range []control.Response{
			{ID: 7, OK: true, Data: json.RawMessage(data)},
			{ID: 0, OK: true, Data: json.RawMessage(data)},
			{ID: 7, OK: false, Error: &control.Error{Code: "x", Message: "y"}},
		} {
			want, werr := json.Marshal(resp)
			got, gerr := encodeResponse(resp)
			if string(got) != string(want) || (werr == nil) != (gerr == nil) {
				t.Errorf("encodeResponse(%+v) = %s, %v; json.Marshal %s, %v", resp, got, gerr, want, werr)
			}
		}
	}
}

// spacedJSON marshals with space in it, which json.Marshal compacts.
type spacedJSON struct{}

func (spacedJSON) MarshalJSON() ([]byte, error) { return []byte(`{ "a" : [1, 2] }`), nil }

// encodeMarshalled writes json.Marshal's bytes for any answer whose Data
// json.Marshal wrote, as dispatch's is: json.Marshal writes its own
// output again as it is (compact, HTML escapes made).
func TestEncodeMarshalledIsJSONMarshal(t *testing.T) {
	for _, v := range []any{
		control.ToolCallData{CallID: "b1", Accepted: true},
		map[string]any{"a": "<b>&", "c": "\u2028 \u2029", "d": []any{1.5, nil, true}},
		json.RawMessage(`{"a": 1, "b": "<x>"}`),
		spacedJSON{},
		"x", []int{}, struct{}{},
	} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, resp := range []control.Response{
			{ID: 7, OK: true, Data: data},
			{ID: 0, OK: true, Data: data},
			{ID: 7, OK: true},
		} {
			want, werr := json.Marshal(resp)
			got, gerr := encodeMarshalled(resp)
			if string(got) != string(want) || werr != nil || gerr != nil {
				t.Errorf("encodeMarshalled(%+v) = %s, %v; json.Marshal %s, %v", resp, got, gerr, want, werr)
			}
		}
	}
}

func BenchmarkEncodeResponse(b *testing.B) {
	resp := control.Response{ID: 1234, OK: true, Data: json.RawMessage(`{"call_id":"b12345","accepted":true}`)}
	b.Run("encodeResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeResponse(resp)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(resp)
		}
	})
}
