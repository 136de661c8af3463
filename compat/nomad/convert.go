package nomad

import (
	"encoding/base64"
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/nomad/client/dynamicplugins"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// Nomad's registry takes any string as a plugin type, name or alloc ID (an
// alloc ID may even be empty) and any socket path; plugvisor's takes only
// names that are safe as paths and storage keys, and socket paths that fit
// sun_path. The adapter keeps Nomad's values exactly: a value plugvisor
// would refuse is escaped on the way in and restored on the way out.

// escaped starts every escaped ID: "~" and the value in unpadded base64url.
// A Nomad ID that itself starts with "~" is escaped too, so the mapping is
// one to one.
const escaped = "~"

// placeholderSocket stands for a socket path plugvisor would refuse (empty,
// relative, longer than sun_path); the real one travels in socketOption.
// Nothing can listen under /dev/null, so nobody can mistake it for a socket.
const placeholderSocket = "/dev/null/nomad-socket-path-is-in-options"

// socketOption is the option that carries such a socket path. Its NUL
// keeps it apart from any option a Nomad job can set.
const socketOption = "\x00nomad.socket_path"

// encodeID maps a Nomad ID to a plugvisor one; false when even escaped it is
// longer than plugvisor's limit (names.MaxLen).
func encodeID(id string) (string, bool) {
	if id != "" && !strings.HasPrefix(id, escaped) && names.Valid(id) {
		return id, true
	}
	enc := escaped + base64.RawURLEncoding.EncodeToString([]byte(id))
	return enc, len(enc) <= names.MaxLen
}

// decodeID is the inverse of encodeID.
func decodeID(id string) string {
	rest, ok := strings.CutPrefix(id, escaped)
	if !ok {
		return id
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return id // not ours: written by plugvisor itself
	}
	return string(raw)
}

// toPlugvisor converts a registration that Nomad's checks have passed.
func toPlugvisor(info *dynamicplugins.PluginInfo) (*messages.PluginInfo, error) {
	p := &messages.PluginInfo{Version: info.Version, Options: maps.Clone(info.Options)}
	for _, f := range []struct {
		field string
		in    string
		out   *string
	}{{"Plugin.Type", info.Type, &p.Type}, {"Plugin.Name", info.Name, &p.Name}, {"Plugin.AllocID", info.AllocID, &p.AllocId}} {
		id, ok := encodeID(f.in)
		if !ok {
			return nil, fmt.Errorf("%w: %s is %d bytes, more than plugvisor keeps (%d, or %d with characters it escapes); use a shorter one",
				ErrInvalid, f.field, len(f.in), names.MaxLen, base64.RawURLEncoding.DecodedLen(names.MaxLen-len(escaped)))
		}
		*f.out = id
	}
	if _, ok := info.Options[socketOption]; ok {
		return nil, fmt.Errorf("%w: Plugin.Options must not hold the key %q: the adapter keeps socket paths there", ErrInvalid, socketOption)
	}
	socket := info.ConnectionInfo.SocketPath
	if names.CheckSocketPath("socket path", socket) != nil {
		if p.Options == nil {
			p.Options = map[string]string{}
		}
		p.Options[socketOption] = socket
		socket = placeholderSocket
	}
	p.Connection = &messages.ConnectionInfo{SocketPath: socket}
	return p, nil
}

// toNomad converts an allocation back to what Nomad's registry would hold.
// It returns a new value: the caller may change it.
func toNomad(p *messages.PluginInfo) *dynamicplugins.PluginInfo {
	if p == nil {
		return nil
	}
	info := &dynamicplugins.PluginInfo{
		Type: decodeID(p.GetType()), Name: decodeID(p.GetName()), AllocID: decodeID(p.GetAllocId()),
		Version:        p.GetVersion(),
		ConnectionInfo: &dynamicplugins.PluginConnectionInfo{SocketPath: p.GetConnection().GetSocketPath()},
		Options:        maps.Clone(p.GetOptions()),
	}
	if socket, ok := info.Options[socketOption]; ok {
		info.ConnectionInfo.SocketPath = socket
		delete(info.Options, socketOption)
	}
	if len(info.Options) == 0 && len(p.GetOptions()) > 0 {
		info.Options = nil
	}
	return info
}
