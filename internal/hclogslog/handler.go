// Package hclogslog writes log/slog records through an hclog.Logger, so
// that whatever logs with slog (protoactor, the reference plugins) writes
// the agent's one format:
//
//	2026-11-26T01:27:57.293Z [INFO]  hostpath-csi: hostpath: serving: address=/run/hp.sock
package hclogslog

import (
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Handler is a log/slog Handler that writes through an hclog.Logger,
// keeping levels and key/value pairs.
type Handler struct {
	logger hclog.Logger
	group  string
	redact func(any) any
}

// New returns a slog Handler writing to logger. redact, when not nil,
// replaces each value before it is written.
func New(logger hclog.Logger, redact func(any) any) *Handler {
	return &Handler{logger: logger, redact: redact}
}

// Enabled reports whether logger writes records of level l.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	return toHclogLevel(l) >= h.logger.GetLevel()
}

// Handle writes one record with its attributes as hclog key/value pairs.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	args := make([]any, 0, 2*r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		args = h.appendAttr(args, h.group, a)
		return true
	})
	h.logger.Log(toHclogLevel(r.Level), r.Message, args...)
	return nil
}

// WithAttrs returns a handler whose records carry attrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	args := make([]any, 0, 2*len(attrs))
	for _, a := range attrs {
		args = h.appendAttr(args, h.group, a)
	}
	return &Handler{logger: h.logger.With(args...), group: h.group, redact: h.redact}
}

// WithGroup returns a handler that prefixes later keys with name and a dot.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{logger: h.logger, group: joinKey(h.group, name), redact: h.redact}
}

func (h *Handler) appendAttr(args []any, group string, a slog.Attr) []any {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		prefix := joinKey(group, a.Key)
		for _, inner := range v.Group() {
			args = h.appendAttr(args, prefix, inner)
		}
		return args
	}
	if a.Key == "" {
		return args
	}
	value := v.Any()
	if h.redact != nil {
		value = h.redact(value)
	}
	return append(args, joinKey(group, a.Key), value)
}

func joinKey(group, key string) string {
	if group == "" {
		return key
	}
	if key == "" {
		return group
	}
	return strings.Join([]string{group, key}, ".")
}

func toHclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	default:
		return hclog.Error
	}
}
