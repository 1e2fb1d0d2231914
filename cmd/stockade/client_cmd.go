package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

func newClientCmd() *cobra.Command {
	var co clientOpts
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Issue and revoke client credentials (bundles like a kubeconfig)",
		Example: `  stockade client issue alice --out alice.config
  stockade client revoke alice`,
	}
	co.addClientFlags(cmd.PersistentFlags())
	cmd.AddCommand(newClientIssueCmd(&co), newClientRevokeCmd(&co))
	return cmd
}

func newClientIssueCmd(co *clientOpts) *cobra.Command {
	var out string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "issue NAME --out FILE",
		Short: "Make a client configuration (gateways, CA, certificate and key) for another user or host",
		Long: `Make a client configuration for NAME: a new key made here (it never leaves
this machine but in FILE), certified by the gateway, with the gateway's CA
and the addresses this client used. FILE is written with mode 0600; hand it
over privately. The user then runs: stockade sandbox list --config FILE
(or STOCKADE_CONFIG=FILE, or copies it to ~/.config/stockade/config).
Revoke it with: stockade client revoke NAME.`,
		Example: `  stockade client issue alice --out alice.config
  stockade client issue ci --out ci.config --validity 720h
  stockade sandbox list --config alice.config   # on alice's machine`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return &exitError{exitUsage, errors.New("--out FILE is required: where to write the new configuration")}
			}
			if _, err := os.Lstat(out); err == nil {
				return &exitError{exitUsage, fmt.Errorf("%s exists: remove it or choose another --out", out)}
			}
			key, keyPEM, err := trust.NewKey()
			if err != nil {
				return &exitError{exitFailure, err}
			}
			pub, err := x509.MarshalPKIXPublicKey(key.Public())
			if err != nil {
				return &exitError{exitFailure, err}
			}
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			reply, err := request(c, &messages.IssueRequest{Name: args[0], PublicKey: pub, ValiditySeconds: int64(validity / time.Second)})
			if err != nil {
				return err
			}
			_, addrs, _ := co.configuration()
			cfg := &client.Config{Name: args[0], Gateways: addrs, CA: string(reply.Ca), Cert: string(reply.Certificate), Key: string(keyPEM)}
			if co.gateway == "" {
				cfg.Gateways = []string{c.Addr()}
			}
			if err := cfg.Write(out); err != nil {
				return &exitError{exitFailure, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\nwrote %s (mode 0600): use it with --config %s or STOCKADE_CONFIG=%s\n", reply.Message, out, out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "where to write the configuration (must not exist)")
	cmd.Flags().DurationVar(&validity, "validity", 0, "how long the certificate is valid (default one year)")
	return cmd
}

func newClientRevokeCmd(co *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke NAME",
		Short:   "Revoke every certificate issued to a client (refused from its next connection)",
		Example: `  stockade client revoke alice`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := co.call(cmd, &messages.RevokeRequest{Name: args[0]})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), reply.Message)
			return nil
		},
	}
}
