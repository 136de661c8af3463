// Command hostpath-csi runs plugvisor's reference hostpath CSI plugin on a
// unix socket until SIGTERM or SIGINT, then stops gracefully and removes the
// socket. It logs what it does to stderr.
//
//	hostpath-csi -endpoint /run/csi/hostpath.sock -root /var/lib/hostpath-csi -node-id node1 -mode monolith
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// defaultRoot is where volumes live when -root is not given.
const defaultRoot = "/var/lib/hostpath-csi"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run parses args, serves the plugin until ctx is done, then stops it and
// removes the socket.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	hostname, _ := os.Hostname() // -node-id is checked by hostpath.New
	cfg := hostpath.Config{
		Name:    hostpath.DefaultName,
		Version: hostpath.DefaultVersion,
		NodeID:  hostname,
		Root:    defaultRoot,
		Mode:    hostpath.ModeMonolith,
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
	if _, err := hostpath.ParseEndpoint(*endpoint); err != nil {
		return fmt.Errorf("hostpath-csi: -endpoint: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg.Logger = log
	d, err := hostpath.New(cfg)
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
