//go:build fault

package fault

// Saga steps in the fault suite: seeded rounds that publish ChargeOrder.v1
// and CompensateCharge.v1 commands on the commands topic (api/asyncapi.yaml)
// to three replicas, each command duplicated (re-sent by the orchestrator
// with a new eventId) and the commands of a saga reordered (a compensation
// before its step), the charges with the provider's behaviours by their
// externalPaymentId's prefix, while a replica is killed -9 or the link to
// the provider fails. The invariants are checked against the provider's
// ledger and the replies topic after each round.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/sandboxprovider"
)

var flagSagaRounds = flag.Int("saga-rounds", 6, "how many seeded saga rounds to run")

// sagaStream tells the saga rounds' random stream from the other rounds'.
const sagaStream = 0x5a9a_0000_0000_0000

// Saga step names: a charge step and its compensation.
const (
	stepCharge     = "charge-payment"
	stepCompensate = "refund-payment"
)

// sagaPlan is one round: its sagas, and its faults.
type sagaPlan struct {
	round        int
	sagas        []plannedSaga
	order        []int // the publication order: indexes into messages()
	kill         int   // replica to kill -9, or -1
	killAfter    time.Duration
	providerLink string // "", "lose", "reset", "blackhole", "delay"
}

// plannedSaga is one saga's payment step, perhaps compensated.
type plannedSaga struct {
	id         uuid.UUID
	charge     op // the step's order and charge; key unused
	copies     int
	compensate int // copies of the compensation; 0 for none
}

func newSagaPlan(seed uint64, round int) sagaPlan {
	rng, src := roundRand(seed, round, sagaStream)
	p := sagaPlan{round: round, kill: -1}
	for i := range 2 + rng.IntN(3) {
		id, _ := uuid.NewRandomFromReader(src)
		sg := plannedSaga{id: id, copies: 1 + rng.IntN(3), charge: op{
			order: int64(8_000_000 + round*10 + i), customer: 42,
			amount: fmt.Sprintf("%d.%02d", 1+rng.IntN(2000), rng.IntN(100)),
			ext:    fmt.Sprintf("%s_saga_%d_%d", pick(rng), round, i),
		}}
		if rng.Float64() < 0.6 {
			sg.compensate = 1 + rng.IntN(2)
		}
		p.sagas = append(p.sagas, sg)
	}
	n := 0
	for _, sg := range p.sagas {
		n += sg.copies + sg.compensate
	}
	p.order = rng.Perm(n)
	if rng.Float64() < 0.5 {
		p.kill, p.killAfter = rng.IntN(3), time.Duration(rng.IntN(150))*time.Millisecond
	}
	if rng.Float64() < 0.25 {
		p.providerLink = []string{"lose", "reset", "blackhole", "delay"}[rng.IntN(4)]
	}
	return p
}

func (p sagaPlan) String() string {
	var b strings.Builder
	for i, sg := range p.sagas {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "saga %s %s %s x%d, compensated x%d", sg.id, sg.charge.ext, sg.charge.amount, sg.copies, sg.compensate)
	}
	fmt.Fprintf(&b, " | order %v, kill %d after %s, provider link %q", p.order, p.kill, p.killAfter, p.providerLink)
	return b.String()
}

func (p sagaPlan) kinds() []string {
	k := []string{"saga"}
	for _, sg := range p.sagas {
		if sg.copies > 1 || sg.compensate > 1 {
			k = append(k, "saga:re-sent")
		}
		if sg.compensate > 0 {
			k = append(k, "saga:compensated")
		}
		if prefix, _, _ := strings.Cut(sg.charge.ext, "_saga"); prefix != "pi" {
			k = append(k, "saga:provider:"+strings.TrimSuffix(prefix, "_"))
		}
	}
	if p.kill >= 0 {
		k = append(k, "saga:kill-9")
	}
	if p.providerLink != "" {
		k = append(k, "saga:provider-link:"+p.providerLink)
	}
	return k
}

