package idempotent

// Header is a record header.
type Header struct {
	// Key is the header's name.
	Key string
	// Value is the header's value.
	Value []byte
}

// Message is one record to publish. Messages with the same Key go to the same
// partition and keep their relative order. A nil Key lets the balancer pick
// a partition (at random for the default balancer), so ordering then holds
// only within one Publish call's batch.
type Message struct {
	// Key picks the partition (Config.Balancer) and is sent as the record key.
	Key []byte
	// Value is the record value.
	Value []byte
	// Headers are sent with the record, in order.
	Headers []Header
}
