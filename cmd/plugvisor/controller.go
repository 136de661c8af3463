package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/plugvisor/plugvisor/api"
)

// The commands that go through a plugin's controller: volume create,
// delete and expand, and snapshot create, delete and list.

const volumeCreateHelp = `Usage: plugvisor volume create [flags] ID

Creates a volume with the plugin's controller (CreateVolume) and registers
it. Creating again with the same name finds the same volume, so a create that
failed half way is finished by running it again. Secrets are read from a JSON
file (an object of strings), never from the command line, and are never shown.

Example:
  plugvisor volume create -plugin hostpath -access-mode single-node-writer -size 1GiB \
    -parameter tier=fast -secrets-file ./db-secrets.json db
  plugvisor volume create -plugin hostpath -access-mode single-node-writer -snapshot SNAP-ID db-restored`

const volumeDeleteHelp = `Usage: plugvisor volume delete [flags] ID

Deletes a volume on its plugin (DeleteVolume) and forgets it. A volume with
claims is refused, naming the allocs. A volume that was registered rather
than created, or any volume with -deregister-only, is only forgotten.

Example:
  plugvisor volume delete db
  plugvisor volume delete -deregister-only legacy`

const volumeDeregisterHelp = `Usage: plugvisor volume deregister [flags] ID

Forgets a volume and leaves it on its plugin: "volume delete
-deregister-only". A volume with claims is refused, naming the allocs.

Example:
  plugvisor volume deregister legacy`

const volumeExpandHelp = `Usage: plugvisor volume expand [flags] ID

Grows a volume with the plugin's controller (ControllerExpandVolume) and
records its new capacity. Says when the plugin asks for node expansion.

Example:
  plugvisor volume expand -size 2GiB db`

const snapshotHelp = `Usage: plugvisor snapshot <create|delete|list> [flags] [args]

  create [-namespace NS] [-parameter K=V] [-secrets-file F] VOLUME NAME
  delete [-secrets-file F] PLUGIN SNAPSHOT_ID
  list [-plugin P] [-namespace NS] [-volume ID] [-snapshot SNAPSHOT_ID]

Snapshots live on the plugin. Create a volume from one with
plugvisor volume create -snapshot SNAPSHOT_ID.

Examples:
  plugvisor snapshot create db nightly
  plugvisor snapshot list -volume db
  plugvisor snapshot delete hostpath SNAPSHOT_ID`

// keyValues is a repeatable K=V flag.
type keyValues map[string]string

func (kv *keyValues) String() string { return fmt.Sprint(map[string]string(*kv)) }

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

