// Package strictjson finds what encoding/json silently accepts in input
// that this service must refuse: object member names that appear twice.
//
// RFC 8259 leaves the meaning of a repeated name to the reader, and readers
// disagree: encoding/json (and Jackson, by default) keep the last value,
// many gateways, WAFs and log pipelines keep the first. A body such as
// {"orderId":1002,"orderId":1001} would then be one charge to the audit
// trail and another to this service. Both adapters that take JSON from
// outside (internal/http for requests, internal/consumer for Kafka order
// events) refuse such input with this package, before they decode it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// DuplicateKeys returns the path of every object member whose name repeats
// an earlier name of the same object, at any depth, in the order found:
// "orderId" at the top level, "payer.id" in a nested object,
// "items[2].sku" in an array. Names are compared after unescaping, so
// "order\u0049d" repeats "orderId"; they are compared exactly, as this
// service's decoders match them (case matters).
//
// It returns nil when data has no repeated name, and also when data is not
// valid JSON: the caller's decoder reports that. The work is one pass over
// the tokens, linear in len(data); numbers are never converted.
func DuplicateKeys(data []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a number stays text: no float or big-number work
	s := scanner{dec: dec}
	if err := s.value(); err != nil {
		return nil
	}
	return s.dups
}

// scanner walks one JSON value with the decoder's tokens. path is the
// current position, built into a string only when a duplicate is reported.
type scanner struct {
	dec  *json.Decoder
	path []segment
	dups []string
}

type segment struct {
	name  string
	index int // for an array element; name is then ""
	array bool
}

func (s *scanner) value() error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := make(map[string]bool)
		for s.dec.More() {
			tok, err := s.dec.Token()
			if err != nil {
				return err
			}
			name, _ := tok.(string) // the decoder only returns a string here
			s.path = append(s.path, segment{name: name})
			if seen[name] {
				s.dups = append(s.dups, s.pathString())
			}
			seen[name] = true
			if err := s.value(); err != nil {
				return err
			}
			s.path = s.path[:len(s.path)-1]
		}
		_, err = s.dec.Token() // '}'
		return err
	case json.Delim('['):
		for i := 0; s.dec.More(); i++ {
			s.path = append(s.path, segment{index: i, array: true})
			if err := s.value(); err != nil {
				return err
			}
			s.path = s.path[:len(s.path)-1]
		}
		_, err = s.dec.Token() // ']'
		return err
	}
	return nil
}

func (s *scanner) pathString() string {
	var b strings.Builder
	for i, seg := range s.path {
		switch {
		case seg.array:
			b.WriteString("[" + strconv.Itoa(seg.index) + "]")
		case i > 0:
			b.WriteString("." + seg.name)
		default:
			b.WriteString(seg.name)
		}
	}
	return b.String()
}
