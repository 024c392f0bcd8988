package idempotent

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Message is one record to publish. Messages with the same Key go to the same
// partition and keep their relative order. A nil Key lets the balancer pick
// a partition (at random for the default balancer), so ordering then holds
// only within one Publish call's batch.
type Message struct {
	Key     []byte
	Value   []byte
	Headers []Header
}
