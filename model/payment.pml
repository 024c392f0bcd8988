/*
 * payment-service: the idempotency protocol of POST /payments, as a Promela
 * model for spin. docs/model.md explains the model, its bounds, the
 * properties, the mutants, and maps each step to the Go function and SQL
 * statement that implement it.
 *
 * What is modelled: ChargePayment (claim, takeover, resume, reserve with the
 * second and third layer, the provider call, record; for a call that brought
 * no decision: release, FAILED, the lookup by key, early lock release), the
 * completer of abandoned charges, the TTL purge, a provider that is
 * idempotent by its own key, whose answers can be lost, that may refuse
 * requests for good before it looks at their key, that answers a lookup
 * by key truthfully, and that refuses a request older than the bound B
 * (PROVIDER_MAX_REQUEST_AGE; a resumed refusal then waits for B before it
 * records FAILED), or, with PKIND, a provider without the bound or without
 * the lookup; replicas that crash at any step, and locks that expire
 * while their owner is slow or after it has gone. With WEBHOOK, the
 * provider's events (webhooks) applied by ApplyProviderEvent, a second
 * writer of phase 3. What the refund's model (model/refund.pml) shares with
 * this one, the record, its statements, the fault budget, the client and
 * the environment, is written once in model/core.pml and
 * model/core-processes.pml.
 *
 * A database transaction is one atomic step (d_step): it commits as a whole
 * or, on a crash or a rollback, leaves no trace. A crash between two steps
 * keeps what was committed and loses the process's local state.
 *
 * Build flags (spin -D...):
 *   SCEN=1..4      which requests run concurrently (see "Scenarios")
 *   MAXFAULTS=n    how many faults one run may contain (see "Fault budget")
 *   MAXATT=n       attempts per client without LIVENESS
 *   LIVENESS       clients retry until they get a final answer; the LTL
 *                  formula 'live' is checked with weak fairness (pan -a -f)
 *   WITNESS=n      stop at reachable event n (proves a check is not vacuous)
 *   SKIP_Pn        switch property Pn off (to show what a mutant breaks next)
 *   WEBHOOK        the provider also reports each decision in an event (a
 *                  webhook) delivered up to MAXHOOK times, which
 *                  ApplyProviderEvent applies: a second writer of phase 3
 *                  (see "The provider's events")
 *   PKIND=1..3     what the provider lets the outcome model learn: 1 a
 *                  lookup and a request bound (the sandbox, the default),
 *                  2 a lookup and no bound (Stripe), 3 no lookup (Adyen);
 *                  see "the provider's kind", model/core.pml
 * Mutants (each must produce a counterexample):
 *   NOFENCE        fenced writes do not compare lock_token, only the key and
 *                  status = 'IN_PROGRESS'
 *   FINDSAVE       the claim is find-then-save (a SELECT, then an upsert of
 *                  the whole row decided on what the SELECT saw) instead of
 *                  one INSERT ... ON CONFLICT DO UPDATE ... WHERE statement
 *   DELUNKNOWN     the earlier design that released the key on any provider
 *                  error: the key released and the PENDING payment deleted
 *                  ("nothing charged") even when the outcome is unknown
 *   NOORDERIDX     no partial UNIQUE (order_id) index (third layer)
 *   NOLEASE        a claim has no lease: its lock never expires by itself
 *                  (only the early release gives it back); breaks P5
 *   NOLOOKUP       a resumed payment refused for good is recorded FAILED
 *                  without looking the key up (the refusal taken as proof
 *                  that nothing was charged)
 *   BUSYASNONE     the lookup's "a request under this key is being
 *                  processed" taken as "no charge"
 *   NOSETTLE       the earlier rule that settled no refusal of a resumed
 *                  payment: it stays PENDING as unknown (no lookup); breaks
 *                  P5's liveness when every retry is refused
 *   NOWAIT         (with REFUSEONCE) the earlier rule for a resumed payment
 *                  refused for good: FAILED as soon as the lookup finds
 *                  nothing, without waiting until B has passed since the
 *                  attempt's claim; breaks P6, then P8
 *   HOOKNOFENCE    (with WEBHOOK) the event's record is not fenced by the
 *                  token of the claim it read: any IN_PROGRESS record of the
 *                  key is completed; breaks P4
 *   HOOKFINAL      (with WEBHOOK) the event is applied whatever the
 *                  payment's status (no agreed/contradiction check, no
 *                  fence, no PENDING condition); breaks P15, then P7
 *   HOOKNODEDUP    (with WEBHOOK) no processed_event: every delivery is
 *                  processed; breaks P14
 *   UNBOUNDGUESS   (with PKIND=2 and REFUSEONCE) a resumed refusal for good
 *                  settled as at a provider with a bound (the wait for B,
 *                  then FAILED on nothing found), at one that has none;
 *                  breaks P8
 *   NOTIFYGUESS    (with PKIND=3) a resumed refusal for good recorded FAILED,
 *                  since the provider cannot be asked; breaks P8
 * A weaker provider (the checks must pass with it too):
 *   REFUSEONCE     a refusal for good answers the refused request only; a
 *                  later request for E may be accepted (by default the
 *                  provider refuses every later request for E, as 0018
 *                  defines "for good"). FAILED after a resumed refusal then
 *                  rests on the bound B alone (see "the bound on a
 *                  request's age", model/core.pml)
 */

/* ------------------------------------------------------------ scenarios */

#ifndef SCEN
#define SCEN 1
#endif

/* Client i (1..NCLI) sends the command (key CMD_K, external payment CMD_E,
 * amount CMD_A), always for order O. The command hash is (E, amount). */
