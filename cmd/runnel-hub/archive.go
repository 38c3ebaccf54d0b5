package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/config"
	"github.com/runnel-io/runnel/sync/archive"
)

// openS3 opens an s3:// archive URL: a sync/objstore Bucket reached with
// the object_store.* settings.
func openS3(ctx context.Context, c *config.Config, lg *slog.Logger) (archive.Store, error) {
	b, err := c.ObjectStore.Open(ctx, c.Archive.URL, lg)
	if err != nil {
		return nil, fmt.Errorf("archive.url: %w", err)
	}
	return b, nil
}

// openArchiveStore opens the store archive.url names.
func openArchiveStore(ctx context.Context, c *config.Config) (archive.Store, error) {
	if strings.HasPrefix(c.Archive.URL, "s3://") {
		return openS3(ctx, c, slog.Default())
	}
	st, err := archive.OpenURL(c.Archive.URL)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// archiveOptions are the archiver's options from the config.
func archiveOptions(c *config.Config, st archive.Store, log archive.Log) archive.Options {
	return archive.Options{
		Store: st, Log: log, StagingDir: c.Archive.StagingDir,
		FlushInterval: c.Archive.FlushInterval, MaxRowsPerFile: c.Archive.MaxRowsPerFile,
		NoCompaction: !c.Archive.Compaction, CompactionDelay: c.Archive.CompactionDelay,
		CompactionMemory: c.Archive.CompactionMemory, Retention: c.Archive.Retention,
	}
}

// runArchive is `runnel-hub archive status [--json] [settings]`: the
// archive's cursor, pending results, last manifest and last compaction,
// read from the store in data_dir when no hub has it open, else asked of
// the running hub (GET /v1/archive/status on http.addr).
func runArchive(args, environ []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "status" {
		return fmt.Errorf("usage: runnel-hub archive status [--json] [settings]: %w", config.ErrInvalid)
	}
	args = args[1:]
	asJSON := slices.Contains(args, "--json")
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--json" })
	c, err := config.Load("", args, environ)
	if err != nil {
		return err
	}
	if c.Archive.URL == "" {
		return errors.New("archive status: archive.url is not set, so this hub keeps no archive")
	}
	st, err := hub.ReadArchiveStatus(c.DataDir)
	if errors.Is(err, bolt.ErrTimeout) {
		st, err = askHub(c)
	}
	if err != nil {
		return fmt.Errorf("archive status: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, c.Archive.URL, st, time.Now())
	return nil
}

// askHub asks the running hub for its archive status.
func askHub(c *config.Config) (archive.Status, error) {
	var st archive.Status
	scheme, client := "http", &http.Client{Timeout: 10 * time.Second}
	if !c.Plaintext() {
		scheme = "https"
		pool := x509.NewCertPool()
		if pem, err := os.ReadFile(c.TLS.CertFile); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+c.HTTP.Addr+"/v1/archive/status", nil)
	if err != nil {
		return st, err
	}
	if c.Auth.APIToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.Auth.APIToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, fmt.Errorf("the store in %s is open in a running hub, which does not answer: %w", c.DataDir, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("the running hub answers %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return st, json.Unmarshal(body, &st)
}

func printStatus(w io.Writer, url string, st archive.Status, now time.Time) {
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
	}
	fmt.Fprintf(w, "archive:          %s (log %s)\n", url, st.LogID)
	fmt.Fprintf(w, "cursor:           %d (every result the hub logged up to it is published)\n", st.Cursor)
	if st.Pending > 0 {
		fmt.Fprintf(w, "pending:          %d results, the oldest emitted %s\n", st.Pending, ago(st.OldestPending))
	} else {
		fmt.Fprintf(w, "pending:          0\n")
	}
	if st.Working != "" {
		fmt.Fprintf(w, "in progress:      %s (resumed after a restart)\n", st.Working)
	}
	if st.LastManifest != "" {
		fmt.Fprintf(w, "last manifest:    %s at %s\n", st.LastManifest, ago(st.LastManifestAt))
	} else {
		fmt.Fprintf(w, "last manifest:    none yet\n")
	}
	if st.LastCompaction != "" {
		fmt.Fprintf(w, "last compaction:  %s at %s: %d files, %d rows\n", st.LastCompaction, ago(st.LastCompactionAt), st.LastCompactedFiles, st.LastCompactedRows)
	} else {
		fmt.Fprintf(w, "last compaction:  none yet\n")
	}
	fmt.Fprintf(w, "partitions:       %d (%d superseded objects to delete)\n", st.Partitions, st.PendingDeletes)
	t := st.Totals
	fmt.Fprintf(w, "totals:           %d rows, %d files, %d bytes, %d manifests, %d compactions, %d partitions deleted, %d rows past retention, %d rows set aside\n",
		t.Rows, t.Files, t.Bytes, t.Manifests, t.Compactions, t.Deleted, t.Expired, t.Invalid)
	if len(st.Failures) > 0 {
		var parts []string
		for k, v := range st.Failures {
			if v > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, v))
			}
		}
		slices.Sort(parts)
		if len(parts) > 0 {
			fmt.Fprintf(w, "failures:         %s (since the hub started); last at %s: %s\n", strings.Join(parts, ", "), ago(st.LastErrorAt), st.LastError)
		}
	}
}
