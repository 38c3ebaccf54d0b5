package state_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/runnel-io/runnel/state"
)

// A worker updates a running count per key; at a checkpoint barrier it
// hands its dirty state off and goes on, while the checkpoint writer
// commits the state together with an outbox entry.
func Example() {
	dir, err := os.MkdirTemp("", "state-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := state.Open(filepath.Join(dir, "edge.db"), state.Options{KeyGroups: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	counts, err := s.Namespace("window/line-temps")
	if err != nil {
		log.Fatal(err)
	}

	add := func(key string) {
		g := s.GroupOf(uint64(len(key))) // in runnel: xxhash(key)
		old, _, err := counts.Get(g, []byte(key))
		if err != nil {
			log.Fatal(err)
		}
		d := state.NewDecoder(old)
		n := d.Uvarint() // zero for a new key
		if err := counts.Put(g, []byte(key), state.AppendUvarint(nil, n+1)); err != nil {
			log.Fatal(err)
		}
	}
	add("line-1")
	add("line-1")

	// Barrier: hand off, keep processing, write elsewhere.
	h, err := s.BeginCommit()
	if err != nil {
		log.Fatal(err)
	}
	add("line-1") // belongs to the next checkpoint
	st, err := h.Write(func(tx *state.Tx) error {
		outbox, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		return outbox.Put([]byte("seq-000001"), []byte("partial for line-1"))
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed entries:", st.Puts)

	v, _, _ := counts.Get(s.GroupOf(6), []byte("line-1"))
	d := state.NewDecoder(v)
	fmt.Println("count in memory:", d.Uvarint())
	// Output:
	// committed entries: 1
	// count in memory: 3
}
