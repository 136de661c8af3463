package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
)

// nodeRecord is a node record as GET /v1/volumes/{ns}/{id}/status renders
// it: every field under its proto name, 64-bit integers as numbers.
const nodeRecord = `{"namespace": "default", "volume_id": "db", "plugin_id": "hp", "external_id": "ext-db",
 "access_mode": "single-node-writer", "attachment_mode": "file-system",
 "attachment": {"state": "attached", "node_id": "csi-n1", "controller_socket": "/c.sock", "publish_context": {}, "last_error": ""},
 "stage": {"state": "staged", "staging_path": "/data/staging/db", "node_socket": "/n.sock", "last_error": ""},
 "publishes": {
  "web-2": {"alloc_id": "web-2", "state": "published", "target_path": "/data/web-2/db", "read_only": true,
            "claimed_by_mount": true, "node_socket": "/n.sock", "last_error": "", "fence": "read-only: the lease lapsed"},
  "web-1": {"alloc_id": "web-1", "state": "publishing", "target_path": "/data/web-1/db", "read_only": false,
            "claimed_by_mount": true, "node_socket": "/n.sock", "last_error": "mount: busy", "fence": ""}},
 "pending_expand_bytes": 2147483648, "pending_expand_error": "",
 "condition": "disk errors"}`

func TestVolumeStatusPrintsTheNodeRecordAsAlignedFields(t *testing.T) {
	var out strings.Builder
	require.NoError(t, printStatus(&out, commonFlags{}, "default", "db", api.StatusJSON{Node: json.RawMessage(nodeRecord)}))
	require.Equal(t, `volume default/db is not in the catalog
  on this node:
    attachment:         attached, plugin node ID csi-n1
    stage:              staged, at /data/staging/db
    publish web-1:      publishing, at /data/web-1/db, read-write, last error: mount: busy
    publish web-2:      published, at /data/web-2/db, read-only, fenced: read-only: the lease lapsed
    pending expansion:  to 2147483648 bytes
    condition:          disk errors
`, out.String())
	require.NotContains(t, out.String(), "{", "no JSON")
}

func TestVolumeStatusSaysWhenTheNodeHoldsNothing(t *testing.T) {
	var out strings.Builder
	require.NoError(t, printStatus(&out, commonFlags{}, "default", "db", api.StatusJSON{Node: json.RawMessage("null")}))
	require.Contains(t, out.String(), "  on this node: nothing\n")

	out.Reset()
	require.NoError(t, printNode(&out, json.RawMessage(`{"volume_id": "db", "publishes": {}}`)))
	require.Equal(t, "  on this node:\n    attachment:  none\n    stage:       none\n    publishes:   none\n", out.String())
}
