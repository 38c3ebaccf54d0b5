package prefetch

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// TestLinesNeverFaults prefetches addresses no program may read: nil, the
// top of the address space, a page just unmapped. A fault would kill the
// test binary.
func TestLinesNeverFaults(t *testing.T) {
	page, err := syscall.Mmap(-1, 0, syscall.Getpagesize(), syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	gone := uintptr(unsafe.Pointer(&page[0]))
	if err := syscall.Munmap(page); err != nil {
		t.Fatal(err)
	}
	x := 42
	Lines(nil)
	Lines([]uintptr{0, 1, ^uintptr(0), ^uintptr(0) >> 1, gone, uintptr(unsafe.Pointer(&x))})
	if x != 42 {
		t.Fatal("a prefetch changed memory")
	}
}

// BenchmarkScatteredLoads reads random words of a table far larger than
// the caches, 64 at a time, as the window operator reads its keys' state,
// with and without prefetching each batch's lines first. The ratio of the
// two is what prefetching buys on this machine.
func BenchmarkScatteredLoads(b *testing.B) {
	table := make([]uint64, 8<<20)               // 64 MiB
	next := rand.New(rand.NewPCG(1, 1)).Uint64() // a fresh random word per read
	for _, pf := range []bool{false, true} {
		name := "prefetch=no"
		if pf {
			name = "prefetch=yes"
		}
		b.Run(name, func(b *testing.B) {
			var addrs [64]uintptr
			var batch [64]int
			var sink uint64
			for b.Loop() {
				for k := range batch {
					next = next*6364136223846793005 + 1442695040888963407
					batch[k] = int(next >> 41) // 23 bits: len(table)
				}
				if pf {
					for k, i := range batch {
						addrs[k] = uintptr(unsafe.Pointer(&table[i]))
					}
					Lines(addrs[:])
				}
				for _, i := range batch {
					sink += table[i]
					sink *= 3 // a dependency chain, like per-record work
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/load")
			_ = sink
		})
	}
}
