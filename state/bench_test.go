package state_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// BenchmarkOpen opens a file of 10^6 records (16-byte keys, 24-byte
// values) with each verification mode: VerifyFull reads and checks every
// page and record, VerifyQuick only the meta pages and the freelist.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "open.db")
	s := openT(b, path, testOpts(128))
	const n, batch = 1_000_000, 200_000
	for lo := 0; lo < n; lo += batch {
		err := s.Update(func(tx *state.Tx) error {
			bk, err := tx.Bucket("bench")
			if err != nil {
				return err
			}
			var key []byte
			for i := lo; i < lo+batch; i++ {
				// Like a device id and a window end.
				key = binary.BigEndian.AppendUint32(append(key[:0], "dev-"...), uint32(i))
				key = binary.BigEndian.AppendUint64(key, 1767225600000)
				if err := bk.Put(key, make([]byte, 24)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	for _, v := range []state.Verify{state.VerifyFull, state.VerifyQuick} {
		b.Run(fmt.Sprintf("keys=1e6/verify=%s", v), func(b *testing.B) {
			o := testOpts(128)
			o.Verify = v
			for b.Loop() {
				s := openT(b, path, o)
				s.Close()
			}
		})
	}
}
