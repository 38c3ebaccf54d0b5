package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/grpczstd"
)

// Entry is one committed outbox entry: a window result, or a marker of a
// pipeline's watermark (every window ending at or before it came earlier).
type Entry struct {
	Seq       uint64
	Pipeline  string
	Revision  uint32 // of the pipeline (0: a local pipeline)
	Local     bool   // not for the hub (the pipeline has no hub output): sent as a sequence number only
	Marker    bool
	Watermark int64 // Marker only

	Key        []byte
	Start, End int64
	Version    uint32
	State      []byte
}

// Refused is an outbox entry the hub will never accept, and why.
type Refused struct {
	Seq    uint64
	Reason string
}

// Outbox is the edge's committed outbox, as the uplink needs it.
type Outbox interface {
	// Committed returns one past the highest committed sequence number,
	// and a channel closed when it grows.
	Committed() (next uint64, grew <-chan struct{})
	// Read calls fn with the committed entries from sequence from on, in
	// order, until fn returns false. Entries are valid during the call.
	Read(from uint64, fn func(*Entry) bool) error
	// Epoch returns the uplink's epoch (1 before any was stored).
	Epoch() uint64
	// SetEpoch stores a new epoch durably.
	SetEpoch(epoch uint64) error
	// Ack tells the outbox that the hub made every entry up to seq durable:
	// it may delete them (later, with its next commit).
	Ack(seq uint64)
	// Quarantine sets the entries aside durably with their reasons: from
	// then on Read gives each of them as Local (its sequence number only).
	// Entries already gone (acked, or quarantined before) are skipped.
	Quarantine(rs []Refused) error
}

// Limits are what the hub accepts (runnelv1.Limits), as the uplink applies
// them. A hub that announces none gets DefaultLimits.
type Limits struct {
	MaxKeyBytes, MaxStateBytes   int
	MaxBatchBytes, MaxBatchItems int
}

// DefaultLimits are assumed for a hub that announces no limits: gRPC's
// default message limit, and the hub's key limit.
var DefaultLimits = Limits{MaxKeyBytes: 4096, MaxStateBytes: 1 << 20, MaxBatchBytes: 4<<20 - 64<<10, MaxBatchItems: 100_000}

// Keepalive is how the uplink's connection (the uplink and control
// streams) watches its link. With keepalive on, grpc-go also sets
// TCP_USER_TIMEOUT to Timeout, so a write the hub does not acknowledge
// within it ends the connection: a cut link is seen within Timeout of
// the next status (every 10 s by default) or batch, not after TCP's
// minutes of retransmissions. The ping is for a link with nothing to
// write: after Time without a frame from the hub the edge pings it, and
// ends the connection when no answer comes within Timeout. A minute is
// well inside the TCP idle timeouts of common NATs (4 minutes and
// longer), and costs the hub a third of the answers 20 s did: at 10,000
// edges 170 a second instead of 500, whose writes were 18 % of its CPU
// profile on loopback.
var Keepalive = keepalive.ClientParameters{Time: time.Minute, Timeout: 10 * time.Second, PermitWithoutStream: false}

// MaxEpoch is the highest epoch an edge goes to: it starts a new one only
// when the hub shows it must, so no real edge comes near; a hub that holds
// more for this edge holds a forged or corrupt value, which the uplink does
// not follow (Stats.Refusal says so).
const MaxEpoch = 1 << 32

// Config configures an Uplink. Zero fields take defaults.
type Config struct {
	EdgeID string
	Hub    string // host:port of the hub's gRPC listener
	Token  string // sent as "authorization: Bearer <token>"
	// TLS secures the connection; nil means plaintext, allowed only with
	// Insecure (tests, loopback demos). With a client certificate
	// (Certificates or GetClientCertificate), a hub's refusal of it is
	// reported as such (see certCreds).
	TLS      *tls.Config
	Insecure bool

	BatchEntries int           // entries per batch (default 500)
	MaxUnacked   int           // entries sent ahead of the hub's ack (default 20000)
	BackoffMin   time.Duration // first retry delay (default 100ms)
	BackoffMax   time.Duration // retry delay cap (default 30s)
	DialOptions  []grpc.DialOption
	Logger       *slog.Logger
}

