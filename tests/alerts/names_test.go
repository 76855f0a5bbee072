//go:build linux

package alerts

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// targetLabels are the labels Prometheus itself puts on every scraped
// series; the rules join on them.
var targetLabels = map[string]bool{"job": true, "instance": true}

// foreignSeries are the series the rules read that are not leaderrun_*:
// `up` is Prometheus's own; the others must be on leaderrun's /metrics.
var foreignSeries = map[string]bool{"up": false, "process_start_time_seconds": true}

var (
	metricRe   = regexp.MustCompile(`\b(leaderrun_[a-z_]+|process_[a-z_]+|up)\b`)
	selectorRe = regexp.MustCompile(`\b(leaderrun_[a-z_]+)\{([^{}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	groupingRe = regexp.MustCompile(`\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	templateRe = regexp.MustCompile(`\$labels\.([a-zA-Z_]+)|\{\{([a-zA-Z_]+)\}\}`)
)

// exposition is what a running leaderrun's /metrics shows: every series
// name with the label names it carries.
type exposition map[string]map[string]bool

func parseExposition(body string) exposition {
	e := exposition{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			name, labels = line[:i], line[i+1:strings.LastIndexByte(line, '}')]
		} else if i >= 0 {
			name = line[:i]
		}
		if e[name] == nil {
			e[name] = map[string]bool{}
		}
		for _, m := range matcherRe.FindAllStringSubmatch(labels, -1) {
			e[name][m[1]] = true
		}
	}
	return e
}

// queryTexts returns the PromQL and templates of a file: the rule file as
// it is, the dashboard's every string value (exprs, legends, variables).
func queryTexts(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, ".json") {
		return []string{string(b)}
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// checkNames returns one message per metric or label that the texts name
// and the exposition lacks.
func checkNames(e exposition, texts []string) []string {
	labels := map[string]bool{}
	for name, ls := range e {
		if strings.HasPrefix(name, "leaderrun_") {
			for l := range ls {
				labels[l] = true
			}
		}
	}
	bad := map[string]bool{}
	for _, text := range texts {
		for _, m := range metricRe.FindAllString(text, -1) {
			if need, foreign := foreignSeries[m]; foreign && !need {
				continue
			}
			if _, ok := e[m]; !ok {
				if strings.HasPrefix(m, "leaderrun_") || foreignSeries[m] {
					bad["metric "+m] = true
				}
			}
		}
		for _, m := range selectorRe.FindAllStringSubmatch(text, -1) {
			for _, l := range matcherRe.FindAllStringSubmatch(m[2], -1) {
				if !e[m[1]][l[1]] {
					bad["label "+l[1]+" of "+m[1]] = true
				}
			}
		}
		var used []string
		for _, m := range groupingRe.FindAllStringSubmatch(text, -1) {
			used = append(used, strings.Split(m[1], ",")...)
		}
		for _, m := range templateRe.FindAllStringSubmatch(text, -1) {
			used = append(used, m[1]+m[2])
		}
		for _, l := range used {
			if l = strings.TrimSpace(l); l != "" && !labels[l] && !targetLabels[l] {
				bad["label "+l] = true
			}
		}
	}
	var out []string
	for b := range bad {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// TestRulesAndDashboardNameExportedSeries fails when the rules or the
// dashboard name a leaderrun_* series, or a label, that a running
// leaderrun does not export. The leaderrun's child exits (code 3) and is
// restarted, so that every series, leaderrun_child_exits_total{code} too,
// is on its /metrics.
func TestRulesAndDashboardNameExportedSeries(t *testing.T) {
	l := newLeaderrun(t, "names", append(localArgs(t, t.TempDir(), "names"),
		"--restart", "always", "--restart-delay", "100ms", "--", "sh", "-c", "exit 3")...)
	l.start()
	var body string
	testsupport.WaitFor(t, 10*time.Second, "a child exit on /metrics", func() bool {
		body = l.scrape()
		return strings.Contains(body, `leaderrun_child_exits_total{code="3"}`)
	})
	e := parseExposition(body)
	// leaderrun_info's slot label comes from a --holders run once it
	// holds a slot.
	h := newLeaderrun(t, "names-holders", append(localArgs(t, t.TempDir(), "names-holders"), "--holders", "2", "--", "sleep", "1000")...)
	h.start()
	var slotted string
	testsupport.WaitFor(t, 10*time.Second, "a slot on /metrics", func() bool {
		slotted = h.scrape()
		return strings.Contains(slotted, `slot="`)
	})
	for name, labels := range parseExposition(slotted) {
		if e[name] == nil {
			e[name] = labels
			continue
		}
		for l := range labels {
			e[name][l] = true
		}
	}
	// The once-per gauges come from `leaderrun history --prometheus` of a
	// key with a once-per run.
	dir := t.TempDir()
	runSlot(t, dir, "nightly", time.Hour)
	out, err := exec.Command(binary, "history", "--backend", "local", "--lock-dir", dir, "nightly", "--prometheus").Output()
	if err != nil {
		t.Fatalf("history --prometheus: %v", err)
	}
	for name, labels := range parseExposition(string(out)) {
		e[name] = labels
	}
	if _, ok := e["leaderrun_once_period_seconds"]; !ok {
		t.Fatalf("history --prometheus printed no period:\n%s", out)
	}
	for _, path := range []string{rulesFile, dashboardFile} {
		texts := queryTexts(t, path)
		if len(metricRe.FindAllString(strings.Join(texts, "\n"), -1)) == 0 {
			t.Fatalf("%s names no series at all", path)
		}
		for _, b := range checkNames(e, texts) {
			t.Errorf("%s names %s, which leaderrun does not export", path, b)
		}
	}
	// The check itself must catch a wrong name or label.
	if got := checkNames(e, []string{`sum by (host) (leaderrun_is_leading{key="x"})`}); strings.Join(got, ";") != "label host;label key of leaderrun_is_leading;metric leaderrun_is_leading" {
		t.Errorf("the check missed a wrong name or label: %v", got)
	}
	if got := checkNames(e, []string{`leaderrun_renewals_total{code="1"}`}); len(got) != 1 {
		t.Errorf("the check missed a label on the wrong series: %v", got)
	}
}
