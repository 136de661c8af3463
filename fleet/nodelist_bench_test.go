package fleet_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// BenchmarkNodeList lists the nodes of a fleet of 3 nodes up, each
// holding a claim on and an attachment of 10 volumes, with 100, then
// 10,000 volumes in all (one embedded etcd, the volumes written by
// fleet.Fill): the same 30 claims and attachments each time, so the
// list's cost is to stay the same whatever the number of volumes. As a
// baseline in the same run, "every volume" reads and decodes every volume
// (ListVolumes), as the node list did before the node index.
func BenchmarkNodeList(b *testing.B) {
	srv := etcdtest.Start(b)
	var stores []*fleet.Store
	for i := range 3 {
		stores = append(stores, open(b, srv, fmt.Sprintf("node-%d", i)))
	}
	held := 0
	fillTo := func(b *testing.B, n int) {
		var vols []*model.CSIVolume
		for ; held < n; held++ {
			v := volume(fmt.Sprintf("fill-%d", held), model.AccessModeSingleNodeWriter)
			if held < 30 {
				node := fmt.Sprintf("node-%d", held%3)
				v.WriteClaims[fmt.Sprintf("alloc-%d", held)] = writeClaim(fmt.Sprintf("alloc-%d", held), node)
				v.Attachments = map[string]*model.Attachment{}
				v.Attachments[node] = &model.Attachment{NodeID: node, ExternalNodeID: "csi-" + node, State: model.AttachmentStateAttached}
			}
			vols = append(vols, v)
		}
		require.NoError(b, fleet.Fill(testCtx(b), stores[0], vols))
	}
	for _, at := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("%d volumes", at), func(b *testing.B) {
			fillTo(b, at)
			nodes, err := stores[1].Nodes(testCtx(b)) // the first list checks the index once
			require.NoError(b, err)
			require.Len(b, nodes, 3)
			b.ResetTimer()
			for range b.N {
				nodes, err := stores[1].Nodes(testCtx(b))
				if err != nil || len(nodes) != 3 || len(nodes[0].Claims) != 10 || len(nodes[0].Attachments) != 10 {
					b.Fatalf("node list: %v, %d nodes", err, len(nodes))
				}
			}
		})
		b.Run(fmt.Sprintf("every volume at %d volumes", at), func(b *testing.B) {
			for range b.N {
				if vols, err := stores[1].ListVolumes(testCtx(b), ""); err != nil || len(vols) != at {
					b.Fatalf("volume list: %v, %d volumes", err, len(vols))
				}
			}
		})
	}
}
