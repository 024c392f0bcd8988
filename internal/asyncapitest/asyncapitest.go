// Package asyncapitest holds Kafka records to the service's AsyncAPI
// contract (api/asyncapi.yaml, as embedded in package api): tests that
// publish records to the service, or read back what it published, call
// Validate on each record meant to be valid.
//
// A record is checked against the channel's message it names: the only
// message of the channel, or else the one whose name is the record's
// eventType (its header, or its value's member). Checked are:
//
//   - the value against the message's payload schema, with a real JSON
//     Schema validator (draft 2020-12, formats asserted, including the
//     document's own int64 and decimal-number); a JSON value must also be
//     one JSON value with no member name repeated in an object;
//   - the headers against the message's headers schema, and the eventId
//     and eventType headers against the value's members of those names;
//   - the key against the message's Kafka key schema, and, where the
//     message names the value's member the key carries (x-key-field), the
//     key against that member.
//
// The contract is loaded once per test binary.
package asyncapitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/segmentio/kafka-go"
	"go.yaml.in/yaml/v4"

	"github.com/example/payment-service/api"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/strictjson"
)

// Message is one Kafka record as the contract sees it. A header name that
// appears more than once keeps its last value.
type Message struct {
	Key     []byte
	Headers map[string]string
	Value   []byte
}

// Validate fails t unless the record (key, headers, value) is a valid
// message of channel, named by its id in the document (paymentCommands) or
// its address, the topic's default name (payment.commands). The failure
// names the channel, the message and every violation.
func Validate(t testing.TB, channel string, key []byte, headers map[string]string, value []byte) {
	t.Helper()
	if err := Check(channel, key, headers, value); err != nil {
		t.Errorf("%v\n  key %q, headers %v, value %s", err, key, headers, value)
	}
}

// ValidateAll validates each message as Validate does.
func ValidateAll(t testing.TB, channel string, msgs ...Message) {
	t.Helper()
	for _, m := range msgs {
		Validate(t, channel, m.Key, m.Headers, m.Value)
	}
}

// ValidateRecords validates records read back from a topic (kafkatest's
// ReadAll or Tail) as Validate does.
func ValidateRecords(t testing.TB, channel string, recs []kafkatest.Record) {
	t.Helper()
	for _, r := range recs {
		Validate(t, channel, r.Key, KafkaHeaders(r.Headers), r.Value)
	}
}

// KafkaHeaders is kafka-go's header list as Validate takes it.
func KafkaHeaders(hs []kafka.Header) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

// IdempotentHeaders is the service producer's header list as Validate
// takes it.
func IdempotentHeaders(hs []idempotent.Header) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

// Check is Validate's verdict as an error: nil for a valid message of
// channel.
func Check(channel string, key []byte, headers map[string]string, value []byte) error {
	c, err := load()
	if err != nil {
		return err
	}
	ch, ok := c.channels[channel]
	if !ok {
		return fmt.Errorf("asyncapi: no channel %q in api/asyncapi.yaml (channels: %s)", channel, strings.Join(c.channelNames(), ", "))
	}
	return ch.check(key, headers, value)
}

