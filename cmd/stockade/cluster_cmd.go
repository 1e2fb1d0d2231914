package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/trust"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Gateway clusters: the shared CA",
		Example: "  stockade cluster init /tmp/cluster-ca"}
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Create a cluster's CA in DIR (once, for every node)",
		Long: `Create the CA every node of a cluster shares: DIR/ca.crt and DIR/ca.key
(DIR 0700, key 0600). Copy DIR to each node's <state-dir>/pki before its
first 'gateway run --etcd ... --node NAME' (the nodes of one host share one
state dir, so once per host), over a channel you trust (scp, your secrets
manager): whoever holds ca.key can mint any identity. A node refuses to
start in a cluster without it. An existing CA in DIR is kept, not replaced.`,
		Example: `  stockade cluster init /tmp/cluster-ca
  install -d -m 0700 /var/lib/stockade/pki && cp -p /tmp/cluster-ca/ca.* /var/lib/stockade/pki/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return &exitError{exitUsage, err}
			}
			ca, created, err := trust.LoadOrCreateCA(dir)
			if err != nil {
				return &exitError{exitFailure, fmt.Errorf("cluster init: %w", err)}
			}
			what := "kept the existing CA"
			if created {
				what = "created a CA"
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s in %s (subject %q, valid until %s)\n", what, dir, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format("2006-01-02"))
			fmt.Fprintf(w, "copy it to each node's <state-dir>/%s, e.g.:\n  install -d -m 0700 STATE_DIR/pki && cp -p %s %s STATE_DIR/pki/\n",
				"pki", filepath.Join(dir, trust.CACertFile), filepath.Join(dir, trust.CAKeyFile))
			return nil
		},
	}
	cmd.AddCommand(initCmd)
	return cmd
}
