package fleet_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runnel-io/runnel/hub/fleet"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestBackgroundEvaluation: with Tick set, the Fleet's own goroutine
// evaluates rollouts after a status that changes a gate and every Tick
// (soak), and writes due statuses; Close stops it.
func TestBackgroundEvaluation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		f, err := fleet.Open(dir, fleet.Options{Tick: time.Second, StatusWriteEvery: 10 * time.Second, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ApplyPipeline("a", &runnelv1.ApplyPipelineRequest{Spec: tempsV1}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var chans []<-chan *runnelv1.DesiredSet
		for _, id := range []string{"e1", "e2"} {
			ch, err := f.Connect(ctx, id, &runnelv1.Register{EdgeId: id}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-ch
			chans = append(chans, ch)
		}
		if _, err := f.ApplyDeployment("a", &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{
			Name: "d", Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}},
			Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 1, SoakMs: 30_000},
		}}); err != nil {
			t.Fatal(err)
		}
		report := func(i int) {
			ds := <-chans[i]
			st := &runnelv1.EdgeStatus{AppliedGeneration: ds.Generation, Pipelines: []*runnelv1.PipelineStatus{{Name: "temps", Revision: 1, State: "running"}}}
			if err := f.Status([]string{"e1", "e2"}[i], st); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the evaluation ApplyDeployment asked for is done
		report(0)
		synctest.Wait() // the kick: healthy now, at time zero of the bubble
		d, _ := f.GetDeployment("d")
		if d.Rollout.HealthySinceMs != time.Now().UnixMilli() {
			t.Fatalf("not evaluated after the status: %v", d.Rollout)
		}
		time.Sleep(30*time.Second + time.Millisecond) // the soak, by ticks
		synctest.Wait()
		if d, _ := f.GetDeployment("d"); d.Rollout.Step != 1 {
			t.Fatalf("no step after the soak: %v", d.Rollout)
		}
		report(1)
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if d, _ := f.GetDeployment("d"); d.Rollout.Phase != fleet.PhaseSucceeded {
			t.Fatalf("not succeeded: %v", d.Rollout)
		}
	})
}
