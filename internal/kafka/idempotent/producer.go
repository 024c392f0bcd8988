package idempotent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/example/payment-service/internal/backoff"
)

// Config configures a Producer. Only Brokers and Topic are required.
//
// Acks and in-flight limits are not configurable: R-DIST-IDEM-X2 fixes them
// (acks=all; at most one batch in flight per partition, within the rule's
// bound of five), and idempotence is meaningless without them.
type Config struct {
	// Brokers are bootstrap addresses, host:port.
	Brokers []string
	// Topic is the topic every message is written to. It must exist; the
	// producer never creates topics.
	Topic string

	// Balancer maps a message to a partition. It is called concurrently.
	// Defaults to kafka.Murmur2Balancer{}, the Java client's default
	// partitioner for keyed records, so a Go and a Java producer put a key
	// on the same partition.
	Balancer kafka.Balancer

	// RequestTimeout bounds one produce attempt, including waiting for all
	// in-sync replicas. Defaults to 10s. Half of it is sent to the broker
	// as the produce timeout (kafka-go's convention), leaving room for the
	// network.
	RequestTimeout time.Duration
	// RetryBackoff is the first pause between attempts; it doubles per
	// attempt up to MaxRetryBackoff, with jitter. Defaults 100ms and 1s.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the pause between attempts.
	MaxRetryBackoff time.Duration

	// MaxBatchBytes caps the estimated encoded size of one record batch;
	// a Publish with more data for one partition sends several batches in
	// order. Must stay below the broker's message.max.bytes. Defaults to
	// 900 KiB (Kafka's default limit is about 1 MiB).
	MaxBatchBytes int

	// MetadataTTL bounds how stale the cached partition and leader layout
	// may get before it is refreshed. Defaults to 2s.
	MetadataTTL time.Duration

	// Dial, if set, opens connections to brokers (for example through a
	// proxy or with custom socket options). Defaults to a net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	// ClientID is sent to brokers to identify this producer in their logs.
	ClientID string
}

const (
	defaultRequestTimeout  = 10 * time.Second
	defaultRetryBackoff    = 100 * time.Millisecond
	defaultMaxRetryBackoff = time.Second
	defaultMaxBatchBytes   = 900 << 10
	defaultMetadataTTL     = 2 * time.Second
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("idempotent: producer closed")

// Marks on the errors Publish returns, for callers that must decide what
// to do next (errors.Is):
var (
	// ErrFatal: the producer is stopped for good (PRODUCER_FENCED); every
	// later Publish returns this error. Build a new Producer.
	ErrFatal = errors.New("idempotent: producer stopped for good")
	// ErrRefused: the broker refused the records for good (too large, not
	// authorized, invalid record, policy). The producer stays usable, but
	// publishing the same records again gets the same answer.
	ErrRefused = errors.New("idempotent: records refused by the broker")
)

// Producer publishes to one topic with idempotent, acks=all produce
// requests. It is safe for concurrent use.
type Producer struct {
	cfg       Config
	client    *kafka.Client
	transport *kafka.Transport

	// idTurn holds one token; its holder owns ident, the producer identity
	// new sequence spaces start from. A channel rather than a mutex so
	// that waiting for it respects the caller's context while another
	// goroutine is in an InitProducerID round trip.
	idTurn chan struct{}
	ident  identity

	// fatalMu guards fatal, the error that stops the producer for good.
	fatalMu sync.Mutex
	fatal   error

	partsMu sync.Mutex
	parts   map[int]*partitionState

	closeOnce sync.Once
	closed    chan struct{}
	// stopTransport ends the transport's background metadata refresh,
	// including for connection pools a racing Publish creates after Close.
	stopTransport context.CancelFunc
}

// identity is a producer id and epoch as returned by InitProducerID.
type identity struct {
	id    int64
	epoch int16
}

func (i identity) valid() bool { return i.id >= 0 }

var noIdentity = identity{id: -1, epoch: -1}

// partitionState is the sequence bookkeeping of one partition.
type partitionState struct {
	// turn holds one token. Whoever holds it owns the fields below and is
	// the partition's only in-flight batch.
	turn chan struct{}

	ident identity // producer identity the sequence below belongs to
	seq   int32    // base sequence of the next new batch
	// burned means sequence numbers at or after seq under ident may
	// already be taken on the broker by a batch whose outcome we never
	// learned. Reusing them for other records would be fatal: the broker
	// deduplicates by producer id and sequence range, so it could
	// acknowledge the new batch as a "duplicate" and drop it. The next
	// batch therefore starts a new sequence space under a newer identity.
	burned bool
}

// New returns a Producer for cfg. It does not contact the brokers; the
// first Publish does.
func New(cfg Config) (*Producer, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("idempotent: no brokers")
	}
	if cfg.Topic == "" {
		return nil, errors.New("idempotent: no topic")
	}
	if cfg.Balancer == nil {
		cfg.Balancer = kafka.Murmur2Balancer{}
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = defaultRetryBackoff
	}
	if cfg.MaxRetryBackoff <= 0 {
		cfg.MaxRetryBackoff = defaultMaxRetryBackoff
	}
	cfg.MaxRetryBackoff = max(cfg.MaxRetryBackoff, cfg.RetryBackoff)
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = defaultMaxBatchBytes
	}
	if cfg.MetadataTTL <= 0 {
		cfg.MetadataTTL = defaultMetadataTTL
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	trCtx, stopTransport := context.WithCancel(context.Background())
	tr := &kafka.Transport{
		Context:        trCtx,
		Dial:           cfg.Dial,
		MetadataTTL:    cfg.MetadataTTL,
		MetadataTopics: []string{cfg.Topic},
		ClientID:       cfg.ClientID,
	}
	idTurn := make(chan struct{}, 1)
	idTurn <- struct{}{}
	return &Producer{
		cfg:       cfg,
		transport: tr,
		client: &kafka.Client{
			Addr:      kafka.TCP(cfg.Brokers...),
			Transport: tr,
			// kafka-go derives the broker-side produce timeout from
			// this (half of it); without it the broker would give up
			// on replication after kafka-go's 500 ms default.
			Timeout: cfg.RequestTimeout,
		},
		idTurn: idTurn,
		ident:  noIdentity,
		parts:  make(map[int]*partitionState),
		closed: make(chan struct{}),

		stopTransport: stopTransport,
	}, nil
}

