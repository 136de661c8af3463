// Command hostpath-csi runs plugvisor's reference hostpath CSI plugin on a
// unix socket until SIGTERM or SIGINT, then stops gracefully and removes the
// socket. It logs what it does to stderr. The plugin is as strict as the
// drivers of real disks; `hostpath-csi -h` lists its rules, and the package
// documentation of csi/hostpath gives each refusal's gRPC code.
//
//	hostpath-csi -name hostpath -endpoint /var/lib/plugvisor/plugins/hostpath.sock -root /var/lib/hostpath-csi
//	hostpath-csi -endpoint /run/csi/hostpath.sock -root /var/lib/hostpath-csi -node-id node1 -attach-required
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Execute(ctx, hostpath.Command(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
