// Package messages owns the protobuf messages that cross a process: client
// <-> gateway API (CreateRequest, SandboxRequest, ListRequest, LogsRequest,
// Reply) and gateway <-> supervisor session (Hello, HelloAck, Heartbeat,
// WorkloadExited). stockade.proto is the source; stockade.pb.go is generated
// by `make generate` with the protoc-gen-go version pinned in go.mod and is
// committed; `make generate-check` fails when it is stale. Messages local
// to one process stay Go types next to their actors.
package messages
