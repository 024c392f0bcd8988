package idempotent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/segmentio/kafka-go/protocol"
)

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
