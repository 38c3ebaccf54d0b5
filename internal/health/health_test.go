package health

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/runnel-io/runnel/internal/buildinfo"
)

func TestReportIsTheWorstCheck(t *testing.T) {
	for _, tc := range []struct {
		checks []Check
		want   Status
		code   int
	}{
		{nil, OK, 200},
		{[]Check{{Name: "a"}, {Name: "b", Status: Degraded, Reason: "x"}}, Degraded, 200},
		{[]Check{{Name: "a", Status: Failing, Reason: "y"}, {Name: "b", Status: Degraded, Reason: "x"}}, Failing, 503},
	} {
		r := NewReport(tc.checks)
		if r.Status != tc.want {
			t.Errorf("%v: status %v, want %v", tc.checks, r.Status, tc.want)
		}
		rec := httptest.NewRecorder()
		Handler(func() Report { return r }).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != tc.code {
			t.Errorf("%v: HTTP %d, want %d", tc.checks, rec.Code, tc.code)
		}
		var got struct {
			Status, Version string
			Checks          []struct{ Name, Status, Reason string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Status != tc.want.String() || len(got.Checks) != len(tc.checks) || got.Version == "" || got.Version != buildinfo.Version() {
			t.Errorf("body %s", rec.Body)
		}
	}
	if got := NewReport([]Check{{Name: "a"}, {Name: "b", Status: Failing, Reason: "down"}}).Reasons(); len(got) != 1 || got[0] != "b: down" {
		t.Errorf("reasons %q", got)
	}
}

func TestCollector(t *testing.T) {
	c := Collector("x_health", "h", prometheus.Labels{"edge": "e1"}, func() Report {
		return NewReport([]Check{{Name: "a"}, {Name: "b", Status: Degraded, Reason: "r"}})
	})
	want := `
# HELP x_health h
# TYPE x_health gauge
x_health{check="a",edge="e1"} 0
x_health{check="b",edge="e1"} 1
x_health{check="node",edge="e1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