#if SCEN == 1
/* one key: the same request twice */
#define NCLI 2
#define CMD_K(i) 0
#define CMD_E(i) 0
#define CMD_A(i) 1
#elif SCEN == 2
/* one order: a second key with a second external payment (a client that
 * makes a new payment intent per attempt) */
#define NCLI 2
#define CMD_K(i) ((i) - 1)
#define CMD_E(i) ((i) - 1)
#define CMD_A(i) 1
#elif SCEN == 3
/* one external payment under three keys, the third with another amount */
#define NCLI 3
#define CMD_K(i) ((i) - 1)
#define CMD_E(i) 0
#define CMD_A(i) ((i) == 3 -> 2 : 1)
#elif SCEN == 4
/* one key, two commands: the second reuses the key for another payment */
#define NCLI 2
#define CMD_K(i) 0
#define CMD_E(i) ((i) - 1)
#define CMD_A(i) 1
#else
#error "SCEN must be 1, 2, 3 or 4"
#endif

#define TOK_COMPLETER (NCLI + 1)   /* lock token of the completer's attempts */
#define NTOK (NCLI + 2)            /* tokens 1..NCLI+1; 0 = NULL */
#define NKEY 3                     /* idempotency keys K0..K2 of one API client */
#define NEXT 2                     /* external payments E0, E1 (one provider) */
#define HASH(e, a) ((e) * 2 + (a))

/* The core both models share: the fault budget, the record and its
 * statements, the attempts (model/core.pml). */
#define RECOVERY payid             /* the record's recovery point: payment_id */
#include "core.pml"

/* ------------------------------------------------------------ constants */

/* the provider's ledger, per provider idempotency key provider:E */
#define P_NONE     0
#define P_RUNNING  1   /* accepted, being processed */
#define P_CHARGED  2
#define P_DECLINED 3
/* answers to the client: final ones ... */
#define A_NONE     0
#define A_201      1   /* charged */
#define A_402      2   /* declined */
#define A_200      3   /* the external payment is already recorded as this charge */
#define A_409X     4   /* external-payment-conflict */
#define A_409O     5   /* order-already-paid */
#define A_409K     6   /* idempotency-key-reused (final for this command, not stored) */
#define A_402F     7   /* payment-failed: refused for good, nothing charged */
/* ... retryable ones ... */
#define A_409P     8   /* request-in-progress */
#define A_503N     9   /* provider unavailable, nothing was charged */
#define A_503U     10  /* outcome unknown */
#define A_CRASH    11  /* the connection dropped: the replica crashed */
/* ... and one that must never be given */
#define A_500      12
#define FINAL(x)   ((x) >= A_201 && (x) <= A_402F)

/* ---------------------------------------------------------------- state */

typedef Pay {
	byte st;       /* NONE, PENDING, SUCCEEDED, DECLINED, FAILED */
	byte amt
};

Pay  pay[NEXT];    /* payment, one row per UNIQUE (provider, external id) */
byte prov[NEXT];   /* provider ledger, per provider key */
byte pamt[NEXT];   /* the amount the provider charged (or was asked for) */
byte ev[NEXT];     /* outbox events written per payment */
bool refusing[NEXT]; /* the provider refuses every request for E, for good */

/* ----------------------------------------------------------- properties */

/* P1: at most one charge per business operation. The provider's ledger
 * charges a provider key at most once by construction (it is idempotent), so
 * this is checked per order: every E here is a payment of order O. */
#ifndef SKIP_P1
#define P1(cond) PROP("VIOLATED P1 at most one charge per order\n", cond)
#else
#define P1(cond) skip
#endif
/* P2: once the system is quiet, every charge the provider made has its
 * payment row, SUCCEEDED with the charged amount and one event; every FAILED
 * payment has one event and no charge; nothing is left PENDING or
 * IN_PROGRESS. */
#ifndef SKIP_P2
#define P2(cond) PROP("VIOLATED P2 no lost charge once quiet\n", cond)
#else
#define P2(cond) skip
#endif
/* P3: a COMPLETED record never changes (the TTL purge may delete it). */
#ifndef SKIP_P3
#define P3(k) PROP("VIOLATED P3 a COMPLETED record never changes\n", rec[k].st != COMPLETED)
#else
#define P3(k) skip
#endif
/* P4: every fenced write (complete, release, early release) comes from the
 * attempt that made the key's latest claim: a late owner never overwrites
 * the new owner's claim or outcome. */
#ifndef SKIP_P4
#define P4(k, me) PROP("VIOLATED P4 no write by an owner whose claim was taken over\n", holder[k] == (me))
#else
#define P4(k, me) skip
#endif
/* P6: every answer is true when it is given: 201/200 = the provider charged
 * this E with this amount, 402 = declined, 402 payment-failed = the provider
 * has no charge for E and is not processing a request for it, 409
 * order-already-paid = the provider charged the order's other payment, 503
 * "nothing was charged" = the provider has not charged E and is not
 * processing a request for it. */
#ifndef SKIP_P6
#define P6(cond) PROP("VIOLATED P6 every answer is true\n", cond)
#else
#define P6(cond) skip
#endif
/* P7: one outbox event per payment outcome. */
#ifndef SKIP_P7
#define P7(cond) PROP("VIOLATED P7 one event per payment outcome\n", cond)
#else
#define P7(cond) skip
#endif
/* P8: a FAILED payment's provider key holds no charge, ever: none when the
 * payment is recorded FAILED, and the provider never charges it later. */
