// Command report reads the output of the bench module's benchmarks
// (`go test -bench`, one or more files, -count runs allowed: the median of
// each figure is used) and writes the side-by-side table of plugvisor,
// Nomad's registry and raw protoactor into BENCHMARKS.md, between the
// markers
//
//	<!-- bench-compare:start -->
//	<!-- bench-compare:end -->
//
// leaving the rest of the file alone. Without the markers, the section is
// appended; without the file, it is created. `make bench-compare` runs it.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	startMarker = "<!-- bench-compare:start -->"
	endMarker   = "<!-- bench-compare:end -->"
)

func main() {
	out := flag.String("out", "BENCHMARKS.md", "the file to write the table into")
	command := flag.String("command", "make bench-compare", "the command that produced the figures, for the record")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: report [-out BENCHMARKS.md] [-command CMD] go-test-bench-output...")
		os.Exit(2)
	}
	res := newResults()
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fail(err)
		}
		err = res.parse(f)
		f.Close()
		if err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
	}
	section := render(res, *command, machine(res), time.Now().UTC())
	if err := splice(*out, section); err != nil {
		fail(err)
	}
	fmt.Print(section)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

// results holds every figure of every benchmark run, by benchmark name
// (without the -GOMAXPROCS suffix) and unit.
type results struct {
	runs map[string]map[string][]float64
	cpu  string
	goos string
}

func newResults() *results { return &results{runs: map[string]map[string][]float64{}} }

var procsSuffix = regexp.MustCompile(`-\d+$`)

func (r *results) parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			r.cpu = strings.TrimSpace(v)
			continue
		}
		if v, ok := strings.CutPrefix(line, "goos: "); ok {
			r.goos = strings.TrimSpace(v)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		// name, iterations, then value-unit pairs.
		if len(fields) < 4 || len(fields)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := procsSuffix.ReplaceAllString(fields[0], "")
		figures := r.runs[name]
		if figures == nil {
			figures = map[string][]float64{}
			r.runs[name] = figures
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark %s: figure %q: %w", name, fields[i], err)
			}
			figures[fields[i+1]] = append(figures[fields[i+1]], v)
		}
	}
	return sc.Err()
}

