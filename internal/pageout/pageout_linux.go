package pageout

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4), which package syscall does not
// name.
const madvPageout = 21

// Executable asks the kernel to reclaim the resident pages of the
// process's executable file in its read-only mappings (text and rodata),
// and returns the bytes of the mappings it advised. An older kernel
// refuses the advice (EINVAL): the pages stay, and the error says so.
func Executable() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("pageout: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("pageout: %w", err)
	}
	ranges, err := readOnly(maps, exe)
	if err != nil {
		return 0, err
	}
	var advised int64
	for _, r := range ranges {
		for _, a := range [...]struct {
			advice uintptr
			name   string
		}{{syscall.MADV_RANDOM, "MADV_RANDOM"}, {madvPageout, "MADV_PAGEOUT"}} {
			_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, a.advice)
			if errno != 0 {
				return advised, fmt.Errorf("pageout: madvise(%#x, %d, %s): %w", r.start, r.end-r.start, a.name, errno)
			}
		}
		advised += int64(r.end - r.start)
	}
	return advised, nil
}

type addrRange struct{ start, end uintptr }

// readOnly returns the mappings of file path in maps (the text of
// /proc/PID/maps: "start-end perms offset dev inode path") that are not
// writable.
func readOnly(maps []byte, path string) ([]addrRange, error) {
	var out []addrRange
	for line := range bytes.Lines(maps) {
		f := bytes.Fields(line)
		if len(f) < 6 || string(bytes.Join(f[5:], []byte(" "))) != path || len(f[1]) < 2 || f[1][1] == 'w' {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("pageout: /proc/self/maps: %q is not an address range", f[0])
		}
		out = append(out, addrRange{uintptr(start), uintptr(end)})
	}
	return out, nil
}
