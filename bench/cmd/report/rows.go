package main

import "fmt"

// target says whether a row meets its goal. It is judged on the median
// over the rounds of value, which reads one round's figures: a ratio is
// each round's own (plugvisor and Nomad measured in the same process, one
// after the other), never a ratio of medians taken from different rounds.
type target struct {
	text  string
	value func(round *results, nomad, plugvisor float64) (float64, bool)
	ok    func(v float64) bool
	show  func(v float64) string
}

// overNomad is a round's ratio, plugvisor over Nomad.
func overNomad(_ *results, nomad, plugvisor float64) (float64, bool) {
	return plugvisor / nomad, nomad > 0
}

func showRatio(v float64) string { return fmt.Sprintf("%.2f×", v) }

// row is one line of the table.
type row struct {
	workload, unit string
	// lowerIsBetter flips the sense of the ratios in the text, not
	// their value: ratios are always plugvisor's figure over the other.
	lowerIsBetter         bool
	nomad, plugvisor, raw figure
	rawName               string
	target                *target
	todo                  string
	nomadNote             string
	// describe, when set, names the workload from the results instead.
	describe func(r *results) string
}

// Benchmark names, as bench's benchmarks spell them.
func impl(bench, name string) string { return bench + "/" + name }

func ratioAtLeast(min float64) *target {
	return &target{text: fmt.Sprintf("≥ %g× Nomad", min), value: overNomad,
		ok: func(v float64) bool { return v >= min }, show: showRatio}
}

func ratioAtMost(max float64, text string) *target {
	return &target{text: text, value: overNomad, ok: func(v float64) bool { return v <= max }, show: showRatio}
}

// plugvisorUnder holds plugvisor's own figure under limit.
func plugvisorUnder(limit float64, unit string) *target {
	return &target{text: fmt.Sprintf("plugvisor < %g %s", limit, unit),
		value: func(_ *results, _, plugvisor float64) (float64, bool) { return plugvisor, true },
		ok:    func(v float64) bool { return v < limit },
		show:  func(v float64) string { return fmt.Sprintf("%.0f %s", v, unit) }}
}

