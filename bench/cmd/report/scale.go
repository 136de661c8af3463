package main

import "fmt"

// scaleRows are BenchmarkScale's: a registry of 100 and of 100,000
// plugins, a read right after each write, a pair among them, and a
// replacement. Each target holds plugvisor's figure at 100,000 plugins to
// its own at 100, measured in the same round.
func scaleRows() []row {
	const scale = "BenchmarkScale/plugins="
	at := func(plugins, op, side string) string { return scale + plugins + "/" + op + "/" + side }
	both := func(plugins, op, unit string) (figure, figure) {
		if unit == "" {
			return perSecond(at(plugins, op, "nomad"), 1), perSecond(at(plugins, op, "plugvisor"), 1)
		}
		return metric(at(plugins, op, "nomad"), unit), metric(at(plugins, op, "plugvisor"), unit)
	}
	// growth holds plugvisor's unit at 100,000 plugins to at most limit
	// times its own at 100, in each round.
	growth := func(op, unit string, limit float64) *target {
		return &target{text: fmt.Sprintf("plugvisor ≤ %g× its own at 100 plugins", limit),
			value: func(round *results, _, _ float64) (float64, bool) {
				unit := unit
				if unit == "" {
					unit = "ns/op"
				}
				small, ok := round.get(at("100", op, "plugvisor"), unit)
				large, ok2 := round.get(at("100000", op, "plugvisor"), unit)
				return large / small, ok && ok2 && small > 0
			},
			ok:   func(v float64) bool { return v <= limit },
			show: func(v float64) string { return fmt.Sprintf("%.2f×", v) }}
	}
	var out []row
	for _, plugins := range []string{"100", "100000"} {
		n, p := both(plugins, "DispensePlugin", "read-p50-µs")
		cn, cp := both(plugins, "DispensePlugin", "cpu-µs/op")
		iteration := row{workload: "… a write and that read together, CPU time per iteration (whole process)", unit: "µs", lowerIsBetter: true, nomad: cn, plugvisor: cp}
		if plugins == "100000" {
			iteration.target = growth("DispensePlugin", "cpu-µs/op", 2)
		}
		out = append(out,
			row{workload: "DispensePlugin right after a write, " + thousands(plugins) + " plugins: the read alone, median", unit: "µs", lowerIsBetter: true, nomad: n, plugvisor: p},
			iteration)
	}
	for _, plugins := range []string{"100", "100000"} {
		n, p := both(plugins, "ListPlugins", "read-ns/plugin")
		r := row{workload: "ListPlugins right after a write, " + thousands(plugins) + " plugins: the read alone, mean per plugin listed", unit: "ns", lowerIsBetter: true, nomad: n, plugvisor: p}
		if plugins == "100000" {
			r.target = growth("ListPlugins", "read-ns/plugin", 2)
		}
		out = append(out, r)
	}
	for _, plugins := range []string{"100", "100000"} {
		n, p := both(plugins, "RegisterDeregister", "")
		r := row{workload: "register + deregister of a new allocation of one of " + thousands(plugins) + " plugins (a different one each time)", unit: "pairs/s", nomad: n, plugvisor: p}
		cn, cp := both(plugins, "RegisterDeregister", "cpu-µs/op")
		if plugins == "100000" {
			r.target = growth("RegisterDeregister", "", 1.5)
			r.target.text = "plugvisor's time per pair ≤ 1.5× its own at 100 plugins"
		}
		out = append(out, r, row{workload: "… CPU time per pair (whole process)", unit: "µs", lowerIsBetter: true, nomad: cn, plugvisor: cp})
	}
	for _, plugins := range []string{"100", "100000"} {
		n, p := both(plugins, "Replace", "cpu-µs/op")
		out = append(out, row{workload: "a new allocation of one of " + thousands(plugins) + " plugins registered and the one it replaces deregistered, CPU time (whole process)", unit: "µs", lowerIsBetter: true, nomad: n, plugvisor: p})
	}
	return out
}
