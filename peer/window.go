package peer

// idWindow holds the last ids added to it, up to the size of its first
// add: older ones fall out. A peer keeps two (its mu guards them): the
// call ids that finished, whose reuse is a duplicate, and the req_ids
// that timed out at the kernel, whose late reply may still come.
type idWindow struct {
	at   map[string]int // each id held, at its place in ring
	ring []string
	next int
}

func (w *idWindow) has(id string) bool {
	_, ok := w.at[id]
	return ok
}

func (w *idWindow) add(id string, size int) {
	if w.at == nil {
		w.at = make(map[string]int, size)
		w.ring = make([]string, size)
	}
	if old := w.ring[w.next]; old != "" && w.at[old] == w.next {
		delete(w.at, old)
	}
	w.ring[w.next] = id
	w.at[id] = w.next
	w.next = (w.next + 1) % len(w.ring)
}

// remove lets id go before its time; its place in ring is left to the
// next add that comes round to it.
func (w *idWindow) remove(id string) { delete(w.at, id) }

// clear lets every id go.
func (w *idWindow) clear() { *w = idWindow{} }
