package idempotent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/protocol"
)

// TestStampProducerRoundTrip encodes batches, stamps them, and decodes them
// with kafka-go's own record-set reader, which verifies the CRC-32C: the
// stamped fields must come back and the records must be untouched.
func TestStampProducerRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		msgs  []Message
		id    int64
		epoch int16
		seq   int32
	}{
		{"one record", []Message{{Key: []byte("k"), Value: []byte("v")}}, 1, 0, 0},
		{"nil key and empty value", []Message{{Key: nil, Value: []byte{}}}, 42, 7, 5},
		{"headers", []Message{{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "h1", Value: []byte("x")}, {Key: "h2"}}}}, 3, 1, 100},
		{"many records", manyMessages(500), math.MaxInt64, math.MaxInt16, math.MaxInt32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw, err := encodeBatch(tt.msgs, time.UnixMilli(1_700_000_000_000))
			if err != nil {
				t.Fatal(err)
			}
			if err := stampProducer(raw[4:], tt.id, tt.epoch, tt.seq); err != nil {
				t.Fatal(err)
			}

			var rs protocol.RecordSet
			if _, err := rs.ReadFrom(bytes.NewReader(raw)); err != nil {
				t.Fatalf("decode stamped batch: %v", err)
			}
			stream, ok := rs.Records.(*protocol.RecordStream)
			if !ok || len(stream.Records) != 1 {
				t.Fatalf("decoded %T (%+v), want one record batch", rs.Records, rs.Records)
			}
			rb, ok := stream.Records[0].(*protocol.RecordBatch)
			if !ok {
				t.Fatalf("decoded %T, want *protocol.RecordBatch", stream.Records[0])
			}
			if rb.ProducerID != tt.id || rb.ProducerEpoch != tt.epoch || rb.BaseSequence != tt.seq {
				t.Fatalf("decoded producer fields (%d, %d, %d), want (%d, %d, %d)",
					rb.ProducerID, rb.ProducerEpoch, rb.BaseSequence, tt.id, tt.epoch, tt.seq)
			}
			for i, want := range tt.msgs {
				r, err := rb.ReadRecord()
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				key, val := readAllBytes(t, r.Key), readAllBytes(t, r.Value)
				if (want.Key == nil) != (key == nil) || !bytes.Equal(key, want.Key) || !bytes.Equal(val, want.Value) {
					t.Fatalf("record %d = (%q, %q), want (%q, %q)", i, key, val, want.Key, want.Value)
				}
				if len(r.Headers) != len(want.Headers) {
					t.Fatalf("record %d has %d headers, want %d", i, len(r.Headers), len(want.Headers))
				}
				for j, h := range want.Headers {
					if r.Headers[j].Key != h.Key || !bytes.Equal(r.Headers[j].Value, h.Value) {
						t.Fatalf("record %d header %d = %q=%q, want %q=%q", i, j, r.Headers[j].Key, r.Headers[j].Value, h.Key, h.Value)
					}
				}
			}
			if _, err := rb.ReadRecord(); !errors.Is(err, io.EOF) {
				t.Fatalf("extra record after %d: err=%v", len(tt.msgs), err)
			}
		})
	}
}

// TestStampProducerOffsets checks the header bytes directly against the
// record batch layout: the three producer fields land at 43, 51 and 53, the
// CRC at 17 covers 21..end, and no other byte changes.
func TestStampProducerOffsets(t *testing.T) {
	t.Parallel()
	raw, err := encodeBatch([]Message{{Key: []byte("k"), Value: []byte("value")}, {Value: []byte("v2")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	batch := raw[4:]
	before := bytes.Clone(batch)

	// kafka-go leaves the fields at -1: the batch is not idempotent yet.
	if got := int64(binary.BigEndian.Uint64(before[43:])); got != -1 {
		t.Fatalf("unstamped producerId = %d, want -1", got)
	}
	if got := int32(binary.BigEndian.Uint32(before[57:])); got != 2 {
		t.Fatalf("record count at 57 = %d, want 2", got)
	}

	const (
		id    = int64(0x0102030405060708)
		epoch = int16(0x0a0b)
		seq   = int32(0x11223344)
	)
	if err := stampProducer(batch, id, epoch, seq); err != nil {
		t.Fatal(err)
	}
	wantBytes := map[int][]byte{
		43: {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08},
		51: {0x0a, 0x0b},
		53: {0x11, 0x22, 0x33, 0x44},
	}
	for off, want := range wantBytes {
		if got := batch[off : off+len(want)]; !bytes.Equal(got, want) {
			t.Errorf("bytes at %d = % x, want % x", off, got, want)
		}
	}
	if got, want := binary.BigEndian.Uint32(batch[17:]), crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)); got != want {
		t.Errorf("crc at 17 = %#x, want CRC-32C of bytes 21.. = %#x", got, want)
	}
	for i := range batch {
		inField := (i >= 17 && i < 21) || (i >= 43 && i < 57)
		if !inField && batch[i] != before[i] {
			t.Errorf("byte %d changed from %#x to %#x", i, before[i], batch[i])
		}
	}
}

func TestStampProducerRejectsMalformed(t *testing.T) {
	t.Parallel()
	raw, err := encodeBatch([]Message{{Value: []byte("v")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	good := raw[4:]
	tests := []struct {
		name   string
		mangle func([]byte) []byte
	}{
		{"too short", func(b []byte) []byte { return b[:60] }},
		{"wrong magic", func(b []byte) []byte { b[16] = 1; return b }},
		{"length mismatch", func(b []byte) []byte { return append(b, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.mangle(bytes.Clone(good))
			if err := stampProducer(b, 1, 0, 0); err == nil {
				t.Fatal("stampProducer accepted a malformed batch")
			}
		})
	}
}

func TestNextSequenceWraps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		seq  int32
		n    int
		want int32
	}{
		{0, 1, 1},
		{5, 10, 15},
		{math.MaxInt32 - 1, 1, math.MaxInt32},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 1, 3, 1},
	}
	for _, tt := range tests {
		if got := nextSequence(tt.seq, tt.n); got != tt.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", tt.seq, tt.n, got, tt.want)
		}
	}
}

func TestEncodeBatchEmpty(t *testing.T) {
	t.Parallel()
	if _, err := encodeBatch(nil, time.Now()); err == nil {
		t.Fatal("encodeBatch(nil) succeeded")
	}
}

func manyMessages(n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Key: []byte(fmt.Sprintf("key-%d", i%7)), Value: []byte(fmt.Sprintf("value-%d", i))}
	}
	return msgs
}

func readAllBytes(t *testing.T, b protocol.Bytes) []byte {
	t.Helper()
	if b == nil {
		return nil
	}
	defer b.Close() //nolint:errcheck // a record's bytes, read: closing hands their buffer back
	out, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecoderChecksCRC makes sure the round-trip test means something:
// kafka-go's reader rejects a batch whose producer fields changed after the
// CRC was computed, just as a broker answers CORRUPT_MESSAGE.
func TestDecoderChecksCRC(t *testing.T) {
	t.Parallel()
	raw, err := encodeBatch([]Message{{Value: []byte("v")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := stampProducer(raw[4:], 9, 0, 0); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(raw[4+53:], 1) // base sequence, CRC not updated
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(raw)); err == nil {
		t.Fatal("decoder accepted a batch with a stale CRC")
	}
}
