package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

func newClientCmd() *cobra.Command {
	var co clientOpts
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Issue, list and revoke client credentials (bundles like a kubeconfig); admins only",
		Example: `  stockade client issue alice --role operator --out alice.config
  stockade client list
  stockade client revoke alice`,
	}
	co.addClientFlags(cmd.PersistentFlags())
	cmd.AddCommand(newClientIssueCmd(&co), newClientListCmd(&co), newClientRevokeCmd(&co))
	return cmd
}

func newClientIssueCmd(co *clientOpts) *cobra.Command {
	var out, role string
	var sandboxes []string
	var validity time.Duration
	var reuse bool
	cmd := &cobra.Command{
		Use:   "issue NAME --role admin|operator|viewer [--sandbox S]... --out FILE",
		Short: "Make a client configuration (gateways, CA, certificate and key) for another user or host",
		Long: `Make a client configuration for NAME: a new key made here (it never leaves
this machine but in FILE), certified by the gateway, with the gateway's CA
and the addresses this client used. FILE is written with mode 0600; hand it
over privately. The user then runs: stockade sandbox list --config FILE
(or STOCKADE_CONFIG=FILE, or copies it to ~/.config/stockade/config).
Revoke it with: stockade client revoke NAME (which also revokes every
client NAME issued, and theirs).

--role says what the client may do:
  viewer    read: sandbox get, list, logs, policy get. Not exec, connect,
            ssh-proxy, cp or port-forward: those run code in the sandbox.
  operator  what a viewer may, create sandboxes, and drive (start, stop,
            recover, delete, exec, connect, policy set) the sandboxes it
            created and the ones --sandbox grants it. Within the gateway's
            default limits and without stockade.allow_ptrace; a name
            granted to another client is not its to create.
  admin     everything: every sandbox, faults, and clients (issue, list,
            revoke).
Only an admin issues clients. A name with live certificates keeps its role
and sandboxes: issuing it again with the same ones renews it; to change
them, revoke it first.

Sandboxes are owned by their creator's name (client:NAME), and grants name
sandboxes: a name that was revoked is not issued again (exit 4), since the
new client would drive what the revoked one created. Pick another name, or
give --reuse-name to hand those sandboxes to the new client on purpose.`,
		Example: `  stockade client issue alice --role operator --out alice.config
  stockade client issue ci --role operator --sandbox build --sandbox test --out ci.config --validity 720h
  stockade client issue auditor --role viewer --out auditor.config
  stockade sandbox list --config alice.config   # on alice's machine`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return &exitError{exitUsage, errors.New("--out FILE is required: where to write the new configuration")}
			}
			if role == "" {
				return &exitError{exitUsage, errors.New("--role is required: viewer (reads), operator (drives the sandboxes it creates or is granted with --sandbox) or admin (everything)")}
			}
			if _, err := access.ParseRole(role); err != nil {
				return &exitError{exitUsage, fmt.Errorf("--role: %w", err)}
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
			reply, err := request(c, &messages.IssueRequest{Name: args[0], PublicKey: pub, ValiditySeconds: int64(validity / time.Second),
				Role: role, Sandboxes: sandboxes, ReuseName: reuse})
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
	cmd.Flags().StringVar(&role, "role", "", "what the client may do: viewer, operator or admin (required)")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"viewer", "operator", "admin"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().StringArrayVar(&sandboxes, "sandbox", nil, "operator: a sandbox it may drive besides the ones it creates (repeat for more)")
	cmd.Flags().DurationVar(&validity, "validity", 0, "how long the certificate is valid (default one year)")
	cmd.Flags().BoolVar(&reuse, "reuse-name", false, "issue a name that was revoked: the new client drives the sandboxes the name created")
	return cmd
}

// revokeWait bounds waiting for a revoke's answer: it comes in
// milliseconds, unless the revocation took the certificate the request
// came with (the gateway cannot answer over a revoked certificate).
const revokeWait = 10 * time.Second

func newClientRevokeCmd(co *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke every certificate issued to a client, and to the clients it issued (refused from their next connection)",
		Long: `Revoke every certificate issued to NAME, and every certificate those
issued, and theirs: each is refused at its next handshake, and its
requests on a connection made before are refused too. Issuance is followed
by certificate: a certificate NAME's certificates issued goes, another
certificate of the same name (issued by someone else) stays, and the local
admin's certificate (the one the gateway issues itself into its state dir)
goes only when NAME is admin. A certificate issued while its issuer had
several live certificates is revoked with any of them. When that takes the certificate
this command runs with (NAME is its own client, or issued it), the gateway
cannot answer over it: the command then checks that its certificate is
refused, and says so.`,
		Example: `  stockade client revoke alice`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), revokeWait)
			defer cancel()
			reply, err := requestCtx(ctx, c, &messages.RevokeRequest{Name: args[0]})
			var ee *exitError
			if errors.As(err, &ee) && ee.code == exitUnreachable {
				// Did the revocation take this very certificate?
				if _, perr := co.call(cmd, &messages.ListRequest{}); errors.Is(perr, client.ErrRefused) {
					fmt.Fprintf(cmd.OutOrStdout(), "client %s revoked, and with it the certificate this command used (refused now); the gateway cannot answer over a revoked certificate: use another admin's configuration for client list\n", args[0])
					return nil
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), reply.Message)
			return nil
		},
	}
}

