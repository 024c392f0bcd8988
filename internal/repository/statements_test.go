package repository

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// statementTexts are the statement files, each as the package loaded it
// (go:embed): the service's in statements/, and those the tests run alone
// in testdata/.
var statementTexts = map[string]string{
	"statements/key_lookup.sql":                    lookupKeySQL,
	"statements/key_complete.sql":                  completeKeySQL,
	"statements/key_answer.sql":                    answerKeySQL,
	"statements/key_lock_still_held.sql":           lockStillHeldSQL,
	"statements/charge_claim.sql":                  claimAndReserveSQL,
	"statements/charge_step_claim.sql":             claimStepAndReserveSQL,
	"statements/charge_record.sql":                 recordOutcomeSQL,
	"statements/charge_release.sql":                releaseChargeSQL,
	"statements/charge_reserve.sql":                reserveSQL,
	"statements/charge_reserve_recovery_point.sql": setPaymentRecoveryPointSQL,
	"statements/payment_by_external.sql":           externalPaymentSQL,
	"statements/payment_live_of_order.sql":         livePaymentOfOrderSQL,
	"statements/payment_get.sql":                   getPaymentSQL,
	"statements/key_expire_lock.sql":               expireLockSQL,
	"statements/refund_reserve_recovery_point.sql": setRefundRecoveryPointSQL,
	"statements/refund_claim.sql":                  claimAndReserveRefundSQL,
	"statements/refund_reserve.sql":                reserveRefundSQL,
	"statements/refund_external.sql":               externalRefundSQL,
	"statements/refund_record.sql":                 recordRefundOutcomeSQL,
	"statements/refund_release.sql":                releaseRefundSQL,
	"statements/capture_claim.sql":                 claimCaptureSQL,
	"statements/void_claim.sql":                    claimVoidSQL,
	"statements/transition_record.sql":             recordTransitionSQL,
	"statements/transition_release.sql":            releaseTransitionSQL,
	"statements/payment_list_authorized.sql":       listAuthorizedSQL,
	"statements/payment_expire.sql":                expireSQL,
	"statements/provider_event_charge.sql":         reportedChargeText,
	"statements/provider_event_refund.sql":         reportedRefundText,
	"statements/provider_event_transition.sql":     reportedTransitionText,
	"statements/provider_event_contradiction.sql":  keepContradictionText,
	"statements/transition_receive.sql":            receiveTransitionSQL,
	"statements/refund_receive.sql":                receiveRefundSQL,
	"statements/transition_settle_received.sql":    settleReceivedTransitionSQL,
	"statements/refund_settle_received.sql":        settleReceivedRefundSQL,
	"statements/transition_list_received.sql":      listReceivedTransitionsSQL,
	"statements/refund_list_received.sql":          listReceivedRefundsSQL,
	"statements/reconcile_payments_in_window.sql":  reconcilePaymentsInWindowSQL,
	"statements/reconcile_refunds_in_window.sql":   reconcileRefundsInWindowSQL,
	"statements/reconcile_payments_by_ref.sql":     reconcilePaymentsByRefSQL,
	"statements/reconcile_refunds_by_ref.sql":      reconcileRefundsByRefSQL,
	"statements/reconcile_item_upsert.sql":         reconcileItemUpsertSQL,
	"statements/reconcile_item_close.sql":          reconcileItemCloseSQL,
	"testdata/refund_settle_alone.sql":             settleRefundSQL,
	"testdata/refund_release_alone.sql":            releaseRefundAloneSQL,
}