#ifndef SKIP_P8
#define P8(cond) PROP("VIOLATED P8 a FAILED payment's key is never charged\n", cond)
#else
#define P8(cond) skip
#endif
/* P14: a provider's event is processed at most once, however often it is
 * delivered: every later delivery is a duplicate (processed_event). */
#ifndef SKIP_P14
#define P14(cond) PROP("VIOLATED P14 an event is processed at most once\n", cond)
#else
#define P14(cond) skip
#endif
/* P15: an event never changes a final payment, and never writes what
 * contradicts the payment: it records only a PENDING payment, with the
 * amount the provider decided on. */
#ifndef SKIP_P15
#define P15(cond) PROP("VIOLATED P15 an event records only a PENDING payment it agrees with\n", cond)
#else
#define P15(cond) skip
#endif
/* P5: every answer is the stored outcome, a final refusal (key reused) or
 * retryable (409 in-progress, 503, a dropped connection); never a 500, and no
 * attempt hangs (spin's invalid end states). Its liveness half is the LTL
 * formula at the end. */
#ifndef SKIP_P5
#define P5(cond) PROP("VIOLATED P5 every answer is a stored outcome or retryable\n", cond)
#else
#define P5(cond) skip
#endif

#define CHARGED_AS(e, a) P6(prov[e] == P_CHARGED && pamt[e] == (a))
#define NOTHING_CHARGED(e) P6(prov[e] != P_CHARGED && prov[e] != P_RUNNING)
#define RESP_TRUE(r, e, a) \
	if \
	:: (r) == A_201 || (r) == A_200 -> CHARGED_AS(e, a) \
	:: (r) == A_402 -> P6(prov[e] == P_DECLINED) \
	:: (r) == A_402F -> NOTHING_CHARGED(e) \
	:: (r) == A_409O -> P6(prov[OTHER(e)] == P_CHARGED) \
	:: else -> skip \
	fi

/* --------------------------------------------------- database statements */

#define OTHER(e) (1 - (e))

/* Third layer: partial UNIQUE (order_id) WHERE status IN ('PENDING', 'SUCCEEDED'). */
#ifndef NOORDERIDX
#define ORDER_BUSY(e) (pay[OTHER(e)].st == PENDING || pay[OTHER(e)].st == SUCCEEDED)
#else
#define ORDER_BUSY(e) false
#endif

/* The charge's check before a claim's write (model/core.pml). */
#define CLAIM_CHECK(k) P3(k)

/* The lookup by key (LookupCharge) after a resumed payment's refusal: what
 * the provider holds under E's key, told truthfully; the answer can be
 * lost. The lookup's step, and what nothing under the key settles, are
 * the core's (LOOK_UP, model/core.pml). */
#ifndef BUSYASNONE
#define LOOKUP_BUSY(e) (prov[e] == P_RUNNING)
#define LOOKUP_NONE(e) (prov[e] == P_NONE)
#else
#define LOOKUP_BUSY(e) false
#define LOOKUP_NONE(e) (prov[e] == P_NONE || prov[e] == P_RUNNING)
#endif
#define LOOKUP_FINDS(e, me, seen) \
	:: MAY(lost, MAXLOST) -> \
		FAULT(lost); reply = R_UNKNOWN; \
		printf("T%d <- provider E%d: the lookup's answer is lost (unknown)\n", me, e) \
	:: prov[e] == P_CHARGED -> \
		reply = R_APPROVED; SEEN(seen); \
		printf("T%d <- provider E%d: looked up: charged\n", me, e) \
	:: prov[e] == P_DECLINED -> \
		reply = R_DECLINED; SEEN(seen); \
		printf("T%d <- provider E%d: looked up: declined\n", me, e) \
	:: LOOKUP_BUSY(e) -> \
		reply = R_UNKNOWN; SEEN(20); \
		printf("T%d <- provider E%d: looked up: being processed (unknown)\n", me, e)
#define LOOKUP_SAYS_NONE(e, me) printf("T%d <- provider E%d: looked up: no charge\n", me, e)
/* the witnesses of the lookup: it finds a decision; nothing, FAILED; after
 * the wait it finds a decision (the late request's); nothing, FAILED; the
 * lock ends before B has passed */
#define W_LOOKUP_FOUND  18
#define W_LOOKUP_FAILED 19
#define W_WAITED_FOUND  28
#define W_WAITED_FAILED 29
#define W_CANNOT_WAIT   30
/* ... and at the other kinds of provider: nothing found after a refusal
 * for good kept unknown (no bound); a resumed refusal for good kept unknown
 * without a lookup (cannot be asked) */
#define W_NOTHING_KEPT  31
#define W_NOT_ASKED     32

/* ------------------------------------------------------- ChargePayment */

/*
 * ChargePayment.Handle for the command (k, e, a), made by the attempt whose
 * lock token is me. Leaves the answer in ans. Uses the caller's locals
 * declared by CHARGE_LOCALS.
 */