// Stats is the uplink's state for metrics.
type Stats struct {
	Connected  bool
	Epoch      uint64
	AckedSeq   uint64 // highest sequence the hub made durable
	SentSeq    uint64 // highest sequence sent
	Batches    uint64 // batches sent
	Reconnects uint64 // streams that failed and were retried
	NewEpochs  uint64 // epochs started because the hub knew more
	LastError  string
	// Since is when the uplink last connected (Connected) or last lost
	// its stream or failed to connect (zero before the first attempt).
	Since time.Time
	// Quarantined counts entries set aside since the start; LastQuarantine
	// is the reason of the last one and when.
	Quarantined      uint64
	LastQuarantine   string
	LastQuarantineAt time.Time
	LastNewEpochAt   time.Time
	RecentNewEpochs  []time.Time // when the last few new epochs started (at most 8), oldest first
	Refusal          string      // the hub refuses this edge's epoch or whole batches; "" once a session gets acks
	Limits           Limits      // as the hub announced them (DefaultLimits before)
}

// Uplink sends an outbox to a hub. Run it once.
type Uplink struct {
	cfg  Config
	ob   Outbox
	lg   *slog.Logger
	conn *grpc.ClientConn

	connected           atomic.Bool
	epoch, acked, sent  atomic.Uint64
	batches, reconnects atomic.Uint64
	newEpochs           atomic.Uint64
	quarantined         atomic.Uint64
	lastErr             atomic.Value // string

	mu       sync.Mutex // guards the fields below, for Stats
	since    time.Time
	lastQ    string
	lastQAt  time.Time
	epochAt  time.Time
	epochs   []time.Time // the last few new epochs' times
	refusal  string
	limits   Limits
	batchCap int // entries per batch after ResourceExhausted: halved down to 1; 0 = no cap
}

// New prepares an uplink; it connects when Run starts.
func New(cfg Config, ob Outbox) (*Uplink, error) {
	if cfg.EdgeID == "" || cfg.Hub == "" {
		return nil, errors.New("uplink: edge id and hub address are required")
	}
	if cfg.TLS == nil && !cfg.Insecure {
		return nil, errors.New("uplink: no TLS configuration; set one, or allow plaintext explicitly (insecure)")
	}
	if cfg.BatchEntries <= 0 {
		cfg.BatchEntries = 500
	}
	if cfg.MaxUnacked <= 0 {
		cfg.MaxUnacked = 20000
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 100 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(30*time.Second, cfg.BackoffMin)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
		if hasClientCert(cfg.TLS) {
			creds = certCreds{creds}
		}
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(Keepalive),
		// grpc-go redials on a back-off of its own (to 120 s by default),
		// and a stream opened meanwhile fails at once with the last dial
		// error: after a long outage the hub's return went unnoticed for
		// up to two minutes on top of the uplink's back-off. It is capped
		// at the uplink's (TestReconnectWithinBackoffMax).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: cfg.BackoffMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.BackoffMax},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{cfg.Token, cfg.TLS != nil}))
	}
	opts = append(opts, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Hub, opts...)
	if err != nil {
		return nil, fmt.Errorf("uplink: %w", err)
	}
	u := &Uplink{cfg: cfg, ob: ob, lg: lg.With("hub", cfg.Hub), conn: conn, limits: DefaultLimits}
	u.epoch.Store(ob.Epoch())
	u.lastErr.Store("")
	return u, nil
}

// Conn is the uplink's connection to the hub, for other streams to the
// same hub (the edge's control stream). Run closes it when it returns.
func (u *Uplink) Conn() *grpc.ClientConn { return u.conn }

