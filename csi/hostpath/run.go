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
