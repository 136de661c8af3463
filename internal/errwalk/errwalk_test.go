package errwalk_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/errwalk"
)

func TestRepeatedFindsWhatTheIssueQuotes(t *testing.T) {
	for msg, want := range map[string]string{
		`registry: invalid argument: names: invalid: names: not a unix socket: socket path "/x" is a regular file`: "socket",
		`registry: invalid argument: names: invalid: names: not a unix socket: path "/x" is a regular file`:        "names",
		`volumes: volume not found: csi: catalog: volume not found: no volume "v1"`:                                "volume not found",
		`plugvisor agent: agent: open state: locked`:                                                               "agent",
		`invalid invalid name`: "invalid",
		`bad request body: send a JSON object: bad request body`: "bad request",
	} {
		require.Equal(t, want, errwalk.Repeated(msg), msg)
	}
}

func TestRepeatedLetsAPlainMessagePass(t *testing.T) {
	for _, msg := range []string{
		`invalid argument: socket path "/tmp/x" is a regular file, not a socket; give the path of the plugin's unix socket`,
		`volume not found: no volume "v1" in namespace "default"`,
		`plugvisor volume mount: volume not found: no volume "v1"`,
		`claim refused: volume "db" is claimed on node n1: claim by alloc a2 on node n2 refused`,
		`plugin "v1" of type "v1": the "v1" value`, // quoted values may repeat
		// absolute paths name things too
		`no agent is running at /tmp/pv1/plugvisor.sock: start one with: plugvisor agent -data-dir /tmp/pv1`,
		`a volume of the plugin is one of the volumes of the node`,
	} {
		require.Empty(t, errwalk.Repeated(msg), msg)
	}
}
