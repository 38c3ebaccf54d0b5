package manifest

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

var (
	deploymentFields = []string{"kind", "name", "selector", "pipelines", "strategy"}
	refFields        = []string{"name", "revision"}
	strategyFields   = []string{"staged", "canary", "canary_percent", "batch", "batch_percent", "soak",
		"max_dead_letter_rate", "rollback_on_failure", "progress_deadline"}
)

// nameRE is the alphabet of deployment names, that of pipeline names:
// they appear in URLs, metric labels and messages.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

const maxNameLen = 64

// deployment decodes kind: Deployment.
func (d *decoder) deployment(root *yaml.Node) {
	m, ok := d.fields(root, "", deploymentFields)
	if !ok {
		return
	}
	before := len(d.probs) + d.dropped
	ds := &runnelv1.DeploymentSpec{}
	if e, ok := m["name"]; !ok {
		d.errorf(root, "", "missing name: the deployment's name (name: plant-7)")
	} else if s, ok := d.str(e.val, "name"); ok {
		switch {
		case len(s) > maxNameLen:
			d.errorf(e.val, "name", "%d characters long; at most %d are allowed", len(s), maxNameLen)
		case !nameRE.MatchString(s):
			d.errorf(e.val, "name", "%q is not a valid name: use lower-case letters, digits, _ and -, starting with a letter or digit (e.g. plant-7)", s)
		}
		ds.Name = s
	}
	if e, ok := m["selector"]; ok && !isNull(e.val) {
		if e.val.Kind == yaml.ScalarNode && strings.HasPrefix(e.val.ShortTag(), "!") && !strings.HasPrefix(e.val.ShortTag(), "!!") {
			d.errorf(e.val, "selector", "%s%s is read by YAML as a tag; quote the selector: selector: \"%s %s\"", e.val.ShortTag(), spaceBefore(e.val.Value), e.val.ShortTag(), e.val.Value)
		} else if s, ok := d.str(e.val, "selector"); ok {
			ds.Selector = s
		}
	}
	if e, ok := m["pipelines"]; !ok {
		d.errorf(root, "", "missing pipelines: the pipeline revisions to run (pipelines: [{name: line-temps, revision: 2}])")
	} else {
		ds.Pipelines = d.refs(e.val)
	}
	if e, ok := m["strategy"]; ok && !isNull(e.val) {
		ds.Strategy = d.strategy(e.val)
	}
	if len(d.probs)+d.dropped > before {
		return
	}
	d.m.Deployments = append(d.m.Deployments, &Deployment{File: d.file, Pos: pos(root), Spec: ds})
}

func spaceBefore(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

// refs decodes pipelines: a list of {name, revision}.
func (d *decoder) refs(n *yaml.Node) []*runnelv1.PipelineRef {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "pipelines", "expected a list of {name, revision}, got %s", kindName(n))
		return nil
	}
	out := []*runnelv1.PipelineRef{}
	first := map[string]int{}
	for i, item := range n.Content {
		item = resolve(item)
		field := fmt.Sprintf("pipelines[%d]", i)
		m, ok := d.fields(item, field, refFields)
		if !ok {
			continue
		}
		ref := &runnelv1.PipelineRef{}
		e, ok := m["name"]
		if !ok {
			d.errorf(item, field, "missing name: the pipeline's name")
			continue
		}
		if s, ok := d.str(e.val, field+".name"); ok {
			if s == "" {
				d.errorf(e.val, field+".name", "empty; name a pipeline")
			} else if line, dup := first[s]; dup {
				d.errorf(e.val, field+".name", "pipeline %s is listed twice (first at line %d); a deployment runs one revision of each", s, line)
			}
			first[s] = e.val.Line
			ref.Name = s
		}
		if e, ok := m["revision"]; ok && !isNull(e.val) {
			if v, ok := d.uint(e.val, field+".revision", math.MaxUint32); ok {
				if v == 0 {
					d.errorf(e.val, field+".revision", "revisions count from 1; leave revision out for the latest")
				}
				ref.Revision = uint32(v)
			}
		}
		out = append(out, ref)
	}
	return out
}

