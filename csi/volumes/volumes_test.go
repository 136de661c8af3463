package volumes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

var (
	trackerVolume  = volumeRef{plugin: "p", namespace: "default", volumeID: "v1"}
	trackerOther   = volumeRef{plugin: "p", namespace: "default", volumeID: "v2"}
	trackerWriter  = csi.Usage{AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeWriter}
	trackerReader  = csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeWriter}
	trackerPublish = func(u csi.Usage) allocUse { return allocUse{usage: u, published: true} }
)

func TestVolumeUsageTracker(t *testing.T) {
	// Each step changes the tracker; then the checks say what it knows.
	type step func(tr *usageTracker)
	set := func(key volumeRef, alloc string, use allocUse) step {
		return func(tr *usageTracker) { tr.set(key, alloc, use) }
	}
	free := func(key volumeRef, alloc string) step { return func(tr *usageTracker) { tr.free(key, alloc) } }
	staged := func(key volumeRef, u csi.Usage, s bool) step {
		return func(tr *usageTracker) { tr.setStaged(key, u, s) }
	}

	cases := []struct {
		name       string
		steps      []step
		users      []string // users of trackerVolume with trackerWriter
		lastA1     bool     // a1 is the last writer of trackerVolume
		isStaged   bool     // trackerVolume is staged for trackerWriter
		volumes    int      // volumes the tracker remembers
		a1, a1Held allocUse
	}{
		{
			name:    "an empty tracker knows nothing",
			volumes: 0,
		},
		{
			name:   "one writer is the last user of its usage",
			steps:  []step{set(trackerVolume, "a1", trackerPublish(trackerWriter)), staged(trackerVolume, trackerWriter, true)},
			users:  []string{"a1"},
			lastA1: true, isStaged: true, volumes: 1,
			a1: trackerPublish(trackerWriter),
		},
		{
			name: "two allocs with one usage: neither is the last",
			steps: []step{
				set(trackerVolume, "a2", trackerPublish(trackerWriter)),
				set(trackerVolume, "a1", trackerPublish(trackerWriter)),
				staged(trackerVolume, trackerWriter, true),
			},
			users: []string{"a1", "a2"}, isStaged: true, volumes: 1,
			a1: trackerPublish(trackerWriter),
		},
		{
			name: "a reader does not share the writer's usage",
			steps: []step{
				set(trackerVolume, "a1", trackerPublish(trackerWriter)),
				set(trackerVolume, "a2", trackerPublish(trackerReader)),
			},
			users: []string{"a1"}, lastA1: true, volumes: 1,
			a1: trackerPublish(trackerWriter),
		},
		{
			name: "freeing the other alloc makes a1 the last",
			steps: []step{
				set(trackerVolume, "a1", trackerPublish(trackerWriter)),
				set(trackerVolume, "a2", trackerPublish(trackerWriter)),
				free(trackerVolume, "a2"),
			},
			users: []string{"a1"}, lastA1: true, volumes: 1,
			a1: trackerPublish(trackerWriter),
		},
		{
			name: "an unpublished alloc still counts as a user",
			steps: []step{
				set(trackerVolume, "a1", allocUse{usage: trackerWriter}),
				set(trackerVolume, "a2", trackerPublish(trackerWriter)),
			},
			users: []string{"a1", "a2"}, volumes: 1,
			a1: allocUse{usage: trackerWriter},
		},
		{
			name: "a staged volume nobody uses is remembered until unstaged",
			steps: []step{
				set(trackerVolume, "a1", trackerPublish(trackerWriter)),
				staged(trackerVolume, trackerWriter, true),
				free(trackerVolume, "a1"),
			},
			isStaged: true, volumes: 1,
		},
		{
			name: "the last free and the unstage forget the volume",
			steps: []step{
				set(trackerVolume, "a1", trackerPublish(trackerWriter)),
				staged(trackerVolume, trackerWriter, true),
				free(trackerVolume, "a1"),
				staged(trackerVolume, trackerWriter, false),
			},
			volumes: 0,
		},
		{
			name: "volumes are tracked apart",
			steps: []step{
				set(trackerOther, "a1", trackerPublish(trackerWriter)),
				staged(trackerOther, trackerWriter, true),
			},
			volumes: 1,
		},
		{
			name:    "freeing or unstaging what is not there changes nothing",
			steps:   []step{free(trackerVolume, "a9"), staged(trackerVolume, trackerWriter, false)},
			volumes: 0,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newUsageTracker()
			for _, s := range tc.steps {
				s(tr)
			}
			require.Equal(t, tc.users, tr.users(trackerVolume, trackerWriter))
			require.Equal(t, tc.lastA1, tr.lastUser(trackerVolume, "a1", trackerWriter))
			require.Equal(t, tc.isStaged, tr.isStaged(trackerVolume, trackerWriter))
			require.Len(t, tr.volumes, tc.volumes)
			got, held := tr.use(trackerVolume, "a1")
			require.Equal(t, tc.a1 != allocUse{}, held)
			require.Equal(t, tc.a1, got)
		})
	}
}