// Every statement file is one the code runs: a file no variable embeds is
// found, and so is a variable in the list above that embeds another file.
func TestEveryStatementFileRuns(t *testing.T) {
	t.Parallel()
	var files []string
	for _, dir := range []string{"statements", "testdata"} {
		found, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	for _, f := range files {
		text, ok := statementTexts[f]
		if !ok {
			t.Errorf("%s: no statement of the package embeds it", f)
			continue
		}
		b, err := os.ReadFile(f) //nolint:gosec // G304: the package's own statement files
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != text {
			t.Errorf("%s: the variable listed for it holds another text", f)
		}
	}
	if len(files) != len(statementTexts) {
		t.Errorf("%d statement files, %d listed", len(files), len(statementTexts))
	}
}

// A shared clause is written out whole in every statement that has it,
// between "-- clause NAME: begin" and "-- clause NAME: end". Its copies,
// comments dropped and spaces collapsed, must be the same once each
// copy's own words (its command, its recovery point...) are put back to
// the placeholders below: only the differences listed here are allowed.
type sharedClause struct {
	name   string
	copies []clauseCopy
}

type clauseCopy struct {
	file string
	own  []subst // applied in order; each must occur in the copy
}

// subst puts a copy's own words (own) back to what every copy has there
// (common).
type subst struct{ own, common string }

// The differences the copies of a clause may have.
var (
	// keyFree: every write of a charge's claim is made only when no record
	// stands in its way (the clause standing).
	keyFree = "NOT EXISTS (SELECT 1 FROM standing WHERE stops)"
	// stepGate: a new saga step's claim writes only for a new step's row
	// too.
	stepGate = subst{"EXISTS (SELECT 1 FROM begun) AND " + keyFree, keyFree}
	// unlessStanding: a charge's claim on its own keeps a record in the
	// claim's way as an answer, for which it wrote nothing.
	unlessStanding = subst{"@atomic AND " + keyFree + " AND", "@atomic AND"}
)

// command is the command the claim names, a literal.
func command(name string) subst { return subst{"'" + name + "'", "'{command}'"} }

// ownColumn: the record names its reservation in its command's own column
// too, kept on a takeover like the recovery point (migration 00024: for
// the builds before it, until the contract step).
func ownColumn(column string) []subst {
	return []subst{
		{", recovery_point, " + column + ")", ", recovery_point)"},
		{"(SELECT id FROM reserved), (SELECT id FROM reserved))", "(SELECT id FROM reserved))"},
		{" " + column + " = coalesce(r." + column + ", EXCLUDED." + column + "),", ""},
	}
}

// previousCharge: a charge's takeover makes the payment a claim of the
// previous release names in payment_id alone its recovery point
// (migration 00024).
var previousCharge = subst{"coalesce(r.recovery_point, r.payment_id, EXCLUDED.recovery_point)", "coalesce(r.recovery_point, EXCLUDED.recovery_point)"}

// alias is the alias of the reservation's (or payment's) row.
func alias(a string) subst { return subst{a + ".", "{alias}."} }

// guard is the condition a fenced write of the key is made under besides
// the token: true, or the reservation locked and PENDING.
func guard(condition string) subst {
	return subst{"AND " + condition + " RETURNING", "AND {guard} RETURNING"}
}

// from is the clause an outbox row hangs on.
func from(clause string) subst { return subst{"FROM " + clause + " ", "FROM {from} "} }

// gated: the claim's insert is a SELECT made under condition, where an
// ungated claim has VALUES.
func gated(condition string) []subst {
	return []subst{
		{"SELECT @client, @key,", "VALUES (@client, @key,"},
		{"(SELECT id FROM reserved) WHERE " + condition + " ON CONFLICT", "(SELECT id FROM reserved)) ON CONFLICT"},
	}
}

// paymentLink: the record names the reservation's payment too, kept on a
// takeover (a refund's, a capture's and a void's: decision 0022).
var paymentLink = []subst{
	{", payment_id) VALUES", ") VALUES"},
	{", (SELECT payment_id FROM reserved))", ")"},
	{" payment_id = coalesce(r.payment_id, EXCLUDED.payment_id),", ""},
}

// goesOnWith names the clause that goes on with the reservation, and the
// reservation's table and alias.
func goesOnWith(name, table, a string) []subst {
	return []subst{{name + " AS (", "{goes_on_with} AS ("}, {"FROM " + table + " " + a + " JOIN", "FROM {table} {alias} JOIN"}, alias(a)}
}

// awaitsNoLonger: the settlement of a modification the provider received
// clears its receipt with its final status.
var awaitsNoLonger = subst{"SET status = @status, received_at = NULL,", "SET status = @status,"}

func copyOf(file string, own ...[]subst) clauseCopy {
	return clauseCopy{file: file, own: slices.Concat(own...)}
}

func one(s ...subst) []subst { return s }

var sharedClauses = []sharedClause{
	{"standing", []clauseCopy{
		copyOf("statements/charge_claim.sql"),
		copyOf("statements/charge_step_claim.sql"),
	}},
	{"matching_order", []clauseCopy{
		copyOf("statements/charge_claim.sql"),
		copyOf("statements/charge_step_claim.sql", one(stepGate)),
	}},
	{"payment_reserved", []clauseCopy{
		copyOf("statements/charge_claim.sql"),
		copyOf("statements/charge_step_claim.sql"),
	}},
	{"claimed", []clauseCopy{
		copyOf("statements/charge_claim.sql", gated(keyFree), ownColumn("payment_id"), one(command("charge"), previousCharge)),
		copyOf("statements/charge_step_claim.sql", one(stepGate), gated(keyFree), ownColumn("payment_id"), one(command("charge"), previousCharge)),
		copyOf("statements/refund_claim.sql", paymentLink, ownColumn("refund_id"), one(command("refund"))),
		copyOf("statements/capture_claim.sql", paymentLink, ownColumn("transition_id"), one(command("capture"))),
		copyOf("statements/void_claim.sql", paymentLink, ownColumn("transition_id"), one(command("void"))),
	}},
	{"goes_on_with", []clauseCopy{
		copyOf("statements/charge_claim.sql", goesOnWith("charged", "payment", "p")),
		copyOf("statements/charge_step_claim.sql", goesOnWith("charged", "payment", "p")),
		copyOf("statements/refund_claim.sql", goesOnWith("refund_row", "refund", "f")),
		copyOf("statements/capture_claim.sql", goesOnWith("transitioned", "payment_transition", "t")),
		copyOf("statements/void_claim.sql", goesOnWith("transitioned", "payment_transition", "t")),
	}},
	{"claim_answers", []clauseCopy{
		copyOf("statements/charge_claim.sql"),
		copyOf("statements/charge_step_claim.sql"),
		copyOf("statements/refund_claim.sql"),
		copyOf("statements/capture_claim.sql"),
		copyOf("statements/void_claim.sql"),
	}},
	{"usual_answer", []clauseCopy{
		copyOf("statements/charge_claim.sql", one(unlessStanding, alias("ch"))),
		copyOf("statements/charge_step_claim.sql", one(alias("ch"))),
		copyOf("statements/refund_claim.sql", one(alias("f"))),
		copyOf("statements/capture_claim.sql", one(alias("t"))),
		copyOf("statements/void_claim.sql", one(alias("t"))),
	}},
	{"payment_columns", []clauseCopy{
		// The charge's claim names the payment's id apart from the claim's
		// other answers; the others' first line starts the SELECT.
		copyOf("statements/charge_claim.sql", one(subst{"ch.id AS payment_id,", "ch.id,"}, alias("ch"))),
		copyOf("statements/charge_step_claim.sql", one(subst{"ch.id AS payment_id,", "ch.id,"}, alias("ch"))),
		copyOf("statements/payment_list_authorized.sql", one(subst{"SELECT p.id,", "p.id,"}, alias("p"))),
		copyOf("statements/payment_get.sql", one(subst{"SELECT p.id,", "p.id,"}, alias("p"))),
		copyOf("statements/payment_by_external.sql", one(subst{"SELECT p.id,", "p.id,"}, alias("p"))),
		copyOf("statements/payment_live_of_order.sql", one(subst{"SELECT p.id,", "p.id,"}, alias("p"))),
		copyOf("statements/charge_reserve.sql", one(alias("p"))),
		copyOf("statements/provider_event_charge.sql", one(subst{"SELECT p.id,", "p.id,"}, alias("p"))),
		copyOf("statements/provider_event_refund.sql", one(alias("p"))),
		copyOf("statements/provider_event_transition.sql", one(alias("p"))),
	}},
	{"standing_answers", []clauseCopy{
		copyOf("statements/charge_claim.sql"),
		copyOf("statements/charge_step_claim.sql"),
	}},
	{"completed", []clauseCopy{
		copyOf("statements/charge_record.sql", one(guard("EXISTS (SELECT 1 FROM payment WHERE id = @payment_id AND status = 'PENDING')"))),
		copyOf("statements/refund_record.sql", one(guard("EXISTS (SELECT 1 FROM refund_locked)"))),
		copyOf("statements/transition_record.sql", one(guard("EXISTS (SELECT 1 FROM transition_locked)"))),
		copyOf("statements/key_complete.sql", one(guard("true"))),
		copyOf("statements/transition_receive.sql", one(guard("EXISTS (SELECT 1 FROM transition_locked)"))),
		copyOf("statements/refund_receive.sql", one(guard("EXISTS (SELECT 1 FROM refund_locked)"))),
	}},
	{"announced", []clauseCopy{
		copyOf("statements/charge_record.sql", one(from("decided"))),
		copyOf("statements/refund_record.sql", one(from("settled"))),
		copyOf("statements/transition_record.sql", one(from("settled"))),
		copyOf("statements/payment_expire.sql", one(from("expired"))),
		copyOf("statements/transition_settle_received.sql", one(from("settled"))),
		copyOf("statements/refund_settle_received.sql", one(from("settled"))),
	}},
	{"replied", []clauseCopy{
		copyOf("statements/charge_record.sql", one(from("announced"))),
		copyOf("statements/refund_record.sql", one(from("announced"))),
		copyOf("statements/transition_record.sql", one(from("announced"))),
		copyOf("statements/key_complete.sql", one(from("completed"))),
		copyOf("statements/key_answer.sql", one(from("answered"))),
	}},
	{"lock_held", []clauseCopy{
		copyOf("statements/charge_record.sql", one(subst{") AS lock_held", ")"})),
		copyOf("statements/refund_record.sql", one(subst{") AS lock_held", ")"})),
		copyOf("statements/transition_record.sql", one(subst{") AS lock_held", ")"})),
		copyOf("statements/key_lock_still_held.sql", one(subst{"SELECT EXISTS", "EXISTS"})),
		copyOf("statements/transition_receive.sql", one(subst{") AS lock_held", ")"})),
		copyOf("statements/refund_receive.sql", one(subst{") AS lock_held", ")"})),
	}},
	{"released", []clauseCopy{
		copyOf("statements/charge_release.sql", one(guard("true"))),
		copyOf("statements/refund_release.sql", one(guard("EXISTS (SELECT 1 FROM refund_payment)"))),
		copyOf("statements/transition_release.sql", one(guard("EXISTS (SELECT 1 FROM transition_payment)"))),
	}},
	{"refund_reservation", []clauseCopy{
		copyOf("statements/refund_claim.sql"),
		copyOf("statements/refund_reserve.sql"),
	}},
	{"refund_payment_locked", []clauseCopy{
		copyOf("statements/refund_record.sql"),
		copyOf("testdata/refund_settle_alone.sql"),
		copyOf("testdata/refund_release_alone.sql"),
		copyOf("statements/refund_receive.sql"),
		copyOf("statements/refund_settle_received.sql"),
	}},
	{"refund_settled", []clauseCopy{
		copyOf("statements/refund_record.sql", one(guard("EXISTS (SELECT 1 FROM completed)"))),
		copyOf("testdata/refund_settle_alone.sql", one(guard("payment_id IN (SELECT id FROM refund_payment)"))),
		copyOf("statements/refund_settle_received.sql", one(awaitsNoLonger,
			guard("received_at IS NOT NULL AND payment_id IN (SELECT id FROM refund_payment)"))),
	}},
	{"transition_payment_locked", []clauseCopy{
		copyOf("statements/transition_record.sql"),
		copyOf("statements/transition_release.sql"),
		copyOf("statements/transition_receive.sql"),
		copyOf("statements/transition_settle_received.sql"),
	}},
	{"transition_settled", []clauseCopy{
		copyOf("statements/transition_record.sql", one(guard("EXISTS (SELECT 1 FROM completed)"))),
		copyOf("statements/transition_settle_received.sql", one(awaitsNoLonger,
			guard("received_at IS NOT NULL AND payment_id IN (SELECT id FROM transition_payment)"))),
	}},
	{"transition_claim", []clauseCopy{
		copyOf("statements/capture_claim.sql", one(command("capture"))),
		copyOf("statements/void_claim.sql", one(command("void"))),
	}},
	{"reported_claim", []clauseCopy{
		copyOf("statements/provider_event_charge.sql"),
		copyOf("statements/provider_event_refund.sql"),
		copyOf("statements/provider_event_transition.sql"),
	}},
}

func TestSharedClausesAreTheSame(t *testing.T) {
	t.Parallel()
	for _, p := range clauseProblems(statementTexts, sharedClauses) {
		t.Error(p)
	}
}

var clauseMarker = regexp.MustCompile(`^-- clause ([a-z_]+): (begin|end)$`)

// markedClauses are the clauses marked in a statement's text, by name.
func markedClauses(text string) (map[string]string, error) {
	clauses := map[string]string{}
	open := map[string]int{} // clause name -> its begin line
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		m := clauseMarker.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if m[2] == "begin" {
			if _, twice := clauses[name]; twice || open[name] != 0 {
				return nil, fmt.Errorf("clause %s begins twice", name)
			}
			open[name] = i + 1
			continue
		}
		begin, ok := open[name]
		if !ok {
			return nil, fmt.Errorf("clause %s ends where it did not begin", name)
		}
		delete(open, name)
		clauses[name] = strings.Join(lines[begin:i], "\n")
	}
	for name := range open {
		return nil, fmt.Errorf("clause %s does not end", name)
	}
	return clauses, nil
}

