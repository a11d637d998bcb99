package schema

import (
	"encoding/json"
	"testing"
)

// TestFiles: every file of configs/schema is a draft 2020-12
// schema whose $id names the file, as the validator loads them.
func TestFiles(t *testing.T) {
	names := Names()
	if len(names) != 5 {
		t.Fatalf("configs/schema has %v, want the control request, answer and event and the hub's up and down", names)
	}
	for _, name := range names {
		b, err := File(name)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
		}
		if err := json.Unmarshal(b, &s); err != nil || s.Schema != "https://json-schema.org/draft/2020-12/schema" || s.ID != "https://octosup.invalid/"+name {
			t.Errorf("%s: %+v %v", name, s, err)
		}
	}
}