// Backoff returns the retry delays the uplink uses: other streams to the
// hub back off alike.
func (u *Uplink) Backoff() (lo, hi time.Duration) { return u.cfg.BackoffMin, u.cfg.BackoffMax }

type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Stats returns the uplink's state; safe from any goroutine.
func (u *Uplink) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return Stats{
		Connected: u.connected.Load(), Epoch: u.epoch.Load(), AckedSeq: u.acked.Load(), SentSeq: u.sent.Load(),
		Batches: u.batches.Load(), Reconnects: u.reconnects.Load(), NewEpochs: u.newEpochs.Load(),
		LastError: u.lastErr.Load().(string), Since: u.since,
		Quarantined: u.quarantined.Load(), LastQuarantine: u.lastQ, LastQuarantineAt: u.lastQAt,
		LastNewEpochAt: u.epochAt, RecentNewEpochs: slices.Clone(u.epochs), Refusal: u.refusal, Limits: u.limits,
	}
}

func (u *Uplink) setSince(t time.Time) {
	u.mu.Lock()
	u.since = t
	u.mu.Unlock()
}

func (u *Uplink) setRefusal(why string) {
	u.mu.Lock()
	u.refusal = why
	u.mu.Unlock()
}

// errNewEpoch ends a session that started a new epoch; errQuarantined one
// that set entries aside: the next session starts after the back-off, or at
// once.
var (
	errNewEpoch    = errors.New("uplink: new epoch")
	errQuarantined = errors.New("uplink: entries quarantined")
)

