package configs

import (
	"encoding/json"
	"testing"
)

func TestFiles(t *testing.T) {
	for name, get := range map[string]func() []byte{"schema": Schema, "example": Example} {
		first := get()
		var v map[string]any
		if err := json.Unmarshal(first, &v); err != nil {
			t.Fatalf("%s is not a JSON object: %v", name, err)
		}
		// Each call is a copy: a caller that scribbles on its bytes
		// changes nothing for the next one.
		first[0] = 'X'
		if again := get(); again[0] != '{' {
			t.Errorf("%s: a caller's change leaked into the next call", name)
		}
	}
	var s struct {
		Schema string `json:"$schema"`
		ID     string `json:"$id"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil || s.Schema != "https://json-schema.org/draft/2020-12/schema" || s.ID == "" {
		t.Errorf("the schema does not declare draft 2020-12 and an $id: %+v %v", s, err)
	}
}

// TestWireSchemas: every file of configs/schema is a draft 2020-12
// schema whose $id names the file, as the validator loads them.
func TestWireSchemas(t *testing.T) {
	names := WireSchemas()
	if len(names) != 5 {
		t.Fatalf("configs/schema has %v, want the control request, answer and event and the hub's up and down", names)
	}
	for _, name := range names {
		b, err := WireSchema(name)
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
