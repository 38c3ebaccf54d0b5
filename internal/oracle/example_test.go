package oracle_test

import (
	"fmt"

	"github.com/runnel-io/runnel/internal/oracle"
)

// Tumbling windows of 10 ms that accept late events for 5 ms after they
// close: event 2 updates the fired window [0, 10) to version 2, event 4
// comes after the window was purged and is late.
func ExampleRun() {
	events := []oracle.Event{
		{Key: "a", Time: 2}, {Key: "a", Time: 12}, {Key: "a", Time: 7}, {Key: "a", Time: 16}, {Key: "a", Time: 4},
	}
	emissions, late := oracle.Run(events, oracle.Config{Kind: oracle.Tumbling, Size: 10, Lateness: 5})
	for _, e := range emissions {
		fmt.Printf("step %d: %s [%d, %d) v%d %v\n", e.Step, e.Key, e.Start, e.End, e.Version, e.Members)
	}
	fmt.Println("late:", late)
	// Output:
	// step 1: a [0, 10) v1 [0]
	// step 2: a [0, 10) v2 [0 2]
	// step 5: a [10, 20) v1 [1 3]
	// late: [4]
}

// Sessions with a 5 ms gap: event 2 bridges two pending sessions into one.
func ExampleRun_session() {
	events := []oracle.Event{{Key: "a", Time: 0}, {Key: "a", Time: 8}, {Key: "a", Time: 4}}
	emissions, _ := oracle.Run(events, oracle.Config{Kind: oracle.Session, Gap: 5, MaxOutOfOrder: 10})
	for _, e := range emissions {
		fmt.Printf("step %d: %s [%d, %d) v%d %v\n", e.Step, e.Key, e.Start, e.End, e.Version, e.Members)
	}
	// Output:
	// step 3: a [0, 13) v1 [0 1 2]
}
