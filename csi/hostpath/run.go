package hostpath

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/internal/cli"
)

// DefaultRoot is where volumes live when -root is not given.
const DefaultRoot = "/var/lib/hostpath-csi"

// usageLong is what -h prints before the usage.
const usageLong = `Serves plugvisor's reference CSI plugin on a unix socket until SIGTERM or
SIGINT. A volume is a directory <root>/volumes/<id>; state is kept under
<root>/state and survives a restart. Staging bind-mounts the volume on the
staging path, publishing bind-mounts that on the target (read-only when
asked); both need root, or -symlink-fallback.

For a plugvisor agent, serve it where the agent's discovery looks: a socket
in <data-dir>/plugins. The agent registers it under the name it reports
(-name), which volumes then name as their plugin.

It is as strict as the drivers of real disks (each refusal is a gRPC status):
  - a volume is staged once per node: a second staging path is FailedPrecondition;
  - NodeUnstageVolume while any target is published is FailedPrecondition;
  - NodePublishVolume before NodeStageVolume, or with another staging path,
    is FailedPrecondition;
  - DeleteVolume of a volume attached, staged or published is FailedPrecondition.
With -attach-required it also advertises PUBLISH_UNPUBLISH_VOLUME and:
  - NodeStageVolume or NodePublishVolume before ControllerPublishVolume to the
    node is FailedPrecondition; without the publish_context it returned,
    InvalidArgument; with a stale one, FailedPrecondition;
  - ControllerPublishVolume to a second node is FailedPrecondition;
  - ControllerUnpublishVolume while the node stages or publishes the volume
    is FailedPrecondition.
Secrets in requests are never logged or stored.`

// usageExample is the examples -h prints.
const usageExample = `  # for the agent of /var/lib/plugvisor, as the plugin "hostpath":
  hostpath-csi -name hostpath -endpoint /var/lib/plugvisor/plugins/hostpath.sock -root /var/lib/hostpath-csi
  # a network-disk-like plugin, attached before it is staged:
  hostpath-csi -endpoint unix:///run/csi/hostpath.sock -root /var/lib/hostpath-csi -node-id node1 -attach-required`

// Command returns the hostpath-csi command: it serves the plugin until its
// context is done, then stops it and removes the socket. Both the
// hostpath-csi binary and `plugvisor hostpath-csi` (which the demo starts)
// run it.
func Command() *cobra.Command {
	hostname, _ := os.Hostname() // -node-id is checked by New
	cfg := Config{
		Name:    DefaultName,
		Version: DefaultVersion,
		NodeID:  hostname,
		Root:    DefaultRoot,
		Mode:    ModeMonolith,
	}
	var endpoint string
	cmd := &cobra.Command{
		Use:     "hostpath-csi -endpoint SOCKET",
		Short:   "serve the reference hostpath CSI plugin",
		Long:    usageLong,
		Example: usageExample,
		Args:    cli.Args("", "hostpath-csi -endpoint /run/csi/hostpath.sock"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), cfg, endpoint, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "unix socket to serve on: an absolute path (or unix:///path) of at most 107 bytes")
	goFlags := flag.NewFlagSet("hostpath-csi", flag.ContinueOnError)
	cfg.RegisterFlags(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
	cli.Require(cmd, "endpoint")
	return cmd
}

// Run runs the hostpath-csi command on args until ctx is done, printing
// help and logs to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	return cli.Run(ctx, Command(), args, stderr, stderr)
}

func serve(ctx context.Context, cfg Config, endpoint string, stderr io.Writer) error {
	if _, err := ParseEndpoint(endpoint); err != nil {
		return fmt.Errorf("-endpoint: %w", err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "hostpath-csi", Level: hclog.Info, Output: stderr})
	cfg.Logger = log
	d, err := New(cfg)
	if err != nil {
		return err
	}
	l, err := d.Listen(endpoint)
	if err != nil {
		return err
	}
	socket := l.Addr().String()
	log.Info("hostpath-csi: started", "pid", os.Getpid(), "endpoint", socket)

	served := make(chan error, 1)
	go func() { served <- d.Serve(l) }()
	select {
	case <-ctx.Done():
		log.Info("hostpath-csi: signal received, stopping gracefully")
		d.Stop()
		err = <-served
	case err = <-served:
	}
	if rerr := os.Remove(socket); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("remove socket: %w", rerr))
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("hostpath-csi: exited cleanly", "endpoint", socket)
	return nil
}
