package aggregate_test

import (
	"fmt"
	"math"

	"github.com/runnel-io/runnel/window/aggregate"
)

// Two edges aggregate their readings of one window; the hub merges the
// encoded partials in whatever order they arrive.
func Example() {
	set, err := aggregate.NewSet([]aggregate.Spec{
		{Name: "readings", Func: aggregate.Count, Input: -1},
		{Name: "avg_temp", Func: aggregate.Avg, Input: 0},
		{Name: "max_temp", Func: aggregate.Max, Input: 0},
		{Name: "last_temp", Func: aggregate.Last, Input: 0},
	}, aggregate.Options{})
	if err != nil {
		panic(err)
	}

	edge := func(times []int64, temps []float64) []byte {
		st := set.New()
		for i := range times {
			set.Add(st, &aggregate.Input{Time: times[i], Nums: []float64{temps[i]}})
		}
		return set.AppendEncode(nil, st)
	}
	a := edge([]int64{1000, 2000}, []float64{20.5, 22})
	b := edge([]int64{1500, 2500, 3000}, []float64{21, math.NaN(), 19}) // NaN: the reading had no temperature

	hub := set.New()
	for _, partial := range [][]byte{b, a} {
		if err := set.MergeEncoded(hub, partial); err != nil {
			panic(err)
		}
	}
	fmt.Println(string(set.AppendJSON(nil, hub)))
	// Output: {"readings":5,"avg_temp":20.625,"max_temp":22,"last_temp":19}
}
