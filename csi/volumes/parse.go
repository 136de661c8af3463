package volumes

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// Limits on mount options.
const (
	maxMountFlags   = 64
	maxMountFlagLen = 256
)

// fsTypePattern is what a file-system type may look like: "ext4", "fuse.sshfs".
var fsTypePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// parseVolumeOp checks the parts of a mount or unmount that name the volume and
// the alloc. The op it returns is never nil, so a refusal can be answered.
func parseVolumeOp(root, plugin, namespace, volumeID, allocID string) (*volumeOp, []error) {
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	op := &volumeOp{key: volumeRef{plugin: plugin, namespace: namespace, volumeID: volumeID}, allocID: allocID}
	var problems []error
	op.paths, problems = newPluginPaths(root, plugin)
	problems = appendIDProblem(problems, "namespace", namespace)
	problems = appendIDProblem(problems, "volume ID", volumeID)
	problems = appendIDProblem(problems, "alloc ID", allocID)
	return op, problems
}

func parseUnmountVolume(root string, msg *messages.UnmountVolume) (*volumeOp, error) {
	op, problems := parseVolumeOp(root, msg.GetPlugin(), msg.GetNamespace(), msg.GetVolumeId(), msg.GetAllocId())
	return op, csi.InvalidVolumeRequest(problems)
}

// parseMountVolume checks a mount request and works out its paths.
func parseMountVolume(root string, msg *messages.MountVolume) (*volumeOp, error) {
	op, problems := parseVolumeOp(root, msg.GetPlugin(), msg.GetNamespace(), msg.GetVolumeId(), msg.GetAllocId())
	spec := &mountSpec{
		usage: csi.Usage{
			ReadOnly:       msg.GetReadOnly(),
			AttachmentMode: model.AttachmentMode(msg.GetAttachmentMode()),
			AccessMode:     model.AccessMode(msg.GetAccessMode()),
		},
		volumeContext:  msg.GetVolumeContext(),
		publishContext: msg.GetPublishContext(),
	}
	op.mount = spec
	problems = append(problems, spec.usage.Problems()...)
	problems = append(problems, mountOptionProblems(spec.usage.AttachmentMode, msg.GetMountOptions())...)
	if err := csi.InvalidVolumeRequest(problems); err != nil {
		return op, err
	}
	if o := msg.GetMountOptions(); o != nil {
		spec.options = &MountOptions{FSType: o.GetFsType(), MountFlags: slices.Clone(o.GetMountFlags())}
	}
	var err error
	if spec.stagingPath, err = op.paths.Staging(op.key.namespace, op.key.volumeID, spec.usage); err != nil {
		return op, err
	}
	spec.targetPath, err = op.paths.Target(op.allocID, op.key.volumeID, spec.usage)
	return op, err
}

// mountOptionProblems says what is wrong with the mount options o for an
// attachment mode: a block device takes none; a file system takes an fs
// type of a plain name and mount flags that are not empty, not too long,
// and hold no ".." and no control characters.
func mountOptionProblems(attachment model.AttachmentMode, o *messages.MountOptions) []error {
	var problems []error
	fsType, flags := o.GetFsType(), o.GetMountFlags()
	if attachment == model.AttachmentModeBlockDevice {
		if fsType != "" {
			problems = append(problems, fmt.Errorf("attachment mode %s takes no fs_type (got %q)", attachment, fsType))
		}
		if len(flags) > 0 {
			problems = append(problems, fmt.Errorf("attachment mode %s takes no mount flags (got %d)", attachment, len(flags)))
		}
		return problems
	}
	if fsType != "" && !fsTypePattern.MatchString(fsType) {
		problems = append(problems, fmt.Errorf("fs_type %q must be 1 to 64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit", fsType))
	}
	if len(flags) > maxMountFlags {
		problems = append(problems, fmt.Errorf("%d mount flags, over the limit of %d", len(flags), maxMountFlags))
	}
	for i, f := range flags {
		switch {
		case strings.TrimSpace(f) == "":
			problems = append(problems, fmt.Errorf("mount flag %d is empty", i+1))
		case len(f) > maxMountFlagLen:
			problems = append(problems, fmt.Errorf("mount flag %d is %d bytes, over the limit of %d", i+1, len(f), maxMountFlagLen))
		case strings.Contains(f, ".."):
			problems = append(problems, fmt.Errorf("mount flag %q must not contain \"..\"", f))
		case strings.IndexFunc(f, unicode.IsControl) >= 0:
			problems = append(problems, fmt.Errorf("mount flag %q must not contain control characters", f))
		}
	}
	return problems
}

// volumeAccessModes maps the catalog's access modes to CSI's.
var volumeAccessModes = map[model.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
	model.AccessModeSingleNodeReader:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	model.AccessModeSingleNodeWriter:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	model.AccessModeMultiNodeReader:       csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	model.AccessModeMultiNodeSingleWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	model.AccessModeMultiNodeMultiWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// volumeCapability is the CSI volume capability of a mount: its access
// mode, and a block or mount access type with the mount options.
func (s *mountSpec) volumeCapability() *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: volumeAccessModes[s.usage.AccessMode]},
	}
	if s.usage.AttachmentMode == model.AttachmentModeBlockDevice {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return c
	}
	m := &csipb.VolumeCapability_MountVolume{}
	if s.options != nil {
		m.FsType, m.MountFlags = s.options.FSType, slices.Clone(s.options.MountFlags)
	}
	c.AccessType = &csipb.VolumeCapability_Mount{Mount: m}
	return c
}
