package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/dockervolume"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const dockerLong = `Docker volumes as dockerd keeps them: each name maps to one driver (a Docker
volume plugin), mounts are counted by mount ID (Docker uses the
container's), and a volume that is mounted cannot be removed. "plugins"
lists the Docker plugins found on disk (and those that have not answered a
handshake yet): state, attempts, health. "plugvisor plugin list" has the rest.`

const dockerExample = `  plugvisor docker volume create -driver local -opt size=1G db
  plugvisor docker volume mount db web-1
  plugvisor docker volume rm db
  plugvisor docker plugins -json`

func newDockerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "docker",
		Short:   "Docker volumes (create, ls, inspect, rm, mount, unmount, path) and discovered plugins",
		Long:    dockerLong,
		Example: dockerExample,
	}
	volume := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "create, list, inspect, remove, mount and unmount Docker volumes",
		Long:    dockerLong,
		Example: `  plugvisor docker volume create -driver local db
  plugvisor docker volume mount db web-1
  plugvisor docker volume unmount db web-1
  plugvisor docker volume rm db`,
	}
	volume.AddCommand(
		newDockerVolumeCmd("create [-driver D] [NAME]", "create a volume on a Docker volume plugin (no name: an anonymous one)", "NAME",
			"  plugvisor docker volume create -driver local db\n  plugvisor docker volume create -driver local -opt size=1G db\n  plugvisor docker volume create"),
		newDockerVolumeCmd("ls", "list every volume: known ones and every driver's", "",
			"  plugvisor docker volume ls\n  plugvisor docker volume ls -json", "list"),
		newDockerVolumeCmd("inspect NAME", "one volume: driver, mount point, mounts", "NAME",
			"  plugvisor docker volume inspect db"),
		newDockerVolumeCmd("rm [-f] NAME", "remove a volume (refused while mounted)", "NAME",
			"  plugvisor docker volume rm db\n  plugvisor docker volume rm -f db", "remove"),
		newDockerVolumeCmd("mount NAME ID", "mount a volume for a mount ID", "NAME ID",
			"  plugvisor docker volume mount db web-1"),
		newDockerVolumeCmd("unmount NAME ID", "unmount a volume for a mount ID", "NAME ID",
			"  plugvisor docker volume unmount db web-1"),
		newDockerVolumeCmd("path NAME", "print a volume's mount point", "NAME",
			"  plugvisor docker volume path db"))
	var common commonFlags
	plugins := &cobra.Command{
		Use:     "plugins",
		Short:   "the Docker plugins found on disk: state, attempts, next try, health",
		Example: "  plugvisor docker plugins\n  plugvisor docker plugins -json",
		Args:    cmdline.Args("", "plugvisor docker plugins"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return dockerPlugins(cmd.Context(), common, cmd.OutOrStdout())
		},
	}
	common.register(plugins.Flags())
	cmd.AddCommand(volume, plugins)
	return cmd
}

// newDockerVolumeCmd returns one "docker volume" subcommand, use naming it
// and want its arguments.
func newDockerVolumeCmd(use, short, want, example string, aliases ...string) *cobra.Command {
	var common commonFlags
	var body api.DockerVolumeBody
	var opts stringList
	var force bool
	sub, _, _ := strings.Cut(use, " ")
	args := cmdline.Args(want, "plugvisor docker volume "+sub+" "+strings.NewReplacer("NAME", "db", "ID", "web-1").Replace(want))
	if sub == "create" {
		args = cobra.MaximumNArgs(1) // no name: an anonymous volume
	}
	cmd := &cobra.Command{
		Use:     use,
		Aliases: aliases,
		Short:   short,
		Example: example,
		Args:    args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkDockerArgs(args); err != nil {
				return err
			}
			var name, path string
			if len(args) > 0 {
				name = args[0]
				path = "/v1/docker/volumes/" + url.PathEscape(name)
			}
			// A driver that is gone is waited for, as dockerd does (15 s).
			c := newClient(common.dataDir).withProgress(cmd.ErrOrStderr(), common.json,
				strings.TrimSpace("docker volume "+sub+" "+name+": waiting for the agent and the driver"))
			ctx, stdout := cmd.Context(), cmd.OutOrStdout()
			switch sub {
			case "create":
				return dockerCreate(ctx, c, common, stdout, body, name, opts)
			case "ls":
				var list dockervolumes.List
				if err := c.call(ctx, "GET", "/v1/docker/volumes", nil, nil, &list); err != nil {
					return err
				}
				return printDockerVolumes(stdout, common, list)
			case "inspect":
				var v dockervolumes.Volume
				if err := c.call(ctx, "GET", path, nil, nil, &v); err != nil {
					return err
				}
				return printDockerVolume(stdout, common, v, "volume "+v.Name)
			case "rm":
				var query url.Values
				if force {
					query = url.Values{"force": {"true"}}
				}
				return dockerDo(ctx, c, common, stdout, "DELETE", path, query, nil, "removed volume "+name)
			case "mount", "unmount":
				return dockerDo(ctx, c, common, stdout, "POST", path+"/"+sub, nil, api.DockerMountBody{ID: args[1]},
					sub+"ed volume "+name+" for "+args[1])
			default: // path
				return dockerDo(ctx, c, common, stdout, "GET", path+"/path", nil, nil, "")
			}
		},
	}
	common.register(cmd.Flags())
	switch sub {
	case "create":
		cmd.Flags().StringVar(&body.Driver, "driver", "", `the Docker volume plugin that serves the volume (default "local", when it is registered)`)
		cmd.Flags().Var(&opts, "opt", "a driver option KEY=VALUE (repeatable)")
	case "rm":
		cmd.Flags().BoolVarP(&force, "force", "f", false, "as docker volume rm -f: no such volume is no error, and the record goes even when the driver fails to remove the volume, whose error is still shown (a mounted one is still refused)")
	}
	return cmd
}

// dockerCreate creates volume name (anonymous when empty) with body's driver
// and opts.
func dockerCreate(ctx context.Context, c *client, common commonFlags, stdout io.Writer, body api.DockerVolumeBody, name string, opts stringList) error {
	var err error
	body.Name = name
	if body.Options, err = parseOpts(opts); err != nil {
		return err
	}
	if err := dockervolume.ValidateOptions(body.Options); err != nil {
		return usageError("%v", err)
	}
	var v dockervolumes.Volume
	if err := c.call(ctx, "POST", "/v1/docker/volumes", nil, body, &v); err != nil {
		return err
	}
	return printDockerVolume(stdout, common, v, "created volume "+v.Name+" on driver "+v.Driver)
}

// checkDockerArgs refuses a bad volume name or mount ID before anything is sent.
func checkDockerArgs(args []string) error {
	if len(args) > 0 {
		if err := dockervolume.ValidateVolumeName(args[0]); err != nil {
			return usageError("%v", err)
		}
	}
	if len(args) > 1 {
		if err := dockervolume.ValidateMountID(args[1]); err != nil {
			return usageError("%v", err)
		}
	}
	return nil
}

// parseOpts turns KEY=VALUE flags into a map; a key given twice is an error.
func parseOpts(opts []string) (map[string]string, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, o := range opts {
		k, v, ok := strings.Cut(o, "=")
		if !ok || k == "" {
			return nil, usageError("-opt %q: want KEY=VALUE", o)
		}
		if _, dup := out[k]; dup {
			return nil, usageError("-opt %q: key %q given twice", o, k)
		}
		out[k] = v
	}
	return out, nil
}

// dockerDo sends one request and prints its answer: JSON with -json, else
// done (or, when done is empty, the mount point).
func dockerDo(ctx context.Context, c *client, common commonFlags, stdout io.Writer, method, path string, query url.Values, body any, done string) error {
	var out map[string]string
	if err := c.call(ctx, method, path, query, body, &out); err != nil {
		return err
	}
	switch {
	case common.json:
		return printJSON(stdout, out)
	case out["mountpoint"] != "" && done != "":
		fmt.Fprintf(stdout, "%s at %s\n", done, out["mountpoint"])
	case done != "":
		fmt.Fprintln(stdout, done)
	default:
		fmt.Fprintln(stdout, out["mountpoint"])
	}
	return nil
}

func printDockerVolume(w io.Writer, common commonFlags, v dockervolumes.Volume, head string) error {
	if common.json {
		return printJSON(w, v)
	}
	fmt.Fprintf(w, "%s\n  driver %s, scope %s, created %s\n  mountpoint: %s\n  mounts: %s\n",
		head, v.Driver, orDash(v.Scope), v.CreatedAt.Format(time.RFC3339), orDash(v.Mountpoint), mountsText(v))
	if v.Error != "" {
		fmt.Fprintf(w, "  driver error: %s\n", v.Error)
	}
	return nil
}

func mountsText(v dockervolumes.Volume) string {
	var parts []string
	for id, n := range v.Mounts {
		parts = append(parts, fmt.Sprintf("%s×%d", id, n))
	}
	for _, id := range v.PendingMounts {
		parts = append(parts, id+" (pending: unmount it to clear)")
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printDockerVolumes(w io.Writer, common commonFlags, list dockervolumes.List) error {
	if common.json {
		return printJSON(w, list)
	}
	for _, warning := range list.Warnings {
		fmt.Fprintln(w, "warning:", warning)
	}
	if len(list.Volumes) == 0 {
		fmt.Fprintln(w, "no Docker volumes")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DRIVER\tVOLUME NAME\tSCOPE\tMOUNTS")
	for _, v := range list.Volumes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Driver, v.Name, orDash(v.Scope), mountsText(v))
	}
	return tw.Flush()
}

// discoveredJSON is one plugin of GET /v1/discovery/plugins.
type discoveredJSON struct {
	Name            string `json:"name"`
	Source          string `json:"source"`
	State           string `json:"state"`
	Protocol        string `json:"protocol"`
	Error           string `json:"error"`
	Failures        int    `json:"failures"`
	NextAttemptTime string `json:"next_attempt_time"`
	Health          string `json:"health"`
	HealthError     string `json:"health_error"`
}

func dockerPlugins(ctx context.Context, common commonFlags, stdout io.Writer) error {
	var out struct {
		Plugins []discoveredJSON `json:"plugins"`
	}
	if err := newClient(common.dataDir).call(ctx, "GET", "/v1/discovery/plugins", nil, nil, &out); err != nil {
		return err
	}
	return printDockerPlugins(stdout, common, out.Plugins)
}

// printDockerPlugins prints the Docker plugins among the discovered ones:
// those that answered Docker's handshake, and those that answered none yet
// (a CSI plugin is not Docker's business).
func printDockerPlugins(stdout io.Writer, common commonFlags, discovered []discoveredJSON) error {
	var out struct {
		Plugins []discoveredJSON `json:"plugins"`
	}
	out.Plugins = slices.DeleteFunc(slices.Clone(discovered), func(p discoveredJSON) bool { return p.Protocol == "csi" })
	if common.json {
		return printJSON(stdout, out)
	}
	if len(out.Plugins) == 0 {
		fmt.Fprintln(stdout, "no Docker plugins found on disk")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tHEALTH\tFILE\tDETAIL")
	for _, p := range out.Plugins {
		state := strings.ToLower(strings.TrimPrefix(p.State, "DISCOVERED_PLUGIN_STATE_"))
		detail := p.Error
		if p.NextAttemptTime != "" {
			detail = fmt.Sprintf("attempt %d failed, next at %s: %s", p.Failures, p.NextAttemptTime, p.Error)
		}
		if p.HealthError != "" && p.Health == "unhealthy" {
			detail = p.HealthError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, state, orDash(p.Health), p.Source, orDash(detail))
	}
	return tw.Flush()
}
