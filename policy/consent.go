package policy

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Decision is a person's answer to an approval.
type Decision string

const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
)

// ParseDecision accepts exactly "allow" or "deny".
func ParseDecision(s string) (Decision, error) {
	switch d := Decision(s); d {
	case Allow, Deny:
		return d, nil
	}
	return "", fmt.Errorf("decision %q: want \"allow\" or \"deny\"", s)
}

// Consent is an app's persisted first-use consent (docs/protocol.md): the person's
// explicit answer to whether the app may use the agent service at all.
type Consent struct {
	App      string    `json:"app"`
	Decision Decision  `json:"decision"`
	At       time.Time `json:"at"`
}

// Consent returns the app's persisted decision; ok is false when the
// person was never asked (or the decision was revoked).
func (s *Store) Consent(app string) (c Consent, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketConsent).Get([]byte(app))
		if v == nil {
			return nil
		}
		// One that cannot be read counts as never made (fails closed:
		// the app is asked again); the store noted it at open.
		var derr error
		c, derr = decodeConsent([]byte(app), v)
		ok = derr == nil
		return nil
	})
	if err != nil {
		return Consent{}, false, fmt.Errorf("read consent of %s: %w", app, err)
	}
	return c, ok, nil
}

// decodeConsent reads the consent stored under key k: one that does not
// decode, holds no decision, or names another app than its key cannot
// be used.
func decodeConsent(k, v []byte) (Consent, error) {
	var c Consent
	if err := json.Unmarshal(v, &c); err != nil {
		return Consent{}, err
	}
	if _, err := ParseDecision(string(c.Decision)); err != nil {
		return Consent{}, err
	}
	if c.App != string(k) {
		return Consent{}, fmt.Errorf("it names app %q", c.App)
	}
	return c, nil
}

// SetConsent persists a decision; when it returns nil the decision is on
// disk.
func (s *Store) SetConsent(c Consent) error {
	if _, err := ParseDecision(string(c.Decision)); err != nil {
		return fmt.Errorf("set consent of %s: %w", c.App, err)
	}
	if c.App == "" {
		return fmt.Errorf("set consent: empty app id")
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketConsent), []byte(c.App), c)
	})
	if err != nil {
		return fmt.Errorf("set consent of %s: %w", c.App, err)
	}
	s.backupSoon()
	return nil
}

// RevokeConsent forgets the app's decision, so that its next request asks
// again. found reports whether there was one.
func (s *Store) RevokeConsent(app string) (found bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketConsent)
		found = b.Get([]byte(app)) != nil
		return b.Delete([]byte(app))
	})
	if err != nil {
		return false, fmt.Errorf("revoke consent of %s: %w", app, err)
	}
	if found {
		s.backupSoon()
	}
	return found, nil
}

// Consents lists every persisted decision, by app id, but those that
// cannot be read (Health.Unreadable).
func (s *Store) Consents() ([]Consent, error) {
	var out []Consent
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketConsent).ForEach(func(k, v []byte) error {
			if c, err := decodeConsent(k, v); err == nil {
				out = append(out, c)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list consent: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].App < out[j].App })
	return out, nil
}
