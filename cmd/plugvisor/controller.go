package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/names"
)

// The commands that go through a plugin's controller: volume create,
// delete and expand, and snapshot create, delete and list.

const volumeCreateLong = `Creates a volume with the plugin's controller (CreateVolume) and registers
it. Creating again with the same name finds the same volume, so a create that
failed half way is finished by running it again. Secrets are read from a JSON
file (an object of strings), never from the command line, and are never
shown. On a terminal it shows progress while the plugin works.`

const volumeCreateExample = `  plugvisor volume create -plugin hostpath -access-mode single-node-writer -size 1GiB db
  plugvisor volume create -plugin hostpath -access-mode single-node-writer -size 1GiB \
    -parameter tier=fast -secrets-file ./db-secrets.json db
  plugvisor volume create -plugin hostpath -access-mode single-node-writer -snapshot SNAPSHOT_ID db-restored
  plugvisor volume create -plugin hostpath -access-mode single-node-writer -clone-from db db-copy`

const snapshotLong = `Snapshots live on the plugin: create takes one of a volume through its
plugin's controller, list asks the plugin, delete removes one. Create a
volume from one with plugvisor volume create -snapshot SNAPSHOT_ID.`

const snapshotExample = `  plugvisor snapshot create db nightly
  plugvisor snapshot list -volume db
  plugvisor snapshot delete hostpath SNAPSHOT_ID`

// keyValues is a repeatable K=V flag.
type keyValues map[string]string

func (kv *keyValues) String() string { return fmt.Sprint(map[string]string(*kv)) }

// Type names the flag's value in help.
func (kv *keyValues) Type() string { return "KEY=VALUE" }

func (kv *keyValues) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	if *kv == nil {
		*kv = keyValues{}
	}
	(*kv)[k] = val
	return nil
}

// topologyList is a repeatable K=V[,K=V] flag: one topology each.
type topologyList []map[string]string

func (t *topologyList) String() string { return fmt.Sprint([]map[string]string(*t)) }

// Type names the flag's value in help.
func (t *topologyList) Type() string { return "KEY=VALUE[,KEY=VALUE]" }

// Set adds the topology v, whose keys must pass names.CheckKey.
func (t *topologyList) Set(v string) error {
	var seg keyValues
	for _, part := range strings.Split(v, ",") {
		if err := seg.Set(part); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(seg)) {
		if err := names.CheckKey("topology segment", k); err != nil {
			return err
		}
	}
	*t = append(*t, seg)
	return nil
}

// sizeFlag is a size in bytes, with an optional unit: 512, 10MiB, 1GB.
type sizeFlag int64

var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

// Type names the flag's value in help.
func (s *sizeFlag) Type() string { return "SIZE" }

func (s *sizeFlag) Set(v string) error {
	number, factor := v, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(v, u.suffix) {
			number, factor = strings.TrimSuffix(v, u.suffix), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(number), 10, 64)
	if err != nil || n < 0 || (n > 0 && factor > (1<<62)/n) {
		return fmt.Errorf("%q is not a size: write bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB or TB", v)
	}
	*s = sizeFlag(n * factor)
	return nil
}

// readSecrets reads a JSON object of strings from path ("" for none).
func readSecrets(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("-secrets-file: %v", err)
	}
	var secrets map[string]string
	if err := json.Unmarshal(b, &secrets); err != nil {
		// The decoder's message may quote the file: say only where it failed.
		return nil, usageError("-secrets-file %s: not a JSON object of strings", path)
	}
	return secrets, nil
}

