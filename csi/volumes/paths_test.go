package volumes_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

func TestUsageNamesItsPathSegmentAsNomadDoes(t *testing.T) {
	cases := []struct {
		name  string
		usage csi.Usage
		want  string
	}{
		{"read-only file system", csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeReader},
			"ro-file-system-single-node-reader-only"},
		{"read-write block device", csi.Usage{AttachmentMode: model.AttachmentModeBlockDevice, AccessMode: model.AccessModeSingleNodeWriter},
			"rw-block-device-single-node-writer"},
		{"reader of a multi-writer volume", csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeMultiNodeMultiWriter},
			"ro-file-system-multi-node-multi-writer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.usage.String())
			require.NoError(t, tc.usage.Validate())
		})
	}
}

func TestPluginPathsLayOutStagingAndTargets(t *testing.T) {
	paths, err := volumes.NewPluginPaths("/var/lib/plugvisor/csi", "ebs")
	require.NoError(t, err)
	require.Equal(t, "/var/lib/plugvisor/csi/ebs", paths.Root())
	u := csi.Usage{AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeWriter}

	staging, err := paths.Staging("prod", "vol-1", u)
	require.NoError(t, err)
	require.Equal(t, "/var/lib/plugvisor/csi/ebs/staging/prod/vol-1/rw-file-system-single-node-writer", staging)

	target, err := paths.Target("alloc-1", "vol-1", u)
	require.NoError(t, err)
	require.Equal(t, "/var/lib/plugvisor/csi/ebs/per-alloc/alloc-1/vol-1/rw-file-system-single-node-writer", target)
}

func TestPluginPathsRefuseTraversal(t *testing.T) {
	good := csi.Usage{AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeWriter}
	paths, err := volumes.NewPluginPaths("/root", "p")
	require.NoError(t, err)
	cases := []struct {
		name string
		path func() (string, error)
		want string
	}{
		{"plugin name of dots", func() (string, error) {
			p, err := volumes.NewPluginPaths("/root", "..")
			return p.Root(), err
		}, `plugin name ".." must not contain ".."`},
		{"relative root", func() (string, error) {
			p, err := volumes.NewPluginPaths("root", "p")
			return p.Root(), err
		}, `root "root" must be an absolute path`},
		{"namespace climbing out", func() (string, error) { return paths.Staging("../../etc", "v", good) },
			`namespace "../../etc" must not contain a path separator`},
		{"namespace of one dot", func() (string, error) { return paths.Staging(".", "v", good) },
			`namespace must not be "."`},
		{"volume ID climbing out of staging", func() (string, error) { return paths.Staging("ns", "..", good) },
			`volume ID ".." must not contain ".."`},
		{"volume ID climbing out of per-alloc", func() (string, error) { return paths.Target("a1", "x/../../y", good) },
			`volume ID "x/../../y" must not contain a path separator`},
		{"alloc ID climbing out", func() (string, error) { return paths.Target("..", "v", good) },
			`alloc ID ".." must not contain ".."`},
		{"empty alloc ID", func() (string, error) { return paths.Target("", "v", good) },
			"alloc ID must not be empty"},
		{"unknown usage", func() (string, error) { return paths.Target("a1", "v", csi.Usage{}) },
			`unknown attachment mode ""`},
		{"zero paths", func() (string, error) { return volumes.PluginPaths{}.Staging("ns", "v", good) },
			"plugin paths have no root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, err := tc.path()
			require.ErrorIs(t, err, csi.ErrInvalidVolumeRequest)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, path)
		})
	}
}

func TestValidatePathID(t *testing.T) {
	require.NoError(t, volumes.ValidatePathID("volume ID", "vol-1.ext4_a"))
	for _, bad := range []string{"", ".", "..", "a/b", `a\b`, "a..b", "a\x00b", string(make([]byte, 129))} {
		err := volumes.ValidatePathID("volume ID", bad)
		require.ErrorIs(t, err, csi.ErrInvalidVolumeRequest, "%q", bad)
		require.ErrorContains(t, err, "csi: invalid volume request: volume ID")
	}
}