var (
	sqlLineComment = regexp.MustCompile(`--[^\n]*`)
	sqlSpaces      = regexp.MustCompile(`\s+`)
)

// clauseBody is a clause as PostgreSQL reads it: no comments, one space
// between words, and no comma after it.
func clauseBody(clause string) string {
	s := sqlSpaces.ReplaceAllString(sqlLineComment.ReplaceAllString(clause, ""), " ")
	return strings.TrimSuffix(strings.TrimSpace(s), ",")
}

// clauseProblems compares the copies of each clause, and finds marked
// clauses the list does not name.
func clauseProblems(texts map[string]string, clauses []sharedClause) []string {
	var problems []string
	marked := map[string]map[string]string{} // file -> clause -> text
	for file, text := range texts {
		m, err := markedClauses(text)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
		}
		marked[file] = m
	}
	listed := map[string]bool{}
	for _, c := range clauses {
		var first, firstFile string
		for _, cp := range c.copies {
			listed[cp.file+" "+c.name] = true
			text, ok := marked[cp.file][c.name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: no clause %s", cp.file, c.name))
				continue
			}
			body := clauseBody(text)
			if body == "" {
				problems = append(problems, fmt.Sprintf("%s: clause %s is empty", cp.file, c.name))
			}
			for _, s := range cp.own {
				if !strings.Contains(body, s.own) {
					problems = append(problems, fmt.Sprintf("%s: clause %s has no %q, a difference its copies may have", cp.file, c.name, s.own))
				}
				body = strings.ReplaceAll(body, s.own, s.common)
			}
			if firstFile == "" {
				first, firstFile = body, cp.file
				continue
			}
			if body != first {
				problems = append(problems, fmt.Sprintf("clause %s: %s's copy differs from %s's:\n\t%s\n\t%s", c.name, cp.file, firstFile, body, first))
			}
		}
	}
	var unlisted []string
	for file, m := range marked {
		for name := range m {
			if !listed[file+" "+name] {
				unlisted = append(unlisted, fmt.Sprintf("%s: clause %s is marked shared, and no test compares it", file, name))
			}
		}
	}
	sort.Strings(unlisted)
	return append(problems, unlisted...)
}

