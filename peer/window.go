package peer

// idWindow holds the last ids added, up to the size of its first add.
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

// remove lets id go early; its ring slot is reused in turn.
func (w *idWindow) remove(id string) { delete(w.at, id) }

func (w *idWindow) clear() { *w = idWindow{} }