func (sg plannedSaga) chargeCmd() map[string]any {
	return map[string]any{
		"eventId": uuid.Must(uuid.NewV7()).String(), "eventType": "ChargeOrder.v1", "sagaId": sg.id.String(), "stepName": stepCharge,
		"orderId": sg.charge.order, "customerId": sg.charge.customer, "amount": sg.charge.amount, "currency": "RUB",
		"paymentProvider": "sandbox", "externalPaymentId": sg.charge.ext, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	}
}

func (sg plannedSaga) compensateCmd() map[string]any {
	return map[string]any{
		"eventId": uuid.Must(uuid.NewV7()).String(), "eventType": "CompensateCharge.v1", "sagaId": sg.id.String(),
		"stepName": stepCompensate, "compensates": stepCharge, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	}
}

// commands are every command of the plan, each copy with an eventId of
// its own (the orchestrator's re-send), in publication order.
func (p sagaPlan) commands() []map[string]any {
	var all []map[string]any
	for _, sg := range p.sagas {
		for range sg.copies {
			all = append(all, sg.chargeCmd())
		}
		for range sg.compensate {
			all = append(all, sg.compensateCmd())
		}
	}
	out := make([]map[string]any, len(all))
	for i, j := range p.order {
		out[i] = all[j]
	}
	return out
}

// sagaMessage is cmd's record, keyed by its sagaId, with eventId and
// eventType as headers too, as the contract says.
func sagaMessage(cmd map[string]any) kafka.Message {
	body, _ := json.Marshal(cmd)
	return kafka.Message{Key: []byte(cmd["sagaId"].(string)), Value: body, Headers: []kafka.Header{
		{Key: "eventId", Value: []byte(cmd["eventId"].(string))}, {Key: "eventType", Value: []byte(cmd["eventType"].(string))}}}
}

// sagaRig is a stack whose replicas consume the commands topic of its
// broker and reply on its replies topic.
type sagaRig struct {
	*stack
	commands, dlt, replies string
	writer                 *kafka.Writer
	tail                   *kafkatest.Tail
	// seen: per (sagaId, stepName), every reply read so far, as bytes.
	seen map[stepID][][]byte
}

type stepID struct{ saga, step string }

func newSagaRig(t *testing.T) *sagaRig {
	brokers := kafkatest.Brokers(t)
	r := &sagaRig{
		commands: kafkatest.CreateTopic(t, brokers, 3), dlt: kafkatest.CreateTopic(t, brokers, 1),
		replies: kafkatest.CreateTopic(t, brokers, 3), seen: map[stepID][][]byte{},
	}
	env := []string{
		"PAYMENT_COMMANDS_TOPIC=" + r.commands, "PAYMENT_COMMANDS_DLT_TOPIC=" + r.dlt, "PAYMENT_REPLIES_TOPIC=" + r.replies,
		"PAYMENT_COMMANDS_GROUP=saga-" + kafkatest.TopicName(t),
		"KAFKA_CONSUMER_RETRY_BACKOFF=20ms", "KAFKA_CONSUMER_MAX_RETRY_BACKOFF=200ms",
	}
	if len(kafkatest.ExternalBrokers()) == 0 {
		// The in-process broker takes short sessions: a killed replica's
		// partitions move on within a second, not the six a real broker
		// asks for at least.
		env = append(env, "KAFKA_CONSUMER_SESSION_TIMEOUT=1s", "KAFKA_CONSUMER_HEARTBEAT_INTERVAL=100ms")
	}
	r.stack = newStack(t, stackOptions{replicas: 3, brokers: brokers, env: env})
	r.writer = &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: r.commands, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { _ = r.writer.Close() })
	r.tail = kafkatest.NewTail(brokers, r.replies)
	return r
}

