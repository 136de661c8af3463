package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestAVolumeIDTakenInAnotherNamespaceIsRefusedWithoutInvitingItsDeletion
// is part of attack 5 of issue 39: a create of volume dev/db, where prod/db
// of the same plugin exists, made the plugin hand back prod's volume (its
// name is the volume ID), and the 409 said "or delete the plugin volume":
// prod's live data. The refusal names the other namespace's volume and
// suggests another ID or name, never deleting or deregistering anything;
// prod's volume is untouched, and another name creates dev's own.
func TestAVolumeIDTakenInAnotherNamespaceIsRefusedWithoutInvitingItsDeletion(t *testing.T) {
	f := newAPIFixture(t)
	srv := hostpathtest.Serve(t, hostpath.Config{NodeID: "node-1", Root: hostpathtest.TempDir(t)})
	f.registerController("hostpath", srv.Endpoint)
	var prod api.ManagedVolumeJSON
	f.call("POST", "/v1/volumes/prod/db/create", createBody, http.StatusCreated, &prod)

	code, body := f.do("POST", "/v1/volumes/dev/db/create", createBody)
	require.Equal(t, http.StatusConflict, code, body)
	for _, invitation := range []string{"delete", "deregister", "remove"} {
		require.NotContains(t, strings.ToLower(body), invitation, "the refusal invites no one to %s anything", invitation)
	}
	require.Contains(t, body, `catalog volume \"db\" in namespace \"prod\"`)
	require.Contains(t, body, `choose another volume ID, or send another \"name\"`)
	f.call("GET", "/v1/volumes/dev/db", "", http.StatusNotFound, nil)
	still, err := f.cat.GetVolume(context.Background(), "prod", "db")
	require.NoError(t, err)
	require.Equal(t, prod.ExternalID, still.ExternalID, "prod's volume is untouched")
	require.Equal(t, prod.CapacityBytes, still.CapacityBytes)

	var dev api.ManagedVolumeJSON
	f.call("POST", "/v1/volumes/dev/db/create", strings.Replace(createBody, `"plugin_id": "hostpath",`, `"plugin_id": "hostpath", "name": "dev-db",`, 1),
		http.StatusCreated, &dev)
	require.NotEqual(t, prod.ExternalID, dev.ExternalID, "another name makes dev a volume of its own")
}
