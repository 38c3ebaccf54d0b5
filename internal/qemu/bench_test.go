package qemu_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/internal/qemu"
)

// BenchmarkReplay runs `runnel-edge replay` of examples/line-temps.yaml
// over 100,000 generated readings (50 devices, one-minute windows), once
// natively and once per ARM target under qemu-user: the README's
// "records/s under qemu" figures. The startup of the process (under
// qemu, about 0.2 s) is inside each op.
//
//	flock /tmp/runnel-bench.lock go test -run '^$' -bench Replay -benchtime 3x ./internal/qemu
func BenchmarkReplay(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	f, err := os.Create(input)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	base := int64(1_767_225_600_000)
	for i := range n {
		fmt.Fprintf(w, `{"device":"press-%02d","site":"north","ts":%d,"temp":%.2f}`+"\n", i%50, base+int64(i)*20, 20+float64(i%97)/10)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	args := []string{"replay", "--pipeline", "../../examples/line-temps.yaml", "--input", input, "--output", os.DevNull, "--quiet"}
	run := func(b *testing.B, cmd func() *exec.Cmd) {
		for b.Loop() {
			if out, err := cmd().CombinedOutput(); err != nil {
				b.Fatalf("replay: %v\n%s", err, out)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("arch=native", func(b *testing.B) {
		bin := filepath.Join(b.TempDir(), "runnel-edge")
		if out, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../../cmd/runnel-edge").CombinedOutput(); err != nil {
			b.Fatalf("build: %v\n%s", err, out)
		}
		run(b, func() *exec.Cmd { return exec.Command(bin, args...) })
	})
	for _, a := range qemu.Arches {
		b.Run("arch="+a.Name, func(b *testing.B) {
			emu := a.Need(b)
			bin := qemu.Build(b, a, b.TempDir(), "../../cmd/runnel-edge")
			run(b, func() *exec.Cmd { return qemu.Command(emu, bin, args...) })
		})
	}
}
