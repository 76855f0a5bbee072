package testsupport

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// httpClient opens a fresh connection per request, so a test never reuses
// one a server under test has since dropped.
var httpClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// HTTPGet fetches path from addr (host:port) over plain HTTP within 5s and
// returns the status code and body; the test fails if there is no answer.
func HTTPGet(t testing.TB, addr, path string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// Metric reads the value of one sample of a Prometheus text exposition,
// named with its labels as it is printed, e.g.
// `leaderrun_renewals_total{result="ok"}`.
func Metric(body, series string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
