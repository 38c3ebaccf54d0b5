package objstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/internal/tests3"
)

// BenchmarkPutFile uploads a 256 MiB file to a local versitygw (loopback,
// its posix backend on this machine's disk) with the default part size;
// MB/s is the figure. conc is Config.Concurrency.
//
//	flock /tmp/runnel-bench.lock go test -run '^$' -bench PutFile -benchtime 3x ./sync/objstore
func BenchmarkPutFile(b *testing.B) {
	srv := tests3.Start(b)
	const size = 256 << 20
	path := filepath.Join(b.TempDir(), "snapshot")
	if err := os.WriteFile(path, randBytes(20, size), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, conc := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("size=256MiB/conc=%d", conc), func(b *testing.B) {
			cfg := testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/bench")
			cfg.PartSize, cfg.Concurrency = 0, conc // the default 16 MiB parts
			bk, err := Open(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer bk.Close()
			b.SetBytes(size)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := fmt.Sprintf("conc%d/%d", conc, i)
				i++
				if err := bk.PutFile(context.Background(), key, path); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := bk.Delete(context.Background(), key); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
