package spec_test

import (
	"errors"
	"fmt"

	"github.com/runnel-io/runnel/operators/spec"
)

func ExampleParse() {
	p, err := spec.Parse("line-temps.yaml", []byte(`
name: line-temps
source: {mqtt: {topic: "plant/+/temp", topic_fields: {line: 1}}}
event_time: {field: ts, unit: ms}
key: [line, device]
window: {sliding: {size: 10m, slide: 1m}}
aggregates:
  avg_temp: avg(temp)
  p95_temp: quantile(temp, 0.95)
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Name, p.Window.Kind, p.Window.Size, p.Window.Slide, p.Window.Slices())
	fmt.Println("payload fields:", p.Fields())
	// Output:
	// line-temps sliding 10m 1m 10
	// payload fields: [ts device temp]
}

func ExampleParse_problems() {
	_, err := spec.Parse("line-temps.yaml", []byte(`
name: line-temps
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts}
filtr: "temp > 0"
window: {sliding: {size: 10m, slide: 90s}}
aggregates:
  p95_temp: quantile(temp)
`))
	fmt.Println(errors.Is(err, spec.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// line-temps.yaml:5:1: unknown field "filtr" (did you mean "filter"?)
	// line-temps.yaml:8:21: aggregates.p95_temp: quantile needs 2 arguments (field, q), got 1
}

func ExampleExprFields() {
	fields, _ := spec.ExprFields(`temp > limits.max && meta["site"] != "lab" && all(readings, .ok)`)
	fmt.Println(fields)
	// Output: [temp limits.max meta.site readings]
}

func ExamplePipeline_Problemf() {
	p, _ := spec.Parse("p.yaml", []byte(`name: p
source: {mqtt: {topic: t}}
event_time: {field: ts}
window: {session: {gap: 30s}}
aggregates: {n: count()}
`))
	// A later stage refusing the spec in the parser's format.
	fmt.Println(p.Problemf(p.Where("window.session.gap"), "window.session.gap", "session windows are not supported on this hub"))
	// Output: p.yaml:4:25: window.session.gap: session windows are not supported on this hub
}