func rows() []row {
	const (
		rd   = "BenchmarkRegisterDeregister"
		cr   = "BenchmarkConcurrentRegistrants/registrants=8,subscribers=8"
		dl   = "BenchmarkDeliveryLatency"
		ruw  = "BenchmarkReadsUnderWrites"
		old  = "BenchmarkOldAllocs"
		dur  = "BenchmarkDurableWrites"
		st   = "BenchmarkStuckSubscriber"
		mem  = "BenchmarkMemoryPerPlugin/plugins=10000"
		pipe = "BenchmarkPipelinedRegistrations"
		rpp  = "BenchmarkProtoactorRequestPipelined"
		send = "BenchmarkProtoactorSend"
		rf   = "BenchmarkProtoactorRequestFuture"
		rfp  = "BenchmarkProtoactorRequestFutureParallel"
	)
	// A register+deregister pair through the facade is two round trips:
	// raw protoactor's ceiling for it is half the round trips per second.
	rfPairs := perSecond(rf, 0.5)
	rfpPairs := perSecond(rfp, 0.5)
	pairs := func(bench, unitFromMetric string) (figure, figure) {
		if unitFromMetric != "" {
			return metric(impl(bench, "nomad"), unitFromMetric), metric(impl(bench, "plugvisor"), unitFromMetric)
		}
		return perSecond(impl(bench, "nomad"), 1), perSecond(impl(bench, "plugvisor"), 1)
	}
	// cpu is the CPU time of the whole process per pair, both sides.
	cpu := func(bench string) row {
		return row{workload: "… CPU time per pair (whole process: callers, registry, subscribers, GC)", unit: "µs", lowerIsBetter: true,
			nomad: metric(impl(bench, "nomad"), "cpu-µs/op"), plugvisor: metric(impl(bench, "plugvisor"), "cpu-µs/op")}
	}
	batching := func(bench string) row {
		return row{workload: "… plugvisor's writes per store batch (group commit)", unit: "writes/batch",
			plugvisor: metric(impl(bench, "plugvisor"), "writes/batch"), nomadNote: "no batches"}
	}
	var out []row
	for _, subs := range []string{"1", "8"} {
		n, p := pairs(rd+"/subscribers="+subs, "")
		goal := ratioAtLeast(0.3)
		if subs == "8" {
			goal = ratioAtLeast(0.5)
		}
		out = append(out, row{workload: "1 registrant: register + deregister, " + plural(subs, "draining subscriber"), unit: "pairs/s",
			nomad: n, plugvisor: p, raw: rfPairs, rawName: "RequestFuture", target: goal},
			cpu(rd+"/subscribers="+subs))
	}
	n, p := pairs(cr, "ops/s")
	crTarget := ratioAtLeast(1.0)
	crTarget.text = "≥ 1.0× Nomad (stretch 1.5×)"
	crCPU := cpu(cr)
	crCPU.target = ratioAtMost(1.0, "≤ 1.0× Nomad's")
	out = append(out, row{workload: "8 concurrent registrants, 8 draining subscribers", unit: "pairs/s",
		nomad: n, plugvisor: p, raw: rfpPairs, rawName: "RequestFuture ×8", target: crTarget},
		crCPU, batching(cr))
	out = append(out, channelRows(cr)...)
	for _, q := range []string{"p50", "p99", "p99.9"} {
		r := row{workload: "register → delivery latency, " + q, unit: "µs", lowerIsBetter: true,
			nomad: metric(impl(dl, "nomad"), q+"-µs"), plugvisor: metric(impl(dl, "plugvisor"), q+"-µs"),
			raw: micros(rf), rawName: "RequestFuture round trip"}
		switch q {
		case "p99":
			r.target = ratioAtMost(2, "≤ 2× Nomad's")
		case "p99.9":
			r.target = plugvisorUnder(500, "µs")
		}
		out = append(out, r)
	}
	out = append(out, row{workload: "… its p99 with plugvisor's subscribers as Go channels (Subscribe), as Nomad's are", unit: "µs", lowerIsBetter: true,
		nomad: metric(impl(dl, "nomad"), "p99-µs"), plugvisor: metric(impl(dl, "plugvisor-channel"), "p99-µs"),
		target: ratioAtMost(2, "≤ 2× Nomad's")})
	for _, read := range []string{"ListPlugins", "DispensePlugin"} {
		for _, store := range []string{"memory", "durable"} {
			n, p := pairs(ruw+"/"+read+"/writer="+store, "")
			what := "in memory, paced at 2,000 pairs/s"
			if store == "durable" {
				what = "durable (bbolt, fsync), paced at 50 pairs/s"
			}
			name := ruw + "/" + read + "/writer=" + store
			goal := ratioAtLeast(10)
			if read == "DispensePlugin" {
				goal = ratioAtLeast(1)
			}
			out = append(out,
				row{workload: read + " (100 plugins) while a writer runs, " + what, unit: "reads/s",
					nomad: n, plugvisor: p, target: goal},
				row{workload: "… that writer meanwhile (the same pace asked of both)", unit: "pairs/s",
					nomad: metric(impl(name, "nomad"), "writer-pairs/s"), plugvisor: metric(impl(name, "plugvisor"), "writer-pairs/s")})
		}
	}
	for _, o := range []string{"0", "10000"} {
		n, p := pairs(old+"/old="+o, "")
		r := row{workload: "register + deregister with " + thousands(o) + " old allocs of the name", unit: "pairs/s",
			nomad: n, plugvisor: p, raw: rfPairs, rawName: "RequestFuture"}
		if o == "10000" {
			r.target = ratioAtLeast(10)
		}
		out = append(out, r)
	}
	stuck := st + "/draining=7"
	out = append(out,
		row{workload: "register + deregister, 7 draining subscribers: 1 s windows without a stuck subscriber (median of 5, interleaved)", unit: "pairs/s",
			nomad: metric(impl(stuck, "nomad"), "free-ops/s"), plugvisor: metric(impl(stuck, "plugvisor"), "free-ops/s"),
			raw: rfPairs, rawName: "RequestFuture"},
		row{workload: "… 1 s windows with 1 more that never reads (8 in all), between those", unit: "pairs/s",
			nomad: metric(impl(stuck, "nomad"), "stuck-ops/s"), plugvisor: metric(impl(stuck, "plugvisor"), "stuck-ops/s"),
			raw: rfPairs, rawName: "RequestFuture"},
		row{workload: "… each round's stuck window as a share of its free one (median of the 5 rounds)", unit: "%",
			nomad: metric(impl(stuck, "nomad"), "stuck-%"), plugvisor: metric(impl(stuck, "plugvisor"), "stuck-%"),
			target: &target{text: "plugvisor ≥ 90%; Nomad 0",
				value: func(_ *results, _, plugvisor float64) (float64, bool) { return plugvisor, true },
				ok:    func(v float64) bool { return v >= 90 }, show: func(v float64) string { return fmt.Sprintf("%.0f%%", v) }}},
	)
	for _, w := range []string{"1", "32"} {
		n, p := pairs(dur+"/writers="+w, "ops/s")
		r := row{workload: "durable writes (bbolt, fsync), " + plural(w, "writer"), unit: "pairs/s", nomad: n, plugvisor: p}
		if w == "32" {
			r.target = ratioAtLeast(10)
		}
		out = append(out, r, cpu(dur+"/writers="+w), batching(dur+"/writers="+w))
	}
	out = append(out,
		row{workload: "pipelined registry commands from an actor (window 1024), each answered: like with like against raw request/response with the same window", unit: "commands/s",
			plugvisor: metric(pipe, "commands/s"), raw: metric(rpp, "round-trips/s"), rawName: "Request + Respond, pipelined",
			nomadNote: "no pipelined API"},
		row{workload: "… their events delivered to 1 subscriber in batches", unit: "events/s",
			plugvisor: metric(pipe, "events/s"), raw: metric(send, "msgs/s"), rawName: "Send", nomadNote: "no pipelined API"},
		row{workload: "… plugvisor's writes per store batch", unit: "writes/batch",
			plugvisor: metric(pipe, "writes/batch"), nomadNote: "no batches"},
		row{workload: "ceiling: protoactor Send, pipelined from 1 goroutine to a counting actor", unit: "msgs/s", raw: metric(send, "msgs/s")},
		row{workload: "ceiling: protoactor RequestFuture round trip, 1 caller", unit: "µs", lowerIsBetter: true, raw: micros(rf)},
		row{workload: "ceiling: protoactor RequestFuture, 8 callers", unit: "round trips/s", raw: perSecond(rfp, 1)},
		row{workload: "registry heap per plugin, 10,000 plugins registered (plugvisor: with its in-memory store, a MemoryStore)", unit: "B/plugin", lowerIsBetter: true,
			nomad: metric(impl(mem, "nomad"), "B/plugin"), plugvisor: metric(impl(mem, "plugvisor"), "B/plugin"),
			target: ratioAtMost(1.0, "≤ Nomad's")},
		row{workload: "… plugvisor's registry alone (store records discarded)", unit: "B/plugin", lowerIsBetter: true,
			nomad: metric(impl(mem, "nomad"), "B/plugin"), plugvisor: metric(impl(mem, "plugvisor-registry"), "B/plugin")},
	)
	out = append(out, scaleRows()...)
	return append(out, csiRows()...)
}

