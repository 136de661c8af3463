package agent

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/plugvisor/plugvisor/fleet"
)

// identityFile holds, in the data dir, the secret that proves in the fleet
// that a live node ID is this agent's own (fleet.Config.Identity): an
// agent restarted after a kill -9 takes its node ID back at once, while
// an agent on another data dir with the same -node-id is refused.
const identityFile = "node-identity"

// nodeIdentity reads the data dir's identity, or makes one. A file that
// holds no identity (damaged) is replaced, with a warning: until the old
// lease runs out the node ID then looks held by another agent.
func (a *Agent) nodeIdentity() (string, error) {
	path := filepath.Join(a.cfg.DataDir, identityFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if _, decodeErr := hex.DecodeString(id); decodeErr == nil && len(id) == 64 {
			return id, nil
		}
		a.log.Warn("the data dir's node identity is damaged: making a new one; the node ID looks held by another agent until the old lease runs out",
			"path", path)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("agent: read the node identity: %w", err)
	}
	id := fleet.NewIdentity()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("agent: write the node identity: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("agent: write the node identity: %w", err)
	}
	return id, nil
}
