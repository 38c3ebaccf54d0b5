// Package prefetch asks the CPU to start loading memory that code is about
// to read, without waiting for it.
//
// A plain load that misses the caches holds up the instructions after it
// once the CPU's reorder window fills, so a loop that touches many scattered
// addresses has only a handful of misses in flight. A prefetch instruction
// retires at once: a run of them puts as many misses in flight as the memory
// system takes, and the work that follows overlaps with them. Lines issues
// one per address, in one call, so the call's cost is shared by the batch.
//
// Prefetching is a hint: it never faults, whatever the address, and never
// changes what a program computes. On architectures without an assembly
// version here (all but amd64, arm64 and arm) Lines does nothing.
package prefetch

// Lines starts loading into the caches the line holding each address. The
// addresses need not be valid; nothing is read from them by the program.
func Lines(addrs []uintptr) {
	if len(addrs) > 0 {
		lines(&addrs[0], len(addrs))
	}
}