inline charge(k, e, a, me)
{
#ifdef FINDSAVE
	/* find: a plain SELECT, no lock; others may commit before the save */
	d_step {
		s_st = rec[k].st; s_hash = rec[k].hash; s_exp = rec[k].exp;
		s_pid = rec[k].payid; s_resp = rec[k].resp;
		printf("T%d K%d: find sees status %d (0 none, 1 IN_PROGRESS, 2 COMPLETED)\n", me, k, s_st)
	};
#endif
	/* Phase 1: one transaction. */
	d_step {
		/* a. claim */
#ifndef FINDSAVE
		if
		:: rec[k].st == NONE ->
			claimed = 1; tpid = 0
		:: rec[k].st == INPROG && rec[k].exp && rec[k].hash == HASH(e, a) ->
			claimed = 1; tpid = rec[k].payid
		:: else ->
			claimed = 0; rst = rec[k].st; rhash = rec[k].hash; rresp = rec[k].resp
		fi;
#else
		/* save: decided on what the find saw, written over whatever is there */
		if
		:: s_st == NONE ->
			claimed = 1; tpid = 0
		:: s_st == INPROG && s_exp && s_hash == HASH(e, a) ->
			claimed = 1; tpid = s_pid
		:: else ->
			claimed = 0; rst = s_st; rhash = s_hash; rresp = s_resp
		fi;
#endif
		if
		:: !claimed ->
			/* not claimed: answer from the existing record */
			if
			:: rhash != HASH(e, a) ->
				ans = A_409K;
				printf("T%d K%d: not claimed, another command: 409 key-reused\n", me, k)
			:: rhash == HASH(e, a) && rst == COMPLETED ->
				ans = rresp; RESP_TRUE(rresp, e, a); SEEN(6);
				printf("T%d K%d: not claimed, COMPLETED: replays answer %d\n", me, k, rresp)
			:: else ->
				ans = A_409P;
				printf("T%d K%d: not claimed, IN_PROGRESS: 409 in-progress\n", me, k)
			fi
		:: claimed && tpid != 0 ->
			/* b. takeover of a claim with a recovery point */
			assert(tpid == e + 1);       /* the hash names the payment */
			if
			:: pay[e].st == NONE ->
				/* FOREIGN KEY payment_id rejects the write: the transaction fails */
				ans = A_500;
				printf("T%d K%d: claim names deleted payment E%d: foreign key violation, 500\n", me, k, e)
			:: pay[e].st != NONE ->
				CLAIM_WRITE(k, me, HASH(e, a), tpid)
			fi;
			if
			:: pay[e].st == NONE -> skip
			:: pay[e].st == PENDING ->
				go = 1; resumed = 1; SEEN(1);
				printf("T%d K%d: takes the expired claim over, resumes PENDING E%d\n", me, k, e)
			:: pay[e].st == SUCCEEDED ->
				/* repair path: record the provider's answer, no event */
				COMPLETE_WRITE(k, A_201); ans = A_201; CHARGED_AS(e, a); SEEN(15);
				printf("T%d K%d: takeover finds E%d SUCCEEDED: completes 201\n", me, k, e)
			:: pay[e].st == DECLINED ->
				COMPLETE_WRITE(k, A_402); ans = A_402; P6(prov[e] == P_DECLINED); SEEN(15);
				printf("T%d K%d: takeover finds E%d DECLINED: completes 402\n", me, k, e)
			:: pay[e].st == FAILED ->
				COMPLETE_WRITE(k, A_402F); ans = A_402F; NOTHING_CHARGED(e); SEEN(15);
				printf("T%d K%d: takeover finds E%d FAILED: completes 402 payment-failed\n", me, k, e)
			fi
		:: claimed && tpid == 0 ->
			/* c. the order check passes: order O exists and matches */
			/* d. reserve: INSERT payment PENDING ... ON CONFLICT DO NOTHING */
			if
			:: pay[e].st == NONE && !ORDER_BUSY(e) ->
				CLAIM_WRITE(k, me, HASH(e, a), e + 1);   /* with the recovery point */
				pay[e].st = PENDING; pay[e].amt = a;
				go = 1;
				if
				:: pay[OTHER(e)].st == DECLINED -> SEEN(8)
				:: pay[OTHER(e)].st == FAILED -> SEEN(21)
				:: else -> skip
				fi;
				printf("T%d K%d: claims, reserves E%d PENDING amount %d\n", me, k, e, a)
			:: pay[e].st != NONE && pay[e].amt != a ->
				/* second layer: E is another charge */
				CLAIM_WRITE(k, me, HASH(e, a), 0); COMPLETE_WRITE(k, A_409X); ans = A_409X;
				SEEN(9);
				printf("T%d K%d: E%d is another charge: completes 409 external-payment-conflict\n", me, k, e)
			:: pay[e].st == PENDING && pay[e].amt == a ->
				ans = A_409P;                            /* roll back */
				printf("T%d K%d: E%d PENDING under another key: rolls back, 409 in-progress\n", me, k, e)
			:: pay[e].st == SUCCEEDED && pay[e].amt == a ->
				CLAIM_WRITE(k, me, HASH(e, a), 0); COMPLETE_WRITE(k, A_200); ans = A_200;
				CHARGED_AS(e, a); SEEN(10);
				printf("T%d K%d: E%d SUCCEEDED, same charge: completes 200\n", me, k, e)
			:: pay[e].st == DECLINED && pay[e].amt == a ->
				CLAIM_WRITE(k, me, HASH(e, a), 0); COMPLETE_WRITE(k, A_402); ans = A_402;
				P6(prov[e] == P_DECLINED);
				printf("T%d K%d: E%d DECLINED, same charge: completes 402\n", me, k, e)
			:: pay[e].st == FAILED && pay[e].amt == a ->
				CLAIM_WRITE(k, me, HASH(e, a), 0); COMPLETE_WRITE(k, A_402F); ans = A_402F;
				NOTHING_CHARGED(e);
				printf("T%d K%d: E%d FAILED, same charge: completes 402 payment-failed\n", me, k, e)
			:: pay[e].st == NONE && ORDER_BUSY(e) && pay[OTHER(e)].st == SUCCEEDED ->
				/* third layer: the order is paid under another external payment */
				CLAIM_WRITE(k, me, HASH(e, a), 0); COMPLETE_WRITE(k, A_409O); ans = A_409O;
				P6(prov[OTHER(e)] == P_CHARGED); SEEN(7);
				printf("T%d K%d: order paid with E%d: completes 409 order-already-paid\n", me, k, OTHER(e))
			:: pay[e].st == NONE && ORDER_BUSY(e) && pay[OTHER(e)].st == PENDING ->
				ans = A_409P;                            /* roll back */
				printf("T%d K%d: order has PENDING E%d: rolls back, 409 in-progress\n", me, k, OTHER(e))
			fi
		fi;
		CALL_PENDING(k, me, go)
	};
	if
	:: go ->
		/* Phase 2: the provider, key provider:E, outside any transaction.
		 * A refusal comes before the provider looks at the key: it answers
		 * this request only, whatever the key holds. */
		atomic {
			if
			:: TOO_OLD(k, me) ->
				/* this attempt's claim was taken over, and B has passed
				 * since (now, if not before): its request is older than B
				 * when it reaches the provider */
				window[k] = 0; reply = R_DNC; SEEN(27);
				printf("T%d -> provider E%d: too old (B passed since K%d's takeover): refused, not charged\n", me, e, k)
			:: ON_TIME(k, me) && refusing[e] ->
				reply = R_REFUSED;
				printf("T%d -> provider E%d: refused for good\n", me, e)
#ifndef REFUSEONCE
			:: ON_TIME(k, me) && !refusing[e] && MAY(refusals, MAXREFUSE) ->
				FAULT(refusals); refusing[e] = 1; reply = R_REFUSED;
				printf("T%d -> provider E%d: refused for good (and every request for E%d from now on)\n", me, e, e)
#else
			:: ON_TIME(k, me) && MAY(refusals, MAXREFUSE) ->
				FAULT(refusals); reply = R_REFUSED;
				printf("T%d -> provider E%d: refused (this request only)\n", me, e)
#endif
			:: ON_TIME(k, me) && !refusing[e] && MAY(dnc, MAXDNC) ->
				FAULT(dnc); reply = R_DNC;   /* refused for now, or never sent */
				printf("T%d -> provider E%d: not charged, for now\n", me, e)
			:: ON_TIME(k, me) && !refusing[e] && prov[e] == P_RUNNING ->
				reply = R_UNKNOWN;           /* "a request with this key is in progress" */
				printf("T%d -> provider E%d: refused, in progress (unknown)\n", me, e)
			:: ON_TIME(k, me) && !refusing[e] && prov[e] == P_NONE ->
				prov[e] = P_RUNNING; pamt[e] = a; reply = R_WAIT;
				printf("T%d -> provider E%d amount %d: accepted\n", me, e, a)
			:: ON_TIME(k, me) && !refusing[e] && prov[e] == P_CHARGED ->
				reply = R_APPROVED;          /* the stored answer: nothing new charged */
				printf("T%d -> provider E%d: stored answer, approved\n", me, e)
			:: ON_TIME(k, me) && !refusing[e] && prov[e] == P_DECLINED ->
				reply = R_DECLINED;
				printf("T%d -> provider E%d: stored answer, declined\n", me, e)
			fi;
			CALL_MADE(k, me, resumed)
		};
		atomic {
			(reply != R_WAIT || prov[e] != P_RUNNING);
			if
			:: reply == R_WAIT && prov[e] == P_CHARGED -> reply = R_APPROVED
			:: reply == R_WAIT && prov[e] == P_DECLINED -> reply = R_DECLINED
			:: else -> skip
			fi;
			/* the answer can be lost on its way back */
			if
			:: (reply == R_APPROVED || reply == R_DECLINED) && MAY(lost, MAXLOST) ->
				FAULT(lost); reply = R_UNKNOWN;
				printf("T%d <- provider E%d: the answer is lost (unknown)\n", me, e)
			:: true -> skip
			fi;
			/* The settlement (Settle): a refusal of a payment this attempt reserved
			 * is the whole truth (no earlier request used the key); a
			 * resumed payment's refusal is settled by the provider's record
			 * under the key, looked up now (the lookup reads only the
			 * provider's ledger, so it is one step with the answer) */
			if
#ifndef NOLOOKUP
			:: reply == R_REFUSED && !resumed ->
#else
			:: reply == R_REFUSED ->     /* the refusal taken as proof */
#endif
				reply = R_FAIL
#ifndef NOSETTLE
			:: (reply == R_REFUSED || reply == R_DNC) && resumed ->
				LOOK_UP(k, e, me)
#endif
			:: else -> skip
			fi;
			CALL_SETTLED_STEP(k, me)
		};
		if
		:: reply == R_APPROVED || reply == R_DECLINED || reply == R_FAIL ->
			/* Phase 3: one transaction, or one that fails and changes nothing */
			if
			:: atomic {
				MAY(dbfail, MAXDBFAIL) -> FAULT(dbfail); ans = A_503U; SEEN(13);
				printf("T%d K%d: phase 3 fails (database down): 503 outcome-unknown\n", me, k)
			   }
			:: d_step {
				if
				:: OWNED(k, me) ->
					P4(k, me);
					if
					:: pay[e].st == PENDING ->
						P3(k);
						if
						:: reply == R_APPROVED ->
							pay[e].st = SUCCEEDED; COMPLETE_WRITE(k, A_201); ans = A_201;
							if
							:: pamt[e] != pay[e].amt -> SEEN(16)   /* recorded for an amount never charged */
							:: else -> skip
							fi;
							CHARGED_AS(e, pay[e].amt)
						:: reply == R_DECLINED ->
							pay[e].st = DECLINED; COMPLETE_WRITE(k, A_402); ans = A_402;
							P6(prov[e] == P_DECLINED)
						:: reply == R_FAIL ->
							pay[e].st = FAILED; COMPLETE_WRITE(k, A_402F); ans = A_402F;
							P8(prov[e] != P_CHARGED);
							NOTHING_CHARGED(e);
							if
							:: resumed -> skip
							:: else -> SEEN(17)
							fi
						fi;
						ev[e]++;
						P7(ev[e] == 1);
						if
						:: me == TOK_COMPLETER -> SEEN(2)
						:: else -> skip
						fi;
						printf("T%d K%d: phase 3 records E%d, completes %d, writes the event\n", me, k, e, ans)
					:: else ->
						ans = A_500;         /* SetStatus: "not PENDING", the transaction fails */
						printf("T%d K%d: phase 3 finds E%d not PENDING: 500\n", me, k, e)
					fi
				:: else ->
					/* lock lost: the key is looked up (IdempotentCommand.Handle
					 * on ErrLockLost, right after; docs/model.md). A COMPLETED
					 * record of this command is this request's answer too: a
					 * provider's event recorded the decision under this claim
					 * first, or a new owner recorded it. */
					SEEN(3);
					if
					:: rec[k].st == COMPLETED && rec[k].hash == HASH(e, a) ->
						ans = rec[k].resp; RESP_TRUE(ans, e, a);
						if
						:: holder[k] == me -> SEEN(23)   /* still our claim: the event recorded it */
						:: else -> skip
						fi;
						printf("T%d K%d: phase 3 fenced out, the key is COMPLETED: answers %d\n", me, k, ans)
					:: else ->
						ans = A_409P;
						printf("T%d K%d: phase 3 fenced out (lock lost): 409 in-progress\n", me, k)
					fi
				fi
			   }
			fi
#ifndef DELUNKNOWN
		:: reply == R_DNC && !resumed ->
#else
		:: else ->
#endif
			/* release: nothing was charged; give the key back */
			d_step {
				if
				:: OWNED(k, me) ->
					P4(k, me);
					DELETE_RECORD(k);
					if
					:: pay[e].st == PENDING -> pay[e].st = NONE; pay[e].amt = 0
					:: else -> skip
					fi;
					ans = A_503N;
					P6(prov[e] == P_NONE || prov[e] == P_DECLINED); SEEN(4);
					printf("T%d K%d: releases the key and deletes PENDING E%d: 503 nothing charged\n", me, k, e)
				:: else ->
					ans = A_409P;            /* lock lost: the new owner holds it */
					SEEN(14);
					printf("T%d K%d: release fenced out (lock lost): 409 in-progress\n", me, k)
				fi
			}
#ifndef DELUNKNOWN
		:: else ->
			/* unknown, or a resumed payment's refusal that the lookup did
			 * not settle (an earlier attempt may have charged, or the key's
			 * request is still processed): delete nothing, give the lock
			 * back early */
			d_step {
				if
				:: OWNED(k, me) -> P4(k, me); rec[k].exp = 1; SEEN(5)
				:: else -> skip
				fi;
				ans = A_503U;
				printf("T%d K%d: keeps the claim, releases the lock early: 503 outcome-unknown\n", me, k)
			}
#endif
		fi
	:: else -> skip
	fi
}