// The takeover's condition is one: the claim takes a record over under it
// (claimed's DO UPDATE ... WHERE), and a charge's claim reads a record
// that meets it as no record in its way (standing's stops).
func TestTakeoverConditionIsOne(t *testing.T) {
	t.Parallel()
	clauses, err := markedClauses(claimAndReserveSQL)
	if err != nil {
		t.Fatal(err)
	}
	standing := regexp.MustCompile(`NOT \((.*)\) AS stops`).FindStringSubmatch(clauseBody(clauses["standing"]))
	claimed := regexp.MustCompile(`DO UPDATE SET .* WHERE (.*) RETURNING`).FindStringSubmatch(clauseBody(clauses["claimed"]))
	if standing == nil || claimed == nil {
		t.Fatalf("the condition is not where it was: standing %q, claimed %q", standing, claimed)
	}
	// The record's columns are r.* in claimed; the claim's command and
	// hash are EXCLUDED's there, the literal and the parameter in standing.
	takeover := strings.NewReplacer("r.", "", "EXCLUDED.command_hash", "@hash", "EXCLUDED.command", "'charge'").Replace(claimed[1])
	if takeover != standing[1] {
		t.Fatalf("claimed takes a record over under\n\t%s\nstanding lets the claim go ahead under\n\t%s", takeover, standing[1])
	}
}

