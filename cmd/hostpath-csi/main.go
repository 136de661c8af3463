// Command hostpath-csi runs plugvisor's reference hostpath CSI plugin on a
// unix socket until SIGTERM or SIGINT, then stops gracefully and removes the
// socket. It logs what it does to stderr. The plugin is as strict as the
// drivers of real disks; `hostpath-csi -h` lists its rules, and the package
// documentation of csi/hostpath gives each refusal's gRPC code.
//
//	hostpath-csi -endpoint /run/csi/hostpath.sock -root /var/lib/hostpath-csi -node-id node1 -mode monolith
//	hostpath-csi -endpoint /run/csi/hostpath.sock -root /var/lib/hostpath-csi -node-id node1 -attach-required
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := hostpath.Run(ctx, os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
