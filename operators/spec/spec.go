package spec

// Pipeline is a parsed, validated pipeline spec. Every field holds its
// default when the spec left it out, so consumers never re-apply defaults.
// A Pipeline returned by Parse is valid; one built in code is not checked.
type Pipeline struct {
	File            string // where it was read from, for messages
	Name            string
	Source          Source
	Format          string // "json"
	EventTime       EventTime
	EventID         []string // nil: no redelivery dedup
	Key             []string // nil: one global key
	Watermark       Watermark
	Compute         []Computed // in spec order, which is evaluation order
	Filter          string     // "" when there is no filter
	FilterPos       Pos
	Window          Window
	AllowedLateness Duration
	Aggregates      []Aggregate // in spec order, which is output order
	Outputs         []Output    // never empty: defaults to one hub output
	LateOutput      *Output     // nil: late events are counted and dropped
	DeadLetter      *Output     // nil: bad records are counted and dropped

	// pos maps field paths to the position of their value; see Where.
	pos map[string]Pos
}

// Source is where records come from. Exactly one kind is set.
type Source struct {
	MQTT *MQTTSource
}

// MQTTSource subscribes to an MQTT topic filter.
type MQTTSource struct {
	Topic       string // a valid MQTT topic filter
	QoS         int    // 0 or 1 (default 1)
	TopicFields []TopicField
}

// TopicField names one level of the received topic as a record field.
type TopicField struct {
	Name  string
	Level int // 0-based; always a "+" level of Topic
}

// EventTime says where a record's event time is and how it is written,
// and how far from the edge's clock it may be.
type EventTime struct {
	Field string
	Unit  TimeUnit
	// MaxFuture bounds how far an event time may lie ahead of the edge's
	// clock; a record beyond it is a dead letter, so that one sensor with
	// a wrong clock cannot move the watermark for everyone. 0: no bound.
	MaxFuture Duration
	// MaxPast bounds how far an event time may lie behind the edge's
	// clock (a dead letter beyond it). 0: no bound.
	MaxPast Duration
}

// DefaultMaxFuture is EventTime.MaxFuture when a spec does not set it.
const DefaultMaxFuture = Duration(10 * 60 * 1000)

// TimeUnit is how an event time value is written in the payload.
type TimeUnit int

// Event time units. Numbers count from the Unix epoch.
const (
	UnitS       TimeUnit = iota + 1 // seconds (integer or fractional)
	UnitMS                          // milliseconds, the default
	UnitUS                          // microseconds
	UnitNS                          // nanoseconds
	UnitRFC3339                     // a string such as 2024-05-01T12:00:00.250Z
)

var unitNames = map[string]TimeUnit{"s": UnitS, "ms": UnitMS, "us": UnitUS, "ns": UnitNS, "rfc3339": UnitRFC3339}

// String returns the unit as written in a spec.
func (u TimeUnit) String() string {
	switch u {
	case UnitS:
		return "s"
	case UnitMS:
		return "ms"
	case UnitUS:
		return "us"
	case UnitNS:
		return "ns"
	case UnitRFC3339:
		return "rfc3339"
	}
	return "TimeUnit(?)"
}

// Watermark configures how the event-time watermark trails the data.
type Watermark struct {
	MaxOutOfOrder Duration // how far behind the newest event a record may be and still be on time
	IdleTimeout   Duration // 0: an input never counts as idle
}

// Computed is one entry of the compute section: a new field and the
// expr-lang expression that computes it.
type Computed struct {
	Name string
	Expr string
	Pos  Pos // position of Expr
}

// Window is the windowing of the pipeline.
type Window struct {
	Kind  WindowKind
	Size  Duration // tumbling and sliding
	Slide Duration // sliding; equal to Size for tumbling
	Gap   Duration // session
}

// WindowKind is the kind of window.
type WindowKind int

// Window kinds.
const (
	Tumbling WindowKind = iota + 1
	Sliding
	Session
)

// String returns the kind as written in a spec.
func (k WindowKind) String() string {
	switch k {
	case Tumbling:
		return "tumbling"
	case Sliding:
		return "sliding"
	case Session:
		return "session"
	}
	return "WindowKind(?)"
}

// Slices returns how many slices one window is cut into: size/gcd(size,
// slide) for sliding windows, 1 otherwise. Parse guarantees it is at most
// MaxSlices.
func (w Window) Slices() int64 {
	if w.Kind != Sliding || w.Size <= 0 || w.Slide <= 0 {
		return 1
	}
	return int64(w.Size / gcd(w.Size, w.Slide))
}

// MaxSlices bounds Window.Slices: every record updates one slice, but firing a
// window merges all of its slices, and each slice is state per key.
const MaxSlices = 10000

func gcd(a, b Duration) Duration {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Aggregate is one output column: Func applied to Args.
type Aggregate struct {
	Name     string
	Func     string   // count, sum, min, max, avg, variance, stddev, first, last, distinct, quantile
	Args     []string // raw argument text, trimmed: field paths, and q for quantile
	Quantile float64  // q for quantile (Args[1] parsed), 0 otherwise
	Pos      Pos      // position of the call text
}

// Output is one place results go. Kind says which of the other fields apply.
type Output struct {
	Kind   OutputKind
	Topic  string // mqtt
	QoS    int    // mqtt: 0 or 1 (default 1)
	Retain bool   // mqtt
	Path   string // file
}

// OutputKind is the kind of an output.
type OutputKind int

// Output kinds. OutputStderr is only valid for late_output and dead_letter.
const (
	OutputHub OutputKind = iota + 1
	OutputMQTT
	OutputFile
	OutputStdout
	OutputStderr
)

// String returns the kind as written in a spec.
func (k OutputKind) String() string {
	switch k {
	case OutputHub:
		return "hub"
	case OutputMQTT:
		return "mqtt"
	case OutputFile:
		return "file"
	case OutputStdout:
		return "stdout"
	case OutputStderr:
		return "stderr"
	}
	return "OutputKind(?)"
}