func newVolumeCreateCmd() *cobra.Command {
	var body api.CreateBody
	var params keyValues
	var flags stringList
	var requisite, preferred topologyList
	var size, limit sizeFlag
	var secretsFile, fsType string
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "create -plugin P -access-mode M ID",
		Short:   "create a volume with the plugin's controller and register it",
		Long:    volumeCreateLong,
		Example: volumeCreateExample,
		Args:    cmdline.Args("ID", "plugvisor volume create -plugin hostpath -access-mode single-node-writer db"),
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkModes(body.AccessMode, body.AttachmentMode); err != nil {
			return err
		}
		secrets, err := readSecrets(secretsFile)
		if err != nil {
			return err
		}
		body.Secrets, body.Parameters = secrets, params
		body.Capacity = api.CapacityJSON{RequiredBytes: int64(size), LimitBytes: int64(limit)}
		body.Topology = api.TopologyJSON{Requisite: requisite, Preferred: preferred}
		if fsType != "" || len(flags) > 0 {
			body.MountOptions = &api.MountOptionsJSON{FSType: fsType, MountFlags: flags}
		}
		return volumeCreate(cmd, vf, args[0], body)
	}
	fs := cmd.Flags()
	fs.StringVar(&body.PluginID, "plugin", "", "the CSI plugin whose controller creates it")
	fs.StringVar(&body.AccessMode, "access-mode", "", "access mode, e.g. single-node-writer")
	fs.StringVar(&body.AttachmentMode, "attachment-mode", "file-system", "file-system or block-device")
	fs.StringVar(&body.Name, "name", "", "name for CreateVolume (default: the ID)")
	fs.Var(&size, "size", "capacity to ask for, e.g. 10GiB")
	fs.Var(&limit, "limit", "largest capacity allowed, e.g. 20GiB")
	fs.Var(&params, "parameter", "plugin parameter KEY=VALUE (repeatable)")
	fs.StringVar(&secretsFile, "secrets-file", "", "JSON file with the plugin's secrets (never shown)")
	fs.StringVar(&body.SnapshotID, "snapshot", "", "snapshot ID to create the volume from")
	fs.StringVar(&body.CloneFrom, "clone-from", "", "volume of the namespace (and plugin) to clone, when the controller advertises CLONE_VOLUME")
	fs.StringVar(&fsType, "fs-type", "", "file system type, e.g. ext4")
	fs.Var(&flags, "mount-flag", "mount flag (repeatable)")
	fs.Var(&requisite, "requisite", "required topology KEY=VALUE[,KEY=VALUE] (repeatable)")
	fs.Var(&preferred, "preferred", "preferred topology KEY=VALUE[,KEY=VALUE] (repeatable)")
	cmdline.Require(cmd, "plugin", "access-mode")
	return cmd
}

func volumeCreate(cmd *cobra.Command, vf *volumeFlags, id string, body api.CreateBody) error {
	var v api.ManagedVolumeJSON
	what := fmt.Sprintf("creating volume %s/%s on plugin %s", vf.namespace, id, body.PluginID)
	if err := vf.callShowing(cmd, what, "POST", volumePath(vf.namespace, id, "create"), nil, body, &v); err != nil {
		return err
	}
	stdout := cmd.OutOrStdout()
	if vf.common.json {
		return printJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "created volume %s/%s on plugin %s: plugin volume %s, %d bytes\n",
		v.Namespace, v.ID, v.PluginID, v.ExternalID, v.CapacityBytes)
	return nil
}

