package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// results holds every figure of every benchmark run, by benchmark name
// (without the -GOMAXPROCS suffix) and unit, each with the round it was
// measured in.
type results struct {
	runs   map[string]map[string][]float64
	rounds map[string]map[string][]int // runs' rounds, index for index
	// loads are the load averages make bench-compare noted at the start
	// of each part of each round, in the order they came.
	loads []roundLoad
	round int // of the lines being parsed; 0 before any round marker
	cpu   string
	goos  string
}

// roundLoad is a round's load average (1, 5 and 15 minutes) as noted.
type roundLoad struct {
	round int
	load  string
}

func newResults() *results {
	return &results{runs: map[string]map[string][]float64{}, rounds: map[string]map[string][]int{}}
}

var (
	procsSuffix = regexp.MustCompile(`-\d+$`)
	// roundMarker is the line make bench-compare writes before each part
	// of each round.
	roundMarker = regexp.MustCompile(`^bench-compare: round (\d+), load average (.+)$`)
)

func (r *results) parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := roundMarker.FindStringSubmatch(line); m != nil {
			r.round, _ = strconv.Atoi(m[1])
			r.loads = append(r.loads, roundLoad{round: r.round, load: m[2]})
			continue
		}
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
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark %s: figure %q: %w", name, fields[i], err)
			}
			r.add(name, fields[i+1], v, r.round)
		}
	}
	return sc.Err()
}

// add records one figure of round (0: output without round markers, where
// a benchmark's n-th run is taken as round n).
func (r *results) add(name, unit string, v float64, round int) {
	if r.runs[name] == nil {
		r.runs[name], r.rounds[name] = map[string][]float64{}, map[string][]int{}
	}
	if round == 0 {
		round = len(r.runs[name][unit]) + 1
	}
	r.runs[name][unit] = append(r.runs[name][unit], v)
	r.rounds[name][unit] = append(r.rounds[name][unit], round)
}

// roundNumbers lists the rounds that have figures, in order.
func (r *results) roundNumbers() []int {
	seen := map[int]bool{}
	for _, units := range r.rounds {
		for _, rounds := range units {
			for _, n := range rounds {
				seen[n] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// only returns the figures of one round.
func (r *results) only(round int) *results {
	out := newResults()
	out.cpu, out.goos = r.cpu, r.goos
	for name, units := range r.runs {
		for unit, vs := range units {
			for i, v := range vs {
				if r.rounds[name][unit][i] == round {
					out.add(name, unit, v, round)
				}
			}
		}
	}
	return out
}

// perRound returns f's figure in each round that has one.
func (r *results) perRound(f func(round *results) (float64, bool)) []float64 {
	var out []float64
	for _, n := range r.roundNumbers() {
		if v, ok := f(r.only(n)); ok {
			out = append(out, v)
		}
	}
	return out
}

// spread is the min, median and max of vs (which it sorts).
type spread struct{ min, median, max float64 }

func spreadOf(vs []float64) (spread, bool) {
	if len(vs) == 0 {
		return spread{}, false
	}
	slices.Sort(vs)
	return spread{min: vs[0], median: median(vs), max: vs[len(vs)-1]}, true
}

// median of sorted values.
func median(s []float64) float64 {
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
	return median(s), true
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
