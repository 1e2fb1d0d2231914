// Package messages owns the protobuf messages that cross a process: client
// <-> gateway API and gateway <-> supervisor session. The standalone
// boundary of this stage runs in one process, so its actor messages are Go
// types next to their actors (actors/boundary); the .proto files and their
// committed generated code arrive with the gateway (`make generate`).
package messages