// newVolumeDeleteCmd returns "delete", or with deregister "deregister":
// the volume is deleted on its plugin and forgotten, or only forgotten.
func newVolumeDeleteCmd(deregister bool) *cobra.Command {
	c := &cobra.Command{
		Use:   "delete ID",
		Short: "delete a volume on its plugin and forget it",
		Long: `Deletes a volume on its plugin (DeleteVolume) and forgets it. A volume with
claims is refused, naming the allocs. A volume that was registered rather
than created, or any volume with -deregister-only, is only forgotten.`,
		Example: "  plugvisor volume delete db\n  plugvisor volume delete -deregister-only legacy",
		Args:    cmdline.Args("ID", "plugvisor volume delete db"),
	}
	if deregister {
		c.Use, c.Short, c.Example = "deregister ID [ID...]", "forget volumes and leave them on their plugin", "  plugvisor volume deregister legacy\n  plugvisor volume deregister old-1 old-2 old-3"
		c.Long = `Forgets volumes and leaves them on their plugin: "volume delete
-deregister-only". A volume with claims is refused, naming the allocs.
Several IDs (at most 25, of one namespace) are forgotten all or none: one
refusal names its volume and forgets none.`
		c.Args = cmdline.MinArgs("ID", "plugvisor volume deregister legacy")
	}
	cmd, vf := newVolumeLeaf(c)
	only := deregister
	if !deregister {
		cmd.Flags().BoolVar(&only, "deregister-only", false, "only forget the volume; leave it on the plugin")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return deregisterBatch(cmd, vf, args)
		}
		var query url.Values
		if only {
			query = url.Values{"deregister_only": {"true"}}
		}
		var out map[string]string
		what := fmt.Sprintf("deleting volume %s/%s", vf.namespace, args[0])
		if err := vf.callShowing(cmd, what, "DELETE", volumePath(vf.namespace, args[0], ""), query, nil, &out); err != nil {
			return err
		}
		stdout := cmd.OutOrStdout()
		if vf.common.json {
			return printJSON(stdout, out)
		}
		if out["deleted"] != "" {
			fmt.Fprintf(stdout, "deleted volume %s/%s on its plugin\n", vf.namespace, args[0])
		} else {
			fmt.Fprintf(stdout, "deregistered volume %s/%s (left on its plugin)\n", vf.namespace, args[0])
		}
		return nil
	}
	return cmd
}

func newVolumeExpandCmd() *cobra.Command {
	var size, limit sizeFlag
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:   "expand -size SIZE ID",
		Short: "grow a volume with the plugin's controller",
		Long: `Grows a volume with the plugin's controller (ControllerExpandVolume) and
records its new capacity. Says when the plugin asks for node expansion.`,
		Example: "  plugvisor volume expand -size 2GiB db",
		Args:    cmdline.Args("ID", "plugvisor volume expand -size 2GiB db"),
	})
	cmd.Flags().Var(&size, "size", "capacity to grow to, e.g. 20GiB")
	cmd.Flags().Var(&limit, "limit", "largest capacity allowed")
	cmdline.Require(cmd, "size")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var out api.ExpandJSON
		body := api.ExpandBody{RequiredBytes: int64(size), LimitBytes: int64(limit)}
		what := fmt.Sprintf("expanding volume %s/%s", vf.namespace, args[0])
		if err := vf.callShowing(cmd, what, "POST", volumePath(vf.namespace, args[0], "expand"), nil, body, &out); err != nil {
			return err
		}
		stdout := cmd.OutOrStdout()
		if vf.common.json {
			return printJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "expanded volume %s/%s to %d bytes", vf.namespace, args[0], out.CapacityBytes)
		switch {
		case out.NodeExpanded:
			fmt.Fprint(stdout, "; the nodes expanded it too")
		case out.NodeExpansionRequired:
			fmt.Fprint(stdout, "; the plugin asks for node expansion, which waits for the volume's next mount")
		}
		fmt.Fprintln(stdout)
		return nil
	}
	return cmd
}

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Short:   "create, list and delete CSI snapshots",
		Long:    snapshotLong,
		Example: snapshotExample,
	}
	cmd.AddCommand(newSnapshotCreateCmd(), newSnapshotDeleteCmd(), newSnapshotListCmd())
	return cmd
}

