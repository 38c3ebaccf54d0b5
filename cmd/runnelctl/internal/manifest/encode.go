package manifest

import (
	"bytes"
	"strconv"

	yaml "go.yaml.in/yaml/v4"

	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Encode writes m as a manifest that Decode reads back to the same
// pipelines and deployments: pipelines as kind: Pipeline documents (their
// specs as YAML, comments dropped), then deployments, with fields at
// their zero value left out.
func (m *Manifest) Encode() ([]byte, error) {
	var b bytes.Buffer
	for _, p := range m.Pipelines {
		doc := mapping("kind", scalar(KindPipeline), "spec", copyNode(p.node))
		if err := encodeDoc(&b, doc); err != nil {
			return nil, err
		}
	}
	for _, dep := range m.Deployments {
		if err := encodeDoc(&b, DeploymentNode(dep.Spec)); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

func encodeDoc(b *bytes.Buffer, n *yaml.Node) error {
	b.WriteString("---\n")
	out, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	b.Write(out)
	return nil
}

// DeploymentNode renders s as the YAML mapping of a kind: Deployment
// document, fields at their zero value left out, durations written as
// durations.
func DeploymentNode(s *runnelv1.DeploymentSpec) *yaml.Node {
	n := mapping("kind", scalar(KindDeployment), "name", str(s.GetName()))
	if s.GetSelector() != "" {
		n.Content = append(n.Content, scalar("selector"), str(s.GetSelector()))
	}
	refs := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, r := range s.GetPipelines() {
		ref := mapping("name", str(r.GetName()))
		if r.GetRevision() != 0 {
			ref.Content = append(ref.Content, scalar("revision"), num(uint64(r.GetRevision())))
		}
		refs.Content = append(refs.Content, ref)
	}
	n.Content = append(n.Content, scalar("pipelines"), refs)
	if st := s.GetStrategy(); st != nil {
		sn := mapping()
		add := func(name string, v *yaml.Node) { sn.Content = append(sn.Content, scalar(name), v) }
		if st.Staged {
			add("staged", boolean(true))
		}
		for _, f := range []struct {
			name string
			v    uint32
		}{{"canary", st.Canary}, {"canary_percent", st.CanaryPercent}, {"batch", st.Batch}, {"batch_percent", st.BatchPercent}} {
			if f.v != 0 {
				add(f.name, num(uint64(f.v)))
			}
		}
		if st.SoakMs != 0 {
			add("soak", scalar(spec.Duration(st.SoakMs).String()))
		}
		if st.MaxDeadLetterRate != 0 {
			add("max_dead_letter_rate", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(st.MaxDeadLetterRate, 'g', -1, 64)})
		}
		if st.RollbackOnFailure {
			add("rollback_on_failure", boolean(true))
		}
		if st.ProgressDeadlineMs != 0 {
			add("progress_deadline", scalar(spec.Duration(st.ProgressDeadlineMs).String()))
		}
		n.Content = append(n.Content, scalar("strategy"), sn)
	}
	return n
}

func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Content = append(n.Content, scalar(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// str is a string value, quoted by the encoder when YAML would read it
// as something else (a number, a bool, a tag).
func str(s string) *yaml.Node { return scalar(s) }

func num(v uint64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(v, 10)}
}

func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// copyNode copies the tree n without comments and positions, so that the
// encoder lays it out afresh. Aliases keep pointing into the copy.
func copyNode(n *yaml.Node) *yaml.Node {
	seen := map[*yaml.Node]*yaml.Node{}
	var walk func(n *yaml.Node, depth int) *yaml.Node
	walk = func(n *yaml.Node, depth int) *yaml.Node {
		if c, ok := seen[n]; ok {
			return c
		}
		c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.ShortTag(), Value: n.Value, Anchor: n.Anchor}
		if c.Tag == "!!null" && c.Value == "" {
			// The encoder writes an empty null ({a, b} in flow, or a
			// key with no value) as '', a string.
			c.Value = "null"
		}
		seen[n] = c
		if depth > 10000 {
			return c
		}
		for _, k := range n.Content {
			c.Content = append(c.Content, walk(k, depth+1))
		}
		if n.Alias != nil {
			c.Alias = walk(n.Alias, depth+1)
		}
		return c
	}
	return walk(n, 0)
}
