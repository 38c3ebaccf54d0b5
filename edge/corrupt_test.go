package edge_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/state"
)

// TestDamagedFiles damages the files of a SIGKILLed runnel-edge process and
// restarts the node on them (in-process, on a copy per case). A first
// runnel-edge process took 100 readings through a real Mosquitto and
// stopped (its checkpoint covers them), and was started and stopped again
// (the log segments before them are deleted); a third took 200 and more (4 KiB segments, so several) and was
// killed before any checkpoint. Each restart uses a new MQTT session, so the broker redelivers
// nothing: what the node counts is what its files hold, and the oracle is
// exact. The right behaviour, per damage:
//
//   - A torn write (a partial frame after the last one), a cut inside the
//     last segment, or a flipped byte in the last frame: the tail is a torn
//     write as far as anyone can tell. The node cuts it, logs segment and
//     offset, starts, and its results are those of every reading in the log
//     before the cut (and the readings after the restart), exactly. The
//     readings cut were acknowledged and are lost: that is the documented
//     caveat of ingestlog, and why the cut is logged.
//   - A flipped byte anywhere else in the log (an earlier frame of the last
//     segment, an older segment, a segment header): corruption that is not a
//     torn write. The node refuses to start with an error wrapping
//     ingestlog.ErrCorrupt that names the segment file, and leaves the file
//     as it was.
//   - A cut that removes records the last checkpoint covers: the node must
//     refuse to start, naming the log: positions after the cut would be
//     reused and the checkpoint would skip them (see the blocked subtest).
//   - Damage to state.db (flipped bytes, truncation): either the verifier
//     sees it and the node refuses to start with an error wrapping
//     state.ErrCorrupt that names state.db, or the bytes did not matter (a
//     free page, unused page space, a stale meta page, a length past bbolt's
//     high water mark) or bbolt fell back to its older meta page; then the
//     node starts and, since the log still holds everything after the
//     checkpoint it restored, its results are exact. An empty state.db is a
//     new node: it replays the log from position 0 if the log still starts
//     there, and must refuse otherwise.
//
// Never a panic (it would kill the test binary), never results that differ
// from the oracle.
func TestDamagedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a runnel-edge process")
	}
	k := killedNode(t)
	p := compileSpec(t, sumSpec)

	// run restarts the node on a damaged copy. It returns the node's error
	// when it refused to start; otherwise it publishes 5 new readings and
	// one far ahead, stops the node, and checks the outbox against the
	// readings at log positions below end (the log's end after recovery)
	// plus the new ones.
	run := func(t *testing.T, data string, end uint64) (*testNode, error) {
		t.Helper()
		mosq := k.mosq
		nd := startNode(t, edge.NodeConfig{EdgeID: "dmg-" + strings.ReplaceAll(t.Name(), "/", "-"), DataDir: data,
			Pipelines: []*operators.Pipeline{p}, Broker: fastBroker(mosq), CheckpointInterval: 50 * time.Millisecond,
			IngestLog: ingestlog.Options{SegmentSize: damageSegment}, NoSync: true})
		if nd.err != nil {
			return nd, nd.err
		}
		opened := nd.logs.openedAttrs()
		if got := opened["log_end"]; got != strconv.FormatUint(end, 10) {
			t.Errorf("log end after recovery %s, want %d", got, end)
		}
		pub := testbroker.NewPublisher(t, mosq.HostPort())
		for i := range 5 {
			pub.MustPublish("f/n", fmt.Appendf(nil, `{"dev":"n","seq":%d,"ts":%d,"v":%d}`, i, 50_000+i, i+1), 1)
		}
		pub.MustPublish("f/z", []byte(`{"dev":"z","seq":0,"ts":99999999,"v":0}`), 1)
		// The messages it replays from its checkpoint to the log's end,
		// and the 6 new ones.
		from, _ := strconv.ParseUint(opened["replay_from"], 10, 64)
		var replayed uint64
		for pos := range k.readings {
			if pos >= from && pos < end {
				replayed++
			}
		}
		nd.waitCheckpoint(replayed + 6)
		if err := nd.stop(); err != nil {
			t.Fatalf("node stopped with %v", err)
		}
		want := k.oracle(end)
		want["n/50000"] = [2]int64{5, 15}
		got := readResults(t, p, data)
		for key, w := range want {
			if g := got[key]; g != w {
				t.Errorf("window %s: count,sum %v, want %v", key, g, w)
			}
		}
		for key, g := range got {
			if _, ok := want[key]; !ok {
				t.Errorf("unexpected window %s %v", key, g)
			}
		}
		return nd, nil
	}
	// refused checks that the node refused with an error of class is that
	// names name, and that it left the damaged file as it was.
	refused := func(t *testing.T, err error, is error, name, path string, before []byte) {
		t.Helper()
		if err == nil {
			t.Fatalf("node started; want it to refuse with %v naming %s", is, name)
		}
		if !errors.Is(err, is) || !strings.Contains(err.Error(), name) {
			t.Fatalf("node refused with %q; want an error of class %v naming %s", err, is, name)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Errorf("refusing to start changed %s", path)
		}
		t.Logf("refused: %v", err)
	}

	last := k.frames[len(k.frames)-1]
	lastSeg := last.seg
	t.Run("intact", func(t *testing.T) {
		data := k.copy(t)
		nd, err := run(t, data, k.end)
		if err != nil {
			t.Fatal(err)
		}
		if nd.logs.tornAttrs() != nil {
			t.Error("an intact log was cut")
		}
	})
	// A cut at off inside the last segment: the frame holding off goes,
	// and everything after it.
	cutAt := func(t *testing.T, off int64) {
		data := k.copy(t)
		f := k.frameAt(lastSeg, off)
		if f.first < k.ckpt {
			t.Fatalf("test bug: cut at %d loses records the checkpoint (%d) covers", off, k.ckpt)
		}
		if err := os.Truncate(filepath.Join(data, "log", lastSeg), off); err != nil {
			t.Fatal(err)
		}
		nd, err := run(t, data, f.first)
		if err != nil {
			t.Fatalf("node refused a torn tail: %v", err)
		}
		torn := nd.logs.tornAttrs()
		if off == f.off {
			if torn != nil {
				t.Errorf("a cut at a frame boundary was reported as torn: %v", torn)
			}
			return
		}
		if torn["segment"] != lastSeg || torn["offset"] != strconv.FormatInt(f.off, 10) {
			t.Errorf("torn tail logged as %v, want segment %s offset %d", torn, lastSeg, f.off)
		}
	}
	t.Run("torn-write", func(t *testing.T) {
		data := k.copy(t)
		path := filepath.Join(data, "log", lastSeg)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		frame := b[last.off:last.end]
		n := 1 + k.rng.IntN(len(frame)-1)
		if err := os.WriteFile(path, append(b, frame[:n]...), 0o644); err != nil {
			t.Fatal(err)
		}
		nd, err := run(t, data, k.end)
		if err != nil {
			t.Fatalf("node refused a torn write: %v", err)
		}
		torn := nd.logs.tornAttrs()
		if torn["segment"] != lastSeg || torn["offset"] != strconv.FormatInt(last.end, 10) || torn["bytes"] != strconv.Itoa(n) {
			t.Errorf("torn tail logged as %v, want segment %s offset %d bytes %d", torn, lastSeg, last.end, n)
		}
	})
	t.Run("cut-last-frame", func(t *testing.T) {
		cutAt(t, last.off+1+k.rng.Int64N(last.end-last.off-1))
	})
	var after []frame // frames of the last segment the checkpoint does not cover
	for _, f := range k.frames {
		if f.seg == lastSeg && f.first >= k.ckpt {
			after = append(after, f)
		}
	}
	for i := range 2 {
		t.Run(fmt.Sprintf("cut-%d", i), func(t *testing.T) {
			lo, hi := after[0].off, last.end
			cutAt(t, lo+k.rng.Int64N(hi-lo))
		})
	}
	t.Run("cut-frame-boundary", func(t *testing.T) {
		cutAt(t, after[k.rng.IntN(len(after))].off)
	})
	t.Run("flip-last-frame", func(t *testing.T) {
		data := k.copy(t)
		flip(t, filepath.Join(data, "log", lastSeg), last.off+k.rng.Int64N(last.end-last.off), k.rng)
		nd, err := run(t, data, last.first)
		if err != nil {
			t.Fatalf("node refused a damaged last frame (a torn write, as far as it can tell): %v", err)
		}
		if torn := nd.logs.tornAttrs(); torn["segment"] != lastSeg || torn["offset"] != strconv.FormatInt(last.off, 10) {
			t.Errorf("torn tail logged as %v, want segment %s offset %d", torn, lastSeg, last.off)
		}
	})
	flipRefused := func(t *testing.T, f frame, lo, hi int64) {
		data := k.copy(t)
		path := filepath.Join(data, "log", f.seg)
		flip(t, path, lo+k.rng.Int64N(hi-lo), k.rng)
		before, _ := os.ReadFile(path)
		_, err := run(t, data, 0)
		refused(t, err, ingestlog.ErrCorrupt, f.seg, path, before)
	}
	t.Run("flip-earlier-frame", func(t *testing.T) {
		var in []frame
		for _, f := range k.frames {
			if f.seg == lastSeg && f.off != last.off {
				in = append(in, f)
			}
		}
		if len(in) == 0 {
			t.Fatal("test setup: the last segment holds one frame")
		}
		f := in[k.rng.IntN(len(in))]
		flipRefused(t, f, f.off, f.end)
	})
	t.Run("flip-older-segment", func(t *testing.T) {
		f := k.frames[k.rng.IntN(slices.IndexFunc(k.frames, func(f frame) bool { return f.seg == lastSeg }))]
		flipRefused(t, f, 0, f.end) // header or frames
	})
	t.Run("flip-segment-header", func(t *testing.T) {
		flipRefused(t, last, 0, 20)
	})
	t.Run("cut-below-checkpoint", func(t *testing.T) {
		// The log lost the records of its last frames, some of which the
		// checkpoint covers: new records would take their positions, and the
		// checkpoint, which says it covers them, would skip them. The node
		// must refuse to start, naming the log directory.
		data := k.copy(t)
		i := slices.IndexFunc(k.frames, func(f frame) bool { return f.first+f.count >= k.ckpt })
		f := k.frames[i]
		for _, g := range k.frames[i+1:] {
			if g.seg != f.seg {
				os.Remove(filepath.Join(data, "log", g.seg))
			}
		}
		path := filepath.Join(data, "log", f.seg)
		if err := os.Truncate(path, f.off); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(path)
		_, err := run(t, data, f.first)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(data, "log")) {
			t.Fatalf("got %v, want a refusal naming %s", err, filepath.Join(data, "log"))
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Errorf("refusing to start changed %s", path)
		}
	})

	// state.db: whatever the damage, refuse naming the file or be exact.
	stateCase := func(t *testing.T, damage func(path string)) {
		data := k.copy(t)
		path := filepath.Join(data, "state.db")
		damage(path)
		before, _ := os.ReadFile(path)
		nd, err := run(t, data, k.end)
		if err != nil {
			refused(t, err, state.ErrCorrupt, path, path, before)
			return
		}
		t.Logf("started from checkpoint %s (replay from %s)", nd.logs.openedAttrs()["checkpoint"], nd.logs.openedAttrs()["replay_from"])
	}
	// Damage within the pages bbolt uses (below the high water mark of
	// the newer meta page); the file is much longer (bbolt grows it ahead).
	b, err := os.ReadFile(filepath.Join(k.dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	ps := int64(binary.LittleEndian.Uint32(b[24:]))
	meta := b[16:]
	if binary.LittleEndian.Uint64(b[ps+64:]) > binary.LittleEndian.Uint64(b[64:]) {
		meta = b[ps+16:]
	}
	used := int64(binary.LittleEndian.Uint64(meta[40:])) * ps
	t.Logf("state.db: %d bytes, %d in use", len(b), used)
	for i := range 6 {
		t.Run(fmt.Sprintf("state-flip-%d", i), func(t *testing.T) {
			stateCase(t, func(path string) {
				if i%2 == 0 {
					flip(t, path, k.rng.Int64N(used), k.rng)
					return
				}
				// The head of a page past the metas: page header and the
				// first element headers, where few bytes are slack.
				flip(t, path, (2+k.rng.Int64N(used/ps-2))*ps+k.rng.Int64N(64), k.rng)
			})
		})
	}
	for i := range 2 {
		t.Run(fmt.Sprintf("state-cut-%d", i), func(t *testing.T) {
			stateCase(t, func(path string) { truncate(t, path, 1+k.rng.Int64N(used-1)) })
		})
	}
	t.Run("state-newest-meta", func(t *testing.T) {
		// bbolt falls back to the older meta page: the previous checkpoint.
		stateCase(t, func(path string) {
			b, _ := os.ReadFile(path)
			ps := int64(binary.LittleEndian.Uint32(b[24:]))
			page := int64(0)
			if binary.LittleEndian.Uint64(b[ps+64:]) > binary.LittleEndian.Uint64(b[64:]) {
				page = 1
			}
			flip(t, path, page*ps+16+k.rng.Int64N(64), k.rng)
		})
	})
	t.Run("state-empty", func(t *testing.T) {
		data := k.copy(t)
		truncate(t, filepath.Join(data, "state.db"), 0)
		_, err := run(t, data, k.end)
		if k.first == 0 {
			if err != nil {
				t.Fatalf("an empty state.db with the whole log: want a replay from 0, got %v", err)
			}
			return
		}
		if err == nil {
			t.Fatalf("an empty state.db and a log from %d: the node started; want it to refuse", k.first)
		}
		t.Logf("refused: %v", err)
		if !strings.Contains(err.Error(), filepath.Join(data, "log")) || !strings.Contains(err.Error(), "state.db") {
			t.Errorf("the refusal names neither the ingest log directory nor state.db: %v", err)
		}
	})
}

// damageSegment is the ingest log segment size of TestDamagedFiles: small,
// so that the log has several segments.
const damageSegment = 4 << 10

// killed is the data directory of a SIGKILLed runnel-edge process and what
// the test knows of it.
type killed struct {
	dir      string
	mosq     *testbroker.Mosquitto
	rng      *rand.Rand
	frames   []frame
	first    uint64 // first position of the log
	end      uint64 // one past the last record of the log
	ckpt     uint64 // position of the last checkpoint: records below it are in state.db
	readings map[uint64]reading
	stream   []reading // every reading published, in order
}

type reading struct {
	dev   string
	seq   int
	ts, v int64
}

// frame is where one frame of the ingest log lies: segment file, byte
// range, and the positions of its records.
type frame struct {
	seg          string
	off, end     int64
	first, count uint64
}

// killedNode runs a runnel-edge process that takes 100 readings and stops
// gracefully (its last checkpoint covers them, and its ingest log segments
// before position 100 are deleted), then another that takes at least 200
// more, in bursts of 10 so that they make many frames, without a checkpoint,
// and is SIGKILLed once the last segment holds at least three frames.
func killedNode(t *testing.T) *killed {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "runnel-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/runnel-edge").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	specPath := filepath.Join(dir, "faults.yaml")
	if err := os.WriteFile(specPath, []byte(sumSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	k := &killed{dir: filepath.Join(dir, "data"), mosq: testbroker.Start(t), rng: rand.New(rand.NewPCG(7, 8))}
	if s := os.Getenv("RUNNEL_DAMAGE_SEED"); s != "" {
		seed, _ := strconv.ParseUint(s, 10, 64)
		k.rng = rand.New(rand.NewPCG(seed, 8))
	}
	pub := testbroker.NewPublisher(t, k.mosq.HostPort())
	burst := func() {
		for range 10 {
			i := len(k.stream)
			r := reading{dev: fmt.Sprintf("d%d", i%4), seq: i, ts: int64(1000 + i*40), v: int64(i % 13)}
			k.stream = append(k.stream, r)
			pub.MustPublish("f/"+r.dev, fmt.Appendf(nil, `{"dev":%q,"seq":%d,"ts":%d,"v":%d}`, r.dev, r.seq, r.ts, r.v), 1)
		}
	}
	// Phase 0 takes 100 readings and stops (a checkpoint at 100); phase 1
	// starts and stops again (a second checkpoint at 100, after which the
	// segments below the first one's position go); phase 2 takes 200 and
	// more and is killed.
	for phase := range 3 {
		addr := freeAddr(t)
		cmd := exec.Command(bin, "run", "--pipeline", specPath, "--data-dir", k.dir, "--broker-url", k.mosq.Addr(),
			"--edge-id", "dmg", "--checkpoint-interval", "1h", "--http-addr", addr,
			"--ingest-log-segment-size", fmt.Sprintf("%dB", damageSegment),
			// No spares: a killed log written over one has the spare's old
			// bytes after its last frame, and the cases below damage a log
			// that ends at its last frame (the ingestlog tests cover spares).
			"--ingest-log-spare-segments", "0")
		stderr := &testproc.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stopped := false
		defer func() {
			if !stopped {
				cmd.Process.Kill()
				cmd.Wait()
			}
			if t.Failed() {
				t.Logf("runnel-edge:\n%s", stderr.String())
			}
		}()
		waitFor := func(what string, ok func() bool) {
			deadline := time.Now().Add(10 * time.Second)
			for !ok() {
				if time.Now().After(deadline) {
					t.Fatalf("runnel-edge: %s: not after 10s\n%s", what, stderr.String())
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		waitFor("ready", func() bool { return strings.Contains(stderr.String(), "edge: ready") })
		for sent := 0; phase != 1; {
			burst()
			sent += 10
			waitFor("readings in", func() bool { return metricValue(addr, "runnel_edge_records_in_total") == strconv.Itoa(sent) })
			if phase == 0 && sent == 100 || phase == 2 && sent >= 200 && lastSegmentFrames(t, filepath.Join(k.dir, "log")) >= 3 {
				break
			}
		}
		sig := syscall.SIGTERM
		if phase == 2 {
			sig = syscall.SIGKILL
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); phase < 2 && err != nil {
			t.Fatalf("runnel-edge: %v\n%s", err, stderr.String())
		}
		stopped = true
	}

	k.scanLog(t)
	// The position the last checkpoint covers: what a restart of an intact
	// copy says it replays from.
	data := k.copy(t)
	nd := startNode(t, edge.NodeConfig{EdgeID: "dmg-probe", DataDir: data, Pipelines: []*operators.Pipeline{compileSpec(t, sumSpec)},
		Broker: fastBroker(k.mosq), IngestLog: ingestlog.Options{SegmentSize: damageSegment}, NoSync: true})
	if nd.err != nil {
		t.Fatal(nd.err)
	}
	k.ckpt, _ = strconv.ParseUint(nd.logs.openedAttrs()["replay_from"], 10, 64)
	nd.stop()
	segs := map[string]bool{}
	for _, f := range k.frames {
		segs[f.seg] = true
	}
	t.Logf("killed node: log %d..%d in %d segments (%d frames), checkpoint at %d", k.first, k.end, len(segs), len(k.frames), k.ckpt)
	// The first 100 readings and the clock records between them (one a
	// second at most) lie below the checkpoint.
	if len(segs) < 2 || k.first == 0 || k.ckpt < 100 || k.ckpt > 120 || k.frames[len(k.frames)-1].first < k.ckpt {
		t.Fatalf("test setup: want several segments, the first ones deleted, and a checkpoint at about 100 below the last frame")
	}
	return k
}

// segFrames is the offset of the first frame of the segment whose bytes are
// b: after the header, of 20 bytes in version 1 and 24 in version 2.
func segFrames(b []byte) int {
	if len(b) > 4 && b[4] == 1 {
		return 20
	}
	return 24
}

// lastSegmentFrames counts the whole frames of the log's last segment.
func lastSegmentFrames(t *testing.T, dir string) int {
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(names) == 0 {
		return 0
	}
	b, err := os.ReadFile(slices.Max(names))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for off := segFrames(b); off+32 <= len(b); n++ {
		off += 32 + int(binary.LittleEndian.Uint32(b[off+12:]))
		if off > len(b) {
			break
		}
	}
	return n
}

// scanLog reads the intact log of the killed node: where each frame lies
// (parsed from docs/formats/ingest-log.md's layout, independently of
// ingestlog) and which reading each position holds (through ingestlog's
// Reader, on a scratch copy).
func (k *killed) scanLog(t *testing.T) {
	t.Helper()
	logDir := filepath.Join(k.dir, "log")
	names, err := filepath.Glob(filepath.Join(logDir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	for _, path := range names {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(segFrames(b)); off < int64(len(b)); {
			h := b[off:]
			f := frame{seg: filepath.Base(path), off: off, count: uint64(binary.LittleEndian.Uint32(h[8:])),
				first: binary.LittleEndian.Uint64(h[20:])}
			f.end = off + 32 + int64(binary.LittleEndian.Uint32(h[12:]))
			k.frames = append(k.frames, f)
			off = f.end
		}
	}
	k.first, k.end = k.frames[0].first, k.frames[len(k.frames)-1].first+k.frames[len(k.frames)-1].count

	scratch := filepath.Join(t.TempDir(), "log")
	if err := os.CopyFS(scratch, os.DirFS(logDir)); err != nil {
		t.Fatal(err)
	}
	l, rec, err := ingestlog.Open(context.Background(), scratch, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if rec.TruncatedBytes != 0 || uint64(rec.First) != k.first || uint64(rec.End) != k.end {
		t.Fatalf("scan of the killed node's log: %+v, want %d..%d and no cut", rec, k.first, k.end)
	}
	rd, err := l.NewReader(ingestlog.Position(k.first))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	k.readings = map[uint64]reading{}
	for pos := k.first; pos < k.end; pos++ {
		rec, p, err := rd.Next()
		if err != nil || uint64(p) != pos {
			t.Fatalf("read position %d: %v (got %d)", pos, err, p)
		}
		n, w := binary.Uvarint(rec)
		if n == 0 {
			continue // a control record (a clock record): no reading
		}
		var r struct {
			Dev   string
			Seq   int
			Ts, V int64
		}
		if err := json.Unmarshal(rec[w+int(n):], &r); err != nil {
			t.Fatalf("position %d: %v", pos, err)
		}
		k.readings[pos] = reading{dev: r.Dev, seq: r.Seq, ts: r.Ts, v: r.V}
	}
}

// copy returns a copy of the killed node's data directory.
func (k *killed) copy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dst, os.DirFS(k.dir)); err != nil {
		t.Fatal(err)
	}
	// CopyFS makes files read-only for others; the node needs to write.
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chmod(p, 0o644)
		}
		return err
	})
	return dst
}

// oracle is dev/window_start -> (count, sum) of every reading published,
// but those at log positions end and after: what a node whose log was cut
// at end must count (the broker redelivers nothing to its new session).
func (k *killed) oracle(end uint64) map[string][2]int64 {
	lost := map[int]bool{}
	for pos := end; pos < k.end; pos++ {
		// Clock records hold no reading: the zero reading is seq 0's.
		if r, ok := k.readings[pos]; ok {
			lost[r.seq] = true
		}
	}
	want := map[string][2]int64{}
	for _, r := range k.stream {
		if lost[r.seq] {
			continue
		}
		key := fmt.Sprintf("%s/%d", r.dev, r.ts/1000*1000)
		want[key] = [2]int64{want[key][0] + 1, want[key][1] + r.v}
	}
	return want
}

// frameAt returns the frame of segment seg that holds byte off, or the one
// that starts at off.
func (k *killed) frameAt(seg string, off int64) frame {
	for _, f := range k.frames {
		if f.seg == seg && off >= f.off && off < f.end {
			return f
		}
	}
	panic(fmt.Sprintf("no frame at %s:%d", seg, off))
}

// flip XORs the byte at off with a random non-zero value.
func flip(t *testing.T, path string, off int64, rng *rand.Rand) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= byte(1 + rng.IntN(255))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped %s at offset %d", filepath.Base(path), off)
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut %s to %d bytes", filepath.Base(path), size)
}
