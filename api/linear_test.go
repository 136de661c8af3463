package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/cputime"
)

// nested is a body nested depth objects deep, 6 bytes a level: at 40,000
// it is the 240 KB body of issue 39.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
}

// allocatedBytes is what fn allocates, the work counter of decoding: the
// old scan built every level's path anew, bytes quadratic in the depth.
func allocatedBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestADeeplyNestedBodyIsRefusedWithWorkLinearInItsSize is attack 3 of
// issue 39: a body nested 40,000 deep cost the agent 30 s of CPU. It is
// refused with 400 naming the limit, and decoding it allocates a bounded
// number of bytes per byte of body, at 4,000 levels as at 40,000: about
// 3, where the old scan allocated 2,300 at 4,000 levels and twice as many
// at every doubling of the depth.
func TestADeeplyNestedBodyIsRefusedWithWorkLinearInItsSize(t *testing.T) {
	for _, depth := range []int{4_000, 40_000} {
		body := nested(depth)
		work := allocatedBytes(func() {
			var v PluginBody
			w, r := request(body)
			require.Error(t, decodeBody(w, r, &v, false))
		})
		require.LessOrEqual(t, work, uint64(8*len(body)+64<<10),
			"decoding %d levels (%d bytes) allocated %d bytes", depth, len(body), work)
	}

	h := (&Server{}).HandlerFor(Listener{Name: "unix", Hosts: []string{"plugvisor"}})
	for body, want := range map[string]string{
		nested(40_000): `bad request body: unknown field \"a\"`,
		`{"type":"csi-node","options":` + nested(40_000) + `}`: `bad request body: field \"options.` +
			strings.Repeat("a.", MaxDepth-2) + `a\" nests objects and arrays deeper than 32 levels, the limit; send a flatter body`,
	} {
		req := httptest.NewRequest(http.MethodPost, "http://plugvisor/v1/plugins", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
		require.Contains(t, rec.Body.String(), want)
	}
}

// TestTheDepthLimitTakesExactlyMaxDepthLevels: objects and arrays count
// alike, and a refusal names where the body went too deep.
func TestTheDepthLimitTakesExactlyMaxDepthLevels(t *testing.T) {
	arrays := func(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }
	anything := &map[string]any{}
	require.NoError(t, scanBody([]byte(nested(MaxDepth)), anything))
	require.NoError(t, scanBody([]byte(`{"x":`+arrays(MaxDepth-1)+`}`), anything))
	require.ErrorContains(t, scanBody([]byte(nested(MaxDepth+1)), anything), "deeper than 32 levels")
	err := scanBody([]byte(`{"secrets":{"k":`+arrays(MaxDepth-1)+`}}`), &CreateBody{})
	require.ErrorIs(t, err, errBadBody)
	require.ErrorContains(t, err, `field "secrets.k" nests objects and arrays deeper than 32 levels`)
}

// TestABodyOfMoreThanMaxValuesIsRefusedWith413 before it is decoded; a
// registration with as many options as -max-plugin-options-bytes' default
// allows passes the scan.
func TestABodyOfMoreThanMaxValuesIsRefusedWith413(t *testing.T) {
	options := func(n int) string {
		return `{"type":"csi-node","name":"p","alloc_id":"a1","options":{` + distinctMembers(MaxBodyBytes, n) + `}}`
	}
	require.NoError(t, scanBody([]byte(options(2_400)), &PluginBody{}))
	h := (&Server{}).HandlerFor(Listener{Name: "unix", Hosts: []string{"plugvisor"}})
	req := httptest.NewRequest(http.MethodPost, "http://plugvisor/v1/plugins", strings.NewReader(options(MaxValues)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "it holds more than 8192 values (objects, arrays, strings, numbers and literals), the limit; send fewer")
}

// TestAnErrorQuotesALongPathCut: a refusal quotes at most maxPathShown
// bytes of a member's path, however long the body's keys.
func TestAnErrorQuotesALongPathCut(t *testing.T) {
	key := strings.Repeat("k", 100_000)
	err := scanBody([]byte(fmt.Sprintf(`{"%s":1,"%s":2}`, key, key)), &map[string]any{})
	require.ErrorContains(t, err, `field "`+key[:maxPathShown]+`"… appears twice`)
	require.Less(t, len(err.Error()), 400)
}

// worstBodies are the bodies that cost the decoder the most: of 1 MiB,
// nested, of many members or items, of long strings and escapes; and those
// just under MaxValues, which the scan passes for the decoder.
func worstBodies() map[string]string {
	fill := func(open, item, sep, end string, n int) string {
		if n == 0 {
			n = (MaxBodyBytes - len(open) - len(end)) / (len(item) + len(sep))
		}
		return open + strings.Repeat(item+sep, n-1) + item + end
	}
	deepItem := strings.Repeat("[", MaxDepth-3) + strings.Repeat("]", MaxDepth-3)
	return map[string]string{
		"1 MiB: nested 1 MiB deep":             strings.Repeat("[", MaxBodyBytes),
		"1 MiB: nested to the limit, repeated": fill(`{"parameters":{"k":[`, deepItem, ",", `]}}`, 0),
		"1 MiB: one member repeated":           fill(`{"secrets":{`, `"k":"v"`, ",", `}}`, 0),
		"1 MiB: distinct members":              `{"secrets":{` + distinctMembers(MaxBodyBytes-32, 1<<20) + `}}`,
		"1 MiB: a string":                      `{"plugin_id":"` + strings.Repeat("x", MaxBodyBytes-20) + `"}`,
		"1 MiB: a key":                         `{"secrets":{"` + strings.Repeat("x", MaxBodyBytes-30) + `":"v"}}`,
		"1 MiB: escapes":                       `{"plugin_id":"` + strings.Repeat(`\u00e9`, (MaxBodyBytes-20)/6) + `"}`,
		"1 MiB: items":                         fill(`{"mount_options":{"mount_flags":[`, `"r"`, ",", `]}}`, 0),
		"1 MiB: objects":                       fill(`{"topology":{"requisite":[`, `{"z":"a"}`, ",", `]}}`, 0),
		"at the limit: distinct members":       `{"secrets":{` + distinctMembers(MaxBodyBytes-32, MaxValues-2) + `}}`,
		"at the limit: items":                  fill(`{"mount_options":{"mount_flags":[`, `"r"`, ",", `]}}`, MaxValues-4),
		"at the limit: objects":                fill(`{"topology":{"requisite":[`, `{"z":"a"}`, ",", `]}}`, MaxValues/2-4),
		"at the limit: empty objects":          fill(`{"topology":{"requisite":[`, `{}`, ",", `]}}`, MaxValues-4),
	}
}

// distinctMembers is at most count members "k0":"v","k1":"v",... in n
// bytes or fewer.
func distinctMembers(n, count int) string {
	var b strings.Builder
	for i := 0; ; i++ {
		m := fmt.Sprintf(`"k%d":"v"`, i)
		if b.Len()+len(m)+1 > n || i == count {
			return b.String()
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m)
	}
}

// BenchmarkDecodeWorstShapes decodes each worst body as a create's body,
// as the agent does (decode, then the body's limits): a 1 MiB body of any
// shape costs well under 50 ms of CPU.
func BenchmarkDecodeWorstShapes(b *testing.B) {
	s := &Server{}
	for name, body := range worstBodies() {
		if len(body) > MaxBodyBytes {
			b.Fatalf("%s: %d bytes, over the limit", name, len(body))
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			start := cputime.Used()
			for b.Loop() {
				var v CreateBody
				w, r := request(body)
				_ = s.decode(w, r, &v, false)
			}
			b.ReportMetric(float64(cputime.Used()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}
