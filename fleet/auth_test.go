package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAnAgentEtcdRefusesIsDeniedNotUnavailable turns etcd's auth on and
// opens the fleet as a user with a wrong password, and as one whose role
// may not touch the fleet's prefix: etcd answered both, so the error is
// denied (it names the remedy), never the "etcd did not answer" of an
// outage, which would have the operator wait for etcd to come back.
func TestAnAgentEtcdRefusesIsDeniedNotUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	root := etcdClient(t, srv)
	ctx := testCtx(t)
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "weak", "weak-pw"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}
	t.Cleanup(func() {
		c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Username: "root", Password: "root-pw", DialTimeout: timeout})
		if err == nil {
			_, _ = c.AuthDisable(testCtx(t))
			_ = c.Close()
		}
	})
	for name, cfg := range map[string]fleet.Config{
		"a wrong password":                   {Username: "root", Password: "nope"},
		"a user whose role may not touch it": {Username: "weak", Password: "weak-pw"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.Endpoints, cfg.NodeID, cfg.LeaseTTL, cfg.RequestTimeout = srv.Endpoints(), "node-a", fleet.MinLeaseTTL, 5*time.Second
			_, err := fleet.Open(testCtx(t), cfg)
			require.ErrorIs(t, err, fleet.ErrEtcdDenied)
			require.ErrorIs(t, err, errclass.Denied)
			require.NotErrorIs(t, err, model.ErrFleetUnavailable)
			require.ErrorContains(t, err, "whose role may read and write the fleet's prefix")
		})
	}
}