// get returns the median of a benchmark's figure over its runs. A
// benchmark that reports its size ("plugins") and ran at different sizes
// in different rounds (a fleet cut short on a loaded machine) counts only
// the rounds at its largest size: a median across sizes means nothing.
func (r *results) get(name, unit string) (float64, bool) {
	vs := r.atLargestSize(name, r.runs[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func (r *results) atLargestSize(name string, vs []float64) []float64 {
	sizes := r.runs[name]["plugins"]
	if len(sizes) != len(vs) || len(sizes) < 2 {
		return vs
	}
	largest := slices.Max(sizes)
	var out []float64
	for i, v := range vs {
		if sizes[i] == largest {
			out = append(out, v)
		}
	}
	return out
}

func (r *results) count(name string) int { return len(r.runs[name]["ns/op"]) }

// figure is how a row reads one number from the results.
type figure func(r *results) (float64, bool)

// metric is a figure the benchmark reported under unit.
func metric(name, unit string) figure {
	return func(r *results) (float64, bool) { return r.get(name, unit) }
}

// perSecond turns a benchmark's ns/op into operations per second, times
// per (an iteration of the benchmark may be several operations).
func perSecond(name string, per float64) figure {
	return func(r *results) (float64, bool) {
		ns, ok := r.get(name, "ns/op")
		if !ok || ns == 0 {
			return 0, false
		}
		return per * 1e9 / ns, true
	}
}

// micros turns a benchmark's ns/op into microseconds.
func micros(name string) figure {
	return func(r *results) (float64, bool) {
		ns, ok := r.get(name, "ns/op")
		return ns / 1e3, ok
	}
}

// target says whether a row meets its goal.
type target struct {
	text string
	met  func(r *results, nomad, plugvisor, raw float64) (bool, string)
}

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
	return &target{
		text: fmt.Sprintf("≥ %g× Nomad", min),
		met: func(_ *results, nomad, plugvisor, _ float64) (bool, string) {
			return nomad > 0 && plugvisor/nomad >= min, fmt.Sprintf("%.2f×", plugvisor/nomad)
		},
	}
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
		out = append(out, row{workload: "1 registrant: register + deregister, " + plural(subs, "draining subscriber"), unit: "pairs/s",
			nomad: n, plugvisor: p, raw: rfPairs, rawName: "RequestFuture", target: ratioAtLeast(0.3)},
			cpu(rd+"/subscribers="+subs))
	}
	n, p := pairs(cr, "ops/s")
	crTarget := ratioAtLeast(1.0)
	crTarget.text = "≥ 1.0× Nomad (stretch 1.5×)"
	cpuTarget := &target{text: "≤ 1.5× Nomad's", met: func(_ *results, nomad, plugvisor, _ float64) (bool, string) {
		return nomad > 0 && plugvisor/nomad <= 1.5, fmt.Sprintf("%.2f×", plugvisor/nomad)
	}}
	crCPU := cpu(cr)
	crCPU.target = cpuTarget
	out = append(out, row{workload: "8 concurrent registrants, 8 draining subscribers", unit: "pairs/s",
		nomad: n, plugvisor: p, raw: rfpPairs, rawName: "RequestFuture ×8", target: crTarget},
		crCPU, batching(cr))
	out = append(out, channelRows(cr)...)
	for _, q := range []string{"p50", "p99", "p99.9"} {
		r := row{workload: "register → delivery latency, " + q, unit: "µs", lowerIsBetter: true,
			nomad: metric(impl(dl, "nomad"), q+"-µs"), plugvisor: metric(impl(dl, "plugvisor"), q+"-µs"),
			raw: micros(rf), rawName: "RequestFuture round trip"}
		if q == "p99" {
			r.target = &target{text: "plugvisor < 50 µs", met: func(_ *results, _, plugvisor, _ float64) (bool, string) {
				return plugvisor < 50, fmt.Sprintf("%.0f µs", plugvisor)
			}}
		}
		out = append(out, r)
	}
	for _, read := range []string{"ListPlugins", "DispensePlugin"} {
		for _, store := range []string{"memory", "durable"} {
			n, p := pairs(ruw+"/"+read+"/writer="+store, "")
			what := "in memory, paced at 2,000 pairs/s"
			if store == "durable" {
				what = "durable (bbolt, fsync), paced at 50 pairs/s"
			}
			name := ruw + "/" + read + "/writer=" + store
			out = append(out,
				row{workload: read + " (100 plugins) while a writer runs, " + what, unit: "reads/s",
					nomad: n, plugvisor: p, target: ratioAtLeast(10)},
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
			target: &target{text: "plugvisor ≥ 90%; Nomad 0", met: func(_ *results, nomad, plugvisor, _ float64) (bool, string) {
				return plugvisor >= 90, fmt.Sprintf("%.0f%%; Nomad %.0f%%", plugvisor, nomad)
			}}},
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
		row{workload: "registry heap per plugin, 10,000 plugins registered (plugvisor: with its in-memory store)", unit: "B/plugin", lowerIsBetter: true,
			nomad: metric(impl(mem, "nomad"), "B/plugin"), plugvisor: metric(impl(mem, "plugvisor"), "B/plugin")},
		row{workload: "… plugvisor's registry alone (store records discarded)", unit: "B/plugin", lowerIsBetter: true,
			nomad: metric(impl(mem, "nomad"), "B/plugin"), plugvisor: metric(impl(mem, "plugvisor-registry"), "B/plugin")},
	)
	return append(out, csiRows()...)
}

// channelRows are plugvisor's channel subscribers (Subscribe), Nomad's
// kind, at 8 registrants × 8 subscribers: held to plugvisor's actor
// subscribers measured in the same run.
func channelRows(cr string) []row {
	channel := impl(cr, "plugvisor-channel")
	return []row{
		{workload: "… the same with plugvisor's subscribers as Go channels (Subscribe), as Nomad's are", unit: "pairs/s",
			nomad: metric(impl(cr, "nomad"), "ops/s"), plugvisor: metric(channel, "ops/s")},
		{workload: "… its CPU time per pair (whole process)", unit: "µs", lowerIsBetter: true,
			nomad: metric(impl(cr, "nomad"), "cpu-µs/op"), plugvisor: metric(channel, "cpu-µs/op"),
			target: &target{text: "≤ 1.3× plugvisor's with actor subscribers", met: func(r *results, _, plugvisor, _ float64) (bool, string) {
				actors, ok := r.get(impl(cr, "plugvisor"), "cpu-µs/op")
				if !ok || actors == 0 {
					return false, "no actor figure"
				}
				return plugvisor/actors <= 1.3, fmt.Sprintf("%.2f× the actors'", plugvisor/actors)
			}}},
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

func render(r *results, command, machine string, now time.Time) string {
	var b strings.Builder
	fmt.Fprintln(&b, startMarker)
	fmt.Fprintln(&b, "<!-- generated by bench/cmd/report from `make bench-compare`: edits here are overwritten -->")
	fmt.Fprintf(&b, "\nMachine: %s. Date: %s. Command: `%s`.\n", machine, now.Format("2006-01-02 15:04 MST"), command)
	fmt.Fprintf(&b, "Each figure is the median of %d rounds within this one run of the command (each round a test process running every benchmark, Nomad's side then plugvisor's); ratios are plugvisor's figure over the other's, so for µs and B/plugin (lower is better) a ratio under 1 favours plugvisor.\n\n", maxCount(r))
	fmt.Fprintln(&b, "| workload | unit | Nomad v1.11.3 | plugvisor | plugvisor / Nomad | raw protoactor | plugvisor / raw | target | met |")
	fmt.Fprintln(&b, "|---|---|--:|--:|--:|--:|--:|---|---|")
	for _, row := range rows() {
		if row.todo != "" {
			fmt.Fprintf(&b, "| %s | %s | — | **%s** | — | — | — | — | — |\n", row.workload, row.unit, row.todo)
			continue
		}
		nomad, hasNomad := read(r, row.nomad)
		plugvisor, hasPlugvisor := read(r, row.plugvisor)
		raw, hasRaw := read(r, row.raw)
		cells := []string{row.workload, row.unit, "—", "—", "—", "—", "—", "—", "—"}
		if row.describe != nil {
			cells[0] = row.describe(r)
		}
		if row.unit == "µs" || row.unit == "B/plugin" || row.lowerIsBetter {
			cells[1] = row.unit + " (lower is better)"
		}
		if hasNomad {
			cells[2] = format(nomad)
		} else if row.nomadNote != "" {
			cells[2] = row.nomadNote
		}
		if hasPlugvisor {
			cells[3] = format(plugvisor)
		}
		if hasNomad && hasPlugvisor && nomad > 0 {
			cells[4] = ratio(plugvisor / nomad)
		}
		if hasRaw {
			cells[5] = format(raw)
			if row.rawName != "" {
				cells[5] += " (" + row.rawName + ")"
			}
			if hasPlugvisor && raw > 0 {
				cells[6] = ratio(plugvisor / raw)
			}
		}
		if row.target != nil {
			cells[7] = row.target.text
			if hasPlugvisor {
				met, why := row.target.met(r, nomad, plugvisor, raw)
				cells[8] = map[bool]string{true: "**met**", false: "**not met**"}[met] + " (" + why + ")"
			} else {
				cells[8] = "no figure"
			}
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, endMarker)
	return b.String()
}

// ratio prints a ratio with three significant figures.
func ratio(v float64) string {
	if v >= 100 {
		return format(v) + "×"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + "×"
}

func plural(n, noun string) string {
	if n == "1" {
		return n + " " + noun
	}
	return n + " " + noun + "s"
}

func read(r *results, f figure) (float64, bool) {
	if f == nil {
		return 0, false
	}
	return f(r)
}

func maxCount(r *results) int {
	n := 0
	for name := range r.runs {
		n = max(n, r.count(name))
	}
	return n
}

// format prints three significant figures, with thousands separators.
func format(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return thousands(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func thousands(digits string) string {
	neg := strings.HasPrefix(digits, "-")
	digits = strings.TrimPrefix(digits, "-")
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// machine describes where the figures were taken.
func machine(r *results) string {
	cpu := r.cpu
	if model := cpuModel(); model != "" {
		cpu = model
	}
	load := ""
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			load = fmt.Sprintf(", load average %s %s %s when the table was written", f[0], f[1], f[2])
		}
	}
	return fmt.Sprintf("%d CPUs (nproc), %s, %s/%s, %s%s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, runtime.Version(), load)
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// splice writes section into the file at path between the markers,
// appending it (or creating the file) when the markers are missing.
func splice(path, section string) error {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(path, []byte("# Benchmarks\n\n"+section), 0o644)
	}
	if err != nil {
		return err
	}
	text := string(old)
	start := strings.Index(text, startMarker)
	end := strings.Index(text, endMarker)
	switch {
	case start >= 0 && end > start:
		text = text[:start] + section + strings.TrimPrefix(text[end+len(endMarker):], "\n")
	case start >= 0 || end >= 0:
		return fmt.Errorf("%s: one bench-compare marker without the other", path)
	default:
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += "\n" + section
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