// Close stops the producer and closes its connections. Publish calls still
// running may fail; later ones return ErrClosed.
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		p.stopTransport()
		p.transport.CloseIdleConnections()
	})
	return nil
}

// Publish writes msgs and returns once every one of them is acknowledged by
// all in-sync replicas (acks=all), or with an error when ctx ends first or
// the broker rejects a batch for good. On error, some messages may have been
// written (see the package documentation). Messages for the same partition
// are written in the order given, in as few batches as MaxBatchBytes allows.
func (p *Producer) Publish(ctx context.Context, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := p.usable(); err != nil {
		return err
	}
	ids, err := p.partitions(ctx)
	if err != nil {
		return err
	}

	byPart := make(map[int][]Message)
	var order []int
	for _, m := range msgs {
		part := p.cfg.Balancer.Balance(kafka.Message{Key: m.Key, Value: m.Value}, ids...)
		if _, ok := byPart[part]; !ok {
			order = append(order, part)
		}
		byPart[part] = append(byPart[part], m)
	}

	if len(order) == 1 {
		return p.publishPartition(ctx, order[0], byPart[order[0]])
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, part := range order {
		wg.Go(func() { errs[i] = p.publishPartition(ctx, part, byPart[part]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *Producer) usable() error {
	select {
	case <-p.closed:
		return ErrClosed
	default:
	}
	p.fatalMu.Lock()
	defer p.fatalMu.Unlock()
	return p.fatal
}

// partitions returns the topic's partition ids, sorted, from the transport's
// metadata cache. A topic missing from metadata is retried until ctx ends:
// right after creation it may not have reached every broker yet.
func (p *Producer) partitions(ctx context.Context) ([]int, error) {
	b := p.newBackoff()
	for {
		ids, err := p.partitionsOnce(ctx)
		if err == nil {
			return ids, nil
		}
		if werr := b.wait(ctx); werr != nil {
			return nil, fmt.Errorf("idempotent: metadata for topic %q: %w", p.cfg.Topic, withLast(werr, err))
		}
	}
}

func (p *Producer) partitionsOnce(ctx context.Context) ([]int, error) {
	md, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{p.cfg.Topic}})
	if err != nil {
		return nil, err
	}
	for _, t := range md.Topics {
		if t.Name != p.cfg.Topic {
			continue
		}
		if t.Error != nil {
			return nil, t.Error
		}
		if len(t.Partitions) == 0 {
			return nil, kafka.UnknownTopicOrPartition
		}
		ids := make([]int, len(t.Partitions))
		for i, part := range t.Partitions {
			ids[i] = part.ID
		}
		slices.Sort(ids)
		return ids, nil
	}
	return nil, kafka.UnknownTopicOrPartition
}

// publishPartition sends msgs to one partition as consecutive batches while
// holding the partition's turn.
func (p *Producer) publishPartition(ctx context.Context, part int, msgs []Message) error {
	ps := p.partition(part)
	select {
	case <-ps.turn:
	case <-ctx.Done():
		return fmt.Errorf("idempotent: partition %d: waiting for turn: %w", part, ctx.Err())
	}
	defer func() { ps.turn <- struct{}{} }()

	for len(msgs) > 0 {
		n := p.batchLen(msgs)
		if err := p.sendBatch(ctx, ps, part, msgs[:n]); err != nil {
			return fmt.Errorf("idempotent: partition %d: %w", part, err)
		}
		msgs = msgs[n:]
	}
	return nil
}

// batchLen returns how many leading msgs fit in one batch (at least one: a
// single oversized message is sent alone and the broker judges it).
func (p *Producer) batchLen(msgs []Message) int {
	size := 0
	for i, m := range msgs {
		size += messageSize(m)
		if size > p.cfg.MaxBatchBytes && i > 0 {
			return i
		}
	}
	return len(msgs)
}

func (p *Producer) partition(part int) *partitionState {
	p.partsMu.Lock()
	defer p.partsMu.Unlock()
	ps, ok := p.parts[part]
	if !ok {
		ps = &partitionState{turn: make(chan struct{}, 1), ident: noIdentity}
		ps.turn <- struct{}{}
		p.parts[part] = ps
	}
	return ps
}

// sendBatch writes one batch to one partition and returns once it is
// acknowledged. The caller holds ps.turn.
func (p *Producer) sendBatch(ctx context.Context, ps *partitionState, part int, msgs []Message) error {
	raw, err := encodeBatch(msgs, time.Now())
	if err != nil {
		return err
	}
	batch := raw[4:] // after the produce request's size prefix

	if !ps.ident.valid() || ps.burned {
		if err := p.renewSequenceSpace(ctx, ps); err != nil {
			return err
		}
	}
	if err := stampProducer(batch, ps.ident.id, ps.ident.epoch, ps.seq); err != nil {
		return err
	}

	// unknown records whether any attempt may have reached the broker
	// without us learning the outcome. If we give up in that state, the
	// sequence numbers of this batch must never be reused.
	unknown := false
	giveUp := func(err error) error {
		if unknown {
			ps.burned = true
		}
		return err
	}

	b := p.newBackoff()
	var lastErr error
	for {
		if err := ctx.Err(); err != nil {
			return giveUp(withLast(err, lastErr))
		}
		if err := p.usable(); err != nil {
			return giveUp(err)
		}

		res, err := p.produce(ctx, part, raw)
		switch {
		case err != nil:
			// Network error, timeout, connection closed before the
			// response: the broker may have appended the batch. Resend
			// the same bytes; the sequence makes that safe.
			unknown = true
			lastErr = err

		case res.Error == nil, errors.Is(res.Error, kafka.DuplicateSequenceNumber):
			ps.seq = nextSequence(ps.seq, len(msgs))
			return nil

		case errors.Is(res.Error, kafka.OutOfOrderSequenceNumber), errors.Is(res.Error, kafka.UnknownProducerId):
			// The broker's state for our sequence space is gone or
			// diverged; see the package documentation. Retry this
			// batch from sequence 0 under a new producer id.
			lastErr = res.Error
			if err := p.renewSequenceSpace(ctx, ps); err != nil {
				return giveUp(fmt.Errorf("%w (after %w)", err, lastErr))
			}
			if err := stampProducer(batch, ps.ident.id, ps.ident.epoch, ps.seq); err != nil {
				return err
			}
			// Back off like any retry: a broker that kept answering
			// this way must not make us spin through producer ids.

		case errors.Is(res.Error, kafka.ProducerFenced):
			p.setFatal(fmt.Errorf("%w: producer id %d epoch %d fenced: %w", ErrFatal, ps.ident.id, ps.ident.epoch, res.Error))
			ps.burned = true
			return p.usable()

		case errors.Is(res.Error, kafka.InvalidProducerEpoch):
			ps.burned = true
			return res.Error

		case isRetriable(res.Error):
			// NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
			// REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), ...
			// Some of these (request timed out, not enough replicas
			// after append) come after a local append.
			unknown = true
			lastErr = res.Error

		default:
			// The broker refused this batch for good (too large,
			// invalid record, authorization). This attempt appended
			// nothing; an earlier one may have.
			return giveUp(fmt.Errorf("%w: %w", ErrRefused, res.Error))
		}

		if err := b.wait(ctx); err != nil {
			return giveUp(withLast(err, lastErr))
		}
	}
}

// produce sends one attempt of a batch.
func (p *Producer) produce(ctx context.Context, part int, raw []byte) (*kafka.ProduceResponse, error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	res, err := p.client.RawProduce(actx, &kafka.RawProduceRequest{
		Topic:        p.cfg.Topic,
		Partition:    part,
		RequiredAcks: kafka.RequireAll,
		RawRecords:   protocol.RawRecordSet{Reader: bytes.NewReader(raw)},
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("no produce response")
	}
	return res, nil
}

// withLast adds the last attempt's error to err, which says why we stopped.
func withLast(err, last error) error {
	if last == nil {
		return err
	}
	return fmt.Errorf("%w (last error: %w)", err, last)
}

func isRetriable(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary()
	}
	// Not a broker error code: a transport-level failure.
	return true
}

// renewSequenceSpace starts the partition's sequence at 0 under an identity
// it has not used before: the current one for a partition that never had
// one, a newer one for a partition leaving its identity for good.
func (p *Producer) renewSequenceSpace(ctx context.Context, ps *partitionState) error {
	ident, err := p.acquireIdentity(ctx, ps.ident)
	if err != nil {
		return err
	}
	ps.ident, ps.seq, ps.burned = ident, 0, false
	return nil
}

// acquireIdentity returns a producer identity a partition may start a sequence
// space in. stale, if valid, is an identity that partition must not use
// again.
//
// Why a fresh producer id rather than the Java client's local epoch bump:
// the broker accepts sequence 0 from a producer id it has no state for
// (KIP-360), so a fresh id needs no coordination with other partitions'
// in-flight batches, which keep their own id until they finish. A local
// epoch bump changes the epoch of every partition at once; some brokers
// (kfake among them) then reject the other partitions' retries with the old
// epoch as INVALID_PRODUCER_EPOCH, which would turn a harmless resend into a
// failure. The cost is one InitProducerID round trip per recovery, which is
// rare.
//
// Invariant: a partition only ever adopts the current identity, and the
// current identity only moves forward, so a partition never returns to an
// identity it has left.
func (p *Producer) acquireIdentity(ctx context.Context, stale identity) (identity, error) {
	select {
	case <-p.idTurn:
	case <-ctx.Done():
		return noIdentity, fmt.Errorf("init producer id: %w", ctx.Err())
	}
	defer func() { p.idTurn <- struct{}{} }()
	if err := p.usable(); err != nil {
		return noIdentity, err
	}
	if p.ident.valid() && p.ident != stale {
		return p.ident, nil
	}
	b := p.newBackoff()
	for {
		ident, err := p.initProducerID(ctx)
		if err == nil {
			p.ident = ident
			return ident, nil
		}
		if werr := b.wait(ctx); werr != nil {
			return noIdentity, fmt.Errorf("init producer id: %w", withLast(werr, err))
		}
	}
}

func (p *Producer) initProducerID(ctx context.Context) (identity, error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	// No transactional id: an idempotent-only producer id.
	res, err := p.client.InitProducerID(actx, &kafka.InitProducerIDRequest{})
	if err != nil {
		return noIdentity, err
	}
	if res.Error != nil {
		return noIdentity, res.Error
	}
	if res.Producer == nil || res.Producer.ProducerID < 0 {
		return noIdentity, errors.New("broker returned no producer id")
	}
	return identity{id: int64(res.Producer.ProducerID), epoch: int16(res.Producer.ProducerEpoch)}, nil
}

func (p *Producer) setFatal(err error) {
	p.fatalMu.Lock()
	defer p.fatalMu.Unlock()
	if p.fatal == nil {
		p.fatal = err
	}
}

// retryPause is a retry loop's pause between attempts: an exponential
// backoff with jitter, that the producer's Close ends.
type retryPause struct {
	pauses *backoff.Backoff
	closed <-chan struct{} // the producer's: Close ends every retry loop
}

func (p *Producer) newBackoff() *retryPause {
	return &retryPause{pauses: backoff.New(p.cfg.RetryBackoff, p.cfg.MaxRetryBackoff), closed: p.closed}
}

// wait pauses before the next attempt, or returns ctx's error, or
// ErrClosed once the producer is closed (its transport then fails every
// request, so retrying until ctx ends would only hide the reason).
func (b *retryPause) wait(ctx context.Context) error {
	t := time.NewTimer(b.pauses.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closed:
		return ErrClosed
	}
}

// Byte offsets inside a v2 record batch ("magic 2", KIP-98), as specified in
// the Kafka protocol documentation, section "Record Batch":
//
//	baseOffset:           int64   @0
//	batchLength:          int32   @8   bytes after this field
//	partitionLeaderEpoch: int32   @12
//	magic:                int8    @16  must be 2
//	crc:                  uint32  @17  CRC-32C (Castagnoli) of bytes @21..end
//	attributes:           int16   @21
//	lastOffsetDelta:      int32   @23
//	baseTimestamp:        int64   @27
//	maxTimestamp:         int64   @35
//	producerId:           int64   @43
//	producerEpoch:        int16   @51
//	baseSequence:         int32   @53
//	records:              [Record] @57 (int32 count, then the records)
//
// All integers are big-endian.
const (
	offBatchLength   = 8
	offMagic         = 16
	offCRC           = 17
	offAttributes    = 21
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offRecordCount   = 57
	batchHeaderSize  = 61
)

// castagnoli is the CRC-32C table the record batch checksum uses.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stampProducer writes the idempotent producer's identity and the batch's
// first sequence number into an encoded v2 record batch and recomputes the
// batch CRC.
//
// kafka-go's protocol.RecordSet encoder leaves producerId, producerEpoch and
// baseSequence at -1 (a non-idempotent batch), and its Writer has no way to
// set them (segmentio/kafka-go#233). The broker deduplicates retried batches
// by exactly these three fields (R-DIST-IDEM-X2), so they are patched here.
// Because the CRC covers everything from the attributes field onwards, it
// must be recomputed after the patch or the broker answers CORRUPT_MESSAGE.
//
// batch starts at baseOffset (no size prefix) and is modified in place.
func stampProducer(batch []byte, producerID int64, producerEpoch int16, baseSequence int32) error {
	if len(batch) < batchHeaderSize {
		return fmt.Errorf("record batch too short: %d bytes", len(batch))
	}
	if magic := batch[offMagic]; magic != 2 {
		return fmt.Errorf("record batch magic %d, want 2", magic)
	}
	// batchLength counts the bytes after itself: all but baseOffset and
	// batchLength, 12 bytes.
	if n := int64(binary.BigEndian.Uint32(batch[offBatchLength:])); n != int64(len(batch))-12 {
		return fmt.Errorf("record batch length field %d, want %d", n, len(batch)-12)
	}
	binary.BigEndian.PutUint64(batch[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(batch[offProducerEpoch:], uint16(producerEpoch))
	binary.BigEndian.PutUint32(batch[offBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[offAttributes:], castagnoli))
	return nil
}

// encodeBatch renders msgs as one uncompressed v2 record batch, in the form
// a produce request carries it: an int32 size prefix followed by the batch.
// The producer fields are still -1; stampProducer sets them on raw[4:].
//
// The batch is encoded once and its bytes are reused verbatim for every
// retry, so a resend is byte-for-byte the batch the broker may already hold.
func encodeBatch(msgs []Message, now time.Time) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, errors.New("empty batch")
	}
	recs := make([]protocol.Record, len(msgs))
	for i, m := range msgs {
		var hs []protocol.Header
		if len(m.Headers) > 0 {
			hs = make([]protocol.Header, len(m.Headers))
			for j, h := range m.Headers {
				hs[j] = protocol.Header{Key: h.Key, Value: h.Value}
			}
		}
		recs[i] = protocol.Record{Time: now, Key: bytesOrNil(m.Key), Value: bytesOrNil(m.Value), Headers: hs}
	}
	var buf bytes.Buffer
	buf.Grow(batchHeaderSize + 4 + estimateSize(msgs))
	rs := protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(recs...)}
	if _, err := rs.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode record batch: %w", err)
	}
	raw := buf.Bytes()
	if len(raw) < 4+batchHeaderSize {
		return nil, fmt.Errorf("encoded record batch too short: %d bytes", len(raw))
	}
	return raw, nil
}

// bytesOrNil keeps a nil key nil (a null key on the wire) rather than
// turning it into an empty one; partitioners treat the two differently.
func bytesOrNil(b []byte) protocol.Bytes {
	if b == nil {
		return nil
	}
	return protocol.NewBytes(b)
}

// recordOverhead is a generous upper bound on a record's framing: length,
// attributes, timestamp and offset deltas, key/value lengths, header count.
const recordOverhead = 32

// estimateSize is an upper bound of the encoded size of msgs' records, used
// to keep batches under the broker's message.max.bytes.
func estimateSize(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += messageSize(m)
	}
	return n
}

func messageSize(m Message) int {
	n := recordOverhead + len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// nextSequence returns seq advanced by n records. Sequence numbers wrap from
// math.MaxInt32 to 0, as the Java client's DefaultRecordBatch.incrementSequence
// and the broker expect.
func nextSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}
