package edge

// SetPumpGate makes the node's pump receive from gate before it feeds each
// record, as if the pipelines had stalled; close gate to let it run.
func SetPumpGate(cfg *NodeConfig, gate <-chan struct{}) { cfg.pumpGate = gate }