// Run sends until ctx is done, reconnecting after every failure, and
// returns nil then. It returns an error only if the outbox fails.
func (u *Uplink) Run(ctx context.Context) error {
	defer u.conn.Close()
	u.setSince(time.Now()) // not connected, from now
	delay := u.cfg.BackoffMin
	for {
		progressed, err := u.session(ctx)
		if u.connected.Swap(false) {
			u.setSince(time.Now())
		}
		if ctx.Err() != nil {
			return nil
		}
		var obErr outboxError
		if errors.As(err, &obErr) {
			return obErr.error
		}
		if errors.Is(err, errQuarantined) {
			delay = u.cfg.BackoffMin
			continue // what stopped the stream is set aside
		}
		if !errors.Is(err, errNewEpoch) {
			u.reconnects.Add(1)
			u.lastErr.Store(err.Error())
		}
		if progressed {
			delay = u.cfg.BackoffMin
		}
		// Full jitter: a fleet that lost the hub together does not come
		// back in step.
		wait := time.Duration(rand.Int64N(int64(delay)) + 1)
		if !errors.Is(err, errNewEpoch) {
			u.lg.Warn("uplink: stream ended; retrying", "err", err, "in", wait.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		delay = min(delay*2, u.cfg.BackoffMax)
	}
}

// outboxError marks failures of the outbox (local disk), which retrying
// the hub cannot fix.
type outboxError struct{ error }

// session runs one Sync stream. progressed reports whether the hub acked
// anything new (the back-off restarts then).
func (u *Uplink) session(ctx context.Context) (progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := runnelv1.NewUplinkClient(u.conn).Sync(sctx, grpc.UseCompressor(grpczstd.Name))
	if err != nil {
		return false, err
	}
	epoch := u.ob.Epoch()
	u.epoch.Store(epoch)
	next, _ := u.ob.Committed()
	hello := &runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: u.cfg.EdgeID, Epoch: epoch, NextSeq: next}}}
	if err := stream.Send(hello); err != nil {
		return false, recvErr(stream, err)
	}
	first, err := stream.Recv()
	switch status.Code(err) {
	case codes.OK:
	case codes.FailedPrecondition: // a hub that fences Hellos rather than answering with its epoch
		return false, u.startEpoch(epoch+1, fmt.Sprintf("hub fenced epoch %d: %v", epoch, status.Convert(err).Message()))
	case codes.InvalidArgument:
		u.setRefusal(fmt.Sprintf("the hub refuses this edge's epoch %d: %s", epoch, status.Convert(err).Message()))
		return false, err
	default:
		return false, err
	}
	resume := first.GetResume()
	if resume == nil {
		return false, errors.New("uplink: hub did not answer Hello with Resume")
	}
	switch {
	case resume.Epoch > epoch && resume.Epoch >= MaxEpoch:
		why := fmt.Sprintf("the hub holds epoch %d for this edge, beyond any an edge reaches (%d): a forged or corrupt value, which this edge does not follow; reset the edge at the hub", resume.Epoch, uint64(MaxEpoch))
		u.setRefusal(why)
		return false, errors.New("uplink: " + why)
	case resume.Epoch > epoch:
		return false, u.startEpoch(resume.Epoch+1, fmt.Sprintf("hub holds epoch %d", resume.Epoch))
	case resume.Epoch == epoch && resume.AckedSeq >= next && resume.AckedSeq > 0:
		return false, u.startEpoch(epoch+1, fmt.Sprintf("hub acked sequence %d, this edge committed only up to %d", resume.AckedSeq, next-1))
	}
	lim := limitsOf(resume.Limits)
	u.mu.Lock()
	u.limits = lim
	batchCap := u.batchCap
	u.mu.Unlock()
	u.connected.Store(true)
	u.setSince(time.Now())
	acked := resume.AckedSeq
	u.noteAck(acked)
	u.lg.Info("uplink: connected", "epoch", epoch, "resume_after", acked, "committed_next", next)

	// The receiver reports acks; the sender (this goroutine) waits on
	// them only when MaxUnacked entries are in flight.
	ackCh := make(chan uint64, 1)
	recvDone := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			if a := m.GetAck(); a != nil && a.Epoch == epoch {
				select {
				case <-ackCh:
				default:
				}
				ackCh <- a.AckedSeq
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
	}()

	// from is the next sequence to send. floor is the highest sequence
	// that is done: acked, or below the outbox's first entry (a new epoch
	// starts wherever the outbox does). At most MaxUnacked sequence
	// numbers are in flight past it. firstSent is the first sequence of
	// the session's first batch, firstN its entries, sentN the batches
	// sent.
	from := acked + 1
	floor := acked
	var firstSent uint64
	firstN, sentN := 0, 0
	var b batcher
	onAck := func(a uint64) {
		if a > acked {
			acked, floor = a, max(floor, a)
			if !progressed {
				progressed = true
				u.setRefusal("")
			}
			u.noteAck(a)
		}
	}
	// ended takes the last ack the receiver got (it passes each on before
	// it reports the end), then decides what the end means. A ResourceExhausted is surely about an entry only if that
	// entry was the one in flight: the session's only batch, unacked. Any
	// other batch in flight may be the one too large, applied by a hub
	// that acks only at its commits.
	ended := func(err error) (bool, error) {
		select {
		case a := <-ackCh:
			onAck(a)
		default:
		}
		alone := sentN == 1 && firstN == 1 && floor < firstSent
		return progressed, u.refused(err, firstSent, alone)
	}
	for {
		from = max(from, floor+1)
		next, grew := u.ob.Committed()
		// Once batches are cut to one entry (ResourceExhausted), the
		// session's first batch goes alone until it is acked: if it is
		// the one too large, the hub's answer says so for sure.
		probing := batchCap == 1 && sentN == 1 && floor < firstSent
		if room := u.cfg.MaxUnacked - int(from-1-floor); from < next && room > 0 && !probing {
			items := min(u.cfg.BatchEntries, room, lim.MaxBatchItems)
			if batchCap > 0 {
				items = min(items, batchCap)
			}
			msg, first, last, refused, err := b.build(u.ob, u.cfg.EdgeID, epoch, from, next, items, lim)
			if err != nil {
				return progressed, outboxError{err}
			}
			if len(refused) > 0 { // beyond the hub's limits: never sent
				if err := u.quarantine(refused); err != nil {
					return progressed, err
				}
				continue
			}
			if msg == nil { // nothing left to read below next: wait for a commit
				from = next
				continue
			}
			if from-1 == floor && first > from {
				floor = first - 1
			}
			if firstSent == 0 {
				firstSent, firstN = first, int(last-first+1)
			}
			if err := stream.Send(msg); err != nil {
				// The stream ended (Send says only io.EOF): the receiver
				// has the hub's status.
				rerr := <-recvDone
				recvDone <- rerr
				return ended(rerr)
			}
			sentN++
			u.batches.Add(1)
			u.sent.Store(last)
			from = last + 1
			continue
		}
		select {
		case <-ctx.Done():
			return progressed, ctx.Err()
		case err := <-recvDone:
			recvDone <- err // for the deferred wait
			return ended(err)
		case a := <-ackCh:
			onAck(a)
		case <-grew:
		}
	}
}

