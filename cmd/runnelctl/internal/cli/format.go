package cli

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/operators/spec"
)

// none is an empty cell.
const none = "-"

// table is rows under a header, written with aligned columns (three
// spaces between them, as kubectl does).
type table struct {
	rows [][]string
}

func newTable(header ...string) *table { return &table{rows: [][]string{header}} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	widths := map[int]int{}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range t.rows {
		writeRow(w, r, widths)
	}
}

func writeRow(w io.Writer, r []string, widths map[int]int) {
	var b strings.Builder
	for i, c := range r {
		if c == "" {
			c = none
		}
		b.WriteString(c)
		if i < len(r)-1 {
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+3))
		}
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// streamTable writes rows as they come: each column as wide as the
// widest cell so far, so columns stay aligned until a wider cell comes.
type streamTable struct {
	w      io.Writer
	widths map[int]int
}

func (t *streamTable) row(cells ...string) {
	if t.widths == nil {
		t.widths = map[int]int{}
	}
	for i, c := range cells {
		if c == "" {
			c = none
		}
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
	}
	writeRow(t.w, cells, t.widths)
}

// Times. Unix milliseconds of 0 are "never" set.

// ago renders a past time as "3m ago"; a time in the future (clock skew)
// as "just now".
func (a *app) ago(ms int64) string {
	if ms == 0 {
		return "never"
	}
	d := a.now().Sub(time.UnixMilli(ms))
	if d < time.Second {
		return "just now"
	}
	return short(d) + " ago"
}

// age renders how long ago ms was, as kubectl's AGE column: "3m", "2d".
func (a *app) age(ms int64) string {
	if ms == 0 {
		return none
	}
	return short(max(0, a.now().Sub(time.UnixMilli(ms))))
}

func (a *app) now() time.Time {
	if a.env.Now == nil {
		return time.Now()
	}
	return a.env.Now()
}

// short renders d in at most two units, the second only while the first
// is small: 45s, 3m12s, 15m, 3h5m, 15h, 2d3h, 12d.
func short(d time.Duration) string {
	s := int64(d / time.Second)
	two := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, ua)
		}
		return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
	}
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 600:
		return two(s/60, "m", s%60, "s")
	case s < 3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 10*3600:
		return two(s/3600, "h", s%3600/60, "m")
	case s < 86400:
		return fmt.Sprintf("%dh", s/3600)
	case s < 10*86400:
		return two(s/86400, "d", s%86400/3600, "h")
	}
	return fmt.Sprintf("%dd", s/86400)
}

// when renders an absolute time with its relative one:
// "2025-03-01 12:00:00 UTC (3m ago)".
func (a *app) when(ms int64) string {
	if ms == 0 {
		return "never"
	}
	return a.abs(ms) + " (" + a.ago(ms) + ")"
}

// abs renders ms in the configured zone.
func (a *app) abs(ms int64) string {
	loc := a.env.Location
	if loc == nil {
		loc = time.Local
	}
	return time.UnixMilli(ms).In(loc).Format("2006-01-02 15:04:05 MST")
}

// duration renders milliseconds in the spec's syntax (30s, 10m, 1h30m).
func duration(ms int64) string {
	if ms == 0 {
		return "0s"
	}
	return spec.Duration(ms).String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// bytesText renders a size in binary units: 512B, 1.5KiB, 12MiB.
func bytesText(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= 1024
		if v < 1024 || u == "PiB" {
			if v < 10 {
				return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + u
			}
			return fmt.Sprintf("%.0f%s", v, u)
		}
	}
	return ""
}

// number renders a result value for a table: integers whole, others
// with six significant digits; json shows them exact.
func number(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// labels renders a label map sorted: "hw=rpi4,site=plant-7".
func labels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// jsonOptions: field names as in the REST API, every field present, so a
// script reads false and 0 rather than a missing field.
var jsonOptions = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}

// printProto writes m as -o json (protojson) or -o yaml (the same JSON
// as YAML, fields in the same order).
func printProto(w io.Writer, m proto.Message, format string) error {
	data, err := jsonOptions.Marshal(m)
	if err != nil {
		return err
	}
	if format == "json" {
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return err
	}
	blockStyle(&n)
	out, err := yaml.Dump(&n, yaml.WithLineWidth(-1))
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// blockStyle clears the JSON's flow and quoting styles, so that the
// encoder writes block YAML and quotes only what needs it.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
