package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/internal/hclogslog"
)

// SlogHandler is a log/slog Handler that writes through an hclog.Logger,
// keeping levels and key/value pairs. protoactor logs through slog; this is
// how its lines reach the agent's hclog output.
type SlogHandler = hclogslog.Handler

// NewSlogHandler returns a slog Handler writing to logger, which logs a
// protobuf message by its type only.
func NewSlogHandler(logger hclog.Logger) *SlogHandler {
	return hclogslog.New(logger, redact)
}

// redact logs a protobuf message, other than a PID, by its type only.
// protoactor logs whole messages, in dead letters and supervision. The
// messages that cross actor boundaries can carry CSI secrets, which must
// never reach a log.
func redact(v any) any {
	switch m := v.(type) {
	case *actor.PID:
		return m
	case proto.Message:
		return fmt.Sprintf("%T (contents not logged)", m)
	}
	return v
}