// channelRows are plugvisor's channel subscribers (Subscribe), Nomad's
// kind, at 8 registrants × 8 subscribers: held to plugvisor's actor
// subscribers measured in the same run.
func channelRows(cr string) []row {
	channel, bucket := impl(cr, "plugvisor-channel"), impl(cr, "plugvisor-bucket")
	return []row{
		{workload: "… the same with plugvisor's subscribers as Go channels (Subscribe), as Nomad's are", unit: "pairs/s",
			nomad: metric(impl(cr, "nomad"), "ops/s"), plugvisor: metric(channel, "ops/s")},
		{workload: "… its CPU time per pair (whole process)", unit: "µs", lowerIsBetter: true,
			nomad: metric(impl(cr, "nomad"), "cpu-µs/op"), plugvisor: metric(channel, "cpu-µs/op"),
			target: &target{text: "≤ 1.3× plugvisor's with actor subscribers",
				value: func(r *results, _, plugvisor float64) (float64, bool) {
					actors, ok := r.get(impl(cr, "plugvisor"), "cpu-µs/op")
					return plugvisor / actors, ok && actors > 0
				},
				ok: func(v float64) bool { return v <= 1.3 }, show: func(v float64) string { return fmt.Sprintf("%.2f× the actors'", v) }}},
		{workload: "… the same with plugvisor's registry on a storage.Memory bucket (Config.Bucket) instead of Config.Memory, actor subscribers", unit: "pairs/s",
			nomad: metric(impl(cr, "nomad"), "ops/s"), plugvisor: metric(bucket, "ops/s")},
		{workload: "… its CPU time per pair (whole process)", unit: "µs", lowerIsBetter: true,
			nomad: metric(impl(cr, "nomad"), "cpu-µs/op"), plugvisor: metric(bucket, "cpu-µs/op")},
	}
}

