package state_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/state"
)

// The model: per (namespace, group) a map from key to value, once for what
// the program sees (current) and once for what is on disk (committed).
type mkey struct {
	ns    string
	group int
}

type model map[mkey]map[string]string

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = maps.Clone(v)
	}
	return c
}

func (m model) set(k mkey, key string, val *string) {
	if m[k] == nil {
		m[k] = map[string]string{}
	}
	if val == nil {
		delete(m[k], key)
	} else {
		m[k][key] = *val
	}
}

// diff returns the changes that turn from into to.
func diff(from, to model) map[mkey]map[string]*string {
	d := map[mkey]map[string]*string{}
	add := func(k mkey, key string, v *string) {
		if d[k] == nil {
			d[k] = map[string]*string{}
		}
		d[k][key] = v
	}
	for k, kv := range to {
		for key, v := range kv {
			if old, ok := from[k][key]; !ok || old != v {
				add(k, key, &v)
			}
		}
	}
	for k, kv := range from {
		for key := range kv {
			if _, ok := to[k][key]; !ok {
				add(k, key, nil)
			}
		}
	}
	return d
}

const (
	modelGroups = 4
)

var modelNS = []string{"window/a", "window/b"}

// storeUnderTest is one Store and its file; the model test drives two in
// lockstep, one with a cache large enough for everything and one with a
// one-byte budget, which evicts every clean entry at once and so sends
// every Get of a committed key to the file.
type storeUnderTest struct {
	name  string
	path  string
	opts  state.Options
	s     *state.Store
	ns    map[string]*state.Namespace
	hoff  *state.Handoff
	trail []string
}

func (u *storeUnderTest) open(t *rapid.T) {
	s, err := state.Open(u.path, u.opts)
	if err != nil {
		t.Fatalf("%s: Open: %v", u.name, err)
	}
	u.s = s
	u.ns = map[string]*state.Namespace{}
	for _, n := range modelNS {
		if u.ns[n], err = s.Namespace(n); err != nil {
			t.Fatal(err)
		}
	}
}

type modelMachine struct {
	stores    []*storeUnderTest
	current   model
	committed model
	pending   map[mkey]map[string]*string // the diff a handoff holds
	hasHoff   bool
}

func TestModel(t *testing.T) {
	dir := t.TempDir()
	iter := 0
	rapid.Check(t, func(t *rapid.T) {
		iter++
		m := &modelMachine{current: model{}, committed: model{}}
		for _, c := range []struct {
			name  string
			cache int64
		}{{"big", 1 << 30}, {"tiny", 1}} {
			u := &storeUnderTest{
				name: c.name,
				path: filepath.Join(dir, fmt.Sprintf("%d-%s.db", iter, c.name)),
				opts: state.Options{NoSync: true, KeyGroups: modelGroups, CacheBytes: c.cache},
			}
			u.open(t)
			m.stores = append(m.stores, u)
		}
		defer func() {
			for _, u := range m.stores {
				u.s.Close()
				os.Remove(u.path)
			}
		}()
		t.Repeat(map[string]func(*rapid.T){
			"put":          m.put,
			"delete":       m.delete,
			"deletePrefix": m.deletePrefix,
			"get":          m.get,
			"scan":         m.scan,
			"commit":       m.commit,
			"failCommit":   m.failCommit,
			"begin":        m.begin,
			"write":        m.write,
			"failWrite":    m.failWrite,
			"abort":        m.abort,
			"crashReopen":  m.crashReopen,
			"":             m.checkAll,
		})
	})
}

var (
	genKey   = rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.ByteRange('a', 'c'), 1, 3).Draw(t, "key")) })
	genValue = rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(t, "value")) })
	genNS    = rapid.SampledFrom(modelNS)
	genGroup = rapid.IntRange(0, modelGroups-1)
)

func (m *modelMachine) put(t *rapid.T) {
	k := mkey{genNS.Draw(t, "ns"), genGroup.Draw(t, "group")}
	key, val := genKey.Draw(t, "key"), genValue.Draw(t, "value")
	for _, u := range m.stores {
		// A fresh slice each time: Put takes ownership.
		if err := u.ns[k.ns].Put(k.group, []byte(key), []byte(val)); err != nil {
			t.Fatalf("%s: Put: %v", u.name, err)
		}
	}
	m.current.set(k, key, &val)
}

func (m *modelMachine) delete(t *rapid.T) {
	k := mkey{genNS.Draw(t, "ns"), genGroup.Draw(t, "group")}
	key := genKey.Draw(t, "key")
	for _, u := range m.stores {
		if err := u.ns[k.ns].Delete(k.group, []byte(key)); err != nil {
			t.Fatalf("%s: Delete: %v", u.name, err)
		}
	}
	m.current.set(k, key, nil)
}

func (m *modelMachine) deletePrefix(t *rapid.T) {
	k := mkey{genNS.Draw(t, "ns"), genGroup.Draw(t, "group")}
	prefix := string(rapid.SliceOfN(rapid.ByteRange('a', 'c'), 0, 2).Draw(t, "prefix"))
	want := len(sortedKV(m.current[k], prefix))
	for _, u := range m.stores {
		got, err := u.ns[k.ns].DeletePrefix(k.group, []byte(prefix))
		if err != nil || got != want {
			t.Fatalf("%s: DeletePrefix(%q) = %d, %v; model %d", u.name, prefix, got, err, want)
		}
	}
	for _, e := range sortedKV(m.current[k], prefix) {
		m.current.set(k, e.k, nil)
	}
}

