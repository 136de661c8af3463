package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/plugvisor/plugvisor/api"
)

const volumeHelp = `Usage: plugvisor volume <create|delete|expand|register|list|status|mount|unmount> [flags] [args]

  create -plugin P -access-mode M [-size 1GiB] [-secrets-file F] [-snapshot S] ID   (see create -h)
  delete [-deregister-only] ID
  expand -size 2GiB ID
  register -id ID -plugin P -access-mode M [-attachment-mode file-system] [-namespace default]
  list [-namespace NS]
  status [-namespace NS] ID
  mount [-namespace NS] [-read-only] [-fs-type T] [-mount-flag F] ID ALLOC
  unmount [-namespace NS] ID ALLOC

Access modes: single-node-reader-only, single-node-writer, multi-node-reader-only,
multi-node-single-writer, multi-node-multi-writer. A mount claims the volume
for the alloc first: a second writer on a single-node-writer volume is refused.

Examples:
  plugvisor volume register -id db -plugin hostpath -access-mode single-node-writer
  plugvisor volume mount db web-1
  plugvisor volume status -json db
  plugvisor volume unmount db web-1`

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
		var v api.VolumeJSON
		if err := c().call(ctx, "GET", volumePath(*namespace, fs.Arg(0), ""), nil, nil, &v); err != nil {
			return err
		}
		return printVolume(stdout, common, v, fmt.Sprintf("volume %s/%s", v.Namespace, v.ID))
	case "mount", "unmount":
		var body api.MountBody
		var flags stringList
		fs.BoolVar(&body.ReadOnly, "read-only", false, "mount read-only (a read claim)")
		fs.StringVar(&body.FSType, "fs-type", "", "file system type to ask the plugin for")
		fs.Var(&flags, "mount-flag", "mount flag to pass to the plugin (repeatable)")
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return usageError("%s needs ID ALLOC, e.g. plugvisor volume %s db web-1", sub, sub)
		}
		body.AllocID, body.MountFlags = fs.Arg(1), flags
		var out map[string]any
		if err := c().call(ctx, "POST", volumePath(*namespace, fs.Arg(0), sub), nil, body, &out); err != nil {
			return err
		}
		if common.json {
			return printJSON(stdout, out)
		}
		if sub == "mount" {
			fmt.Fprintf(stdout, "mounted %s/%s for alloc %s at %v\n", *namespace, fs.Arg(0), body.AllocID, out["target_path"])
		} else {
			fmt.Fprintf(stdout, "unmounted %s/%s for alloc %s\n", *namespace, fs.Arg(0), body.AllocID)
		}
		return nil
	}
	return usageError("unknown subcommand %q (want register, list, status, mount or unmount)", sub)
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
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%v\n", v["Namespace"], v["ID"], v["PluginID"], v["AccessMode"], v["Schedulable"])
	}
	return tw.Flush()
}
