package testproc

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// MappedKiB returns how much of the file at path this process has resident
// in its read-only mappings of it (the Rss lines of /proc/self/smaps): a
// binary's text and rodata, a bbolt file's mapping. It skips the test where
// there is no smaps.
func MappedKiB(t testing.TB, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		// A mapping's header: "start-end perms offset dev inode path".
		if fields := strings.Fields(line); len(fields) >= 2 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && strings.Join(fields[5:], " ") == path && fields[1][1] != 'w'
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			total += kb
		}
	}
	return total
}
