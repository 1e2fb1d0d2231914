package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/stockade-dev/stockade/contract"
)

// ClientFile is a client configuration file, like a kubeconfig: the gateways to
// try, the CA that signs them, and this client's certificate and key. The
// file holds a private key: it must not be readable by group or others.
type ClientFile struct {
	// Name is the client's name (its certificate's identity).
	Name string `yaml:"name"`
	// Gateways are tried in order; the first that answers serves.
	Gateways []string `yaml:"gateways"`
	CA       string   `yaml:"ca"`
	Cert     string   `yaml:"cert"`
	Key      string   `yaml:"key"`
}

// ClientConfigPlaces are where a client looks for its configuration, in order:
// explicit (--config), $STOCKADE_CONFIG, ~/.config/stockade/config, then
// the local gateway's state dir.
func ClientConfigPlaces(explicit, stateDir string) []string {
	var out []string
	if explicit != "" {
		return []string{explicit}
	}
	if v := os.Getenv("STOCKADE_CONFIG"); v != "" {
		return []string{v}
	}
	if d, err := os.UserConfigDir(); err == nil {
		out = append(out, filepath.Join(d, "stockade", "config"))
	}
	return append(out, contract.StateDir(stateDir).ClientConfig())
}

// ErrNoClientConfig is wrapped when no configuration file exists at any place.
var ErrNoClientConfig = errors.New("no client configuration")

// LoadClientConfig reads the first configuration that exists among places.
func LoadClientConfig(places []string) (*ClientFile, string, error) {
	for _, p := range places {
		c, err := ReadClientConfig(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return c, p, err
	}
	return nil, "", fmt.Errorf("%w: looked in %s (make one with `stockade client issue NAME --role ROLE --out FILE` on the gateway, or use the gateway's state dir with --state-dir)",
		ErrNoClientConfig, strings.Join(places, ", "))
}

// ReadClientConfig reads one configuration file, refusing one that group or
// others can read (it holds a private key).
func ReadClientConfig(path string) (*ClientFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("client config %s is readable by others (mode %04o) and holds a private key: run chmod 600 %s", path, m, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	var c ClientFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	if c.CA == "" || c.Cert == "" || c.Key == "" {
		return nil, fmt.Errorf("client config %s lacks ca, cert or key", path)
	}
	return &c, nil
}

// Write writes the configuration to path (mode 0600, atomically).
func (c *ClientFile) Write(path string) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("client config: encode: %w", err)
	}
	head := "# stockade client configuration: gateways, CA, and the certificate and key of client " + c.Name + ".\n# It is a credential: keep it mode 0600. Use it with --config FILE or STOCKADE_CONFIG=FILE.\n"
	return WriteFileAtomic(path, append([]byte(head), b...), 0o600)
}