#ifdef FINDSAVE
#define CHARGE_LOCALS \
	bit claimed, resumed, go; byte tpid, rhash, rst, rresp, reply; \
	byte s_st, s_hash, s_pid, s_resp; bit s_exp
#define RESET_FINDSAVE s_st = 0; s_hash = 0; s_pid = 0; s_resp = 0; s_exp = 0
#else
#define CHARGE_LOCALS \
	bit claimed, resumed, go; byte tpid, rhash, rst, rresp, reply
#define RESET_FINDSAVE skip
#endif
/* Forget an attempt's locals once it has ended, so that states that differ
 * only in dead values are one state. */
#define RESET_CHARGE \
	claimed = 0; resumed = 0; go = 0; tpid = 0; rhash = 0; rst = 0; rresp = 0; \
	reply = 0; RESET_FINDSAVE

/* ------------------------------------------------------------ processes */

/* CompleteAbandonedCharges on the elected replica: ListAbandoned picks an
 * IN_PROGRESS record whose lock expired (the grace is time, so it may race
 * with the client's own retry); then ReleaseAbandoned, or the command is
 * rebuilt from the payment row and run through ChargePayment like a client's
 * retry. It stops once the clients have stopped and no record is left
 * IN_PROGRESS. */
proctype Completer()
{
	byte k, e, a, cpid, chash, ans;
	CHARGE_LOCALS;

	do
	:: atomic {
		ABANDONED(0) || ABANDONED(1) || ABANDONED(2) ->
		if
		:: ABANDONED(0) -> k = 0
		:: ABANDONED(1) -> k = 1
		:: ABANDONED(2) -> k = 2
		fi;
		cpid = rec[k].payid; chash = rec[k].hash;
		printf("T%d (completer): K%d is abandoned\n", TOK_COMPLETER, k)
	   };
		ATTEMPT_STARTS(TOK_COMPLETER);
		{
			if
			:: cpid == 0 ->
				/* ReleaseAbandoned: the conditions are re-checked in the DELETE */
				d_step {
					if
					:: rec[k].st == INPROG && rec[k].exp && rec[k].payid == 0 ->
						DELETE_RECORD(k); SEEN(12);
						printf("T%d (completer): deletes K%d (no payment)\n", TOK_COMPLETER, k)
					:: else -> skip
					fi
				}
			:: cpid != 0 ->
				/* Payments.Get: rebuild the command from the payment row */
				d_step {
					e = cpid - 1;
					if
					:: pay[e].st != NONE -> a = pay[e].amt
					:: else -> a = 0              /* gone: Failed, left for the next run */
					fi
				};
				if
				:: a != 0 && HASH(e, a) == chash -> charge(k, e, a, TOK_COMPLETER)
				:: else -> skip
				fi
			fi;
			d_step { ATTEMPT_ENDS(k, TOK_COMPLETER) }
		} unless {
			atomic {
				kill[TOK_COMPLETER] -> kill[TOK_COMPLETER] = 0; ATTEMPT_ENDS(k, TOK_COMPLETER);
				printf("T%d (completer): dies with its replica\n", TOK_COMPLETER)
			}
		};
		d_step {
			P5(ans != A_500);
			RESET_CHARGE; k = 0; e = 0; a = 0; cpid = 0; chash = 0; ans = 0
		}
	:: atomic {
		clients_done == NCLI && rec[0].st != INPROG && rec[1].st != INPROG &&
		rec[2].st != INPROG -> break
	   }
	od;
	completer_done = 1
}

