package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPluginStatusOfOneNodeFromTheCLI: plugin status NAME gives the
// reference plugin's counts on this node, plugin status alone every
// plugin's, with its type and volumes, TYPE NAME still its
// allocations; an unknown plugin is not found; plugin expect refuses a
// negative count naming the field, and on one node keeps the expected
// counts in the local catalog.
func TestPluginStatusOfOneNodeFromTheCLI(t *testing.T) {
	dir, run := hostpathCLI(t)
	require.Eventually(t, func() bool {
		out, _, code := cli(t, "plugin", "status", "-data-dir", dir, "hp")
		return code == 0 && strings.Contains(out, "Nodes Healthy        = 1")
	}, settle, 100*time.Millisecond, "the catalog never counted hp's node instance")
	out := run(0, "plugin", "status", "hp")
	require.Contains(t, out, "Scope                = node")
	require.Contains(t, out, "Controllers Healthy  = 1")
	require.Contains(t, run(0, "plugin", "status", "-json", "hp"), `"nodes_healthy": 1`)
	require.Contains(t, run(0, "plugin", "status", "csi-node", "hp"), "current allocation")
	require.Contains(t, run(1, "plugin", "status", "nope"), "plugin not found")
	require.Contains(t, run(1, "plugin", "expect", "-nodes", "-1", "hp"), "nodes is -1")
	require.Contains(t, run(0, "plugin", "status", "hp"), "Nodes Expected       = 0")
	out = run(0, "plugin", "expect", "-nodes", "2", "-controllers", "1", "hp")
	require.Contains(t, out, "Nodes Expected       = 2")
	require.Contains(t, out, "Controllers Expected = 1")
	require.Contains(t, run(0, "plugin", "status", "hp"), "Nodes Expected       = 2")
	list := run(0, "plugin", "status")
	require.Regexp(t, `(?m)^ID +TYPE +PROVIDER +CONTROLLERS HEALTHY/EXPECTED +NODES HEALTHY/EXPECTED +VOLUMES +SCOPE$`, list)
	require.Regexp(t, `(?m)^hp +monolith +hp +1/1 +1/2 +0 +node$`, list, "every CSI plugin, with its type, counts and volumes")
	require.Contains(t, run(0, "plugin", "status", "-json"), `"type": "monolith"`)
}
