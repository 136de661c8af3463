package main

import (
	"fmt"
	"strings"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// capabilityList is volume register's -capability, repeatable: each one
// of the volume's capabilities, as model.ParseCapability reads it
// (model.CapabilitySyntax; attachment defaults to file-system).
type capabilityList []api.CapabilityJSON

func (c *capabilityList) String() string { return fmt.Sprint([]api.CapabilityJSON(*c)) }

// Type names the flag's value in help.
func (c *capabilityList) Type() string { return model.CapabilitySyntax }

// Set adds the capability v, whose modes must be known.
func (c *capabilityList) Set(v string) error {
	parsed, err := model.ParseCapability(v)
	if err != nil {
		return err
	}
	*c = append(*c, api.CapabilityJSON{AccessMode: string(parsed.AccessMode), AttachmentMode: string(parsed.AttachmentMode), FSType: parsed.FSType})
	return nil
}

// registerModes checks that a registration names its modes one way: with
// -access-mode (and -attachment-mode), or with -capability, and leaves
// body's modes empty when it names capabilities.
func registerModes(body *api.VolumeBody, caps capabilityList, modeSet bool) error {
	switch {
	case len(caps) == 0 && body.AccessMode == "":
		return usageError("missing required flag -access-mode (or one -capability or more)")
	case len(caps) > 0 && modeSet:
		return usageError("-capability names the volume's modes: leave -access-mode and -attachment-mode out")
	case len(caps) > 0:
		body.AccessMode, body.AttachmentMode, body.Capabilities = "", "", caps
	}
	return nil
}

// capabilitiesLine is how volume register and status show a volume's
// capabilities when it has more than one; empty otherwise.
func capabilitiesLine(caps []api.CapabilityJSON) string {
	if len(caps) < 2 {
		return ""
	}
	parts := make([]string, len(caps))
	for i, c := range caps {
		parts[i] = c.AttachmentMode + " " + c.AccessMode
		if c.FSType != "" {
			parts[i] += " (" + c.FSType + ")"
		}
	}
	return "  capabilities: " + strings.Join(parts, "; ") + "\n"
}

// checkUsageFlags checks a claim's or mount's -access-mode and
// -attachment-mode before any request.
func checkUsageFlags(body api.AllocBody) error {
	return checkModes(body.AccessMode, body.AttachmentMode)
}

// checkModes checks the values of -access-mode and -attachment-mode
// (either may be empty) before any request: a mode the agent would refuse
// is a usage error that names the modes there are.
func checkModes(access, attachment string) error {
	if access != "" {
		if _, err := model.ParseAccessMode(access); err != nil {
			return usageError("-access-mode %q: want one of %s", access, joinModes(model.AccessModes()))
		}
	}
	if attachment != "" {
		if _, err := model.ParseAttachmentMode(attachment); err != nil {
			return usageError("-attachment-mode %q: want %s", attachment, joinModes(model.AttachmentModes()))
		}
	}
	return nil
}

// joinModes is modes as a list: "a, b or c".
func joinModes[M ~string](modes []M) string {
	s := make([]string, len(modes))
	for i, m := range modes {
		s[i] = string(m)
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
