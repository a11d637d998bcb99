package jail

import (
	"fmt"
	"strings"
	"testing"
)

// TestDroppedKeysLogBounded: an app that sets endless distinct (and
// long) property keys gets a bounded number of bounded log lines.
func TestDroppedKeysLogBounded(t *testing.T) {
	var keys []string
	mores := 0
	dropped := eachOnce(3, func(key string, more bool) {
		if more {
			mores++
			return
		}
		keys = append(keys, key)
	})
	for i := range 1000 {
		dropped(fmt.Sprintf("k%d%s", i%10, strings.Repeat("x", 1<<20)))
		dropped("short")
	}
	if len(keys) != 3 || mores != 1 {
		t.Fatalf("logged %d keys and %d 'more' lines, want 3 and 1", len(keys), mores)
	}
	for _, k := range keys {
		if len(k) > maxKeyLogged+3 {
			t.Fatalf("logged a key of %d bytes, want at most %d", len(k), maxKeyLogged+3)
		}
	}
	if keys[1] != "short" {
		t.Fatalf("second key %q, want short: each key once", keys[1])
	}
}