func TestVolumeRetryDelayDoublesUpToItsCap(t *testing.T) {
	p := volumeRetry{attempts: 10, backoff: 100 * time.Millisecond, max: time.Second}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, p.delay(n))
	}
	require.Equal(t, []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, time.Second, time.Second,
	}, got)
}

func TestVolumeRPCRetries(t *testing.T) {
	unavailable := fmt.Errorf("csi: NodeStageVolume: %w: plugin restarting", csi.ErrUnavailable)
	cases := []struct {
		name      string
		errs      []error // what each call returns; later calls succeed
		wantCalls int
		wantErr   error
		wantText  string
	}{
		{name: "success needs one call", wantCalls: 1},
		{name: "unavailable is retried until it succeeds", errs: []error{unavailable, unavailable}, wantCalls: 3},
		{name: "deadline exceeded and aborted are retried",
			errs: []error{csi.ErrDeadlineExceeded, csi.ErrAborted}, wantCalls: 3},
		{name: "invalid argument is not retried",
			errs: []error{csi.ErrInvalidArgument}, wantCalls: 1, wantErr: csi.ErrInvalidArgument},
		{name: "retries stop at the bound",
			errs:      []error{unavailable, unavailable, unavailable, unavailable, unavailable},
			wantCalls: 4, wantErr: csi.ErrUnavailable, wantText: "gave up after 4 attempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := &volumeJobEnv{retry: volumeRetry{attempts: 4, backoff: time.Microsecond, max: time.Millisecond}, log: hclog.NewNullLogger()}
			calls := 0
			_, err := retryVolumeRPC(t.Context(), env, "NodeStageVolume", func(context.Context) (struct{}, error) {
				calls++
				if calls <= len(tc.errs) {
					return struct{}{}, tc.errs[calls-1]
				}
				return struct{}{}, nil
			})
			require.Equal(t, tc.wantCalls, calls)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			require.Contains(t, err.Error(), tc.wantText)
		})
	}
}

func TestVolumeRPCRetriesStopWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	env := &volumeJobEnv{retry: volumeRetry{attempts: 100, backoff: time.Hour, max: time.Hour}, log: hclog.NewNullLogger()}
	calls := 0
	_, err := retryVolumeRPC(ctx, env, "NodePublishVolume", func(context.Context) (int, error) {
		calls++
		cancel()
		return 0, csi.ErrUnavailable
	})
	require.Equal(t, 1, calls)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, csi.ErrUnavailable)
}

// validMount is a mount request that parseMountVolume accepts.
func validMount() *messages.MountVolume {
	return &messages.MountVolume{
		Plugin: "p", Namespace: "ns", VolumeId: "v1", AllocId: "a1",
		AccessMode:     string(model.AccessModeSingleNodeWriter),
		AttachmentMode: string(model.AttachmentModeFileSystem),
		MountOptions:   &messages.MountOptions{FsType: "ext4", MountFlags: []string{"noatime", "uid=1000"}},
	}
}

func TestParseMountVolumeWorksOutPathsAndUsage(t *testing.T) {
	op, err := parseMountVolume("/var/lib/pv", validMount())
	require.NoError(t, err)
	require.Equal(t, volumeRef{plugin: "p", namespace: "ns", volumeID: "v1"}, op.key)
	require.Equal(t, "/var/lib/pv/p/staging/ns/v1/rw-file-system-single-node-writer", op.mount.stagingPath)
	require.Equal(t, "/var/lib/pv/p/per-alloc/a1/v1/rw-file-system-single-node-writer", op.mount.targetPath)
	require.Equal(t, &MountOptions{FSType: "ext4", MountFlags: []string{"noatime", "uid=1000"}}, op.mount.options)

	msg := validMount()
	msg.Namespace = ""
	op, err = parseMountVolume("/r", msg)
	require.NoError(t, err)
	require.Equal(t, model.DefaultNamespace, op.key.namespace, "an empty namespace is the default one")
}

