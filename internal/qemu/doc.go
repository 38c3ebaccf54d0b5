// Package qemu runs runnel-edge as built for the ARM gateways it ships to
// (linux/arm64, and linux/arm with GOARM=7) on this amd64 machine, under
// qemu-user, so that the binaries `make release` ships are tested as
// binaries: a replay against the golden results, a live run on the
// embedded broker, and a SIGKILL and restart that loses nothing and
// counts nothing twice.
//
// [Build] cross-compiles a package the way `make release` does
// (CGO_ENABLED=0, -trimpath, -s -w, the version stamped with -ldflags -X);
// [Arch.Command] runs the result under the arch's emulator. binfmt_misc
// is not mounted on the CI machines, so the emulator is started
// explicitly: `qemu-aarch64-static ./runnel-edge`, `qemu-arm-static
// ./runnel-edge`.
//
// The emulators are Debian's qemu-user-static, which
// deploy/test/install-deps.sh installs. When one is missing the test is
// skipped — unless RUNNEL_REQUIRE_SERVERS is set (as `make test` and CI
// set it), when it fails.
//
// # Caveats
//
//   - Emulated code runs 10-30 times slower than native, and the race
//     detector is not available for these targets: the emulated binaries
//     are built without -race (the test's host side still runs with it).
//   - arm64 fuses multiply-adds (FMADD) where amd64 rounds twice, so
//     floating-point results may differ in the last digits; results are
//     compared with a relative tolerance, counts exactly.
//   - qemu-user emulates the CPU, not the kernel: syscalls (fsync,
//     rename, mmap of the bbolt file) are the host's. The test proves the
//     code is correct for the target's word size, alignment and memory
//     model as qemu implements them, not that the target's SD card
//     honours fsync.
package qemu