// refused decides what a stream's end means. A Refusal detail names
// entries the hub will never take: they are quarantined (errQuarantined).
// Any other InvalidArgument refuses the batch as a whole: reported, and
// retried after the back-off; so does a Refusal that names only entries
// the hub was not sent as partials (quarantine would change nothing). ResourceExhausted (a message over the hub's
// limit, from a hub that announced none or a smaller one) halves the
// entries per batch; when the batch refused is surely the single entry
// first (alone: the session's only batch, unacked), that entry is the one
// too large: quarantined.
func (u *Uplink) refused(err error, first uint64, alone bool) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.InvalidArgument:
		var rs []Refused
		var named []*runnelv1.RefusedEntry
		for _, d := range st.Details() {
			if r, ok := d.(*runnelv1.Refusal); ok {
				for _, e := range r.Entries {
					named = append(named, e)
					ok, rerr := u.sentAsPartial(e.Seq)
					if rerr != nil {
						return outboxError{rerr}
					}
					if ok {
						rs = append(rs, Refused{Seq: e.Seq, Reason: "hub: " + e.Reason})
					}
				}
			}
		}
		if len(rs) == 0 {
			// Naming only entries that go as sequence numbers (markers,
			// entries quarantined before) or are gone, the hub refuses
			// what quarantine cannot change: at once again would loop.
			why := "the hub refuses batches: " + st.Message()
			if len(named) > 0 {
				why = fmt.Sprintf("the hub refuses batches for entries it was not sent as partials (%d; entry %d: %s): %s",
					len(named), named[0].Seq, named[0].Reason, st.Message())
			}
			u.setRefusal(why)
			return err
		}
		if qerr := u.quarantine(rs); qerr != nil {
			return qerr
		}
		return errQuarantined
	case codes.ResourceExhausted:
		u.mu.Lock()
		if u.batchCap == 0 {
			u.batchCap = u.cfg.BatchEntries
		}
		u.batchCap = max(1, u.batchCap/2)
		u.mu.Unlock()
		if alone {
			if qerr := u.quarantine([]Refused{{Seq: first, Reason: "a batch of this entry alone is larger than the hub accepts: " + st.Message()}}); qerr != nil {
				return qerr
			}
			// The entry too large is set aside: batches go back to their
			// size (another such entry halves them again).
			u.mu.Lock()
			u.batchCap = 0
			u.mu.Unlock()
			return errQuarantined
		}
	}
	return err
}

// sentAsPartial reports whether the outbox entry seq is one that goes to
// the hub as a partial: there, not a marker, not Local.
func (u *Uplink) sentAsPartial(seq uint64) (bool, error) {
	ok := false
	err := u.ob.Read(seq, func(e *Entry) bool {
		ok = e.Seq == seq && !e.Local && !e.Marker
		return false
	})
	if err != nil {
		return false, fmt.Errorf("uplink: read entry %d: %w", seq, err)
	}
	return ok, nil
}

