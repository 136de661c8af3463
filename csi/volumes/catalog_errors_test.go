package volumes_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// refusingCatalog is a Catalog whose claims all end with err.
type refusingCatalog struct {
	*modelCatalog
	err error
}

func (c *refusingCatalog) ClaimVolume(context.Context, csi.ClaimRequest) (*model.CSIVolume, error) {
	return nil, c.err
}

// TestTheCatalogsErrorsCrossBothActorBoundaries sends each catalog
// sentinel of a fleet that could not answer or is full across the
// catalog's answer (its wire code and kinds, through proto) and then the
// volume manager's: the caller's error still matches it, and keeps its
// words. (A refusal becomes volumes.ErrClaimRefused on the way, in the
// agent's wiring.)
func TestTheCatalogsErrorsCrossBothActorBoundaries(t *testing.T) {
	cases := []struct {
		sentinel error
		code     messages.ErrorCode
	}{
		{model.ErrFleetUnavailable, messages.ErrorCode_ERROR_CODE_UNAVAILABLE},
		{model.ErrVolumeLimit, messages.ErrorCode_ERROR_CODE_LIMIT},
	}
	for _, c := range cases {
		t.Run(c.sentinel.Error(), func(t *testing.T) {
			wire := messages.ErrorToProto(model.Refusef(c.sentinel, "the words of %s", c.sentinel))
			require.Equal(t, c.code, wire.GetCode(), "its own wire code")
			bytes, err := proto.Marshal(wire)
			require.NoError(t, err)
			var back messages.Error
			require.NoError(t, proto.Unmarshal(bytes, &back))
			crossed := messages.ErrorFromProto(&back)
			require.ErrorIs(t, crossed, c.sentinel, "across the catalog's answer")

			n := newNode(t, nil)
			n.catalog.add("v", "ext-v", "p", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
			n.restartWith(func(cfg *volumes.Config) { cfg.Catalog = &refusingCatalog{n.catalog, crossed} })
			err = n.manager.Claim(ctx, "default", "v", "a1", false)
			require.ErrorIs(t, err, c.sentinel, "across the volume manager's answer")
			require.ErrorContains(t, err, "the words of "+c.sentinel.Error())
			require.False(t, errors.Is(err, volumes.ErrStore), "and nothing else")
		})
	}
}

// TestEveryCatalogSentinelCrossesTheVolumeManagersActor sends each
// sentinel of the catalog, its model and the csi package, as the catalog's
// answer carries it (through proto), across the volume manager's actor:
// the facade's error matches the sentinel and its class, and keeps its
// text.
func TestEveryCatalogSentinelCrossesTheVolumeManagersActor(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("v", "ext-v", "p", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	refusing := &refusingCatalog{modelCatalog: n.catalog}
	n.restartWith(func(cfg *volumes.Config) { cfg.Catalog = refusing })
	count := 0
	for _, s := range errclass.Sentinels() {
		id := errclass.ID(s)
		if !strings.HasPrefix(id, "csi: ") && !strings.HasPrefix(id, "csi/catalog: ") && !strings.HasPrefix(id, "csi/catalog/model: ") {
			continue
		}
		count++
		bytes, err := proto.Marshal(messages.ErrorToProto(fmt.Errorf("volume %q: %w", "v", s)))
		require.NoError(t, err)
		var back messages.Error
		require.NoError(t, proto.Unmarshal(bytes, &back))
		refusing.err = messages.ErrorFromProto(&back)
		err = n.manager.Claim(ctx, "default", "v", "a1", false)
		require.ErrorIs(t, err, s, id)
		require.ErrorIs(t, err, errclass.Of(s), id)
		require.ErrorContains(t, err, s.Error())
	}
	require.Greater(t, count, 40, "the csi, catalog and model sentinels")
}
