package actors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

func TestADeadLetterIsLoggedWithoutTheMessagesContents(t *testing.T) {
	const secret = "dead-letter-s3cr3t"
	out := &probe.LogBuffer{}
	system := actors.NewSystem(hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Trace}))
	t.Cleanup(system.Shutdown)
	nobody := system.NewLocalPID("nobody")
	system.Root.Send(nobody, &messages.RegisterVolume{Volume: &messages.CatalogVolume{Id: "db", Secrets: map[string]string{"token": secret}}})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "DeadLetter") }, 5*time.Second, 10*time.Millisecond)
	require.Contains(t, out.String(), "*messages.RegisterVolume (contents not logged)")
	require.Contains(t, out.String(), "nobody", "the PID still shows")
	require.NotContains(t, out.String(), secret)
}
