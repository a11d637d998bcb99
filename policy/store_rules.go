package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Rule is a standing answer to an app's host-confirmed tool (approve
// --remember, docs/protocol.md): calls of Tool into App are allowed or denied
// without asking the person, until the rule is revoked.
type Rule struct {
	App      string    `json:"app"`
	Tool     string    `json:"tool"`
	Decision Decision  `json:"decision"`
	At       time.Time `json:"at"`
}

// ruleKey is app NUL tool: app ids cannot hold a NUL, so keys never
// collide, and one app's rules are one key range.
func ruleKey(app, tool string) []byte {
	k := make([]byte, 0, len(app)+1+len(tool))
	k = append(k, app...)
	k = append(k, 0)
	return append(k, tool...)
}

// decodeRule reads the rule stored under key k: one that does not
// decode, holds no decision, or names another app or tool than its key
// cannot be used.
func decodeRule(k, v []byte) (Rule, error) {
	var r Rule
	if err := json.Unmarshal(v, &r); err != nil {
		return Rule{}, err
	}
	if _, err := ParseDecision(string(r.Decision)); err != nil {
		return Rule{}, err
	}
	if !bytes.Equal(ruleKey(r.App, r.Tool), k) {
		return Rule{}, fmt.Errorf("it names app %q and tool %q", r.App, r.Tool)
	}
	return r, nil
}

// Rule returns the standing rule for app and tool; ok is false when there
// is none.
func (s *Store) Rule(app, tool string) (r Rule, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRules).Get(ruleKey(app, tool))
		if v == nil {
			return nil
		}
		// As for a consent: one that cannot be read is no rule.
		var derr error
		r, derr = decodeRule(ruleKey(app, tool), v)
		ok = derr == nil
		return nil
	})
	if err != nil {
		return Rule{}, false, fmt.Errorf("read rule for %s %s: %w", app, tool, err)
	}
	return r, ok, nil
}

// SetRule persists a standing rule, replacing the app's earlier rule for
// that tool; when it returns nil the rule is on disk.
func (s *Store) SetRule(r Rule) error {
	if _, err := ParseDecision(string(r.Decision)); err != nil {
		return fmt.Errorf("set rule for %s %s: %w", r.App, r.Tool, err)
	}
	if r.App == "" || r.Tool == "" || bytes.IndexByte([]byte(r.App), 0) >= 0 {
		return fmt.Errorf("set rule: want an app id and a tool name, got %q and %q", r.App, r.Tool)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketRules), ruleKey(r.App, r.Tool), r)
	})
	if err != nil {
		return fmt.Errorf("set rule for %s %s: %w", r.App, r.Tool, err)
	}
	s.backupSoon()
	return nil
}

// RevokeRules forgets standing rules: app's rule for tool, or every rule
// of app when tool is "". It returns the rules it removed; one that could
// not be read is removed too, and not returned (it was no rule).
func (s *Store) RevokeRules(app, tool string) ([]Rule, error) {
	var out []Rule
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRules)
		if tool != "" {
			k := ruleKey(app, tool)
			v := b.Get(k)
			if v == nil {
				return nil
			}
			if r, err := decodeRule(k, v); err == nil {
				out = append(out, r)
			}
			return b.Delete(k)
		}
		prefix := ruleKey(app, "")
		var keys [][]byte
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if r, err := decodeRule(k, v); err == nil {
				out = append(out, r)
			}
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("revoke rules of %s: %w", app, err)
	}
	if len(out) > 0 {
		s.backupSoon()
	}
	return out, nil
}

// Rules lists the standing rules, by app then tool; app "" lists every
// app's. Those that cannot be read are left out (Health.Unreadable).
func (s *Store) Rules(app string) ([]Rule, error) {
	out := []Rule{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRules).ForEach(func(k, v []byte) error {
			r, err := decodeRule(k, v)
			if err == nil && (app == "" || r.App == app) {
				out = append(out, r)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].App != out[j].App {
			return out[i].App < out[j].App
		}
		return out[i].Tool < out[j].Tool
	})
	return out, nil
}
