package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/internal/settings"
)

// restore is `runnel-edge restore`: edge.Restore with flags.
func restore(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	from := fs.String("from", "", "the snapshots of an edge: STORE/EDGE-ID, with @CHECKPOINT for one of them (default: the latest complete one); STORE is a snapshot.store (file:///path, a path, s3://bucket/prefix)")
	dir := fs.String("data-dir", "", "the data directory to rebuild: missing or empty (or see --force)")
	force := fs.Bool("force", false, "replace a data directory that is not empty (its contents are deleted once the restored ones are in place); never one an edge runs on")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *from == "" || *dir == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: restore needs --from STORE/EDGE-ID[@CHECKPOINT] and --data-dir, and nothing else", errUsage)
	}
	storeURL, edgeID, id, err := checkpoint.ParseRef(*from)
	if err != nil {
		return err
	}
	schemes, err := envStoreSchemes(ctx)
	if err != nil {
		return err
	}
	st, err := checkpoint.OpenStore(storeURL, schemes)
	if err != nil {
		return err
	}
	lg := slog.New(slog.NewTextHandler(os.Stderr, nil))
	res, err := edge.Restore(ctx, edge.RestoreConfig{Store: st, EdgeID: edgeID, Checkpoint: id, DataDir: *dir, Force: *force, Logger: lg})
	if err != nil {
		return err
	}
	m := res.Manifest
	fmt.Printf("restored snapshot %d of edge %s (taken %s, epoch %d, %s state) into %s\n",
		m.Checkpoint, m.EdgeID, m.Created.Format(time.RFC3339), m.Epoch, settings.ShowBytes(m.StateSize), *dir)
	fmt.Printf("start it with --edge-id %s --data-dir %s: it continues at checkpoint %d under epoch %d and resends its outbox; what the old edge took in after checkpoint %d is not in it\n",
		m.EdgeID, *dir, res.Checkpoint, res.Epoch, m.Checkpoint)
	return nil
}

// snapshots is `runnel-edge snapshots list`.
func snapshots(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "list" {
		return fmt.Errorf("%w: snapshots list --from STORE/EDGE-ID", errUsage)
	}
	fs := flag.NewFlagSet("snapshots list", flag.ContinueOnError)
	from := fs.String("from", "", "the snapshots of an edge: STORE/EDGE-ID")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *from == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: snapshots list needs --from STORE/EDGE-ID, and nothing else", errUsage)
	}
	storeURL, edgeID, id, err := checkpoint.ParseRef(*from)
	if err != nil {
		return err
	}
	if id != 0 {
		return fmt.Errorf("%w: snapshots list takes STORE/EDGE-ID, without @CHECKPOINT", errUsage)
	}
	schemes, err := envStoreSchemes(ctx)
	if err != nil {
		return err
	}
	st, err := checkpoint.OpenStore(storeURL, schemes)
	if err != nil {
		return err
	}
	l, err := edge.ListSnapshots(ctx, st, edgeID)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHECKPOINT\tCREATED\tEPOCH\tSTATE\tDATA\tRUNNEL")
	for _, m := range l.Complete {
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\n", m.Checkpoint, m.Created.Format(time.RFC3339), m.Epoch,
			settings.ShowBytes(m.StateSize), settings.ShowBytes(m.DataSize), m.Runnel)
	}
	for _, id := range l.Incomplete {
		fmt.Fprintf(w, "%d\t(incomplete: no manifest)\t\t\t\t\n", id)
	}
	bad := make([]uint64, 0, len(l.Bad))
	for id := range l.Bad {
		bad = append(bad, id)
	}
	slices.Sort(bad)
	for _, id := range bad {
		fmt.Fprintf(w, "%d\t(unusable: %v)\t\t\t\t\n", id, l.Bad[id])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(l.Complete) == 0 {
		return fmt.Errorf("no complete snapshot of edge %s in %s", edgeID, storeURL)
	}
	return nil
}
