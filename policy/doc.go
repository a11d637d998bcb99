// Package policy is octosup's core: the manifest (native-apps.json,
// docs/manifest.md) and its validation, the per-user places of
// docs/spec.md, and what must persist about an app's rights (first-use
// consent, standing approval rules), kept in an embedded store
// (OpenStoreWith), which a damaged or unwritable file never keeps from
// opening: docs/state.md.
//
// Everything else in octosup imports policy; policy imports none of it.
//
// Load a manifest with Load or Parse. Both return every problem at once as
// a *ValidationError whose Problems name the app, the field and the fix:
//
//	m, err := policy.Load(path)
//	var verr *policy.ValidationError
//	if errors.As(err, &verr) {
//		for _, p := range verr.Problems { fmt.Println(p) }
//	}
package policy
