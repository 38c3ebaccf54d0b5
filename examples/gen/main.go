// Command gen writes the sample stream of examples/line-temps.jsonl: five
// devices reporting every few seconds for ten minutes, with the disorder a
// real plant network produces — readings out of order, a few late ones,
// duplicates, an out-of-range sensor value and some malformed payloads.
//
//	go run ./examples/gen > examples/line-temps.jsonl
package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
)

func main() {
	rng := rand.New(rand.NewPCG(1, 2))
	start := int64(1767225600000) // 2026-01-01T00:00:00Z
	type reading struct {
		arrive float64
		line   string
	}
	var rs []reading
	for d := range 5 {
		dev := fmt.Sprintf("press-%02d", d+1)
		site := []string{"north", "south"}[d%2]
		base := 20 + float64(d)*3
		for ts := start + int64(rng.IntN(3000)); ts < start+10*60*1000; ts += 4000 + int64(rng.IntN(2000)) {
			temp := base + rng.NormFloat64()*1.5
			if rng.IntN(150) == 0 {
				temp = 999 // a broken sensor; the filter drops it
			}
			line := fmt.Sprintf(`{"device":%q,"site":%q,"ts":%d,"temp":%.2f}`, dev, site, ts, temp)
			delay := float64(rng.IntN(4000)) // network jitter: out of order within 5 s
			if rng.IntN(40) == 0 {
				delay = 20000 + float64(rng.IntN(150000)) // a straggler: late, maybe too late
			}
			rs = append(rs, reading{float64(ts) + delay, line})
			if rng.IntN(30) == 0 {
				rs = append(rs, reading{float64(ts) + delay + 500, line}) // a redelivery
			}
		}
	}
	for i, bad := range []string{`{"device":"press-01","ts":"soon","temp":21.0}`, `{"device":"press-02","ts":1767225900000,"temp":`, `{"ts":1767225960000,"temp":20.5}`} {
		rs = append(rs, reading{float64(start + int64(i+2)*120000), bad})
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].arrive < rs[j].arrive })
	w := bufio.NewWriter(os.Stdout)
	for _, r := range rs {
		fmt.Fprintln(w, r.line)
	}
	w.Flush()
}
