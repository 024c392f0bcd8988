package api_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/example/payment-service/internal/asyncapitest"
)

// The AsyncAPI document is well-formed AsyncAPI 3.0 as far as it can be
// checked offline: it parses, every $ref resolves, every channel has an
// address, every operation names a channel and messages of that channel,
// and every message's payload, headers and key are schemas that compile,
// with no format the validator does not know.
func TestAsyncAPIDocumentIsWellFormed(t *testing.T) {
	t.Parallel()
	doc, err := asyncapitest.Document()
	if err != nil {
		t.Fatalf("api/asyncapi.yaml does not parse: %v", err)
	}
	root, ok := doc.(map[string]any)
	if !ok {
		t.Fatal("api/asyncapi.yaml is not a mapping")
	}
	if root["asyncapi"] != "3.0.0" {
		t.Fatalf("asyncapi: %v, want 3.0.0", root["asyncapi"])
	}
	info := object(t, root, "info")
	for _, field := range []string{"title", "version", "description"} {
		if s, _ := info[field].(string); s == "" {
			t.Errorf("info.%s is missing", field)
		}
	}
	for _, field := range []string{"channels", "operations", "components"} {
		if _, ok := root[field].(map[string]any); !ok {
			t.Fatalf("no %s", field)
		}
	}

	// Every $ref is local and resolves.
	refs := 0
	walk(doc, "", func(ptr string, obj map[string]any) {
		ref, ok := obj["$ref"].(string)
		if !ok {
			return
		}
		refs++
		if _, err := asyncapitest.Resolve(doc, ref); err != nil {
			t.Errorf("%s: $ref %q does not resolve: %v", ptr, ref, err)
		}
	})
	if refs == 0 {
		t.Fatal("no $ref at all: is this the document?")
	}

	// Channels: an address each, no two alike, a description that names
	// the environment variable renaming the topic, messages that are
	// messages.
	channels := object(t, root, "channels")
	addresses := map[string]string{}
	topicVar := regexp.MustCompile("`[A-Z_]+_TOPIC`")
	for id, raw := range channels {
		ch, _ := raw.(map[string]any)
		address, _ := ch["address"].(string)
		if address == "" {
			t.Errorf("channel %s has no address", id)
		}
		if other, dup := addresses[address]; dup {
			t.Errorf("channels %s and %s share address %s", id, other, address)
		}
		addresses[address] = id
		if desc, _ := ch["description"].(string); !topicVar.MatchString(desc) {
			t.Errorf("channel %s: the description names no *_TOPIC variable", id)
		}
		msgs, _ := ch["messages"].(map[string]any)
		if len(msgs) == 0 {
			t.Errorf("channel %s has no messages", id)
		}
		for name := range msgs {
			m := deref(t, doc, fmt.Sprintf("#/channels/%s/messages/%s", id, name))
			if _, ok := m["payload"]; !ok {
				t.Errorf("channel %s, message %s: no payload", id, name)
			}
		}
	}

	// Operations: each sends or receives on a channel of the document,
	// the messages it names are that channel's, and so are its reply's.
	used := map[string]bool{}
	checkMessages := func(op, channelRef string, list any) {
		channelID, found := strings.CutPrefix(channelRef, "#/channels/")
		if !found || channels[channelID] == nil {
			t.Errorf("operation %s: channel %q is not a channel of the document", op, channelRef)
			return
		}
		items, _ := list.([]any)
		if len(items) == 0 {
			t.Errorf("operation %s: no messages", op)
		}
		for _, item := range items {
			ref, _ := object(t, map[string]any{"m": item}, "m")["$ref"].(string)
			name, ok := strings.CutPrefix(ref, "#/channels/"+channelID+"/messages/")
			if !ok {
				t.Errorf("operation %s: message %q is not one of channel %s's", op, ref, channelID)
				continue
			}
			if _, ok := object(t, object(t, channels, channelID), "messages")[name]; !ok {
				t.Errorf("operation %s: channel %s has no message %s", op, channelID, name)
			}
		}
	}
	for id, raw := range object(t, root, "operations") {
		op, _ := raw.(map[string]any)
		if action := op["action"]; action != "send" && action != "receive" {
			t.Errorf("operation %s: action %v, want send or receive", id, action)
		}
		channelRef, _ := object(t, op, "channel")["$ref"].(string)
		checkMessages(id, channelRef, op["messages"])
		used[strings.TrimPrefix(channelRef, "#/channels/")] = true
		if reply, ok := op["reply"].(map[string]any); ok {
			replyRef, _ := object(t, reply, "channel")["$ref"].(string)
			checkMessages(id+" (reply)", replyRef, reply["messages"])
		}
	}
	for id := range channels {
		if !used[id] {
			t.Errorf("channel %s: no operation sends or receives on it", id)
		}
	}

	// Every component message is some channel's, and its payload, headers
	// and key compile, as do its traits'.
	components := object(t, root, "components")
	inChannels := map[string]bool{}
	for _, raw := range channels {
		for _, m := range object(t, raw.(map[string]any), "messages") {
			ref, _ := m.(map[string]any)["$ref"].(string)
			inChannels[ref] = true
		}
	}
	compiler := asyncapitest.NewCompiler()
	const base = "file:///asyncapi.yaml"
	if err := compiler.AddResource(base, doc); err != nil {
		t.Fatal(err)
	}
	compileAt := func(what, ptr string) {
		if _, err := compiler.Compile(base + "#" + ptr); err != nil {
			t.Errorf("%s does not compile: %v", what, err)
		}
	}
	for name, raw := range object(t, components, "messages") {
		ptr := "/components/messages/" + name
		if !inChannels["#"+ptr] {
			t.Errorf("message %s is no channel's", name)
		}
		m, _ := raw.(map[string]any)
		if _, ok := m["payload"]; !ok {
			t.Errorf("message %s: no payload", name)
			continue
		}
		compileAt("message "+name+"'s payload", ptr+"/payload")
		if _, ok := m["headers"]; ok {
			compileAt("message "+name+"'s headers", ptr+"/headers")
		}
		if n, _ := m["name"].(string); n != name {
			t.Errorf("message %s is named %q: the component's key is the name (the eventType) it is picked by", name, n)
		}
	}
	for name, raw := range object(t, components, "messageTraits") {
		trait, _ := raw.(map[string]any)
		ptr := "/components/messageTraits/" + name
		if _, ok := trait["headers"]; ok {
			compileAt("trait "+name+"'s headers", ptr+"/headers")
		}
		bindings, _ := trait["bindings"].(map[string]any)
		if kafka, ok := bindings["kafka"].(map[string]any); ok {
			if _, ok := kafka["key"]; ok {
				compileAt("trait "+name+"'s key", ptr+"/bindings/kafka/key")
			}
		}
	}
	for name := range object(t, components, "schemas") {
		compileAt("schema "+name, "/components/schemas/"+name)
	}

	// A format the validator does not know would be ignored without a word.
	known := []string{"uuid", "date-time", "int64", "decimal-number"}
	walk(components, "/components", func(ptr string, obj map[string]any) {
		if f, ok := obj["format"].(string); ok && !slices.Contains(known, f) {
			t.Errorf("%s: format %q is not one of %v", ptr, f, known)
		}
	})
}

// object is m[key] as an object, failing t if it is not one.
func object(t *testing.T, m map[string]any, key string) map[string]any {
	t.Helper()
	o, ok := m[key].(map[string]any)
	if !ok {
		t.Fatalf("%s is not an object", key)
	}
	return o
}

// deref follows $refs from ref to an object.
func deref(t *testing.T, doc any, ref string) map[string]any {
	t.Helper()
	for range 10 {
		v, err := asyncapitest.Resolve(doc, ref)
		if err != nil {
			t.Fatal(err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s is not an object", ref)
		}
		next, ok := obj["$ref"].(string)
		if !ok {
			return obj
		}
		ref = next
	}
	t.Fatalf("%s: references nest too deep", ref)
	return nil
}

// walk calls f on every object in v, with its JSON pointer.
func walk(v any, ptr string, f func(ptr string, obj map[string]any)) {
	switch c := v.(type) {
	case map[string]any:
		f(ptr, c)
		for k, child := range c {
			walk(child, ptr+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), f)
		}
	case []any:
		for i, child := range c {
			walk(child, fmt.Sprintf("%s/%d", ptr, i), f)
		}
	}
}
