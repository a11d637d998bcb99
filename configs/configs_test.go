package configs

import (
	"encoding/json"
	"testing"
)

func TestFiles(t *testing.T) {
	first := Schema()
	var v map[string]any
	if err := json.Unmarshal(first, &v); err != nil {
		t.Fatalf("the schema is not a JSON object: %v", err)
	}
	// Each call is a copy: a caller that scribbles on its bytes
	// changes nothing for the next one.
	first[0] = 'X'
	if again := Schema(); again[0] != '{' {
		t.Error("a caller's change leaked into the next call")
	}
	var s struct {
		Schema string `json:"$schema"`
		ID     string `json:"$id"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil || s.Schema != "https://json-schema.org/draft/2020-12/schema" || s.ID == "" {
		t.Errorf("the schema does not declare draft 2020-12 and an $id: %+v %v", s, err)
	}
}
