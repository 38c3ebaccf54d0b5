package pageout

import (
	"os"
	"reflect"
	"testing"

	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/internal/testproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test binary's text and rodata that the test run touched leave the
// process's resident set. (The pages the test touches again after the
// advice come back: the bound leaves room for them.)
func TestExecutable(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Skip(err)
	}
	before := testproc.MappedKiB(t, exe)
	if before < 1024 {
		t.Fatalf("%d KiB of the test binary resident before: want the pages start-up touched", before)
	}
	advised, err := Executable()
	if err != nil {
		t.Fatal(err)
	}
	after := testproc.MappedKiB(t, exe)
	t.Logf("resident %d KiB before, %d KiB after (advised %d KiB)", before, after, advised>>10)
	if advised < int64(before)<<10 {
		t.Errorf("advised %d bytes, less than the %d KiB resident", advised, before)
	}
	if after > before/2 {
		t.Errorf("resident %d KiB after the advice, %d KiB before: want less than half", after, before)
	}
}

func TestReadOnly(t *testing.T) {
	const exe = "/opt/run nel/bin"
	maps := "00400000-00a00000 r-xp 00000000 fd:00 1234 /opt/run nel/bin\n" +
		"00a00000-00f00000 r--p 00600000 fd:00 1234 /opt/run nel/bin\n" +
		"00f00000-00f40000 rw-p 00b00000 fd:00 1234 /opt/run nel/bin\n" +
		"00f40000-00f80000 rw-p 00000000 00:00 0 \n" +
		"7f0000000000-7f0000100000 r--s 00000000 fd:00 99 /var/lib/runnel/state.db\n" +
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
	got, err := readOnly([]byte(maps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := []addrRange{{0x400000, 0xa00000}, {0xa00000, 0xf00000}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("readOnly = %x, want %x", got, want)
	}
	if _, err := readOnly([]byte("zz-00a00000 r-xp 0 fd:00 1 /opt/run nel/bin\n"), exe); err == nil {
		t.Error("a bad address range was taken")
	}
}
