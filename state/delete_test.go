package state_test

import (
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/state"
)

func TestDeleteBucket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := state.Open(path, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket("oplog/p")
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(func(tx *state.Tx) error { return tx.DeleteBucket("oplog/p") }); err != nil {
		t.Fatal(err)
	}
	if err := st.Update(func(tx *state.Tx) error { return tx.DeleteBucket("never") }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// The file verifies and the bucket reads empty.
	st, err = state.Open(path, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.View(func(tx *state.Tx) error {
		b, err := tx.Bucket("oplog/p")
		if err != nil {
			return err
		}
		if v, _ := b.Get([]byte("k")); v != nil || b.Len() != 0 {
			t.Errorf("deleted bucket holds %q, %d keys", v, b.Len())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
