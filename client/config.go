package client

import (
	"fmt"

	"github.com/stockade-dev/stockade/trust"
)

// Config is a client configuration file: trust.ClientFile (a format the
// gateway writes for the local operator without importing this package).
type Config = trust.ClientFile

// credentials returns the TLS certificate and the CA pool of c.
func credentials(c *Config) (cert tlsCert, err error) {
	kp, err := trust.KeyPair([]byte(c.Cert), []byte(c.Key))
	if err != nil {
		return cert, fmt.Errorf("client config: %w", err)
	}
	pool, err := trust.Pool([]byte(c.CA))
	if err != nil {
		return cert, fmt.Errorf("client config: %w", err)
	}
	return tlsCert{kp: kp, pool: pool}, nil
}
