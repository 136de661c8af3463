//go:build race

package hostpathtest

// raceEnabled is whether this test binary runs with the race detector.
const raceEnabled = true
