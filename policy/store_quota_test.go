package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// turnsOf is a session's whole history, oldest first.
func turnsOf(s *Store, session uint64) ([]Turn, error) {
	var out []Turn
	var bad error
	err := s.History(session, func(v []byte) bool {
		var t Turn
		if bad = json.Unmarshal(v, &t); bad != nil {
			return false
		}
		out = append(out, t)
		return true
	})
	if err == nil {
		err = bad
	}
	slices.Reverse(out)
	return out, err
}

func turnIDs(t *testing.T, s *Store, session uint64) string {
	t.Helper()
	turns, err := turnsOf(s, session)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tn := range turns {
		ids = append(ids, tn.TurnID)
	}
	return strings.Join(ids, " ")
}

func turn(id string, input string) Turn {
	return Turn{TurnID: id, Input: json.RawMessage(`"` + input + `"`), Events: []json.RawMessage{}, End: "completed"}
}

func mustOpen(t *testing.T, s *Store, app, account, title string, lim Limits, busy Busy) Session {
	t.Helper()
	se, err := s.OpenSession(app, account, title, time.Now(), lim, busy)
	if err != nil {
		t.Fatal(err)
	}
	return se
}

func exists(t *testing.T, s *Store, id uint64) bool {
	t.Helper()
	var ok bool
	if err := s.db.View(func(tx *bolt.Tx) error {
		ok = tx.Bucket(bucketSessions).Get(u64(id)) != nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestSessionsLimitEvictsOldestClosedUntitled: at the per-account cap, a
// new session evicts the oldest untitled session no context holds (with
// its turns); titled and busy sessions are never evicted, and when
// nothing can be, the open is refused with a LimitError and changes
// nothing. Other accounts and other apps count apart.
func TestSessionsLimitEvictsOldestClosedUntitled(t *testing.T) {
	s, _ := openTestStore(t)
	lim := Limits{Sessions: 3}
	titled := mustOpen(t, s, "notes", "personal", "groceries", lim, nil)
	u1 := mustOpen(t, s, "notes", "personal", "", lim, nil)
	u2 := mustOpen(t, s, "notes", "personal", "", lim, nil)
	if err := s.AppendTurn(u1.ID, turn("T1", "x"), lim, nil); err != nil {
		t.Fatal(err)
	}
	other := mustOpen(t, s, "notes", "work", "", lim, nil)
	otherApp := mustOpen(t, s, "mail", "personal", "", lim, nil)
	busy := func(id uint64) bool { return id == u2.ID }
	u3 := mustOpen(t, s, "notes", "personal", "", lim, busy) // evicts u1, the oldest not busy
	if exists(t, s, u1.ID) || !exists(t, s, u2.ID) || !exists(t, s, titled.ID) || !exists(t, s, other.ID) || !exists(t, s, otherApp.ID) {
		t.Fatal("eviction took the wrong session")
	}
	if ids := turnIDs(t, s, u1.ID); ids != "" {
		t.Fatalf("evicted session's turns kept: %s", ids)
	}
	// Reopening a title is not a new session: no eviction, no refusal.
	if again := mustOpen(t, s, "notes", "personal", "groceries", lim, nil); again.ID != titled.ID {
		t.Fatal("title reopened a new session")
	}
	// All held: u2 and u3 busy, the third titled.
	allBusy := func(id uint64) bool { return id == u2.ID || id == u3.ID }
	before, _ := s.Usage("notes")
	_, err := s.OpenSession("notes", "personal", "", time.Now(), lim, allBusy)
	var le *LimitError
	if !errors.Is(err, ErrLimit) || !errors.As(err, &le) || le.Limit != "sessions" || le.Max != 3 {
		t.Fatalf("open with nothing evictable: %v", err)
	}
	if _, err := s.OpenSession("notes", "personal", "shopping", time.Now(), lim, allBusy); !errors.Is(err, ErrLimit) {
		t.Fatalf("a new title with nothing evictable: %v", err)
	}
	after, _ := s.Usage("notes")
	if fmt.Sprint(before) != fmt.Sprint(after) || after.Sessions["personal"] != 3 || after.Sessions["work"] != 1 {
		t.Fatalf("a refused open changed the counts: %+v, then %+v", before, after)
	}
	// u2's context closes: it is the one to go.
	u4 := mustOpen(t, s, "notes", "personal", "", lim, func(id uint64) bool { return id == u3.ID })
	if exists(t, s, u2.ID) || !exists(t, s, u3.ID) || !exists(t, s, u4.ID) {
		t.Fatal("the closed session was not the one evicted")
	}
	checkCounts(t, s)
}

// TestTurnsLimitDropsOldest: a session keeps its newest lim.Turns turns.
func TestTurnsLimitDropsOldest(t *testing.T) {
	s, _ := openTestStore(t)
	lim := Limits{Turns: 5}
	se := mustOpen(t, s, "notes", "", "long", lim, nil)
	for i := range 12 {
		if err := s.AppendTurn(se.ID, turn(fmt.Sprint("T", i), "x"), lim, nil); err != nil {
			t.Fatal(err)
		}
	}
	if ids := turnIDs(t, s, se.ID); ids != "T7 T8 T9 T10 T11" {
		t.Fatalf("kept %s, want the newest 5", ids)
	}
	// A lower cap (a reconfigured daemon) takes effect at the next turn.
	if err := s.AppendTurn(se.ID, turn("T12", "x"), Limits{Turns: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if ids := turnIDs(t, s, se.ID); ids != "T11 T12" {
		t.Fatalf("kept %s, want the newest 2", ids)
	}
	checkCounts(t, s)
}

// TestBytesLimit: a turn that would pass the app's bytes first evicts
// its other closed untitled sessions, then drops its own session's
// oldest turns; titled and busy sessions stay; a turn that cannot fit is
// refused and changes nothing. Another app's records are not touched.
func TestBytesLimit(t *testing.T) {
	s, _ := openTestStore(t)
	big := strings.Repeat("x", 1000)
	lim := Limits{Bytes: 6000}
	keep := mustOpen(t, s, "notes", "", "keep", lim, nil)
	if err := s.AppendTurn(keep.ID, turn("K", big), lim, nil); err != nil {
		t.Fatal(err)
	}
	old := mustOpen(t, s, "notes", "", "", lim, nil)
	if err := s.AppendTurn(old.ID, turn("O", big), lim, nil); err != nil {
		t.Fatal(err)
	}
	held := mustOpen(t, s, "notes", "", "", lim, nil)
	mailSe := mustOpen(t, s, "mail", "", "", lim, nil)
	if err := s.AppendTurn(mailSe.ID, turn("M", big), lim, nil); err != nil {
		t.Fatal(err)
	}
	busy := func(id uint64) bool { return id == held.ID }
	cur := mustOpen(t, s, "notes", "", "", lim, busy)
	for i := range 3 {
		if err := s.AppendTurn(cur.ID, turn(fmt.Sprint("C", i), big), lim, busy); err != nil {
			t.Fatal(err)
		}
	}
	// Five turns of ~1 KiB and four sessions do not fit 6000 bytes:
	// the closed untitled "old" went first.
	if exists(t, s, old.ID) || !exists(t, s, held.ID) || !exists(t, s, keep.ID) || !exists(t, s, mailSe.ID) {
		t.Fatal("wrong eviction")
	}
	for i := 3; i < 8; i++ {
		if err := s.AppendTurn(cur.ID, turn(fmt.Sprint("C", i), big), lim, busy); err != nil {
			t.Fatal(err)
		}
		if u, _ := s.Usage("notes"); u.Bytes > lim.Bytes {
			t.Fatalf("notes holds %d bytes, over %d", u.Bytes, lim.Bytes)
		}
	}
	// Then its own oldest turns.
	ids := turnIDs(t, s, cur.ID)
	if !strings.HasSuffix(ids, "C6 C7") || strings.HasPrefix(ids, "C0") {
		t.Fatalf("current session holds %s", ids)
	}
	if turnIDs(t, s, keep.ID) != "K" || turnIDs(t, s, mailSe.ID) != "M" {
		t.Fatal("a titled session, or another app's, lost its turns")
	}
	// A turn larger than what the other sessions leave: refused.
	before, _ := s.Usage("notes")
	huge := strings.Repeat("y", 5000)
	err := s.AppendTurn(cur.ID, turn("H", huge), lim, busy)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "bytes" {
		t.Fatalf("a turn that cannot fit: %v", err)
	}
	after, _ := s.Usage("notes")
	if before.Bytes != after.Bytes || turnIDs(t, s, cur.ID) != ids {
		t.Fatal("a refused turn changed the store")
	}
	if err := s.AppendTurn(cur.ID, turn("H", strings.Repeat("y", 7000)), lim, busy); !errors.Is(err, ErrLimit) {
		t.Fatalf("a turn larger than the limit alone: %v", err)
	}
	// A session with no room left: opens refused too.
	both := func(id uint64) bool { return id == held.ID || id == cur.ID }
	if _, err := s.OpenSession("notes", "", "", time.Now(), Limits{Bytes: after.Bytes}, both); !errors.Is(err, ErrLimit) {
		t.Fatalf("open at the bytes limit with nothing evictable: %v", err)
	}
	checkCounts(t, s)
}

// TestHistoryReadsNewestFirstAndStops: History walks newest first and
// reads no turn past the one its reader stopped at.
func TestHistoryReadsNewestFirstAndStops(t *testing.T) {
	s, _ := openTestStore(t)
	se := mustOpen(t, s, "notes", "", "t", Limits{}, nil)
	for i := range 200 {
		if err := s.AppendTurn(se.ID, turn(fmt.Sprint("T", i), "x"), Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	err := s.History(se.ID, func(v []byte) bool {
		var tn Turn
		if err := json.Unmarshal(v, &tn); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, tn.TurnID)
		return len(seen) < 3
	})
	if err != nil || strings.Join(seen, " ") != "T199 T198 T197" {
		t.Fatalf("history handed %v (%v), want the newest three and no more", seen, err)
	}
	if err := s.History(12345, func([]byte) bool { t.Fatal("a turn of no session"); return false }); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaCountsMatchTheRecords: after a random run of opens, turns and
// evictions the counters are what a count from scratch finds, and a
// state file from before the counters gets them on open.
func TestQuotaCountsMatchTheRecords(t *testing.T) {
	s, path := openTestStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	lim := Limits{Sessions: 6, Turns: 4, Bytes: 20000}
	var ids []uint64
	for range 400 {
		app := []string{"notes", "mail"}[rng.IntN(2)]
		account := []string{"", "work"}[rng.IntN(2)]
		busy := func(id uint64) bool { return len(ids) > 0 && id == ids[len(ids)-1] }
		switch rng.IntN(3) {
		case 0:
			title := ""
			if rng.IntN(4) == 0 {
				title = fmt.Sprint("t", rng.IntN(3))
			}
			if se, err := s.OpenSession(app, account, title, time.Now(), lim, busy); err == nil {
				ids = append(ids, se.ID)
			} else if !errors.Is(err, ErrLimit) {
				t.Fatal(err)
			}
		default:
			if len(ids) == 0 {
				continue
			}
			id := ids[rng.IntN(len(ids))]
			err := s.AppendTurn(id, turn("T", strings.Repeat("z", rng.IntN(3000))), lim, busy)
			if err != nil && !errors.Is(err, ErrLimit) && !errors.Is(err, ErrNoSession) {
				t.Fatal(err)
			}
		}
	}
	checkCounts(t, s)
	for _, app := range []string{"notes", "mail"} {
		u, _ := s.Usage(app)
		if u.Bytes > lim.Bytes || u.Sessions[""] > lim.Sessions || u.Sessions["work"] > lim.Sessions {
			t.Fatalf("%s holds %+v, over %+v", app, u, lim)
		}
	}
	before := map[string]Usage{}
	for _, app := range []string{"notes", "mail"} {
		before[app], _ = s.Usage(app)
	}
	// An older state file: no counters, no untitled indexes.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketUntitled, bucketUntitledApp, bucketCounts, bucketBytes} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for app, want := range before {
		if got, _ := s2.Usage(app); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s after recounting: %+v, want %+v", app, got, want)
		}
	}
	checkCounts(t, s2)
}

// checkCounts recounts every app's records from scratch (indexQuota in a
// transaction that is rolled back) and compares with the counters.
func checkCounts(t *testing.T, s *Store) {
	t.Helper()
	snapshot := func(tx *bolt.Tx) string {
		var b strings.Builder
		for _, name := range [][]byte{bucketUntitled, bucketUntitledApp, bucketCounts, bucketBytes} {
			tx.Bucket(name).ForEach(func(k, v []byte) error {
				fmt.Fprintf(&b, "%s %x %x\n", name, k, v)
				return nil
			})
		}
		return b.String()
	}
	errRollback := errors.New("rollback")
	err := s.db.Update(func(tx *bolt.Tx) error {
		kept := snapshot(tx)
		for _, name := range [][]byte{bucketUntitled, bucketUntitledApp, bucketCounts, bucketBytes} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		if err := indexQuota(tx); err != nil {
			return err
		}
		if got := snapshot(tx); got != kept {
			t.Errorf("counters\n%s\nrecounted\n%s", kept, got)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
}
