package errclass_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/errclass"
)

var (
	errGone  = errclass.New(errclass.NotFound, "gone")
	errTaken = errclass.New(errclass.Conflict, "taken")
)

func TestASentinelMatchesItselfAndItsClassOnly(t *testing.T) {
	err := fmt.Errorf("volume %q: %w", "v1", errGone)
	require.ErrorIs(t, err, errGone)
	require.ErrorIs(t, err, errclass.NotFound)
	require.NotErrorIs(t, err, errclass.Conflict)
	require.NotErrorIs(t, err, errTaken)
	require.Equal(t, errclass.NotFound, errclass.Of(err))
	require.Nil(t, errclass.Of(errors.New("plain")))
	require.EqualError(t, err, `volume "v1": gone`, "no package prefix")
}

func TestIDsNameEverySentinelOnceInChainOrder(t *testing.T) {
	err := errors.Join(fmt.Errorf("a: %w", errTaken), fmt.Errorf("b: %w: %w", errGone, errTaken))
	require.Equal(t, []string{"errclass_test: taken", "errclass_test: gone"}, errclass.IDs(err))
	require.Equal(t, "errclass_test: gone", errclass.ID(errGone))
	require.Empty(t, errclass.ID(err))
	require.Contains(t, errclass.Sentinels(), errGone)
}

func TestRebuildMatchesTheSentinelsAndTheClassItWasGiven(t *testing.T) {
	back := errclass.Rebuild("the words", errclass.Conflict, []string{"errclass_test: taken", "no such id"})
	require.EqualError(t, back, "the words")
	require.ErrorIs(t, back, errTaken)
	require.ErrorIs(t, back, errclass.Conflict)
	require.NotErrorIs(t, back, errGone)

	classOnly := errclass.Rebuild("x", errclass.Store, nil)
	require.ErrorIs(t, classOnly, errclass.Store)
	require.Equal(t, errclass.Store, errclass.Of(classOnly))
	require.Nil(t, errclass.Of(errclass.Rebuild("x", nil, nil)))

	// A class that is not the first sentinel's comes first: it is the class
	// the sender gave.
	mixed := errclass.Rebuild("x", errclass.NotFound, []string{"errclass_test: taken", "errclass_test: gone"})
	require.Equal(t, errclass.NotFound, errclass.Of(mixed))
}

func TestAlsoAddsASentinelWithoutSayingItAgain(t *testing.T) {
	inner := fmt.Errorf("%w: no volume %q", errGone, "v1")
	err := errclass.Also(inner, errTaken)
	require.EqualError(t, err, inner.Error())
	require.ErrorIs(t, err, errGone)
	require.ErrorIs(t, err, errTaken)
	require.Equal(t, errclass.NotFound, errclass.Of(err), "the inner error's class")
	require.NoError(t, errclass.Also(nil, errTaken))
}

func TestTwoSentinelsOfOneTextInOnePackagePanic(t *testing.T) {
	require.PanicsWithValue(t, `errclass: two sentinels "errclass_test: gone"`, func() {
		_ = errclass.New(errclass.Invalid, "gone")
	})
}

func TestEveryClassHasAName(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range errclass.Classes() {
		require.NotEmpty(t, c.Error())
		require.False(t, seen[c.Error()], "class %q twice", c)
		seen[c.Error()] = true
	}
	require.Len(t, seen, 13)
}
