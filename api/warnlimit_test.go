package api

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/errclass"
)

// A client retrying a request that a missing service refuses (a mount
// while the node is fenced) gets a WARN once per path every warnEvery,
// not one per try: the others are logged at DEBUG, and the next WARN
// says how many there were.
func TestA503RefusedAgainAndAgainWarnsOncePerPathAndInterval(t *testing.T) {
	s, logs := loggedServer(hclog.Info)
	refused := errclass.New(errclass.Unavailable, "mount refused: this node's lease in the fleet is not held")
	for range 50 {
		s.writeError(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/volumes/default/a/mount", nil), refused)
	}
	s.writeError(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/volumes/default/b/mount", nil), refused)
	require.Equal(t, 1, strings.Count(logs.String(), "path=/v1/volumes/default/a/mount"), logs.String())
	require.Equal(t, 1, strings.Count(logs.String(), "path=/v1/volumes/default/b/mount"), logs.String())
}

func TestTheWarnLimiterLetsOnePassPerKeyAndIntervalAndCountsTheRest(t *testing.T) {
	var l warnLimiter
	start := time.Now()
	ok, held := l.allow("a", start)
	require.True(t, ok)
	require.Zero(t, held)
	for i := range 3 {
		ok, _ = l.allow("a", start.Add(time.Duration(i+1)*time.Second))
		require.False(t, ok)
	}
	ok, held = l.allow("a", start.Add(warnEvery+time.Second))
	require.True(t, ok)
	require.Equal(t, 3, held, "the next warning counts those held back")

	// Keys long quiet are forgotten once there are many.
	for i := range warnKeys + 10 {
		l.allow(fmt.Sprint("k", i), start.Add(3*warnEvery))
	}
	require.LessOrEqual(t, len(l.last), warnKeys+11)
	l.allow("late", start.Add(5*warnEvery))
	require.LessOrEqual(t, len(l.last), 1, "every key was quiet for longer than warnEvery")
}
