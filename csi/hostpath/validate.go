package hostpath

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// MaxIDLength is the longest volume or node ID the driver accepts, in bytes.
const MaxIDLength = names.MaxLen

// ErrInvalidID is wrapped by every error about a malformed volume or node ID.
var ErrInvalidID = errclass.New(errclass.Invalid, "invalid id")

// ErrUnsupportedCapability is wrapped by every error about a volume
// capability the driver cannot provide.
var ErrUnsupportedCapability = errclass.New(errclass.Unsupported, "unsupported volume capability")

// checkID checks an ID that becomes a file name under the root with
// names.Check: present, at most MaxIDLength bytes, not "." or "..", no
// separators, NUL, control, bidirectional or zero-width characters.
func checkID(kind, id string) error {
	if err := names.Check(kind+" id", id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	return nil
}

// checkPath checks a path the CO passes in (target, staging): it must be
// absolute and outside the driver's root. It returns the cleaned path.
func (d *Driver) checkPath(kind, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s path must not be empty", kind)
	}
	if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
		return "", fmt.Errorf("%s path %q must be an absolute path", kind, path)
	}
	path = filepath.Clean(path)
	if rel, err := filepath.Rel(d.cfg.Root, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s path %q must not be inside the driver root %s", kind, path, d.cfg.Root)
	}
	return path, nil
}

// checkCapabilities checks that caps is not empty and each one is supported.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return errors.New("volume capabilities must not be empty")
	}
	for _, c := range caps {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

// checkCapability checks one volume capability: present, mount access type
// (a directory cannot be a block device) and a single-node access mode (a
// directory lives on one node's disk). fs_type and mount_flags are accepted
// and ignored: a bind mount of a directory has neither.
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return errors.New("volume capability must be set")
	}
	switch c.GetAccessType().(type) {
	case *csi.VolumeCapability_Mount:
	case *csi.VolumeCapability_Block:
		return fmt.Errorf("%w: block access type: a hostpath volume is a directory, only the mount access type is supported", ErrUnsupportedCapability)
	default:
		return errors.New("volume capability must have an access type (mount)")
	}
	mode := c.GetAccessMode().GetMode()
	switch mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return nil
	case csi.VolumeCapability_AccessMode_UNKNOWN:
		return errors.New("volume capability must have an access mode")
	}
	return fmt.Errorf("%w: access mode %s: a hostpath volume lives on one node, only single-node modes are supported", ErrUnsupportedCapability, mode)
}

// invalidArgument wraps err as a gRPC InvalidArgument status.
func invalidArgument(err error) error {
	return status.Error(codes.InvalidArgument, statusMessage(err))
}

// internal reports a failure of the driver itself (disk, mount table).
func internal(err error) error {
	return status.Error(codes.Internal, statusMessage(err))
}

// statusMessage is the message of a gRPC status made of err: the driver's
// name, then err's text. The gRPC boundary is where the name is said, once:
// every status message of the driver starts with "hostpath: ", as
// docs/hostpath.md says.
func statusMessage(err error) string {
	return "hostpath: " + err.Error()
}