// The checks must be able to fail: a copy one character apart, a
// difference that no longer occurs, a marker with no end, and a marked
// clause no test compares are each found.
func TestSharedClauseCheckFindsADifference(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(string) string
		file   string
	}{
		{"a copy one character apart", func(s string) string {
			return strings.Replace(s, "locked_until = EXCLUDED.locked_until", "locked_until = EXCLUDED.locked_until + 0", 1)
		}, "statements/void_claim.sql"},
		{"a comparison's difference gone", func(s string) string {
			return strings.Replace(s, "@key, 'void', @hash", "@key, 'capture', @hash", 1)
		}, "statements/void_claim.sql"},
		{"a marker with no end", func(s string) string {
			return strings.Replace(s, "-- clause announced: end\n", "", 1)
		}, "statements/payment_expire.sql"},
		{"a clause no test compares", func(s string) string {
			return "-- clause unknown: begin\n" + s + "\n-- clause unknown: end\n"
		}, "statements/key_lookup.sql"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			texts := map[string]string{}
			for f, s := range statementTexts {
				texts[f] = s
			}
			changed := c.change(texts[c.file])
			if changed == texts[c.file] {
				t.Fatalf("the change does not apply to %s", c.file)
			}
			texts[c.file] = changed
			if len(clauseProblems(texts, sharedClauses)) == 0 {
				t.Fatalf("%s in %s is not found", c.name, c.file)
			}
		})
	}
}