func (t *topologyList) Set(v string) error {
	var seg keyValues
	for _, part := range strings.Split(v, ",") {
		if err := seg.Set(part); err != nil {
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

// controllerFlags are the flags every controller command takes.
type controllerFlags struct {
	common    commonFlags
	namespace *string
}

func newControllerFlags(name, help string, stdout io.Writer) (*flag.FlagSet, *controllerFlags) {
	fs := newFlags(name, help, stdout)
	cf := &controllerFlags{}
	cf.common.register(fs)
	cf.namespace = fs.String("namespace", "default", "the volume's namespace")
	return fs, cf
}

func (cf *controllerFlags) client() *client { return newClient(cf.common.dataDir) }

// runVolumeController runs the volume subcommands that go through the
// controller; handled is false for the others.
func runVolumeController(sub string, args []string, stdout io.Writer) (handled bool, err error) {
	switch sub {
	case "create":
		return true, volumeCreate(args, stdout)
	case "delete":
		return true, volumeDelete("volume delete", volumeDeleteHelp, args, false, stdout)
	case "deregister":
		return true, volumeDelete("volume deregister", volumeDeregisterHelp, args, true, stdout)
	case "expand":
		return true, volumeExpand(args, stdout)
	}
	return false, nil
}

func volumeCreate(args []string, stdout io.Writer) error {
	fs, cf := newControllerFlags("volume create", volumeCreateHelp, stdout)
	var body api.CreateBody
	var params keyValues
	var flags stringList
	var requisite, preferred topologyList
	var size, limit sizeFlag
	fs.StringVar(&body.PluginID, "plugin", "", "CSI plugin whose controller creates it (required)")
	fs.StringVar(&body.AccessMode, "access-mode", "", "access mode (required), e.g. single-node-writer")
	fs.StringVar(&body.AttachmentMode, "attachment-mode", "file-system", "file-system or block-device")
	fs.StringVar(&body.Name, "name", "", "name for CreateVolume (default: the ID)")
	fs.Var(&size, "size", "capacity to ask for, e.g. 10GiB")
	fs.Var(&limit, "limit", "largest capacity allowed, e.g. 20GiB")
	fs.Var(&params, "parameter", "plugin parameter KEY=VALUE (repeatable)")
	secretsFile := fs.String("secrets-file", "", "JSON file with the plugin's secrets (never shown)")
	fs.StringVar(&body.SnapshotID, "snapshot", "", "snapshot ID to create the volume from")
	fsType := fs.String("fs-type", "", "file system type, e.g. ext4")
	fs.Var(&flags, "mount-flag", "mount flag (repeatable)")
	fs.Var(&requisite, "requisite", "required topology KEY=VALUE[,KEY=VALUE] (repeatable)")
	fs.Var(&preferred, "preferred", "preferred topology KEY=VALUE[,KEY=VALUE] (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("create needs ID, e.g. plugvisor volume create -plugin hostpath -access-mode single-node-writer db")
	}
	secrets, err := readSecrets(*secretsFile)
	if err != nil {
		return err
	}
	body.Secrets, body.Parameters = secrets, params
	body.Capacity = api.CapacityJSON{RequiredBytes: int64(size), LimitBytes: int64(limit)}
	body.Topology = api.TopologyJSON{Requisite: requisite, Preferred: preferred}
	if *fsType != "" || len(flags) > 0 {
		body.MountOptions = &api.MountOptionsJSON{FSType: *fsType, MountFlags: flags}
	}
	var v api.ManagedVolumeJSON
	if err := cf.client().call(context.Background(), "POST", volumePath(*cf.namespace, fs.Arg(0), "create"), nil, body, &v); err != nil {
		return err
	}
	if cf.common.json {
		return printJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "created volume %s/%s on plugin %s: plugin volume %s, %d bytes\n",
		v.Namespace, v.ID, v.PluginID, v.ExternalID, v.CapacityBytes)
	return nil
}

// volumeDelete deletes a volume, or only forgets it when deregister (the
// deregister command) or -deregister-only says so.
func volumeDelete(name, help string, args []string, deregister bool, stdout io.Writer) error {
	fs, cf := newControllerFlags(name, help, stdout)
	only := &deregister
	if !deregister {
		only = fs.Bool("deregister-only", false, "only forget the volume; leave it on the plugin")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("%s needs ID, e.g. plugvisor %s db", name, name)
	}
	var query url.Values
	if *only {
		query = url.Values{"deregister_only": {"true"}}
	}
	var out map[string]string
	if err := cf.client().call(context.Background(), "DELETE", volumePath(*cf.namespace, fs.Arg(0), ""), query, nil, &out); err != nil {
		return err
	}
	if cf.common.json {
		return printJSON(stdout, out)
	}
	if out["deleted"] != "" {
		fmt.Fprintf(stdout, "deleted volume %s/%s on its plugin\n", *cf.namespace, fs.Arg(0))
	} else {
		fmt.Fprintf(stdout, "deregistered volume %s/%s (left on its plugin)\n", *cf.namespace, fs.Arg(0))
	}
	return nil
}

func volumeExpand(args []string, stdout io.Writer) error {
	fs, cf := newControllerFlags("volume expand", volumeExpandHelp, stdout)
	var size, limit sizeFlag
	fs.Var(&size, "size", "capacity to grow to (required), e.g. 20GiB")
	fs.Var(&limit, "limit", "largest capacity allowed")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("expand needs ID, e.g. plugvisor volume expand -size 20GiB db")
	}
	var out api.ExpandJSON
	body := api.ExpandBody{RequiredBytes: int64(size), LimitBytes: int64(limit)}
	if err := cf.client().call(context.Background(), "POST", volumePath(*cf.namespace, fs.Arg(0), "expand"), nil, body, &out); err != nil {
		return err
	}
	if cf.common.json {
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "expanded volume %s/%s to %d bytes", *cf.namespace, fs.Arg(0), out.CapacityBytes)
	switch {
	case out.NodeExpanded:
		fmt.Fprint(stdout, "; the nodes expanded it too")
	case out.NodeExpansionRequired:
		fmt.Fprint(stdout, "; the plugin asks for node expansion, which waits for the volume's next mount")
	}
	fmt.Fprintln(stdout)
	return nil
}

func runSnapshot(args []string, stdout, _ io.Writer) error {
	sub, args, err := subcommand(args, snapshotHelp, stdout)
	if err != nil {
		return err
	}
	fs, cf := newControllerFlags("snapshot "+sub, snapshotHelp, stdout)
	ctx := context.Background()
	switch sub {
	case "create":
		var params keyValues
		fs.Var(&params, "parameter", "plugin parameter KEY=VALUE (repeatable)")
		secretsFile := fs.String("secrets-file", "", "JSON file with the plugin's secrets (default: the volume's)")
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return usageError("create needs VOLUME NAME, e.g. plugvisor snapshot create db nightly")
		}
		secrets, err := readSecrets(*secretsFile)
		if err != nil {
			return err
		}
		body := api.SnapshotBody{Namespace: *cf.namespace, VolumeID: fs.Arg(0), Name: fs.Arg(1), Parameters: params, Secrets: secrets}
		var snap api.SnapshotJSON
		if err := cf.client().call(ctx, "POST", "/v1/snapshots", nil, body, &snap); err != nil {
			return err
		}
		if cf.common.json {
			return printJSON(stdout, snap)
		}
		fmt.Fprintf(stdout, "created snapshot %s of %s/%s on plugin %s (ready: %t)\n", snap.SnapshotID, *cf.namespace, fs.Arg(0), snap.PluginID, snap.ReadyToUse)
		return nil
	case "delete":
		secretsFile := fs.String("secrets-file", "", "JSON file with the plugin's secrets")
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return usageError("delete needs PLUGIN SNAPSHOT_ID, e.g. plugvisor snapshot delete hostpath SNAPSHOT_ID")
		}
		secrets, err := readSecrets(*secretsFile)
		if err != nil {
			return err
		}
		path := "/v1/snapshots/" + url.PathEscape(fs.Arg(0)) + "/" + url.PathEscape(fs.Arg(1))
		if err := cf.client().call(ctx, "DELETE", path, nil, api.DeleteSnapshotBody{Secrets: secrets}, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted snapshot %s of plugin %s\n", fs.Arg(1), fs.Arg(0))
		return nil
	case "list":
		return snapshotList(ctx, fs, cf, args, stdout)
	}
	return usageError("unknown subcommand %q (want create, delete or list)", sub)
}

func snapshotList(ctx context.Context, fs *flag.FlagSet, cf *controllerFlags, args []string, stdout io.Writer) error {
	plugin := fs.String("plugin", "", "the plugin to ask (or give -volume)")
	volume := fs.String("volume", "", "only the snapshots of this volume")
	id := fs.String("snapshot", "", "only this snapshot")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError("list takes flags only, e.g. plugvisor snapshot list -volume db")
	}
	query := url.Values{}
	for k, v := range map[string]string{"plugin_id": *plugin, "volume_id": *volume, "snapshot_id": *id} {
		if v != "" {
			query.Set(k, v)
		}
	}
	if *volume != "" {
		query.Set("namespace", *cf.namespace)
	}
	var out struct {
		Snapshots []api.SnapshotJSON `json:"snapshots"`
	}
	if err := cf.client().call(ctx, "GET", "/v1/snapshots", query, nil, &out); err != nil {
		return err
	}
	if cf.common.json {
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