// quarantine sets rs aside through the outbox and notes it.
func (u *Uplink) quarantine(rs []Refused) error {
	if err := u.ob.Quarantine(rs); err != nil {
		return outboxError{fmt.Errorf("uplink: quarantine: %w", err)}
	}
	last := rs[len(rs)-1]
	u.quarantined.Add(uint64(len(rs)))
	u.mu.Lock()
	u.lastQ, u.lastQAt = fmt.Sprintf("entry %d: %s", last.Seq, last.Reason), time.Now()
	u.mu.Unlock()
	u.lg.Warn("uplink: entries the hub will never accept set aside (runnel-edge outbox --side quarantine)",
		"entries", len(rs), "first", rs[0].Seq, "reason", rs[0].Reason)
	return nil
}

// limitsOf returns the hub's announced limits, DefaultLimits where it
// announced none.
func limitsOf(l *runnelv1.Limits) Limits {
	lim := DefaultLimits
	if l == nil {
		return lim
	}
	set := func(dst *int, v uint32) {
		if v > 0 {
			*dst = int(v)
		}
	}
	set(&lim.MaxKeyBytes, l.MaxKeyBytes)
	set(&lim.MaxStateBytes, l.MaxStateBytes)
	set(&lim.MaxBatchBytes, l.MaxBatchBytes)
	set(&lim.MaxBatchItems, l.MaxBatchPartials)
	return lim
}

// recvErr returns the stream's status when Send failed because the
// stream ended (Send reports only io.EOF then). Only before the receiver
// goroutine runs.
func recvErr(stream grpc.BidiStreamingClient[runnelv1.SyncRequest, runnelv1.SyncResponse], err error) error {
	if _, rerr := stream.Recv(); rerr != nil {
		return rerr
	}
	return err
}

func (u *Uplink) noteAck(seq uint64) {
	u.acked.Store(seq)
	if seq > 0 {
		u.ob.Ack(seq)
	}
}

func (u *Uplink) startEpoch(epoch uint64, why string) error {
	u.lg.Warn("uplink: starting a new epoch and resending the outbox (if another edge runs with this id, stop it)",
		"epoch", epoch, "why", why)
	if err := u.ob.SetEpoch(epoch); err != nil {
		return outboxError{fmt.Errorf("uplink: store epoch %d: %w", epoch, err)}
	}
	u.epoch.Store(epoch)
	u.newEpochs.Add(1)
	u.mu.Lock()
	u.epochAt = time.Now()
	if len(u.epochs) == 8 {
		u.epochs = append(u.epochs[:0], u.epochs[1:]...)
	}
	u.epochs = append(u.epochs, u.epochAt)
	u.mu.Unlock()
	return errNewEpoch
}

// batcher builds Batches, reusing its buffers across batches (the stream
// has serialized a message by the time Send returns).
type batcher struct {
	msg      runnelv1.Batch
	req      runnelv1.SyncRequest
	partials []runnelv1.Partial
	ptrs     []*runnelv1.Partial
	wms      map[wmKey]*runnelv1.Watermark
	buf      []byte // copies of keys and states: entries are valid only in Read's callback
}

// wmKey names the watermark of one revision of a pipeline in a batch.
type wmKey struct {
	pipeline string
	revision uint32
}

