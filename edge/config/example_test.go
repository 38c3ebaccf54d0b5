package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/runnel-io/runnel/edge/config"
)

func ExampleLoad() {
	dir, _ := os.MkdirTemp("", "runnel-config")
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "edge.yaml")
	os.WriteFile(file, []byte(`
edge_id: gw-001
broker:
  url: mqtt://broker.local:1883
checkpoint:
  interval: 5s
`), 0o644)

	// A flag overrides the variable, which overrides the file.
	c, err := config.Load("", []string{"--config", file, "--checkpoint-interval=2s"},
		[]string{"RUNNEL_CHECKPOINT_INTERVAL=3s", "RUNNEL_LOG_LEVEL=debug"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.EdgeID, c.Broker.ClientID, c.Broker.URL)
	fmt.Println(c.Checkpoint.Interval, c.Log.Level, c.IngestLog.SegmentSize)
	// Output:
	// gw-001 runnel-gw-001 mqtt://broker.local:1883
	// 2s debug 67108864
}

func ExampleLoad_invalid() {
	_, err := config.Load("", []string{"--checkpoint-interval=0s", "--log-levl=debug"},
		[]string{"RUNNEL_INGEST_LOG_SEGMENT_SIZE=64mb", "RUNNEL_EDGE_ID=gw-001"})
	fmt.Println(errors.Is(err, config.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// env RUNNEL_INGEST_LOG_SEGMENT_SIZE: invalid size "64mb": unknown unit "mb" (did you mean MB? units are case-sensitive)
	// flag --checkpoint-interval: must be greater than 0, got 0s
	// flag --log-levl: unknown flag (did you mean --log-level?)
}