// ChannelOf is the id of the one channel with a message named eventType,
// such as paymentEvents for PaymentSucceeded.v1.
func ChannelOf(eventType string) (string, error) {
	c, err := load()
	if err != nil {
		return "", err
	}
	var found []string
	for _, ch := range c.ordered {
		for _, m := range ch.messages {
			if m.name == eventType {
				found = append(found, ch.id)
			}
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("asyncapi: %d channels have a message named %q: %v", len(found), eventType, found)
	}
	return found[0], nil
}

// Document is api/asyncapi.yaml as JSON values (map[string]any, []any,
// string, json.Number, bool, nil): numbers keep their text, so 0.0001 is
// exactly that.
func Document() (any, error) {
	return yamlToJSON(api.AsyncAPI)
}

// contract is the document, compiled.
type contract struct {
	channels map[string]*channel // by id and by address
	ordered  []*channel
}

type channel struct {
	id, address string
	messages    []*message
}

type message struct {
	id          string // the message's key in the channel
	name        string // the eventType it stands for
	contentType string
	payload     *jsonschema.Schema
	headers     *jsonschema.Schema // nil: none
	key         *jsonschema.Schema // nil: any key
	keyField    string             // the value's member the key carries, if any
}

var (
	loadOnce sync.Once
	loaded   *contract
	loadErr  error
)

func load() (*contract, error) {
	loadOnce.Do(func() { loaded, loadErr = compile() })
	return loaded, loadErr
}

func (c *contract) channelNames() []string {
	var names []string
	for _, ch := range c.ordered {
		names = append(names, ch.id+" ("+ch.address+")")
	}
	return names
}

// docURL is the document's base URL for the schema compiler; the $refs in
// it are relative to the document, so any absolute URL does.
const docURL = "file:///api/asyncapi.yaml"

func compile() (*contract, error) {
	doc, err := Document()
	if err != nil {
		return nil, fmt.Errorf("asyncapi: api/asyncapi.yaml: %w", err)
	}
	comp := NewCompiler()
	if err := comp.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	root, _ := doc.(map[string]any)
	channels, _ := root["channels"].(map[string]any)
	c := &contract{channels: map[string]*channel{}}
	for _, id := range sortedKeys(channels) {
		raw, _ := channels[id].(map[string]any)
		ch := &channel{id: id}
		ch.address, _ = raw["address"].(string)
		msgs, _ := raw["messages"].(map[string]any)
		for _, mid := range sortedKeys(msgs) {
			m, err := compileMessage(comp, doc, "/channels/"+escape(id)+"/messages/"+escape(mid))
			if err != nil {
				return nil, fmt.Errorf("asyncapi: channel %s, message %s: %w", id, mid, err)
			}
			m.id = mid
			ch.messages = append(ch.messages, m)
		}
		c.ordered = append(c.ordered, ch)
		c.channels[id] = ch
		if ch.address != "" {
			c.channels[ch.address] = ch
		}
	}
	return c, nil
}

// compileMessage compiles the message at ptr (following its $ref), with
// its traits: a property the message does not set is taken from its first
// trait that does, as AsyncAPI's trait merge has it.
func compileMessage(comp *jsonschema.Compiler, doc any, ptr string) (*message, error) {
	ptr, obj, err := deref(doc, ptr)
	if err != nil {
		return nil, err
	}
	// Each place a property may come from: the message, then its traits.
	type source struct {
		ptr string
		obj map[string]any
	}
	sources := []source{{ptr, obj}}
	traits, _ := obj["traits"].([]any)
	for i := range traits {
		tp, tobj, err := deref(doc, ptr+"/traits/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		sources = append(sources, source{tp, tobj})
	}
	// find returns the JSON pointer and value of a property path.
	find := func(path ...string) (string, any, bool) {
	sources:
		for _, s := range sources {
			var v any = s.obj
			p := s.ptr
			for _, name := range path {
				o, _ := v.(map[string]any)
				next, ok := o[name]
				if !ok {
					continue sources
				}
				v, p = next, p+"/"+escape(name)
			}
			return p, v, true
		}
		return "", nil, false
	}
	m := &message{contentType: "application/json"}
	if _, v, ok := find("name"); ok {
		m.name, _ = v.(string)
	}
	if _, v, ok := find("contentType"); ok {
		m.contentType, _ = v.(string)
	}
	if _, v, ok := find("x-key-field"); ok {
		m.keyField, _ = v.(string)
	}
	p, _, ok := find("payload")
	if !ok {
		return nil, errors.New("no payload")
	}
	if m.payload, err = comp.Compile(docURL + "#" + p); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	if p, _, ok := find("headers"); ok {
		if m.headers, err = comp.Compile(docURL + "#" + p); err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
	}
	if p, _, ok := find("bindings", "kafka", "key"); ok {
		if m.key, err = comp.Compile(docURL + "#" + p); err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
	}
	return m, nil
}

// NewCompiler is a JSON Schema compiler as the contract's schemas are
// meant to be read: draft 2020-12, formats asserted, and the document's
// own formats (int64, decimal-number) known.
func NewCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.RegisterFormat(&jsonschema.Format{Name: "int64", Validate: validateInt64})
	c.RegisterFormat(&jsonschema.Format{Name: "decimal-number", Validate: validateDecimalNumber})
	return c
}

var (
	int64Text   = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
	decimalText = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?([eE]\+?[0-9]{1,2})?$`)
)

// validateInt64 checks a number's text: an integer literal in the signed
// 64-bit range. Other types are not its business.
func validateInt64(v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	if !int64Text.MatchString(string(n)) {
		return fmt.Errorf("%s is not written as an integer", n)
	}
	if _, err := strconv.ParseInt(string(n), 10, 64); err != nil {
		return fmt.Errorf("%s is beyond the 64-bit range", n)
	}
	return nil
}

// validateDecimalNumber checks a number's text: at most 39 characters,
// digits with an optional fraction and an optional exponent of one or two
// digits that is not negative.
func validateDecimalNumber(v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	if len(n) > 39 || !decimalText.MatchString(string(n)) {
		return fmt.Errorf("%s is not at most 39 characters of digits, a fraction and a non-negative exponent of at most 2 digits", n)
	}
	return nil
}

func (ch *channel) check(key []byte, headers map[string]string, value []byte) error {
	m, body, err := ch.pick(headers, value)
	if err != nil {
		return fmt.Errorf("asyncapi: channel %s (%s): %w", ch.id, ch.address, err)
	}
	if !m.isJSON() {
		// A dead letter's value is the original bytes, whatever they say:
		// neither its members nor its headers' agreement with them are
		// the contract's business.
		body = nil
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if m.isJSON() {
		switch {
		case body == nil:
			add("value: not one JSON value")
		default:
			if dups := strictjson.DuplicateKeys(value); len(dups) > 0 {
				add("value: %s appear(s) more than once in one object", strings.Join(dups, ", "))
			}
			if err := m.payload.Validate(body.v); err != nil {
				add("value: %s", describe(err))
			}
		}
	}
	if m.headers != nil {
		obj := make(map[string]any, len(headers))
		for k, v := range headers {
			obj[k] = v
		}
		if err := m.headers.Validate(obj); err != nil {
			add("headers: %s", describe(err))
		}
		if body != nil {
			for _, name := range []string{"eventId", "eventType"} {
				h, inHeader := headers[name]
				b, inBody := body.member(name)
				if inHeader && inBody && h != b {
					add("headers: %s is %q, the value's %s %q", name, h, name, b)
				}
			}
		}
	}
	if m.key != nil {
		var k any // no key: JSON null
		if key != nil {
			k = string(key)
		}
		if err := m.key.Validate(k); err != nil {
			add("key: %s", describe(err))
		}
	}
	if m.keyField != "" && body != nil {
		if want, ok := body.member(m.keyField); ok && string(key) != want {
			add("key: %q, want the value's %s %q", key, m.keyField, want)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("asyncapi: channel %s (%s), message %s:\n  - %s", ch.id, ch.address, m.id, strings.Join(problems, "\n  - "))
	}
	return nil
}

func (m *message) isJSON() bool {
	return m.contentType == "application/json" || strings.HasSuffix(m.contentType, "+json")
}

// jsonValue is a parsed record value.
type jsonValue struct{ v any }

// member is the text of a top-level string or number member.
func (j *jsonValue) member(name string) (string, bool) {
	obj, _ := j.v.(map[string]any)
	switch v := obj[name].(type) {
	case string:
		return v, true
	case json.Number:
		return string(v), true
	}
	return "", false
}

// pick finds the message a record is: the channel's only message, or the
// one named by its eventType. body is the parsed value, nil if it is not
// JSON.
func (ch *channel) pick(headers map[string]string, value []byte) (*message, *jsonValue, error) {
	var body *jsonValue
	if v, err := jsonschema.UnmarshalJSON(bytes.NewReader(value)); err == nil {
		body = &jsonValue{v}
	}
	if len(ch.messages) == 1 {
		return ch.messages[0], body, nil
	}
	typ, inHeader := headers["eventType"]
	if body != nil {
		if b, inBody := body.member("eventType"); inBody {
			if inHeader && b != typ {
				return nil, nil, fmt.Errorf("the eventType header %q and the value's eventType %q differ", typ, b)
			}
			typ, inHeader = b, true
		}
	}
	if !inHeader {
		return nil, nil, errors.New("no eventType in the headers or the value: which message is it?")
	}
	var names []string
	for _, m := range ch.messages {
		if m.name == typ {
			return m, body, nil
		}
		names = append(names, m.name)
	}
	return nil, nil, fmt.Errorf("no message of the channel has eventType %q (its messages: %s)", typ, strings.Join(names, ", "))
}

// describe is a validation error's leaves, one per line, each at its place
// in the instance.
func describe(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var leaves []string
	var walk func(out *jsonschema.OutputUnit)
	walk = func(out *jsonschema.OutputUnit) {
		if out.Error != nil && len(out.Errors) == 0 {
			at := out.InstanceLocation
			if at == "" {
				at = "/"
			}
			leaves = append(leaves, fmt.Sprintf("at %s: %s", at, out.Error))
		}
		for i := range out.Errors {
			walk(&out.Errors[i])
		}
	}
	walk(ve.DetailedOutput())
	if len(leaves) == 0 {
		return ve.Error()
	}
	slices.Sort(leaves)
	return strings.Join(slices.Compact(leaves), "; ")
}

// deref follows a {"$ref": "#/..."} at ptr to the object it names, and
// returns that object's pointer.
func deref(doc any, ptr string) (string, map[string]any, error) {
	for range 10 {
		v, err := resolve(doc, ptr)
		if err != nil {
			return "", nil, err
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("%s is not an object", ptr)
		}
		ref, ok := obj["$ref"].(string)
		if !ok {
			return ptr, obj, nil
		}
		if !strings.HasPrefix(ref, "#") {
			return "", nil, fmt.Errorf("%s: only local references are followed, not %q", ptr, ref)
		}
		ptr = ref[1:]
	}
	return "", nil, fmt.Errorf("%s: references nest too deep", ptr)
}

// resolve is the value at a JSON pointer (RFC 6901) into doc.
func resolve(doc any, ptr string) (any, error) {
	if ptr == "" {
		return doc, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("pointer %q does not start with /", ptr)
	}
	v := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("pointer %q: no %q", ptr, tok)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("pointer %q: no item %q", ptr, tok)
			}
			v = c[i]
		default:
			return nil, fmt.Errorf("pointer %q: %q is inside a scalar", ptr, tok)
		}
	}
	return v, nil
}

// Resolve is the value at a local reference ("#/components/...") into the
// document that Document returns.
func Resolve(doc any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, fmt.Errorf("%q is not a local reference", ref)
	}
	return resolve(doc, ref[1:])
}

func escape(tok string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// yamlToJSON parses YAML into JSON values. Numbers keep their text (as a
// json.Number), so a schema's 0.0001 is not rounded through a float; a
// number that is not also JSON's syntax is an error.
func yamlToJSON(src []byte) (any, error) {
	var n yaml.Node
	if err := yaml.Unmarshal(src, &n); err != nil {
		return nil, err
	}
	return nodeToJSON(&n)
}

func nodeToJSON(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, errors.New("not one YAML document")
		}
		return nodeToJSON(n.Content[0])
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key that is not a scalar", k.Line)
			}
			if _, dup := obj[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q repeated", k.Line, k.Value)
			}
			v, err := nodeToJSON(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			obj[k.Value] = v
		}
		return obj, nil
	case yaml.SequenceNode:
		arr := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeToJSON(c)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, err
			}
			return b, nil
		case "!!int", "!!float":
			if _, ok := new(big.Rat).SetString(n.Value); !ok || !json.Valid([]byte(n.Value)) {
				return nil, fmt.Errorf("line %d: number %q is not written as JSON writes numbers", n.Line, n.Value)
			}
			return json.Number(n.Value), nil
		default:
			return n.Value, nil
		}
	case yaml.AliasNode:
		return nodeToJSON(n.Alias)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}
