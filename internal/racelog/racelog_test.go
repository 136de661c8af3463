package racelog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const theirRace = `==================
WARNING: DATA RACE
Read at 0x00c00013d228 by goroutine 168:
  github.com/asynkron/protoactor-go/remote.(*BlockList).BlockedMembers()
      /root/go/pkg/mod/github.com/asynkron/protoactor-go/remote/blocklist.go:28 +0xd9
  github.com/plugvisor/plugvisor/fleet/member.(*provider).apply()
      /work/fleet/member/provider.go:271 +0x5f1

Previous write at 0x00c00013d228 by goroutine 194:
  github.com/asynkron/protoactor-go/remote.(*BlockList).Block()
      /root/go/pkg/mod/github.com/asynkron/protoactor-go/remote/blocklist.go:37 +0x444
==================
`

const ourRace = `==================
WARNING: DATA RACE
Write at 0x00c000012345 by goroutine 7:
  runtime.mapassign_faststr()
      /usr/local/go/src/runtime/map.go:1 +0x1
  github.com/plugvisor/plugvisor/agent.(*Agent).detachStranded()
      /work/agent/attachments.go:140 +0x10

Previous read at 0x00c000012345 by goroutine 9:
  github.com/asynkron/protoactor-go/actor.(*ActorSystem).Root()
      /root/go/pkg/mod/github.com/asynkron/protoactor-go/actor/actor_system.go:1 +0x1
==================
`

func TestReportsSplitOurRacesFromOtherModules(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "race.101"), []byte(theirRace+ourRace), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "unrelated.log"), []byte(ourRace), 0o600))
	ours, theirs, err := Reports(dir)
	require.NoError(t, err)
	require.Len(t, ours, 1, "a race one of whose accesses is in our code is ours, even against another module")
	require.Contains(t, ours[0], "detachStranded")
	require.Equal(t, []string{"github.com/asynkron/protoactor-go/remote.(*BlockList).BlockedMembers() vs github.com/asynkron/protoactor-go/remote.(*BlockList).Block()"}, theirs,
		"a race whose two accesses are in protoactor is theirs, though our code called it")
}

func TestEnvSendsReportsUnderTheDirAndKeepsTheExitCode(t *testing.T) {
	require.Equal(t, "GORACE=exitcode=0 log_path=/tmp/x/race", Env("/tmp/x"))
}
