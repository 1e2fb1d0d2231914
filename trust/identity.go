package trust

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// Role is the role of a certificate holder.
type Role string

// The roles a certificate can speak for.
const (
	RoleGateway    Role = "gateway"    // a gateway node; Name = node name
	RoleSupervisor Role = "supervisor" // the supervisor of sandbox Name
	RoleClient     Role = "client"     // a client named Name
)

// uriScheme is the scheme of the URI SAN that carries an Identity.
const uriScheme = "stockade"

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool {
	switch r {
	case RoleGateway, RoleSupervisor, RoleClient:
		return true
	}
	return false
}

// Identity is who a certificate speaks for. It is encoded in the certificate
// as one URI SAN "stockade://ROLE/NAME" (and Subject CommonName "ROLE:NAME"
// for humans).
type Identity struct {
	Role Role
	Name string
}

// String returns "ROLE:NAME", e.g. "client:alice".
func (i Identity) String() string { return string(i.Role) + ":" + i.Name }

// Validate reports whether i has a known role and a usable name: non-empty,
// without '/' and without control characters.
func (i Identity) Validate() error {
	if !i.Role.Valid() {
		return fmt.Errorf("identity %q: unknown role %q", i.String(), string(i.Role))
	}
	if i.Name == "" {
		return fmt.Errorf("identity %q: empty name", i.String())
	}
	if strings.ContainsRune(i.Name, '/') {
		return fmt.Errorf("identity %q: name contains '/'", i.String())
	}
	if strings.IndexFunc(i.Name, unicode.IsControl) >= 0 {
		return fmt.Errorf("identity %q: name contains a control character", i.String())
	}
	return nil
}

// uri returns the URI SAN that encodes i.
func (i Identity) uri() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: string(i.Role), Path: "/" + i.Name}
}

// IdentityOf returns the identity a certificate speaks for, read from its
// single "stockade://ROLE/NAME" URI SAN. It fails when there is no such URI,
// more than one, or the role or name is invalid.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, errors.New("no certificate")
	}
	var found *url.URL
	for _, u := range cert.URIs {
		if u == nil || !strings.EqualFold(u.Scheme, uriScheme) {
			continue
		}
		if found != nil {
			return Identity{}, fmt.Errorf("certificate %s has more than one %s:// URI", serialHex(cert), uriScheme)
		}
		found = u
	}
	if found == nil {
		return Identity{}, fmt.Errorf("certificate %s has no %s:// URI", serialHex(cert), uriScheme)
	}
	if found.Opaque != "" || found.User != nil || found.RawQuery != "" || found.Fragment != "" {
		return Identity{}, fmt.Errorf("certificate %s: malformed identity URI %q", serialHex(cert), found.String())
	}
	id := Identity{Role: Role(found.Host), Name: strings.TrimPrefix(found.Path, "/")}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("certificate %s: %w", serialHex(cert), err)
	}
	return id, nil
}

// serialHex names a certificate by its serial number in errors.
func serialHex(cert *x509.Certificate) string {
	if cert.SerialNumber == nil {
		return "(no serial)"
	}
	return "serial " + cert.SerialNumber.Text(16)
}

// ParseIdentity parses the "role:name" form of Identity.String.
func ParseIdentity(s string) (Identity, error) {
	role, name, ok := strings.Cut(s, ":")
	id := Identity{Role: Role(role), Name: name}
	if !ok {
		return Identity{}, fmt.Errorf("identity %q: want ROLE:NAME", s)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// AcceptRoles is a Verifier.Accept that admits peers of the given roles.
func AcceptRoles(roles ...Role) func(Identity) error {
	return func(id Identity) error {
		for _, r := range roles {
			if id.Role == r {
				return nil
			}
		}
		return fmt.Errorf("%s may not connect here (accepted: %v)", id, roles)
	}
}
