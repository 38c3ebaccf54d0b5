package faultfs_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, fsys *faultfs.FS, name string) ingestlog.File {
	t.Helper()
	f, err := fsys.Create(name)
	must(t, err)
	return f
}

func write(t *testing.T, f ingestlog.File, s string, off int64) {
	t.Helper()
	_, err := f.WriteAt([]byte(s), off)
	must(t, err)
}

// setup makes /d/f holding "synced" durably, then "+more" and "+tail"
// written in two unsynced writes.
func setup(t *testing.T, seed uint64) (*faultfs.FS, ingestlog.File) {
	fsys := faultfs.New(seed)
	must(t, fsys.MkdirAll("/d"))
	f := create(t, fsys, "/d/f")
	write(t, f, "synced", 0)
	must(t, f.Sync())
	must(t, fsys.SyncDir("/d"))
	write(t, f, "+more", 6)
	write(t, f, "+tail", 11)
	return fsys, f
}

func TestCrashModes(t *testing.T) {
	const all = "synced+more+tail"
	tests := []struct {
		mode faultfs.CrashMode
		ok   func(got []byte) bool // one run's result is allowed
		seen func(got []byte) bool // some run must give such a result
	}{
		{faultfs.DropUnsynced,
			func(got []byte) bool { return string(got) == "synced" },
			func(got []byte) bool { return true }},
		{faultfs.TearUnsynced,
			func(got []byte) bool { return len(got) >= 6 && bytes.HasPrefix([]byte(all), got) },
			func(got []byte) bool { return len(got) > 6 && len(got) < len(all) && len(got) != 11 }},
		{faultfs.TearUnsyncedZeros,
			func(got []byte) bool {
				// A prefix of the writes, then zeros to the end of the torn one.
				i := len(bytes.TrimRight(got, "\x00"))
				return len(got) >= 6 && bytes.HasPrefix([]byte(all), got[:i]) && (len(got) == 6 || len(got) == 11 || len(got) == 16)
			},
			func(got []byte) bool { return got[len(got)-1] == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			seen := false
			for seed := range uint64(64) {
				fsys, _ := setup(t, seed)
				fsys.Crash(tt.mode)
				fsys.Reboot()
				got, err := fsys.ReadFile("/d/f")
				must(t, err)
				if !tt.ok(got) {
					t.Fatalf("seed %d: after power loss %q", seed, got)
				}
				seen = seen || tt.seen(got)
			}
			if !seen {
				t.Errorf("no seed showed the mode's effect")
			}
		})
	}
}

func TestDirectoryChanges(t *testing.T) {
	for _, keep := range []bool{false, true} {
		fsys := faultfs.New(1)
		must(t, fsys.MkdirAll("/d"))
		a := create(t, fsys, "/d/a")
		write(t, a, "a", 0)
		must(t, a.Sync())
		must(t, fsys.SyncDir("/d"))
		b := create(t, fsys, "/d/b.tmp") // data synced, entry not
		write(t, b, "b", 0)
		must(t, b.Sync())
		must(t, fsys.Rename("/d/b.tmp", "/d/b"))
		must(t, fsys.Remove("/d/a"))
		mode := faultfs.DropUnsynced
		want := []string{"a"}
		if keep {
			mode |= faultfs.KeepDirChanges
			want = []string{"b"}
		}
		fsys.Crash(mode)
		fsys.Reboot()
		names, err := fsys.ReadDir("/d")
		must(t, err)
		if !slices.Equal(names, want) {
			t.Errorf("%v: entries after power loss %q, want %q", mode, names, want)
		}
	}
}

func TestCrashAfter(t *testing.T) {
	fsys, f := setup(t, 1)
	before := fsys.Mutations()
	fsys.CrashAfter(2, faultfs.DropUnsynced)
	write(t, f, "x", 16) // 1st
	if _, err := f.WriteAt([]byte("y"), 17); !errors.Is(err, faultfs.ErrCrashed) {
		t.Fatalf("2nd mutation: %v, want ErrCrashed", err)
	}
	if !fsys.Crashed() || fsys.Mutations() != before+2 {
		t.Fatalf("crashed %v after %d mutations", fsys.Crashed(), fsys.Mutations()-before)
	}
	if _, err := fsys.ReadDir("/d"); !errors.Is(err, faultfs.ErrCrashed) {
		t.Errorf("ReadDir after the crash: %v, want ErrCrashed", err)
	}
	fsys.Reboot()
	if err := f.Sync(); !errors.Is(err, faultfs.ErrCrashed) {
		t.Errorf("file from before the reboot: %v, want ErrCrashed", err)
	}
	g, err := fsys.OpenReadWrite("/d/f")
	must(t, err)
	write(t, g, "!", 6)
	must(t, g.Sync())
	got, _ := fsys.ReadFile("/d/f")
	if string(got) != "synced!" {
		t.Errorf("after reboot: %q", got)
	}
}

func TestInjector(t *testing.T) {
	fsys, f := setup(t, 9)
	boom := errors.New("EIO")
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		if op == faultfs.OpWrite || op == faultfs.OpRename {
			return boom
		}
		return nil
	})
	n, err := f.WriteAt([]byte("0123456789"), 16)
	if !errors.Is(err, boom) || n >= 10 {
		t.Fatalf("injected write: %d, %v; want a short write and the error", n, err)
	}
	if got, _ := fsys.ReadFile("/d/f"); len(got) != 16+n {
		t.Errorf("short write of %d landed %d bytes", n, len(got)-16)
	}
	if err := fsys.Rename("/d/f", "/d/g"); !errors.Is(err, boom) {
		t.Errorf("injected rename: %v", err)
	}
	fsys.SetInjector(nil)
	must(t, fsys.Rename("/d/f", "/d/g"))
}

func TestLock(t *testing.T) {
	fsys := faultfs.New(1)
	l, err := fsys.Lock("/d/LOCK")
	must(t, err)
	if _, err := fsys.Lock("/d/LOCK"); !errors.Is(err, ingestlog.ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	must(t, l.Close())
	l, err = fsys.Lock("/d/LOCK")
	must(t, err)
	fsys.Reboot() // a dead process holds no locks
	_, err = fsys.Lock("/d/LOCK")
	must(t, err)
	_ = l
}
