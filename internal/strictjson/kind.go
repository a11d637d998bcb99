package strictjson

// KindOf names the kind of the JSON value v (checked text, not empty) for
// a refusal: "an array", "a string", "a boolean", "null" or "a number";
// an object is the caller's to expect.
func KindOf(v []byte) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
