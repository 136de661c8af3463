package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func attachment(node string, state AttachmentState) *Attachment {
	return &Attachment{NodeID: node, ExternalNodeID: "i-" + node, State: state}
}

func TestAttachmentsFollowTheAccessMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   AccessMode
		claims []*Claim
		before []*Attachment
		attach *Attachment
		want   error
		text   string
	}{
		{name: "a node with a claim attaches", mode: AccessModeSingleNodeWriter,
			claims: []*Claim{writeClaim("a1", "n1")}, attach: attachment("n1", AttachmentStateAttaching)},
		{name: "attaching again, now attached, is allowed", mode: AccessModeSingleNodeWriter,
			claims: []*Claim{writeClaim("a1", "n1")}, before: []*Attachment{attachment("n1", AttachmentStateAttaching)},
			attach: attachment("n1", AttachmentStateAttached)},
		{name: "a node without a claim is refused", mode: AccessModeSingleNodeWriter,
			claims: []*Claim{writeClaim("a1", "n1")}, attach: attachment("n2", AttachmentStateAttaching),
			want: ErrAttachRefused, text: "node n2 holds no claim on it: claim it before attaching it"},
		{name: "a single-node volume attached elsewhere is refused", mode: AccessModeSingleNodeReader,
			claims: []*Claim{readClaim("a2", "n2")}, before: []*Attachment{attachment("n1", AttachmentStateAttached)},
			attach: attachment("n2", AttachmentStateAttaching),
			want:   ErrAttachConflict, text: "is attached to node n1 (attached, plugin node ID \"i-n1\"): it must be detached there first"},
		{name: "a multi-node volume attaches to a second node", mode: AccessModeMultiNodeMultiWriter,
			claims: []*Claim{writeClaim("a1", "n1"), writeClaim("a2", "n2")}, before: []*Attachment{attachment("n1", AttachmentStateAttached)},
			attach: attachment("n2", AttachmentStateAttaching)},
		{name: "an attachment without the plugin's node ID is invalid", mode: AccessModeSingleNodeWriter,
			claims: []*Claim{writeClaim("a1", "n1")}, attach: &Attachment{NodeID: "n1", State: AttachmentStateAttached},
			want: ErrInvalidAttachment, text: "the plugin's node ID must be 1 to 256 bytes, not 0"},
		{name: "an unknown state is invalid", mode: AccessModeSingleNodeWriter,
			claims: []*Claim{writeClaim("a1", "n1")}, attach: attachment("n1", "detached"),
			want: ErrInvalidAttachment, text: `state "detached" is not "attaching", "attached" or "detaching"`},
		{name: "a node ID with a separator is invalid", mode: AccessModeSingleNodeWriter,
			claims: []*Claim{writeClaim("a1", "n1")}, attach: attachment("../n1", AttachmentStateAttached),
			want: ErrInvalidAttachment, text: "node ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := healthyVolume(tc.mode)
			for _, c := range tc.claims {
				require.NoError(t, v.Claim(c))
			}
			v.Attachments = map[string]*Attachment{} // as left by claims freed since
			for _, a := range tc.before {
				v.Attachments[a.NodeID] = a
			}
			before := snapshot(t, v)
			err := v.Attach(tc.attach)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				require.ErrorContains(t, err, tc.text)
				require.Equal(t, before, snapshot(t, v), "a refused attachment changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.attach, v.Attachments[tc.attach.NodeID])
			require.NoError(t, v.Validate())
		})
	}
}

func TestAVolumeAttachedToTwoNodesAgainstItsModeIsInvalid(t *testing.T) {
	v := healthyVolume(AccessModeSingleNodeWriter)
	v.Attachments = map[string]*Attachment{"n1": attachment("n1", AttachmentStateAttached), "n2": attachment("n2", AttachmentStateAttached)}
	require.ErrorIs(t, v.Validate(), ErrInvalidVolume)
	require.ErrorContains(t, v.Validate(), "is attached to 2 nodes ([n1 n2]); single-node-writer allows one node")

	v.Attachments = map[string]*Attachment{"n1": attachment("n2", AttachmentStateAttached)}
	require.ErrorContains(t, v.Validate(), "attachment filed under node n1 belongs to node n2")
}

func TestDetachRemovesOnlyThatNodesAttachment(t *testing.T) {
	v := healthyVolume(AccessModeMultiNodeMultiWriter)
	require.NoError(t, v.Claim(writeClaim("a1", "n1")))
	require.NoError(t, v.Claim(writeClaim("a2", "n2")))
	require.NoError(t, v.Attach(attachment("n1", AttachmentStateAttached)))
	require.NoError(t, v.Attach(attachment("n2", AttachmentStateAttached)))
	require.True(t, v.Detach("n1"))
	require.False(t, v.Detach("n1"), "a second detach finds nothing")
	require.Equal(t, map[string]*Attachment{"n2": attachment("n2", AttachmentStateAttached)}, v.Attachments)
}
