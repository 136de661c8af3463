package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/plugvisor/plugvisor/api"
)

const volumeHelp = `Usage: plugvisor volume <create|delete|expand|register|deregister|list|status|claim|release|mount|unmount|detach> [flags] [args]

  create -plugin P -access-mode M [-size 1GiB] [-secrets-file F] [-snapshot S] ID   (see create -h)
  delete [-deregister-only] ID
  expand -size 2GiB ID
  register -id ID -plugin P -access-mode M [-attachment-mode file-system] [-namespace default]
  deregister [-namespace NS] ID
  list [-namespace NS]
  status [-namespace NS] ID
  claim [-namespace NS] [-read-only] ID ALLOC
  release [-namespace NS] ID ALLOC
  mount [-namespace NS] [-read-only] ID ALLOC
  unmount [-namespace NS] ID ALLOC
  detach [-namespace NS] ID NODE

Access modes: single-node-reader-only, single-node-writer, multi-node-reader-only,
multi-node-single-writer, multi-node-multi-writer. A mount claims the volume
for the alloc first: a second writer on a single-node-writer volume is refused.
A reader (-read-only) joins a writer on the same node: the volume is staged
once and published read-only for the reader. An unmount releases the claim
its mount made; a claim made with "claim" stays until "release", which is
refused while the alloc has the volume mounted. "detach" forces the
controller to unpublish the volume from a node (the plugin's node ID), as
"nomad volume detach" does.

Examples:
  plugvisor volume register -id db -plugin hostpath -access-mode single-node-writer
  plugvisor volume mount db web-1
  plugvisor volume mount -read-only db report-1
  plugvisor volume status -json db
  plugvisor volume unmount db web-1
  plugvisor volume claim db batch-1
  plugvisor volume release db batch-1
  plugvisor volume detach db node-7`

func runVolume(args []string, stdout, stderr io.Writer) error {
	sub, args, err := subcommand(args, volumeHelp, stdout)
	if err != nil {
		return err
	}
	if handled, err := runVolumeController(sub, args, stdout); handled {
		return err
	}
	fs := newFlags("volume "+sub, volumeHelp, stdout)
	var common commonFlags
	common.register(fs)
	namespace := fs.String("namespace", "default", "the volume's namespace")
	c := func() *client { return newClient(common.dataDir) } // after parsing: -data-dir may come late
	ctx := context.Background()
	switch sub {
	case "register":
		var body api.VolumeBody
		fs.StringVar(&body.ID, "id", "", "volume ID (required)")
		fs.StringVar(&body.PluginID, "plugin", "", "CSI plugin that serves it (required)")
		fs.StringVar(&body.AccessMode, "access-mode", "", "access mode (required), e.g. single-node-writer")
		fs.StringVar(&body.AttachmentMode, "attachment-mode", "file-system", "file-system or block-device")
		if err := parse(fs, args); err != nil {
			return err
		}
		body.Namespace = *namespace
		var v api.VolumeJSON
		if err := c().call(ctx, "POST", "/v1/volumes", nil, body, &v); err != nil {
			return err
		}
		return printVolume(stdout, common, v, fmt.Sprintf("registered volume %s/%s on plugin %s", v.Namespace, v.ID, v.PluginID))
	case "list":
		if err := parse(fs, args); err != nil {
			return err
		}
		return volumeList(ctx, c(), common, *namespace, stdout)
	case "status":
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usageError("status needs ID, e.g. plugvisor volume status db")
		}
		var st api.StatusJSON
		if err := c().call(ctx, "GET", volumePath(*namespace, fs.Arg(0), "status"), nil, nil, &st); err != nil {
			return err
		}
		return printStatus(stdout, common, *namespace, fs.Arg(0), st)
	case "detach":
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return usageError("detach needs ID NODE, e.g. plugvisor volume detach db node-7")
		}
		var out map[string]any
		body := api.DetachBody{NodeID: fs.Arg(1)}
		if err := c().call(ctx, "POST", volumePath(*namespace, fs.Arg(0), sub), nil, body, &out); err != nil {
			return err
		}
		return printDone(stdout, common, out, "detached %s/%s from node %s\n", *namespace, fs.Arg(0), body.NodeID)
	case "claim", "release", "mount", "unmount":
		return volumeAllocOp(ctx, sub, fs, args, common, *namespace, c, stdout)
	}
	return usageError("unknown subcommand %q (want register, list, status, claim, release, mount, unmount or detach)", sub)
}

