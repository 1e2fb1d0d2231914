package client

import (
	"fmt"

	"github.com/stockade-dev/stockade/trust"
)

// The client configuration file is trust.ClientFile (the gateway writes
// one for the local operator without importing this package); these names
// keep the client's API.
type Config = trust.ClientFile

// ConfigFile is the client configuration's name in a gateway's state dir.
const ConfigFile = trust.ClientConfigFile

// ErrNoConfig is wrapped when no configuration file exists at any place.
var ErrNoConfig = trust.ErrNoClientConfig

// ConfigPlaces are where a client looks for its configuration (trust.ClientConfigPlaces).
func ConfigPlaces(explicit, stateDir string) []string {
	return trust.ClientConfigPlaces(explicit, stateDir)
}

// LoadConfig reads the first configuration that exists among places.
func LoadConfig(places []string) (*Config, string, error) { return trust.LoadClientConfig(places) }

// ReadConfig reads one configuration file (trust.ReadClientConfig).
func ReadConfig(path string) (*Config, error) { return trust.ReadClientConfig(path) }

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
