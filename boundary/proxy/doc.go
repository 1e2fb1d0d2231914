// Package proxy owns the HTTP side of the egress boundary, without actors:
// reading a CONNECT or absolute-URI request with bounded size and time,
// writing 400/403/502 answers with JSON bodies, checking a resolved
// destination address against the internal-address rules of DESIGN.md, and
// tunnelling bytes both ways with half-close (splice(2) through io.Copy on
// TCP connections; a tunnel whose client has sent BulkAfter bytes gets
// bounded kernel buffers, PipeFromClient). The connection actor in
// actors/boundary sequences these steps around the identity lookup and the
// policy decision; its boundary lends it the request reader (Readers) and
// takes it back when the actor stops with nothing of its own still
// reading.
package proxy
