package contract

import "time"

// Well-known actor ids: what remote peers address.
const (
	// APIActor serves clients on the gateway.
	APIActor = "gateway/api"
	// HelloActor takes supervisors' Hello on the gateway.
	HelloActor = "gateway/hello"
	// SandboxesActor routes requests by sandbox name on the gateway.
	SandboxesActor = "gateway/sandboxes"
	// SupervisorSession is the session actor of a supervisor.
	SupervisorSession = "session"
)

// SandboxActorID is the actor id of sandbox name at the gateway.
func SandboxActorID(name string) string { return SandboxesActor + "/sandbox/" + name }

// GatewaySessionPrefix is the id prefix of the gateway-side session actors
// of sandbox name (session/N children of its sandbox actor).
func GatewaySessionPrefix(name string) string { return SandboxActorID(name) + "/session/" }

// RelayPreamble starts the first line each side of an SSH relay sends:
// "STOCKADE-RELAY <token>\n".
const RelayPreamble = "STOCKADE-RELAY "

// HeartbeatEvery is the supervisor's heartbeat period; a session with no
// heartbeat for SessionLostAfter is lost.
const (
	HeartbeatEvery   = time.Second
	SessionLostAfter = 3 * HeartbeatEvery
)

// DefaultGateway is the gateway's API address on the embedded default.
const DefaultGateway = "127.0.0.1:7420"

// ClientStreamPrefix starts the id of a client's stream actors (a `sandbox
// logs` stream): the prefix and 1 to 64 lower-case hex digits.
const ClientStreamPrefix = "logs-stream/"

// IsControlPlanePort reports whether the boundary never dials port for a
// named host or an allowed_ips range: etcd 2379/2380, the Kubernetes API
// 6443, kubelet 10250/10255. `policy check` warns about an endpoint on one.
// (A switch: it is asked for every connection, and allocates nothing.)
func IsControlPlanePort(port int) bool {
	switch port {
	case 2379, 2380, 6443, 10250, 10255:
		return true
	}
	return false
}