// clientView is one row of `client list -o json|yaml`: one issued
// certificate.
type clientView struct {
	Name      string   `json:"name" yaml:"name"`
	Role      string   `json:"role" yaml:"role"`
	Sandboxes []string `json:"sandboxes,omitempty" yaml:"sandboxes,omitempty"`
	IssuedBy  string   `json:"issuedBy,omitempty" yaml:"issuedBy,omitempty"`
	Serial    string   `json:"serial" yaml:"serial"`
	Issued    string   `json:"issued,omitempty" yaml:"issued,omitempty"`
	NotAfter  string   `json:"notAfter" yaml:"notAfter"`
	Revoked   string   `json:"revoked,omitempty" yaml:"revoked,omitempty"`
	Note      string   `json:"note,omitempty" yaml:"note,omitempty"`
}

func newClientListCmd(co *clientOpts) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list [-o table|json|yaml]",
		Short: "List the client certificates the gateway issued: role, issuer, serial, expiry, revoked (admins only)",
		Long: `List every client certificate the gateway issued, by name: ROLE (what it
may do; a certificate issued before roles is a viewer, but the local admin's),
SANDBOXES (an operator's grants), ISSUED BY (the admin client that asked, or
gateway:NODE for the local admin's), SERIAL, ISSUED, EXPIRES and REVOKED
(when). A role with a note in brackets is not the recorded one (a
certificate issued before roles).`,
		Example: `  stockade client list
  stockade client list -o json | jq -r '.[] | select(.revoked == null) | .name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := co.read(cmd, &messages.ClientListRequest{})
			if err != nil {
				return err
			}
			views := []clientView{}
			for _, c := range reply.Clients {
				views = append(views, clientView{Name: c.Name, Role: c.Role, Sandboxes: c.Sandboxes, IssuedBy: c.IssuedBy, Serial: c.Serial,
					Issued: msTime(c.IssuedUnixMs), NotAfter: msTime(c.NotAfterUnixMs), Revoked: msTime(c.RevokedUnixMs), Note: c.Note})
			}
			return render(cmd.OutOrStdout(), format, views, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "NAME\tROLE\tSANDBOXES\tISSUED BY\tSERIAL\tISSUED\tEXPIRES\tREVOKED")
				for _, v := range views {
					role := v.Role
					if v.Note != "" {
						role += " (" + v.Note + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, role, dash(strings.Join(v.Sandboxes, ",")), dash(v.IssuedBy), v.Serial,
						dash(v.Issued), dash(v.NotAfter), dash(v.Revoked))
				}
			})
		},
	}
	addOutputFlag(cmd, &format, "table", "table", "json", "yaml")
	return cmd
}
