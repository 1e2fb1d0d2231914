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
	var etcdHosts []string
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Create a cluster's CA and its etcd's TLS in DIR (once, for every node)",
		Long: `Create the CA every node of a cluster shares: DIR/ca.crt and DIR/ca.key
(DIR 0700, key 0600). Copy them to each node's <state-dir>/pki before its
first 'gateway run --etcd ... --node NAME' (the nodes of one host share one
state dir, so once per host), over a channel you trust (scp, your secrets
manager): whoever holds ca.key can mint any identity. A node refuses to
start in a cluster without it.

It also makes what etcd and the nodes need for mutual TLS, in DIR/etcd: a CA
of its own (ca.crt, ca.key), etcd's serving certificate (server.crt,
server.key) for 127.0.0.1, ::1, localhost and each --etcd-host, and the
nodes' client certificate (client.crt, client.key). Run etcd with
--client-cert-auth so that only the nodes write its keys: whoever can write
them rewrites every sandbox record. Files that exist are kept, not replaced.`,
		Example: `  stockade cluster init /tmp/cluster-ca --etcd-host etcd.internal
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
			ep, err := trust.LoadOrCreateEtcdPKI(filepath.Join(dir, trust.EtcdDir), etcdHosts)
			if err != nil {
				return &exitError{exitFailure, fmt.Errorf("cluster init: %w", err)}
			}
			what = "kept the existing etcd TLS files"
			if len(ep.Created) > 0 {
				what = "made etcd's TLS files"
			}
			fmt.Fprintf(w, "%s in %s (valid until %s); etcd with client certificates required:\n", what, ep.Dir, ep.NotAfter.UTC().Format("2006-01-02"))
			fmt.Fprintf(w, "  etcd --listen-client-urls https://127.0.0.1:2379 --advertise-client-urls https://127.0.0.1:2379 \\\n    --cert-file %s --key-file %s --client-cert-auth --trusted-ca-file %s ...\n",
				ep.Path(trust.EtcdServerCert), ep.Path(trust.EtcdServerKey), ep.Path(trust.CACertFile))
			fmt.Fprintf(w, "and each node:\n  stockade gateway run --etcd https://127.0.0.1:2379 --etcd-cacert %s --etcd-cert %s --etcd-key %s --node NAME ...\n",
				ep.Path(trust.CACertFile), ep.Path(trust.EtcdClientCert), ep.Path(trust.EtcdClientKey))
			return nil
		},
	}
	initCmd.Flags().StringSliceVar(&etcdHosts, "etcd-host", nil, "an address or DNS name etcd is reached by besides 127.0.0.1, ::1 and localhost (repeat or comma-separate)")
	cmd.AddCommand(initCmd)
	return cmd
}