func newSnapshotCreateCmd() *cobra.Command {
	var params keyValues
	var secretsFile string
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "create VOLUME NAME",
		Short:   "take a snapshot of a volume on its plugin",
		Example: "  plugvisor snapshot create db nightly\n  plugvisor snapshot create -parameter retain=7d db weekly",
		Args:    cmdline.Args("VOLUME NAME", "plugvisor snapshot create db nightly"),
	})
	cmd.Flags().Var(&params, "parameter", "plugin parameter KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&secretsFile, "secrets-file", "", "JSON file with the plugin's secrets (default: the volume's)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		secrets, err := readSecrets(secretsFile)
		if err != nil {
			return err
		}
		body := api.SnapshotBody{Namespace: vf.namespace, VolumeID: args[0], Name: args[1], Parameters: params, Secrets: secrets}
		var snap api.SnapshotJSON
		what := fmt.Sprintf("taking snapshot %s of %s/%s", args[1], vf.namespace, args[0])
		if err := vf.callShowing(cmd, what, "POST", "/v1/snapshots", nil, body, &snap); err != nil {
			return err
		}
		if vf.common.json {
			return printJSON(cmd.OutOrStdout(), snap)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "created snapshot %s of %s/%s on plugin %s (ready: %t)\n", snap.SnapshotID, vf.namespace, args[0], snap.PluginID, snap.ReadyToUse)
		return nil
	}
	return cmd
}

func newSnapshotDeleteCmd() *cobra.Command {
	var secretsFile string
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "delete PLUGIN SNAPSHOT_ID",
		Short:   "delete a snapshot on its plugin",
		Example: "  plugvisor snapshot delete hostpath SNAPSHOT_ID",
		Args:    cmdline.Args("PLUGIN SNAPSHOT_ID", "plugvisor snapshot delete hostpath SNAPSHOT_ID"),
	})
	cmd.Flags().StringVar(&secretsFile, "secrets-file", "", "JSON file with the plugin's secrets")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		secrets, err := readSecrets(secretsFile)
		if err != nil {
			return err
		}
		path := "/v1/snapshots/" + url.PathEscape(args[0]) + "/" + url.PathEscape(args[1])
		if err := vf.client().call(cmd.Context(), "DELETE", path, nil, api.DeleteSnapshotBody{Secrets: secrets}, nil); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "deleted snapshot %s of plugin %s\n", args[1], args[0])
		return nil
	}
	return cmd
}

func newSnapshotListCmd() *cobra.Command {
	var plugin, volume, id string
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "list",
		Short:   "the snapshots a plugin has, of one volume or all",
		Example: "  plugvisor snapshot list -volume db\n  plugvisor snapshot list -plugin hostpath -json",
		Args:    cmdline.Args("", "plugvisor snapshot list -volume db"),
	})
	cmd.Flags().StringVar(&plugin, "plugin", "", "the plugin to ask (or give -volume)")
	cmd.Flags().StringVar(&volume, "volume", "", "only the snapshots of this volume")
	cmd.Flags().StringVar(&id, "snapshot", "", "only this snapshot")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if plugin == "" && volume == "" {
			return usageError("list needs -plugin P or -volume ID, the plugin to ask")
		}
		return snapshotList(cmd.Context(), vf, plugin, volume, id, cmd.OutOrStdout())
	}
	return cmd
}

func snapshotList(ctx context.Context, vf *volumeFlags, plugin, volume, id string, stdout io.Writer) error {
	query := url.Values{}
	for k, v := range map[string]string{"plugin_id": plugin, "volume_id": volume, "snapshot_id": id} {
		if v != "" {
			query.Set(k, v)
		}
	}
	if volume != "" {
		query.Set("namespace", vf.namespace)
	}
	var out struct {
		Snapshots []api.SnapshotJSON `json:"snapshots"`
	}
	if err := vf.client().call(ctx, "GET", "/v1/snapshots", query, nil, &out); err != nil {
		return err
	}
	if vf.common.json {
		return printJSON(stdout, out)
	}
	if len(out.Snapshots) == 0 {
		fmt.Fprintln(stdout, "no snapshots")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tSNAPSHOT\tSOURCE VOLUME\tSIZE\tREADY\tCREATED")
	for _, s := range out.Snapshots {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%t\t%s\n", s.PluginID, s.SnapshotID, s.SourceVolumeID, s.SizeBytes, s.ReadyToUse, s.CreationTime)
	}
	return tw.Flush()
}
