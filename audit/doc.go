// Package audit owns stockade's audit events: one OCSF-shaped event per
// boundary decision (allowed or denied) and per lifecycle transition, written
// as JSON lines to a size-rotated file and rendered as the one-line form that
// `sandbox logs` shows, e.g.
//
//	NET:OPEN [MED] DENIED /usr/bin/curl(64) -> example.org:443 [policy:- engine:opa] [reason:endpoint_not_allowed]
//
// The package is light on purpose (no policy engine, no actors) so every
// layer can emit events.
package audit