/* The provider decides each request it accepted, whether or not the caller
 * still waits for the answer. */
active proctype Provider()
{
	byte e;
end:
	do
	:: atomic {
		prov[0] == P_RUNNING || prov[1] == P_RUNNING ->
		if
		:: prov[0] == P_RUNNING -> e = 0
		:: prov[1] == P_RUNNING -> e = 1
		fi;
		if
		:: prov[e] = P_CHARGED;
			printf("provider: CHARGES E%d amount %d\n", e, pamt[e]);
			P1(prov[OTHER(e)] != P_CHARGED);
			P8(pay[e].st != FAILED)
		:: prov[e] = P_DECLINED;
			printf("provider: declines E%d\n", e)
		fi;
		e = 0
	   }
	od
}

#ifdef WEBHOOK
/* ------------------------------------------------- the provider's events */

/* The provider reports each decision it made (charged or declined; a
 * refusal is not a decision) once more, in an event delivered at least
 * once: here zero to MAXHOOK times (zero: lost), at any time after the
 * decision, in any order with the other payment's event, before or after
 * the call's answer, the completer or a retry recorded it. One event per
 * decision, so one event id per E; the event carries the decision and the
 * amount the provider decided on (pamt). */
#ifndef MAXHOOK
#define MAXHOOK 2      /* deliveries of each event */
#endif
#define REPORT_ATT 3   /* reportAttempts: reads of one delivery whose record was fenced out */
byte hooks[NEXT];      /* deliveries of E's event so far */
bool processed[NEXT];  /* processed_event holds E's event (consumer webhook:sandbox) */
byte hookact;          /* the delivery in progress: 0 none, 1 record next, 2 read again */
byte hookdone[NEXT];   /* ghost: deliveries of E's event that were processed */

