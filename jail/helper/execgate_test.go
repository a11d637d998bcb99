package helper

import (
	"testing"
	"unsafe"
)

// TestPlaceShrinksToTheAddressSpace: where the user address space ends
// below the gate's bound (arm64 kernels with 39-bit addresses, UML), a
// page past its end is ENOMEM, and every processes: false start failed.
// Drawn below 2^62, far past any kernel's end, the placement still lands,
// in memory that is there.
func TestPlaceShrinksToTheAddressSpace(t *testing.T) {
	for range 20 {
		var e ExecArgs
		at, err := e.placeBelow(func(_ uintptr, b []byte) { copy(b, "ok\x00") }, 3, true, 1<<62)
		if err != nil {
			t.Fatalf("placeBelow 2^62: %v", err)
		}
		if got := string(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), at)), 2)); got != "ok" {
			t.Fatalf("at %#x: %q", at, got)
		}
		e.Free()
	}
}
