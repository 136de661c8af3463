package messages_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	_ "github.com/plugvisor/plugvisor/api" // its sentinels, and those of every package it uses
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// TestEverySentinelCrossesTheWireWithItsClass sends every sentinel of the
// module, wrapped in context as a refusal is, through the one wire mapping
// and proto bytes, in the answer of a catalog, of the volume manager and of
// the registry: on the far side errors.Is matches the sentinel and its
// class, and the text is the same.
func TestEverySentinelCrossesTheWireWithItsClass(t *testing.T) {
	sentinels := errclass.Sentinels()
	require.Greater(t, len(sentinels), 100, "every package's sentinels are errclass sentinels")
	classes := map[*errclass.Class]bool{}
	for _, s := range sentinels {
		class := errclass.Of(s)
		require.NotNil(t, class, "%s has a class", errclass.ID(s))
		classes[class] = true
		sent := fmt.Errorf("volume %q: %w", "v1", s)
		answers := []interface {
			proto.Message
			GetError() *messages.Error
		}{
			&messages.ClaimVolumeResponse{Error: messages.ErrorToProto(sent)},
			&messages.MountAllocVolumeResponse{Error: messages.ErrorToProto(sent)},
			&messages.RegisterPluginResponse{Error: messages.ErrorToProto(sent)},
		}
		for _, answer := range answers {
			bytes, err := proto.Marshal(answer)
			require.NoError(t, err)
			back := answer.ProtoReflect().New().Interface().(interface {
				proto.Message
				GetError() *messages.Error
			})
			require.NoError(t, proto.Unmarshal(bytes, back))
			got := messages.ErrorFromProto(back.GetError())
			require.ErrorIs(t, got, s, "%s across %T", errclass.ID(s), answer)
			require.ErrorIs(t, got, class, "%s keeps its class", errclass.ID(s))
			require.Equal(t, class, errclass.Of(got))
			require.EqualError(t, got, sent.Error())
			// And once more, as a fleet's grain answers for a catalog.
			again := messages.ErrorFromProto(messages.ErrorToProto(got))
			require.ErrorIs(t, again, s)
		}
	}
	require.Len(t, classes, len(errclass.Classes()), "every class is used")
}

func TestAnErrorOfNoClassCrossesAsItsText(t *testing.T) {
	require.Nil(t, messages.ErrorToProto(nil))
	require.NoError(t, messages.ErrorFromProto(nil))
	wire := messages.ErrorToProto(errors.New("disk on fire"))
	require.Equal(t, messages.ErrorCode_ERROR_CODE_UNSPECIFIED, wire.GetCode())
	got := messages.ErrorFromProto(wire)
	require.EqualError(t, got, "disk on fire")
	require.Nil(t, errclass.Of(got))
}

// TestEveryClassHasItsOwnWireCode: no two classes share a code, and none is
// UNSPECIFIED.
func TestEveryClassHasItsOwnWireCode(t *testing.T) {
	seen := map[messages.ErrorCode]bool{}
	for _, c := range errclass.Classes() {
		code := messages.ErrorToProto(fmt.Errorf("x: %w", c)).GetCode()
		require.NotEqual(t, messages.ErrorCode_ERROR_CODE_UNSPECIFIED, code, c.Error())
		require.False(t, seen[code], "%s shares code %s", c, code)
		seen[code] = true
		require.Equal(t, c, errclass.Of(messages.ErrorFromProto(&messages.Error{Code: code})))
	}
}