#define DECIDED(e) (prov[e] == P_CHARGED || prov[e] == P_DECLINED)
#define EVENT_ST(e) (prov[e] == P_CHARGED -> SUCCEEDED : DECLINED)
#define EVENT_RESP(e) (prov[e] == P_CHARGED -> A_201 : A_402)
#define DELIVERABLE(e) (DECIDED(e) && hooks[e] < MAXHOOK)

#ifndef HOOKNODEDUP
#define DUPLICATE(e) processed[e]
#else
#define DUPLICATE(e) false
#endif
/* Which payment an event may record, and under which record: a PENDING one,
 * under the IN_PROGRESS record whose recovery point it is. */
#ifndef HOOKFINAL
#define HOOK_OPEN(e) (pay[e].st == PENDING)
#define HOOK_CLAIM(j, e) (rec[j].st == INPROG && rec[j].payid == (e) + 1)
#else
#define HOOK_OPEN(e) (pay[e].st != NONE)
#define HOOK_CLAIM(j, e) (rec[j].st != NONE && rec[j].payid == (e) + 1)
#endif
/* The fence of the event's record: phase 3's own statement with the token
 * of the claim the event read. A token here is its actor's, not its
 * attempt's (see docs/model.md), so the fence also names the payment: a
 * real token is one claim's, and a claim names its payment for its whole
 * life. The same actor's later claim of the same payment is matched: the
 * code reads it again (ErrLockLost) and records under it, as here. */
#if defined(HOOKFINAL)
#define HOOK_OWNED(k, t, e) (rec[k].payid == (e) + 1)
#elif defined(HOOKNOFENCE)
#define HOOK_OWNED(k, t, e) (rec[k].st == INPROG)
#else
#define HOOK_OWNED(k, t, e) (rec[k].st == INPROG && rec[k].tok == (t) && rec[k].payid == (e) + 1)
#endif

/* The delivery was processed: processed_event commits with what it did. */
#define HOOK_PROCESSED(e) \
	processed[e] = 1; hookdone[e]++; P14(hookdone[e] <= 1)
#define HOOK_ENDS hookact = 0; e = 0; k = 0; t = 0; n = 0

/* ApplyProviderEvent.Handle, the reading half of its transaction: the
 * processed_event check, then applyReported's reads (no row lock). */
