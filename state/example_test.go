package state_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/runnel-io/runnel/state"
)

// A checkpoint writes its records into system buckets in one Update; a
// restart reads them back with View. Every value is checksummed, and Open
// verifies the whole file before using it.
func Example() {
	dir, err := os.MkdirTemp("", "state-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.db")

	s, err := state.Open(path, state.Options{})
	if err != nil {
		log.Fatal(err)
	}
	err = s.Update(func(tx *state.Tx) error {
		outbox, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		if err := outbox.Put([]byte("seq-000001"), []byte("partial for line-1")); err != nil {
			return err
		}
		ckpt, err := tx.Bucket("checkpoint")
		if err != nil {
			return err
		}
		return ckpt.Put([]byte("last"), []byte("id 1"))
	})
	if err != nil {
		log.Fatal(err)
	}
	s.Close()

	s, err = state.Open(path, state.Options{}) // verifies the file again
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	err = s.View(func(tx *state.Tx) error {
		outbox, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		fmt.Println("outbox entries:", outbox.Len())
		return outbox.ForEach(nil, func(k, v []byte) error {
			fmt.Printf("%s: %s\n", k, v)
			return nil
		})
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// outbox entries: 1
	// seq-000001: partial for line-1
}
