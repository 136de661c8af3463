package hostpath

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
)

// DefaultRoot is where volumes live when -root is not given.
const DefaultRoot = "/var/lib/hostpath-csi"

// usageHead is what -h prints before the flags.
const usageHead = `Usage: hostpath-csi -endpoint SOCKET [flags]
       plugvisor hostpath-csi -endpoint SOCKET [flags]

Serves plugvisor's reference CSI plugin on a unix socket until SIGTERM or
SIGINT. A volume is a directory <root>/volumes/<id>; state is kept under
<root>/state and survives a restart. Staging bind-mounts the volume on the
staging path, publishing bind-mounts that on the target (read-only when
asked); both need root, or -symlink-fallback.

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
Secrets in requests are never logged or stored.

Example:
  hostpath-csi -endpoint unix:///run/csi/hostpath.sock -root /var/lib/hostpath-csi -node-id node1 -attach-required

Flags:
`

// Run is the hostpath-csi command: it parses args, serves the plugin until
// ctx is done, then stops it and removes the socket. Both the hostpath-csi
// binary and `plugvisor hostpath-csi` (which the demo starts) run it.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	hostname, _ := os.Hostname() // -node-id is checked by New
	cfg := Config{
		Name:    DefaultName,
		Version: DefaultVersion,
		NodeID:  hostname,
		Root:    DefaultRoot,
		Mode:    ModeMonolith,
	}
	flags := flag.NewFlagSet("hostpath-csi", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), usageHead)
		flags.PrintDefaults()
	}
	endpoint := flags.String("endpoint", "", "unix socket to serve on: an absolute path (or unix:///path) of at most 107 bytes")
	cfg.RegisterFlags(flags)
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("hostpath-csi: unexpected arguments %q", flags.Args())
	}
	if _, err := ParseEndpoint(*endpoint); err != nil {
		return fmt.Errorf("hostpath-csi: -endpoint: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg.Logger = log
	d, err := New(cfg)
	if err != nil {
		return fmt.Errorf("hostpath-csi: %w", err)
	}
	l, err := d.Listen(*endpoint)
	if err != nil {
		return fmt.Errorf("hostpath-csi: %w", err)
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
		err = errors.Join(err, fmt.Errorf("hostpath-csi: remove socket: %w", rerr))
	}
	if err != nil {
		return fmt.Errorf("hostpath-csi: serve: %w", err)
	}
	log.Info("hostpath-csi: exited cleanly", "endpoint", socket)
	return nil
}
