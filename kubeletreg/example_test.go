package kubeletreg_test

import (
	"context"
	"fmt"
	"time"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/kubeletreg"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// Example takes the registrations of the CSI drivers whose
// node-driver-registrar sidecars put their sockets in kubelet's
// directory, and waits for one driver's node plugin.
func Example() {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	bucket, _ := storage.NewMemory().Bucket(registry.BucketName)
	reg, err := registry.New(system, registry.Config{Bucket: bucket})
	if err != nil {
		panic(err)
	}
	defer reg.Shutdown()

	w, err := kubeletreg.Start(system, kubeletreg.Config{Dirs: []string{kubeletreg.KubeletDir}, Registry: reg})
	if err != nil {
		panic(err)
	}
	defer w.Shutdown()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := reg.WaitForPlugin(ctx, "csi-node", "hostpath.csi.k8s.io")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.GetConnection().GetSocketPath(), p.GetAllocId())
}