func (r *sagaRig) publish(t *testing.T, cmds []map[string]any) {
	t.Helper()
	msgs := make([]kafka.Message, len(cmds))
	for i, c := range cmds {
		msgs[i] = sagaMessage(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must(t, r.writer.WriteMessages(ctx, msgs...))
}

// readReplies takes in what the replies topic gained.
func (r *sagaRig) readReplies(v *violations) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := r.tail.Next(ctx)
	if err != nil {
		return
	}
	for _, rec := range recs {
		var body struct {
			SagaID   string `json:"sagaId"`
			StepName string `json:"stepName"`
		}
		if err := json.Unmarshal(rec.Value, &body); err != nil || body.SagaID == "" {
			v.add("unreadable reply at partition %d offset %d: %s", rec.Partition, rec.Offset, rec.Value)
			continue
		}
		id := stepID{body.SagaID, body.StepName}
		r.seen[id] = append(r.seen[id], rec.Value)
	}
}

// steps are the round's steps, each with how many replies it has.
func (p sagaPlan) steps() []stepID {
	var out []stepID
	for _, sg := range p.sagas {
		out = append(out, stepID{sg.id.String(), stepCharge})
		if sg.compensate > 0 {
			out = append(out, stepID{sg.id.String(), stepCompensate})
		}
	}
	return out
}

// awaitReplies waits (bounded) until every step has more than least[id]
// replies.
func (r *sagaRig) awaitReplies(t *testing.T, p sagaPlan, least map[stepID]int, what string) {
	t.Helper()
	var v violations
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.readReplies(&v)
		waiting := 0
		for _, id := range p.steps() {
			if len(r.seen[id]) <= least[id] {
				waiting++
			}
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			v.add("round %d: %d steps without %s after 60s", p.round, waiting, what)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require(t, v, fmt.Sprintf("round %d (%s)", p.round, p))
}

// TestSeededSagaRounds runs seeded saga rounds (-saga-rounds, 6 in CI; the
// seed is -seed's, and -round replays one). Each round publishes, for 2
// to 4 sagas, the charge step 1 to 3 times and, for 60% of them, its
// compensation 1 to 2 times, each copy re-sent with a new eventId, the
// round's commands in a random order (a compensation often comes before
// its step). Half of the rounds kill -9 a replica 0 to 150 ms after the
// commands are published; a quarter lose, reset, black-hole or delay the
// provider link while they are carried out. Then everything is healed,
// every step must have a reply, every command is re-sent once more and
// must be answered with its step's reply again, and the invariants are
// checked: sagaChecks.
func TestSeededSagaRounds(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	first, last := 0, *flagSagaRounds
	if *flagRound >= 0 {
		first, last = *flagRound, *flagRound+1
	}
	reproduce := fmt.Sprintf("go test -tags fault -run TestSeededSagaRounds ./test/fault/ -seed %d", seed)
	fmt.Printf("saga rounds: seed %d, rounds %d..%d; rerun: %s -saga-rounds %d\n", seed, first, last-1, reproduce, *flagSagaRounds)
	r := newSagaRig(t)
	c := newChecker(r.stack)
	faults := map[string]int{}
	started := time.Now()
	for round := first; round < last; round++ {
		p := newSagaPlan(seed, round)
		for _, k := range p.kinds() {
			faults[k]++
		}
		r.runSagaRound(t, p)
		v := r.sagaChecks(p)
		v = append(v, c.checkGlobal()...)
		require(t, v, fmt.Sprintf("seed %d saga round %d (%s); reproduce: %s -round %d", seed, round, p, reproduce, round))
	}
	kinds := make([]string, 0, len(faults))
	for k, n := range faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	l, rl := r.provider.Counters(), r.provider.RefundCounters()
	replies := 0
	types := map[string]int{}
	for _, rs := range r.seen {
		replies += len(rs)
		var body struct {
			EventType string `json:"eventType"`
		}
		_ = json.Unmarshal(rs[0], &body)
		types[body.EventType]++
	}
	var byType []string
	for typ, n := range types {
		byType = append(byType, fmt.Sprintf("%s=%d", strings.TrimSuffix(strings.TrimPrefix(typ, "PaymentStep"), ".v1"), n))
	}
	sort.Strings(byType)
	fmt.Printf("saga rounds: seed %d, %d rounds, %s, violations 0; provider: %d charges, %d declines, %d replays; refunds %d made, %d replays; "+
		"%d replies for %d steps (%s)\nsaga rounds: faults injected: %s\n",
		seed, last-first, time.Since(started).Round(time.Second), l.Charges, l.Declines, l.Replays, rl.Refunds, rl.Replays,
		replies, len(r.seen), strings.Join(byType, " "), strings.Join(kinds, " "))
}

// runSagaRound publishes the round's commands under its faults, heals,
// waits for a reply to every step, then re-sends every command once and
// waits for each step's reply again.
func (r *sagaRig) runSagaRound(t *testing.T, p sagaPlan) {
	t.Helper()
	for _, sg := range p.sagas {
		r.addOrder(sg.charge)
	}
	switch p.providerLink {
	case "lose":
		must(t, r.toProvider.SetMode(faultproxy.LoseResponses))
	case "reset":
		must(t, r.toProvider.SetMode(faultproxy.Reset))
	case "blackhole":
		must(t, r.toProvider.SetMode(faultproxy.Blackhole))
	case "delay":
		r.toProvider.SetDelay(200 * time.Millisecond)
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		if p.kill >= 0 {
			time.Sleep(p.killAfter)
			r.replicas[p.kill].kill()
		}
	}()
	r.publish(t, p.commands())
	<-killed
	// Let the faults bite while the commands are carried out.
	time.Sleep(300 * time.Millisecond)
	r.heal()

	before := map[stepID]int{}
	for _, id := range p.steps() {
		before[id] = len(r.seen[id])
	}
	r.awaitReplies(t, p, before, "a reply")
	waitFor(t, 30*time.Second, fmt.Sprintf("saga round %d quiet", p.round), func() bool {
		return r.count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS'`) == 0 &&
			r.count(`SELECT count(*) FROM payment WHERE status = 'PENDING'`) == 0 &&
			r.count(`SELECT count(*) FROM refund WHERE status = 'PENDING'`) == 0
	})
	// The orchestrator re-sends every command once more: each must be
	// answered by its step's stored reply, published again.
	var again []map[string]any
	for _, sg := range p.sagas {
		again = append(again, sg.chargeCmd())
		if sg.compensate > 0 {
			again = append(again, sg.compensateCmd())
		}
	}
	// Every reply published (a step's reply is an outbox row, published
	// again when its command is re-sent), so that the count before the
	// re-send is settled.
	waitFor(t, 30*time.Second, fmt.Sprintf("saga round %d: every reply published", p.round), func() bool {
		return r.count(`SELECT count(*) FROM outbox_event WHERE published_at IS NULL`) == 0
	})
	var v violations
	r.readReplies(&v)
	require(t, v, fmt.Sprintf("round %d", p.round))
	for _, id := range p.steps() {
		before[id] = len(r.seen[id])
	}
	r.publish(t, again)
	r.awaitReplies(t, p, before, "a reply to the re-sent command")
}

// sagaChecks verifies, for every saga of the round:
//
//   - per (sagaId, stepName), every reply on the replies topic is the
//     same, byte for byte (its eventId included): a re-sent or redelivered
//     command is answered by its step's stored reply, never a new one;
//   - the charge step charged at most once at the provider, by its
//     reference under any key;
//   - a step with a compensation nets zero at the provider: what was
//     charged, less what was refunded of it;
//   - the step's reply says what the ledger holds: PaymentStepCharged.v1
//     a succeeded charge of its amount, PaymentStepDeclined.v1 a declined
//     one, PaymentStepCancelled.v1 (its compensation came first) and
//     PaymentStepFailed.v1 no succeeded charge; a PaymentStepCompensated.v1
//     is for what was charged;
//   - no command went to the dead-letter topic.
func (r *sagaRig) sagaChecks(p sagaPlan) violations {
	var v violations
	for _, sg := range p.sagas {
		replies := map[string]map[string]any{}
		for _, step := range []string{stepCharge, stepCompensate} {
			id := stepID{sg.id.String(), step}
			rs := r.seen[id]
			v = append(v, sameReplies(id, rs)...)
			if len(rs) > 0 {
				var body map[string]any
				_ = json.Unmarshal(rs[0], &body)
				replies[step] = body
			}
		}
		v = append(v, sagaLedgerChecks(sg, replies, r.provider.ChargesFor(sg.charge.ext), r.provider.RefundsFor(sg.charge.ext))...)
	}
	if n := len(kafkatest.ReadAll(r.t, r.brokers, r.dlt, 10*time.Second)); n != 0 {
		v.add("%d commands on the dead-letter topic", n)
	}
	return v
}

// sameReplies: every reply of a step is its first, byte for byte.
func sameReplies(id stepID, rs [][]byte) violations {
	var v violations
	for i := 1; i < len(rs); i++ {
		if string(rs[i]) != string(rs[0]) {
			v.add("saga %s step %s: replies differ: %s and %s", id.saga, id.step, rs[0], rs[i])
		}
	}
	return v
}

// sagaLedgerChecks compares one saga's replies (by step name, as decoded)
// with the provider's charges and refunds for its step's reference.
func sagaLedgerChecks(sg plannedSaga, replies map[string]map[string]any, charges []sandboxprovider.Charge, refunds []sandboxprovider.Refund) violations {
	var v violations
	if len(charges) > 1 {
		v.add("saga %s: the provider charged %s %d times: %+v", sg.id, sg.charge.ext, len(charges), charges)
	}
	charged := decimal.Zero
	declined := false
	for _, c := range charges {
		switch c.Status {
		case sandboxprovider.StatusSucceeded:
			charged = charged.Add(c.Amount)
		case sandboxprovider.StatusDeclined:
			declined = true
		}
	}
	refunded := decimal.Zero
	for _, f := range refunds {
		if f.Status == sandboxprovider.StatusSucceeded {
			refunded = refunded.Add(f.Amount)
		}
	}
	if refunded.GreaterThan(charged) {
		v.add("saga %s: the provider refunded %s of %s charged", sg.id, refunded, charged)
	}
	if sg.compensate > 0 && !charged.Sub(refunded).IsZero() {
		v.add("saga %s: compensated, and the provider holds %s (charged %s, refunded %s)", sg.id, charged.Sub(refunded), charged, refunded)
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	step, ok := replies[stepCharge]
	if !ok {
		v.add("saga %s: no reply to its charge step", sg.id)
		return v
	}
	switch typ := str(step, "eventType"); typ {
	case "PaymentStepCharged.v1":
		if amount, err := decimal.NewFromString(str(step, "amount")); err != nil || !amount.Equal(charged) || charged.IsZero() {
			v.add("saga %s: replied %s for %s and the provider charged %s", sg.id, typ, str(step, "amount"), charged)
		}
	case "PaymentStepDeclined.v1":
		if !declined || !charged.IsZero() {
			v.add("saga %s: replied %s and the provider holds %+v", sg.id, typ, charges)
		}
	case "PaymentStepCancelled.v1", "PaymentStepFailed.v1":
		if !charged.IsZero() {
			v.add("saga %s: replied %s and the provider charged %s", sg.id, typ, charged)
		}
	default:
		v.add("saga %s: its charge step replied %s", sg.id, typ)
	}
	if sg.compensate == 0 {
		return v
	}
	comp, ok := replies[stepCompensate]
	if !ok {
		v.add("saga %s: no reply to its compensation", sg.id)
		return v
	}
	if typ := str(comp, "eventType"); typ != "PaymentStepCompensated.v1" {
		v.add("saga %s: its compensation replied %s", sg.id, typ)
	} else if amount, err := decimal.NewFromString(str(comp, "amount")); err != nil || !amount.Equal(refunded) {
		v.add("saga %s: compensated %s and the provider refunded %s", sg.id, str(comp, "amount"), refunded)
	}
	return v
}
