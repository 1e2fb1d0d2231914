package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/stockade-dev/stockade/policy/reason"
)

// Denial is the JSON body of a 403 (and, with Error "upstream_unreachable",
// of a 502). Keys are part of the product contract.
type Denial struct {
	Error  string      `json:"error"`
	Reason reason.Code `json:"reason"`
	Policy string      `json:"policy"`
	// PolicyName is the policy's name field when it differs from its
	// network_policies key (Policy).
	PolicyName string `json:"policyName,omitempty"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Message    string `json:"message,omitempty"`
}

// WriteDenied writes a 403 with a policy_denied body.
func WriteDenied(w io.Writer, d Denial) error {
	d.Error = "policy_denied"
	if d.Policy == "" {
		d.Policy = "-"
	}
	return writeJSON(w, http.StatusForbidden, d)
}

// WriteBadGateway writes a 502 upstream_unreachable answer.
func WriteBadGateway(w io.Writer, host string, port int, msg string) error {
	return writeJSON(w, http.StatusBadGateway, Denial{
		Error: string(reason.UpstreamUnreachable), Reason: reason.UpstreamUnreachable,
		Policy: "-", Host: host, Port: port, Message: msg,
	})
}

// WriteOverLimit writes a 503 connection_limit answer: the sandbox has its
// maximum of concurrent mediated connections.
func WriteOverLimit(w io.Writer, limit int) error {
	return writeJSON(w, http.StatusServiceUnavailable, Denial{
		Error: string(reason.ConnectionLimit), Reason: reason.ConnectionLimit, Policy: "-",
		Message: fmt.Sprintf("this sandbox has %d mediated connections open, its maximum: close some and retry", limit),
	})
}

// WriteBadRequest writes a 400 bad_request answer.
func WriteBadRequest(w io.Writer, msg string) error {
	return writeJSON(w, http.StatusBadRequest, struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{"bad_request", msg})
}

// WriteEstablished writes the 200 that opens a CONNECT tunnel.
func WriteEstablished(w io.Writer) error {
	_, err := io.WriteString(w, "HTTP/1.1 200 Connection established\r\n\r\n")
	if err != nil {
		return fmt.Errorf("write 200 to client: %w", err)
	}
	return nil
}

func writeJSON(w io.Writer, status int, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %d body: %w", status, err)
	}
	b = append(b, '\n')
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), len(b))
	if _, err := io.WriteString(w, head); err != nil {
		return fmt.Errorf("write %d to client: %w", status, err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write %d body to client: %w", status, err)
	}
	return nil
}