// strategy decodes strategy: and checks the fields that go together.
func (d *decoder) strategy(n *yaml.Node) *runnelv1.Strategy {
	m, ok := d.fields(n, "strategy", strategyFields)
	if !ok {
		return nil
	}
	s := &runnelv1.Strategy{}
	set := map[string]*yaml.Node{}
	for name, e := range m {
		if isNull(e.val) {
			continue
		}
		set[name] = e.key
		f := "strategy." + name
		switch name {
		case "staged":
			s.Staged, _ = d.bool(e.val, f)
		case "rollback_on_failure":
			s.RollbackOnFailure, _ = d.bool(e.val, f)
		case "canary":
			s.Canary = d.uint32(e.val, f, math.MaxUint32)
		case "batch":
			s.Batch = d.uint32(e.val, f, math.MaxUint32)
		case "canary_percent":
			s.CanaryPercent = d.percent(e.val, f)
		case "batch_percent":
			s.BatchPercent = d.percent(e.val, f)
		case "soak":
			s.SoakMs = d.duration(e.val, f)
		case "progress_deadline":
			s.ProgressDeadlineMs = d.duration(e.val, f)
		case "max_dead_letter_rate":
			if v, ok := d.float(e.val, f); ok {
				if v < 0 || v > 1 || v != v {
					d.errorf(e.val, f, "%s is not a fraction between 0 and 1 (0.05 is 5%% of the records)", e.val.Value)
				}
				s.MaxDeadLetterRate = v
			}
		}
	}
	for _, pair := range [][2]string{{"canary", "canary_percent"}, {"batch", "batch_percent"}} {
		if set[pair[0]] != nil && set[pair[1]] != nil {
			d.errorf(set[pair[1]], "strategy."+pair[1], "%s and %s are both set; give a count or a percentage", pair[0], pair[1])
		}
	}
	if !s.Staged {
		for _, name := range []string{"canary", "canary_percent", "batch", "batch_percent"} {
			if k := set[name]; k != nil {
				d.errorf(k, "strategy."+name, "applies to a staged rollout only; add staged: true (without it, every edge gets the deployment at once)")
			}
		}
	}
	return s
}

// Scalar decoders: each reports a value of the wrong type, with what was
// expected, and returns ok false.

func (d *decoder) str(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) || n.ShortTag() != "!!str" {
		d.errorf(n, field, "expected a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) bool(n *yaml.Node, field string) (bool, bool) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.errorf(n, field, "expected true or false, got %s", kindName(n))
		return false, false
	}
	return v, true
}

func (d *decoder) uint(n *yaml.Node, field string, limit uint64) (uint64, bool) {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.errorf(n, field, "expected a whole number, 0 or more, got %s", kindName(n))
		return 0, false
	}
	if v > limit {
		d.errorf(n, field, "%s is too large (at most %d)", n.Value, limit)
		return 0, false
	}
	return v, true
}

func (d *decoder) uint32(n *yaml.Node, field string, limit uint64) uint32 {
	v, _ := d.uint(n, field, limit)
	return uint32(v)
}

func (d *decoder) percent(n *yaml.Node, field string) uint32 {
	v, ok := d.uint(n, field, math.MaxUint32)
	if ok && (v < 1 || v > 100) {
		d.errorf(n, field, "%d is not a percentage from 1 to 100", v)
	}
	return uint32(v)
}

func (d *decoder) float(n *yaml.Node, field string) (float64, bool) {
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") || n.Decode(&v) != nil {
		d.errorf(n, field, "expected a number, got %s", kindName(n))
		return 0, false
	}
	return v, true
}

// duration decodes a duration (30s, 10m, 1h30m, 2d) into milliseconds.
func (d *decoder) duration(n *yaml.Node, field string) int64 {
	if n.Kind != yaml.ScalarNode || isNull(n) || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		d.errorf(n, field, "expected a duration such as 30s or 10m, got %s", kindName(n))
		return 0
	}
	v, err := spec.ParseDuration(n.Value)
	switch {
	case err != nil:
		d.errorf(n, field, "%v", err)
	case v < 0:
		d.errorf(n, field, "%s is negative", n.Value)
	}
	return int64(v)
}
