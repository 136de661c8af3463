// Package moby holds no code: its tests run dockerd's own volume service
// (moby v28.5.2, volume/service, with its plugins reached through
// pkg/plugins' client) and plugvisor's volume service (dockervolume/volumes)
// side by side on the same inputs, and check that plugvisor answers as dockerd does or
// differs exactly as docs/docker.md's table of differences says. It is a
// module of its own, so that plugvisor's main module never builds moby's
// daemon packages.
package moby