func TestParseMountVolumeRefusesBadInput(t *testing.T) {
	cases := []struct {
		name   string
		change func(m *messages.MountVolume)
		want   []string // each must appear in the error
		also   error    // a sentinel besides ErrInvalidVolumeRequest
	}{
		{"plugin name with a slash", func(m *messages.MountVolume) { m.Plugin = "a/b" },
			[]string{`plugin name "a/b" must not contain a path separator`}, nil},
		{"namespace climbing out", func(m *messages.MountVolume) { m.Namespace = "../etc" },
			[]string{`namespace "../etc" must not contain a path separator`}, nil},
		{"namespace of dots", func(m *messages.MountVolume) { m.Namespace = ".." },
			[]string{`namespace ".." must not contain ".."`}, nil},
		{"namespace of one dot", func(m *messages.MountVolume) { m.Namespace = "." },
			[]string{`namespace must not be "."`}, nil},
		{"empty volume ID", func(m *messages.MountVolume) { m.VolumeId = "" },
			[]string{"volume ID must not be empty"}, nil},
		{"volume ID with a backslash", func(m *messages.MountVolume) { m.VolumeId = `v\1` },
			[]string{"volume ID", "must not contain a path separator"}, nil},
		{"alloc ID with a newline", func(m *messages.MountVolume) { m.AllocId = "a\n1" },
			[]string{"alloc ID", "must not contain control characters"}, nil},
		{"unknown access mode", func(m *messages.MountVolume) { m.AccessMode = "rwx" },
			[]string{`unknown access mode "rwx"`, "single-node-writer"}, model.ErrUnknownAccessMode},
		{"missing attachment mode", func(m *messages.MountVolume) { m.AttachmentMode = "" },
			[]string{`unknown attachment mode ""`}, model.ErrUnknownAttachmentMode},
		{"writing through a read-only access mode", func(m *messages.MountVolume) {
			m.AccessMode = string(model.AccessModeMultiNodeReader)
		}, []string{"access mode multi-node-reader-only is read-only: a mount with it must be read-only"}, nil},
		{"block device with an fs type", func(m *messages.MountVolume) {
			m.AttachmentMode = string(model.AttachmentModeBlockDevice)
			m.MountOptions = &messages.MountOptions{FsType: "xfs"}
		}, []string{`attachment mode block-device takes no fs_type (got "xfs")`}, nil},
		{"block device with mount flags", func(m *messages.MountVolume) {
			m.AttachmentMode = string(model.AttachmentModeBlockDevice)
			m.MountOptions = &messages.MountOptions{MountFlags: []string{"ro"}}
		}, []string{"attachment mode block-device takes no mount flags (got 1)"}, nil},
		{"fs type with a slash", func(m *messages.MountVolume) { m.MountOptions.FsType = "ext4/../x" },
			[]string{`fs_type "ext4/../x" must be`}, nil},
		{"empty mount flag", func(m *messages.MountVolume) { m.MountOptions.MountFlags = []string{"noatime", " "} },
			[]string{"mount flag 2 is empty"}, nil},
		{"mount flag climbing out", func(m *messages.MountVolume) {
			m.MountOptions.MountFlags = []string{"upperdir=/data/../../etc"}
		}, []string{`mount flag "upperdir=/data/../../etc" must not contain ".."`}, nil},
		{"mount flag with a NUL", func(m *messages.MountVolume) { m.MountOptions.MountFlags = []string{"ro\x00rw"} },
			[]string{"must not contain control characters"}, nil},
		{"too many mount flags", func(m *messages.MountVolume) {
			m.MountOptions.MountFlags = strings.Split(strings.Repeat("ro,", maxMountFlags)+"ro", ",")
		}, []string{"65 mount flags, over the limit of 64"}, nil},
		{"every problem at once", func(m *messages.MountVolume) { m.VolumeId, m.AllocId, m.AccessMode = "", "..", "" },
			[]string{"volume ID must not be empty", `alloc ID ".." must not contain ".."`, `unknown access mode ""`}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := validMount()
			tc.change(msg)
			_, err := parseMountVolume("/r", msg)
			require.ErrorIs(t, err, csi.ErrInvalidVolumeRequest)
			require.True(t, strings.HasPrefix(err.Error(), "csi: invalid volume request: "), err.Error())
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			if tc.also != nil {
				require.ErrorIs(t, err, tc.also)
			}
		})
	}
}

func TestVolumeErrorsSurviveTheActorBoundary(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
		code messages.ErrorCode
	}{
		{"invalid request", fmt.Errorf("csi: %w: volume ID must not be empty", csi.ErrInvalidVolumeRequest), csi.ErrInvalidVolumeRequest, messages.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"plugin not found", pluginNotFoundError("p"), ErrPluginNotFound, messages.ErrorCode_ERROR_CODE_NOT_FOUND},
		{"not mounted", fmt.Errorf("csi: %w: alloc a1", ErrNotMounted), ErrNotMounted, messages.ErrorCode_ERROR_CODE_NOT_FOUND},
		{"claim refused", fmt.Errorf("csi: %w: second writer", csi.ErrClaimRefused), csi.ErrClaimRefused, messages.ErrorCode_ERROR_CODE_CONFLICT},
		{"shut down", fmt.Errorf("csi: %w", ErrVolumesShutDown), ErrVolumesShutDown, messages.ErrorCode_ERROR_CODE_SHUT_DOWN},
		{"an RPC failure keeps its words", errors.New("csi: mount volume: csi: NodePublishVolume: internal error: boom"), nil, messages.ErrorCode_ERROR_CODE_UNSPECIFIED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire := volumeErrorToProto(tc.err)
			require.Equal(t, tc.code, wire.GetCode())
			back := VolumeErrorFromProto(wire)
			require.EqualError(t, back, tc.err.Error())
			if tc.want != nil {
				require.ErrorIs(t, back, tc.want)
			}
		})
	}
	require.NoError(t, VolumeErrorFromProto(nil))
	require.Nil(t, volumeErrorToProto(nil))
}
