//go:build linux

package testcluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Prometheus comes from Debian's prometheus package (which brings promtool
// too); scripts/install-deps.sh installs it.
const promHint = "run scripts/install-deps.sh (Debian package prometheus)"

// PrometheusBin returns the path of name ("prometheus" or "promtool") on
// PATH. It skips the test when it is missing, or fails it under CI=true, as
// Bin does.
func PrometheusBin(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testcluster: %s unavailable: %v; %s", name, err, promHint)
		}
		t.Skipf("testcluster: %s unavailable: %v; %s", name, err, promHint)
	}
	return path
}

// PrometheusOptions configure StartPrometheus.
type PrometheusOptions struct {
	// Targets are the host:port addresses scraped (path /metrics), all in
	// one job named "leaderrun".
	Targets []string
	// RuleFiles are loaded as rule_files.
	RuleFiles []string
	// Interval is both the scrape and the rule evaluation interval; zero
	// means 1s.
	Interval time.Duration
}

// Prometheus is a server started by StartPrometheus.
type Prometheus struct {
	t    testing.TB
	URL  string // e.g. http://127.0.0.1:12345
	proc *proc
}

// StartPrometheus starts a Prometheus server on a free 127.0.0.1 port with
// its data in t.TempDir() and returns once it is ready. It is killed when
// the test ends, and its log printed if the test failed.
func StartPrometheus(t testing.TB, opts PrometheusOptions) *Prometheus {
	t.Helper()
	bin := PrometheusBin(t, "prometheus")
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	for attempt := 1; ; attempt++ {
		p, err := startPrometheusOnce(t, bin, opts)
		if err == nil {
			return p
		}
		conflict := p.proc.portConflict()
		killAll([]*proc{p.proc})
		if conflict && attempt < 3 {
			t.Logf("testcluster: Prometheus lost a port race (%v); retrying with a new port", err)
			continue
		}
		logProcs(t, []*proc{p.proc})
		t.Fatalf("testcluster: Prometheus did not start: %v", err)
	}
}

func startPrometheusOnce(t testing.TB, bin string, opts PrometheusOptions) (*Prometheus, error) {
	dir := t.TempDir()
	p := &Prometheus{t: t, proc: &proc{name: "prometheus", bin: bin, logPath: filepath.Join(dir, "prometheus.log")}}
	ports, err := freePorts(1, false)
	if err != nil {
		return p, err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n",
		opts.Interval, opts.Interval, opts.Interval)
	cfg.WriteString("rule_files:\n")
	for _, f := range opts.RuleFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			return p, err
		}
		fmt.Fprintf(&cfg, "  - %q\n", abs)
	}
	cfg.WriteString("scrape_configs:\n  - job_name: leaderrun\n    static_configs:\n      - targets:\n")
	for _, target := range opts.Targets {
		fmt.Fprintf(&cfg, "          - %q\n", target)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return p, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p.URL = "http://" + addr
	p.proc.args = []string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
	}
	if err := p.proc.start(); err != nil {
		return p, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, []*proc{p.proc})
		}
		killAll([]*proc{p.proc})
	})
	client := &http.Client{Timeout: httpTimeout}
	err = poll(startTimeout, func() error {
		if err := exited([]*proc{p.proc}); err != nil {
			return err
		}
		resp, err := client.Get(p.URL + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	return p, err
}

// Alert is one entry of /api/v1/alerts.
type Alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"` // "pending" or "firing"
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

// Alerts returns the active (pending or firing) alerts.
func (p *Prometheus) Alerts() ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	err := p.api("/api/v1/alerts", &data)
	return data.Alerts, err
}

// RuleGroup is one group of /api/v1/rules.
type RuleGroup struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Rules []struct {
		Name      string `json:"name"`
		Query     string `json:"query"`
		Type      string `json:"type"` // "alerting" or "recording"
		State     string `json:"state"`
		Health    string `json:"health"` // "ok", "err" or "unknown"
		LastError string `json:"lastError"`
	} `json:"rules"`
}

// Rules returns the loaded rule groups with each rule's health.
func (p *Prometheus) Rules() ([]RuleGroup, error) {
	var data struct {
		Groups []RuleGroup `json:"groups"`
	}
	err := p.api("/api/v1/rules", &data)
	return data.Groups, err
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix time, "value"]
}

// Query runs an instant PromQL query.
func (p *Prometheus) Query(q string) ([]Sample, error) {
	var data struct {
		Result []Sample `json:"result"`
	}
	err := p.api("/api/v1/query?query="+url.QueryEscape(q), &data)
	return data.Result, err
}

// api GETs path and decodes the data of a successful answer into out.
func (p *Prometheus) api(path string, out any) error {
	client := &http.Client{Timeout: httpTimeout}
	resp, err := client.Get(p.URL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// FreePort returns a loopback TCP port that is free now and that no other
// helper of this package hands out, e.g. for a --http-addr that must stay
// the same across restarts of the process that binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := freePorts(1, false)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}