// csiRows are the CSI side: the CSI manager and its plugin instance actors
// with 10,000 csi-node plugins registered (BenchmarkCSIMemoryPerPlugin).
// Nomad's csimanager does not run without a Nomad client around it, so
// these rows have no Nomad figure.
func csiRows() []row {
	const (
		csi       = "BenchmarkCSIMemoryPerPlugin/plugins=10000"
		idle      = csi + "/idle"
		connected = csi + "/connected"
	)
	// A fleet is smaller where the open-file limit is too low for 10,000
	// connections, or where 10,000 were not all current within the
	// benchmark's wait on a loaded machine ("cut-short"); the benchmark
	// reports the size it measured.
	sized := func(name string, rw row) row {
		rw.describe = func(r *results) string {
			n, ok := r.get(name, "plugins")
			if !ok || n == 10000 {
				return rw.workload
			}
			why := "the open-file limit allowed no more"
			if _, cut := r.get(name, "cut-short"); cut {
				why = "10,000 were not all current within the benchmark's 40 s wait on the loaded machine"
			}
			return fmt.Sprintf("%s (measured at %s plugins, not 10,000: %s)", rw.workload, format(n), why)
		}
		return rw
	}
	fleet := func(rw row) row { return sized(connected, rw) }
	idleFleet := func(rw row) row { return sized(idle, rw) }
	return []row{
		idleFleet(row{workload: "CSI: manager + instance actor memory per plugin, 10,000 plugins, idle (registered, socket missing: no connection)", unit: "B/plugin",
			plugvisor: metric(idle, "B/plugin")}),
		fleet(row{workload: "… connected to a real gRPC server (in other processes: their memory not counted)", unit: "B/plugin",
			plugvisor: metric(connected, "B/plugin")}),
		fleet(row{workload: "… of which goroutine stacks, connected", unit: "B/plugin",
			plugvisor: metric(connected, "stack-B/plugin")}),
		fleet(row{workload: "… goroutines per plugin, connected (idle: 0)", unit: "goroutines/plugin", lowerIsBetter: true,
			plugvisor: metric(connected, "goroutines/plugin")}),
		idleFleet(row{workload: "CSI: time until all 10,000 instances are current, idle (started, first fingerprint recorded: unhealthy, no socket)", unit: "ms", lowerIsBetter: true,
			plugvisor: metric(idle, "ms-until-current")}),
		fleet(row{workload: "CSI: time until all 10,000 instances are current, connected (first fingerprint recorded: healthy, after a dial and 5 RPCs each)", unit: "ms", lowerIsBetter: true,
			plugvisor: metric(connected, "ms-until-current")}),
		{workload: "CSI: resync at 10,000 plugins, nothing to correct, idle fleet", unit: "µs",
			plugvisor: metric(idle, "resync-µs")},
		fleet(row{workload: "… connected fleet", unit: "µs",
			plugvisor: metric(connected, "resync-µs")}),
		{workload: "… ListCSIPlugins round trip (10,000 fingerprints), idle fleet: each resync row is net of its own fleet's", unit: "µs",
			plugvisor: metric(idle, "list-µs")},
	}
}