// volumeAllocOp runs claim, release, mount or unmount for an alloc.
func volumeAllocOp(ctx context.Context, sub string, fs *flag.FlagSet, args []string, common commonFlags, namespace string, c func() *client, stdout io.Writer) error {
	var body api.AllocBody
	if sub == "claim" || sub == "mount" {
		fs.BoolVar(&body.ReadOnly, "read-only", false, "a read claim (and a read-only mount)")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError("%s needs ID ALLOC, e.g. plugvisor volume %s db web-1", sub, sub)
	}
	body.AllocID = fs.Arg(1)
	var out map[string]any
	if err := c().call(ctx, "POST", volumePath(namespace, fs.Arg(0), sub), nil, body, &out); err != nil {
		return err
	}
	if sub == "mount" {
		return printDone(stdout, common, out, "mounted %s/%s for alloc %s at %v\n", namespace, fs.Arg(0), body.AllocID, out["target_path"])
	}
	return printDone(stdout, common, out, "%s: %s/%s for alloc %s\n", sub, namespace, fs.Arg(0), body.AllocID)
}

// printDone prints out as JSON with -json, else the line format makes.
func printDone(w io.Writer, common commonFlags, out any, format string, args ...any) error {
	if common.json {
		return printJSON(w, out)
	}
	fmt.Fprintf(w, format, args...)
	return nil
}

// printStatus prints what the catalog and this node hold of a volume.
func printStatus(w io.Writer, common commonFlags, namespace, id string, st api.StatusJSON) error {
	if common.json {
		return printJSON(w, st)
	}
	if st.Volume != nil {
		if err := printVolume(w, common, *st.Volume, fmt.Sprintf("volume %s/%s", namespace, id)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "volume %s/%s is not in the catalog\n", namespace, id)
	}
	for _, c := range st.PastClaims {
		fmt.Fprintf(w, "  past claim: alloc %s (%s), %s (%s)\n", c.AllocID, c.Mode, c.State, orOK(c.LastError))
	}
	if string(st.Node) == "null" || len(st.Node) == 0 {
		fmt.Fprintln(w, "  on this node: nothing")
	} else {
		fmt.Fprintf(w, "  on this node: %s\n", st.Node)
	}
	if st.LastOperation != "" {
		fmt.Fprintf(w, "  last operation: %s (%s)\n", st.LastOperation, orOK(st.LastError))
	}
	for _, o := range st.Orphans {
		fmt.Fprintf(w, "  orphan mount: %s\n", o)
	}
	if st.StatsError != "" {
		fmt.Fprintf(w, "  stats: error: %s\n", st.StatsError)
	}
	if st.Stats != nil {
		for _, u := range st.Stats.Usage {
			fmt.Fprintf(w, "  usage (%s): %d used of %d, %d available\n", u.Unit, u.Used, u.Total, u.Available)
		}
		if c := st.Stats.Condition; c != nil {
			fmt.Fprintf(w, "  condition: %s\n", map[bool]string{false: "normal", true: "abnormal"}[c.Abnormal]+orEmpty(": ", c.Message))
		}
	}
	return nil
}

// orEmpty is prefix+s, or "" when s is empty.
func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func orOK(err string) string {
	if err == "" {
		return "ok"
	}
	return "error: " + err
}

func volumePath(namespace, id, action string) string {
	p := "/v1/volumes/" + url.PathEscape(namespace) + "/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

func printVolume(w io.Writer, common commonFlags, v api.VolumeJSON, head string) error {
	if common.json {
		return printJSON(w, v)
	}
	fmt.Fprintf(w, "%s\n  plugin %s, %s, %s, schedulable: %v (%d healthy nodes)\n  writers: %s\n  readers: %s\n",
		head, v.PluginID, v.AccessMode, v.AttachmentMode, v.Schedulable, v.NodesHealthy,
		orNone(v.WriteClaims), orNone(v.ReadClaims))
	return nil
}

func orNone(allocs []string) string {
	if len(allocs) == 0 {
		return "none"
	}
	return strings.Join(allocs, ", ")
}

func volumeList(ctx context.Context, c *client, common commonFlags, namespace string, stdout io.Writer) error {
	var out struct {
		Volumes []map[string]any `json:"volumes"`
	}
	if err := c.call(ctx, "GET", "/v1/volumes", url.Values{"namespace": {namespace}}, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	if len(out.Volumes) == 0 {
		fmt.Fprintln(stdout, "no volumes registered")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tID\tPLUGIN\tACCESS MODE\tSCHEDULABLE")
	for _, v := range out.Volumes {
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%v\n", v["namespace"], v["id"], v["plugin_id"], v["access_mode"], v["schedulable"])
	}
	return tw.Flush()
}
