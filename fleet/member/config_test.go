package member_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/member"
)

func TestBadConfigIsRefusedWithTheFieldNamed(t *testing.T) {
	good := member.Config{
		Fleet:   fleet.Config{Endpoints: []string{"http://127.0.0.1:2379"}, NodeID: "a"},
		Address: "127.0.0.1:0",
	}
	for _, tc := range []struct {
		name string
		edit func(*member.Config)
		want string
	}{
		{"an address without a port", func(cfg *member.Config) { cfg.Address = "127.0.0.1" }, "not host:port"},
		{"every interface", func(cfg *member.Config) { cfg.Address = "0.0.0.0:7946" }, "listens on every interface"},
		{"no host", func(cfg *member.Config) { cfg.Address = ":7946" }, "listens on every interface"},
		{"a port out of range", func(cfg *member.Config) { cfg.Address = "127.0.0.1:70000" }, "no valid port"},
		{"a public address without TLS", func(cfg *member.Config) { cfg.Address = "192.0.2.1:7946" }, "TLS is not set"},
		{"a lease in milliseconds", func(cfg *member.Config) { cfg.Fleet.LeaseTTL = 2500 * time.Millisecond }, "whole seconds"},
		{"half a TLS config", func(cfg *member.Config) { cfg.TLS = &member.RemoteTLS{} }, "both Server and Client"},
		{"a negative grain idle timeout", func(cfg *member.Config) { cfg.GrainIdleTimeout = -time.Second }, "GrainIdleTimeout is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			m, err := member.Start(cfg)
			require.ErrorIs(t, err, member.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, m)
		})
	}
}
