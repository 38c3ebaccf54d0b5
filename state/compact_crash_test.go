package state_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnel-io/runnel/state"
)

// compactEnv, set only in the child, names the file the child opens with
// CompactFree; the parent kills it with SIGKILL somewhere in the copy.
const compactEnv = "RUNNEL_STATE_COMPACT_CRASH"

// compactChild is the child's main: it opens the file, which compacts it,
// saying "copying" as the copy starts and "done" once open, and waits to
// be killed. It returns false in a
// normal test run.
func compactChild() bool {
	path := os.Getenv(compactEnv)
	if path == "" {
		return false
	}
	state.SetCompactCopying(func() { fmt.Println("copying") })
	s, err := state.Open(path, state.Options{KeyGroups: 4, CompactFree: 0.5})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("done", s.Compaction().Before > 0)
	select {}
}

// TestCompactCrash: a process killed (SIGKILL) at a random point of the
// compaction at Open leaves a file that opens verified with every entry,
// whether the kill came before the rename (the old file, and the copy's
// remains, which the next Open removes) or after it (the compacted one).
func TestCompactCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 12 processes")
	}
	const n, size, keep = 100000, 200, 10
	orig := filepath.Join(t.TempDir(), "orig.db")
	fillAndEmpty(t, orig, n, size, keep)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var before, after int
	var took time.Duration
	for i := range 12 {
		path := filepath.Join(t.TempDir(), "state.db")
		copyFile(t, orig, path)
		child := exec.Command(exe, "-test.run=^$")
		child.Env = append(os.Environ(), compactEnv+"="+path)
		child.Stderr = os.Stderr
		out, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "copying" {
			child.Process.Kill()
			child.Wait()
			t.Fatalf("child %d said %q, want copying", i, sc.Text())
		}
		if i == 0 {
			// The first child runs to the end: how long the copy, the
			// rename and the reopen take here.
			began := time.Now()
			if !sc.Scan() || sc.Text() != "done true" {
				t.Fatalf("child said %q, want done true", sc.Text())
			}
			took = time.Since(began)
		} else {
			// Anywhere from the copy's start to a bit past the reopen.
			time.Sleep(time.Duration(rng.Int64N(int64(took) * 5 / 4)))
		}
		child.Process.Kill()
		child.Wait()

		if _, err := os.Stat(path + ".compact"); err == nil {
			before++
		} else {
			after++
		}
		s := openT(t, path, state.Options{KeyGroups: 4, CompactFree: 0.5})
		if c := s.Compaction(); c.Err != nil {
			t.Errorf("kill %d: the next Open's compaction: %v", i, c.Err)
		}
		got := 0
		if err := s.View(func(tx *state.Tx) error {
			b, err := tx.Bucket("out")
			if err != nil {
				return err
			}
			return b.ForEach(nil, func(k, v []byte) error {
				if i := binary.BigEndian.Uint64(k); i%keep != 0 || binary.BigEndian.Uint64(v) != i {
					return fmt.Errorf("entry %d: %x", i, v[:8])
				}
				got++
				return nil
			})
		}); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		s.Close()
		if got != n/keep {
			t.Fatalf("kill %d: %d entries, want %d", i, got, n/keep)
		}
		if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
			t.Fatalf("kill %d: the copy's remains are still there after an Open: %v", i, err)
		}
	}
	t.Logf("a compaction to the end in %v; 11 kills within it: %d with the copy's remains left (killed before the rename), %d without (one ran to the end)", took, before, after-1)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
