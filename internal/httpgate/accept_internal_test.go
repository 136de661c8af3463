package httpgate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAWholeRequestIsToldFromAPartOfOne(t *testing.T) {
	cases := []struct {
		name, b string
		whole   bool
	}{
		{"a GET", "GET /v1/health HTTP/1.1\r\nHost: plugvisor\r\n\r\n", true},
		{"headers that never end", "GET /v1/health HTTP/1.1\r\nHost: loc", false},
		{"a body all there", "POST /v1/plugins HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", true},
		{"a body one byte of 100000", "POST /v1/plugins HTTP/1.1\r\ncontent-length: 100000\r\n\r\n{", false},
		{"a chunked body", "POST /v1/plugins HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false},
		{"a length that is no number", "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", false},
		{"a header line without a colon", "GET / HTTP/1.1\r\nHost\r\n\r\n", false},
		{"nothing", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.whole, wholeRequest([]byte(tc.b)))
		})
	}
}

func TestAWholeTLSRecordIsToldFromAPartOfOne(t *testing.T) {
	record := append([]byte{0x16, 0x03, 0x01, 0x00, 0x03}, 1, 2, 3)
	require.True(t, wholeTLSRecord(record))
	require.False(t, wholeTLSRecord(record[:7]), "a record cut short")
	require.False(t, wholeTLSRecord([]byte("GET / HTTP/1.1\r\n\r\n")), "plain HTTP is no handshake")
	require.False(t, wholeTLSRecord(nil))
}