func (m *modelMachine) get(t *rapid.T) {
	k := mkey{genNS.Draw(t, "ns"), genGroup.Draw(t, "group")}
	key := genKey.Draw(t, "key")
	want, wantOK := m.current[k][key]
	for _, u := range m.stores {
		v, ok, err := u.ns[k.ns].Get(k.group, []byte(key))
		if err != nil {
			t.Fatalf("%s: Get: %v", u.name, err)
		}
		if ok != wantOK || string(v) != want {
			t.Fatalf("%s: Get(%s, %d, %q) = %q, %v; model %q, %v", u.name, k.ns, k.group, key, v, ok, want, wantOK)
		}
	}
}

func (m *modelMachine) scan(t *rapid.T) {
	k := mkey{genNS.Draw(t, "ns"), genGroup.Draw(t, "group")}
	prefix := string(rapid.SliceOfN(rapid.ByteRange('a', 'c'), 0, 2).Draw(t, "prefix"))
	m.checkScan(t, k, prefix)
}

func (m *modelMachine) checkScan(t *rapid.T, k mkey, prefix string) {
	want := sortedKV(m.current[k], prefix)
	for _, u := range m.stores {
		got := scanAll(t, u.ns[k.ns], k.group, []byte(prefix))
		if !slices.Equal(got, want) {
			t.Fatalf("%s: ScanPrefix(%s, %d, %q) = %q; model %q", u.name, k.ns, k.group, prefix, got, want)
		}
	}
}

func (m *modelMachine) checkAll(t *rapid.T) {
	for _, ns := range modelNS {
		for g := range modelGroups {
			m.checkScan(t, mkey{ns, g}, "")
		}
	}
}

func (m *modelMachine) commit(t *rapid.T) {
	if m.hasHoff && len(m.pending) == 0 {
		// Whether the stores' handoffs hold anything then depends on
		// deletes of keys known (or not) to be absent, which depends on
		// what each cache still holds: both answers are right.
		t.Skip("handoff pending with no visible changes")
	}
	var errs []error
	for _, u := range m.stores {
		_, err := u.s.Commit(nil)
		errs = append(errs, err)
	}
	if (errs[0] == nil) != (errs[1] == nil) {
		t.Fatalf("stores disagree on Commit: %v / %v", errs[0], errs[1])
	}
	switch {
	case errs[0] == nil:
		if m.hasHoff && len(m.pending) > 0 {
			t.Fatalf("Commit succeeded while a handoff holds %d changed groups", len(m.pending))
		}
		m.committed = m.current.clone()
	case m.hasHoff && errors.Is(errs[0], state.ErrInFlight):
	default:
		t.Fatalf("Commit: %v", errs[0])
	}
}

var errInjected = errors.New("injected failure")

func (m *modelMachine) failCommit(t *rapid.T) {
	for _, u := range m.stores {
		_, err := u.s.Commit(func(tx *state.Tx) error {
			b, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			if err := b.Put([]byte("never"), []byte("committed")); err != nil {
				return err
			}
			return errInjected
		})
		if !errors.Is(err, errInjected) && !(m.hasHoff && errors.Is(err, state.ErrInFlight)) {
			t.Fatalf("%s: failing Commit: %v", u.name, err)
		}
	}
}

func (m *modelMachine) begin(t *rapid.T) {
	if m.hasHoff {
		t.Skip("a handoff is pending")
	}
	for _, u := range m.stores {
		h, err := u.s.BeginCommit()
		if err != nil {
			t.Fatalf("%s: BeginCommit: %v", u.name, err)
		}
		u.hoff = h
	}
	m.pending = diff(m.committed, m.current)
	m.hasHoff = true
}

func (m *modelMachine) finishHoff(t *rapid.T, how string) {
	if !m.hasHoff {
		t.Skip("no handoff")
	}
	for _, u := range m.stores {
		var err error
		switch how {
		case "write":
			_, err = u.hoff.Write(nil)
		case "fail":
			_, err = u.hoff.Write(func(*state.Tx) error { return errInjected })
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s: failing Write: %v", u.name, err)
			}
			err = nil
		case "abort":
			u.hoff.Abort()
		}
		if err != nil {
			t.Fatalf("%s: Write: %v", u.name, err)
		}
		if _, err := u.hoff.Write(nil); !errors.Is(err, state.ErrHandoffDone) {
			t.Fatalf("%s: second Write: %v, want ErrHandoffDone", u.name, err)
		}
		u.hoff = nil
	}
	if how == "write" {
		for k, kv := range m.pending {
			for key, v := range kv {
				m.committed.set(k, key, v)
			}
		}
	}
	m.pending, m.hasHoff = nil, false
}

func (m *modelMachine) write(t *rapid.T)     { m.finishHoff(t, "write") }
func (m *modelMachine) failWrite(t *rapid.T) { m.finishHoff(t, "fail") }
func (m *modelMachine) abort(t *rapid.T)     { m.finishHoff(t, "abort") }

// crashReopen closes the stores without committing (what a crash loses)
// and opens them again, with full verification.
func (m *modelMachine) crashReopen(t *rapid.T) {
	for _, u := range m.stores {
		if err := u.s.Close(); err != nil {
			t.Fatalf("%s: Close: %v", u.name, err)
		}
		u.hoff = nil
		u.open(t)
		// The failed commits' outbox entry must not be there.
		err := u.s.View(func(tx *state.Tx) error {
			b, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			if v, err := b.Get([]byte("never")); err != nil || v != nil {
				t.Fatalf("%s: outbox/never = %q, %v after failed commits", u.name, v, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	m.current = m.committed.clone()
	m.pending, m.hasHoff = nil, false
	m.checkAll(t)
}