#define HOOK_READ \
	if \
	:: DUPLICATE(e) -> \
		SEEN(24); printf("webhook: E%d's event again: a duplicate, nothing changes\n", e); HOOK_ENDS \
	:: !DUPLICATE(e) && pay[e].st == NONE -> \
		printf("webhook: no payment E%d: 404, nothing stored\n", e); HOOK_ENDS \
	:: !DUPLICATE(e) && pay[e].st != NONE && pay[e].amt != pamt[e] -> \
		HOOK_PROCESSED(e); \
		printf("webhook: E%d's event contradicts its amount: kept, nothing changes\n", e); HOOK_ENDS \
	:: !DUPLICATE(e) && pay[e].st != NONE && pay[e].amt == pamt[e] && !HOOK_OPEN(e) -> \
		HOOK_PROCESSED(e); \
		if \
		:: pay[e].st == EVENT_ST(e) -> SEEN(26); printf("webhook: E%d is final and agrees\n", e) \
		:: else -> printf("webhook: E%d is final and contradicts: kept, nothing changes\n", e) \
		fi; \
		HOOK_ENDS \
	:: !DUPLICATE(e) && pay[e].st != NONE && pay[e].amt == pamt[e] && HOOK_OPEN(e) -> \
		if \
		:: HOOK_CLAIM(0, e) -> k = 0 \
		:: HOOK_CLAIM(1, e) -> k = 1 \
		:: HOOK_CLAIM(2, e) -> k = 2 \
		:: else -> k = NKEY \
		fi; \
		if \
		:: k < NKEY -> t = rec[k].tok; hookact = 1; \
			printf("webhook: E%d to record (status %d), claimed by K%d under T%d\n", e, pay[e].st, k, t) \
		:: else -> printf("webhook: E%d PENDING without a claim: error, rolled back\n", e); HOOK_ENDS \
		fi \
	fi

/* ... and its writing half: phase 3's statement, fenced by the claim's
 * token; fenced out (ErrLockLost), it reads again, REPORT_ATT times in all,
 * then rolls back (ErrReportContended). */
#define HOOK_RECORD \
	if \
	:: HOOK_OWNED(k, t, e) -> \
		P15(pay[e].st == PENDING && pay[e].amt == pamt[e]); \
		P3(k); P4(k, t); \
		pay[e].st = EVENT_ST(e); COMPLETE_WRITE(k, EVENT_RESP(e)); \
		RESP_TRUE(rec[k].resp, e, pay[e].amt); \
		ev[e]++; P7(ev[e] == 1); \
		HOOK_PROCESSED(e); SEEN(22); \
		printf("webhook: records E%d under K%d, completes %d, writes the event\n", e, k, rec[k].resp); \
		HOOK_ENDS \
	:: else -> \
		n++; SEEN(25); \
		if \
		:: n < REPORT_ATT -> hookact = 2; printf("webhook: K%d's lock changed hands: reads E%d again\n", k, e) \
		:: else -> printf("webhook: E%d kept changing: rolled back\n", e); HOOK_ENDS \
		fi \
	fi

/* A webhook delivery, on any replica (a crash rolls its transaction back,
 * the same as a delivery that never came). Deliveries are one at a time: a
 * concurrent duplicate waits on processed_event's row and then finds it. */
active proctype Webhook()
{
	byte e, k, t, n;
end:
	do
	:: atomic {
		hookact == 0 && (DELIVERABLE(0) || DELIVERABLE(1)) ->
		if
		:: DELIVERABLE(0) -> e = 0
		:: DELIVERABLE(1) -> e = 1
		fi;
		hooks[e]++;
		printf("provider -> webhook: E%d %d (2 charged, 3 declined), delivery %d\n", e, prov[e], hooks[e]);
		HOOK_READ
	   }
	:: d_step { hookact == 1 -> HOOK_RECORD }
	:: d_step { hookact == 2 -> HOOK_READ }
	od
}
#define HOOK_IDLE (hookact == 0)
#else
#define HOOK_IDLE true
#endif

/* The processes the charge shares with the refund (model/core-processes.pml):
 * the client, running the charge, and the environment. The TTL purge's
 * target: a COMPLETED record, or an IN_PROGRESS one with an expired lock
 * and no payment. */
#define COMMAND(k, e, a, me) charge(k, e, a, me)
#define COMMAND_LOCALS CHARGE_LOCALS
#define RESET_COMMAND RESET_CHARGE
#define CMD_OBJ(i) CMD_E(i)
#define NOT_500(cond) P5(cond)
#define PURGEABLE(k) (rec[k].st == COMPLETED || (rec[k].st == INPROG && rec[k].exp && rec[k].payid == 0))
#define PURGE_SEEN(k) \
	if \
	:: rec[k].st == COMPLETED -> SEEN(11) \
	:: else -> skip \
	fi
#include "core-processes.pml"

/* P2, once the system is quiet: the clients have stopped, the completer has
 * nothing left, the provider has decided every request it accepted. */
#define QUIET(e) \
	P2(prov[e] != P_CHARGED || (pay[e].st == SUCCEEDED && pay[e].amt == pamt[e] && ev[e] == 1)); \
	P2(prov[e] != P_DECLINED || (pay[e].st == DECLINED && ev[e] == 1)); \
	P2(pay[e].st != SUCCEEDED || prov[e] == P_CHARGED); \
	P2(pay[e].st != FAILED || (prov[e] == P_NONE && ev[e] == 1)); \
	P2(pay[e].st != PENDING)

init {
	atomic {
		run Client(1); run Client(2);
#if NCLI == 3
		run Client(3);
#endif
		run Completer()
	};
	atomic {
		clients_done == NCLI && completer_done && HOOK_IDLE &&
		prov[0] != P_RUNNING && prov[1] != P_RUNNING ->
		QUIET(0); QUIET(1);
		P2(rec[0].st != INPROG && rec[1].st != INPROG && rec[2].st != INPROG)
	}
}

#ifdef LIVENESS
/* P5: a client that retries every retryable answer gets a final answer
 * (the stored outcome, or 409 key-reused for another command). */
ltl live { <> (nfinal == NCLI) }
#endif
