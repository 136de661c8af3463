package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/fleet"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const keyringLong = `The fleet's keyring seals every record the agents of a fleet write to
etcd (AES-256-GCM, the record's key authenticated), so that a copy of
etcd's data or a snapshot shows no volume secret, and a record written by
anything without the keyring is refused and reported; it also signs the
members' requests to the volumes' grains. Give every agent the same file
(-cluster-keyring, 0600).

To turn it on for a fleet that runs: generate a key, give the file to every
agent with -cluster-keyring and -cluster-keyring-accept-unsealed, restart
them one by one, run plugvisor keyring rotate, then restart them without
-cluster-keyring-accept-unsealed. To change keys: generate a new one (it
becomes the primary; the older ones stay to open what they sealed), give the
file to every agent, rotate, then remove the older keys from the file.`

func newKeyringCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "keyring",
		Short:   "make and rotate the fleet's keyring, which seals its records in etcd",
		Long:    keyringLong,
		Example: "  plugvisor keyring generate /etc/plugvisor/keyring\n  plugvisor keyring rotate -keyring /etc/plugvisor/keyring -endpoints https://10.0.0.2:2379 -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem",
		Args:    cmdline.Args("", "plugvisor keyring generate FILE"),
	}
	cmd.AddCommand(newKeyringGenerateCmd(), newKeyringRotateCmd())
	return cmd
}

func newKeyringGenerateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "generate FILE",
		Short: "put a new random key first in the keyring file FILE (made 0600 when absent): the primary from now on",
		Long: `Puts a new random 32-byte key, named after the time, first in FILE, which
it makes (mode 0600) when absent. The key is the primary: agents given the
file seal new records with it. The keys already there stay, to open what they
sealed, until plugvisor keyring rotate has sealed every record again.`,
		Example: "  plugvisor keyring generate /etc/plugvisor/keyring",
		Args:    cmdline.Args("FILE", "plugvisor keyring generate /etc/plugvisor/keyring"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := fleet.GenerateKey(args[0])
			if err != nil {
				return err
			}
			k, err := fleet.LoadKeyring(args[0])
			if err != nil {
				return err
			}
			next := "give the file to every agent (-cluster-keyring)"
			if len(k.IDs()) > 1 {
				next += ", then run plugvisor keyring rotate to seal every record with it"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %s is the primary of %s; %s\n", id, args[0], next)
			return nil
		},
	}
}

func newKeyringRotateCmd() *cobra.Command {
	var f etcdClientFlags
	var keyring, prefix string
	cmd := &cobra.Command{
		Use:   "rotate -keyring FILE",
		Short: "seal every record of the fleet in etcd again with the keyring's primary key",
		Long: `Seals every record of the fleet under -prefix again with the primary key of
-keyring: those an older key sealed, and those of a fleet that had no
keyring. Agents keep running: a record one writes meanwhile is sealed with
the primary already. Afterwards the older keys can leave the file, and
agents need not accept unsealed records any more.`,
		Example: "  plugvisor keyring rotate -keyring /etc/plugvisor/keyring -endpoints https://10.0.0.2:2379 -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem",
		Args:    cmdline.Args("", "plugvisor keyring rotate -keyring FILE"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyring == "" {
				return usageError("-keyring is required: the fleet's keyring file")
			}
			k, err := fleet.LoadKeyring(keyring)
			if err != nil {
				return err
			}
			return f.run(cmd, func(ctx context.Context, a fleet.Access) error {
				res, err := fleet.RotateRecords(ctx, a, prefix, k)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "sealed %d records again with key %s (%d were sealed with it already); %d keys hold no record\n",
						res.Resealed, k.Primary(), res.Sealed, res.Skipped)
				}
				return err
			})
		},
	}
	f.add(cmd.Flags())
	cmd.Flags().StringVar(&keyring, "keyring", "", "the fleet's keyring file (required)")
	cmd.Flags().StringVar(&prefix, "prefix", fleet.DefaultPrefix, "the fleet's etcd key prefix (the agents' -cluster-prefix)")
	return cmd
}