// build reads entries [from, to) up to max of them, within the hub's
// limits lim, and returns the batch with its first and last sequence
// numbers; nil when there is none. An entry beyond lim is refused instead:
// then no batch is returned, but the refused entries found from there on
// (among at most max), for the caller to quarantine before it builds again.
func (b *batcher) build(ob Outbox, edge string, epoch, from, to uint64, max int, lim Limits) (*runnelv1.SyncRequest, uint64, uint64, []Refused, error) {
	b.partials, b.ptrs, b.buf = b.partials[:0], b.ptrs[:0], b.buf[:0]
	if b.wms == nil {
		b.wms = map[wmKey]*runnelv1.Watermark{}
	}
	clear(b.wms)
	var firstSeq, last uint64
	n := 0
	base := batchOverhead + len(edge) // the batch without its partials
	bytes := base
	type span struct{ k0, k1, s0, s1 int }
	var spans []span
	var refused []Refused
	err := ob.Read(from, func(e *Entry) bool {
		if e.Seq >= to || n == max {
			return false
		}
		var size int
		switch {
		case e.Local:
		case e.Marker:
			if _, ok := b.wms[wmKey{e.Pipeline, e.Revision}]; !ok {
				size = partialOverhead + len(e.Pipeline)
			}
		default:
			size = partialOverhead + len(e.Pipeline) + len(e.Key) + len(e.State)
			if why := lim.refuse(e, size, base); why != "" {
				refused = append(refused, Refused{Seq: e.Seq, Reason: why})
			}
		}
		if refused != nil {
			n++
			return true // only looking for more to refuse now
		}
		if n > 0 && bytes+size > lim.MaxBatchBytes {
			return false
		}
		bytes += size
		if n == 0 {
			firstSeq = e.Seq
		}
		n++
		last = e.Seq
		if e.Local {
			return true
		}
		if e.Marker {
			b.wms[wmKey{e.Pipeline, e.Revision}] = &runnelv1.Watermark{Pipeline: e.Pipeline, WatermarkMs: e.Watermark, Revision: e.Revision}
			return true
		}
		k0 := len(b.buf)
		b.buf = append(b.buf, e.Key...)
		s0 := len(b.buf)
		b.buf = append(b.buf, e.State...)
		spans = append(spans, span{k0, s0, s0, len(b.buf)})
		b.partials = append(b.partials, runnelv1.Partial{Seq: e.Seq, Pipeline: e.Pipeline, Revision: e.Revision,
			WindowStart: e.Start, WindowEnd: e.End, Version: e.Version})
		return true
	})
	if err != nil || refused != nil || n == 0 {
		return nil, 0, 0, refused, err
	}
	// Slices into buf are taken once it has stopped growing.
	for i := range b.partials {
		p, s := &b.partials[i], spans[i]
		p.Key, p.State = b.buf[s.k0:s.k1:s.k1], b.buf[s.s0:s.s1:s.s1]
		b.ptrs = append(b.ptrs, p)
	}
	b.msg = runnelv1.Batch{EdgeId: edge, Epoch: epoch, FirstSeq: firstSeq, LastSeq: last, Partials: b.ptrs}
	for _, w := range b.wms {
		b.msg.Watermarks = append(b.msg.Watermarks, w)
	}
	b.req.Msg = &runnelv1.SyncRequest_Batch{Batch: &b.msg}
	return &b.req, firstSeq, last, nil, nil
}

// Upper bounds of the encoded size of a batch's fixed fields and of one
// partial's (or watermark's) beyond its pipeline name, key and state:
// tags, lengths and varints at their longest.
const (
	batchOverhead   = 64
	partialOverhead = 64
)

// refuse says why the hub would never take the partial e, whose encoded
// size is at most size in a batch of at most base bytes without it, or "".
func (l Limits) refuse(e *Entry, size, base int) string {
	switch {
	case len(e.Key) > l.MaxKeyBytes:
		return fmt.Sprintf("key of %d bytes; the hub accepts at most %d", len(e.Key), l.MaxKeyBytes)
	case len(e.State) > l.MaxStateBytes:
		return fmt.Sprintf("aggregate state of %d bytes; the hub accepts at most %d", len(e.State), l.MaxStateBytes)
	case base+size > l.MaxBatchBytes:
		return fmt.Sprintf("entry of about %d bytes, more than a batch the hub accepts (%d bytes)", size, l.MaxBatchBytes)
	}
	return ""
}
