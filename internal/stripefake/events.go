package stripefake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Event is one event the fake made: its id, type and the JSON body its
// delivery carries, byte for byte.
type Event struct {
	ID, Type string
	Body     []byte
}

// eventBody is Stripe's event object.
type eventBody struct {
	ID              string    `json:"id"`
	Object          string    `json:"object"`
	APIVersion      string    `json:"api_version"`
	Created         int64     `json:"created"`
	Data            eventData `json:"data"`
	Livemode        bool      `json:"livemode"`
	PendingWebhooks int       `json:"pending_webhooks"`
	Request         struct {
		ID             *string `json:"id"`
		IdempotencyKey *string `json:"idempotency_key"`
	} `json:"request"`
	Type string `json:"type"`
}

type eventData struct {
	Object any `json:"object"`
}

// event makes an event about obj (a snapshot) and queues its delivery;
// under s.mu.
func (s *Server) event(typ string, obj any) {
	e := eventBody{ID: s.nextID("evt"), Object: "event", APIVersion: s.cfg.APIVersion, Created: s.now().Unix(),
		Data: eventData{Object: obj}, PendingWebhooks: 1, Type: typ}
	ev := Event{ID: e.ID, Type: typ, Body: encode(e)}
	s.events = append(s.events, ev)
	s.webhooks.enqueue(ev)
}

// Events are the events made so far, oldest first.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Sign is the Stripe-Signature header of payload signed with secret at t.
func Sign(payload []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(payload)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// webhooks delivers events, each at least once, in the order made, to a
// URL that may be set later; an event is tried again on anything but a
// 2xx, for at most Config.WebhookRetryFor after it was made.
type webhooks struct {
	s      *Server
	client *http.Client

	mu      sync.Mutex
	url     string
	queue   []pending
	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
	once    sync.Once

	delivered int
}

type pending struct {
	ev   Event
	made time.Time
}

func newWebhooks(s *Server, url string) *webhooks {
	w := &webhooks{s: s, client: &http.Client{Timeout: 5 * time.Second}, url: url,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *webhooks) setURL(url string) {
	w.mu.Lock()
	w.url = url
	w.mu.Unlock()
	w.poke()
}

func (w *webhooks) enqueue(ev Event) {
	w.mu.Lock()
	w.queue = append(w.queue, pending{ev: ev, made: time.Now()})
	w.mu.Unlock()
	w.poke()
}

func (w *webhooks) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *webhooks) stop() {
	w.once.Do(func() { close(w.stopped) })
	<-w.done
}

// run delivers every pending event in rounds: each round tries each
// once, in the order made, and keeps those not delivered for the next
// round, a backoff later; Stripe does not keep events in order either.
func (w *webhooks) run() {
	defer close(w.done)
	backoff := 20 * time.Millisecond
	for {
		w.mu.Lock()
		url, round := w.url, append([]pending(nil), w.queue...)
		w.mu.Unlock()
		if len(round) == 0 || url == "" {
			select {
			case <-w.stopped:
				return
			case <-w.wake:
				continue
			}
		}
		done := map[string]bool{}
		for _, p := range round {
			ok := w.post(url, p.ev)
			if ok {
				w.count()
			}
			if ok || time.Since(p.made) > w.s.cfg.WebhookRetryFor {
				done[p.ev.ID] = true
			}
		}
		w.mu.Lock()
		kept := w.queue[:0]
		for _, p := range w.queue {
			if !done[p.ev.ID] {
				kept = append(kept, p)
			}
		}
		w.queue = kept
		left := len(kept)
		w.mu.Unlock()
		if len(done) == len(round) {
			backoff = 20 * time.Millisecond
		}
		if left == 0 {
			continue
		}
		select {
		case <-w.stopped:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (w *webhooks) count() {
	w.mu.Lock()
	w.delivered++
	w.mu.Unlock()
}

// post delivers ev once, signed now.
func (w *webhooks) post(url string, ev Event) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(ev.Body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", Sign(ev.Body, w.s.cfg.WebhookSecret, time.Now()))
	resp, err := w.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// Delivered counts the events delivered (answered 2xx).
func (s *Server) Delivered() int {
	s.webhooks.mu.Lock()
	defer s.webhooks.mu.Unlock()
	return s.webhooks.delivered
}

// Undelivered counts the events still to be delivered.
func (s *Server) Undelivered() int {
	s.webhooks.mu.Lock()
	defer s.webhooks.mu.Unlock()
	return len(s.webhooks.queue)
}

// String names the fake in test failures.
func (s *Server) String() string { return fmt.Sprintf("stripefake at %s", s.URL) }
